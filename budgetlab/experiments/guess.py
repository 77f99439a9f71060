"""The tuner's analytic first guess: a token budget from the SLO's inter-token limit and a
sequence cap from KV memory.

1. **Budget.** Every running stream waits one step per token, so the largest step that meets
   the SLO's tightest inter-token limit is the budget:
   :func:`~budgetlab.cost.budget_for_step_time` (closed form for the idealized cost, a numeric
   inverse of the step time for any other cost model), rounded *down* to a tile-friendly value
   (:func:`tile_budget`). A limit loose enough to allow more than
   :data:`BUDGET_WITHOUT_ITL_TOKENS` no longer argues for long steps, so the guess is then what
   it is without an ITL limit: a looser limit never moves the guess past that of no limit.
2. **Cap.** The KV pool's tokens divided by the workload's mean sequence (prompt + output)
   length: as many sequences as memory holds on average, rounded down to a multiple of 16
   (:func:`round_cap`) and never above the budget.
3. **Bounds.** Every budget the tuner simulates lies in a :class:`KnobRange`
   (:func:`budget_range`): at least :data:`MIN_BUDGET_TOKENS` (and ``max_model_len`` when
   chunked prefill is off, as vLLM requires), at most the largest budget whose activation peak
   still leaves a KV pool for the workload's longest request and whose tokens the pool and
   ``max_num_seqs`` × the longest request can use (a larger budget buys nothing). Caps lie in
   :func:`cap_range`. :func:`budget_candidates` and :func:`cap_candidates` turn search factors
   into such values, clamped and deduplicated, each with the reason it was moved
   (:class:`Candidate`).

:func:`first_guess` returns the guess, with the sentences behind it (:class:`FirstGuess`);
:func:`budgetlab.tune` searches around it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from budgetlab._checks import int_at_least, random_seed
from budgetlab.attention import KVGroup
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.inverse import MAX_SEARCH_TOKENS, budget_for_step_time
from budgetlab.cost.named import CostSpec, check_cost, cost_label, make_cost
from budgetlab.errors import DoesNotFitError
from budgetlab.experiments.slo import SLO, check_slo
from budgetlab.experiments.sweep import engine_template
from budgetlab.memory import (
    KVCapacity,
    blocks_for_tokens,
    is_tight,
    kv_capacity,
    memory_levers,
    scheduler_kv_groups,
    tight_memory_text,
)
from budgetlab.simulator.kv_groups import peak_blocks
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.text import fmt_latency
from budgetlab.workload import SweepWorkload, check_workload, mean_sequence_tokens, workload_requests
from budgetlab.workload.frames import RequestColumns

__all__ = [
    "requests_pool_holds",
    "tile_budget",
    "tile_step",
    "budget_candidate",
    "round_cap",
    "FirstGuess",
    "first_guess",
    "KnobRange",
    "budget_range",
    "cap_range",
    "Candidate",
    "budget_candidates",
    "cap_candidates",
    "longest_sequence_tokens",
    "BUDGET_WITHOUT_ITL_TOKENS",
    "CAP_MULTIPLE",
    "MIN_BUDGET_TOKENS",
]

BUDGET_WITHOUT_ITL_TOKENS = 8192
"""First-guess budget when the SLO limits no inter-token latency: vLLM's API-server default on
H100-class GPUs (nothing then argues for shorter steps)."""

CAP_MULTIPLE = 16
"""Sequence caps are rounded down to a multiple of this [count] (kept as is below it)."""

MIN_BUDGET_TOKENS = 16
"""Smallest budget the tuner simulates [tokens] (unless the ITL limit allows only less): one
16-row tile. Below it a step is mostly tile padding and a prompt takes a step per handful of
tokens, so each simulation runs many times longer for a configuration no one deploys."""

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
    up (so rounding never folds a larger candidate back onto the guess). A product above
    :data:`~budgetlab.cost.MAX_SEARCH_TOKENS` (16,777,216) gives that (never an overflow);
    :func:`budget_candidates` then clamps it into the budgets worth simulating."""
    product = guess_tokens * factor
    candidate = tile_budget(
        max(1, int(min(product, MAX_SEARCH_TOKENS))) if math.isfinite(product) else MAX_SEARCH_TOKENS
    )
    if factor > 1.0:
        candidate = max(candidate, guess_tokens + tile_step(guess_tokens))
    return candidate


