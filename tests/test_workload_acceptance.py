"""Tests for budgetlab.workload.acceptance: acceptance models of speculative decoding, with
hand-worked closed forms, seeded reproducible draws, the mean-length model's sampling mean, the
published table, and refusals of bad inputs."""

from __future__ import annotations

import doctest
import math
from dataclasses import FrozenInstanceError, dataclass

import numpy as np
import pytest

from budgetlab.errors import ParameterError
from budgetlab.specs import Request
from budgetlab.speculative import SPECULATIVE_METHODS
from budgetlab.workload import (
    PUBLISHED_ACCEPTANCE,
    AcceptanceModel,
    AcceptanceRates,
    MeanAcceptanceLength,
    default_acceptance,
    expected_accepted_drafts,
    expected_tokens_per_verification,
    with_accepted_drafts,
)
from budgetlab.workload import acceptance as acceptance_module

HALVES = AcceptanceRates(per_position=(0.8, 0.5))  # p1 = 0.8, then 0.5 at every later position


def exact_mean_and_sd(model: AcceptanceModel, k: int) -> tuple[float, float]:
    """E[A] and sd(A) from P(A >= i) = c_i: E[A] = sum c_i, E[A^2] = sum (2i - 1) c_i."""
    c = np.cumprod(model.position_rates(k))
    mean = float(c.sum())
    second = float(((2 * np.arange(1, k + 1) - 1) * c).sum())
    return mean, math.sqrt(second - mean**2)


# --------------------------------------------------------------------------------------------
# Closed forms, by hand
# --------------------------------------------------------------------------------------------


def test_closed_forms_at_k_1_and_2_by_hand():
    # k = 1: A = 1 with p1 = 0.8.  k = 2: E[A] = p1 + p1 p2 = 0.8 + 0.4.  k = 3: + 0.8 * 0.5 * 0.5.
    assert expected_accepted_drafts(HALVES, 1) == pytest.approx(0.8)
    assert expected_tokens_per_verification(HALVES, 1) == pytest.approx(1.8)
    assert expected_accepted_drafts(HALVES, 2) == pytest.approx(1.2)
    assert expected_tokens_per_verification(HALVES, 2) == pytest.approx(2.2)
    assert expected_accepted_drafts(HALVES, 3) == pytest.approx(1.4)  # the tail repeats 0.5
    assert expected_accepted_drafts(HALVES, 0) == 0.0
    assert expected_tokens_per_verification(HALVES, 0) == 1.0


def test_closed_forms_are_vectorized_over_k():
    ks = np.array([[0, 1], [2, 3]])
    out = expected_accepted_drafts(HALVES, ks)
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, [[0.0, 0.8], [1.2, 1.4]])
    np.testing.assert_allclose(expected_tokens_per_verification(HALVES, [1, 2]), [1.8, 2.2])
    assert isinstance(expected_accepted_drafts(HALVES, np.int64(2)), float)


def test_constant_rate_closed_form_is_the_geometric_sum():
    p = 0.6
    model = AcceptanceRates(per_position=(p,))
    for k in range(9):
        assert expected_tokens_per_verification(model, k) == pytest.approx((1 - p ** (k + 1)) / (1 - p))


