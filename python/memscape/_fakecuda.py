"""A CUDA device made of fake CPU tensors: what :func:`memscape.predict` runs a program on.

PyTorch's fake tensors on the CPU run forward, backward, ``autocast("cpu")`` and attention
without data; fake CUDA tensors cannot run backward without a GPU (the autograd engine asks
the driver for its device threads). So every tensor here is a fake CPU tensor, and the
program is told otherwise:

- :class:`Devices` (a ``TorchFunctionMode``) turns every ``device="cuda"`` a program asks for
  into the CPU, and ``.to("cuda")``, ``.cuda()`` and ``.cpu()`` into copies that carry where
  they would live;
- :class:`Tracker` (a ``TorchDispatchMode`` above the ``FakeTensorMode``) sees every storage
  each operator makes, and tells the session of each on the device as an allocation (with
  its Python stack) and of its release when the storage dies;
- :func:`install` patches what a program asks of the device: ``Tensor.device`` and
  ``is_cuda`` (to the program's code; PyTorch's own code sees the CPU), ``torch.cuda``'s
  functions, streams, events, NVTX, ``autocast("cuda")`` (run as ``autocast("cpu")``), the
  optimizers' choice of their ``foreach`` implementation (CUDA's), ``record_function``
  (annotations) and values read from fake tensors (``.item()``: a plausible number).

What it models and what it does not is in ARCHITECTURE.md and docs/predict.md.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

CUDA0 = torch.device("cuda", 0)
CPU = torch.device("cpu")
#: What a storage on the (predicted) device carries: its allocation's number.
_ID = "_memscape_alloc"
#: What a storage on the host carries.
_HOST = "_memscape_host"
#: Frames of these files are the predictor's own machinery, never the program's.
_OWN = ("memscape/_fakecuda.py", "memscape/_predict.py", "torch/utils/_python_dispatch.py",
        "torch/_subclasses/", "torch/overrides.py", "torch/utils/_device.py")


class Target(threading.local):
    """Where the storages an operator makes now go: ``None`` (where its inputs are), or a
    forced ``"cuda"`` / ``"cpu"`` (a factory asked for a device, a copy to one)."""

    def __init__(self) -> None:
        self.device: Optional[str] = None


TARGET = Target()


class _target:
    def __init__(self, device: str) -> None:
        self.device = device

    def __enter__(self) -> None:
        self.saved = TARGET.device
        TARGET.device = self.device

    def __exit__(self, *exc: Any) -> None:
        TARGET.device = self.saved


def is_cuda_device(d: Any) -> bool:
    """Whether a device argument names CUDA: ``"cuda"``, ``"cuda:1"``, ``torch.device``, an int."""
    if d is None:
        return False
    if isinstance(d, torch.device):
        return bool(d.type == "cuda")
    if isinstance(d, str):
        return d.split(":")[0] == "cuda"
    return isinstance(d, int) and not isinstance(d, bool)


def on_device(t: Any) -> bool:
    """Whether a tensor lives on the predicted device."""
    if not isinstance(t, torch.Tensor):
        return False
    try:
        return getattr(t.untyped_storage(), _ID, None) is not None
    except Exception:  # noqa: BLE001 (a tensor without storage: sparse, nested)
        return False


def _from_torch(depth: int) -> bool:
    """Whether the caller ``depth`` frames up is PyTorch's own code (which must see the truth)."""
    try:
        name = sys._getframe(depth + 1).f_globals.get("__name__", "")
    except ValueError:
        return False
    return bool(name == "torch" or name.startswith("torch."))


