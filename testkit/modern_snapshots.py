"""Writes small snapshots shaped as PyTorch 2.10 to 2.15 writes them, for the tests of what
recent PyTorch adds (docs/snapshot-format.md in shared/docs: sections 1.4, 3.2, 4.1, 4.6):

- compiled.pickle: a compiled model's step recorded with
  `_snapshot(augment_with_fx_traces=True)`: frames of `<eval_with_key>.3` carrying
  `fx_node_op`, `fx_node_name`, `fx_node_target` and `fx_original_trace`; a backward
  allocation with only C++ frames (`stacks="all"` on autograd's thread) and its
  `forward_frames`; one without Python frames (`stacks="python"`); an `annotate` entry
  (`_annotate_memory`) on a live allocation; a ring buffer that overflowed
  (`trace_alloc_overflowed`, `trace_alloc_max_entries`), so the trace starts with a free
  whose allocation was evicted; a block alive before the recording, without a stack.
- oom-cuda1.pickle: three GPUs; cuda:0 has the most events, the out-of-memory error is on
  cuda:1.
- no-time.pickle: compiled.pickle as torch_npu writes its traces: no `time_us`.
- graph-pool.pickle: a CUDA graph's private pool `(1, 2)` beside the default pool: its
  segment made in the trace (`segment_alloc` with `pool_id`), allocations into it, a second
  pool `(1, 3)` released before the dump, and a default-pool tensor.
- pinned-host.pickle: `record_host=True` (2.14+): a GPU's trace beside `host_segments` (one
  block per segment, device -1) and `host_traces` (the pinned allocator's one trace): three
  pinned buffers, one freed before the dump.

Frame dicts and stacks are shared objects, as PyTorch's `py_symbolize` makes them, so the
pickler memoizes them. Usage: modern_snapshots.py OUT_DIR PROTOCOL (4, or 5 as Python 3.14
writes by default). Standard library only.
"""
import os
import pickle
import sys

MB = 1 << 20
SITE = "/usr/lib/python3.12/site-packages/torch"


def frame(name, filename, line, **fx):
    f = {"name": name, "filename": filename, "line": line}
    f.update(fx)
    return f


def original(*lines):
    """A traceback as FX keeps a node's stack (`node.meta['stack_trace']`)."""
    return "".join(f'  File "{file}", line {n}, in {fn}\n    {code}\n' for file, n, fn, code in lines)


TRAIN = ("/home/user/train.py", 40, "train_step", "out = model(x)")
train = frame("train_step", "/home/user/train.py", 40)
call_impl = frame("_call_impl", f"{SITE}/nn/modules/module.py", 1775)
graph_call = frame("__call__", f"{SITE}/fx/graph_module.py", 824)
ops = frame("__call__", f"{SITE}/_ops.py", 723)
addmm = frame("forward", "<eval_with_key>.3", 5, fx_node_op="call_function", fx_node_name="addmm",
              fx_node_target="aten.addmm.default",
              fx_original_trace=original(TRAIN, ("/home/user/model.py", 12, "forward", "a = self.net1(x)")))
relu = frame("forward", "<eval_with_key>.3", 6, fx_node_op="call_function", fx_node_name="relu",
             fx_node_target="aten.relu.default",
             fx_original_trace=original(TRAIN, ("/home/user/model.py", 13, "forward", "b = self.relu(a)")))
cpp = [frame(n, f, 0) for n, f in [
    ("torch::unwind::unwind()", "??"),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int, unsigned long, CUstream_st*)",
     "CUDACachingAllocator.cpp"),
    ("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", "??"),
    ("at::_ops::zeros::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)", "??"),
    ("torch::autograd::generated::SelectBackward0::apply(std::vector<at::Tensor>&&)", "Functions.cpp"),
    ("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "engine.cpp"),
]]
S_ADDMM = [ops, addmm, graph_call, call_impl, train]
S_RELU = [ops, relu, graph_call, call_impl, train]
S_BACKWARD = cpp
NO_FRAMES = []
FORWARD = ['  File "/home/user/train.py", line 40, in train_step\n    out = model(x)\n',
           '  File "/home/user/model.py", line 14, in forward\n    c = b[:, 0]\n']

BASE = 0x7F0000000000
BEFORE = 0x7F1000000000


