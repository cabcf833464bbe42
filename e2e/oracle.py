"""Independent oracle for the browser tests: what PyTorch's own tooling sees in a corpus
snapshot. Only used on the trusted corpus files (pickle.load, as _memory_viz.py does).

usage: oracle.py FILE stacks DEVICE ADDR SIZE   -> JSON list of filtered stacks of the alloc
                                                   events with that address and size
       oracle.py FILE free-stacks DEVICE ADDR SIZE -> the same of the free events (an
                                                   allocation made before recording is known
                                                   by the stack of its free)
"""
import json, pickle, sys

HIDDEN_NAMES = ["unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
                "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_"]
HIDDEN_FILES = ["core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
                "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c",
                "cpython/abstract.h"]


def lines(frames):
    out = []
    for f in frames:
        if any(h in f["name"] for h in HIDDEN_NAMES) or any(h in f["filename"] for h in HIDDEN_FILES):
            continue
        out.append(f"{f['filename']}:{f['line']}:{f['name']}")
    return out


def main():
    path, what = sys.argv[1], sys.argv[2]
    with open(path, "rb") as fh:
        snap = pickle.load(fh)
    if what == "free-stacks":
        dev, addr, size = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        found = [lines(e.get("frames", [])) for e in snap["device_traces"][dev]
                 if e["action"] in ("free_requested", "free_completed") and e["addr"] == addr and e["size"] == size]
        print(json.dumps(found))
    elif what == "stacks":
        dev, addr, size = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        found = [lines(e.get("frames", [])) for e in snap["device_traces"][dev]
                 if e["action"] == "alloc" and e["addr"] == addr and e["size"] == size]
        for seg in snap["segments"]:
            at = seg["address"]
            for b in seg["blocks"]:
                if b.get("address", at) == addr and b["state"] == "active_allocated":
                    found.append(lines(b.get("frames", [])))
                at += b["size"]
        print(json.dumps(found))


main()