def round_cap(seqs: int) -> int:
    """Round a sequence cap down to a multiple of 16 (kept as is below 16, at least 1)."""
    if seqs >= CAP_MULTIPLE:
        return seqs // CAP_MULTIPLE * CAP_MULTIPLE
    return max(1, int(seqs))


@dataclass(frozen=True)
class KnobRange:
    """The values of one knob worth simulating on a deployment and a workload, and why.

    Attributes
    ----------
    knob : str
        ``"max_num_batched_tokens"`` (values rounded down by :func:`tile_budget`) or
        ``"max_num_seqs"`` (by :func:`round_cap`).
    low, high : int
        The smallest and the largest value [tokens or count], ``low <= high``.
    low_reason, high_reason : str
        Why each end is where it is, as a phrase (``"the largest budget whose activation peak
        leaves a KV pool for the workload's longest request (10,720 tokens)"``).
    """

    knob: str
    low: int
    high: int
    low_reason: str
    high_reason: str

    @property
    def top(self) -> int:
        """The largest value a clamp gives: for the budget, ``high`` rounded down to a tile
        (``high`` itself when that would fall below ``low``); for the cap, ``high``."""
        rounded = tile_budget(self.high) if self.knob == "max_num_batched_tokens" else self.high
        return rounded if rounded >= self.low else self.high

    def _round(self, value: int) -> int:
        return tile_budget(value) if self.knob == "max_num_batched_tokens" else round_cap(value)

    def clamp(self, value: float) -> tuple[int, str]:
        """``value`` rounded and moved into the range, and what moved it (``""`` when nothing did).

        Rounding (to a tile or a multiple of 16) alone is not a move. A value above the range
        gets :attr:`top`, one below it ``low``; NaN or infinite values count as above.
        """
        if not math.isfinite(value) or value > self.high:
            return self.top, f"lowered to {self.top:,}, {self.high_reason}"
        if value < self.low:
            return self.low, f"raised to {self.low:,}, {self.low_reason}"
        return max(self.low, self._round(max(1, int(value)))), ""


def longest_sequence_tokens(workload: SweepWorkload, *, seed: int = 0) -> int:
    """The workload's longest prompt + output [tokens] (1 for a workload without requests).

    Read from its ``prompt_tokens`` and ``output_tokens`` arrays where it has them (a trace),
    else from ``requests(rate_per_s=1.0, seed=seed)`` (lengths do not depend on the load).
    """
    prompts, outputs = getattr(workload, "prompt_tokens", None), getattr(workload, "output_tokens", None)
    if isinstance(prompts, np.ndarray) and isinstance(outputs, np.ndarray) and prompts.size:
        return int(np.max(prompts + outputs))
    requests = workload_requests(workload, rate_per_s=1.0, seed=random_seed("seed", seed))
    if isinstance(requests, RequestColumns):  # a synthetic workload's columns: no Request built
        return int(np.max(requests.prompt_tokens + requests.output_tokens)) if len(requests) else 1
    return max((r.prompt_tokens + r.output_tokens for r in requests), default=1)


