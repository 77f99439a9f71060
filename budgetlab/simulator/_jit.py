"""Compiling the engine core: numba's ``njit``, cached on disk under a key of the core's sources.

:func:`core_jit` is ``numba.njit(cache=True)`` with the cache in a folder of its own,
``<cache root>/core-<hash>``, where the hash covers the source of every module the compiled
core is made of (:data:`CORE_MODULES`) and the Python, numba and NumPy versions. numba checks a
cached function against its own file only, so a change in a function it calls from another file
would otherwise go unnoticed; with the hash in the folder's name, any change of the core
compiles afresh (and folders unused for a week are removed). The cache root is, in order:
``BUDGETLAB_CACHE_DIR``; ``$XDG_CACHE_HOME/budgetlab`` or ``~/.cache/budgetlab`` when it can be
written (a wheel's install folder may not be); else a folder in the system's temporary
directory. Only the first run on a machine compiles; a new process loads the compiled core
from there (the README gives both times).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numba.core import config

__all__ = ["CORE_MODULES", "core_jit", "cache_dir"]

F = TypeVar("F", bound=Callable[..., Any])

_HERE = Path(__file__).resolve().parent
#: The files whose source the compiled core is made of.
CORE_MODULES = (
    _HERE / "core_state.py",
    _HERE / "core_pool.py",
    _HERE / "core.py",
    _HERE / "core_runs.py",
    _HERE / "core_cost.py",
    _HERE / "core_loop.py",
    _HERE / "core_steps.py",
    _HERE / "plan.py",
    _HERE.parent / "admission.py",
)


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError:
        return False
    return True


@cache
def cache_dir() -> Path:
    """The folder the compiled core is cached in (see the module docstring)."""
    digest = hashlib.sha256(f"{sys.version} numba {numba.__version__} numpy {np.__version__}".encode())
    for module in CORE_MODULES:
        digest.update(module.read_bytes())
    name = f"core-{digest.hexdigest()[:16]}"
    explicit = os.environ.get("BUDGETLAB_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME")
    roots = [Path(explicit)] if explicit else []
    roots += [Path(xdg) / "budgetlab" if xdg else Path.home() / ".cache" / "budgetlab"]
    roots += [Path(tempfile.gettempdir()) / f"budgetlab-{os.getuid() if hasattr(os, 'getuid') else 'user'}"]
    for root in roots:
        if _writable(root / name):
            os.utime(root / name)  # in use: a week from now, another version may remove it
            for old in root.glob("core-*"):
                if old.name != name and _stale(old):
                    shutil.rmtree(old, ignore_errors=True)
            return root / name
    return roots[-1] / name  # numba falls back to its own locations if this cannot be written either


def _stale(folder: Path) -> bool:
    """Whether a cache folder of another version was last used more than a week ago (another
    environment on the machine may still use a recent one)."""
    try:
        return time.time() - folder.stat().st_mtime > 7 * 24 * 3600
    except OSError:
        return False


def core_jit(func: F) -> F:
    """``numba.njit(cache=True)(func)``, cached in :func:`cache_dir`."""
    settings: Any = config  # numba's settings module (its names are set at import)
    saved = settings.CACHE_DIR
    settings.CACHE_DIR = str(cache_dir())
    try:
        return cast(F, numba.njit(cache=True)(func))
    finally:
        settings.CACHE_DIR = saved
