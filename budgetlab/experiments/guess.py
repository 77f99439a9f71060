"""The tuner's analytic first guess: a token budget from the SLO's inter-token limit and a
sequence cap from KV memory.

1. **Budget.** Every running stream waits one step per token, so the largest step that meets
   the SLO's tightest inter-token limit is the budget:
   :func:`~budgetlab.cost.budget_for_step_time` (closed form for the idealized cost, a numeric
   inverse of the step time for any other cost model), rounded *down* to a tile-friendly value
   (:func:`tile_budget`).
2. **Cap.** The KV pool's tokens divided by the workload's mean sequence (prompt + output)
   length: as many sequences as memory holds on average, rounded down to a multiple of 16
   (:func:`round_cap`) and never above the budget.

:func:`first_guess` returns both, with the two sentences behind them (:class:`FirstGuess`);
:func:`budgetlab.tune` searches around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from budgetlab._checks import int_at_least, random_seed
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.inverse import budget_for_step_time
from budgetlab.cost.named import CostSpec, check_cost, cost_label, make_cost
from budgetlab.experiments.slo import SLO, check_slo
from budgetlab.experiments.sweep import engine_template
from budgetlab.memory import KVCapacity, is_tight, kv_capacity, memory_levers, tight_memory_text
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.text import fmt_latency
from budgetlab.workload import SweepWorkload, check_workload, mean_sequence_tokens

__all__ = [
    "tile_budget",
    "tile_step",
    "budget_candidate",
    "round_cap",
    "FirstGuess",
    "first_guess",
    "BUDGET_WITHOUT_ITL_TOKENS",
    "CAP_MULTIPLE",
]

BUDGET_WITHOUT_ITL_TOKENS = 8192
"""First-guess budget when the SLO limits no inter-token latency: vLLM's API-server default on
H100-class GPUs (nothing then argues for shorter steps)."""

CAP_MULTIPLE = 16
"""Sequence caps are rounded down to a multiple of this [count] (kept as is below it)."""

_FIRST_CAP_SEQS = 256  # vLLM's default max_num_seqs: where the cap's fixed point starts


def tile_budget(tokens: int) -> int:
    """Round a token budget *down* to a tile-friendly value [tokens].

    GEMMs pad their token dimension to whole tiles (128 or 256 rows on Hopper-class kernels),
    so a budget just past a tile edge buys a whole tile of padding. The rule:

    * 1,024 tokens or more: a multiple of 256 (2,464 → 2,304);
    * 128 to 1,023: a multiple of 128 (1,000 → 896);
    * 16 to 127: a multiple of 16 (100 → 96);
    * below 16: unchanged.

    Rounding down keeps every step within the step-time target the budget came from.

    Parameters
    ----------
    tokens : int
        Budget [tokens], >= 1.

    Examples
    --------
    >>> tile_budget(2464), tile_budget(1000), tile_budget(100)
    (2304, 896, 96)
    """
    n = int_at_least("tokens", tokens, 1)
    tile = tile_step(n)
    return n // tile * tile


def tile_step(tokens: int) -> int:
    """The tile :func:`tile_budget` rounds ``tokens`` to [tokens]: 256, 128, 16 or 1."""
    for edge, multiple in ((1024, 256), (128, 128), (16, 16)):
        if tokens >= edge:
            return multiple
    return 1


def budget_candidate(guess_tokens: int, factor: float) -> int:
    """``guess × factor`` rounded down to a tile; a factor above 1 gets at least the next tile
    up (so rounding never folds a larger candidate back onto the guess)."""
    candidate = tile_budget(max(1, int(guess_tokens * factor)))
    if factor > 1.0:
        candidate = max(candidate, guess_tokens + tile_step(guess_tokens))
    return candidate


def round_cap(seqs: int) -> int:
    """Round a sequence cap down to a multiple of 16 (kept as is below 16, at least 1)."""
    if seqs >= CAP_MULTIPLE:
        return seqs // CAP_MULTIPLE * CAP_MULTIPLE
    return max(1, int(seqs))


@dataclass(frozen=True)
class FirstGuess:
    """The tuner's analytic starting point, with its reasoning.

    Attributes
    ----------
    max_num_batched_tokens : int
        Budget [tokens]: ``step_budget_tokens`` rounded down by :func:`tile_budget`.
    max_num_seqs : int
        Cap [count]: ``kv_tokens / mean_sequence_tokens`` rounded down to a multiple of 16,
        at most the budget.
    step_budget_tokens : int or None
        Largest step meeting the ITL target, before rounding [tokens]; ``None`` without one.
    itl_target_s : float or None
        The SLO's tightest inter-token limit [s].
    itl_metric : str or None
        Which metric it is.
    kv_tokens : int
        Tokens the KV pool holds at the guessed budget [tokens].
    mean_sequence_tokens : float
        The workload's mean prompt + output [tokens].
    explanation : tuple of str
        The sentences behind the numbers (two, plus the tight-memory warning when it applies).
    memory_levers : pandas.DataFrame or None
        When the pool is tight (:func:`budgetlab.memory.is_tight`), what each way out buys
        (:func:`budgetlab.memory.memory_levers`); ``None`` otherwise, and when the engine fixes
        ``num_kv_blocks``.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    step_budget_tokens: int | None
    itl_target_s: float | None
    itl_metric: str | None
    kv_tokens: int
    mean_sequence_tokens: float
    explanation: tuple[str, ...]
    memory_levers: pd.DataFrame | None = field(default=None, compare=False, repr=False)

    @property
    def memory_tight(self) -> bool:
        """Whether the KV pool is tight: the answer is memory, sharding or replicas, not a knob."""
        return self.memory_levers is not None


