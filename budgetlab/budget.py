"""One step's token budget, filled in vLLM's order, and the seeds' scripted chunking scenario.

vLLM fills a step's ``max_num_batched_tokens`` by walking the running requests in admission
order (a decode takes 1 token, a partial prefill takes what is left of the budget), then the
waiting queue first-come-first-served; a prompt that does not fit is chunked at the budget
edge. :func:`fill_step` is that rule as a pure function; the simulator applies the same rule
with KV blocks and preemption on top (``shared/reference/vllm-v1-scheduling.md``).

The scripted scenario of the seeds: ``num_decodes`` requests are decoding and one prompt of
``prompt_tokens`` arrives. Each step the decodes take their tokens first and the prompt gets
what is left, so it is ingested in chunks of ``budget − num_decodes`` tokens (2048 − 100 =
1,948: chunks 1948, 1948, 1104 for a 5,000-token prompt). :func:`ttft_s` is the time until
its first token; :func:`longest_gap_s` the longest wait between two tokens the decoders see
meanwhile. Both are vectorized over ``budget_tokens``; ``None`` means no budget (the whole
prompt in one step). :func:`budget_for_longest_gap` inverts the second: the largest budget
whose longest gap stays within a latency target.

The same scenario, whole: :func:`prompt_timeline` lists the prompt's steps with their times
(priced exactly as :func:`ttft_s` prices them, so its last step ends at the TTFT). What the
budget trades across many budgets and cost models is :mod:`budgetlab.tradeoffs`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from budgetlab._checks import MAX_PROMPT_STEPS, MAX_TOKENS, at_most, int_at_least, is_int, number_in, whole_array
from budgetlab.cost.inverse import bisect_largest
from budgetlab.cost.protocol import CostModel
from budgetlab.errors import NoBudgetMeetsTargetError, ParameterError
from budgetlab.specs import Batch

__all__ = [
    "StepFill",
    "fill_step",
    "prefill_tokens_left",
    "chunk_schedule",
    "prompt_steps",
    "ttft_s",
    "longest_gap_s",
    "budget_for_longest_gap",
    "prompt_timeline",
    "whole_budgets",
    "check_scenario",
]


@dataclass(frozen=True)
class StepFill:
    """How one step's budget was shared out.

    Attributes
    ----------
    running_tokens : tuple of int
        Tokens scheduled for each running request, in admission order (0: got nothing).
    admitted_tokens : tuple of int
        Tokens scheduled for each waiting request admitted this step, in queue order.
    leftover_tokens : int
        Budget left unused [tokens].
    """

    running_tokens: tuple[int, ...]
    admitted_tokens: tuple[int, ...]
    leftover_tokens: int

    @property
    def num_tokens(self) -> int:
        """Tokens the step processes [tokens]."""
        return sum(self.running_tokens) + sum(self.admitted_tokens)


def fill_step(
    *,
    budget_tokens: int,
    running_remaining_tokens: Sequence[int],
    waiting_remaining_tokens: Sequence[int] = (),
    long_prefill_token_threshold: int = 0,
    max_num_seqs: int | None = None,
) -> StepFill:
    """Share one step's token budget out in vLLM V1's order (the token gates only).

    Parameters
    ----------
    budget_tokens : int
        ``max_num_batched_tokens`` [tokens], > 0.
    running_remaining_tokens : sequence of int
        For each running request in admission order, the tokens it still needs before it
        samples: 1 for a decode, the rest of its prompt for a partial prefill [tokens].
    waiting_remaining_tokens : sequence of int
        The same for the waiting queue, first come first served [tokens].
    long_prefill_token_threshold : int
        Cap on one request's chunk [tokens]; 0 disables it. Ignored when there is exactly one
        request in all, as in vLLM.
    max_num_seqs : int or None
        Sequence cap: waiting requests are admitted only while the running count is below it.

    Returns
    -------
    StepFill
        Tokens per running request, per admitted request, and the budget left.

    Raises
    ------
    ParameterError
        ``budget_tokens`` not an int >= 1, ``long_prefill_token_threshold`` not an int >= 0, or
        ``max_num_seqs`` neither None nor an int >= 1.
    ValueError
        A remaining-token list that is not a sequence of ints, or a request needing no token.

    Notes
    -----
    KV-cache blocks, the third gate, are not modelled here; :mod:`budgetlab.admission` and the
    simulator add them.
    """
    int_at_least("budget_tokens", budget_tokens, 1, what="a whole number of tokens >= 1", maximum=MAX_TOKENS)
    int_at_least(
        "long_prefill_token_threshold",
        long_prefill_token_threshold,
        0,
        what="an int >= 0 (0 disables it) [tokens]",
        maximum=MAX_TOKENS,
    )
    if max_num_seqs is not None:
        int_at_least("max_num_seqs", max_num_seqs, 1, what="an int >= 1 [requests], or None", maximum=MAX_TOKENS)
    for name, given in (
        ("running_remaining_tokens", running_remaining_tokens),
        ("waiting_remaining_tokens", waiting_remaining_tokens),
    ):
        # `type(r) is int` first: the simulator's and the tests' plain ints skip the general check
        if isinstance(given, (str, bytes)) or not all(type(r) is int or is_int(r) for r in given):
            raise ValueError(f"{name} must be a sequence of ints [tokens], got {given!r}")
    if any(r <= 0 for r in (*running_remaining_tokens, *waiting_remaining_tokens)):
        raise ValueError("every request must still need at least 1 token")
    num_requests = len(running_remaining_tokens) + len(waiting_remaining_tokens)
    cap = long_prefill_token_threshold if long_prefill_token_threshold > 0 and num_requests > 1 else None

    left = budget_tokens

    def take(remaining: int) -> int:
        return min(remaining, left) if cap is None else min(remaining, cap, left)

    running = []
    for remaining in running_remaining_tokens:
        tokens = take(remaining)
        running.append(tokens)
        left -= tokens
    admitted: list[int] = []
    num_running = len(running_remaining_tokens)
    for remaining in waiting_remaining_tokens:
        if left == 0 or (max_num_seqs is not None and num_running + len(admitted) >= max_num_seqs):
            break
        tokens = take(remaining)
        admitted.append(tokens)
        left -= tokens
    return StepFill(tuple(running), tuple(admitted), left)


def prefill_tokens_left(*, budget_tokens: ArrayLike, num_decodes: ArrayLike) -> np.ndarray | int:
    """Budget left for prompt chunks once the decodes took theirs [tokens] (vectorized).

    The seeds' interaction: budget 2048 with 60 decoders leaves 1,988; with 400, 1,648.

    Raises
    ------
    ParameterError
        A budget that is not a whole number of tokens >= 1, or a decode count that is not a
        whole number >= 0 (NaN, infinities, fractions, bools and strings included).
    """
    budgets = whole_array("budget_tokens", budget_tokens, 1, what="whole numbers of tokens >= 1", maximum=MAX_TOKENS)
    decodes = whole_array("num_decodes", num_decodes, 0, what="whole numbers of requests >= 0", maximum=MAX_TOKENS)
    left = np.maximum(budgets - decodes, 0)
    return int(left) if left.ndim == 0 else left


def chunk_schedule(
    *,
    budget_tokens: int | None,
    num_decodes: int,
    prompt_tokens: int,
    long_prefill_token_threshold: int = 0,
) -> list[int]:
    """Chunks one prompt is ingested in while ``num_decodes`` requests decode [tokens].

    Steps are filled with :func:`fill_step`: the decoders (admitted earlier) first, the prompt
    last. ``budget_tokens=None`` means no budget: one chunk.

    Every token count is at most 2**27 (:data:`~budgetlab._checks.MAX_TOKENS`, far past any
    context window) and the prompt at most 2**20 chunks
    (:data:`~budgetlab._checks.MAX_PROMPT_STEPS`): the list, and every function that prices
    it step by step (:func:`ttft_s`, :func:`prompt_timeline`), stays in memory and in seconds.

    Raises
    ------
    ParameterError
        A count that is not a whole number in range, or a prompt that would take more than
        :data:`~budgetlab._checks.MAX_PROMPT_STEPS` chunks (the message says which budget
        would do).
    ValueError
        A budget that leaves no room for the prompt beside the decodes.

    Examples
    --------
    >>> chunk_schedule(budget_tokens=2048, num_decodes=100, prompt_tokens=5000)
    [1948, 1948, 1104]
    """
    check_scenario(num_decodes=num_decodes, prompt_tokens=prompt_tokens)
    threshold = int_at_least(
        "long_prefill_token_threshold",
        long_prefill_token_threshold,
        0,
        what="an int >= 0 (0 disables it) [tokens]",
        maximum=MAX_TOKENS,
    )
    if budget_tokens is None:
        return [prompt_tokens]
    budget = int_at_least(
        "budget_tokens", budget_tokens, 1, what="a whole number of tokens >= 1, or None", maximum=MAX_TOKENS
    )
    _check_budget_leaves_room(np.asarray(budget), num_decodes)
    # Closed form of fill_step's order, step after step: the decodes take one token each, the
    # prompt the rest (capped at the threshold when it is not alone), the same every step.
    chunk = budget - num_decodes
    if threshold > 0 and num_decodes > 0:
        chunk = min(chunk, threshold)
    full, last = divmod(prompt_tokens, chunk)
    _check_steps(full + (1 if last else 0), chunk=chunk, prompt_tokens=prompt_tokens, num_decodes=num_decodes)
    return [chunk] * full + ([last] if last else [])


def _check_steps(steps: int, *, chunk: int, prompt_tokens: int, num_decodes: int) -> None:
    """:class:`~budgetlab.errors.ParameterError` when the prompt takes more than
    :data:`~budgetlab._checks.MAX_PROMPT_STEPS` chunks of ``chunk`` tokens, naming a budget
    that would do."""
    bound = MAX_PROMPT_STEPS
    if steps > bound.value:
        enough = num_decodes + -(-prompt_tokens // int(bound.value))
        raise ParameterError(
            f"prompt_tokens={prompt_tokens:,} in chunks of {chunk:,} tokens (the budget_tokens left "
            f"beside {num_decodes:,} decodes, or the long_prefill_token_threshold) takes {steps:,} steps; "
            f"at most {bound.value:,} are priced ({bound.why}). A budget of {enough:,} tokens or more would do"
        )


def prompt_steps(
    *,
    budget_tokens: int | None,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
    long_prefill_token_threshold: int = 0,
) -> list[Batch]:
    """The steps that ingest the prompt, as :class:`~budgetlab.specs.Batch` compositions.

    Step ``i`` holds the ``num_decodes`` decodes, each with ``decode_context_tokens + i`` tokens
    already cached, and the prompt's ``i``-th chunk, which attends to the chunks before it.
    Any cost model turns these into times; the idealized one only counts their tokens.
    """
    int_at_least("decode_context_tokens", decode_context_tokens, 0, what="an int >= 0 [tokens]", maximum=MAX_TOKENS)
    chunks = chunk_schedule(
        budget_tokens=budget_tokens,
        num_decodes=num_decodes,
        prompt_tokens=prompt_tokens,
        long_prefill_token_threshold=long_prefill_token_threshold,
    )
    done = np.concatenate([[0], np.cumsum(chunks)[:-1]])
    return [
        Batch(
            num_decodes=num_decodes,
            decode_context_tokens=num_decodes * (decode_context_tokens + step),
            prefill_tokens=(chunk,),
            prefill_context_tokens=(int(cached),),
        )
        for step, (chunk, cached) in enumerate(zip(chunks, done))
    ]


def _step_times_s(cost: CostModel, budget_tokens: int | None, **scenario: int) -> list[float]:
    """The times of the prompt's steps (:func:`prompt_steps`, priced by ``batch_time_s``) [s]."""
    return [cost.batch_time_s(batch) for batch in prompt_steps(budget_tokens=budget_tokens, **scenario)]