#: Operators that run on cuBLAS: the first on a thread's handle and stream makes its workspace.
_CUBLAS = {"mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "addbmm", "addr", "dot", "vdot", "_scaled_mm"}


def workspace_bytes(major: int, minor: int) -> int:
    """The cuBLAS workspace PyTorch allocates per handle and stream when
    ``CUBLAS_WORKSPACE_CONFIG`` is unset: 32 MiB on Hopper (sm90), else 2 x 4 MiB + 8 x 16 KiB."""
    return 4096 * 8 * 1024 if (major, minor) == (9, 0) else 4096 * 1024 * 2 + 16 * 1024 * 8


class Tracker(TorchDispatchMode):  # type: ignore[misc]
    """Sees each storage an operator makes: one on the device is an allocation of the session,
    freed when the storage dies. With ``stacks="all"`` (PyTorch's default) each allocation
    also has the C++ frames a GPU's recording would show that name what made it: the aten
    operator and, in backward, the autograd node."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        self.next_id = 1
        self.frames: Dict[Any, int] = {}
        self.workspaces: Set[Any] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inplace = _IN_PLACE_IN_BACKWARD.get(func)
        if inplace is not None and args and getattr(args[0], "_memscape_fresh", None) is not None:
            node = torch._C._current_autograd_node()
            if node is not None and args[0]._memscape_fresh == id(node):
                # PyTorch's backward formulas write into the zeros they made (`scatter_add_`),
                # except on tensor subclasses such as fake tensors: do as on the GPU.
                return inplace(*args, **kwargs)
        out = func(*args, **kwargs)
        if func in _ZEROS:
            node = torch._C._current_autograd_node()
            if node is not None and isinstance(out, torch.Tensor):
                out._memscape_fresh = id(node)
        target = TARGET.device
        cuda: Optional[bool] = None
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            try:
                s = t.untyped_storage()
            except Exception:  # noqa: BLE001
                continue
            known = getattr(s, _ID, None)
            if known is not None:
                if s.nbytes() != known[1]:  # resized in place: a new block
                    self.session.free(known[0])
                    self._alloc(known, s.nbytes(), func)
                continue
            if getattr(s, _HOST, False):
                continue
            if cuda is None:
                cuda = target == "cuda" or (target is None and any(on_device(a) for a in tree_leaves((args, kwargs))))
            if cuda:
                holder = [0, 0]
                setattr(s, _ID, holder)
                weakref.finalize(s, _free, self.session, holder).atexit = False
                self._alloc(holder, s.nbytes(), func)
            else:
                setattr(s, _HOST, True)
        if cuda and func.__name__.split(".")[0] in _CUBLAS:
            key = (torch._C._current_autograd_node() is not None, self.session.stream)
            if key not in self.workspaces:
                self.workspaces.add(key)
                gpu = self.session.gpu
                n = workspace_bytes(gpu.major, gpu.minor)
                self.session.assume(f"cuBLAS keeps a workspace of {n} bytes per thread and stream that runs a matrix product "
                                    "(CUBLAS_WORKSPACE_CONFIG unset), allocated at its first and never freed")
                self._alloc([0, 0], n, "at::cuda::getNewWorkspace()")
        return out

    def _alloc(self, holder: List[int], n: int, func: Any) -> None:
        holder[0] = self.next_id
        holder[1] = n
        self.next_id += 1
        self.session.alloc(holder[0], n, self.stack(func))

    def _frame(self, key: Any, path: str, line: int, name: str) -> int:
        fid = self.frames.get(key)
        if fid is None:
            fid = self.session.frame_id(path, line, name)
            self.frames[key] = fid
        return fid

    def stack(self, func: Any) -> int:
        """The stack here as the session's stack id, innermost first: the C++ frames (with
        ``stacks="all"``), then the Python frames without the predictor's own. Backward runs
        on a GPU in the autograd engine's device thread, whose allocations have no Python
        frames."""
        ids: List[int] = []
        node = torch._C._current_autograd_node()
        if self.session.cpp:
            ids.append(self._cpp_op(func))
            if node is not None:
                name = node.name()
                cls = name if "::" in name else f"torch::autograd::generated::{name}"
                ids.append(self._frame(("node", cls), "Functions.cpp", 0, f"{cls}::apply(std::vector<at::Tensor>&&)"))
                ids.append(self._frame(("engine",), "engine.cpp", 0,
                                       "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"))
        if node is not None:
            return int(self.session.stack_id(tuple(ids)))
        # The frames inside the outermost of the predictor's own are its machinery.
        chain = []
        f: Any = sys._getframe(1)
        while f is not None:
            chain.append(f)
            f = f.f_back
        cut = max((i for i, f in enumerate(chain) if _is_own(f.f_code)), default=-1)
        for f in chain[cut + 1:]:
            code = f.f_code
            ids.append(self._frame((code, f.f_lineno), code.co_filename, f.f_lineno, code.co_name))
        return int(self.session.stack_id(tuple(ids)))

    def _cpp_op(self, func: Any) -> int:
        """The frame of the aten operator, as PyTorch's C++ unwinder names it."""
        if func == "free":
            return self._frame(("cpp", func), "CUDACachingAllocator.cpp", 0,
                               "c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)")
        if isinstance(func, str):
            return self._frame(("cpp", func), "??", 0, func)
        name = func.__name__  # "div.Tensor", "mm.default"
        op, _, overload = name.partition(".")
        qual = op if overload in ("", "default") else f"{op}_{overload}"
        return self._frame(("op", qual), "??", 0, f"at::_ops::{qual}::call()")


