"""Save a report's key numbers as JSON, so tests and readers can check them without parsing HTML.

Notebooks take a ``results_path`` parameter (empty: save nothing) and end with one
:func:`save_results` call; the report renderer (:mod:`budgetlab.notebook.reports`) points it at
``reports/<scenario>/<notebook>.results.json``.

:func:`headline` reads one scenario's results files and returns its answer in a few rows (GPU,
model, workload, SLO, knee, the budgets read off the latency target, the tuner's recommendation
and capacity), each labelled with the cost model that produced it, for ``reports/index.html``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.errors import BudgetlabError
from budgetlab.text import fmt_int, fmt_latency, fmt_percent

__all__ = ["save_results", "load_results", "to_jsonable", "headline", "HEADLINE_COLUMNS"]

HEADLINE_COLUMNS = ("quantity", "value", "cost_model", "notebook")
"""The keys of each :func:`headline` row."""


def to_jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and mappings into plain JSON types.

    Non-finite floats become ``None`` (JSON has no NaN or infinity); mapping keys become
    strings (``step_time_s`` keyed by token count reads ``{"512": 0.0083}``).
    """
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    raise TypeError(f"cannot store {type(value).__name__} in a results file: {value!r}")


def save_results(results_path: str | Path, results: Mapping[str, Any]) -> Path | None:
    """Write ``results`` as pretty JSON to ``results_path``; do nothing when it is empty.

    Parameters
    ----------
    results_path : str or Path
        Destination file; ``""`` skips writing (interactive use).
    results : mapping
        The report's key numbers, named with units (``knee_tokens``, ``ttft_s``).

    Returns
    -------
    Path or None
        Where the file was written.
    """
    if not str(results_path):
        return None
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(results), indent=2, sort_keys=True) + "\n")
    return path


def load_results(results_path: str | Path) -> dict[str, Any]:
    """Read a results file written by :func:`save_results`."""
    return json.loads(Path(results_path).read_text())


def _find(results_by_notebook: Mapping[str, Mapping[str, Any]], number: str) -> tuple[str, Mapping[str, Any]] | None:
    """The results of the notebook whose name starts with ``number`` (``"08"``), if present."""
    for name, results in results_by_notebook.items():
        if str(name).split("-", 1)[0] == number and isinstance(results, Mapping):
            return str(name), results
    return None


def _name_of(slug: object, resolve: Any) -> str:
    """A catalog slug's display name (the slug itself when the catalog does not know it)."""
    try:
        return str(resolve(str(slug)).name)
    except (BudgetlabError, ValueError, KeyError):
        return str(slug)


def _tokens(value: object) -> str:
    return f"{fmt_int(float(value))} tokens" if isinstance(value, (int, float)) else "none"


def _cost_of(results: Mapping[str, Any]) -> str:
    """The cost model a sweep or tuner notebook simulated with (``"ideal"`` before it said)."""
    return str(results.get("cost") or results.get("cost_model") or "ideal")


def headline(results_by_notebook: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]]:
    """One scenario's answer in a few rows, each number labelled with its cost model.

    Parameters
    ----------
    results_by_notebook : mapping
        Notebook name (``"08-tune-for-slo"``; only the leading number is read) -> its results
        (:func:`load_results` of ``<notebook>.results.json``), for one scenario. Notebooks
        missing here leave their rows out.

    Returns
    -------
    list of dict
        In reading order, each with :data:`HEADLINE_COLUMNS`: ``quantity`` (what it is, in
        words), ``value`` (formatted, with units), ``cost_model`` (``"ideal"``: the seeds'
        roofline; ``"typical"``: calibrated to real vLLM runs; ``""`` for the setting itself)
        and ``notebook`` (where it comes from). The rows: GPU, model, workload and SLO (from
        08, else 07); the knee (01); the budget whose full step meets the step target (03,
        both models) and the one that keeps the longest gap within it (04, both models); the
        tuner's recommended budget and cap, its capacity and the load it recommends with a
        margin (08); the load sweep's capacity at its budget (07).

    Examples
    --------
    ``headline({"01-step-cost": {"hardware": "h100-sxm", "knee_tokens": 295}})`` gives a GPU row
    (``NVIDIA H100 SXM5 80GB``) and a knee row (``295 tokens``, cost model ``ideal``).
    """
    rows: list[dict[str, str]] = []

    def add(quantity: str, value: str, cost_model: str, notebook: str) -> None:
        rows.append({"quantity": quantity, "value": value, "cost_model": cost_model, "notebook": notebook})

    found = {n: _find(results_by_notebook, n) for n in ("01", "03", "04", "07", "08")}
    setting = next((f for f in (found["08"], found["07"], found["03"], found["01"], found["04"]) if f), None)
    if setting is not None:
        name, results = setting
        if "hardware" in results:
            add("GPU", _name_of(results["hardware"], resolve_hardware), "", name)
        if "model" in results:
            add("model", _name_of(results["model"], resolve_model), "", name)
    sweep = found["08"] or found["07"]
    if sweep is not None:
        name, results = sweep
        if "workload" in results:
            add("workload", str(results["workload"]), "", name)
        if isinstance(results.get("slo"), Mapping):
            from budgetlab.experiments.slo import SLO

            add("SLO", str(SLO.from_dict(results["slo"])), "", name)
    if found["01"] is not None and "knee_tokens" in found["01"][1]:
        add("knee of the step cost", _tokens(found["01"][1]["knee_tokens"]), "ideal", found["01"][0])
    for number, key, what in (
        ("03", "budget_for_step_target", "largest budget whose full prompt step meets the {target} target"),
        ("04", "budget_for_gap_target", "largest budget that keeps the longest gap within {target}"),
    ):
        entry = found[number]
        if entry is None:
            continue
        name, results = entry
        target = results.get("target_step_s")
        text = what.format(target=fmt_latency(float(target)) if isinstance(target, (int, float)) else "latency")
        for model in ("ideal", "typical"):
            if f"{key}_{model}" in results:
                add(text, _tokens(results[f"{key}_{model}"]), model, name)
    if found["08"] is not None:
        name, results = found["08"]
        cost = _cost_of(results)
        if "max_num_batched_tokens" in results and "max_num_seqs" in results:
            add(
                "recommended max_num_batched_tokens / max_num_seqs",
                f"{fmt_int(results['max_num_batched_tokens'])} / {fmt_int(results['max_num_seqs'])}",
                cost,
                name,
            )
        if isinstance(results.get("capacity_per_s"), (int, float)):
            add("capacity per replica, recommended configuration", f"{results['capacity_per_s']:.3g} req/s", cost, name)
        margin = results.get("margin")
        if isinstance(margin, Mapping) and isinstance(margin.get("rate_per_s"), (int, float)):
            used = margin.get("used_fraction")
            headroom = f", latencies ≤ {fmt_percent(float(used), 0)} of their limits" if isinstance(used, float) else ""
            add(
                "recommended load per replica (its neighbours one step away hold the SLO too)",
                f"{margin['rate_per_s']:.3g} req/s{headroom}",
                cost,
                name,
            )
    if found["07"] is not None:
        name, results = found["07"]
        best, by_budget = results.get("best_budget_tokens"), results.get("capacity_per_s")
        if isinstance(best, int) and isinstance(by_budget, Mapping) and str(best) in by_budget:
            add(
                f"capacity per replica of the load sweep's best budget ({fmt_int(best)} tokens)",
                f"{float(by_budget[str(best)]):.3g} req/s",
                _cost_of(results),
                name,
            )
    return rows