def _clock_s(step_times_s: Sequence[float]) -> list[float]:
    """When each step ends, counted from the first step's start [s]: the running sum.

    :func:`ttft_s` is its last value and :func:`prompt_timeline` its ``end_s`` column, so the
    two agree to the last bit.
    """
    return list(itertools.accumulate(step_times_s))


def whole_budgets(budget_tokens: ArrayLike, num_decodes: int, *, name: str = "budget_tokens") -> np.ndarray:
    """``budget_tokens`` as an int64 array, each budget whole and above ``num_decodes``; else
    ``ValueError`` naming ``name`` and saying which (the check every budget sweep of the
    scenario makes). NaN, infinities, fractions, bools, strings and ``None`` are refused."""
    budgets = whole_array(name, budget_tokens, 1, what="whole numbers of tokens >= 1", error=ValueError)
    if budgets.size:
        at_most(name, int(budgets.max()), MAX_TOKENS, error=ValueError)
    _check_budget_leaves_room(budgets, num_decodes, name=name)
    return budgets


def _per_budget(
    reduce: Callable[[list[float]], float], cost: CostModel, budget_tokens: ArrayLike | None, **scenario: int
) -> np.ndarray | float:
    """Apply ``reduce`` to the step times of the prompt's steps, for each budget."""
    if budget_tokens is None:
        budgets = np.asarray(None, dtype=object)
    else:
        budgets = whole_budgets(budget_tokens, scenario["num_decodes"])
    values = np.array([reduce(_step_times_s(cost, budget, **scenario)) for budget in budgets.ravel().tolist()]).reshape(
        budgets.shape
    )
    return float(values) if values.ndim == 0 else values


