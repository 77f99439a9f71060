"""The budget for a step-time target: the seeds' 40 ms rule, any cost model, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from budgetlab import (
    Batch,
    CalibratedCost,
    ConstantCost,
    NoBudgetMeetsTargetError,
    ParameterError,
    budget_for_step_time,
)
from budgetlab.cost import MAX_SEARCH_TOKENS, bisect_largest


class MillisecondPerToken:
    """A hand-written cost model: 1 ms per token, no hardware or model attached."""

    def batch_time_s(self, batch: Batch) -> float:
        return 1e-3 * batch.num_tokens

    def decode_run_time_s(self, *, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(decode_context_tokens), 1e-3 * num_decodes)


def test_budget_for_40_ms_is_about_2500(ideal):
    # 0.040 / 16.23e-6 = 2464.2 → 2,464 tokens; the seed rounds to "≈ 2,500".
    assert budget_for_step_time(ideal, 0.040) == 2464
    np.testing.assert_array_equal(budget_for_step_time(ideal, [0.010, 0.040]), [616, 2464])


def test_budget_for_step_time_is_the_inverse(ideal):
    for target_s in (0.01, 0.025, 0.04, 0.1):
        budget = budget_for_step_time(ideal, target_s)
        assert ideal.step_time_s(budget) <= target_s < ideal.step_time_s(budget + 1)


def test_target_below_weight_read_names_the_fix(ideal):
    with pytest.raises(NoBudgetMeetsTargetError, match=r"weight read.*tensor parallelism"):
        budget_for_step_time(ideal, 0.004)


def test_bisection():
    assert bisect_largest(lambda n: float(n), 10.5, low=1, high=64) == 10


def test_bisection_on_the_ideal_curve(ideal):
    assert bisect_largest(ideal.step_time_s, 0.040, low=1, high=10_000) == 2464


def test_any_rising_cost_model_is_inverted_by_search():
    # 1 ms per token: 10 tokens take 10 ms <= 10.5 ms < 11 ms; 2 ms → 2 tokens, 1 s → 1,000.
    cost = MillisecondPerToken()
    assert budget_for_step_time(cost, 0.0105) == 10
    np.testing.assert_array_equal(budget_for_step_time(cost, [0.002, 1.0]), [2, 1000])


def test_constant_cost_below_its_step_is_no_budget_not_an_attribute_error():
    # Bug 1: the message used to read cost.hardware.name, which ConstantCost does not have.
    with pytest.raises(NoBudgetMeetsTargetError) as info:
        budget_for_step_time(ConstantCost(0.05), 0.01)
    assert str(info.value) == (
        "a step-time target below a one-token step (50 ms with ConstantCost) cannot be met by "
        "any budget; got 10.0 ms. Raise the target to at least 50 ms, or use a faster cost model."
    )


def test_hand_written_cost_below_one_token_names_its_floor():
    with pytest.raises(NoBudgetMeetsTargetError, match=r"\(1 ms with MillisecondPerToken\).*at least 1 ms"):
        budget_for_step_time(MillisecondPerToken(), [0.5e-3, 0.010])


def test_priced_cost_below_one_token_names_gpu_and_model(ideal):
    typical = CalibratedCost.typical(ideal.hardware, ideal.model)
    with pytest.raises(NoBudgetMeetsTargetError) as info:
        budget_for_step_time(typical, 0.001)
    message = str(info.value)
    assert f"on {ideal.hardware.name} + {ideal.model.name} with CalibratedCost" in message
    assert "tensor parallelism" in message


def test_constant_cost_meets_any_reachable_target_at_the_search_limit():
    # Every step takes 50 ms whatever it holds: a 50 ms (or 1 s) target is met by every
    # budget, and the search stops at its limit, 2**24 tokens.
    assert MAX_SEARCH_TOKENS == 16_777_216
    assert budget_for_step_time(ConstantCost(0.05), 0.05) == MAX_SEARCH_TOKENS
    np.testing.assert_array_equal(budget_for_step_time(ConstantCost(0.05), [0.05, 1.0]), [MAX_SEARCH_TOKENS] * 2)


@pytest.mark.parametrize("target", [np.nan, np.inf, [0.04, np.nan]])
def test_non_finite_target_is_a_parameter_error(ideal, target):
    for cost in (ideal, ConstantCost(0.05)):
        with pytest.raises(ParameterError, match="target_s must be finite"):
            budget_for_step_time(cost, target)


@pytest.mark.parametrize("target", [True, "0.04", None, [0.04, "0.05"], [0.04, None]])
def test_a_target_that_is_not_a_number_is_a_parameter_error(ideal, target):
    with pytest.raises(ParameterError, match=r"^target_s must be finite step times in seconds, got "):
        budget_for_step_time(ideal, target)
    # the same target as a number works: the seeds' 40 ms step holds 2,464 tokens on H100 + Llama 3.1 8B
    assert budget_for_step_time(ideal, 0.04) == 2464 and budget_for_step_time(ideal, [0.04]).tolist() == [2464]


def test_not_a_cost_model_is_a_parameter_error():
    with pytest.raises(ParameterError, match="cost must be a step-cost model with batch_time_s"):
        budget_for_step_time("ideal", 0.04)  # type: ignore[arg-type]