class _Pool:
    """The KV blocks of one deployment at any budget and cap, and whether a request fits."""

    def __init__(self, template: EngineConfig, hw: HardwareSpec, mdl: ModelSpec, longest_tokens: int) -> None:
        self.template, self.hw, self.mdl = template, hw, mdl
        self.longest_tokens = longest_tokens
        # the simulator's rule: a request peaks at ceil((prompt + output − 1) / block_size) blocks
        self.need_blocks = blocks_for_tokens(max(0, longest_tokens - 1), template.block_size)

    def engine(self, budget: int, cap: int) -> EngineConfig:
        return replace(self.template, max_num_batched_tokens=budget, max_num_seqs=max(1, min(cap, budget)))

    def blocks(self, budget: int, cap: int) -> int:
        """Usable KV blocks at this budget and cap; 0 when the model does not fit."""
        if self.template.num_kv_blocks is not None:
            return self.template.num_kv_blocks
        try:
            return kv_capacity(self.hw, self.mdl, self.engine(budget, cap)).num_blocks
        except DoesNotFitError:
            return 0

    def raise_unless_fits(self, budget: int, cap: int) -> None:
        """:class:`~budgetlab.errors.DoesNotFitError` (its own message) when nothing fits here."""
        if self.template.num_kv_blocks is None:
            kv_capacity(self.hw, self.mdl, self.engine(budget, cap))


def _largest(ok: Callable[[int], bool], low: int, high: int) -> int:
    """Largest ``n`` in ``[low, high]`` with ``ok(n)``, given ``ok(low)`` and ``ok`` true up to a
    point and false past it."""
    if ok(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle):
            low = middle
        else:
            high = middle
    return low


def budget_range(
    workload: SweepWorkload,
    *,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    max_num_seqs: int,
    engine: EngineConfig | None = None,
    smallest_tokens: int = MIN_BUDGET_TOKENS,
    seed: int = 0,
) -> KnobRange:
    """The budgets worth simulating with cap ``max_num_seqs``: valid, fitting and usable [tokens].

    * **Low end**: ``smallest_tokens`` (:data:`MIN_BUDGET_TOKENS`); ``max_model_len`` when
      chunked prefill is off (vLLM refuses a smaller budget then).
    * **High end**, the smallest of: the largest budget whose activation peak leaves the KV pool
      room for the workload's longest request (found by bisection on
      :func:`~budgetlab.memory.kv_capacity`, which shrinks as the budget grows); the tokens that
      pool holds (every token a step schedules needs a KV slot); ``max_num_seqs`` × the longest
      request (no step can hold more); :data:`~budgetlab.cost.MAX_SEARCH_TOKENS`. A budget above
      it buys nothing, or leaves no KV cache at all.

    Parameters
    ----------
    workload : SweepWorkload
        Its longest prompt + output (:func:`longest_sequence_tokens`).
    hardware, model : str or spec
    max_num_seqs : int
        The cap the budgets are tried with [count] (a larger cap has a larger sampler peak).
    engine : EngineConfig or None
        Template for the other knobs; ``None`` for vLLM's defaults.
    smallest_tokens : int
        The low end when nothing else raises it [tokens], >= 1.
    seed : int
        Workload seed.

    Raises
    ------
    DoesNotFitError
        When the model does not fit even at the low end: no budget fits.
    """
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    template = engine_template(engine)
    cap = int_at_least("max_num_seqs", max_num_seqs, 1)
    low = int_at_least("smallest_tokens", smallest_tokens, 1)
    return _budget_bounds(_Pool(template, hw, mdl, longest_sequence_tokens(workload, seed=seed)), cap, low)


