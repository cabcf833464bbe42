"""Where the snapshot corpus is, for the Python tests: the rule of the Rust tests' ``testkit``.

The folder is ``$MEMSCAPE_CORPUS``, else ``../shared/corpus`` beside the checkout (the full
corpus), else the repository's ``testdata/corpus`` (the files whose licences permit copying). On
the full corpus a missing file fails the test that asked; on a partial one (that fallback, or
``MEMSCAPE_CORPUS_PARTIAL=1``) the test is skipped, naming the file.
"""

from __future__ import annotations

import json
import os
import unittest
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
# How many snapshot files the full corpus has at least (a partial copy of it fails loudly).
MIN_FILES = 19


def _locate() -> Tuple[Path, bool]:
    said_partial = os.environ.get("MEMSCAPE_CORPUS_PARTIAL") == "1"
    given = os.environ.get("MEMSCAPE_CORPUS")
    if given:
        return Path(given), not said_partial
    shared = ROOT.parent / "shared" / "corpus"
    if shared.is_dir():
        return shared, not said_partial
    return ROOT / "testdata" / "corpus", False


DIR, FULL = _locate()
assert (DIR / "expected").is_dir(), f"corpus not found at {DIR} (set MEMSCAPE_CORPUS)"


def file(name: str) -> Path:
    """One corpus file; raises SkipTest, naming it, when a partial corpus lacks it."""
    path = DIR / name
    if path.is_file():
        return path
    if FULL:
        raise AssertionError(f"{path} is missing from the full corpus (a partial copy? set MEMSCAPE_CORPUS_PARTIAL=1)")
    raise unittest.SkipTest(f"needs {name} from the full corpus (../shared/corpus; see testdata/corpus/SOURCES.md)")


def files() -> List[Path]:
    """Every snapshot file: all of them on the full corpus, what there is on a partial one."""
    found = sorted(p for p in DIR.iterdir() if p.suffix in (".pickle", ".pkl", ".html"))
    assert not FULL or len(found) >= MIN_FILES, f"expected the {MIN_FILES} corpus files in {DIR}, found {len(found)}"
    return found


def expected(name: str) -> Dict[str, Any]:
    """PyTorch's figures for a corpus file (``expected/NAME.json``)."""
    with open(DIR / "expected" / f"{name}.json", encoding="utf-8") as f:
        out: Dict[str, Any] = json.load(f)
    return out