def entry(action, addr, size, frames, t, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1_760_000_000_000_000 + t}
    if frames is not None:
        e["frames"] = frames
    e["compile_context"] = "N/A"
    e["user_metadata"] = ""
    e.update(extra)
    return e


def compiled():
    a, r, bw, nf = BASE, BASE + 4 * MB, BASE + 8 * MB, BASE + 10 * MB
    trace = [
        # Evicted by the ring buffer: a free whose allocation is gone, without a stack.
        entry("free_completed", BASE + 16 * MB, 2 * MB, NO_FRAMES, 0),
        entry("segment_alloc", BASE, 20 * MB, S_ADDMM, 1),
        entry("alloc", a, 4 * MB, S_ADDMM, 2),
        entry("alloc", r, 4 * MB, S_RELU, 3),
        entry("annotate", a, 4 * MB, S_ADDMM, 4, user_metadata="activation of net1"),
        entry("alloc", bw, 2 * MB, S_BACKWARD, 5, forward_frames=FORWARD),
        entry("alloc", nf, 1 * MB, NO_FRAMES, 6),
        entry("free_requested", r, 4 * MB, S_RELU, 7),
        entry("free_completed", r, 4 * MB, S_RELU, 8),
    ]
    block = lambda addr, size, state, frames, **k: dict(
        {"address": addr, "size": size, "requested_size": size if state != "inactive" else 0,
         "state": state, "frames": frames}, **k)
    segments = [
        {"device": 0, "address": BASE, "total_size": 20 * MB, "allocated_size": 7 * MB, "active_size": 7 * MB,
         "requested_size": 7 * MB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
         "is_expandable": False, "frames": S_ADDMM, "blocks": [
             block(a, 4 * MB, "active_allocated", S_ADDMM),
             block(r, 4 * MB, "inactive", NO_FRAMES),
             block(bw, 2 * MB, "active_allocated", S_BACKWARD, forward_frames=FORWARD),
             block(nf, 1 * MB, "active_allocated", NO_FRAMES),
             block(BASE + 11 * MB, 9 * MB, "inactive", NO_FRAMES),
         ]},
        # Alive before the recording began: its block has no stack.
        {"device": 0, "address": BEFORE, "total_size": 2 * MB, "allocated_size": 2 * MB, "active_size": 2 * MB,
         "requested_size": 2 * MB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
         "is_expandable": False, "frames": NO_FRAMES, "blocks": [block(BEFORE, 2 * MB, "active_allocated", NO_FRAMES)]},
    ]
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                "expandable_segments": False, "trace_alloc_overflowed": True, "trace_alloc_max_entries": 9}
    return {"segments": segments, "device_traces": [trace], "allocator_settings": settings,
            "external_annotations": []}


def oom_on_cuda1():
    user = [frame("step", "/home/user/train.py", 20)]
    traces, segments = [], []
    for d, allocs in enumerate([12, 3, 2]):
        base = BASE + (d << 36)
        t = [entry("segment_alloc", base, 64 * MB, user, 0)]
        for k in range(allocs):
            t.append(entry("alloc", base + k * MB, MB, user, 1 + 2 * k))
            if d == 0:
                t.append(entry("free_requested", base + k * MB, MB, user, 2 + 2 * k))
                t.append(entry("free_completed", base + k * MB, MB, user, 2 + 2 * k))
        live = 0 if d == 0 else allocs
        if d == 1:
            t.append(entry("oom", None, 256 * MB, user, 50, device_free=3 * MB))
            del t[-1]["addr"]
        traces.append(t)
        blocks = [{"address": base + k * MB, "size": MB, "requested_size": MB, "state": "active_allocated",
                   "frames": user} for k in range(live)]
        blocks.append({"address": base + live * MB, "size": (64 - live) * MB, "requested_size": 0, "state": "inactive",
                       "frames": []})
        segments.append({"device": d, "address": base, "total_size": 64 * MB, "allocated_size": live * MB,
                         "active_size": live * MB, "requested_size": live * MB, "stream": 0, "segment_type": "large",
                         "segment_pool_id": (0, 0), "is_expandable": False, "frames": user, "blocks": blocks})
    return {"segments": segments, "device_traces": traces, "allocator_settings": {"expandable_segments": False},
            "external_annotations": []}


