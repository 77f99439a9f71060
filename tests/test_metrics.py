"""Percentiles with multiplicities and the summary dict (budgetlab.metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab.metrics import quantile, summarize

QS = np.array([0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0])


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False), st.integers(0, 6)),
        min_size=1,
        max_size=40,
    ),
    st.floats(0, 1),
)
def test_weighted_quantile_equals_numpy_on_the_expanded_sample_to_the_bit(pairs, q):
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs], dtype=np.int64)
    if weights.sum() == 0:
        weights[0] = 1
    qs = np.append(QS, q)
    expected = np.quantile(np.repeat(values, weights), qs)
    assert quantile(values, qs, weights=weights).tolist() == expected.tolist()


def test_unweighted_quantile_is_numpy_linear():
    values = np.array([3.0, 1.0, 2.0, 10.0])
    assert quantile(values, 0.5) == np.quantile(values, 0.5) == 2.5
    assert quantile(values, [0.0, 1.0]).tolist() == [1.0, 10.0]


def test_quantile_of_an_empty_sample_is_nan():
    assert math.isnan(quantile([], 0.5))
    assert np.isnan(quantile([1.0, 2.0], [0.5, 0.9], weights=[0, 0])).all()


def test_quantile_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        quantile([1.0], 1.5)
    with pytest.raises(ValueError, match="multiplicities"):
        quantile([1.0, 2.0], 0.5, weights=[1, -1])
    with pytest.raises(ValueError, match="multiplicities"):
        quantile([1.0, 2.0], 0.5, weights=[0.5, 0.5])
    with pytest.raises(ValueError, match="shape"):
        quantile([1.0, 2.0], 0.5, weights=[1])


def test_summarize_by_hand():
    # Two requests arriving at 0 and 1. a: first token 2, finished 5 (3 outputs: gaps 1, 2);
    # b: first token 3, finished 3 (1 output, no gaps). Gaps stored as (1, x1), (2, x1).
    summary = summarize(
        arrival_at_s=np.array([0.0, 1.0]),
        first_token_at_s=np.array([2.0, 3.0]),
        finished_at_s=np.array([5.0, 3.0]),
        output_tokens=np.array([3, 1]),
        prompt_tokens=np.array([10, 20]),
        gap_values_s=np.array([1.0, 2.0]),
        gap_weights=np.array([1, 1]),
        num_preemptions=0,
        kv_peak_blocks=3,
        num_kv_blocks=12,
        num_steps=5,
    )
    assert summary["ttft_p50_s"] == 2.0  # TTFTs 2 and 2
    assert summary["e2e_p50_s"] == 3.5  # E2Es 5 and 2
    assert summary["itl_p50_s"] == 1.5
    assert summary["itl_mean_s"] == 1.5  # (5 − 2) / 2 gaps
    assert summary["max_itl_s"] == 2.0
    assert summary["makespan_s"] == 5.0
    assert summary["throughput_tokens_per_s"] == 4 / 5.0
    assert summary["requests_per_s"] == 2 / 5.0
    assert summary["kv_peak_fraction"] == 0.25
    assert (summary["num_output_tokens"], summary["num_prompt_tokens"], summary["num_steps"]) == (4, 30, 5)


def test_summarize_without_gaps_gives_nan_itl():
    summary = summarize(
        arrival_at_s=np.array([0.0]),
        first_token_at_s=np.array([1.0]),
        finished_at_s=np.array([1.0]),
        output_tokens=np.array([1]),
        prompt_tokens=np.array([4]),
        gap_values_s=np.array([]),
        gap_weights=np.array([], dtype=np.int64),
        num_preemptions=0,
        kv_peak_blocks=1,
        num_kv_blocks=1,
        num_steps=1,
    )
    assert math.isnan(summary["itl_p50_s"]) and math.isnan(summary["max_itl_s"]) and math.isnan(summary["itl_mean_s"])
