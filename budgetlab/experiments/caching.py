"""Prefix caching and async scheduling, side by side: the numbers behind notebook 09.

vLLM 0.33 starts with automatic prefix caching and async (pipelined) scheduling on
(:class:`~budgetlab.specs.EngineConfig` ``enable_prefix_caching=True, async_scheduling=True``;
the rules are in ``vllm-v1-prefix-async-priority.md``). This module simulates one workload under
engine variants and returns tidy tables, one row per run:

* :func:`simulate_variants` and :func:`variants_table` -- the same requests under named variants
  of one engine (caching on/off, sync/async, a smaller cap...), with :func:`variant_numbers`
  per run: TTFT and ITL percentiles, prompt tokens computed against prompt tokens sent, the
  prefix-cache hit rate, steps against forward passes;
* :func:`ttft_by_turn` -- TTFT per turn of a conversation (the ``k``-th request of each
  ``prefix_id``): without caching a later turn re-reads its whole history;
* :func:`budget_by_caching` -- TTFT against the token budget, caching off and on, and
  :func:`budget_effect`, what going from the smallest budget to the largest saves in each;
* :func:`kv_pressure` -- hit rate, preemptions and recompute hits as the KV pool shrinks (freed
  blocks stay cached in an LRU queue until the pool needs them).

Every function is pure: the same arguments give the same table (the simulator is deterministic).
Times in seconds, tokens in tokens; the charts are in :mod:`budgetlab.charts.caching`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from budgetlab._checks import grid_axis, int_at_least, is_flag
from budgetlab.cost.protocol import CostModel
from budgetlab.errors import ParameterError
from budgetlab.metrics import quantile, run_numbers
from budgetlab.simulator import SimMode, SimResult, simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request

__all__ = [
    "CACHING_LABELS",
    "VARIANT_FIELDS",
    "caching_label",
    "simulate_variants",
    "variant_numbers",
    "variants_table",
    "engine_variants_table",
    "ttft_by_turn",
    "budget_by_caching",
    "budget_effect",
    "kv_pressure",
]

#: The :class:`~budgetlab.specs.EngineConfig` fields a variant may change.
VARIANT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(EngineConfig))

#: ``enable_prefix_caching`` → the label of the ``caching`` column.
CACHING_LABELS: Mapping[bool, str] = {False: "prefix caching off", True: "prefix caching on"}


def caching_label(enabled: bool) -> str:
    """``"prefix caching on"`` or ``"prefix caching off"``."""
    return CACHING_LABELS[bool(enabled)]


def _check_engine(engine: object) -> EngineConfig:
    if not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    return engine


def _checked_requests(requests: Iterable[Request]) -> list[Request]:
    listed = list(requests)
    if not listed:
        raise ParameterError("requests is empty; give at least one Request")
    bad = next((r for r in listed if not isinstance(r, Request)), None)
    if bad is not None:
        raise ParameterError(f"requests must be budgetlab Request objects, got a {type(bad).__name__}")
    return listed


def _checked_variants(
    variants: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:  # values: EngineConfig fields of any type
    if not isinstance(variants, Mapping) or not variants:
        raise ParameterError(
            "variants must be a non-empty mapping of name -> EngineConfig changes, "
            'e.g. {"caching off": {"enable_prefix_caching": False}, "caching on": {}}'
        )
    checked: dict[str, dict[str, Any]] = {}
    for name, changes in variants.items():
        if not isinstance(name, str) or not name:
            raise ParameterError(f"variant names must be non-empty strings, got {name!r}")
        if not isinstance(changes, Mapping):
            raise ParameterError(f"variant {name!r} must map EngineConfig fields to values, got {changes!r}")
        unknown = [field for field in changes if field not in VARIANT_FIELDS]
        if unknown:
            raise ParameterError(
                f"variant {name!r} changes {', '.join(map(str, unknown))}, which EngineConfig does not have; "
                f"use fields from {', '.join(VARIANT_FIELDS)}"
            )
        checked[name] = dict(changes)
    return checked


def _caching_axis(caching: object) -> tuple[bool, ...]:
    def check(name: str, value: object) -> bool:
        if not is_flag(value):
            raise ParameterError(f"{name} must be True or False (prefix caching on or off), got {value!r}")
        return bool(value)

    return grid_axis("caching", caching, check)


def simulate_variants(
    requests: Iterable[Request],
    *,
    engine: EngineConfig,
    cost: CostModel,
    variants: Mapping[str, Mapping[str, Any]],
    hardware: HardwareSpec | None = None,
    model: ModelSpec | None = None,
    mode: SimMode = "fast",
) -> dict[str, SimResult]:
    """The same requests under named variants of one engine.

    Parameters
    ----------
    requests : iterable of Request
        The workload (e.g. :func:`budgetlab.workload.multi_turn_workload`).
    engine : EngineConfig
        The engine every variant starts from.
    cost : CostModel
        Step-cost model of every run.
    variants : mapping of str to mapping
        Name → :class:`~budgetlab.specs.EngineConfig` fields to change
        (``dataclasses.replace(engine, **changes)``; ``{}`` is the engine itself), e.g.
        ``{"off": {"enable_prefix_caching": False}, "on": {"enable_prefix_caching": True}}``.
    hardware, model : HardwareSpec, ModelSpec, optional
        Size the KV pool when ``num_kv_blocks`` is None (default: the cost model's).
    mode : {"fast", "reference"}
        Simulator path (the results do not depend on it).

    Returns
    -------
    dict of str to SimResult
        In the order of ``variants``.

    Raises
    ------
    ParameterError
        No requests, no variants, or a variant changing a field EngineConfig does not have.
    ConfigError
        A variant vLLM would refuse (from :class:`~budgetlab.specs.EngineConfig`).
    """
    base = _check_engine(engine)
    listed = _checked_requests(requests)
    return {
        name: simulate(
            listed, engine=dataclasses.replace(base, **changes), cost=cost, hardware=hardware, model=model, mode=mode
        )
        for name, changes in _checked_variants(variants).items()
    }


def variant_numbers(result: SimResult) -> dict[str, float | int | str | bool]:
    """One run's configuration and headline numbers, with what prefix caching and async change.

    Parameters
    ----------
    result : SimResult

    Returns
    -------
    dict
        Every key of :func:`budgetlab.metrics.run_numbers` (``ttft_p50_s``, ``prefix_hit_rate``,
        ``prefix_hit_tokens``, ``num_forward_passes``, ...), plus ``enable_prefix_caching``,
        ``async_scheduling`` (bool), ``prefill_tokens`` (prompt tokens the forward passes
        computed, recomputes included [tokens]), ``prefill_fraction`` (``prefill_tokens`` per
        prompt token sent, ``num_prompt_tokens`` [-]; 1 without caching or preemption),
        ``recompute_hit_tokens`` (hits at re-admissions after a preemption [tokens]) and
        ``num_empty_steps`` (steps without a forward pass: async iterations that schedule
        nothing while last tokens are in flight [count]).
    """
    numbers: dict[str, float | int | str | bool] = dict(run_numbers(result))
    prefill = int(result.steps["num_prefill_tokens"].sum())
    prompt = int(numbers["num_prompt_tokens"])
    numbers.update(
        enable_prefix_caching=result.engine.enable_prefix_caching,
        async_scheduling=result.engine.async_scheduling,
        prefill_tokens=prefill,
        prefill_fraction=prefill / prompt if prompt else float("nan"),
        recompute_hit_tokens=int(result.requests["recompute_hit_tokens"].sum()),
        num_empty_steps=int(numbers["num_steps"]) - int(numbers["num_forward_passes"]),
    )
    return numbers


def variants_table(results: Mapping[str, SimResult]) -> pd.DataFrame:
    """Runs side by side: one row per run, ``variant`` (its name) then :func:`variant_numbers`.

    Parameters
    ----------
    results : mapping of str to SimResult
        E.g. :func:`simulate_variants`' output.
    """
    rows = [{"variant": name, **variant_numbers(result)} for name, result in results.items()]
    if not rows:
        raise ParameterError("results is empty; simulate at least one variant")
    return pd.DataFrame(rows)


def engine_variants_table(
    requests: Iterable[Request],
    *,
    engine: EngineConfig,
    cost: CostModel,
    variants: Mapping[str, Mapping[str, Any]],
    hardware: HardwareSpec | None = None,
    model: ModelSpec | None = None,
    mode: SimMode = "fast",
) -> pd.DataFrame:
    """:func:`variants_table` of :func:`simulate_variants` (same arguments): one row per variant."""
    return variants_table(
        simulate_variants(
            requests, engine=engine, cost=cost, variants=variants, hardware=hardware, model=model, mode=mode
        )
    )


def _turns(requests: Sequence[Request]) -> dict[object, int]:
    """Request id → its turn: 1 + how many requests of its ``prefix_id`` arrived before it
    (ties in input order); 1 for a request without a prefix id."""
    seen: dict[object, int] = {}
    turn: dict[object, int] = {}
    for request in sorted(requests, key=lambda r: r.arrival_at_s):  # stable: ties in input order
        if request.prefix_id is None:
            turn[request.request_id] = 1
            continue
        seen[request.prefix_id] = seen.get(request.prefix_id, 0) + 1
        turn[request.request_id] = seen[request.prefix_id]
    return turn


def ttft_by_turn(
    results: Mapping[str, SimResult], requests: Iterable[Request], *, max_turn: int | None = None
) -> pd.DataFrame:
    """TTFT per conversation turn, for each run: a later turn sends a longer history.

    The turn of a request is its rank among the requests of its ``prefix_id`` by arrival (the
    ``k``-th turn of a :func:`~budgetlab.workload.multi_turn_workload` conversation); a request
    without a prefix id is turn 1.

    Parameters
    ----------
    results : mapping of str to SimResult
        Runs of ``requests`` (case name → result).
    requests : iterable of Request
        The workload they ran.
    max_turn : int, optional
        Pool turns from ``max_turn`` on into one row (``turn == max_turn``), >= 1; default: none.

    Returns
    -------
    pandas.DataFrame
        One row per case × turn: ``case``, ``turn``, ``num_requests``, ``prompt_mean_tokens``,
        ``prefix_hit_mean_tokens`` (mean hit at first admission [tokens]), ``ttft_p50_s``,
        ``ttft_p90_s``, ``ttft_mean_s`` [s].
    """
    listed = _checked_requests(requests)
    cap = None if max_turn is None else int_at_least("max_turn", max_turn, 1)
    turn_of = _turns(listed)
    rows = []
    for case, result in results.items():
        table = result.requests
        turn = table["request_id"].map(turn_of)
        if turn.isna().any():
            raise ParameterError(f"run {case!r} has requests that are not in requests; pass the workload it ran")
        turn = turn.astype(np.int64)
        if cap is not None:
            turn = turn.clip(upper=cap)
        for k, group in table.groupby(turn.to_numpy(), sort=True):
            ttft = group["ttft_s"].to_numpy(dtype=float)
            p50, p90 = (float(v) for v in np.asarray(quantile(ttft, np.array([0.5, 0.9]))))
            rows.append(
                {
                    "case": case,
                    "turn": int(k),
                    "num_requests": len(group),
                    "prompt_mean_tokens": float(group["prompt_tokens"].mean()),
                    "prefix_hit_mean_tokens": float(group["prefix_hit_tokens"].mean()),
                    "ttft_p50_s": p50,
                    "ttft_p90_s": p90,
                    "ttft_mean_s": float(ttft.mean()),
                }
            )
    if not rows:
        raise ParameterError("results is empty; give at least one run")
    return pd.DataFrame(rows)


_GRID_COLUMNS = (
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p99_s",
    "throughput_tokens_per_s",
    "prefix_hit_rate",
    "prefix_hit_tokens",
    "prefill_tokens",
    "prefill_fraction",
    "num_prompt_tokens",
    "num_preemptions",
    "recompute_hit_tokens",
    "kv_peak_fraction",
    "num_steps",
    "num_forward_passes",
)


def _grid_row(result: SimResult, **keys: object) -> dict[str, object]:
    numbers = variant_numbers(result)
    caching = bool(result.engine.enable_prefix_caching)
    return {
        **keys,
        "enable_prefix_caching": caching,
        "caching": caching_label(caching),
        **{name: numbers[name] for name in _GRID_COLUMNS},
    }


def budget_by_caching(
    requests: Iterable[Request],
    *,
    engine: EngineConfig,
    cost: CostModel,
    budgets: Sequence[int],
    caching: Sequence[bool] = (False, True),
    hardware: HardwareSpec | None = None,
    model: ModelSpec | None = None,
    mode: SimMode = "fast",
) -> pd.DataFrame:
    """TTFT against the token budget with prefix caching off and on.

    A cache hit shortens the prompt a request has to compute, so fewer prompts need more than one
    step and the budget matters less (notebook 03's curve flattens earlier).

    Parameters
    ----------
    requests : iterable of Request
    engine : EngineConfig
        Every other knob (its own ``max_num_batched_tokens`` and ``enable_prefix_caching`` are
        replaced).
    cost : CostModel
    budgets : sequence of int
        ``max_num_batched_tokens`` values [tokens], each >= ``engine.max_num_seqs`` (vLLM's rule).
    caching : sequence of bool
        ``enable_prefix_caching`` values to run (default off, then on).
    hardware, model, mode
        As :func:`simulate_variants`.

    Returns
    -------
    pandas.DataFrame
        One row per caching × budget, budgets ascending: ``max_num_batched_tokens``,
        ``enable_prefix_caching``, ``caching`` (its label), TTFT ``ttft_p50_s``, ``ttft_p90_s``,
        ``ttft_p99_s`` and ITL ``itl_p50_s``, ``itl_p99_s`` [s], ``throughput_tokens_per_s``,
        ``prefix_hit_rate`` [-] (NaN with caching off), ``prefix_hit_tokens``, ``prefill_tokens``,
        ``num_prompt_tokens`` [tokens], ``prefill_fraction`` [-], ``num_preemptions``,
        ``recompute_hit_tokens``, ``kv_peak_fraction``, ``num_steps``, ``num_forward_passes``.

    Raises
    ------
    ParameterError
        Empty or repeated budgets or caching values, a budget that is not an int >= 1.
    ConfigError
        A budget below ``max_num_seqs``.
    """
    base = _check_engine(engine)
    listed = _checked_requests(requests)
    axis = grid_axis("budgets", budgets, lambda name, v: int_at_least(name, v, 1))
    rows = [
        _grid_row(
            simulate(
                listed,
                engine=dataclasses.replace(base, max_num_batched_tokens=budget, enable_prefix_caching=on),
                cost=cost,
                hardware=hardware,
                model=model,
                mode=mode,
            ),
            max_num_batched_tokens=budget,
        )
        for on in _caching_axis(caching)
        for budget in sorted(axis)
    ]
    return pd.DataFrame(rows)


def budget_effect(table: pd.DataFrame, *, metric: str = "ttft_p50_s") -> pd.DataFrame:
    """What the largest budget saves over the smallest, with caching off and on.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`budget_by_caching` output.
    metric : str
        A latency column of it [s] (default ``ttft_p50_s``).

    Returns
    -------
    pandas.DataFrame
        One row per ``caching`` label, in the table's order: ``caching``,
        ``enable_prefix_caching``, ``smallest_budget_tokens``, ``largest_budget_tokens``
        [tokens], ``at_smallest_s``, ``at_largest_s`` (the metric there) [s], ``saved_s``
        (smallest minus largest) [s] and ``saved_fraction`` (of the value at the smallest) [-].

    Examples
    --------
    >>> t = pd.DataFrame({"caching": ["off", "off", "on", "on"],
    ...                   "enable_prefix_caching": [False, False, True, True],
    ...                   "max_num_batched_tokens": [256, 8192, 256, 8192],
    ...                   "ttft_p50_s": [0.100, 0.050, 0.020, 0.016]})
    >>> effect = budget_effect(t).set_index("caching")
    >>> effect.saved_s.round(3).to_dict(), effect.saved_fraction.round(3).to_dict()
    ({'off': 0.05, 'on': 0.004}, {'off': 0.5, 'on': 0.2})
    """
    needed = ("caching", "enable_prefix_caching", "max_num_batched_tokens", metric)
    missing = [c for c in needed if c not in table]
    if missing:
        raise ParameterError(f"table lacks {', '.join(missing)}; pass budget_by_caching's output")
    rows = []
    for label, group in table.groupby("caching", sort=False):
        ordered = group.sort_values("max_num_batched_tokens")
        small, big = ordered.iloc[0], ordered.iloc[-1]
        at_small, at_big = float(small[metric]), float(big[metric])
        rows.append(
            {
                "caching": label,
                "enable_prefix_caching": bool(small["enable_prefix_caching"]),
                "smallest_budget_tokens": int(small["max_num_batched_tokens"]),
                "largest_budget_tokens": int(big["max_num_batched_tokens"]),
                "at_smallest_s": at_small,
                "at_largest_s": at_big,
                "saved_s": at_small - at_big,
                "saved_fraction": (at_small - at_big) / at_small if at_small else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def kv_pressure(
    requests: Iterable[Request],
    *,
    engine: EngineConfig,
    cost: CostModel,
    kv_tokens: Sequence[int | None],
    caching: Sequence[bool] = (False, True),
    hardware: HardwareSpec | None = None,
    model: ModelSpec | None = None,
    mode: SimMode = "fast",
) -> pd.DataFrame:
    """Prefix caching as the KV pool shrinks: hit rate, preemptions, recompute hits, TTFT.

    Cached blocks nobody references wait in an LRU free queue and are evicted only when the pool
    needs a block. A smaller pool evicts sooner, so a conversation's next turn finds less of its
    history; when the pool runs dry mid-answer, a running request is preempted and its recompute
    hits what survived of its own blocks.

    Parameters
    ----------
    requests : iterable of Request
    engine : EngineConfig
        Every other knob (``num_kv_blocks`` and ``enable_prefix_caching`` are replaced).
    cost : CostModel
    kv_tokens : sequence of int or None
        KV pool sizes [tokens], each >= ``engine.block_size`` (rounded up to whole blocks); None:
        the pool memory leaves (:func:`budgetlab.memory.kv_capacity` of ``hardware`` and
        ``model``, the cost model's by default).
    caching : sequence of bool
        ``enable_prefix_caching`` values to run (default off, then on).
    hardware, model, mode
        As :func:`simulate_variants`.

    Returns
    -------
    pandas.DataFrame
        One row per caching × pool, pools ascending: ``num_kv_blocks`` [blocks], ``kv_tokens``
        (blocks × block size [tokens]), ``from_memory`` (bool: the pool memory leaves), then the
        columns of :func:`budget_by_caching` after its budget.

    Raises
    ------
    ParameterError
        Empty or repeated pools, a pool below one block.
    RequestTooLargeError
        A pool too small for the longest request (from the simulator).
    """
    base = _check_engine(engine)
    listed = _checked_requests(requests)

    def blocks(name: str, value: object) -> int | None:
        if value is None:
            return None
        tokens = int_at_least(
            name, value, base.block_size, what=f"None or an int >= the block size ({base.block_size})"
        )
        return -(-tokens // base.block_size)

    pools = grid_axis("kv_tokens", kv_tokens, blocks)
    rows = []
    for on in _caching_axis(caching):
        for pool in pools:
            result = simulate(
                listed,
                engine=dataclasses.replace(base, num_kv_blocks=pool, enable_prefix_caching=on),
                cost=cost,
                hardware=hardware,
                model=model,
                mode=mode,
            )
            rows.append(
                _grid_row(
                    result,
                    num_kv_blocks=result.num_kv_blocks,
                    kv_tokens=result.num_kv_blocks * base.block_size,
                    from_memory=pool is None,
                )
            )
    table = pd.DataFrame(rows)
    # caching values in the order given, pools ascending within each
    first = {on: i for i, on in enumerate(_caching_axis(caching))}
    order = np.lexsort((table["num_kv_blocks"].to_numpy(), table["enable_prefix_caching"].map(first).to_numpy()))
    return table.iloc[order].reset_index(drop=True)
