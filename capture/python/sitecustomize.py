# Put first on PYTHONPATH by `memscape capture --torch`: in every Python process of the run
# that imports torch and initializes CUDA, turn on PyTorch's memory recording and dump its
# snapshot at exit and on an out-of-memory error, for memscape to merge with the driver
# capture of the same process. The user's code is not changed; a sitecustomize that was
# there before still runs. Nothing here stops the program: every failure is one warning.

import os
import sys

# Settings come from the environment memscape sets. capture/src/env.rs names these variables
# and the default; a test there (tests/it/torch.rs) fails if this copy differs.
_DIR = "MEMSCAPE_TORCH_DIR"  # where each process writes torch.<pid>.pickle
_MAX_ENTRIES = "MEMSCAPE_TORCH_MAX_ENTRIES"  # PyTorch's max_entries
_STACKS = "MEMSCAPE_TORCH_STACKS"  # "python" or "all" (PyTorch's stacks)
_DEFAULT_MAX_ENTRIES = 1_000_000


def _warn(what, e):
    sys.stderr.write(f"memscape: {what}: {type(e).__name__}: {e}\n")


def _chain():
    """Runs the sitecustomize this one hides (the next one on sys.path), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.get("sitecustomize")
    path = sys.path[:]
    try:
        sys.path[:] = [p for p in path if os.path.abspath(p or os.curdir) != here]
        del sys.modules["sitecustomize"]
        import sitecustomize  # noqa: F401 (runs it)
    except ImportError as e:
        if e.name != "sitecustomize":
            _warn("the sitecustomize this run found first failed", e)
    except Exception as e:
        _warn("the sitecustomize this run found first failed", e)
    finally:
        sys.path[:] = path
        if mine is not None:
            sys.modules["sitecustomize"] = mine


def _path():
    return os.path.join(os.environ[_DIR], f"torch.{os.getpid()}.pickle")


_started = None  # the process that turned recording on (a fork child does not dump)


def _dump():
    if _started != os.getpid():
        return
    try:
        import torch

        path = _path()
        tmp = f"{path}.{os.getpid()}.tmp"
        torch.cuda.memory._dump_snapshot(tmp)
        os.replace(tmp, path)
    except Exception as e:
        _warn("cannot dump PyTorch's memory snapshot", e)


def _on_oom(device, alloc, device_allocated, device_free):
    _dump()


def _start():
    """Runs when the process initializes CUDA (torch.cuda's lazy init)."""
    global _started
    try:
        import atexit

        import torch

        stacks = os.environ.get(_STACKS, "python")
        max_entries = int(os.environ.get(_MAX_ENTRIES, _DEFAULT_MAX_ENTRIES))
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks=stacks)
        _started = os.getpid()
        atexit.register(_dump)
        observe = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if observe is not None:
            observe(_on_oom)
    except Exception as e:
        _warn("cannot turn on PyTorch's memory recording", e)


def _torch_imported(torch):
    try:
        torch.cuda._lazy_call(_start)
    except Exception as e:
        _warn("cannot wait for CUDA in torch", e)


class _WhenTorchLoads:
    """A finder that lets the others find torch, then runs a hook once torch has loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _torch_imported(module)

        loader.exec_module = exec_module
        return spec


_chain()
if os.environ.get(_DIR):
    if "torch" in sys.modules:
        _torch_imported(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _WhenTorchLoads())