def _budget_bounds(pool: _Pool, cap: int, low: int) -> KnobRange:
    """:func:`budget_range` on a :class:`_Pool` (whose longest request is known)."""
    template = pool.template
    low_reason = "the smallest budget the tuner simulates"
    if not template.enable_chunked_prefill and template.max_model_len is not None and template.max_model_len > low:
        low, low_reason = template.max_model_len, "vLLM's floor with chunked prefill off (max_model_len)"
    pool.raise_unless_fits(low, cap)
    need = pool.need_blocks if pool.blocks(low, cap) >= pool.need_blocks else 1  # else the simulator says why
    bs = template.block_size

    def usable(budget: int) -> bool:
        blocks = pool.blocks(budget, cap)
        return blocks >= need and budget <= blocks * bs

    fitting = _largest(usable, low, max(low, MAX_SEARCH_TOKENS)) if usable(low) else low
    high, high_reason = fitting, f"the tuner's ceiling of {MAX_SEARCH_TOKENS:,} tokens"
    if fitting < MAX_SEARCH_TOKENS:
        above = pool.blocks(fitting + 1, cap)
        if above < need:
            what = f"the workload's longest request ({pool.longest_tokens:,} tokens)" if need > 1 else "one block"
            high_reason = f"the largest budget whose activation peak leaves a KV pool for {what}"
        else:
            high_reason = "the largest budget its own KV pool holds (every token a step schedules needs a KV slot)"
    by_sequences = cap * pool.longest_tokens
    if by_sequences < high:
        high = max(low, by_sequences)
        high_reason = f"max_num_seqs {cap:,} × the longest request ({pool.longest_tokens:,} tokens): no step holds more"
    return KnobRange("max_num_batched_tokens", low, high, low_reason, high_reason)


def cap_range(
    workload: SweepWorkload,
    *,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    max_num_batched_tokens: int,
    smallest_seqs: int = CAP_MULTIPLE,
    engine: EngineConfig | None = None,
    seed: int = 0,
) -> KnobRange:
    """The caps worth simulating at budget ``max_num_batched_tokens`` [count].

    At least ``smallest_seqs`` (at most the budget); at most the budget (vLLM refuses a larger
    cap) and the largest cap whose sampler peak (it grows with the cap) still leaves a KV pool
    for the workload's longest request.

    Raises
    ------
    DoesNotFitError
        When the model does not fit at this budget even with the smallest cap.
    """
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    template = engine_template(engine)
    budget = int_at_least("max_num_batched_tokens", max_num_batched_tokens, 1)
    low = min(int_at_least("smallest_seqs", smallest_seqs, 1), budget)
    pool = _Pool(template, hw, mdl, longest_sequence_tokens(workload, seed=seed))
    pool.raise_unless_fits(budget, low)
    need = pool.need_blocks if pool.blocks(budget, low) >= pool.need_blocks else 1
    high = _largest(lambda c: pool.blocks(budget, c) >= need, low, budget)
    if high == budget:
        reason = f"the budget ({budget:,} tokens): vLLM refuses max_num_seqs above max_num_batched_tokens"
    else:
        reason = "the largest cap whose sampler peak leaves a KV pool for the workload's longest request"
    return KnobRange("max_num_seqs", low, high, f"the smallest cap the tuner simulates ({low:,})", reason)


@dataclass(frozen=True)
class Candidate:
    """One value of a knob the tuner simulates, where it came from, and why it moved.

    Attributes
    ----------
    value : int
        The budget [tokens] or cap [count].
    sources : tuple of str
        What asked for it: ``"the first guess"``, ``"budget_factors[4] = 1e+06"``; several when
        they land on one value (it is simulated once).
    note : str
        Why a source's value was moved into the :class:`KnobRange` (``""`` when none was).
    """

    value: int
    sources: tuple[str, ...]
    note: str = ""


def _merge(entries: list[tuple[int, str, str]]) -> tuple[Candidate, ...]:
    """One :class:`Candidate` per value, increasing; sources and notes of equal values merged."""
    out = []
    for value in sorted({v for v, _, _ in entries}):
        same = [(source, note) for v, source, note in entries if v == value]
        notes = [note for _, note in same if note]
        if notes and len(same) > 1:
            notes.append(f"the same value as {', '.join(s for s, n in same if not n) or 'another'}: simulated once")
        out.append(Candidate(value, tuple(s for s, _ in same), "; ".join(dict.fromkeys(notes))))
    return tuple(out)


def _amount(value: float) -> str:
    return f"{value:,.0f}" if value < 1e12 else f"{value:.3g}"


