"""Publishing a render: staged files moved into place together with the index, or nothing.

A report is written into a staging folder beside its place (``.budgetlab-staging-<notebook>.*``
in ``reports/<scenario>/``) and published by :func:`commit`, which moves every staged file, and
the index rewritten for it, into place as one step: a failure part-way (an ``OSError``: a full
disk, a folder made read-only) puts back every file it had replaced, and a Ctrl-C or SIGTERM
that arrives meanwhile is held until the step is done (:func:`signals_held`). Renders of one
folder take turns at publishing under :func:`folder_lock`, an ``flock`` on the folder itself,
which leaves no lock file behind.

Each staging folder holds an ``flock`` on its ``.owner`` file for as long as its render lives
(:class:`Staging`); the operating system drops it when the process ends however it ends, so
:func:`remove_stale_staging` removes exactly the staging folders whose render is gone (killed,
or stopped by a power cut) and never one a live render is writing.

Every file is written whole or not at all (:func:`write_atomically`): a temporary file beside
it, then ``os.replace``; temporary files are made with mode ``0o666`` less the umask, as any
file the user writes (``tempfile.mkstemp`` would make them ``0o600``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: renders of one folder from one process only
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "STAGING_PREFIX",
    "Staging",
    "commit",
    "folder_lock",
    "remove_stale_staging",
    "RenderInterrupted",
    "signals_held",
    "stop_on_signals",
    "write_atomically",
]

STAGING_PREFIX = ".budgetlab-staging-"
"""How every staging folder's name starts (hidden; only folders holding :data:`OWNER` count)."""
OWNER = ".owner"
LEGACY_LOCK = "index.lock"
"""The lock file earlier versions left in ``reports/``; removed at the start of a render."""

_PROCESS_LOCK = threading.Lock()  # without fcntl: one render at a time in this process


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` itself (created if missing); no file is left.

    Two renders of one folder, in threads or processes, never merge the index or publish a
    report at the same time. Without ``fcntl`` (Windows), a lock within this process only.
    """
    folder.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        with _PROCESS_LOCK:
            yield
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` whole: a temporary file beside it, then
    ``os.replace``. On any failure the temporary file is removed and ``path`` is untouched.

    The file gets mode ``0o666`` less the umask (``0o644`` under the usual umask ``022``).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM that arrive inside the block; deliver them when it is done.

    Only the main thread runs Python's signal handlers, so elsewhere this does nothing (a
    signal then waits for the main thread anyway). An ignored signal stays ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    for which in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(which) not in (signal.SIG_IGN, None):
            previous[which] = signal.signal(which, lambda received, frame: caught.append(received))
    try:
        yield
    finally:
        for which, handler in previous.items():
            signal.signal(which, handler)
    _deliver(list(dict.fromkeys(caught)))  # each once, in the order they came


def _deliver(signums: list[int]) -> None:
    """Raise each signal in turn; an exception a handler raises (KeyboardInterrupt) comes
    after every one was delivered."""
    if signums:
        try:
            signal.raise_signal(signums[0])
        finally:
            _deliver(signums[1:])


def _keep_copy(path: Path, backup: Path) -> None:
    try:
        os.link(path, backup)  # the old file itself, no copy (same folder tree)
    except OSError:
        shutil.copy2(path, backup)


def commit(changes: Mapping[Path, Path | None], backup_dir: Path) -> None:
    """Make every destination hold its staged file, or be absent (``None``): all or none.

    Each old file is first kept in ``backup_dir`` (a hard link, else a copy); when a move fails
    with an ``OSError`` every destination changed so far is put back as it was before the error
    is raised. SIGINT and SIGTERM are held meanwhile (:func:`signals_held`).

    Raises
    ------
    OSError
        The first move that failed (after the rollback).
    """
    backup_dir.mkdir(exist_ok=True)
    done: list[tuple[Path, Path | None]] = []
    with signals_held():
        try:
            for number, (destination, staged) in enumerate(changes.items()):
                backup: Path | None = None
                if os.path.lexists(destination):
                    backup = backup_dir / str(number)
                    _keep_copy(destination, backup)
                if staged is not None:
                    os.replace(staged, destination)
                elif backup is not None:
                    destination.unlink()
                done.append((destination, backup))
        except OSError:
            for destination, backup in reversed(done):
                with contextlib.suppress(OSError):
                    if backup is not None:
                        os.replace(backup, destination)
                    else:
                        destination.unlink(missing_ok=True)
            raise


class Staging:
    """A render's staging folder in ``folder``, owned (``flock`` on its ``.owner``) until
    :meth:`close` removes it.

    Raises
    ------
    OSError
        When the folder cannot be made (a full disk, a read-only folder).
    """

    def __init__(self, folder: Path, notebook: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{notebook}.", dir=folder))
        self._fd: int | None = None
        try:
            # locked under a temporary name, then renamed: a cleaner never sees it unlocked
            claim = self.path / f"{OWNER}.{os.getpid()}"
            self._fd = os.open(claim, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(claim, self.path / OWNER)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Remove the folder and everything in it; then release it."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove_owned(staging: Path) -> None:
    """Remove a staging folder, its ``.owner`` last: a removal cut short stays recognisable."""
    for entry in staging.iterdir():
        if entry.name != OWNER:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)


def remove_stale_staging(folder: Path) -> list[Path]:
    """Remove the staging folders in ``folder`` whose render is gone; the removed paths.

    Only folders named ``.budgetlab-staging-*`` that hold an ``.owner`` file count, and one is
    removed only while this call holds the ``flock`` on its ``.owner`` (no live render holds
    it). Without ``fcntl`` (Windows) nothing is removed: no render's liveness can be told.
    """
    removed: list[Path] = []
    if fcntl is None or not folder.is_dir():
        return removed
    for candidate in sorted(folder.glob(f"{STAGING_PREFIX}*")):
        if candidate.is_symlink() or not candidate.is_dir():
            continue
        try:
            fd = os.open(candidate / OWNER, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue  # not ours, or being made right now
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live render owns it
            with contextlib.suppress(OSError):
                _remove_owned(candidate)
                removed.append(candidate)
        finally:
            os.close(fd)
    return removed


class RenderInterrupted(KeyboardInterrupt):
    """A render stopped by SIGINT (Ctrl-C) or SIGTERM, after it put everything back in order:
    each report and its index entry are as before or wholly new, no staging folder is left.

    Attributes
    ----------
    signum : int
        The signal that stopped it (``signal.SIGINT`` or ``signal.SIGTERM``).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals(cancelled: threading.Event) -> Iterator[list[int]]:
    """While inside, SIGINT and SIGTERM set ``cancelled`` and are listed (in the main thread;
    an ignored signal stays ignored), so the render can stop its work and tidy up first."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: object) -> None:
        received.append(signum)
        cancelled.set()

    previous: dict[signal.Signals, Any] = {}
    for which in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(which) not in (signal.SIG_IGN, None):
            previous[which] = signal.signal(which, handler)
    try:
        yield received
    finally:
        for which, old in previous.items():
            signal.signal(which, old)
