"""What the token budget trades: TTFT against the decoders' longest gap, across budgets.

The seeds' scripted scenario (:mod:`budgetlab.budget`: ``num_decodes`` requests decoding when
one prompt of ``prompt_tokens`` arrives) swept over the budget. :func:`budget_sweep` gives the
TTFT, the full-step time and the longest gap for many budgets and cost models at once, each
row priced exactly as :func:`~budgetlab.budget.prompt_timeline` (and so
:func:`~budgetlab.budget.ttft_s`) prices it; :func:`budget_tradeoff` is the seeds' small-vs-big
table; :func:`flattening_budget` reads off a sweep where a curve has flattened; and
:func:`budget_payoff` says what a bigger budget still buys the TTFT (:class:`BudgetPayoff`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from budgetlab._checks import MAX_TOKENS, int_at_least, number_in
from budgetlab.budget import check_scenario, prompt_timeline, ttft_s, whole_budgets
from budgetlab.cost.protocol import CostModel
from budgetlab.errors import ParameterError
from budgetlab.specs import Batch

__all__ = ["budget_sweep", "budget_tradeoff", "flattening_budget", "BudgetPayoff", "budget_payoff"]


def _full_step_s(cost: CostModel, budget_tokens: int) -> float:
    """A step that fills the whole budget with one fresh prompt chunk [s]: the longest step the
    budget allows, and what :func:`~budgetlab.cost.budget_for_step_time` inverts."""
    return cost.batch_time_s(Batch(prefill_tokens=(int(budget_tokens),), prefill_context_tokens=(0,)))


def budget_sweep(
    costs: Mapping[str, CostModel],
    budgets: ArrayLike,
    *,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
    long_prefill_token_threshold: int = 0,
) -> pd.DataFrame:
    """TTFT, full-step time and longest gap for each budget and cost model: the scripted
    scenario swept over the budget.

    Parameters
    ----------
    costs : mapping of str to CostModel
        Curve name (the ``cost_model`` column) → any cost model, e.g.
        ``{"idealized": IdealCost(...), "calibrated": CalibratedCost.typical(...)}``.
    budgets : array_like of int
        Budgets [tokens], each above ``num_decodes``.
    num_decodes, prompt_tokens, decode_context_tokens, long_prefill_token_threshold : int
        The scripted scenario, as in :func:`~budgetlab.budget.ttft_s` (``decode_context_tokens`` changes nothing
        for :class:`~budgetlab.cost.IdealCost`, which counts tokens only).

    Returns
    -------
    pandas.DataFrame
        One row per cost model × budget, models in the mapping's order, budgets as given:
        ``cost_model``, ``max_num_batched_tokens``, ``ttft_s`` (:func:`~budgetlab.budget.ttft_s`),
        ``step_time_s`` (a step filling the whole budget with prompt tokens: the longest step
        the budget allows), ``longest_gap_s`` (:func:`~budgetlab.budget.longest_gap_s`: the decoders' longest
        wait in this scenario), ``num_prompt_steps`` and ``first_chunk_tokens`` (the prompt's
        first and largest chunk) [tokens].
    """
    check_scenario(num_decodes=num_decodes, prompt_tokens=prompt_tokens)
    grid = np.atleast_1d(whole_budgets(budgets, num_decodes, name="budgets")).tolist()
    rows = []
    for name, cost in costs.items():
        for budget in grid:
            steps = prompt_timeline(
                cost,
                budget_tokens=budget,
                num_decodes=num_decodes,
                prompt_tokens=prompt_tokens,
                decode_context_tokens=decode_context_tokens,
                long_prefill_token_threshold=long_prefill_token_threshold,
            )
            rows.append(
                {
                    "cost_model": name,
                    "max_num_batched_tokens": budget,
                    "ttft_s": float(steps.end_s.iloc[-1]),
                    "step_time_s": _full_step_s(cost, budget),
                    "longest_gap_s": float(steps.step_time_s.max()),
                    "num_prompt_steps": len(steps),
                    "first_chunk_tokens": int(steps.chunk_tokens.iloc[0]),
                }
            )
    return pd.DataFrame(rows)


def flattening_budget(
    sweep: pd.DataFrame, *, column: str, reference_s: float, within_fraction: float = 0.1
) -> int | None:
    """Where a swept curve has flattened: the smallest budget from which on it stays near a
    reference [tokens].

    The smallest budget of ``sweep`` from which on every budget's ``column`` stays within
    ``within_fraction`` of ``reference_s`` (e.g. the TTFT with no budget at all), above or
    below it; ``None`` if even the largest budget is farther away. ``within_fraction=0`` finds
    where the curve reaches the reference exactly (the longest gap once the whole prompt fits
    in one step).

    Parameters
    ----------
    sweep : pandas.DataFrame
        One cost model's rows of :func:`budget_sweep` (``max_num_batched_tokens`` and
        ``column``).
    column : str
        The curve, e.g. ``"ttft_s"`` or ``"longest_gap_s"`` [s].
    reference_s : float
        The level it flattens at [s].
    within_fraction : float
        How close counts as flat, relative to ``reference_s`` [-].

    Raises
    ------
    ValueError
        Rows of several cost models, or a ``reference_s`` or ``within_fraction`` that is not a
        finite number >= 0 (each named).
    """
    if "cost_model" in sweep and sweep.cost_model.nunique() > 1:
        raise ValueError("flattening_budget reads one curve: select one cost_model's rows of the sweep first")
    number_in("reference_s", reference_s, low=0.0, what="a finite number of seconds >= 0", error=ValueError)
    number_in("within_fraction", within_fraction, low=0.0, what="a finite fraction >= 0", error=ValueError)
    ordered = sweep.sort_values("max_num_batched_tokens")
    close = (np.abs(ordered[column] - reference_s) <= abs(reference_s) * within_fraction).to_numpy()
    if not close[-1]:
        return None
    far = np.flatnonzero(~close)
    first = 0 if len(far) == 0 else far[-1] + 1
    return int(ordered.max_num_batched_tokens.to_numpy()[first])


@dataclass(frozen=True)
class BudgetPayoff:
    """What a bigger budget still buys the prompt's TTFT, under one cost model.

    Attributes
    ----------
    budget_tokens : int
        The starting budget [tokens].
    bigger_budget_tokens : int
        The bigger budget [tokens].
    ttft_s, bigger_ttft_s : float
        The TTFT at each [s].
    ttft_without_budget_s : float
        The TTFT with no budget (the whole prompt in one step): the floor [s].
    """

    budget_tokens: int
    bigger_budget_tokens: int
    ttft_s: float
    bigger_ttft_s: float
    ttft_without_budget_s: float

    @property
    def saved_s(self) -> float:
        """TTFT the bigger budget saves [s]."""
        return self.ttft_s - self.bigger_ttft_s

    @property
    def saved_fraction(self) -> float:
        """:attr:`saved_s` relative to the TTFT at :attr:`budget_tokens` [-]."""
        return self.saved_s / self.ttft_s

    @property
    def above_floor_fraction(self) -> float:
        """How far the TTFT at :attr:`budget_tokens` is above the no-budget TTFT, relative to it [-]."""
        return self.ttft_s / self.ttft_without_budget_s - 1.0

    def numbers(self) -> dict[str, float | int]:
        """Every field and derived number as plain values (for results JSON)."""
        return {
            **dataclasses.asdict(self),
            "saved_s": self.saved_s,
            "saved_fraction": self.saved_fraction,
            "above_floor_fraction": self.above_floor_fraction,
        }


def budget_payoff(
    cost: CostModel,
    *,
    budget_tokens: int,
    factor: int = 4,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
) -> BudgetPayoff:
    """What ``factor`` × a bigger budget still buys the prompt's TTFT (:func:`~budgetlab.budget.ttft_s`).

    Parameters
    ----------
    cost : CostModel
        Any cost model.
    budget_tokens : int
        The starting budget, e.g. where the idealized TTFT curve flattens [tokens].
    factor : int
        The bigger budget is ``factor × budget_tokens`` [-], >= 2.
    num_decodes, prompt_tokens, decode_context_tokens : int
        The scripted scenario, as in :func:`~budgetlab.budget.ttft_s`.

    Raises
    ------
    ParameterError
        A budget that is not an int >= 1, a ``factor`` that is not an int >= 2, or a bad
        scenario count (each named).
    ValueError
        A budget that leaves nothing for the prompt beside the decodes.
    """
    budget = int_at_least("budget_tokens", budget_tokens, 1, what="a whole number of tokens >= 1", maximum=MAX_TOKENS)
    times = int_at_least("factor", factor, 2, what="a whole number >= 2", maximum=MAX_TOKENS)
    if budget * times > MAX_TOKENS.value:
        raise ParameterError(
            f"factor={times} makes a budget of {budget * times:,} tokens from budget_tokens={budget}, more than "
            f"{MAX_TOKENS.value:,} ({MAX_TOKENS.why}); use a smaller factor"
        )
    check_scenario(num_decodes=num_decodes, prompt_tokens=prompt_tokens)
    int_at_least("decode_context_tokens", decode_context_tokens, 0, what="an int >= 0 [tokens]")
    whole_budgets(budget, num_decodes)
    scenario = {
        "num_decodes": num_decodes,
        "prompt_tokens": prompt_tokens,
        "decode_context_tokens": decode_context_tokens,
    }
    bigger = budget * times
    return BudgetPayoff(
        budget_tokens=budget,
        bigger_budget_tokens=bigger,
        ttft_s=float(ttft_s(cost, budget_tokens=budget, **scenario)),
        bigger_ttft_s=float(ttft_s(cost, budget_tokens=bigger, **scenario)),
        ttft_without_budget_s=float(ttft_s(cost, budget_tokens=None, **scenario)),
    )


def budget_tradeoff(
    cost: CostModel,
    *,
    small_budget_tokens: int,
    big_budget_tokens: int,
    num_decodes: int,
    prompt_tokens: int,
) -> pd.DataFrame:
    """The seeds' small-vs-big budget table, with the numbers behind each cell.

    Returns
    -------
    pandas.DataFrame
        One row per budget (``small``, ``big``) with ``max_num_batched_tokens`` (the budget
        [tokens]), ``decode_only_step_s`` (a step with just the decodes), ``prompt_step_s`` (the
        longest step carrying a prompt chunk, which is every decoder's longest gap),
        ``num_prompt_steps``, ``ttft_s`` and ``prefill_tokens_per_s`` (prompt tokens ingested per
        second of those steps).

    Raises
    ------
    ParameterError
        A budget that is not an int >= 1, or a bad scenario count (each named).
    ValueError
        ``small_budget_tokens`` not below ``big_budget_tokens``, or leaving nothing for the
        prompt beside the decodes.
    """
    small = int_at_least(
        "small_budget_tokens", small_budget_tokens, 1, what="a whole number of tokens >= 1", maximum=MAX_TOKENS
    )
    big = int_at_least(
        "big_budget_tokens", big_budget_tokens, 1, what="a whole number of tokens >= 1", maximum=MAX_TOKENS
    )
    check_scenario(num_decodes=num_decodes, prompt_tokens=prompt_tokens)
    whole_budgets(small, num_decodes, name="small_budget_tokens")
    if small >= big:
        raise ValueError(
            f"small_budget_tokens ({small_budget_tokens}) must be below big_budget_tokens ({big_budget_tokens})"
        )
    swept = budget_sweep({"": cost}, [small, big], num_decodes=num_decodes, prompt_tokens=prompt_tokens)
    return pd.DataFrame(
        {
            "max_num_batched_tokens": swept.max_num_batched_tokens.to_numpy(),
            "decode_only_step_s": cost.batch_time_s(Batch(num_decodes=num_decodes)),
            "prompt_step_s": swept.longest_gap_s.to_numpy(),
            "num_prompt_steps": swept.num_prompt_steps.to_numpy(),
            "ttft_s": swept.ttft_s.to_numpy(),
            "prefill_tokens_per_s": prompt_tokens / swept.ttft_s.to_numpy(),
        },
        index=pd.Index(["small", "big"], name="budget"),
    )
