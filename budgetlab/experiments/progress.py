"""Progress on long work: one updating line while a sweep, a capacity search or the tuner runs.

Every long experiment takes ``progress=`` (a :data:`ProgressSpec`):

* ``None`` (the default, automatic): in a Jupyter kernel, a single line that updates in place
  (an IPython display handle) and is blanked when the work ends, so a rendered report keeps
  nothing of it; on a terminal (stderr is a TTY), a line on stderr redrawn with ``\\r`` and
  erased at the end; otherwise (a script piped to a file, a test, a worker) nothing;
* ``True``: the same line even where the automatic choice shows nothing (on stderr outside a
  kernel);
* ``False``: nothing;
* a callable: called as ``progress(done, total, label)`` after every unit of work and once
  at the start (``done`` and ``total`` counts, ``label`` what is being done, such as
  ``"budgetlab tune: budget search"``); nothing is drawn.

:func:`progress_reporter` turns a spec into a :class:`ProgressReporter`; a long function makes
one, calls :meth:`ProgressReporter.update` as work completes and :meth:`ProgressReporter.close`
at the end (it is a context manager). No dependency beyond IPython, which a kernel has loaded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeAlias

from budgetlab._checks import is_flag
from budgetlab.errors import ParameterError

__all__ = [
    "ProgressSpec",
    "ProgressCallback",
    "ProgressReporter",
    "progress_reporter",
    "check_progress",
    "progress_text",
    "REDRAW_INTERVAL_S",
]

ProgressCallback: TypeAlias = Callable[[int, int, str], object]
"""``callback(done, total, label)``: ``done`` of ``total`` units finished [count]."""

ProgressSpec: TypeAlias = bool | ProgressCallback | None
"""What ``progress=`` accepts: ``None`` (automatic), ``True``, ``False`` or a callback."""

REDRAW_INTERVAL_S = 0.2
"""A drawn line is redrawn at most this often [s] (the last update always shows)."""


def check_progress(progress: object) -> ProgressSpec:
    """``progress`` if it is ``None``, a bool or a callable.

    Raises
    ------
    ParameterError
        Anything else (a string, a number).
    """
    if progress is None or is_flag(progress) or callable(progress):
        return progress  # type: ignore[return-value]
    raise ParameterError(
        "progress must be True, False, None (automatic: a line in Jupyter or on a terminal) or a "
        f"callable (done, total, label), got {progress!r}"
    )


def progress_text(done: int, total: int, label: str, elapsed_s: float) -> str:
    """The drawn line: ``"budgetlab tune: budget search 3/5 (60 %), 12 s"``.

    Parameters
    ----------
    done, total : int
        Units finished and in all [count] (``total`` 0: no percentage).
    label : str
        What is being done.
    elapsed_s : float
        Time since the work started [s].
    """
    share = f" ({100 * done / total:.0f} %)" if total > 0 else ""
    return f"{label} {done:,}/{total:,}{share}, {elapsed_s:.0f} s"


def _in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (IPython loaded with a kernel attached)."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - ipykernel always brings IPython
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _stderr_is_a_tty() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


class ProgressReporter:
    """Reports ``done`` of ``total`` for one piece of work (see the module docstring).

    Use :func:`progress_reporter` to make one. :meth:`update` and :meth:`close` may be called
    any number of times; after :meth:`close` updates are ignored.

    Parameters
    ----------
    label : str
        What is being done (the default label of every update).
    callback : callable or None
        Called with ``(done, total, label)``.
    draw : {"jupyter", "stderr", None}
        Where the line is drawn.
    """

    def __init__(self, label: str, *, callback: ProgressCallback | None = None, draw: str | None = None) -> None:
        self.label = label
        self._callback = callback
        self._draw = draw
        self._start_s = time.monotonic()
        self._last_draw_s = -float("inf")
        self._handle: Any = None
        self._width = 0
        self._closed = False
        self.done, self.total = 0, 0

    @property
    def active(self) -> bool:
        """Whether updates go anywhere."""
        return not self._closed and (self._callback is not None or self._draw is not None)

    def update(self, done: int, total: int, label: str | None = None) -> None:
        """Report ``done`` of ``total`` units [count] (``label``: what is being done from now on)."""
        if self._closed:
            return
        self.done, self.total = int(done), int(total)
        if label is not None:
            self.label = label
        text_label = self.label
        if self._callback is not None:
            self._callback(self.done, self.total, text_label)
        if self._draw is None:
            return
        now = time.monotonic()
        if now - self._last_draw_s < REDRAW_INTERVAL_S and self.done < self.total:
            return
        self._last_draw_s = now
        self._show(progress_text(self.done, self.total, text_label, now - self._start_s))

    def _show(self, text: str) -> None:
        if self._draw == "jupyter":
            from IPython.display import display

            data = {"text/plain": text}
            if self._handle is None:
                self._handle = display(data, raw=True, display_id=True)
            else:
                self._handle.update(data, raw=True)
        elif self._draw == "stderr":
            pad = " " * max(0, self._width - len(text))
            sys.stderr.write("\r" + text + pad)
            sys.stderr.flush()
            self._width = len(text)

    def advance(self, count: int = 1, *, total: int | None = None, label: str | None = None) -> None:
        """Report ``count`` more units done (``total``: a new total, when it grew; never below
        the units done) [count]."""
        done = self.done + count
        self.update(done, max(done, self.total if total is None else total), label)

    def finish(self, label: str | None = None) -> None:
        """Report the work complete (``done`` of ``done``), e.g. when an estimate of the total
        was too high."""
        self.update(self.done, self.done, label)

    def close(self) -> None:
        """End the line: a Jupyter line is blanked, a terminal line erased."""
        if self._closed:
            return
        self._closed = True
        if self._draw == "jupyter" and self._handle is not None:
            self._handle.update({"text/plain": ""}, raw=True)
        elif self._draw == "stderr" and self._width:
            sys.stderr.write("\r" + " " * self._width + "\r")
            sys.stderr.flush()

    def __enter__(self) -> ProgressReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_reporter(progress: object, label: str, *, min_total: int = 0, total: int = 0) -> ProgressReporter:
    """The reporter a ``progress=`` argument asks for.

    Parameters
    ----------
    progress : None, bool or callable
        See :data:`ProgressSpec`.
    label : str
        What is being done, e.g. ``"budgetlab sweep"``.
    min_total : int
        With ``progress=None``, draw nothing for work of fewer than this many units [count]
        (a short sweep finishes before a line helps); a callback is always called.
    total : int
        Units of work, when known up front [count].

    Raises
    ------
    ParameterError
        ``progress`` is not ``None``, a bool or a callable.
    """
    spec = check_progress(progress)
    if spec is None:
        draw = None
        if total >= min_total:
            draw = "jupyter" if _in_kernel() else ("stderr" if _stderr_is_a_tty() else None)
        return ProgressReporter(label, draw=draw)
    if is_flag(spec):
        return ProgressReporter(label, draw=("jupyter" if _in_kernel() else "stderr") if spec else None)
    return ProgressReporter(label, callback=spec)  # type: ignore[arg-type]
