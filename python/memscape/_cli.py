"""Finding and running the ``memscape`` program that the wheel installs beside this package."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

#: What the functions of this package accept as a snapshot: a path to a snapshot file (a
#: pickle, ``.pickle.gz``, ``.pickle.zst``, JSON, or a ``_memory_viz.py`` HTML page), its bytes,
#: or the dict (or legacy list) that ``torch.cuda.memory._snapshot()`` returns.
Snapshot = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Dict[str, Any], List[Any]]

_EXE = "memscape" + (sysconfig.get_config_var("EXE") or "")


class MemscapeError(RuntimeError):
    """The ``memscape`` program failed (an unreadable snapshot, a missing file, ...), or it, or
    PyTorch with CUDA for :func:`memscape.record`, cannot be found. The message says which
    file and what was wrong."""


def binary() -> Path:
    """The ``memscape`` program this package runs.

    ``$MEMSCAPE_BIN`` when set; else the one this package's wheel installed (found through
    the wheel's record of its files, so any install scheme works: a virtual environment,
    ``--user``, ``--prefix``, ``--target``); else the scripts directories of this Python;
    else ``memscape`` on ``$PATH``.
    """
    override = os.environ.get("MEMSCAPE_BIN")
    if override:
        return Path(override)
    candidates: List[Path] = []
    try:
        dist = metadata.distribution("memscape")
        for f in dist.files or ():
            if f.name == _EXE and f.parent.name in ("bin", "Scripts", "scripts"):
                candidates.append(Path(str(dist.locate_file(f))))
    except metadata.PackageNotFoundError:
        pass
    schemes = [sysconfig.get_default_scheme()] if hasattr(sysconfig, "get_default_scheme") else []
    schemes.append("nt_user" if os.name == "nt" else "posix_user")
    for scheme in schemes:
        try:
            candidates.append(Path(sysconfig.get_path("scripts", scheme)) / _EXE)
        except KeyError:
            pass
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    found = shutil.which(_EXE)
    if found:
        return Path(found)
    raise MemscapeError(
        "the memscape program is not installed: install the memscape wheel "
        "(pip install memscape-*.whl) or set MEMSCAPE_BIN to a memscape built with scripts/site"
    )


#: A snapshot as handed to the program: its argument, what goes to its standard input, and
#: the name the viewer shows.
Source = Tuple[str, Optional[bytes], str]


def _source(snapshot: Snapshot) -> Source:
    """``(argument, stdin, shown name)`` for handing ``snapshot`` to the program: a path as
    itself, bytes and dicts through standard input (``-``), dicts pickled in memory."""
    if isinstance(snapshot, (str, os.PathLike)):
        path = Path(os.fspath(snapshot))
        if not path.is_file():
            raise MemscapeError(f"{path}: no such file")
        # Absolute, so that no file name reads as an option or as `-` (standard input).
        return str(path.absolute()), None, path.name
    if isinstance(snapshot, (bytes, bytearray, memoryview)):
        return "-", bytes(snapshot), "snapshot"
    if isinstance(snapshot, (dict, list)):
        # What torch.cuda.memory._dump_snapshot writes, without the file.
        return "-", pickle.dumps(snapshot, protocol=4), "snapshot.pickle"
    raise TypeError(
        f"a snapshot is a path, bytes, or the dict torch.cuda.memory._snapshot() returns, not {type(snapshot).__name__}"
    )


def run(args: Sequence[str], stdin: Optional[bytes] = None) -> bytes:
    """Runs ``memscape ARGS`` and returns its standard output; its error as :class:`MemscapeError`."""
    exe = binary()
    try:
        done = subprocess.run(
            [str(exe), *args],
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as e:
        raise MemscapeError(f"cannot run {exe}: {e}") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        message = message[len("memscape: "):] if message.startswith("memscape: ") else message
        raise MemscapeError(message or f"{exe} {' '.join(args)} failed with exit status {done.returncode}")
    return done.stdout


def stats(snapshot: Snapshot) -> Dict[str, Any]:
    """The figures of ``memscape stats --json`` for ``snapshot``, as a dict.

    The top level equals ``_memory_viz.py stats`` (``segments``, ``total_reserved``,
    ``total_allocated``, ``free_internal``, ``free_external``); ``devices`` has each device's
    trace entries, reserved bytes and its allocation and segment timelines (elements, peak,
    final bytes); ``categories`` what the memory is for at each device's peak, the budget,
    the training iterations and leak suspects.

    It runs the ``memscape`` program rather than an extension module: one native program does
    everything (the viewer, ``html``, ``capture``), the wheel fits every Python 3 version, a
    snapshot of any size is read outside the interpreter's memory, and a hostile file can at
    worst fail that process, never the kernel.

    >>> s = memscape.stats("run.pickle")            # doctest: +SKIP
    >>> s["devices"][0]["timeline"]["peak_bytes"]   # doctest: +SKIP
    22827925508
    """
    arg, stdin, _ = _source(snapshot)
    out: Dict[str, Any] = json.loads(run(["stats", "--json", arg], stdin))
    return out
