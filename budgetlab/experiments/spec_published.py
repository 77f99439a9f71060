"""Published speed-ups of speculative decoding in vLLM, and budgetlab's prediction of each.

:data:`PUBLISHED_SPEEDUPS` (:mod:`budgetlab.experiments.spec_published_table`, re-exported here)
lists measurements of vLLM with and without drafting, each row with its source (title and URL),
the setting as the source states it, the acceptance it publishes, and the speed-up exactly as
measured (the stated ratio, and the two measurements it comes from); a ratio computed from those
two is a separate, derived value (:attr:`PublishedSpeedup.speedup_from_published_values`).

:func:`predict_published` simulates each row's setting twice with the same requests, once
without drafts and once with the row's method and ``k``, drawing acceptance from the row's
published figure (:class:`~budgetlab.workload.MeanAcceptanceLength` or
:class:`~budgetlab.workload.AcceptanceRates`), and prices every step with the cost model given
(default ``"typical"``, the real-engine cost, which includes the drafter's own work). Its table
sets the predicted speed-up beside the published one; :func:`load_trends` and :func:`best_k`
compare how each changes with load and with ``k``.

What each row assumes where its source is silent (the GPU, the request lengths, the dataset) is
written in the row (``assumptions``). Three things hold for every reproduced row:

* budgetlab schedules like vLLM 0.33's V1 engine; the sources ran older versions (the V0 engine
  for the MTP and blog rows);
* EAGLE, EAGLE-3 and MTP run with prefix caching off, because budgetlab does not yet simulate
  them with it (:func:`budgetlab.simulator.drafts.check_drafts_supported`); the sources' prompts
  share no prefixes, so the cache would save nothing there;
* a batch-size-1 row runs ``max_num_seqs = 1`` with every request waiting from the start, as
  the sources' offline runs with ``--max_num_seqs 1`` did: one request at a time.

The vLLM blog's rows (up to 1.5x and 2.8x at QPS 1, slowdowns at high QPS) are listed but not
reproduced: the reason is in each row (``not_reproduced_because``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from budgetlab._checks import int_at_least, random_seed
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.named import CostSpec, check_cost, cost_label, make_cost
from budgetlab.errors import ParameterError
from budgetlab.experiments.progress import ProgressSpec, progress_reporter
from budgetlab.experiments.spec_published_table import (
    METRICS,
    MT_BENCH_OUTPUT_TOKENS,
    MT_BENCH_PROMPT_TOKENS,
    PUBLISHED_SPEEDUPS,
    PublishedSpeedup,
)
from budgetlab.simulator import simulate
from budgetlab.specs import Batch, EngineConfig, Request
from budgetlab.workload import MeanAcceptanceLength

__all__ = [
    "PublishedSpeedup",
    "PUBLISHED_SPEEDUPS",
    "MT_BENCH_PROMPT_TOKENS",
    "MT_BENCH_OUTPUT_TOKENS",
    "METRICS",
    "predict_published",
    "load_trends",
    "best_k",
]


# --------------------------------------------------------------------------------------------
# Predictions
# --------------------------------------------------------------------------------------------


def _simulate(row: PublishedSpeedup, k: int, requests: list[Request], cost: CostSpec, seed: int) -> dict[str, float]:
    hardware, model = resolve_hardware(str(row.catalog_hardware)), resolve_model(str(row.catalog_model))
    engine = row.engine(k)
    result = simulate(
        requests,
        engine=engine,
        cost=make_cost(cost, hardware, model, engine=engine),
        hardware=hardware,
        model=model,
        acceptance=row.acceptance() if k else None,
        acceptance_seed=seed,
    )
    summary = result.summary()
    return {metric: float(summary[metric]) for metric in METRICS}


def _predicted_speedup(metric: str, baseline: float, with_drafts: float) -> float:
    return baseline / with_drafts if metric == "tpot_mean_s" else with_drafts / baseline


def predict_published(
    rows: Sequence[PublishedSpeedup] = PUBLISHED_SPEEDUPS,
    *,
    cost: CostSpec = "typical",
    num_requests_batch_one: int = 80,
    num_requests_per_load: int = 200,
    seed: int = 0,
    progress: ProgressSpec = None,
) -> pd.DataFrame:
    """Simulate each reproduced row with and without drafts, and set the speed-ups side by side.

    Both runs of a row replay the same requests (:meth:`PublishedSpeedup.requests`); the run with
    drafts draws each verification's accepted drafts from the row's published acceptance
    (:meth:`PublishedSpeedup.acceptance`, seeded by ``seed``). The predicted speed-up is the ratio
    of the row's ``metric``: time per output token without / with drafts (``tpot_mean_s``), or
    output tokens per second with / without (``throughput_tokens_per_s``). Rows that are not
    reproduced are listed with their reason and no prediction.

    Parameters
    ----------
    rows : sequence of PublishedSpeedup
        Default: :data:`PUBLISHED_SPEEDUPS`.
    cost : str, callable or cost model
        Step cost, built for each run's engine (default ``"typical"``, the real-engine cost with
        the drafter's work).
    num_requests_batch_one : int
        Requests of a batch-size-1 row [requests] (the Llama rows' sources ran 80 prompts).
    num_requests_per_load : int
        Requests of a row at a load [requests].
    seed : int
        Seed of the arrivals and of the acceptance draws [-].
    progress : None, bool or callable
        See :mod:`budgetlab.experiments.progress`.

    Returns
    -------
    pandas.DataFrame
        One row per published row, in order: ``key``, ``source`` (in a few words),
        ``source_title``, ``source_url``,
        ``model``, ``gpu``, ``hardware`` and ``catalog_model`` (what budgetlab ran),
        ``method``, ``num_speculative_tokens``, ``load``, ``rate_per_s`` (NaN: batch size 1),
        ``acceptance`` (the model drawn from, in words), ``metric``, ``published_speedup`` (as
        stated; NaN if none), ``speedup_from_published_values`` (derived), ``reference_speedup``
        and ``reference`` (which of the two the prediction is compared with),
        ``predicted_baseline`` and ``predicted_with_drafts`` (the metric [s or 1/s]),
        ``published_baseline`` and ``published_with_drafts``, ``predicted_speedup``,
        ``predicted_over_published`` (predicted / reference), ``direction_agrees`` (both faster
        or both slower than without drafts; None when not reproduced), ``reproduced``,
        ``cost_model``, ``assumptions``, ``note``, ``not_reproduced_because``.

    Raises
    ------
    ParameterError
        A bad count or seed, an unknown cost, or a row that is not a :class:`PublishedSpeedup`.
    """
    rows = tuple(rows)
    for row in rows:
        if not isinstance(row, PublishedSpeedup):
            raise ParameterError(f"rows must be PublishedSpeedup rows (e.g. PUBLISHED_SPEEDUPS), got {row!r}")
    cost = check_cost(cost)
    n_one = int_at_least("num_requests_batch_one", num_requests_batch_one, 1, what="an int >= 1 [requests]")
    n_load = int_at_least("num_requests_per_load", num_requests_per_load, 1, what="an int >= 1 [requests]")
    seed = random_seed("seed", seed)
    label = cost_label(cost)
    baselines: dict[tuple[Any, ...], dict[str, float]] = {}
    records = []
    todo = [row for row in rows if row.reproduced]
    with progress_reporter(progress, f"budgetlab published speed-ups ({label} cost)", total=len(todo)) as bar:
        bar.update(0, len(todo))
        for row in rows:
            record = _record(row, label)
            if row.reproduced:
                requests = row.requests(num_requests=n_one if row.rate_per_s is None else n_load, seed=seed)
                setting = (
                    row.catalog_hardware,
                    row.catalog_model,
                    row.engine_settings,
                    row.rate_per_s,
                    row.prompt_tokens,
                    row.output_tokens,
                    len(requests),
                )
                if setting not in baselines:
                    baselines[setting] = _simulate(row, 0, requests, cost, seed)
                base = baselines[setting]
                drafted = _simulate(row, int(row.num_speculative_tokens or 0), requests, cost, seed)
                metric = str(row.metric)
                predicted = _predicted_speedup(metric, base[metric], drafted[metric])
                reference = float(row.reference_speedup or math.nan)
                record |= {
                    "predicted_baseline": base[metric],
                    "predicted_with_drafts": drafted[metric],
                    "predicted_speedup": predicted,
                    "predicted_over_published": predicted / reference,
                    "direction_agrees": (predicted > 1.0) == (reference > 1.0),
                }
                bar.advance(label=row.key)
            records.append(record)
    return pd.DataFrame.from_records(records)


def _acceptance_words(row: PublishedSpeedup) -> str:
    if not row.reproduced or row.num_speculative_tokens is None:
        return ""
    model = row.acceptance()
    if isinstance(model, MeanAcceptanceLength):
        k = model.num_speculative_tokens
        return f"mean acceptance length {model.mean_tokens:g} at k = {k} (rate {model.rate:.3f})"
    return f"per-position rate {model.per_position[0]:g}"


def _record(row: PublishedSpeedup, cost: str) -> dict[str, Any]:
    derived = row.speedup_from_published_values
    nan = math.nan
    return {
        "key": row.key,
        "source": row.source,
        "source_title": row.source_title,
        "source_url": row.source_url,
        "model": row.model,
        "gpu": row.gpu,
        "hardware": row.catalog_hardware,
        "catalog_model": row.catalog_model,
        "tensor_parallel_size": row.tensor_parallel_size,
        "method": row.method,
        "num_speculative_tokens": row.num_speculative_tokens,
        "load": row.load,
        "rate_per_s": nan if row.rate_per_s is None else row.rate_per_s,
        "acceptance": _acceptance_words(row),
        "metric": row.metric,
        "published_speedup": nan if row.published_speedup is None else row.published_speedup,
        "published_speedup_text": row.published_speedup_text,
        "speedup_from_published_values": nan if derived is None else derived,
        "reference_speedup": nan if row.reference_speedup is None else row.reference_speedup,
        "reference": "ratio of the published measurements" if derived is not None else "stated speed-up",
        "published_baseline": nan if row.published_baseline is None else row.published_baseline,
        "published_with_drafts": nan if row.published_with_drafts is None else row.published_with_drafts,
        "predicted_baseline": nan,
        "predicted_with_drafts": nan,
        "predicted_speedup": nan,
        "predicted_over_published": nan,
        "direction_agrees": None,
        "reproduced": row.reproduced,
        "cost_model": cost if row.reproduced else "",
        "assumptions": row.assumptions,
        "note": row.note,
        "not_reproduced_because": row.not_reproduced_because,
    }


def _check_table(table: pd.DataFrame) -> pd.DataFrame:
    needed = ("source_url", "method", "num_speculative_tokens", "rate_per_s", "reference_speedup", "predicted_speedup")
    missing = [c for c in needed if c not in table]
    if missing:
        raise ParameterError(f"the table lacks {', '.join(missing)}; pass the table predict_published returned")
    return table[table["predicted_speedup"].notna()]


def load_trends(table: pd.DataFrame) -> pd.DataFrame:
    """How the speed-up changes from the lowest to the highest load of one source, method and ``k``.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`predict_published`'s table.

    Returns
    -------
    pandas.DataFrame
        One row per group with two loads or more: ``source_url``, ``method``,
        ``num_speculative_tokens``, ``low_rate_per_s``, ``high_rate_per_s``, the published and
        predicted speed-ups at each, ``published_falls``, ``predicted_falls`` and ``agrees``.
    """
    done = _check_table(table)
    rows = []
    for (url, method, k), group in done[done.rate_per_s.notna()].groupby(
        ["source_url", "method", "num_speculative_tokens"], sort=False
    ):
        if group.rate_per_s.nunique() < 2:
            continue
        low, high = group.loc[group.rate_per_s.idxmin()], group.loc[group.rate_per_s.idxmax()]
        published_falls = bool(high.reference_speedup < low.reference_speedup)
        predicted_falls = bool(high.predicted_speedup < low.predicted_speedup)
        rows.append(
            {
                "source_url": url,
                "method": method,
                "num_speculative_tokens": int(k),
                "low_rate_per_s": float(low.rate_per_s),
                "high_rate_per_s": float(high.rate_per_s),
                "published_low": float(low.reference_speedup),
                "published_high": float(high.reference_speedup),
                "predicted_low": float(low.predicted_speedup),
                "predicted_high": float(high.predicted_speedup),
                "published_falls": published_falls,
                "predicted_falls": predicted_falls,
                "agrees": published_falls == predicted_falls,
            }
        )
    return pd.DataFrame(rows)


def best_k(table: pd.DataFrame) -> pd.DataFrame:
    """The fastest ``k`` of one source, method and load, published and predicted.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`predict_published`'s table.

    Returns
    -------
    pandas.DataFrame
        One row per group with two ``k`` or more: ``source_url``, ``method``, ``load``,
        ``tokens`` (the ``k`` compared), ``published_best_k``, ``published_best_speedup``,
        ``predicted_best_k``, ``predicted_best_speedup``.
    """
    done = _check_table(table)
    rows = []
    for (url, method, load), group in done.groupby(["source_url", "method", "load"], sort=False):
        if group.num_speculative_tokens.nunique() < 2:
            continue
        published, predicted = group.loc[group.reference_speedup.idxmax()], group.loc[group.predicted_speedup.idxmax()]
        rows.append(
            {
                "source_url": url,
                "method": method,
                "load": load,
                "tokens": tuple(int(k) for k in group.num_speculative_tokens),
                "published_best_k": int(published.num_speculative_tokens),
                "published_best_speedup": float(published.reference_speedup),
                "predicted_best_k": int(predicted.num_speculative_tokens),
                "predicted_best_speedup": float(predicted.predicted_speedup),
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# The draft pass's host time, fitted to the batch-size-1 rows
# --------------------------------------------------------------------------------------------

#: The candidate values of :data:`~budgetlab.cost.speculative_terms.DRAFT_PASS_OVERHEAD_S` [s].
DRAFT_PASS_GRID_S = tuple(round(0.05e-3 * i, 8) for i in range(41))


@dataclass(frozen=True)
class DraftPassFit:
    """:func:`fit_draft_pass_overhead`'s answer.

    Attributes
    ----------
    overhead_s : float
        The fitted time per draft pass [s].
    table : pandas.DataFrame
        One row per published row: ``key``, ``published_speedup`` (its TPOT ratio),
        ``speedup_without`` and ``speedup_with`` (predicted with no pass time and with the fit), and
        their ratios to the published one.
    """

    overhead_s: float
    table: pd.DataFrame = field(repr=False)


def fit_draft_pass_overhead(
    rows: Sequence[PublishedSpeedup] | None = None, *, grid_s: Sequence[float] = DRAFT_PASS_GRID_S
) -> DraftPassFit:
    """The draft pass's host time that best reproduces published batch-size-1 speed-ups.

    For each row (default: the TPOT rows of vllm-project/vllm issue #20780), one step at batch size
    1 is priced with the real-engine cost at the mean context of its request (prompt + half its
    output): ``S0`` without drafts and ``S_k`` with ``k`` drafts, less ``S_k``'s ``draft_passes``
    term. With ``o`` per pass, a step yields the row's mean acceptance length ``L`` of tokens, so the
    predicted speed-up is ``L × S0 / (S_k + k o)``. The fit is the grid value with the smallest
    largest ``|log(predicted / published)|`` (ties: the smaller value).

    Returns
    -------
    DraftPassFit
    """
    from budgetlab.cost import CalibratedCost
    from budgetlab.cost.speculative_terms import drafter_terms

    chosen = [r for r in PUBLISHED_SPEEDUPS if r.key.startswith("20780-")] if rows is None else list(rows)
    records = []
    for row in chosen:
        given = (row.published_with_drafts, row.published_baseline, row.published_mean_acceptance_length)
        if any(value is None for value in given):
            raise ParameterError(f"row {row.key!r} has no published TPOTs and mean acceptance length to fit to")
        hw, model = resolve_hardware(str(row.catalog_hardware)), resolve_model(str(row.catalog_model))
        k = int(row.num_speculative_tokens or 0)
        settings = dict(row.engine_settings)
        plain = EngineConfig(**{**settings, "enable_prefix_caching": False})
        drafting = replace(plain, num_speculative_tokens=k, speculative_method=row.method)
        context = int(row.prompt_tokens or 0) + int(row.output_tokens or 0) // 2
        s0 = CalibratedCost.typical(hw, model, engine=plain).batch_time_s(Batch(1, context))
        cost = CalibratedCost.typical(hw, model, engine=drafting)
        step = Batch(1, context, decode_draft_tokens=k)
        assert cost.drafter is not None
        passes = drafter_terms(step, cost.drafter, hw, cost=cost)["draft_passes"]
        with_drafts, baseline, length = (float(v) for v in given)  # type: ignore[arg-type]
        records.append((row.key, k, length, s0, cost.batch_time_s(step) - passes, baseline / with_drafts))

    def speedups(o: float) -> np.ndarray:
        return np.array([al * s0 / (sk + k * o) for _key, k, al, s0, sk, _pub in records])

    published = np.array([r[5] for r in records])
    worst = [float(np.abs(np.log(speedups(o) / published)).max()) for o in grid_s]
    best = float(grid_s[int(np.argmin(worst))])
    table = pd.DataFrame(
        {
            "key": [r[0] for r in records],
            "published_speedup": published,
            "speedup_without": speedups(0.0),
            "speedup_with": speedups(best),
        }
    )
    table["without_over_published"] = table["speedup_without"] / table["published_speedup"]
    table["with_over_published"] = table["speedup_with"] / table["published_speedup"]
    return DraftPassFit(overhead_s=best, table=table)