def _ttft_of(step_times_s: list[float]) -> float:
    return _clock_s(step_times_s)[-1]


def ttft_s(
    cost: CostModel,
    *,
    budget_tokens: ArrayLike | None,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
    long_prefill_token_threshold: int = 0,
) -> np.ndarray | float:
    """Time from the prompt's arrival (at a step start) to its first token [s] (vectorized).

    The sum of the times of the steps that carry its chunks, each holding the decodes too; the
    first token is sampled at the end of the step that finishes the prompt.

    Parameters
    ----------
    cost : cost model
        :class:`~budgetlab.cost.IdealCost`, :class:`~budgetlab.cost.CalibratedCost`
        or anything with ``batch_time_s``.
    budget_tokens : int, array_like of int, or None
        Token budget(s) [tokens]; ``None`` = no budget (one step of decodes + whole prompt).
    num_decodes : int
        Requests decoding meanwhile, one token each per step [count].
    prompt_tokens : int
        Prompt length [tokens].
    decode_context_tokens : int
        Tokens each decoder has cached when the prompt arrives [tokens]; only cost models with
        attention or KV reads care.
    long_prefill_token_threshold : int
        Optional cap on a chunk [tokens] (0: none).
    """
    scenario = _scenario(num_decodes, prompt_tokens, decode_context_tokens, long_prefill_token_threshold)
    return _per_budget(_ttft_of, cost, budget_tokens, **scenario)


