"""Finding and running the ``memscape`` program that the wheel installs beside this package."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import subprocess
import sysconfig
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

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


def run(args: Sequence[str], stdin: Optional[bytes] = None, ok: Tuple[int, ...] = (0,)) -> bytes:
    """Runs ``memscape ARGS`` and returns its standard output; its error (an exit status not in
    ``ok``) as :class:`MemscapeError`."""
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
    if done.returncode not in ok:
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


@contextlib.contextmanager
def _path(snapshot: Snapshot) -> Iterator[str]:
    """A path to hand the program for ``snapshot``: its own, or a temporary file with its bytes
    (removed afterwards) for commands that read more than one file or no standard input."""
    arg, stdin, name = _source(snapshot)
    if stdin is None:
        yield arg
        return
    with tempfile.TemporaryDirectory(prefix="memscape-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(stdin)
        yield str(path)


def doctor(snapshot: Snapshot, device: Optional[int] = None) -> Dict[str, Any]:
    """The report of ``memscape doctor --json`` for ``snapshot``, as a dict: every
    out-of-memory error with the allocator's figures just before it, a verdict
    (``exhausted``, ``fragmentation``, ``other_limit``) and why, who holds the memory, advice
    with predicted effects; the peak and its headroom; the what-if table.

    >>> r = memscape.doctor("oom.pickle")            # doctest: +SKIP
    >>> r["ooms"][0]["verdict"]                      # doctest: +SKIP
    'fragmentation'
    """
    with _path(snapshot) as p:
        args = ["doctor", "--json", p] + (["--device", str(device)] if device is not None else [])
        out: Dict[str, Any] = json.loads(run(args))
    return out


def diff(a: Snapshot, b: Snapshot, device: Optional[int] = None) -> Dict[str, Any]:
    """``memscape diff --json`` of two runs (snapshots or ``memscape profile`` files): peaks,
    categories at each peak, the call sites alive at the peaks whose bytes changed, allocations
    made a different number of times, segments only in one."""
    with _path(a) as pa, _path(b) as pb:
        args = ["diff", "--json", pa, pb] + (["--device", str(device)] if device is not None else [])
        out: Dict[str, Any] = json.loads(run(args))
    return out


def check(
    run_snapshot: Snapshot,
    baseline: Optional[Snapshot] = None,
    max_peak: Optional[Union[int, str]] = None,
    max_growth: Optional[float] = None,
    max: Optional[Mapping[str, Union[int, str]]] = None,  # noqa: A002
    device: Optional[int] = None,
) -> Dict[str, Any]:
    """``memscape check --format json``: the run's peak (``max_peak``, bytes or ``"70G"``), its
    growth over ``baseline`` in percent (``max_growth``) and its categories at the peak
    (``max={"activation": "30G"}``) against limits. Returns the outcome (``passed``, each
    budget measured, the call sites that grew most); a failed budget is an answer, not an
    error.

    >>> memscape.check("run.pickle", baseline="main.pickle", max_growth=2)["passed"]  # doctest: +SKIP
    True
    """
    with contextlib.ExitStack() as stack:
        args = ["check", stack.enter_context(_path(run_snapshot)), "--format", "json"]
        if baseline is not None:
            args += ["--baseline", stack.enter_context(_path(baseline))]
        if max_peak is not None:
            args += ["--max-peak", str(max_peak)]
        if max_growth is not None:
            args += ["--max-growth", str(max_growth)]
        for category, limit in (max or {}).items():
            args += ["--max", f"{category}={limit}"]
        if device is not None:
            args += ["--device", str(device)]
        out: Dict[str, Any] = json.loads(run(args, ok=(0, 1)))
    return out


def skill() -> str:
    """The agent skill (``SKILL.md``, Agent Skills format) that ``memscape skill`` prints: how
    to record a snapshot, which command or MCP tool answers which question, how to read the
    doctor."""
    return run(["skill"]).decode()
