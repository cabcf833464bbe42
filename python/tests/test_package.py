"""The memscape Python package, as installed from the wheel: its functions against the real
program on the real corpus (PyTorch's own figures in its ``expected/``; see ``corpus.py``), and the
example notebook executed by nbclient.

Run by scripts/test in the test environment (target/python/test) after the wheel is installed:
``python -m unittest discover -s python/tests``.
"""

from __future__ import annotations

import base64
import gzip
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Dict, List, Optional

import memscape

# This folder's helper, whether unittest was started by discovery or on a file's path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cs336-fullstep.pickle"
# The bundled example is byte-for-byte this corpus file.
EXAMPLE_IN_CORPUS = "pt25-cs336-fullstep-annotations.pickle"


class Frame(HTMLParser):
    """The attributes of the first <iframe> (values unescaped, as a browser reads them)."""

    def __init__(self) -> None:
        super().__init__()
        self.attrs: Optional[Dict[str, Optional[str]]] = None

    def handle_starttag(self, tag: str, attrs: List[Any]) -> None:
        if tag == "iframe" and self.attrs is None:
            self.attrs = dict(attrs)


def frame_of(html_text: str) -> Dict[str, Optional[str]]:
    p = Frame()
    p.feed(html_text)
    assert p.attrs is not None, html_text[:200]
    return p.attrs


def embedded_snapshot(page: str) -> bytes:
    """The snapshot bytes the offline page carries (gzipped, base64, in a script element)."""
    marker = 'id="memscape-snapshot"'
    at = page.index(marker)
    start = page.index(">", at) + 1
    end = page.index("</script>", start)
    return gzip.decompress(base64.b64decode(page[start:end].strip()))


class Binary(unittest.TestCase):
    def test_the_package_runs_the_program_its_wheel_installed(self) -> None:
        exe = memscape.binary()
        self.assertEqual(exe.parent, Path(sys.prefix).resolve() / "bin", exe)
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), f"memscape {memscape.__version__}")