def _free(session: Any, holder: List[int]) -> None:
    session.free(holder[0])


_aten = torch.ops.aten
#: Out-of-place operators that PyTorch's backward formulas run in place on zeros they just
#: made, unless a tensor is a subclass (`areAnyTensorSubclassLike`): fake tensors are.
_IN_PLACE_IN_BACKWARD = {
    _aten.scatter_add.default: _aten.scatter_add_.default,
    _aten.index_add.default: _aten.index_add_.default,
    _aten.index_put.default: _aten.index_put_.default,
    _aten.index_copy.default: _aten.index_copy_.default,
    _aten.masked_scatter.default: _aten.masked_scatter_.default,
    _aten.scatter.src: _aten.scatter_.src,
}
_ZEROS = {_aten.new_zeros.default, _aten.zeros_like.default, _aten.zeros.default}

_OWN_CODE: Dict[Any, bool] = {}


def _is_own(code: Any) -> bool:
    own = _OWN_CODE.get(code)
    if own is None:
        own = _OWN_CODE[code] = any(o in code.co_filename for o in _OWN)
    return own


_TO = {torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu}
_KEEP = {torch.Tensor.pin_memory, torch.Tensor.record_stream, torch.Tensor.is_pinned}


class Devices(TorchFunctionMode):  # type: ignore[misc]
    """Turns the devices a program asks for into the CPU, remembering which it asked for."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        self.values = values(session)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in _TO:
            return self._to(func, args, kwargs)
        if func in _KEEP:
            return args[0] if func is torch.Tensor.pin_memory else (False if func is torch.Tensor.is_pinned else None)
        read = self.values.get(func)
        if read is not None:
            return read(*args, **kwargs)
        if "device" in kwargs and kwargs["device"] is not None:
            d = kwargs["device"]
            kwargs["device"] = CPU
            with _target("cuda" if is_cuda_device(d) else "cpu"):
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    def _to(self, func: Any, args: Any, kwargs: Dict[str, Any]) -> Any:
        t, rest = args[0], args[1:]
        want: Optional[str]
        if func is torch.Tensor.cuda:
            want, dtype, mf = "cuda", None, kwargs.get("memory_format")
        elif func is torch.Tensor.cpu:
            want, dtype, mf = "cpu", None, kwargs.get("memory_format")
        else:
            if rest and isinstance(rest[0], torch.Tensor):
                other = rest[0]
                want = "cuda" if on_device(other) else "cpu"
                dtype, mf = other.dtype, kwargs.get("memory_format")
            else:
                dev, dtype, _, mf = torch._C._nn._parse_to(*rest, **kwargs)
                want = None if dev is None or dev.type not in ("cuda", "cpu") else dev.type
        now = "cuda" if on_device(t) else "cpu"
        opts: Dict[str, Any] = {}
        if dtype is not None:
            opts["dtype"] = dtype
        if mf is not None:
            opts["memory_format"] = mf
        if want is None or want == now:
            return torch.Tensor.to(t, copy=bool(kwargs.get("copy", False)), **opts) if opts or kwargs.get("copy") else t
        with _target(want):
            return torch.Tensor.to(t, copy=True, **opts)


def _plausible(t: torch.Tensor) -> Any:
    """A value for a fake tensor read by the program: 1.0 for floats, 0 for integers, False."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return 1.0
    if t.dtype == torch.bool:
        return False
    return 0