def longest_gap_s(
    cost: CostModel,
    *,
    budget_tokens: ArrayLike | None,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
    long_prefill_token_threshold: int = 0,
) -> np.ndarray | float:
    """Longest wait between two tokens of a decoding user while the prompt is ingested [s].

    Each decoder gets one token per step, so its longest gap is the longest step: in the
    idealized model the one with the biggest prompt chunk (the first). Without a budget that is
    one step holding the whole prompt. Parameters as in :func:`ttft_s` (vectorized over
    ``budget_tokens``).
    """
    scenario = _scenario(num_decodes, prompt_tokens, decode_context_tokens, long_prefill_token_threshold)
    return _per_budget(max, cost, budget_tokens, **scenario)


def budget_for_longest_gap(
    cost: CostModel,
    *,
    target_s: float,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
    long_prefill_token_threshold: int = 0,
) -> int:
    """Largest token budget whose :func:`longest_gap_s` stays within ``target_s`` [tokens].

    The decoders' longest gap grows with the budget (a bigger first chunk makes a longer step)
    until the whole prompt fits in one step, at ``num_decodes + prompt_tokens``; bigger budgets
    change nothing. The answer is found by bisection between ``num_decodes + 1`` and that
    budget, so the longest gap must not shrink as the budget grows. In the idealized model,
    below the whole-prompt budget, the longest step is the first, full one, and this equals
    :func:`~budgetlab.cost.budget_for_step_time`; with decoders that read their KV cache
    (:class:`~budgetlab.cost.CalibratedCost`) it is smaller.

    Parameters
    ----------
    cost : cost model
        Anything with ``batch_time_s``.
    target_s : float
        Longest gap allowed [s], > 0.
    num_decodes, prompt_tokens, decode_context_tokens, long_prefill_token_threshold : int
        The scripted scenario, as in :func:`ttft_s`.

    Returns
    -------
    int
        The budget [tokens]; ``num_decodes + prompt_tokens`` when even the whole prompt in one
        step keeps the gap within the target (every budget does).

    Raises
    ------
    NoBudgetMeetsTargetError
        When even a budget of ``num_decodes + 1`` (one prompt token a step) misses the target.
    """
    target = number_in("target_s", target_s, low=0.0, low_open=True, what="seconds > 0", error=ValueError)
    scenario = _scenario(num_decodes, prompt_tokens, decode_context_tokens, long_prefill_token_threshold)

    def gap_s(budget: int) -> float:
        return float(longest_gap_s(cost, budget_tokens=budget, **scenario))

    # The smallest budget searched leaves one prompt token a step, unless that would be more
    # steps than are priced one by one (MAX_PROMPT_STEPS); then the smallest that is not.
    low = num_decodes + max(1, -(-prompt_tokens // int(MAX_PROMPT_STEPS.value)))
    high = num_decodes + prompt_tokens
    if gap_s(high) <= target:
        return high
    if gap_s(low) > target and low > num_decodes + 1:
        raise ParameterError(
            f"no budget from {low:,} tokens up keeps the decoders' longest gap within {target * 1e3:.2f} ms, "
            f"and smaller budgets would ingest prompt_tokens={prompt_tokens:,} in more than "
            f"{MAX_PROMPT_STEPS.value:,} steps ({MAX_PROMPT_STEPS.why}). Raise the target or shorten the prompt"
        )
    if gap_s(low) > target:
        raise NoBudgetMeetsTargetError(
            f"no budget keeps the decoders' longest gap within {target * 1e3:.2f} ms: even a budget of "
            f"{low} tokens (one prompt token a step beside {num_decodes} decodes) gives "
            f"{gap_s(low) * 1e3:.2f} ms with {type(cost).__name__}. Raise the target, decode fewer "
            "requests at once, or use faster hardware."
        )
    return bisect_largest(gap_s, target, low=low, high=high)


def prompt_timeline(
    cost: CostModel,
    *,
    budget_tokens: int | None,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
    long_prefill_token_threshold: int = 0,
) -> pd.DataFrame:
    """The steps that ingest the prompt, one row per step, with their times [s].

    Each step is a :func:`prompt_steps` batch priced by ``cost.batch_time_s``, exactly as
    :func:`ttft_s` prices it, so the last step ends at the TTFT and the longest step is
    :func:`longest_gap_s`, for any cost model (with :class:`~budgetlab.cost.CalibratedCost` the
    decoders' KV reads and the chunks' attention count).

    Parameters
    ----------
    cost : CostModel
        Any cost model.
    budget_tokens : int or None
        Token budget [tokens]; ``None`` = no budget (the whole prompt in one step).
    num_decodes, prompt_tokens, decode_context_tokens, long_prefill_token_threshold : int
        The scripted scenario, as in :func:`ttft_s`.

    Returns
    -------
    pandas.DataFrame
        One row per step: ``step`` (1-based), ``max_num_batched_tokens`` (the budget, ``<NA>``
        without one), ``decode_tokens`` (one per decoder), ``chunk_tokens`` (the prompt's chunk),
        ``unused_tokens`` (budget left unused; 0 without a budget), ``step_tokens``,
        ``step_time_s``, ``start_s`` and ``end_s`` (from the prompt's arrival) [s].

    Examples
    --------
    >>> from budgetlab.cost import ConstantCost
    >>> timeline = prompt_timeline(ConstantCost(0.01), budget_tokens=2048, num_decodes=100, prompt_tokens=5000)
    >>> timeline.chunk_tokens.tolist(), timeline.end_s.round(3).tolist()
    ([1948, 1948, 1104], [0.01, 0.02, 0.03])
    """
    scenario = _scenario(num_decodes, prompt_tokens, decode_context_tokens, long_prefill_token_threshold)
    batches = prompt_steps(budget_tokens=budget_tokens, **scenario)
    times = [cost.batch_time_s(batch) for batch in batches]
    ends = _clock_s(times)
    step_tokens = [batch.num_tokens for batch in batches]
    return pd.DataFrame(
        {
            "step": np.arange(1, len(batches) + 1),
            "max_num_batched_tokens": pd.array([budget_tokens] * len(batches), dtype="Int64"),
            "decode_tokens": [batch.num_decodes for batch in batches],
            "chunk_tokens": [sum(batch.prefill_tokens) for batch in batches],
            "unused_tokens": [0 if budget_tokens is None else int(budget_tokens) - n for n in step_tokens],
            "step_tokens": step_tokens,
            "step_time_s": times,
            "start_s": [0.0, *ends[:-1]],
            "end_s": ends,
        }
    )


def _scenario(
    num_decodes: int, prompt_tokens: int, decode_context_tokens: int = 0, long_prefill_token_threshold: int = 0
) -> dict[str, int]:
    """The scripted scenario's keyword arguments, for :func:`prompt_steps` and its callers,
    each checked (:class:`~budgetlab.errors.ParameterError` naming the first bad one)."""
    check_scenario(num_decodes=num_decodes, prompt_tokens=prompt_tokens)
    int_at_least("decode_context_tokens", decode_context_tokens, 0, what="an int >= 0 [tokens]", maximum=MAX_TOKENS)
    int_at_least(
        "long_prefill_token_threshold",
        long_prefill_token_threshold,
        0,
        what="an int >= 0 (0 disables it) [tokens]",
        maximum=MAX_TOKENS,
    )
    return {
        "num_decodes": num_decodes,
        "prompt_tokens": prompt_tokens,
        "decode_context_tokens": decode_context_tokens,
        "long_prefill_token_threshold": long_prefill_token_threshold,
    }


def check_scenario(*, num_decodes: int, prompt_tokens: int) -> None:
    """:class:`~budgetlab.errors.ParameterError` (a ``ValueError``) unless ``num_decodes`` is an
    int >= 0 and ``prompt_tokens`` an int >= 1, both at most
    :data:`~budgetlab._checks.MAX_TOKENS`: a float, NaN, infinity or bool is refused."""
    int_at_least("num_decodes", num_decodes, 0, what="an int >= 0 [requests]", maximum=MAX_TOKENS)
    int_at_least("prompt_tokens", prompt_tokens, 1, what="an int >= 1 [tokens]", maximum=MAX_TOKENS)


def _check_budget_leaves_room(budget: np.ndarray, num_decodes: int, *, name: str = "budget_tokens") -> None:
    too_small = budget <= num_decodes
    if np.any(too_small):
        smallest = int(np.min(budget))
        raise ValueError(
            f"{name} must leave room for the prompt, got {smallest}: "
            f"a budget of {smallest} tokens leaves nothing for the prompt once {num_decodes} "
            f"decodes took one token each; use budgets above {num_decodes} (vLLM also requires "
            "max_num_batched_tokens >= max_num_seqs)"
        )