def budget_candidates(guess_tokens: int, factors: Sequence[float], bounds: KnobRange) -> tuple[Candidate, ...]:
    """The budgets the tuner's first phase simulates: the guess and :func:`budget_candidate`
    of each factor, clamped into ``bounds`` (:meth:`KnobRange.clamp`) and deduplicated [tokens].

    Examples
    --------
    With a guess of 2,304, factors ``(0.5, 1e6)`` and a range of 16 to 399,872 tokens: 1,152,
    2,304 and 399,616 (the largest tile in range), the last one noting
    ``"budget_factors[1] = 1e+06 asks for 2,304,000,000 tokens: lowered to 399,616, ..."``.
    """
    entries = [(bounds.clamp(guess_tokens)[0], "the first guess", "")]
    for i, factor in enumerate(factors):
        value, moved = bounds.clamp(budget_candidate(guess_tokens, factor))
        source = f"budget_factors[{i}] = {factor:g}"
        note = f"{source} asks for {_amount(guess_tokens * factor)} tokens: {moved}" if moved else ""
        entries.append((value, source, note))
    return _merge(entries)


def cap_candidates(guess_seqs: int, factors: Sequence[float], bounds: KnobRange) -> tuple[Candidate, ...]:
    """The caps the tuner's second phase simulates: the guess and ``guess × factor`` rounded by
    :func:`round_cap`, each clamped into ``bounds`` (:func:`cap_range`) and deduplicated
    [count]. A guess above the range's top (the budget) is the top, without a note: the cap is
    never above the budget."""
    entries = [(bounds.clamp(guess_seqs)[0], "the first guess", "")]
    for i, factor in enumerate(factors):
        product = guess_seqs * factor
        value, moved = bounds.clamp(product if product >= 1 else 1)
        source = f"cap_factors[{i}] = {factor:g}"
        entries.append((value, source, f"{source} asks for {_amount(product)} sequences: {moved}" if moved else ""))
    return _merge(entries)


@dataclass(frozen=True)
class FirstGuess:
    """The tuner's analytic starting point, with its reasoning.

    Attributes
    ----------
    max_num_batched_tokens : int
        Budget [tokens]: ``step_budget_tokens`` (at most :data:`BUDGET_WITHOUT_ITL_TOKENS`)
        rounded down by :func:`tile_budget`, within ``budget_range``.
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
    budget_range : KnobRange or None
        The budgets worth simulating with the guessed cap (:func:`budget_range`); ``None`` on a
        guess built by hand.
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
    budget_range: KnobRange | None = field(default=None, compare=False, repr=False)

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
    cost: CostSpec = "typical",
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

    Raises
    ------
    DoesNotFitError
        When the model leaves no KV cache even at the smallest budget.
    NoBudgetMeetsTargetError
        When the ITL target is below even a one-token step.
    """
    workload = check_workload(workload)
    check_slo(slo)
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    template = engine_template(engine)
    seed = random_seed("seed", seed)
    step_cost = make_cost(check_cost(cost), hw, mdl, engine=template)
    target = slo.itl_target_s
    raw = None if target is None else int(budget_for_step_time(step_cost, target))  # a scalar target: an int
    wanted = BUDGET_WITHOUT_ITL_TOKENS if raw is None else min(raw, BUDGET_WITHOUT_ITL_TOKENS)
    smallest = min(MIN_BUDGET_TOKENS, wanted)

    pool_of = _Pool(template, hw, mdl, longest_sequence_tokens(workload, seed=seed))

    def bounds(cap: int) -> KnobRange:
        return _budget_bounds(pool_of, cap, smallest)

    mean_tokens = mean_sequence_tokens(workload, seed=seed)
    # The KV pool depends on the cap (activation memory grows with it) and the cap on the pool:
    # a fixed point. Two rounds from vLLM's default cap settle it; the budget's range is then
    # found again at that cap (its sampler peak), and the budget kept within it.
    cap = min(wanted, _FIRST_CAP_SEQS)
    budget, moved = bounds(cap).clamp(wanted)
    for _ in range(2):
        kv_tokens, pool, pool_engine = _kv_pool(template, hw, mdl, budget, cap)
        cap_raw = _requests_held(pool_engine, mdl, kv_tokens, pool, mean_tokens)
        cap = min(round_cap(cap_raw), budget)
    budget_bounds = bounds(cap)
    if budget > budget_bounds.top:
        budget, moved = budget_bounds.clamp(wanted)
        cap = min(cap, budget)
        kv_tokens, pool, pool_engine = _kv_pool(template, hw, mdl, budget, cap)
    sentences = [_budget_sentence(slo, raw, budget, moved, f"{hw.name} + {mdl.name} ({cost_label(cost)} cost)")]
    clipped = " (clipped to the budget)" if cap == budget and round_cap(cap_raw) > budget else ""
    levers = memory_levers(hw, mdl, pool_engine) if pool is not None and is_tight(pool) else None
    sentences.append(
        f"The KV pool holds {kv_tokens:,} tokens; at the workload's mean of {mean_tokens:,.0f} "
        f"tokens per request (prompt + output) that is {cap_raw:,} sequences"
        f"{_windows_note(pool_engine, mdl)}, so the first guess for max_num_seqs is {cap:,}{clipped}."
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
        budget_range=budget_bounds,
    )