def graph_pool():
    user = [frame("replay", "/home/user/train.py", 30)]
    g, h, d = BASE, BASE + 0x100000000, BASE + 0x200000000
    trace = [
        entry("segment_alloc", d, 8 * MB, user, 0),
        entry("alloc", d, 2 * MB, user, 1),
        entry("segment_alloc", g, 20 * MB, user, 2, pool_id=(1, 2)),
        entry("alloc", g, 6 * MB, user, 3, pool_id=(1, 2)),
        entry("alloc", g + 6 * MB, 4 * MB, user, 4, pool_id=(1, 2)),
        entry("free_requested", g, 6 * MB, user, 5, pool_id=(1, 2)),
        entry("free_completed", g, 6 * MB, user, 5, pool_id=(1, 2)),
        entry("segment_alloc", h, 4 * MB, user, 6, pool_id=(1, 3)),
        entry("alloc", h, 3 * MB, user, 7, pool_id=(1, 3)),
        entry("free_requested", h, 3 * MB, user, 8, pool_id=(1, 3)),
        entry("free_completed", h, 3 * MB, user, 8, pool_id=(1, 3)),
        entry("segment_free", h, 4 * MB, user, 9, pool_id=(1, 3)),
        entry("alloc", d + 2 * MB, 1 * MB, user, 10),
    ]
    seg = lambda addr, total, pool, blocks: {
        "device": 0, "address": addr, "total_size": total, "stream": 0, "segment_type": "large",
        "segment_pool_id": pool, "is_expandable": False, "frames": user,
        "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "active_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "requested_size": sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated"),
        "blocks": blocks}
    blk = lambda addr, size, active: {"address": addr, "size": size, "requested_size": size if active else 0,
                                      "state": "active_allocated" if active else "inactive",
                                      "frames": user if active else []}
    segments = [
        seg(d, 8 * MB, (0, 0), [blk(d, 2 * MB, True), blk(d + 2 * MB, 1 * MB, True), blk(d + 3 * MB, 5 * MB, False)]),
        seg(g, 20 * MB, (1, 2), [blk(g, 6 * MB, False), blk(g + 6 * MB, 4 * MB, True), blk(g + 10 * MB, 10 * MB, False)]),
    ]
    return {"segments": segments, "device_traces": [trace], "allocator_settings": {"expandable_segments": False},
            "external_annotations": []}


def pinned_host():
    snap = oom_on_cuda1()
    snap["segments"] = [s for s in snap["segments"] if s["device"] == 0]
    snap["device_traces"] = [snap["device_traces"][0]]
    loader = [frame("pin_memory", "/home/user/data.py", 17)]
    host = 0x7E0000000000
    sizes = [16 * MB, 8 * MB, 4 * MB]
    trace, segments, at = [], [], host
    for k, size in enumerate(sizes):
        trace.append(entry("segment_alloc", at, size, loader, 10 * k))
        trace.append(entry("alloc", at, size, loader, 10 * k + 1))
        if k == 1:
            trace.append(entry("free_requested", at, size, loader, 10 * k + 2))
            trace.append(entry("free_completed", at, size, loader, 10 * k + 2))
        alive = k != 1
        segments.append({"device": -1, "address": at, "total_size": size, "allocated_size": size if alive else 0,
                         "active_size": size if alive else 0, "requested_size": size, "stream": 0,
                         "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False,
                         "frames": loader, "blocks": [{"address": at, "size": size, "requested_size": size,
                                                       "state": "active_allocated" if alive else "inactive",
                                                       "frames": loader if alive else []}]})
        at += size
    snap["host_segments"] = segments
    snap["host_traces"] = trace
    return snap


def without_time(snap):
    for trace in snap["device_traces"]:
        for e in trace:
            del e["time_us"]
    return snap


def main():
    out, protocol = sys.argv[1], int(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    files = [("compiled.pickle", compiled()), ("oom-cuda1.pickle", oom_on_cuda1()),
             ("no-time.pickle", without_time(compiled())), ("graph-pool.pickle", graph_pool()),
             ("pinned-host.pickle", pinned_host())]
    for name, snap in files:
        with open(os.path.join(out, name), "wb") as f:
            pickle.dump(snap, f, protocol=protocol)


if __name__ == "__main__":
    main()