def first_guess(
    workload: SweepWorkload,
    *,
    slo: SLO,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "ideal",
    engine: EngineConfig | None = None,
    seed: int = 0,
) -> FirstGuess:
    """The analytic budget and cap :func:`tune` starts from (see the module docstring).

    Parameters
    ----------
    workload : SweepWorkload
        Its mean prompt + output length sizes the cap.
    slo : SLO
        Its tightest inter-token limit sizes the budget.
    hardware, model : str or spec
    cost : str, callable or cost model
        The step-time model the ITL target is inverted with (see
        :func:`budgetlab.cost.named.make_cost`).
    engine : EngineConfig or None
        Template for the other knobs (``block_size``, ``gpu_memory_utilization``, a fixed
        ``num_kv_blocks``); ``None`` for vLLM's defaults.
    seed : int
        Workload seed used for the mean length.
    """
    workload = check_workload(workload)
    check_slo(slo)
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    template = engine_template(engine)
    step_cost = make_cost(check_cost(cost), hw, mdl, engine=template)
    target = slo.itl_target_s
    sentences = []
    if target is None:
        raw = None
        budget = BUDGET_WITHOUT_ITL_TOKENS
        sentences.append(
            f"The SLO limits no inter-token latency, so nothing argues for short steps: the "
            f"first guess is vLLM's API-server default budget of {budget:,} tokens."
        )
    else:
        raw = int(budget_for_step_time(step_cost, target))  # a scalar target gives an int
        budget = tile_budget(raw)
        sentences.append(
            f"Every running stream waits one step per token, so the {slo.itl_target_metric} ≤ "
            f"{fmt_latency(target)} target allows steps of up to {raw:,} tokens on {hw.name} + "
            f"{mdl.name} ({cost_label(cost)} cost); rounded down to a tile-friendly "
            f"{budget:,} tokens."
        )
    mean_tokens = mean_sequence_tokens(workload, seed=random_seed("seed", seed))
    # The KV pool depends on the cap (activation memory grows with it) and the cap on the pool:
    # a fixed point. Two rounds from vLLM's default cap settle it.
    cap = min(budget, _FIRST_CAP_SEQS)
    for _ in range(2):
        kv_tokens, pool, pool_engine = _kv_pool(template, hw, mdl, budget, cap)
        cap_raw = int(kv_tokens // mean_tokens)
        cap = min(round_cap(cap_raw), budget)
    clipped = " (clipped to the budget)" if cap == budget and round_cap(cap_raw) > budget else ""
    levers = memory_levers(hw, mdl, pool_engine) if pool is not None and is_tight(pool) else None
    sentences.append(
        f"The KV pool holds {kv_tokens:,} tokens; at the workload's mean of {mean_tokens:,.0f} "
        f"tokens per request (prompt + output) that is {cap_raw:,} sequences, so the first "
        f"guess for max_num_seqs is {cap:,}{clipped}."
    )
    if pool is not None and levers is not None:
        sentences.append(tight_memory_text(pool, levers))
    return FirstGuess(
        max_num_batched_tokens=budget,
        max_num_seqs=cap,
        step_budget_tokens=raw,
        itl_target_s=target,
        itl_metric=slo.itl_target_metric,
        kv_tokens=int(kv_tokens),
        mean_sequence_tokens=mean_tokens,
        explanation=tuple(sentences),
        memory_levers=levers,
    )


def _kv_pool(
    template: EngineConfig, hw: HardwareSpec, mdl: ModelSpec, budget: int, cap: int
) -> tuple[int, KVCapacity | None, EngineConfig]:
    """The KV tokens at ``budget`` and ``cap``, the pool they come from (``None`` when the engine
    fixes ``num_kv_blocks``) and the engine sized."""
    eng = replace(template, max_num_batched_tokens=budget, max_num_seqs=max(1, min(cap, budget)))
    if template.num_kv_blocks is not None:
        return template.num_kv_blocks * template.block_size, None, eng
    pool = kv_capacity(hw, mdl, eng)
    return pool.num_tokens, pool, eng
