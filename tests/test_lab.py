"""``make lab``'s launcher: the options JupyterLab gets (no network, loopback only, root allowed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from budgetlab.notebook import lab


def test_lab_listens_on_loopback_and_asks_nothing_of_the_internet(tmp_path: Path) -> None:
    arguments = lab.lab_arguments(tmp_path)
    assert "--ServerApp.ip=127.0.0.1" in arguments
    assert f"--ServerApp.root_dir={tmp_path}" in arguments
    assert "--LabApp.news_url=None" in arguments
    assert "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate" in arguments
    chosen_by_jupyter = ("--ServerApp.port", "--IdentityProvider.token", "--ServerApp.open_browser")
    assert not any(a.startswith(chosen_by_jupyter) for a in arguments)


def test_lab_options_for_a_test_server(tmp_path: Path) -> None:
    arguments = lab.lab_arguments(tmp_path, port=8123, token="abc", open_browser=False)
    assert {"--ServerApp.port=8123", "--ServerApp.port_retries=0", "--IdentityProvider.token=abc"} <= set(arguments)
    assert "--ServerApp.open_browser=False" in arguments


@pytest.mark.parametrize("root", [True, False])
def test_allow_root_only_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: bool) -> None:
    monkeypatch.setattr(lab, "_is_root", lambda: root)
    assert ("--allow-root" in lab.lab_arguments(tmp_path)) is root


def test_the_options_parse_as_jupyterlab_reads_them(tmp_path: Path) -> None:
    labapp = pytest.importorskip("jupyterlab.labapp", reason="JupyterLab is not installed")
    app = labapp.LabApp()
    app.parse_command_line([a for a in lab.lab_arguments(tmp_path) if a != "--allow-root"])
    assert app.news_url is None
    assert app.check_for_updates_class.__name__ == "NeverCheckForUpdate"


def test_main_runs_jupyterlab_on_the_folder_with_extra_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(lab.os, "execve", lambda path, argv, env: calls.append((list(argv), dict(env))))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "/elsewhere")
    assert lab.main([str(tmp_path), "--port", "9999"]) == 0
    ((argv, env),) = calls
    assert argv[1:3] == ["-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={tmp_path}" in argv and argv[-2:] == ["--port", "9999"]
    assert env["JUPYTER_CONFIG_PATH"] == os.pathsep.join([str(lab.JUPYTER_CONFIG_PATH_DIR), "/elsewhere"])


def test_the_environment_puts_budgetlabs_config_first_and_keeps_the_rest() -> None:
    ours = str(lab.JUPYTER_CONFIG_PATH_DIR)
    assert lab.lab_environment({"HOME": "/h"}) == {"HOME": "/h", "JUPYTER_CONFIG_PATH": ours}
    given = {"JUPYTER_CONFIG_PATH": os.pathsep.join(["/a", ours, "", "/b"])}
    assert lab.lab_environment(given)["JUPYTER_CONFIG_PATH"] == os.pathsep.join([ours, "/a", "/b"])
    assert given["JUPYTER_CONFIG_PATH"].startswith("/a")  # the input is not changed
    shipped = json.loads((lab.JUPYTER_CONFIG_PATH_DIR / "labconfig" / "default_setting_overrides.json").read_text())
    assert shipped == {NOTIFICATION: {"fetchNews": "false", "checkForUpdates": False}}


NOTIFICATION = "@jupyterlab/apputils-extension:notification"


@pytest.mark.parametrize("ours", [True, False])
def test_a_fresh_profile_is_not_asked_about_jupyter_news(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ours: bool
) -> None:
    # JupyterLab 4's announcements plugin asks "Would you like to get notified about official
    # Jupyter news?" whenever the notification setting fetchNews is "none", its shipped default,
    # whatever LabApp.news_url says. The settings JupyterLab's server hands the browser, read
    # with jupyterlab_server itself for a fresh profile (no saved user settings): "false" in
    # budgetlab's environment, "none" (the question) without it.
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed")
    from jupyterlab.commands import get_app_dir
    from jupyterlab_server.settings_utils import _get_overrides, get_settings

    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))  # no user labconfig
    for name, value in (lab.lab_environment() if ours else {}).items():
        if name == "JUPYTER_CONFIG_PATH":
            monkeypatch.setenv(name, value)
    app_settings_dir = Path(get_app_dir()) / "settings"
    overrides, error = _get_overrides(str(app_settings_dir))
    assert not error
    settings, _ = get_settings(
        str(app_settings_dir),
        str(Path(get_app_dir()) / "schemas"),
        str(tmp_path / "user-settings"),
        schema_name=NOTIFICATION,
        overrides=overrides,
    )
    defaults = {k: v["default"] for k, v in settings["schema"]["properties"].items()}
    assert settings["settings"] == {}  # a fresh profile: the defaults decide
    assert (defaults["fetchNews"], defaults["checkForUpdates"]) == (("false", False) if ours else ("none", True))


def test_main_refuses_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lab.main([str(tmp_path / "nope")]) == 2
    assert "no folder" in capsys.readouterr().err
