"""Execute every notebook through papermill and check the key numbers it saves.

One parametrized test covers ``notebooks/*.ipynb`` (a new notebook is picked up automatically);
give it small parameters in ``SMALL`` and its checks in ``CHECKS``. A second test feeds bad
parameters and expects the validation cell to stop the notebook with one clear message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

papermill = pytest.importorskip("papermill")
from papermill.exceptions import PapermillExecutionError  # noqa: E402

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))

pytestmark = pytest.mark.notebook

#: Per-notebook parameter overrides that keep a run short (missing: the notebook's defaults).
SMALL: dict[str, dict[str, Any]] = {
    "01-step-cost": {"max_tokens": 4000, "zoom_tokens": 600},
    "03-ttft-vs-budget": {"budgets": [512, 2048, 8192]},
    "04-longest-gap": {"budgets": [512, 2048, 8192]},
}


def _check_01(r: dict) -> None:
    assert r["weight_read_s"] == pytest.approx(4.79e-3, abs=0.005e-3)
    assert r["per_token_s"] == pytest.approx(16.2e-6, abs=0.05e-6)
    assert r["knee_tokens"] == pytest.approx(295, abs=1)
    assert r["flops_per_token"] == pytest.approx(16.06e9)
    assert r["step_time_s"]["512"] == pytest.approx(8.3e-3, abs=0.05e-3)
    assert r["step_time_s"]["2048"] == pytest.approx(33.2e-3, abs=0.05e-3)
    assert r["step_time_s"]["8192"] == pytest.approx(133e-3, abs=0.5e-3)


def _check_02(r: dict) -> None:
    assert r["chunks"] == [1948, 1948, 1104]
    assert r["prefill_tokens_left"] == {"100": 1948, "60": 1988, "400": 1648}
    assert r["tradeoff"]["small"]["num_prompt_steps"] > r["tradeoff"]["big"]["num_prompt_steps"]
    assert r["tradeoff"]["small"]["prompt_step_s"] < r["tradeoff"]["big"]["prompt_step_s"]
    assert r["ttft_s"] == pytest.approx(sum(r["step_time_s"]))


def _check_03(r: dict) -> None:
    assert r["budgets"] == [512, 2048, 8192]
    assert len(r["ttft_s"]) == len(r["step_time_s"]) == 3
    assert r["ttft_s"] == sorted(r["ttft_s"], reverse=True)  # bigger budgets, earlier first token
    assert r["ttft_s"][-1] == pytest.approx(r["ttft_without_budget_s"])
    assert r["step_time_s"][1] == pytest.approx(33.2e-3, abs=0.05e-3)
    assert r["budget_for_target"] == 2464


def _check_04(r: dict) -> None:
    assert r["longest_gap_with_budget_s"] == pytest.approx(33.2e-3, abs=0.05e-3)
    assert r["longest_gap_without_budget_s"] == pytest.approx(82.8e-3, abs=0.05e-3)
    assert r["budgets"] == [512, 2048, 8192]
    assert r["longest_gap_s"][1] == pytest.approx(r["longest_gap_with_budget_s"])
    assert r["longest_gap_s"][-1] == pytest.approx(r["longest_gap_without_budget_s"])


#: Checks on each notebook's results (the keys the reports promise, and the seeds' numbers).
CHECKS: dict[str, tuple[set[str], Callable[[dict], None]]] = {
    "01-step-cost": ({"weight_read_s", "per_token_s", "knee_tokens", "step_time_s", "flops_per_token"}, _check_01),
    "02-filling-the-budget": ({"chunks", "prefill_tokens_left", "tradeoff"}, _check_02),
    "03-ttft-vs-budget": (
        {"budgets", "ttft_s", "step_time_s", "budget_for_target", "ttft_without_budget_s"},
        _check_03,
    ),
    "04-longest-gap": (
        {"longest_gap_with_budget_s", "longest_gap_without_budget_s", "budgets", "longest_gap_s"},
        _check_04,
    ),
}


def _run(notebook: Path, tmp_path: Path, parameters: dict[str, Any]) -> None:
    papermill.execute_notebook(
        str(notebook),
        str(tmp_path / notebook.name),
        parameters=parameters,
        kernel_name="python3",
        cwd=str(NOTEBOOKS_DIR),
        progress_bar=False,
        log_output=False,
    )


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_saves_its_results(notebook: Path, tmp_path: Path):
    results_path = tmp_path / f"{notebook.stem}.results.json"
    _run(notebook, tmp_path, {**SMALL.get(notebook.stem, {}), "results_path": str(results_path)})
    results = json.loads(results_path.read_text())
    assert isinstance(results, dict) and results
    keys, check = CHECKS.get(notebook.stem, (set(), lambda r: None))
    missing = keys - set(results)
    assert not missing, f"{notebook.name} results lack {sorted(missing)}"
    check(results)


BAD_PARAMETERS = [
    ({"budgets": True}, "parameter `budgets` must be a non-empty list of whole numbers of tokens"),
    ({"prompt_tokens": -5}, "parameter `prompt_tokens` must be a whole number of tokens >= 1, but got -5 (int)"),
    ({"hardware": "h100"}, "parameter `hardware` must be a hardware slug from budgetlab's catalog, but got 'h100'"),
]


@pytest.mark.parametrize(
    ("parameters", "message"), BAD_PARAMETERS, ids=["budgets-true", "negative-prompt", "unknown-hardware"]
)
def test_bad_parameter_stops_at_validation(parameters, message, tmp_path: Path):
    notebook = NOTEBOOKS_DIR / "03-ttft-vs-budget.ipynb"
    with pytest.raises(PapermillExecutionError) as info:
        _run(notebook, tmp_path, parameters)
    error = info.value
    assert error.ename == "ParameterError"
    assert "validate_parameters(" in error.source, "the validation cell is the one that failed"
    assert message in str(error)
    assert "Fix:" in str(error)
    assert len(error.traceback) == 1, "one message, not a traceback"
    assert "Traceback" not in str(error) and "File " not in str(error)
