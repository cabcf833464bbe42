"""Predicting the snapshot a PyTorch program would record on a GPU, on this machine's CPU.

:func:`predict` runs a block of code, and ``memscape predict -- COMMAND`` a whole program
(through ``sitecustomize``: :func:`_boot`), on a CUDA device made of fake tensors
(``_fakecuda``). Every allocation and free on it goes, as one line of JSON, to a
``memscape predict --serve`` process, which places them with memscape's simulation of
PyTorch's caching allocator (``core/predict``), answers the program's memory questions
(``torch.cuda.memory_allocated``, ``max_memory_reserved``, ...) and writes the snapshots it
asks for (``_dump_snapshot``). The wire is described in ``cli/src/predict.rs``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple, Union

from ._cli import MemscapeError, binary


class Gpu:
    """A GPU a prediction is for: what PyTorch would say of it."""

    def __init__(self, name: str, memory: int, major: int, minor: int, sms: int) -> None:
        self.name = name
        self.memory = memory
        self.major = major
        self.minor = minor
        self.sms = sms


_MIB = 1024 * 1024
#: The GPUs ``--gpu`` knows, by a short name: PyTorch's name for each, and the memory the
#: driver reports (``nvidia-smi``'s total, as ``get_device_properties`` says it).
GPUS: Dict[str, Gpu] = {
    "h100": Gpu("NVIDIA H100 80GB HBM3", 81559 * _MIB, 9, 0, 132),
    "h200": Gpu("NVIDIA H200", 143771 * _MIB, 9, 0, 132),
    "a100": Gpu("NVIDIA A100-SXM4-80GB", 81920 * _MIB, 8, 0, 108),
    "a100-40gb": Gpu("NVIDIA A100-SXM4-40GB", 40960 * _MIB, 8, 0, 108),
    "l4": Gpu("NVIDIA L4", 23034 * _MIB, 8, 9, 58),
    "rtx4090": Gpu("NVIDIA GeForce RTX 4090", 24564 * _MIB, 8, 9, 128),
    "a10": Gpu("NVIDIA A10", 23028 * _MIB, 8, 6, 72),
    "t4": Gpu("Tesla T4", 15360 * _MIB, 7, 5, 40),
}
DEFAULT_GPU = "h100"


def gpu_named(name: Optional[str], memory: Optional[int] = None) -> Gpu:
    """The GPU ``--gpu NAME`` names (default: an H100), with ``--gpu-memory`` if given."""
    key = (name or DEFAULT_GPU).lower().replace(" ", "").replace("nvidia", "")
    g = GPUS.get(key)
    if g is None:
        raise MemscapeError(f"unknown GPU {name!r}: memscape predict knows {', '.join(sorted(GPUS))} (or give --gpu-memory SIZE)")
    if memory is not None:
        g = Gpu(g.name, memory, g.major, g.minor, g.sms)
    return g


class Session:
    """One prediction: the fake device's events on their way to ``memscape predict --serve``."""

    def __init__(self, gpu: Gpu, limit: bool, command: List[str], exe: Optional[str] = None) -> None:
        import torch

        self.gpu = gpu
        exe = exe or str(binary())
        info = {
            "gpu": gpu.name,
            "memory": gpu.memory,
            "limit": limit,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "command": command,
        }
        try:
            self.proc = subprocess.Popen(
                [exe, "predict", "--serve", json.dumps(info)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        except OSError as e:
            raise MemscapeError(f"cannot start {exe} predict --serve: {e}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.w = self.proc.stdin
        self.r = self.proc.stdout
        self.limit = limit
        self.outbox: List[bytes] = []
        self.observers: List[Any] = []
        self.flushing = False
        self.tracker: Any = None
        self.n_frames = 0
        self.stacks: Dict[Tuple[int, ...], int] = {}
        self.default_stream: Any = None
        self.stream: int = 0
        self._stream_obj: Any = None
        self.recording = False
        self.cpp = True
        self.assumed: Set[str] = set()
        self.told_values = False
        self.closed = False
        self.t0 = time.time()
        self.patches: Any = None
        self.modes: List[Any] = []

    # The wire. Messages queue in an outbox written in batches: a storage may die (and its
    # free be sent) at any moment, the middle of a write included.
    def _send(self, msg: Dict[str, Any]) -> None:
        self.outbox.append(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        if len(self.outbox) >= 512:
            self._flush()

    def _flush(self) -> None:
        if self.flushing or self.closed:
            return
        self.flushing = True
        try:
            while self.outbox:
                batch, self.outbox = self.outbox, []
                self.w.write(b"".join(batch))
            self.w.flush()
        finally:
            self.flushing = False

    def _ask(self, msg: Dict[str, Any]) -> Dict[str, Any]:
        self._send(msg)
        self._flush()
        line = self.r.readline()
        if not line:
            raise MemscapeError("memscape predict --serve ended before answering")
        answer: Dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise MemscapeError(answer["error"])
        return answer

    def _now(self) -> int:
        return int(time.time() * 1_000_000)

    # What the tracker tells.
    def frame_id(self, path: str, line: int, name: str) -> int:
        self._send({"frame": [path, line, name]})
        self.n_frames += 1
        return self.n_frames - 1

    def stack_id(self, frames: Tuple[int, ...]) -> int:
        k = self.stacks.get(frames)
        if k is None:
            k = len(self.stacks)
            self.stacks[frames] = k
            self._send({"stack": list(frames)})
        return k

    def alloc(self, i: int, size: int, stack: int) -> None:
        msg = {"alloc": i, "size": size, "stream": self.stream, "stack": stack, "t": self._now()}
        if not self.limit:
            self._send(msg)
            return
        answer = self._ask(msg)
        if "oom" in answer:
            import torch

            f = self.figures()
            for observer in self.observers:  # as PyTorch calls them, before it raises
                observer(0, size, f["allocated"], f["device_free"])
            raise torch.OutOfMemoryError(answer["oom"])

    def free(self, i: int) -> None:
        """Allocation ``i`` is freed here (the stack of where it dies, as PyTorch records it)."""
        if self.closed:
            return
        stack = self.tracker.stack("free") if self.tracker is not None else self.stack_id(())
        self._send({"free": i, "stack": stack, "t": self._now()})

    def annotate(self, stage: str, name: str) -> None:
        self._send({"annotation": stage, "name": name, "t": self._now()})

    def said_values(self) -> None:
        if not self.told_values:
            self.told_values = True
            print(
                "memscape predict: the program read values of tensors, which a prediction does not have; "
                "it got plausible ones (1.0, 0, False), so what it prints of them means nothing",
                file=sys.stderr,
            )

    # What the program asks.
    def figures(self) -> Dict[str, int]:
        return self._ask({"query": 1})

    def reset_peak(self) -> None:
        self._send({"reset_peak": 1})

    def empty_cache(self) -> None:
        self._send({"empty_cache": 1})

    def set_fraction(self, fraction: float) -> None:
        """``set_per_process_memory_fraction``: a limit from now on (each allocation answered)."""
        self._send({"fraction": fraction})
        self.limit = True

    def memory_stats(self) -> Dict[str, Any]:
        f = self.figures()
        out: Dict[str, Any] = {}
        for key, now, peak in (("allocated_bytes", "allocated", "peak_allocated"),
                               ("reserved_bytes", "reserved", "peak_reserved"),
                               ("active_bytes", "allocated", "peak_allocated"),
                               ("requested_bytes", "requested", "peak_requested")):
            for pool in ("all", "large_pool", "small_pool"):
                out[f"{key}.{pool}.current"] = f[now] if pool == "all" else 0
                out[f"{key}.{pool}.peak"] = f[peak] if pool == "all" else 0
                out[f"{key}.{pool}.allocated"] = 0
                out[f"{key}.{pool}.freed"] = 0
        out["num_alloc_retries"] = 0
        out["num_ooms"] = f.get("ooms", 0)
        out["num_device_alloc"] = f.get("segments_allocated", 0)
        out["num_device_free"] = f.get("segments_freed", 0)
        return dict(sorted(out.items()))

    def mem_get_info(self) -> Tuple[int, int]:
        f = self.figures()
        return (max(0, f["device_free"]), self.gpu.memory)

    def summary(self) -> str:
        f = self.figures()
        return (f"memscape prediction for {self.gpu.name}: allocated {f['allocated']} B (peak {f['peak_allocated']} B), "
                f"reserved {f['reserved']} B (peak {f['peak_reserved']} B)")

    def history(self, enabled: Any = "all", context: Any = "all", stacks: str = "all", max_entries: int = 1_000_000,
                **kwargs: Any) -> None:
        """``_record_memory_history``: ``enabled`` ``"all"`` (or the old ``True``) records,
        ``None`` (or ``False``) stops; ``stacks="python"`` leaves out the C++ frames."""
        max_entries = int(kwargs.get("trace_alloc_max_entries", max_entries))
        self.recording = enabled in ("all", True)
        self.cpp = stacks != "python"
        self._send({"history": self.recording, "max_entries": max_entries})

    def top_return(self) -> None:
        """A function the program's top level called is returning (``main()``, say): the frees
        that follow, up to the next other message, may be its objects' teardown at exit."""
        if not self.closed:
            self._send({"top_return": 1})

    def assume(self, what: str) -> None:
        if what not in self.assumed:
            self.assumed.add(what)
            self._send({"assume": what})

    def dump(self, filename: Any = "dump_snapshot.pickle") -> None:
        self._ask({"dump": str(Path(os.fspath(filename)).absolute())})

    def snapshot_dict(self) -> Dict[str, Any]:
        """``torch.cuda.memory._snapshot()``: the predicted snapshot, read back."""
        import pickle
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "snapshot.pickle"
            self.dump(p)
            with open(p, "rb") as f:
                snap: Dict[str, Any] = pickle.load(f)  # noqa: S301 (written by memscape itself, just now)
                return snap

    # Streams.
    def current_stream(self) -> Any:
        return self._stream_obj or self.default_stream

    def set_stream(self, s: Any) -> None:
        self._stream_obj = s
        self.stream = 0 if s is None or s is self.default_stream else s.cuda_stream

    @contextlib.contextmanager
    def stream_context(self, s: Any) -> Iterator[None]:
        saved = self._stream_obj
        self.set_stream(s)
        try:
            yield
        finally:
            self.set_stream(saved)

    # Its life.
    def start(self) -> None:
        from . import _fakecuda

        self.default_stream = _fakecuda.FakeStream()
        self.default_stream.cuda_stream = 0
        self.patches, self.modes = _fakecuda.install(self)
        self.tracker = next(m for m in self.modes if isinstance(m, _fakecuda.Tracker))

    def stop(self) -> None:
        for m in reversed(self.modes):
            m.__exit__(None, None, None)
        self.modes = []
        if self.patches is not None:
            self.patches.undo()
            self.patches = None

    def finish(self, out: Optional[str], incomplete: Optional[str]) -> None:
        """Writes ``out`` (if any), marked ``incomplete`` with the reason if the program did
        not get to its end, and ends the server."""
        if self.closed:
            return
        if incomplete:
            self._send({"incomplete": incomplete})
        if out:
            self._ask({"dump": str(Path(out).absolute()), "whole": True})
        self._send({"end": 1})
        self._flush()
        self.closed = True
        self.w.close()
        self.proc.wait()


class Prediction(contextlib.ContextDecorator):
    """What :func:`predict` returns: the block runs on a predicted GPU while it is active."""

    def __init__(self, out: Optional[Union[str, "os.PathLike[str]"]], gpu: Optional[str], gpu_memory: Optional[int]) -> None:
        self.out = None if out is None else os.fspath(out)
        self.gpu = gpu_named(gpu, gpu_memory)
        self.limit = gpu_memory is not None
        self.session: Optional[Session] = None

    def __enter__(self) -> "Prediction":
        self.session = Session(self.gpu, self.limit, [sys.argv[0]] if sys.argv else [])
        self.session.start()
        if self.out:
            self.session.history("all")
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        s = self.session
        if s is None:
            return
        s.stop()
        s.finish(self.out, _incomplete(value, tb) if value is not None else None)
        self.session = None


def predict(out: Optional[Union[str, "os.PathLike[str]"]] = None, *, gpu: Optional[str] = None,
            gpu_memory: Optional[int] = None) -> Prediction:
    """Runs a block of PyTorch code as if on a GPU (``gpu``: ``"h100"`` by default), without
    allocating its CUDA tensors, and writes the snapshot it would record to ``out``.

    Inside the block, CUDA tensors are fake (shape, dtype, strides; no data) and ``torch.cuda``
    answers for the predicted GPU; ``torch.cuda.memory._dump_snapshot`` writes the predicted
    snapshot. With ``gpu_memory`` (bytes), an allocation beyond it raises
    ``torch.OutOfMemoryError`` as PyTorch would.
    """
    return Prediction(out, gpu, gpu_memory)


def _incomplete(value: BaseException, tb: Any) -> str:
    """Why a run stopped early, naming the operator and the program's line."""
    frames = [f for f in traceback.extract_tb(tb) if "/torch/" not in f.filename and "memscape/_" not in f.filename]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(value).__name__}{where}: {value}"


def _watch_top_level(session: Session) -> None:
    """Tells the server each time a function called by the ``__main__`` module's own code
    returns, while that function's locals are still alive (``sys.monitoring``, Python 3.12 and
    later; nothing before). A program whose model and optimizer live in ``main()`` frees them
    as ``main()`` returns, before ``--out`` is written at exit: the server holds those frees
    back and leaves them out of ``--out``, which then shows the run as ``main()`` left it."""
    mon: Any = getattr(sys, "monitoring", None)
    if mon is None:
        return
    tool = next((i for i in (4, 3) if mon.get_tool(i) is None), None)
    if tool is None:
        return
    mon.use_tool_id(tool, "memscape predict")
    events = mon.events
    top: List[Any] = []
    watched: Set[Any] = set()

    def started(code: Any, offset: int) -> Any:
        if code.co_name == "<module>" and sys._getframe(1).f_globals.get("__name__") == "__main__":
            top.append(code)
            mon.set_events(tool, 0)
            mon.set_local_events(tool, code, events.CALL)
            return None
        return mon.DISABLE

    def called(code: Any, offset: int, callee: Any, arg0: Any) -> Any:
        c = getattr(callee, "__code__", None)
        if c is not None and c not in watched:
            watched.add(c)
            mon.set_local_events(tool, c, events.PY_RETURN)
        return None

    def returned(code: Any, offset: int, value: Any) -> Any:
        caller = sys._getframe(1).f_back
        if caller is not None and top and caller.f_code is top[0]:
            session.top_return()
        return None

    mon.register_callback(tool, events.PY_START, started)
    mon.register_callback(tool, events.CALL, called)
    mon.register_callback(tool, events.PY_RETURN, returned)
    mon.set_events(tool, events.PY_START)


def _boot() -> None:
    """``memscape predict -- COMMAND``'s ``sitecustomize``: predicts this whole process as
    ``$MEMSCAPE_PREDICT`` says."""
    conf = json.loads(os.environ.pop("MEMSCAPE_PREDICT"))
    # What the program (and what it starts) may read to know it runs under prediction.
    os.environ["MEMSCAPE_PREDICTING"] = "1"
    gpu = gpu_named(conf.get("gpu"), conf.get("gpu_memory"))
    session = Session(gpu, conf.get("gpu_memory") is not None, list(sys.argv), conf.get("exe"))
    session.start()
    if conf.get("what_if"):
        from . import _whatif

        _whatif.install(conf["what_if"])
        session.assume(f"the doctor's what-if {conf['what_if']} was made to the program as it ran (memscape doctor --verify)")
    if conf.get("out"):
        session.history("all")
        _watch_top_level(session)
    failure: List[str] = []
    real_hook = sys.excepthook

    def hook(kind: Any, value: BaseException, tb: Any) -> None:
        failure.append(_incomplete(value, tb))
        if not isinstance(value, KeyboardInterrupt):
            print(f"memscape predict: the program stopped: {failure[-1]}", file=sys.stderr)
        real_hook(kind, value, tb)

    sys.excepthook = hook

    def end() -> None:
        session.stop()
        session.finish(conf.get("out"), failure[0] if failure else None)

    atexit.register(end)
