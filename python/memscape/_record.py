"""Recording PyTorch's CUDA allocator: PyTorch's own recipe as one context manager."""

from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Optional, Type, Union

from ._cli import MemscapeError

#: Events :func:`record` keeps unless told otherwise: the same as ``memscape capture
#: --torch`` (``DEFAULT_MAX_ENTRIES`` in capture/src/env.rs, which says why; a test there
#: fails if the two differ).
DEFAULT_MAX_ENTRIES = 1_000_000
#: The recording in progress: PyTorch's recorder is one per process.
_current: Optional["Recording"] = None
#: PyTorch has no way to detach an out-of-memory observer: one is attached, once, and it
#: writes the snapshot of whichever recording is in progress.
_observer_attached = False


def _on_oom(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    """PyTorch calls this when an allocation fails, before it raises ``OutOfMemoryError``."""
    rec = _current
    if rec is not None and rec.dump_on_oom:
        rec._dump()
        rec.oom = True


def _torch() -> ModuleType:
    """PyTorch, with CUDA, or a :class:`MemscapeError` that says what is missing."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise MemscapeError(
            f"memscape.record needs PyTorch, which cannot be imported here ({e}): "
            "install a CUDA build of torch, or record elsewhere and open the snapshot with memscape.show"
        ) from None
    if not torch.cuda.is_available():
        raise MemscapeError(
            f"memscape.record needs CUDA, but torch.cuda.is_available() is False here (torch {torch.__version__}): "
            "it records PyTorch's CUDA allocator, so run it on a machine with an NVIDIA GPU and a CUDA build of torch"
        )
    return torch


class Recording(contextlib.ContextDecorator):
    """What :func:`record` returns: a context manager (and decorator) that records PyTorch's
    CUDA allocator while it is active."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], max_entries: int, stacks: str, dump_on_oom: bool) -> None:
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks is 'python' or 'all' (Python and C++ frames), not {stacks!r}")
        if max_entries <= 0:
            raise ValueError(f"max_entries must be positive, not {max_entries}")
        #: Where the snapshot is written.
        self.path = Path(path)
        self.max_entries = max_entries
        self.stacks = stacks
        self.dump_on_oom = dump_on_oom
        #: True once an out-of-memory error was recorded and its snapshot written.
        self.oom = False
        self._torch: Optional[ModuleType] = None

    def _dump(self) -> None:
        torch = self._torch
        if torch is not None:
            torch.cuda.memory._dump_snapshot(str(self.path))

    def __enter__(self) -> "Recording":
        global _current, _observer_attached
        torch = _torch()
        if _current is not None:
            raise MemscapeError(f"memscape.record is already recording (to {_current.path}): PyTorch has one recorder")
        if not self.path.parent.is_dir():
            raise MemscapeError(f"{self.path}: its directory does not exist")
        if self.dump_on_oom and not _observer_attached:
            torch._C._cuda_attach_out_of_memory_observer(_on_oom)
            _observer_attached = True
        self._torch = torch
        self.oom = False
        torch.cuda.memory._record_memory_history(enabled="all", stacks=self.stacks, max_entries=self.max_entries)
        _current = self
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        global _current
        torch = self._torch
        assert torch is not None
        try:
            # The out-of-memory error leaving the block was written when it happened: keep
            # that snapshot (the memory at the failure), not one taken after the unwinding.
            if not (self.oom and isinstance(exc, _oom_error(torch))):
                self._dump()
        finally:
            _current = None
            torch.cuda.memory._record_memory_history(enabled=None)

    def __repr__(self) -> str:
        return f"<memscape recording to {self.path}>"


def _oom_error(torch: ModuleType) -> Any:
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def record(
    path: Union[str, "os.PathLike[str]"],
    max_entries: int = DEFAULT_MAX_ENTRIES,
    stacks: str = "python",
    dump_on_oom: bool = True,
) -> Recording:
    """Records PyTorch's CUDA allocator while the block runs and writes the snapshot to
    ``path`` (what ``torch.cuda.memory._dump_snapshot`` writes: open it with :func:`show`,
    ``memscape stats``, the viewer or pytorch.org/memory_viz).

    PyTorch's recipe in one place: ``torch.cuda.memory._record_memory_history`` with
    ``max_entries`` (the newest events kept; older ones drop out of the trace, what they
    allocated stays in the snapshot) and ``stacks`` (``"python"``: Python frames, cheap;
    ``"all"``: Python and C++ frames, slower), then the snapshot when the block ends, and
    recording stopped. With ``dump_on_oom``, an out-of-memory error writes the snapshot at
    the moment of the failure (PyTorch's out-of-memory observer), before the exception
    propagates; that snapshot is kept when the exception leaves the block (when the block
    catches it and goes on, the snapshot at the end replaces it). One recording at a
    time (PyTorch has one recorder per process).

    Raises :class:`MemscapeError` when PyTorch or CUDA is missing, or ``path``'s directory
    does not exist.

    >>> with memscape.record("step.pickle"):        # doctest: +SKIP
    ...     loss = model(batch).sum(); loss.backward(); optimizer.step()
    >>> memscape.show("step.pickle")                 # doctest: +SKIP
    """
    return Recording(path, max_entries, stacks, dump_on_oom)
