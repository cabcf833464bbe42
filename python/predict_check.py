"""``memscape predict`` against real recordings: the public programs behind corpus snapshots
(testdata/predict/cases.json, testdata/predict/SOURCES.md) run unchanged under prediction on
this machine's CPU, and each prediction compared with the recording the program made on a
GPU: peak allocated, peak reserved, allocations, bytes per category at the peak, and every
call site alive at the peak.

    python3 python/predict_check.py --python PYTHON [--memscape BIN] [--cases a,b] [--all]
                                    [--memtracker] [--table FILE]

PYTHON is a Python with torch (and the programs' imports: einops, einx, jaxtyping, pandas;
python/requirements-predict.txt). Prints a Markdown table (the one docs/predict.md holds) and
exits 1 when a figure is off by more than the acceptance allows: peak allocated 2%, peak
reserved 5%, allocations 5%, a category at the peak 5% (or 0.1% of the peak for small ones),
a call site at the peak 5% of the peak. Cases marked "slow" run only with --all or --cases.
With --memtracker each program also runs once more under PyTorch's own MemTracker
(python/memtracker_run.py, under prediction), whose peak goes into the table beside ours.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "testdata" / "predict"
#: What each figure may be off by, relative to the recording.
TOLERANCE = {"peak": 0.02, "reserved": 0.05, "allocations": 0.05, "category": 0.05, "site": 0.05}


def corpus() -> Path:
    """The corpus as the other tests find it (python/tests/corpus.py)."""
    env = os.environ.get("MEMSCAPE_CORPUS")
    if env:
        return Path(env)
    shared = ROOT.parent / "shared" / "corpus"
    return shared if shared.is_dir() else ROOT / "testdata" / "corpus"


def memscape_json(exe: str, *args: str) -> Any:
    out = subprocess.run([exe, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def figures(exe: str, path: Path) -> Tuple[int, int, int]:
    """(peak allocated, peak reserved, allocations) of device 0, as `memscape stats` has them."""
    s = memscape_json(exe, "stats", str(path))
    d = s["devices"][0]
    return d["timeline"]["peak_bytes"], d["segment_timeline"]["peak_bytes"], d["timeline"]["elements"]


def off(predicted: int, recorded: int) -> float:
    return (predicted - recorded) / recorded if recorded else 0.0


def predict(case: Dict[str, Any], python: str, exe: str, tree: Path, prefix: List[str]) -> float:
    """Runs the case's program under prediction in a fresh copy of its tree; returns seconds."""
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(DATA / case["tree"], tree)
    for d in case["mkdir"]:
        (tree / d).mkdir(parents=True, exist_ok=True)
    paths = [str(ROOT / "python")] + [str(DATA / p) for p in case["paths"]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    started = time.monotonic()
    proc = subprocess.run([exe, "predict", "--gpu", case["gpu"], "--", python, *prefix, *case["argv"]],
                          cwd=tree / case["cwd"], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{case['name']}: the program failed under prediction:\n{proc.stdout}\n{proc.stderr}")
    return seconds


def memtracker_peak(case: Dict[str, Any], python: str, exe: str, work: Path) -> int:
    """PyTorch's MemTracker's peak (all devices) for the case's program, run under prediction."""
    out = work / f"{case['name']}.memtracker.json"
    predict(case, python, exe, work / f"{case['name']}-memtracker", [str(ROOT / "python" / "memtracker_run.py"), str(out)])
    peak = json.loads(out.read_text())
    return sum(snap.get("Total", 0) for snap in peak.values())


def run_case(case: Dict[str, Any], python: str, exe: str, work: Path) -> Dict[str, Any]:
    """Runs one program under prediction in a copy of its tree; compares with its recording."""
    tree = work / case["name"]
    seconds = predict(case, python, exe, tree, [])
    predicted = tree / case["snapshot"]
    recording = corpus() / case["recording"]
    if not recording.is_file():
        raise FileNotFoundError(f"{case['name']}: its recording {recording} is missing")
    p, r = figures(exe, predicted), figures(exe, recording)
    diff = memscape_json(exe, "diff", str(recording), str(predicted))
    peak = r[0]
    cats = [(c[0], c[1], c[2]) for c in diff["categories"] if c[1] or c[2]]
    worst_cat = max(cats, key=lambda c: abs(c[2] - c[1]) / max(c[1], c[2], 1))
    worst_site = max(diff["sites"], key=lambda s: abs(s["b"] - s["a"]), default={"site": "-", "a": 0, "b": 0})
    row = {
        "name": case["name"],
        "recording": case["recording"],
        "seconds": round(seconds, 1),
        "peak": (p[0], r[0]),
        "reserved": (p[1], r[1]),
        "allocations": (p[2], r[2]),
        "categories": cats,
        "worst_category": worst_cat,
        "worst_site": (worst_site["site"], worst_site["b"] - worst_site["a"]),
        "memtracker": None,
    }
    failures = []
    for key, i in (("peak", 0), ("reserved", 1), ("allocations", 2)):
        if abs(off(p[i], r[i])) > TOLERANCE[key]:
            failures.append(f"{key} {p[i]} vs {r[i]} ({off(p[i], r[i]):+.2%})")
    for name, a, b in cats:
        if abs(b - a) > TOLERANCE["category"] * max(a, b) and abs(b - a) > 0.001 * peak:
            failures.append(f"category {name} {b} vs {a}")
    if abs(row["worst_site"][1]) > TOLERANCE["site"] * peak:
        failures.append(f"call site {row['worst_site'][0]} off by {row['worst_site'][1]} bytes")
    row["failures"] = failures
    return row


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def table(rows: List[Dict[str, Any]]) -> str:
    out = ["| program (recording) | peak allocated: predicted / recorded | peak reserved | allocations | "
           "largest category error at the peak | largest call-site error at the peak | time (2 cores) |"
           + (" PyTorch's MemTracker peak (tensor bytes) |" if any(r["memtracker"] is not None for r in rows) else ""),
           "| --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if any(r["memtracker"] is not None for r in rows) else "")]
    for r in rows:
        (pp, rp), (pr, rr), (pa, ra) = r["peak"], r["reserved"], r["allocations"]
        c = r["worst_category"]
        s = r["worst_site"]
        cat = "every category equal" if c[1] == c[2] else f"{c[0]}: {mib(c[2])} / {mib(c[1])}"
        out.append(
            f"| {r['name']} (`{r['recording']}`) | {mib(pp)} / {mib(rp)} ({off(pp, rp):+.2%}) | "
            f"{mib(pr)} / {mib(rr)} ({off(pr, rr):+.2%}) | {pa} / {ra} ({off(pa, ra):+.2%}) | "
            f"{cat} | {mib(abs(s[1]))} ({abs(s[1]) / rp:.2%} of the peak) | {r['seconds']} s |"
            + (f" {mib(r['memtracker'])} ({off(r['memtracker'], rp):+.2%}) |" if r["memtracker"] is not None else ""))
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="a Python with torch and the programs' imports")
    ap.add_argument("--memscape", default=os.environ.get("MEMSCAPE_BIN", str(ROOT / "target" / "debug" / "memscape")))
    ap.add_argument("--cases", help="comma-separated names (default: all)")
    ap.add_argument("--all", action="store_true", help="also the cases marked slow")
    ap.add_argument("--memtracker", action="store_true", help="also PyTorch's MemTracker's peak for each program")
    ap.add_argument("--table", help="also write the Markdown table here")
    args = ap.parse_args()
    if os.sep in args.memscape:
        args.memscape = str(Path(args.memscape).resolve())  # the programs run in other folders
    cases = json.loads((DATA / "cases.json").read_text())
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c["name"] in wanted]
    elif not args.all:
        cases = [c for c in cases if not c.get("slow")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="memscape-predict-check-") as work:
        for case in cases:
            row = run_case(case, args.python, args.memscape, Path(work))
            if args.memtracker:
                row["memtracker"] = memtracker_peak(case, args.python, args.memscape, Path(work))
            rows.append(row)
            status = "ok" if not row["failures"] else "FAIL " + "; ".join(row["failures"])
            print(f"{row['name']}: {status} ({row['seconds']} s)", flush=True)
    text = table(rows)
    print(text)
    if args.table:
        Path(args.table).write_text(text + "\n")
    return 1 if any(r["failures"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
