"""``python -m memscape FILE``: the offline page of FILE in the system's browser.
``python -m memscape predict [OPTIONS] -- COMMAND...``: ``memscape predict`` (the snapshot a
PyTorch program would record on a GPU, predicted on this machine's CPU)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import MemscapeError, open


def main(argv: Optional[List[str]] = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["predict"]:
        import subprocess

        from ._cli import binary

        try:
            return subprocess.call([str(binary()), *args_in])
        except MemscapeError as e:
            print(f"memscape: {e}", file=sys.stderr)
            return 2
    parser = argparse.ArgumentParser(
        prog="python -m memscape",
        description="Open a PyTorch memory snapshot in the memscape viewer, in your browser, offline. "
        "(The memscape command does the rest: memscape --help.)",
    )
    parser.add_argument("file", help="a snapshot: pickle, .pickle.gz, .pickle.zst, JSON or a _memory_viz.py page")
    parser.add_argument("--no-browser", action="store_true", help="only write the page and print its path")
    args = parser.parse_args(argv)
    try:
        path = open(args.file, browser=not args.no_browser)
    except MemscapeError as e:
        print(f"memscape: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
