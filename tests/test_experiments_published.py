"""budgetlab.experiments.published: where the developers' real-engine data is looked up.

``BUDGETLAB_REAL_DATA`` first (an error when it names no folder), then ``../shared/data/real``
beside a source checkout, else nothing; never a path guessed from an installed package.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from budgetlab.errors import DataFormatError
from budgetlab.experiments import kv_logs, multigpu, published, serving_runs


def test_the_variable_names_the_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "allreduce.csv").write_text("a\n1\n", encoding="utf-8")
    monkeypatch.setenv(published.REAL_DATA_ENV, str(tmp_path))
    assert published.real_data_dir() == tmp_path
    assert published.real_data_path("allreduce.csv") == tmp_path / "allreduce.csv"
    assert multigpu.default_all_reduce_path() == tmp_path / "allreduce.csv"
    # a file the folder lacks is absent, not an error (the caller skips)
    assert published.real_data_path("vllm_kv_logs.csv") is None
    assert kv_logs.default_logs_path() is None
    assert serving_runs.default_runs_path() is None


def test_the_variable_wins_over_the_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(published, "_checkout_root", lambda: pytest.fail("the checkout was consulted"))
    monkeypatch.setenv(published.REAL_DATA_ENV, str(tmp_path))
    assert published.real_data_dir() == tmp_path


def test_the_variable_naming_no_folder_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setenv(published.REAL_DATA_ENV, str(missing))
    with pytest.raises(DataFormatError, match=rf"BUDGETLAB_REAL_DATA .*{missing.name}.* not an existing folder"):
        published.real_data_dir()
    with pytest.raises(DataFormatError, match="BUDGETLAB_REAL_DATA"):
        published.real_data_path("allreduce.csv")
    a_file = tmp_path / "file.csv"
    a_file.write_text("", encoding="utf-8")
    monkeypatch.setenv(published.REAL_DATA_ENV, str(a_file))
    with pytest.raises(DataFormatError, match="not an existing folder"):
        published.real_data_dir()


def test_no_variable_outside_a_checkout_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(published.REAL_DATA_ENV, raising=False)
    monkeypatch.setattr(published, "_checkout_root", lambda: None)
    assert published.real_data_dir() is None
    assert published.real_data_path("vllm_kv_logs.csv") is None
    assert kv_logs.default_logs_path() is None


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(published.REAL_DATA_ENV, "")
    monkeypatch.setattr(published, "_checkout_root", lambda: None)
    assert published.real_data_dir() is None


def test_a_checkout_uses_the_shared_folder_beside_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(published.REAL_DATA_ENV, raising=False)
    checkout = tmp_path / "main"
    checkout.mkdir()
    monkeypatch.setattr(published, "_checkout_root", lambda: checkout)
    assert published.real_data_dir() is None  # no shared folder beside it
    real = tmp_path / "shared" / "data" / "real"
    real.mkdir(parents=True)
    assert published.real_data_dir() == real


def test_checkout_detection_reads_the_project_name(tmp_path: Path) -> None:
    assert not published._is_budgetlab_checkout(tmp_path)  # no pyproject.toml
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n', encoding="utf-8")
    assert not published._is_budgetlab_checkout(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project\nname = ", encoding="utf-8")
    assert not published._is_budgetlab_checkout(tmp_path)  # malformed
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "budgetlab"\n', encoding="utf-8")
    assert published._is_budgetlab_checkout(tmp_path)


def test_this_checkout_is_detected() -> None:
    root = Path(published.__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        pytest.skip("budgetlab is installed, not imported from a checkout")
    assert published._checkout_root() == root
