"""The viewer: inline in notebooks (:func:`show`) or in the browser (:func:`open`)."""

from __future__ import annotations

import builtins
import html
import os
import tempfile
import webbrowser
from pathlib import Path
from typing import Optional, Union

from ._cli import Snapshot, Source, _source, run

#: What the notebook frame may do: run scripts (the viewer) and download (*Save offline HTML*,
#: *Export PNG*); it may also write to the clipboard (*Copy stack*). No ``allow-same-origin``:
#: the viewer runs in an origin of its own, so it cannot reach the notebook page, the Jupyter
#: server or its cookies, and it keeps nothing between sessions (its category rules live only
#: as long as the output).
SANDBOX = "allow-scripts allow-downloads"


def page(snapshot: Snapshot, name: Optional[str] = None) -> str:
    """The offline page of ``snapshot``: one HTML document with the viewer and the snapshot
    (gzipped, base64) inside, and a Content-Security-Policy that allows no connection at all.
    What ``memscape html`` writes; ``name`` is what the viewer calls the snapshot."""
    return _page(_source(snapshot), name)


def _page(source: Source, name: Optional[str]) -> str:
    arg, stdin, shown = source
    return run(["html", arg, "-o", "-", "--name", name or shown], stdin).decode("utf-8")


class Viewer:
    """The viewer with one snapshot, as Jupyter (or anything that calls ``_repr_html_``)
    shows it: the offline page in an ``<iframe srcdoc>``. Nothing is fetched and nothing is
    written to disk; :meth:`save` writes the page when asked."""

    def __init__(self, page_html: str, height: Union[int, str] = 720, name: str = "snapshot") -> None:
        #: The offline page (a whole HTML document).
        self.html = page_html
        #: The frame's height: pixels, or any CSS length (``"80vh"``).
        self.height = height
        self.name = name

    def _repr_html_(self) -> str:
        height = f"{self.height}px" if isinstance(self.height, int) else str(self.height)
        return (
            f'<iframe class="memscape" title="memscape: {html.escape(self.name)}" '
            f'sandbox="{SANDBOX}" allow="clipboard-write" style="width:100%;height:{html.escape(height)};border:0" '
            f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>'
        )

    def save(self, path: Union[str, "os.PathLike[str]"]) -> Path:
        """Writes the offline page to ``path`` (it opens from disk, offline) and returns it."""
        out = Path(path)
        out.write_text(self.html, encoding="utf-8")
        return out

    def __repr__(self) -> str:
        return f"<memscape viewer of {self.name} ({len(self.html):,} bytes of HTML)>"


def show(snapshot: Snapshot, height: Union[int, str] = 720, name: Optional[str] = None) -> Viewer:
    """Shows ``snapshot`` in the viewer, inline in a notebook (make it the last expression of
    a cell, or pass it to ``IPython.display.display``).

    ``snapshot`` is a path, bytes, or the dict ``torch.cuda.memory._snapshot()`` returns
    (pickled in memory and piped to the ``memscape`` program: never written to disk).
    ``height`` is the frame's height in pixels or a CSS length; ``name`` what the viewer calls
    the snapshot (default: the file's name, or ``snapshot.pickle``).

    >>> memscape.show("run.pickle", height=600)                  # doctest: +SKIP
    >>> memscape.show(torch.cuda.memory._snapshot())             # doctest: +SKIP
    """
    source = _source(snapshot)
    return Viewer(_page(source, name), height, name or source[2])


def open(snapshot: Snapshot, name: Optional[str] = None, browser: bool = True) -> Path:  # noqa: A001
    """Writes the offline page of ``snapshot`` to a temporary file, opens it in the system's
    browser (``webbrowser``; ``$BROWSER`` chooses another) unless ``browser`` is false, and
    returns the file's path. The page opens from disk and makes no request."""
    source = _source(snapshot)
    text = _page(source, name)
    fd, tmp = tempfile.mkstemp(prefix="memscape-", suffix=f"-{_safe(name or source[2])}.html")
    with builtins.open(fd, "w", encoding="utf-8") as f:
        f.write(text)
    path = Path(tmp)
    if browser:
        webbrowser.open(path.as_uri())
    return path


def _safe(name: str) -> str:
    """A file-name-safe version of ``name`` for the temporary file."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80] or "snapshot"
