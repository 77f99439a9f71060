"""The seeds' idealized step cost (every number in section 1), the constant cost and the contract."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgetlab import (
    Batch,
    ConstantCost,
    CostModel,
    knee_tokens,
)
from budgetlab.cost import CostCurve, hardware_of, model_of, shortest_step_s


def test_weight_read_is_4_8_ms(ideal):
    # 8.03e9 params × 2 B = 16.06 GB over 3.35e12 B/s = 4.794 ms ("~4.8 ms", "all 16 GB").
    assert ideal.model.weight_bytes == pytest.approx(16.06e9)
    assert ideal.weight_read_s == pytest.approx(4.794e-3, rel=1e-3)


def test_per_token_is_16_us_and_16_gflop(ideal):
    # 2 × 8.03e9 = 16.06 GFLOP per token; over 989.4e12 FLOP/s = 16.23 µs.
    assert ideal.flops_per_token == pytest.approx(16.06e9)
    assert ideal.per_token_s == pytest.approx(16.23e-6, rel=1e-3)


def test_knee_near_300_tokens(ideal):
    # 989.4e12 / 3.35e12 = 295.3: the ratio of FLOP/s to B/s (× 2 B per param / 2 FLOP).
    assert knee_tokens(ideal) == pytest.approx(295.3, abs=0.1)


@pytest.mark.parametrize(
    ("num_tokens", "expected_ms", "seed_says"),
    [(512, 8.31, 8), (2048, 33.24, 33), (8192, 132.97, 130)],
)
def test_seed_marks(ideal, num_tokens, expected_ms, seed_says):
    step_ms = ideal.step_time_s(num_tokens) * 1e3
    assert step_ms == pytest.approx(expected_ms, abs=0.01)
    assert step_ms == pytest.approx(seed_says, rel=0.05)  # the seed rounds to "~"


def test_flat_below_knee_linear_above(ideal):
    tokens = np.array([1, 50, 100, 295])
    np.testing.assert_allclose(ideal.step_time_s(tokens), ideal.weight_read_s)
    above = ideal.step_time_s(np.array([1000, 2000]))
    assert above[1] - above[0] == pytest.approx(1000 * ideal.per_token_s)


def test_step_time_vectorized_shape_and_scalar(ideal):
    assert isinstance(ideal.step_time_s(512), float)
    assert ideal.step_time_s(np.arange(6).reshape(2, 3)).shape == (2, 3)
    assert ideal.step_time_s(0) == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        ideal.step_time_s(-1)
    # NaN tokens used to come out as a 0 s step (np.where's "not > 0" branch).
    with pytest.raises(ValueError, match=">= 0"):
        ideal.step_time_s(np.nan)
    with pytest.raises(ValueError, match=">= 0"):
        ideal.step_time_s([512.0, np.nan])


def test_step_time_refuses_tokens_that_are_not_finite_numbers(ideal):
    # The curve is continuous: 2.5 tokens cost the weight read, like 1 token.
    assert ideal.step_time_s(2.5) == ideal.step_time_s(1) == ideal.weight_read_s
    for cost in (ideal, ConstantCost(0.01)):
        for bad in (np.inf, True, "3", None, [512, True], [512, "3"]):
            with pytest.raises(ValueError, match=r"^num_tokens must be finite numbers of tokens >= 0, got "):
                cost.step_time_s(bad)


def test_batch_time_uses_token_count(ideal):
    batch = Batch(num_decodes=100, decode_context_tokens=12345, prefill_tokens=(1948,), prefill_context_tokens=(0,))
    assert batch.num_tokens == 2048
    assert ideal.batch_time_s(batch) == ideal.step_time_s(2048)


@given(
    num_decodes=st.integers(1, 2000),
    contexts=st.lists(st.integers(0, 10**6), min_size=1, max_size=20),
)
def test_decode_run_matches_batch_time(ideal, num_decodes, contexts):
    run = ideal.decode_run_time_s(num_decodes=num_decodes, decode_context_tokens=np.array(contexts))
    for context, step_s in zip(contexts, run):
        assert step_s == ideal.batch_time_s(Batch(num_decodes=num_decodes, decode_context_tokens=context))


def test_constant_cost_counts_steps():
    cost = ConstantCost(0.5)
    assert cost.batch_time_s(Batch(num_decodes=3)) == 0.5
    np.testing.assert_array_equal(cost.decode_run_time_s(num_decodes=3, decode_context_tokens=np.zeros(4)), [0.5] * 4)
    with pytest.raises(ValueError, match="positive"):
        ConstantCost(0.0)


def test_both_satisfy_the_cost_protocol(ideal):
    assert isinstance(ideal, CostModel)
    assert isinstance(ConstantCost(), CostModel)


def test_ideal_cost_is_frozen(ideal):
    with pytest.raises(AttributeError):
        ideal.weight_read_s = 1.0  # type: ignore[misc]


def test_shortest_step(ideal):
    assert shortest_step_s(ideal) == ideal.weight_read_s
    assert shortest_step_s(ConstantCost(0.05)) == 0.05


def test_constant_cost_step_time_is_a_method():
    # The duration is the field (positional, as before); step_time_s is the vectorized curve
    # every model has: the duration for any step that holds a token, 0 s for an empty one.
    cost = ConstantCost(0.05)
    assert cost.duration_s == 0.05
    assert ConstantCost(duration_s=0.05) == cost
    assert cost.step_time_s(512) == 0.05
    assert isinstance(cost.step_time_s(512), float)
    assert cost.step_time_s(0) == 0.0
    np.testing.assert_array_equal(cost.step_time_s(np.array([[0, 1], [2048, 8192]])), [[0.0, 0.05], [0.05, 0.05]])
    with pytest.raises(ValueError, match=">= 0"):
        cost.step_time_s([1, np.nan])
    with pytest.raises(ValueError, match="duration_s"):
        ConstantCost(-1.0)


def test_every_model_is_a_cost_curve(ideal):
    from budgetlab import CalibratedCost

    for cost in (ideal, ConstantCost(0.5), CalibratedCost.typical(ideal.hardware, ideal.model)):
        assert isinstance(cost, CostCurve)
        assert cost.step_time_s(0) == 0.0

    class OnlyBatches:
        def batch_time_s(self, batch: Batch) -> float:
            return 1.0

        def decode_run_time_s(self, *, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
            return np.ones(np.shape(decode_context_tokens))

    assert isinstance(OnlyBatches(), CostModel)
    assert not isinstance(OnlyBatches(), CostCurve)


def test_hardware_and_model_are_read_through_the_helpers(ideal):
    assert hardware_of(ideal) is ideal.hardware
    assert model_of(ideal) is ideal.model
    assert hardware_of(ConstantCost(0.5)) is None
    assert model_of(ConstantCost(0.5)) is None

    class Labelled:  # attributes of the wrong type are not specs
        hardware = "h100-sxm"
        model = None

    assert hardware_of(Labelled()) is None
    assert model_of(Labelled()) is None
