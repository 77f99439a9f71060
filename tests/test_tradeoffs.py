"""What the budget trades across budgets and cost models: sweeps, small vs big, the payoff."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from budgetlab import (
    BudgetPayoff,
    CalibratedCost,
    ConstantCost,
    budget_payoff,
    budget_sweep,
    budget_tradeoff,
    flattening_budget,
    longest_gap_s,
    ttft_s,
)
from budgetlab.errors import ParameterError

SEED = {"num_decodes": 100, "prompt_tokens": 5000}


def test_tradeoff_table_says_what_the_seed_says(ideal):
    table = budget_tradeoff(ideal, small_budget_tokens=512, big_budget_tokens=8192, **SEED)
    small, big = table.loc["small"], table.loc["big"]
    assert small.prompt_step_s < big.prompt_step_s  # each step: short vs long with a big chunk
    assert small.num_prompt_steps > big.num_prompt_steps  # long prompts spread over many steps
    assert small.ttft_s > big.ttft_s  # later first token
    assert small.prefill_tokens_per_s < big.prefill_tokens_per_s  # lower throughput
    assert small.num_prompt_steps == 13 and big.num_prompt_steps == 1
    assert table.max_num_batched_tokens.tolist() == [512, 8192]
    with pytest.raises(ValueError, match="below"):
        budget_tradeoff(ideal, small_budget_tokens=8192, big_budget_tokens=512, **SEED)


def test_budget_sweep_by_hand_with_a_constant_cost():
    # every step 10 ms: TTFT counts the steps, every full step and gap is 10 ms
    sweep = budget_sweep({"constant": ConstantCost(0.01)}, [1024, 2048, 5100], **SEED)
    assert sweep.cost_model.tolist() == ["constant"] * 3
    assert sweep.max_num_batched_tokens.tolist() == [1024, 2048, 5100]
    assert sweep.num_prompt_steps.tolist() == [6, 3, 1]  # chunks of 924, 1,948 and 5,000 tokens
    assert sweep.first_chunk_tokens.tolist() == [924, 1948, 5000]
    assert sweep.ttft_s.tolist() == pytest.approx([0.06, 0.03, 0.01])
    assert sweep.step_time_s.tolist() == [0.01] * 3 and sweep.longest_gap_s.tolist() == [0.01] * 3


def test_budget_sweep_agrees_with_the_scalar_functions(ideal, h100, llama8b):
    costs = {"idealized": ideal, "calibrated": CalibratedCost.typical(h100, llama8b)}
    budgets = [512, 2048, 8192]
    sweep = budget_sweep(costs, budgets, decode_context_tokens=1000, **SEED)
    assert sweep.cost_model.tolist() == ["idealized"] * 3 + ["calibrated"] * 3
    for row in sweep.itertuples():
        cost, budget = costs[row.cost_model], row.max_num_batched_tokens
        kwargs = dict(budget_tokens=budget, decode_context_tokens=1000, **SEED)
        assert row.ttft_s == ttft_s(cost, **kwargs)
        assert row.longest_gap_s == longest_gap_s(cost, **kwargs)
        assert row.step_time_s == pytest.approx(float(cost.step_time_s(budget)))
    ideal_rows = sweep[sweep.cost_model == "idealized"]
    assert ideal_rows.step_time_s.iloc[1] == pytest.approx(0.03324, abs=1e-5)  # the seeds' 2,048 → 33 ms
    with pytest.raises(ValueError, match="leaves nothing for the prompt"):
        budget_sweep(costs, [100], **SEED)


def _dense_ideal_sweep(ideal):
    grid = np.unique(np.r_[np.linspace(256, 8192, 400).round().astype(int), [256, 512, 1024, 2048, 4096, 8192]])
    return budget_sweep({"idealized": ideal}, grid, **SEED)


def test_flattening_budget(ideal):
    without = ttft_s(ideal, budget_tokens=None, **SEED)
    listed = budget_sweep({"idealized": ideal}, [256, 512, 1024, 2048, 4096, 8192], **SEED)
    assert flattening_budget(listed, column="ttft_s", reference_s=without, within_fraction=0.1) == 1024
    assert flattening_budget(listed, column="ttft_s", reference_s=without, within_fraction=0.01) == 8192
    assert flattening_budget(listed, column="ttft_s", reference_s=without / 2, within_fraction=0.1) is None
    dense = _dense_ideal_sweep(ideal)
    gap_without = longest_gap_s(ideal, budget_tokens=None, **SEED)
    saturates = flattening_budget(dense, column="longest_gap_s", reference_s=gap_without, within_fraction=0)
    assert 5100 <= saturates < 5200  # the whole prompt plus the decodes fit in one step (5,100)
    two = budget_sweep({"a": ideal, "b": ConstantCost(0.01)}, [512, 1024], **SEED)
    with pytest.raises(ValueError, match="one cost_model"):
        flattening_budget(two, column="ttft_s", reference_s=without)


def test_budget_payoff_by_hand():
    # 10 ms steps: 6 steps at 1,024 tokens, 2 at 4,096, 1 without a budget
    payoff = budget_payoff(ConstantCost(0.01), budget_tokens=1024, **SEED)
    assert isinstance(payoff, BudgetPayoff) and payoff.bigger_budget_tokens == 4096
    assert payoff.ttft_s == pytest.approx(0.06) and payoff.bigger_ttft_s == pytest.approx(0.02)
    assert payoff.ttft_without_budget_s == pytest.approx(0.01)
    assert payoff.saved_s == pytest.approx(0.04) and payoff.saved_fraction == pytest.approx(2 / 3)
    assert payoff.above_floor_fraction == pytest.approx(5.0)
    numbers = payoff.numbers()
    assert numbers["saved_fraction"] == payoff.saved_fraction and numbers["budget_tokens"] == 1024
    with pytest.raises(ValueError, match="factor"):
        budget_payoff(ConstantCost(0.01), budget_tokens=1024, factor=1, **SEED)


def test_bigger_budgets_keep_helping_with_real_steps(ideal, h100, llama8b):
    scenario = dict(SEED, decode_context_tokens=1000)
    idealized = budget_payoff(ideal, budget_tokens=1024, **scenario)
    calibrated = budget_payoff(CalibratedCost.typical(h100, llama8b), budget_tokens=1024, **scenario)
    assert idealized.ttft_s == pytest.approx(ttft_s(ideal, budget_tokens=1024, **SEED))
    assert calibrated.saved_fraction > 2 * idealized.saved_fraction
    assert calibrated.above_floor_fraction > idealized.above_floor_fraction


def test_flattening_budget_refuses_bad_levels_by_name():
    # TTFTs 0.5, 0.2, 0.11, 0.1 s: within 10 % of 0.1 s from 1,024 tokens on.
    sweep = pd.DataFrame({"max_num_batched_tokens": [256, 512, 1024, 2048], "ttft_s": [0.5, 0.2, 0.11, 0.1]})
    assert flattening_budget(sweep, column="ttft_s", reference_s=0.1) == 1024
    for name, bad in (("reference_s", float("nan")), ("reference_s", "0.1"), ("within_fraction", -0.1)):
        with pytest.raises(ValueError, match=rf"^{name} must be a finite"):
            flattening_budget(sweep, column="ttft_s", **{"reference_s": 0.1, name: bad})


def test_budget_payoff_refuses_bad_numbers_by_name():
    cost = ConstantCost(0.01)
    # factor 2: 1,024 → 2,048 tokens; 5,000 / 924 → 6 steps, 5,000 / 1,948 → 3 steps of 10 ms.
    payoff = budget_payoff(cost, budget_tokens=1024, factor=2, **SEED)
    assert payoff.bigger_budget_tokens == 2048 and payoff.bigger_ttft_s == pytest.approx(0.03)
    refused = [
        ({"factor": 2.5}, r"^factor must be a whole number >= 2, got 2.5$"),
        ({"factor": "3"}, r"^factor must be a whole number >= 2, got '3'$"),
        ({"budget_tokens": float("nan")}, r"^budget_tokens must be a whole number of tokens >= 1, got nan$"),
        ({"budget_tokens": True}, r"budget_tokens .* got True"),
        ({"num_decodes": float("inf")}, r"^num_decodes must be an int >= 0"),
        ({"decode_context_tokens": None}, r"^decode_context_tokens must be an int >= 0"),
    ]
    for changes, message in refused:
        with pytest.raises(ParameterError, match=message):
            budget_payoff(cost, **{"budget_tokens": 1024, **SEED, **changes})
    with pytest.raises(ValueError, match=r"^budget_tokens must leave room for the prompt, got 100"):
        budget_payoff(cost, budget_tokens=100, **SEED)


def test_budget_tradeoff_names_the_budget_that_is_wrong():
    cost = ConstantCost(0.01)
    with pytest.raises(ParameterError, match=r"^small_budget_tokens must be a whole number of tokens >= 1, got nan$"):
        budget_tradeoff(cost, small_budget_tokens=float("nan"), big_budget_tokens=4096, **SEED)
    with pytest.raises(ParameterError, match=r"^big_budget_tokens must be a whole number of tokens >= 1, got '3'$"):
        budget_tradeoff(cost, small_budget_tokens=512, big_budget_tokens="3", **SEED)
    # 100 decodes leave nothing of a 100-token budget: the message names the small budget.
    with pytest.raises(ValueError, match=r"^small_budget_tokens must leave room for the prompt, got 100"):
        budget_tradeoff(cost, small_budget_tokens=100, big_budget_tokens=4096, **SEED)