class Stats(unittest.TestCase):
    def test_stats_of_a_path_equals_pytorch_figures_for_every_corpus_file(self) -> None:
        for path in corpus.files():
            with self.subTest(path.name):
                s = memscape.stats(path)
                segsum = corpus.expected(path.name)["segsum"]
                for k in ("segments", "total_reserved", "total_allocated", "free_internal", "free_external"):
                    self.assertEqual(s[k], segsum[k], k)
                viz = corpus.expected(path.name)["memoryviz"].get("devices") or {}
                for d in s["devices"]:
                    amt = (viz.get(str(d["device"])) or {}).get("active_memory_timeline")
                    if amt and d["trace_entries"]:
                        self.assertEqual(d["timeline"]["peak_bytes"], amt["max_at_time_peak"])
                        self.assertEqual(d["timeline"]["elements"], amt["elements"])

    def test_bytes_and_the_dict_pickle_load_gives_read_the_same_as_the_file(self) -> None:
        for path in corpus.files():
            if path.suffix == ".html":
                continue
            with self.subTest(path.name):
                from_file = memscape.stats(path)
                self.assertEqual(memscape.stats(path.read_bytes()), from_file)
                with open(path, "rb") as f:
                    snap = pickle.load(f)
                self.assertEqual(memscape.stats(snap), from_file)

    def test_bad_input_is_a_clear_error_naming_the_file(self) -> None:
        good = corpus.file("pt24-linear-tiny.pkl").read_bytes()
        with tempfile.TemporaryDirectory() as d:
            cut = Path(d) / "cut.pickle"
            cut.write_bytes(good[: len(good) // 2])
            with self.assertRaisesRegex(memscape.MemscapeError, r"cut\.pickle: .*at byte"):
                memscape.stats(cut)
            with self.assertRaisesRegex(memscape.MemscapeError, r"missing\.pickle: no such file"):
                memscape.show(Path(d) / "missing.pickle")
        with self.assertRaisesRegex(memscape.MemscapeError, r"<stdin>: .*at byte"):
            memscape.show(good[: len(good) // 2])
        with self.assertRaisesRegex(TypeError, "not int"):
            memscape.stats(42)  # type: ignore[arg-type]


    def test_a_file_named_like_an_option_or_stdin_is_read_as_a_file(self) -> None:
        tiny = corpus.file("pt24-linear-tiny.pkl")
        cwd = os.getcwd()
        with tempfile.TemporaryDirectory() as d:
            for name in ("-", "--json"):
                shutil.copy(tiny, Path(d) / name)
            os.chdir(d)
            try:
                self.assertEqual(memscape.stats("-"), memscape.stats(tiny))
                self.assertEqual(memscape.stats("--json"), memscape.stats(tiny))
            finally:
                os.chdir(cwd)


class Show(unittest.TestCase):
    def test_show_is_the_offline_page_in_a_sandboxed_srcdoc_frame(self) -> None:
        v = memscape.show(EXAMPLE, height=500)
        frame = frame_of(v._repr_html_())
        self.assertEqual(frame["srcdoc"], v.html)
        sandbox = (frame["sandbox"] or "").split()
        self.assertIn("allow-scripts", sandbox)
        self.assertNotIn("allow-same-origin", sandbox)
        self.assertIn("height:500px", frame["style"] or "")
        # The very page `memscape html` writes, with its policy: no connection at all.
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "page.html"
            subprocess.run([str(memscape.binary()), "html", str(EXAMPLE), "-o", str(out)], check=True, capture_output=True)
            self.assertEqual(v.html, out.read_text(encoding="utf-8"))
        self.assertIn("connect-src 'none'", v.html)
        self.assertNotIn("http://", v.html)
        self.assertNotIn("https://", v.html)
        self.assertEqual(embedded_snapshot(v.html), EXAMPLE.read_bytes())
        self.assertEqual(frame_of(memscape.show(EXAMPLE, height="80vh")._repr_html_())["style"], "width:100%;height:80vh;border:0")

    def test_a_dict_is_embedded_as_the_pickle_of_that_dict(self) -> None:
        with open(EXAMPLE, "rb") as f:
            snap = pickle.load(f)
        v = memscape.show(snap, name="mine.pickle")
        self.assertIn("mine.pickle", v.html)
        self.assertEqual(pickle.loads(embedded_snapshot(v.html)), snap)
        with tempfile.TemporaryDirectory() as d:
            saved = v.save(Path(d) / "saved.html")
            self.assertEqual(saved.read_text(encoding="utf-8"), v.html)

    def test_python_m_memscape_writes_the_page_and_opens_the_browser(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            seen = Path(d) / "url"
            browser = Path(d) / "browser"
            # A browser that notes what it was asked to open ($BROWSER is webbrowser's choice).
            browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {seen}\n')
            browser.chmod(0o755)
            env = dict(os.environ, BROWSER=str(browser))
            out = subprocess.run(
                [sys.executable, "-m", "memscape", str(EXAMPLE)], env=env, capture_output=True, text=True, check=True
            )
            page = Path(out.stdout.strip())
            try:
                self.assertEqual(seen.read_text(), page.as_uri())
                self.assertTrue(page.name.startswith("memscape-") and page.name.endswith("cs336-fullstep.pickle.html"))
                self.assertEqual(page.read_text(encoding="utf-8"), memscape.page(EXAMPLE))
            finally:
                page.unlink()
            bad = subprocess.run([sys.executable, "-m", "memscape", str(Path(d) / "nope.pickle")], env=env, capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("nope.pickle: no such file", bad.stderr)


class Record(unittest.TestCase):
    def test_without_torch_it_says_what_is_missing(self) -> None:
        with self.assertRaises(ImportError):
            import torch  # noqa: F401
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "run.pickle"
            with self.assertRaisesRegex(memscape.MemscapeError, "memscape.record needs PyTorch"):
                with memscape.record(path):
                    pass
            self.assertFalse(path.exists())
        with self.assertRaisesRegex(ValueError, "stacks is 'python' or 'all'"):
            memscape.record("x.pickle", stacks="cpp")


class Notebook(unittest.TestCase):
    def test_the_example_notebook_runs_in_a_kernel(self) -> None:
        import nbclient
        import nbformat

        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as home:
            shutil.copy(ROOT / "examples" / "notebook.ipynb", d)
            shutil.copy(EXAMPLE, d)
            nb = nbformat.read(Path(d) / "notebook.ipynb", as_version=4)
            # Only this environment's kernel: none of the user's Jupyter settings or kernels.
            jupyter = {k: str(Path(home) / k) for k in ("JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR")}
            with mock.patch.dict(os.environ, jupyter):
                client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": d}})
                client.execute()
        code = [c for c in nb.cells if c.cell_type == "code"]
        frames = []
        for cell in code[:2]:
            (out,) = cell.outputs
            self.assertEqual(out.output_type, "execute_result")
            frames.append(frame_of(out.data["text/html"]))
        self.assertEqual(embedded_snapshot(frames[0]["srcdoc"] or ""), EXAMPLE.read_bytes())
        with open(EXAMPLE, "rb") as f:
            self.assertEqual(pickle.loads(embedded_snapshot(frames[1]["srcdoc"] or "")), pickle.load(f))
        peak = corpus.expected(EXAMPLE_IN_CORPUS)["memoryviz"]["devices"]["0"]["active_memory_timeline"]["max_at_time_peak"]
        reserved = corpus.expected(EXAMPLE_IN_CORPUS)["segsum"]["total_reserved"]
        (printed,) = code[2].outputs
        self.assertEqual(printed.text, f"peak {peak:,} bytes allocated, {reserved:,} reserved\n")


if __name__ == "__main__":
    unittest.main()
