"""JupyterLab as budgetlab starts it (``make lab``): on this machine only, nothing from the network.

``python -m budgetlab.notebook.lab [FOLDER] [JUPYTER-LAB OPTION ...]`` runs ``jupyter lab`` on
FOLDER (default ``notebooks``) with the options of :func:`lab_arguments`:

* the server listens on 127.0.0.1 only, not on every interface;
* the news feed (``LabApp.news_url``, fetched from jupyterlab.github.io) and the update check
  (``LabApp.check_for_updates_class``) are off, so the server asks nothing of the internet;
* as root (a container, a CI box) ``--allow-root`` is added, which Jupyter Server otherwise
  refuses to start without.

Charts need no network either: :mod:`budgetlab.notebook.altair_setup` emits the Vega 5 spec
JupyterLab draws with the Vega it ships. The browser test ``tests/test_jupyterlab.py`` starts
JupyterLab through :func:`lab_arguments` too, so what it checks is what ``make lab`` runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LOOPBACK", "lab_arguments", "main"]

#: The only address JupyterLab listens on.
LOOPBACK = "127.0.0.1"

_NO_UPDATE_CHECK = "jupyterlab.handlers.announcements.NeverCheckForUpdate"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_arguments(
    root_dir: str | Path, *, port: int | None = None, token: str | None = None, open_browser: bool = True
) -> list[str]:
    """The ``jupyter lab`` command-line options budgetlab runs it with.

    Parameters
    ----------
    root_dir : str or Path
        The folder JupyterLab shows (``ServerApp.root_dir``).
    port : int, optional
        The port to listen on; default Jupyter's (8888, or the next free one).
    token : str, optional
        The login token; default a random one that Jupyter prints.
    open_browser : bool
        Whether Jupyter opens a browser tab (off for tests).

    Returns
    -------
    list of str
        Options for ``python -m jupyterlab``.
    """
    arguments = [
        f"--ServerApp.ip={LOOPBACK}",
        f"--ServerApp.root_dir={Path(root_dir)}",
        "--LabApp.news_url=None",
        f"--LabApp.check_for_updates_class={_NO_UPDATE_CHECK}",
    ]
    if port is not None:
        arguments += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if token is not None:
        arguments.append(f"--IdentityProvider.token={token}")
    if not open_browser:
        arguments.append("--ServerApp.open_browser=False")
    if _is_root():
        arguments.append("--allow-root")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    """Replace this process with ``python -m jupyterlab`` and budgetlab's options.

    The first argument, when it is not an option, is the folder to show; every other argument
    goes to ``jupyter lab`` unchanged, after budgetlab's options, so it can override them.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    root_dir = args.pop(0) if args and not args[0].startswith("-") else "notebooks"
    if not Path(root_dir).is_dir():
        print(f"budgetlab lab: no folder {root_dir!r}; give the notebooks' folder, e.g. notebooks", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "jupyterlab", *lab_arguments(root_dir), *args]
    os.execv(sys.executable, command)
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(main())