class Patches:
    """What :func:`install` changed, to put back."""

    def __init__(self) -> None:
        self.saved: List[Tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self.saved.append((owner, name, owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else getattr(owner, name, _MISSING)))
        setattr(owner, name, value)

    def on_undo(self, fn: Callable[[], Any]) -> None:
        self.saved.append((None, "", fn))

    def undo(self) -> None:
        for owner, name, old in reversed(self.saved):
            if owner is None:
                old()
            elif old is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, old)
        self.saved.clear()


_MISSING = object()


class FakeStream:
    """A CUDA stream of the predicted device: its number is what snapshots record."""

    _next = 1

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = CUDA0
        self.priority = priority
        self.cuda_stream = FakeStream._next * 0x1000
        FakeStream._next += 1

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> "FakeEvent":
        return event if event is not None else FakeEvent()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, FakeStream) and other.cuda_stream == self.cuda_stream

    def __hash__(self) -> int:
        return hash(self.cuda_stream)


class FakeEvent:
    """A CUDA event: recorded at once; ``elapsed_time`` is the host's wall time between two."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.at: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        self.at = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "FakeEvent") -> float:
        if self.at is None or end.at is None:
            return 0.0
        return (end.at - self.at) * 1000.0


class DeviceProperties:
    """What ``torch.cuda.get_device_properties`` says of the predicted GPU."""

    def __init__(self, name: str, total_memory: int, major: int, minor: int, sms: int) -> None:
        self.name = name
        self.total_memory = total_memory
        self.major = major
        self.minor = minor
        self.multi_processor_count = sms
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.L2_cache_size = 50 * 1024 * 1024
        self.gcnArchName = ""
        self.uuid = "memscape-predicted"

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, multi_processor_count={self.multi_processor_count})")


def install(session: Any) -> Tuple[Patches, List[Any]]:
    """Patches PyTorch for ``session`` and enters the modes; returns what to undo and exit."""
    # PyTorch's compiler keeps a table of torch's functions by identity, built when first
    # imported: build it before any is patched (fake tensors import it).
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
    p = Patches()
    gpu = session.gpu
    props = DeviceProperties(gpu.name, gpu.memory, gpu.major, gpu.minor, gpu.sms)

    real_device = FakeTensor.device
    real_tensor_device = torch._C.TensorBase.device

    def device(self: Any) -> torch.device:
        if not _from_torch(1) and on_device(self):
            return CUDA0
        return real_device.__get__(self) if isinstance(self, FakeTensor) else real_tensor_device.__get__(self)

    p.set(FakeTensor, "device", property(device))
    p.set(torch.Tensor, "device", property(device))
    p.set(torch.Tensor, "is_cuda", property(lambda self: on_device(self)))
    real_get_device = torch.Tensor.get_device
    p.set(torch.nn.Module, "_apply", _module_apply)
    p.set(torch.Tensor, "get_device", lambda self: 0 if on_device(self) else real_get_device(self))

    cuda = torch.cuda
    mem = torch.cuda.memory

    def both(name: str, fn: Callable[..., Any]) -> None:
        fn = _own(fn)
        p.set(cuda, name, fn)
        if hasattr(mem, name):
            p.set(mem, name, fn)

    none = lambda *a, **k: None  # noqa: E731
    plain: Dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": none,
        "is_initialized": lambda: True,
        "init": none,
        "_lazy_init": none,
        "synchronize": none,
        "ipc_collect": none,
        "get_device_name": lambda device=None: gpu.name,
        "get_device_capability": lambda device=None: (gpu.major, gpu.minor),
        "get_device_properties": lambda device=None: props,
        "is_bf16_supported": lambda including_emulation=True: True,
        "manual_seed": none,
        "manual_seed_all": none,
        "seed": none,
        "seed_all": none,
        "initial_seed": lambda: 0,
        "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
        "set_rng_state": none,
        "get_rng_state_all": lambda: [torch.zeros(16, dtype=torch.uint8)],
        "set_rng_state_all": none,
        "Stream": FakeStream,
        "Event": FakeEvent,
        "current_stream": lambda device=None: session.current_stream(),
        "default_stream": lambda device=None: session.default_stream,
        "set_stream": lambda s: session.set_stream(s),
        "stream": lambda s: session.stream_context(s),
    }
    for name, fn in plain.items():
        p.set(cuda, name, fn if isinstance(fn, type) else _own(fn))
    memory: Dict[str, Callable[..., Any]] = {
        "memory_allocated": lambda device=None: session.figures()["allocated"],
        "max_memory_allocated": lambda device=None: session.figures()["peak_allocated"],
        "memory_reserved": lambda device=None: session.figures()["reserved"],
        "max_memory_reserved": lambda device=None: session.figures()["peak_reserved"],
        "memory_cached": lambda device=None: session.figures()["reserved"],
        "max_memory_cached": lambda device=None: session.figures()["peak_reserved"],
        "reset_peak_memory_stats": lambda device=None: session.reset_peak(),
        "reset_max_memory_allocated": lambda device=None: session.reset_peak(),
        "reset_max_memory_cached": lambda device=None: session.reset_peak(),
        "reset_accumulated_memory_stats": none,
        "memory_stats": lambda device=None: session.memory_stats(),
        "mem_get_info": lambda device=None: session.mem_get_info(),
        "empty_cache": lambda: session.empty_cache(),
        "set_per_process_memory_fraction": lambda fraction, device=None: session.set_fraction(fraction),
        "memory_summary": lambda device=None, abbreviated=False: session.summary(),
        "_record_memory_history": lambda enabled="all", *a, **k: session.history(enabled, *a, **k),
        "_dump_snapshot": lambda filename="dump_snapshot.pickle": session.dump(filename),
        "_snapshot": lambda device=None, *a, **k: session.snapshot_dict(),
    }
    for name, fn in memory.items():
        both(name, fn)
    p.set(cuda, "is_current_stream_capturing", _own(lambda: False))
    # `torch._C._cuda_attach_out_of_memory_observer`: called before a predicted OOM raises.
    p.set(torch._C, "_cuda_attach_out_of_memory_observer", _own(lambda fn: session.observers.append(fn)))
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        accel: Dict[str, Callable[..., Any]] = {
            "is_available": lambda: True,
            "device_count": lambda: 1,
            "current_accelerator": lambda check_available=False: CUDA0,
            "current_device_index": lambda: 0,
            "current_device_idx": lambda: 0,
            "set_device_index": none,
            "set_device_idx": none,
            "current_stream": lambda device=None: session.current_stream(),
            "set_stream": lambda s: session.set_stream(s),
            "synchronize": none,
            "get_device_capability": lambda device=None: {"major": gpu.major, "minor": gpu.minor},
        }
        for name, fn in accel.items():
            if hasattr(acc, name):
                p.set(acc, name, _own(fn))
    nvtx = torch.cuda.nvtx
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        p.set(nvtx, name, _own(lambda *a, **k: 0))
    p.set(nvtx, "range", _null_context)

    import torch.amp.autocast_mode as am

    from ._autocast import Rules

    rules = Rules()
    p.on_undo(rules.close)
    real_init, ac_enter, ac_exit = am.autocast.__init__, am.autocast.__enter__, am.autocast.__exit__

    def autocast_init(self: Any, device_type: str = "cuda", dtype: Any = None, enabled: bool = True, cache_enabled: Any = None) -> None:
        self._memscape_cuda = device_type == "cuda" and enabled
        if device_type == "cuda":
            device_type = "cpu"
            dtype = torch.float16 if dtype is None else dtype
        real_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def autocast_enter(self: Any) -> Any:
        if getattr(self, "_memscape_cuda", False):
            rules.entered()
        return ac_enter(self)

    def autocast_exit(self: Any, *exc: Any) -> Any:
        out = ac_exit(self, *exc)
        if getattr(self, "_memscape_cuda", False):
            rules.exited()
        return out

    p.set(am.autocast, "__init__", autocast_init)
    p.set(am.autocast, "__enter__", autocast_enter)
    p.set(am.autocast, "__exit__", autocast_exit)
    real_enabled = torch.is_autocast_enabled

    def is_autocast_enabled(device_type: Any = None) -> bool:
        if device_type is None or device_type == "cuda":
            return bool(real_enabled("cpu"))
        return bool(real_enabled(device_type))

    p.set(torch, "is_autocast_enabled", is_autocast_enabled)

    import torch.optim.optimizer as optim

    real_choice = optim._default_to_fused_or_foreach

    def fused_or_foreach(params: List[Any], differentiable: bool, use_fused: bool = False) -> Tuple[bool, bool]:
        if not differentiable and params and all(p is None or on_device(p) for p in params):
            return (use_fused, not use_fused)
        fused, foreach = real_choice(params, differentiable, use_fused)
        return bool(fused), bool(foreach)

    p.set(optim, "_default_to_fused_or_foreach", fused_or_foreach)

    rf = torch.autograd.profiler.record_function
    real_enter, real_exit = rf.__enter__, rf.__exit__

    def enter(self: Any) -> Any:
        session.annotate("START", self.name)
        return real_enter(self)

    def exit_(self: Any, *exc: Any) -> Any:
        session.annotate("END", self.name)
        return real_exit(self, *exc)

    p.set(rf, "__enter__", enter)
    p.set(rf, "__exit__", exit_)

    modes = [fake, Tracker(session), Devices(session)]
    for m in modes:
        m.__enter__()
    return p, modes


def _module_apply(self: Any, fn: Callable[[Any], Any], recurse: bool = True) -> Any:
    """``nn.Module._apply`` as PyTorch did it before tensor swapping: a parameter keeps its
    object and takes the converted tensor as its ``.data``. PyTorch swaps fake parameters
    instead, which fails on any tensor something refers to weakly (fake tensors are)."""
    if recurse:
        for module in self.children():
            module._apply(fn)
    for key, param in self._parameters.items():
        if param is None:
            continue
        with torch.no_grad():
            applied = fn(param)
        param.data = applied
        if param.grad is not None:
            with torch.no_grad():
                param.grad.data = fn(param.grad)
    for key, buf in self._buffers.items():
        if buf is not None:
            self._buffers[key] = fn(buf)
    return self


def _own(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function object of its own for ``fn`` (PyTorch's compiler refuses one object patched
    in under two names)."""

    def patched(*a: Any, **k: Any) -> Any:
        return fn(*a, **k)

    return patched


