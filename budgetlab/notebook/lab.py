"""JupyterLab as budgetlab starts it (``make lab``): on this machine only, nothing from the network.

``python -m budgetlab.notebook.lab [FOLDER] [JUPYTER-LAB OPTION ...]`` runs ``jupyter lab`` on
FOLDER (default ``notebooks``) with the options of :func:`lab_arguments`:

* the server listens on 127.0.0.1 only, not on every interface;
* the news feed (``LabApp.news_url``, fetched from jupyterlab.github.io) and the update check
  (``LabApp.check_for_updates_class``) are off, so the server asks nothing of the internet;
* as root (a container, a CI box) ``--allow-root`` is added, which Jupyter Server otherwise
  refuses to start without.

and the environment of :func:`lab_environment`: :data:`JUPYTER_CONFIG_PATH_DIR` goes first on
``JUPYTER_CONFIG_PATH``. Its ``labconfig/default_setting_overrides.json`` (read by
``jupyterlab_server.settings_utils._get_overrides`` from every Jupyter config path) sets the
defaults of JupyterLab 4's ``@jupyterlab/apputils-extension:notification`` settings to
``fetchNews: "false"`` and ``checkForUpdates: false``. The server options alone do not stop
the toast "Would you like to get notified about official Jupyter news?": the
``@jupyterlab/apputils-extension:announcements`` plugin shows it in the browser whenever
``fetchNews`` is ``"none"`` (its shipped default, "Ask"), whatever ``news_url`` says. Only the
default changes: a choice the user saved in JupyterLab's settings still wins.

Charts need no network either: :mod:`budgetlab.notebook.altair_setup` emits the Vega 5 spec
JupyterLab draws with the Vega it ships. The browser test ``tests/test_jupyterlab.py`` starts
JupyterLab through :func:`lab_arguments` and :func:`lab_environment` too, so what it checks is
what ``make lab`` runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["LOOPBACK", "JUPYTER_CONFIG_PATH_DIR", "lab_arguments", "lab_environment", "main"]

#: The only address JupyterLab listens on.
LOOPBACK = "127.0.0.1"

#: A Jupyter config folder shipped with budgetlab: ``labconfig/default_setting_overrides.json``
#: turns JupyterLab's news question and update check off by default (module docstring).
JUPYTER_CONFIG_PATH_DIR = Path(__file__).resolve().with_name("jupyter_config")

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


def lab_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment budgetlab runs ``jupyter lab`` in: ``environ`` with
    :data:`JUPYTER_CONFIG_PATH_DIR` first on ``JUPYTER_CONFIG_PATH``.

    Parameters
    ----------
    environ : mapping of str to str, optional
        The environment to start from; default this process's (``os.environ``). Folders
        already on its ``JUPYTER_CONFIG_PATH`` stay, after budgetlab's.

    Returns
    -------
    dict of str to str
        A new environment (``environ`` is not changed).
    """
    env = dict(os.environ if environ is None else environ)
    ours = str(JUPYTER_CONFIG_PATH_DIR)
    theirs = [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p and p != ours]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([ours, *theirs])
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """Replace this process with ``python -m jupyterlab``, budgetlab's options and environment.

    The first argument, when it is not an option, is the folder to show; every other argument
    goes to ``jupyter lab`` unchanged, after budgetlab's options, so it can override them.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    root_dir = args.pop(0) if args and not args[0].startswith("-") else "notebooks"
    if not Path(root_dir).is_dir():
        print(f"budgetlab lab: no folder {root_dir!r}; give the notebooks' folder, e.g. notebooks", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "jupyterlab", *lab_arguments(root_dir), *args]
    os.execve(sys.executable, command, lab_environment())
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    raise SystemExit(main())
