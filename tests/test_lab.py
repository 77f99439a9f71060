"""``make lab``'s launcher: the options JupyterLab gets (no network, loopback only, root allowed)."""

from __future__ import annotations

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
    calls: list[list[str]] = []
    monkeypatch.setattr(lab.os, "execv", lambda path, argv: calls.append(list(argv)))
    assert lab.main([str(tmp_path), "--port", "9999"]) == 0
    (argv,) = calls
    assert argv[1:3] == ["-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={tmp_path}" in argv and argv[-2:] == ["--port", "9999"]


def test_main_refuses_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lab.main([str(tmp_path / "nope")]) == 2
    assert "no folder" in capsys.readouterr().err
