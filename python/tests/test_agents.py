"""What the package gives scripts, notebooks, CI and coding agents: ``memscape.doctor``,
``diff`` and ``check`` return the command line's JSON (from paths, bytes or the dict PyTorch
returns), and the agent skill ships in the wheel and equals the repository's.

Run by scripts/test in the test environment (target/python/test) after the wheel is installed.
"""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any

import memscape

# This folder's helper, whether unittest was started by discovery or on a file's path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CORPUS = corpus.DIR
A = CORPUS / "pt210-cs336-pyframes-usermeta.pickle"
B = CORPUS / "pt210-cs336-training-usermeta.pickle"


def cli(*args: str) -> Any:
    out = subprocess.run([str(memscape.binary()), *args], capture_output=True, text=True)
    return json.loads(out.stdout)


class Agents(unittest.TestCase):
    def test_doctor_and_diff_equal_the_command_line_from_paths_bytes_and_dicts(self) -> None:
        want = cli("doctor", "--json", str(A))
        self.assertEqual(memscape.doctor(A), want)
        self.assertEqual(memscape.doctor(A.read_bytes()), want)
        self.assertEqual(memscape.doctor(pickle.loads(A.read_bytes())), want)
        self.assertEqual(memscape.diff(A, B), cli("diff", "--json", str(A), str(B)))
        with self.assertRaises(memscape.MemscapeError):
            memscape.doctor(b"not a snapshot")

    def test_check_returns_the_outcome_whether_it_passes_or_fails(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            base, grown = Path(tmp) / "base.pickle", Path(tmp) / "grown.pickle"
            synth = [str(memscape.binary()), "synth", "--entries", "12000", "--layers", "6", "--seed", "5"]
            subprocess.run([*synth, "-o", str(base)], check=True, capture_output=True)
            subprocess.run([*synth, "--extra-activation", "400M", "-o", str(grown)], check=True, capture_output=True)
            failed = memscape.check(grown, baseline=base, max_growth=2, max={"optimizer_state": "1T"})
            self.assertFalse(failed["passed"])
            self.assertEqual([b["passed"] for b in failed["budgets"]], [False, True])
            self.assertEqual(failed["grown"][0]["site"], "model.py:230:Head.forward")
            self.assertTrue(memscape.check(base, baseline=base.read_bytes(), max_growth=0, max_peak="1T")["passed"])
            with self.assertRaises(memscape.MemscapeError):
                memscape.check(base, max_growth=2)  # no baseline: bad input, not an outcome

    def test_install_instructions_install_this_project_s_wheel(self) -> None:
        # No package of ours is on a registry: `pip install memscape` would install a stranger's.
        bare = re.compile(r"pip install (-\S+ )*memscape(?![-\w./*])")
        texts = [ROOT / "README.md", ROOT / "skills" / "memscape" / "SKILL.md", *sorted((ROOT / "docs").glob("*.md"))]
        for path in texts:
            for n, line in enumerate(path.read_text().splitlines(), 1):
                self.assertIsNone(bare.search(line), f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
        skill = (ROOT / "skills" / "memscape" / "SKILL.md").read_text()
        self.assertIn("scripts/wheel", skill.split("---")[1], "the skill's description says how to install it")
        self.assertIn("pip install target/wheels/memscape-", (ROOT / "README.md").read_text())

    def test_the_skill_is_in_the_wheel_and_equals_the_repository_s(self) -> None:
        text = (ROOT / "skills" / "memscape" / "SKILL.md").read_text()
        self.assertTrue(text.startswith("---\nname: memscape\ndescription: "))
        self.assertEqual(memscape.skill(), text)
        installed = Path(sys.prefix) / "share" / "memscape" / "skills" / "memscape" / "SKILL.md"
        self.assertEqual(installed.read_text(), text, installed)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([str(memscape.binary()), "skill", "--install", tmp], check=True, capture_output=True)
            self.assertEqual((Path(tmp) / "memscape" / "SKILL.md").read_text(), text)


if __name__ == "__main__":
    unittest.main()