def _budget_sentence(slo: SLO, raw: int | None, budget: int, moved: str, setting: str) -> str:
    """The first sentence of :attr:`FirstGuess.explanation`: where the budget comes from."""
    default = f"{BUDGET_WITHOUT_ITL_TOKENS:,}"
    if raw is None:
        text = (
            f"The SLO limits no inter-token latency, so nothing argues for short steps: the "
            f"first guess is vLLM's API-server default budget of {default} tokens"
        )
    else:
        target = slo.itl_target_s
        assert target is not None
        text = (
            f"Every running stream waits one step per token, so the {slo.itl_target_metric} ≤ "
            f"{fmt_latency(target)} target allows steps of up to {raw:,} tokens on {setting}"
        )
        if raw > BUDGET_WITHOUT_ITL_TOKENS:
            text += (
                f"; that is more than vLLM's API-server default of {default}, so the limit no longer "
                "argues for long steps and the first guess is that default, as with no ITL limit "
                "(a longer budget only costs activation memory the KV pool loses, and a looser "
                "limit never gets a worse start than no limit)"
            )
        else:
            text += f"; rounded down to a tile-friendly {budget:,} tokens"
    if moved:
        text += f"; the budget is {moved}"
    return text + "."


def requests_pool_holds(groups: tuple[KVGroup, ...], num_blocks: int, block_size: int, tokens: float) -> float:
    """Requests of ``tokens`` tokens (prompt + output) a pool of ``num_blocks`` usable blocks holds
    at once, each at its last step [requests]: the blocks over what one such request holds in
    every KV-cache group then (:func:`budgetlab.simulator.kv_groups.peak_blocks`: a sliding
    window only its window, a Mamba group one block)."""
    return num_blocks / peak_blocks(groups, max(1, round(tokens)), block_size)


def _requests_held(
    engine: EngineConfig, mdl: ModelSpec, kv_tokens: int, pool: KVCapacity | None, mean_tokens: float
) -> int:
    """The first cap's count of requests [count]: ``kv_tokens // mean_tokens`` for one
    full-attention group; with several groups, :func:`requests_pool_holds` of the pool."""
    groups, block_size = scheduler_kv_groups(mdl, engine)
    if groups == ("full",):
        return int(kv_tokens // mean_tokens)
    num_blocks = pool.num_blocks if pool is not None else int(engine.num_kv_blocks or 0)
    return int(requests_pool_holds(groups, num_blocks, block_size, mean_tokens))


def _windows_note(engine: EngineConfig, mdl: ModelSpec) -> str:
    groups, _ = scheduler_kv_groups(mdl, engine)
    return "" if groups == ("full",) else " (its sliding-window / Mamba groups hold less than every token)"


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