class _null_context(contextlib.ContextDecorator):
    """``nvtx.range``: a context manager and decorator that does nothing."""

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def values(session: Any) -> Dict[Any, Callable[[Any], Any]]:
    """What reading a fake tensor gives: a plausible value, said once on stderr."""

    def said(t: Any) -> Any:
        session.said_values()
        return _plausible(t)

    def tolist(t: Any) -> Any:
        session.said_values()
        v = _plausible(t)
        out: Any = v
        for n in reversed(t.shape):
            out = [out] * int(n)
        return out

    def numpy(t: Any, *a: Any, **k: Any) -> Any:
        import numpy as np

        session.said_values()
        dt = torch.empty((), dtype=t.dtype, device="meta")
        return np.zeros(tuple(t.shape), dtype=_np_dtype(dt.dtype))

    return {
        torch.Tensor.item: said,
        torch.Tensor.__float__: lambda t: float(said(t)),
        torch.Tensor.__int__: lambda t: int(said(t)),
        torch.Tensor.__index__: lambda t: int(said(t)),
        torch.Tensor.__bool__: lambda t: bool(said(t)),
        torch.Tensor.tolist: tolist,
        torch.Tensor.numpy: numpy,
        torch.allclose: lambda *a, **k: True,
        torch.equal: lambda *a, **k: True,
    }


def _np_dtype(dtype: torch.dtype) -> Any:
    import numpy as np

    return {torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64, torch.int32: np.int32,
            torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}.get(dtype, np.float32)
