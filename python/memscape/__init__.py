"""memscape: understand where your GPU memory goes, from Python and in notebooks.

The package is a thin layer over the ``memscape`` command installed beside it (the same
wheel): every snapshot is read by that native program, never by Python, so a snapshot of any
size is read at native speed in its own process, a bad file cannot take the notebook's kernel
down with it, and the package needs nothing beyond the standard library. PyTorch is imported
only by :func:`record`.

- :func:`show` shows the viewer inline in Jupyter (the offline page in an ``<iframe srcdoc>``:
  no network, no server, nothing written to disk).
- :func:`open` writes the offline page to a temporary file and opens it in the browser
  (``python -m memscape FILE`` does the same).
- :func:`predict` runs a block of PyTorch code on the CPU as if on a GPU and writes the
  snapshot it would record there (``memscape predict -- COMMAND`` does it for a program).
- :func:`record` records PyTorch's allocator around a block of code and writes the snapshot
  when the block ends, or at an out-of-memory error before the exception propagates.
- :func:`stats`, :func:`doctor`, :func:`diff` and :func:`check` return the JSON of
  ``memscape stats``, ``doctor``, ``diff`` and ``check`` as dicts, for notebooks, scripts and
  CI; :func:`skill` the agent skill (``SKILL.md``).

A snapshot is a path, the bytes of a snapshot file, or the dict (or the legacy list of
segments) that ``torch.cuda.memory._snapshot()`` returns. Bytes and dicts are handed to the
program through a pipe.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from ._cli import MemscapeError, Snapshot, binary, check, diff, doctor, skill, stats
from ._predict import Prediction, predict
from ._record import Recording, record
from ._view import Viewer, open, page, show

try:
    __version__ = _metadata.version("memscape")
except _metadata.PackageNotFoundError:  # imported from the source tree
    __version__ = "0+source"

__all__ = [
    "MemscapeError",
    "Snapshot",
    "Prediction",
    "Recording",
    "Viewer",
    "binary",
    "check",
    "diff",
    "doctor",
    "open",
    "page",
    "predict",
    "record",
    "show",
    "skill",
    "stats",
]