def test_position_rates_extend_the_last_value():
    np.testing.assert_allclose(HALVES.position_rates(4), [0.8, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(HALVES.position_rates(1), [0.8])
    assert HALVES.position_rates(0).shape == (0,)
    np.testing.assert_allclose(HALVES.vllm_per_position(3), [0.8, 0.4, 0.2])


# --------------------------------------------------------------------------------------------
# vLLM's per-position rates are unconditional
# --------------------------------------------------------------------------------------------


def test_from_vllm_divides_consecutive_rates():
    # vLLM's rate at position i counts verifications accepting i drafts or more: P(A >= i)
    model = AcceptanceRates.from_vllm([0.7296, 0.5208, 0.3545])
    np.testing.assert_allclose(model.per_position, [0.7296, 0.5208 / 0.7296, 0.3545 / 0.5208])
    np.testing.assert_allclose(model.vllm_per_position(3), [0.7296, 0.5208, 0.3545])
    # vLLM's mean acceptance length is 1 + the sum of its per-position rates
    assert expected_tokens_per_verification(model, 3) == pytest.approx(1 + 0.7296 + 0.5208 + 0.3545)


def test_from_vllm_after_a_zero_is_zero():
    model = AcceptanceRates.from_vllm((0.5, 0.0, 0.0))
    assert model.per_position == (0.5, 0.0, 0.0)
    assert expected_accepted_drafts(model, 5) == pytest.approx(0.5)


def test_from_vllm_refuses_increasing_rates():
    with pytest.raises(ParameterError, match=r"cannot increase.*AcceptanceRates\(per_position"):
        AcceptanceRates.from_vllm((0.5, 0.6))


# --------------------------------------------------------------------------------------------
# The mean acceptance length and its constant rate
# --------------------------------------------------------------------------------------------


def test_mean_length_solves_for_the_constant_rate_by_hand():
    assert MeanAcceptanceLength(1.75, 2).rate == pytest.approx(0.5)  # 1 + 0.5 + 0.25
    assert MeanAcceptanceLength(1.882, 1).rate == pytest.approx(0.882)  # k = 1: L - 1
    assert MeanAcceptanceLength(3.0, 2).rate == 1.0  # every draft accepted
    assert MeanAcceptanceLength(1.0, 4).rate == 0.0  # none
    # 1 + p + p^2 + p^3 = 2.5 -> p = 0.6823278...
    p = MeanAcceptanceLength(2.5, 3).rate
    assert 1 + p + p**2 + p**3 == pytest.approx(2.5, abs=1e-12)


@pytest.mark.parametrize(("mean", "k"), [(1.2, 1), (2.6, 3), (3.54, 7), (4.9, 5), (2.0, 64)])
def test_mean_length_model_reproduces_its_mean_at_its_k(mean, k):
    model = MeanAcceptanceLength(mean, k)
    assert expected_tokens_per_verification(model, k) == pytest.approx(mean, abs=1e-9)
    assert model.as_rates().per_position == (model.rate,)
    np.testing.assert_allclose(model.vllm_per_position(3), model.rate ** np.arange(1, 4))


def test_mean_length_model_hits_its_mean_within_sampling_error():
    model = MeanAcceptanceLength(mean_tokens=3.2, num_speculative_tokens=5)
    n = 200_000
    draws = model.accepted_drafts(n, 5, np.random.default_rng(11))
    mean, sd = exact_mean_and_sd(model, 5)
    assert mean == pytest.approx(2.2)
    assert abs(draws.mean() - mean) < 4 * sd / math.sqrt(n)
    assert abs(1 + draws.mean() - 3.2) < 4 * sd / math.sqrt(n)


@pytest.mark.parametrize(
    ("mean", "k", "match"),
    [
        (0.9, 3, "counts the bonus token.*1 \\+ m = 1.9"),
        (3.5, 2, "impossible with num_speculative_tokens=2.*at most 3 tokens.*at least 3"),
        (float("nan"), 2, "finite number"),
        (2.0, 0, "int >= 1"),
        (2.0, 65, "at most 64"),
    ],
)
def test_mean_length_refuses_impossible_values(mean, k, match):
    with pytest.raises(ParameterError, match=match):
        MeanAcceptanceLength(mean, k)


def test_mean_length_refuses_non_numbers():
    with pytest.raises(ParameterError):
        MeanAcceptanceLength(True, 2)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        MeanAcceptanceLength("2.0", 2)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Seeded draws
# --------------------------------------------------------------------------------------------


def test_draws_are_reproducible_bounded_ints():
    a = HALVES.accepted_drafts(1000, 4, np.random.default_rng(3))
    b = HALVES.accepted_drafts(1000, 4, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.int64 and a.shape == (1000,)
    assert a.min() >= 0 and a.max() <= 4
    assert not np.array_equal(a, HALVES.accepted_drafts(1000, 4, np.random.default_rng(4)))


def test_draws_follow_the_leading_successes_distribution():
    # k = 2: P(A=0) = 0.2, P(A=1) = 0.8 * 0.5 = 0.4, P(A=2) = 0.4
    n = 200_000
    draws = HALVES.accepted_drafts(n, 2, np.random.default_rng(5))
    for value, p in [(0, 0.2), (1, 0.4), (2, 0.4)]:
        share = np.mean(draws == value)
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_raising_k_never_lowers_a_draw():
    # one uniform per verification: the draw at k is min(draw at a larger k, k)
    small = HALVES.accepted_drafts(500, 3, np.random.default_rng(9))
    large = HALVES.accepted_drafts(500, 7, np.random.default_rng(9))
    np.testing.assert_array_equal(small, np.minimum(large, 3))


def test_draw_edge_cases():
    assert HALVES.accepted_drafts(0, 3, np.random.default_rng(0)).shape == (0,)
    np.testing.assert_array_equal(HALVES.accepted_drafts(5, 0, np.random.default_rng(0)), np.zeros(5))
    ones = AcceptanceRates(per_position=(1.0,)).accepted_drafts(10, 4, np.random.default_rng(0))
    np.testing.assert_array_equal(ones, np.full(10, 4))
    zeros = AcceptanceRates(per_position=(0.0,)).accepted_drafts(10, 4, np.random.default_rng(0))
    np.testing.assert_array_equal(zeros, np.zeros(10))


# --------------------------------------------------------------------------------------------
# with_accepted_drafts
# --------------------------------------------------------------------------------------------


def requests(*outputs: int) -> list[Request]:
    return [Request(i, float(i), 100, out, priority=i) for i, out in enumerate(outputs)]


def test_with_accepted_drafts_is_seeded_by_seed_and_index():
    reqs = requests(20, 30, 40)
    out = with_accepted_drafts(reqs, HALVES, 4, seed=7)
    assert [len(r.accepted_drafts) for r in out] == [20, 30, 40]
    for i, r in enumerate(out):
        expected = HALVES.accepted_drafts(r.output_tokens, 4, np.random.default_rng([7, i]))
        assert r.accepted_drafts == tuple(expected.tolist())
        assert all(0 <= a <= 4 for a in r.accepted_drafts)
    assert out == with_accepted_drafts(reqs, HALVES, 4, seed=7)
    assert out != with_accepted_drafts(reqs, HALVES, 4, seed=8)


def test_with_accepted_drafts_depends_on_nothing_else():
    base = with_accepted_drafts(requests(20, 30, 40), HALVES, 4, seed=1)
    other = with_accepted_drafts(requests(99, 30), HALVES, 4, seed=1)  # request 0 changed, 2 gone
    assert other[1].accepted_drafts == base[1].accepted_drafts
    longer = with_accepted_drafts(requests(20, 60), HALVES, 4, seed=1)  # a longer output appends
    assert longer[1].accepted_drafts[:30] == base[1].accepted_drafts


def test_with_accepted_drafts_keeps_other_fields_and_returns_new_requests():
    reqs = [Request("a", 1.5, 10, 3, priority=-2, prefix_id="sys", prefix_tokens=5, accepted_drafts=(9, 9))]
    (out,) = with_accepted_drafts(reqs, default_acceptance("eagle3"), 3, seed=0)
    assert (out.request_id, out.arrival_at_s, out.prompt_tokens, out.output_tokens) == ("a", 1.5, 10, 3)
    assert (out.priority, out.prefix_id, out.prefix_tokens) == (-2, "sys", 5)
    assert len(out.accepted_drafts) == 3 and out.accepted_drafts != (9, 9)
    assert reqs[0].accepted_drafts == (9, 9)  # the input is untouched


def test_with_accepted_drafts_at_k_0_is_empty():
    (out,) = with_accepted_drafts(requests(5), HALVES, 0)
    assert out.accepted_drafts == ()


def test_with_accepted_drafts_takes_any_model_and_checks_its_draws():
    @dataclass(frozen=True)
    class Always:
        value: int

        def position_rates(self, num_speculative_tokens: int) -> np.ndarray:
            return np.ones(num_speculative_tokens)

        def accepted_drafts(self, num_verifications: int, num_speculative_tokens: int, rng) -> np.ndarray:
            return np.full(num_verifications, self.value)

    (out,) = with_accepted_drafts(requests(3), Always(2), 2)
    assert out.accepted_drafts == (2, 2, 2)
    with pytest.raises(ParameterError, match="counts in \\[0, 2\\]"):
        with_accepted_drafts(requests(3), Always(3), 2)


# --------------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rates", [(), (1.2,), (0.5, -0.1), (float("nan"),), "0.5", 0.5, (True,), [0.5] * 65])
def test_rates_refuse_non_probabilities(rates):
    with pytest.raises(ParameterError):
        AcceptanceRates(per_position=rates)


def test_rates_are_frozen_tuples():
    model = AcceptanceRates(per_position=np.array([0.9, 0.7]))
    assert model.per_position == (0.9, 0.7)
    assert all(type(v) is float for v in model.per_position)
    with pytest.raises(FrozenInstanceError):
        model.per_position = (0.1,)  # type: ignore[misc]


@pytest.mark.parametrize("k", [-1, 65, 2.5, True, None])
def test_bad_k_is_refused(k):
    with pytest.raises(ParameterError, match="num_speculative_tokens"):
        HALVES.accepted_drafts(3, k, np.random.default_rng(0))
    with pytest.raises(ParameterError, match="num_speculative_tokens"):
        expected_accepted_drafts(HALVES, k)
    with pytest.raises(ParameterError, match="num_speculative_tokens"):
        with_accepted_drafts(requests(3), HALVES, k)


def test_k_as_a_whole_float():
    # the closed forms read 2.0 as 2 (a notebook's float grid); a draw wants an int
    assert expected_accepted_drafts(HALVES, 2.0) == pytest.approx(1.2)  # type: ignore[call-overload]
    with pytest.raises(ParameterError, match="num_speculative_tokens"):
        HALVES.accepted_drafts(3, 2.0, np.random.default_rng(0))  # type: ignore[arg-type]


def test_other_bad_inputs_are_refused():
    with pytest.raises(TypeError, match=r"numpy\.random\.Generator"):
        HALVES.accepted_drafts(3, 2, 0)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="num_verifications"):
        HALVES.accepted_drafts(-1, 2, np.random.default_rng(0))
    with pytest.raises(TypeError, match="acceptance model"):
        with_accepted_drafts(requests(3), 0.7, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="acceptance model"):
        expected_accepted_drafts(0.7, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"requests\[1\] must be a Request"):
        with_accepted_drafts([*requests(3), "x"], HALVES, 2)  # type: ignore[list-item]
    with pytest.raises(ParameterError, match="seed"):
        with_accepted_drafts(requests(3), HALVES, 2, seed=-1)
    with pytest.raises(ParameterError, match="num_speculative_tokens"):
        expected_accepted_drafts(HALVES, [1, -1])


# --------------------------------------------------------------------------------------------
# The published table and the defaults
# --------------------------------------------------------------------------------------------


def test_published_table_covers_the_methods_and_cites_sources():
    assert set(PUBLISHED_ACCEPTANCE) == set(SPECULATIVE_METHODS)
    for method, rows in PUBLISHED_ACCEPTANCE.items():
        for row in rows:
            assert row.method == method
            assert row.source.startswith("https://") and row.title
            assert row.vllm_per_position or row.mean_tokens is not None
            assert not row.vllm_per_position or len(row.vllm_per_position) == row.num_speculative_tokens
            model = row.acceptance()
            assert isinstance(model, AcceptanceModel)
            if row.mean_tokens is not None:  # the model reproduces the published mean (to its rounding)
                got = expected_tokens_per_verification(model, row.num_speculative_tokens)
                assert got == pytest.approx(row.mean_tokens, abs=0.006)


def test_published_eagle3_sweep_is_close_to_one_constant_rate():
    # issue #20780: EAGLE-3 mean acceptance length at k = 2..7; the implied constant rate stays in 0.74-0.77
    rows = [r for r in PUBLISHED_ACCEPTANCE["eagle3"] if "20780" in r.source]
    assert [r.num_speculative_tokens for r in rows] == [2, 3, 4, 5, 6, 7]
    rates = [MeanAcceptanceLength(r.mean_tokens, r.num_speculative_tokens).rate for r in rows]  # type: ignore[arg-type]
    assert min(rates) > 0.74 and max(rates) < 0.77


def test_defaults_are_the_first_row_of_each_method():
    eagle3 = default_acceptance("eagle3")
    np.testing.assert_allclose(eagle3.vllm_per_position(3), [0.7296, 0.5208, 0.3545])
    assert expected_tokens_per_verification(default_acceptance("mtp"), 1) == pytest.approx(1.882)
    assert expected_tokens_per_verification(default_acceptance("eagle"), 3) == pytest.approx(2.29)
    np.testing.assert_allclose(default_acceptance("ngram").vllm_per_position(5), [0.81, 0.74, 0.70, 0.68, 0.66])
    for method in ("eagle3", "eagle", "mtp", "ngram"):
        assert default_acceptance(method) == PUBLISHED_ACCEPTANCE[method][0].acceptance()


def test_default_refuses_draft_model_and_unknown_methods():
    with pytest.raises(ParameterError, match=r"no published vLLM acceptance for 'draft_model'.*MeanAcceptanceLength"):
        default_acceptance("draft_model")
    with pytest.raises(ParameterError, match="method must be one of"):
        default_acceptance("medusa")


def test_docstring_examples():
    result = doctest.testmod(acceptance_module)
    assert result.attempted >= 2 and result.failed == 0
