"""Tests for budgetlab.workload: arrivals, length distributions, presets, trace loading and the
workloads that regenerate at any load."""

from __future__ import annotations

import math
import pickle
import tempfile
from dataclasses import FrozenInstanceError
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab.errors import ParameterError, TraceFormatError
from budgetlab.specs import Request
from budgetlab.workload import (
    AZURE_COLUMNS,
    CODE_OUTPUT,
    CODE_PROMPT,
    CONVERSATION_OUTPUT,
    CONVERSATION_PROMPT,
    SPLITWISE_COLUMNS,
    Empirical,
    Fixed,
    LengthDistribution,
    LogNormal,
    SyntheticWorkload,
    TraceWorkload,
    Uniform,
    code_like,
    conversation_like,
    gamma_arrivals,
    load_trace,
    poisson_arrivals,
    requests_from_frame,
    requests_to_frame,
    synthetic_workload,
    trace_stats,
    workload_requests,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TRACES = SHARED_DATA / "traces"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
needs_shared = pytest.mark.skipif(
    not (TRACES / "splitwise_conv.csv").is_file() or not (TRACES / "splitwise_code.csv").is_file(),
    reason=f"shared Splitwise traces not found under {TRACES} (they live next to the repo, "
    "not in it; a user's clone does not have them)",
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# Arrivals
# --------------------------------------------------------------------------------------------


def test_poisson_arrivals_start_at_zero_and_hit_the_rate():
    t = poisson_arrivals(rate_per_s=4.0, num_requests=20_000, seed=11)
    assert t.shape == (20_000,)
    assert t[0] == 0.0
    assert np.all(np.diff(t) >= 0)
    gaps = np.diff(t)
    assert (t.size - 1) / t[-1] == pytest.approx(4.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential gaps


def test_single_arrival_is_at_zero():
    assert poisson_arrivals(rate_per_s=1.0, num_requests=1, seed=0).tolist() == [0.0]
    assert gamma_arrivals(rate_per_s=1.0, cv=2.0, num_requests=1, seed=0).tolist() == [0.0]


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0, 3.0])
def test_gamma_arrivals_recover_rate_and_cv(cv):
    t = gamma_arrivals(rate_per_s=10.0, cv=cv, num_requests=20_000, seed=3)
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps >= 0)
    assert 1.0 / gaps.mean() == pytest.approx(10.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.10)


def test_gamma_cv_one_matches_poisson_in_distribution():
    g = np.diff(gamma_arrivals(rate_per_s=2.0, cv=1.0, num_requests=20_000, seed=5))
    p = np.diff(poisson_arrivals(rate_per_s=2.0, num_requests=20_000, seed=6))
    for q in (0.25, 0.5, 0.9):
        assert np.quantile(g, q) == pytest.approx(np.quantile(p, q), rel=0.05)


def test_gamma_cv_zero_is_evenly_spaced():
    t = gamma_arrivals(rate_per_s=4.0, cv=0.0, num_requests=5, seed=0)
    np.testing.assert_allclose(t, [0.0, 0.25, 0.5, 0.75, 1.0])


def test_arrivals_are_seeded():
    a = poisson_arrivals(rate_per_s=1.0, num_requests=50, seed=1)
    b = poisson_arrivals(rate_per_s=1.0, num_requests=50, seed=1)
    c = poisson_arrivals(rate_per_s=1.0, num_requests=50, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"rate_per_s": 0.0, "num_requests": 5}, ValueError, "rate_per_s"),
        ({"rate_per_s": -1.0, "num_requests": 5}, ValueError, "rate_per_s"),
        ({"rate_per_s": math.nan, "num_requests": 5}, ValueError, "rate_per_s"),
        ({"rate_per_s": math.inf, "num_requests": 5}, ValueError, "rate_per_s"),
        ({"rate_per_s": "5", "num_requests": 5}, TypeError, "rate_per_s"),
        ({"rate_per_s": 1.0, "num_requests": 0}, ValueError, "num_requests"),
        ({"rate_per_s": 1.0, "num_requests": 2.5}, TypeError, "num_requests"),
        ({"rate_per_s": 1.0, "num_requests": True}, TypeError, "num_requests"),
        ({"rate_per_s": 1.0, "num_requests": 5, "seed": -1}, ValueError, "seed"),
    ],
)
def test_arrival_parameters_are_validated(kwargs, error, text):
    with pytest.raises(error, match=text):
        poisson_arrivals(**kwargs)


@pytest.mark.parametrize("cv", [-0.1, math.nan, math.inf])
def test_gamma_cv_is_validated(cv):
    with pytest.raises(ValueError, match="cv"):
        gamma_arrivals(rate_per_s=1.0, cv=cv, num_requests=3)


# --------------------------------------------------------------------------------------------
# Length distributions
# --------------------------------------------------------------------------------------------


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_fixed():
    x = Fixed(7).sample(100, rng())
    assert x.dtype == np.int64 and x.tolist() == [7] * 100
    assert Fixed(7).sample(0, rng()).shape == (0,)


def test_uniform_bounds_are_inclusive_and_median_central():
    x = Uniform(10, 20).sample(20_000, rng(1))
    assert x.dtype == np.int64
    assert x.min() == 10 and x.max() == 20
    assert set(x.tolist()) == set(range(10, 21))
    assert np.median(x) == 15
    assert Uniform(5, 5).sample(10, rng()).tolist() == [5] * 10


def test_lognormal_median_and_clipping():
    dist = LogNormal(median_tokens=500, sigma=1.0, min_tokens=50, max_tokens=2000)
    x = dist.sample(50_000, rng(2))
    assert x.dtype == np.int64
    assert x.min() == 50 and x.max() == 2000  # both clips bite with sigma = 1
    assert np.median(x) == pytest.approx(500, rel=0.03)
    # the clip moves mass onto the bounds, it does not redraw
    assert np.mean(x == 2000) == pytest.approx(1 - 0.9165, abs=0.01)  # P(Z > ln 4)


def test_lognormal_sigma_zero_and_unbounded():
    assert LogNormal(median_tokens=123, sigma=0.0).sample(5, rng()).tolist() == [123] * 5
    x = LogNormal(median_tokens=100, sigma=0.5).sample(10_000, rng(3))
    assert x.min() >= 1
    assert np.median(x) == pytest.approx(100, rel=0.03)
    sigma_hat = np.log(x).std()
    assert sigma_hat == pytest.approx(0.5, rel=0.05)


def test_empirical_only_yields_observed_values():
    observed = [3, 3, 3, 10, 250]
    x = Empirical(observed).sample(10_000, rng(4))
    assert set(x.tolist()) == {3, 10, 250}
    assert np.mean(x == 3) == pytest.approx(0.6, abs=0.02)
    assert Empirical(np.array([4, 5])).values == (4, 5)
    assert Empirical([2.0, 3.0]).values == (2, 3)  # whole-valued floats are fine
    assert "5 values" in repr(Empirical(observed))


def test_distributions_are_frozen_and_hashable():
    with pytest.raises(FrozenInstanceError):
        Fixed(3).tokens = 4  # type: ignore[misc]
    assert len({Fixed(3), Fixed(3), Uniform(1, 2), Empirical([1, 2]), Empirical([1, 2])}) == 3
    for dist in (Fixed(1), Uniform(1, 2), LogNormal(10, 1.0), Empirical([1])):
        assert isinstance(dist, LengthDistribution)


@pytest.mark.parametrize(
    ("make", "error", "text"),
    [
        (lambda: Fixed(0), ValueError, "tokens"),
        (lambda: Fixed(2.5), TypeError, "tokens"),
        (lambda: Uniform(0, 4), ValueError, "low_tokens"),
        (lambda: Uniform(5, 3), ValueError, "high_tokens"),
        (lambda: LogNormal(0, 1.0), ValueError, "median_tokens"),
        (lambda: LogNormal(100, -0.5), ValueError, "sigma"),
        (lambda: LogNormal(100, math.nan), ValueError, "sigma"),
        (lambda: LogNormal(100, 1.0, min_tokens=0), ValueError, "min_tokens"),
        (lambda: LogNormal(100, 1.0, min_tokens=200), ValueError, "min_tokens"),
        (lambda: LogNormal(100, 1.0, max_tokens=50), ValueError, "max_tokens"),
        (lambda: LogNormal(5, 1.0, min_tokens=10, max_tokens=8), ValueError, "max_tokens"),
        (lambda: Empirical([]), ValueError, "non-empty"),
        (lambda: Empirical([3, 0]), ValueError, r"values\[1\]"),
        (lambda: Empirical([3, 1.5]), ValueError, r"values\[1\]"),
        (lambda: Empirical(["a"]), TypeError, "ints"),
        (lambda: Empirical("123"), TypeError, "sequence"),
    ],
)
def test_distribution_parameters_are_validated(make, error, text):
    with pytest.raises(error, match=text):
        make()


def test_sample_wants_a_generator_and_a_count():
    with pytest.raises(TypeError, match="Generator"):
        Uniform(1, 2).sample(3, 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be"):
        Fixed(1).sample(-1, rng())


# --------------------------------------------------------------------------------------------
# Synthetic workloads
# --------------------------------------------------------------------------------------------


def test_same_seed_same_workload_different_seed_different():
    kwargs = dict(num_requests=200, rate_per_s=3.0, prompt=LogNormal(500, 1.0), output=Uniform(1, 300))
    a = synthetic_workload(**kwargs, seed=7)
    assert a == synthetic_workload(**kwargs, seed=7)
    b = synthetic_workload(**kwargs, seed=8)
    assert a != b
    assert [r.request_id for r in a] == list(range(200))
    assert a[0].arrival_at_s == 0.0
    assert all(isinstance(r, Request) for r in a)
    assert all(type(r.prompt_tokens) is int and type(r.arrival_at_s) is float for r in a)


def test_child_streams_are_independent():
    base = dict(num_requests=100, rate_per_s=2.0, seed=1)
    a = synthetic_workload(**base, prompt=Uniform(1, 100), output=LogNormal(50, 0.8))
    b = synthetic_workload(**base, prompt=LogNormal(2000, 1.2), output=LogNormal(50, 0.8))
    assert [r.output_tokens for r in a] == [r.output_tokens for r in b]
    assert [r.arrival_at_s for r in a] == [r.arrival_at_s for r in b]
    assert [r.prompt_tokens for r in a] != [r.prompt_tokens for r in b]
    c = synthetic_workload(**base, prompt=Uniform(1, 100), output=Fixed(9))
    assert [r.prompt_tokens for r in a] == [r.prompt_tokens for r in c]
    d = synthetic_workload(**base, prompt=Uniform(1, 100), output=LogNormal(50, 0.8), arrivals="gamma", cv=3.0)
    assert [(r.prompt_tokens, r.output_tokens) for r in a] == [(r.prompt_tokens, r.output_tokens) for r in d]
    assert [r.arrival_at_s for r in a] != [r.arrival_at_s for r in d]


def test_int_lengths_mean_fixed():
    reqs = synthetic_workload(num_requests=5, rate_per_s=1.0, prompt=100, output=Fixed(20))
    assert {(r.prompt_tokens, r.output_tokens) for r in reqs} == {(100, 20)}


def test_gamma_workload_is_burstier():
    reqs = synthetic_workload(num_requests=20_000, rate_per_s=5.0, prompt=10, output=10, arrivals="gamma", cv=2.5)
    stats = trace_stats(reqs)
    assert stats["rate_per_s"] == pytest.approx(5.0, rel=0.05)
    assert stats["interarrival_cv"] == pytest.approx(2.5, rel=0.1)


def test_a_custom_distribution_is_checked():
    class Bad:
        def sample(self, n, rng):
            return np.zeros(n, dtype=int)

    with pytest.raises(ValueError, match=">= 1"):
        synthetic_workload(num_requests=3, rate_per_s=1.0, prompt=Bad(), output=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"cv": 2.0}, ValueError, "arrivals='gamma'"),
        ({"arrivals": "uniform"}, ValueError, "poisson, gamma"),
        ({"prompt": "long"}, TypeError, "prompt"),
        ({"output": 0}, ValueError, "tokens"),
        ({"seed": -3}, ValueError, "seed"),
        ({"num_requests": 0}, ValueError, "num_requests"),
    ],
)
def test_synthetic_workload_validates(kwargs, error, text):
    args = dict(num_requests=3, rate_per_s=1.0, prompt=10, output=10) | kwargs
    with pytest.raises(error, match=text):
        synthetic_workload(**args)


def test_conversation_like_matches_the_published_medians():
    stats = trace_stats(conversation_like(num_requests=20_000, rate_per_s=5.5, seed=0))
    assert stats["prompt_p50_tokens"] == pytest.approx(1020, rel=0.03)
    assert stats["output_p50_tokens"] == pytest.approx(129, rel=0.03)
    assert stats["prompt_p90_tokens"] == pytest.approx(2734.5, rel=0.05)
    assert stats["output_p90_tokens"] == pytest.approx(424, rel=0.05)
    assert stats["rate_per_s"] == pytest.approx(5.5, rel=0.05)
    reqs = conversation_like(num_requests=2_000, rate_per_s=1.0, seed=1)
    assert max(r.prompt_tokens for r in reqs) <= 14050 and max(r.output_tokens for r in reqs) <= 1000
    assert reqs == conversation_like(num_requests=2_000, rate_per_s=1.0, seed=1)


def test_code_like_matches_the_published_medians():
    stats = trace_stats(code_like(num_requests=20_000, rate_per_s=2.6, seed=0))
    assert stats["prompt_p50_tokens"] == pytest.approx(1469, rel=0.03)
    assert stats["output_p50_tokens"] == pytest.approx(13, abs=1)
    assert stats["output_p90_tokens"] == pytest.approx(55, rel=0.08)
    bursty = trace_stats(code_like(num_requests=20_000, rate_per_s=2.6, seed=0, arrivals="gamma", cv=4.0))
    assert bursty["interarrival_cv"] > 3.0


@needs_shared
@pytest.mark.parametrize(
    ("name", "prompt", "output"),
    [
        ("splitwise_conv.csv", CONVERSATION_PROMPT, CONVERSATION_OUTPUT),
        ("splitwise_code.csv", CODE_PROMPT, CODE_OUTPUT),
    ],
)
def test_preset_constants_follow_the_documented_derivation(name, prompt, output):
    """median = trace median, sigma = ln(p90/p50)/z_0.9, max = trace max (see budgetlab/workload/lengths.py)."""
    frame = pd.read_csv(TRACES / name)
    z90 = 1.2815515655446004
    for column, dist in (("num_prefill_tokens", prompt), ("num_decode_tokens", output)):
        values = frame[column].to_numpy()
        p50, p90 = np.quantile(values, [0.5, 0.9])
        assert dist.median_tokens == p50
        assert dist.sigma == pytest.approx(math.log(p90 / p50) / z90, abs=6e-5)
        assert dist.max_tokens == values.max()
        assert dist.min_tokens == 1


# --------------------------------------------------------------------------------------------
# Loading traces
# --------------------------------------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize(
    ("name", "count", "prompt_p50", "output_p50", "rate"),
    [
        ("splitwise_conv.csv", 19_366, 1020, 129, 5.5),
        ("splitwise_code.csv", 8_819, 1469, 13, 2.6),
    ],
)
def test_shared_traces_load_fully(name, count, prompt_p50, output_p50, rate):
    reqs = load_trace(TRACES / name)
    assert len(reqs) == count
    assert [r.request_id for r in reqs[:3]] == [0, 1, 2] and reqs[-1].request_id == count - 1
    raw = pd.read_csv(TRACES / name)
    assert [r.arrival_at_s for r in reqs] == raw["arrived_at"].tolist()
    assert [r.prompt_tokens for r in reqs] == raw["num_prefill_tokens"].tolist()
    assert [r.output_tokens for r in reqs] == raw["num_decode_tokens"].tolist()
    stats = trace_stats(reqs)
    assert stats["num_requests"] == count
    assert stats["prompt_p50_tokens"] == prompt_p50
    assert stats["output_p50_tokens"] == output_p50
    assert stats["rate_per_s"] == pytest.approx(rate, rel=0.05)


@needs_shared
def test_shared_trace_rescaled_and_resampled():
    reqs = load_trace(TRACES / "splitwise_conv.csv", rate_per_s=11.0)
    assert trace_stats(reqs)["rate_per_s"] == pytest.approx(11.0, rel=1e-12)
    prompts = Empirical([r.prompt_tokens for r in reqs])
    x = prompts.sample(1000, rng())
    assert set(x.tolist()) <= set(prompts.values)


AZURE_SECONDS = [0.0, 4.314579, 4.541877, 4.710427, 5.31941, 5.31941, 8.81941, 14.4428667]


def test_azure_fixture_loads():
    reqs = load_trace(FIXTURES / "azure_sample.csv")
    assert [r.request_id for r in reqs] == list(range(8))
    np.testing.assert_allclose([r.arrival_at_s for r in reqs], AZURE_SECONDS, rtol=0, atol=1e-6)
    assert [r.prompt_tokens for r in reqs] == [374, 396, 879, 91, 2048, 1200, 5012, 733]
    assert [r.output_tokens for r in reqs] == [44, 109, 55, 16, 1, 230, 12, 402]


def test_time_scale_halves_the_duration():
    path = FIXTURES / "azure_sample.csv"
    full = trace_stats(load_trace(path))
    fast = load_trace(path, time_scale=0.5)
    assert trace_stats(fast)["duration_s"] == pytest.approx(full["duration_s"] / 2)
    assert trace_stats(fast)["rate_per_s"] == pytest.approx(full["rate_per_s"] * 2)
    np.testing.assert_allclose([r.arrival_at_s for r in fast], np.array(AZURE_SECONDS) / 2, atol=1e-6)
    slow = load_trace(path, time_scale=2.0)
    assert trace_stats(slow)["duration_s"] == pytest.approx(full["duration_s"] * 2)


def test_rate_per_s_hits_the_rate(tmp_path):
    path = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n1,5,5\n2,5,5\n4,5,5\n7,5,5\n")
    reqs = load_trace(path, rate_per_s=3.0)
    assert trace_stats(reqs)["rate_per_s"] == pytest.approx(3.0)
    assert [r.arrival_at_s for r in reqs] == pytest.approx([1 / 6, 2 / 6, 4 / 6, 7 / 6])
    assert trace_stats(load_trace(FIXTURES / "azure_sample.csv", rate_per_s=0.25))["rate_per_s"] == pytest.approx(0.25)


def test_max_requests_keeps_the_first_rows(tmp_path):
    reqs = load_trace(FIXTURES / "azure_sample.csv", max_requests=3)
    assert [r.prompt_tokens for r in reqs] == [374, 396, 879]
    assert len(load_trace(FIXTURES / "azure_sample.csv", max_requests=100)) == 8
    scaled = load_trace(FIXTURES / "azure_sample.csv", max_requests=4, rate_per_s=1.0)
    assert trace_stats(scaled)["rate_per_s"] == pytest.approx(1.0)
    # the whole file is still validated
    path = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,5,x\n")
    with pytest.raises(TraceFormatError, match="line 3"):
        load_trace(path, max_requests=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"time_scale": 0.5, "rate_per_s": 2.0}, ValueError, "not both"),
        ({"time_scale": 0.0}, ValueError, "time_scale"),
        ({"time_scale": -1.0}, ValueError, "time_scale"),
        ({"rate_per_s": math.inf}, ValueError, "rate_per_s"),
        ({"max_requests": 0}, ValueError, "max_requests"),
        ({"max_requests": 1, "rate_per_s": 2.0}, TraceFormatError, "same instant"),
    ],
)
def test_load_trace_options_are_validated(kwargs, error, text):
    with pytest.raises(error, match=text):
        load_trace(FIXTURES / "azure_sample.csv", **kwargs)


def test_tolerated_variations(tmp_path):
    text = (
        "\ufeff arrived_at , num_prefill_tokens,num_decode_tokens,note\r\n"
        "0.0, 12 ,3,first\r\n"
        "\r\n"
        '0.5,12.0,1e1,"a, quoted\nnote"\r\n'
        "0.5,7,2,\r\n"
        "\r\n"
    )
    reqs = load_trace(write(tmp_path, text))
    assert reqs == [Request(0, 0.0, 12, 3), Request(1, 0.5, 12, 10), Request(2, 0.5, 7, 2)]


SPLIT = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
T0 = "2023-11-16 18:15:46.6805900"

# (csv text, line the message must name, column it must name, another phrase it must hold)
MALFORMED = {
    "missing column": ("arrived_at,num_prefill_tokens\n0,5\n", 1, "num_decode_tokens", "TIMESTAMP, ContextTokens"),
    "missing azure column": (
        "TIMESTAMP,ContextTokens,tokens_out\n" + T0 + ",5,5\n",
        1,
        "GeneratedTokens",
        "arrived_at",
    ),
    "empty file": ("", 1, "num_prefill_tokens", "empty"),
    "blank file": ("\n\n", 1, "GeneratedTokens", "empty"),
    "header only": (SPLIT, 2, "num_decode_tokens", "header"),
    "header and blank lines": (SPLIT + "\n,,\n", 2, "arrived_at", "header"),
    "duplicate column": (
        "arrived_at,num_prefill_tokens,num_decode_tokens,num_decode_tokens\n0,1,1,1\n",
        1,
        "num_decode_tokens",
        "twice",
    ),
    "both formats": (
        "arrived_at,num_prefill_tokens,num_decode_tokens,TIMESTAMP,ContextTokens,GeneratedTokens\n",
        1,
        "TIMESTAMP",
        "both",
    ),
    "non-numeric prompt": (SPLIT + "0,5,5\n1,lots,5\n", 3, "num_prefill_tokens", "'lots'"),
    "non-integer prompt": (SPLIT + "0,5,5\n1,12.5,5\n", 3, "num_prefill_tokens", "12.5"),
    "negative output": (SPLIT + "0,5,-3\n", 2, "num_decode_tokens", "-3"),
    "zero prompt": (SPLIT + "0,5,5\n1,5,5\n2,0,5\n", 4, "num_prefill_tokens", ">= 1"),
    "zero output": (SPLIT + "0,5,5\n1,5,0\n", 3, "num_decode_tokens", "first token"),
    "empty token cell": (SPLIT + "0,5,5\n1,,5\n", 3, "num_prefill_tokens", "empty"),
    "short row": (SPLIT + "0,5,5\n1,5\n", 3, "num_decode_tokens", "empty"),
    "long row": (SPLIT + "0,5,5\n1,5,5,9\n", 3, "", "4 cells"),
    "NaN time": (SPLIT + "0,5,5\nnan,5,5\n", 3, "arrived_at", "finite"),
    "infinite time": (SPLIT + "0,5,5\ninf,5,5\n", 3, "arrived_at", "finite"),
    "non-numeric time": (SPLIT + "soon,5,5\n", 2, "arrived_at", "'soon'"),
    "negative time": (SPLIT + "-1.5,5,5\n", 2, "arrived_at", ">= 0"),
    "empty time": (SPLIT + "0,5,5\n,5,5\n", 3, "arrived_at", "empty"),
    "time backwards": (SPLIT + "0,5,5\n2.5,5,5\n2.0,5,5\n", 4, "arrived_at", "backwards"),
    "first problem wins": (SPLIT + "0,5,5\n3,5,5\n2,5,5\n4,x,5\n", 4, "arrived_at", "backwards"),
    "row order before column order": (SPLIT + "0,5,5\n1,5,y\n2,x,5\n", 3, "num_decode_tokens", "'y'"),
    "line after blank lines": (SPLIT + "0,5,5\n\n\n1,5,5.5\n", 5, "num_decode_tokens", "5.5"),
    "line after a quoted line break": (
        'arrived_at,num_prefill_tokens,num_decode_tokens,note\n0,5,5,"two\nlines"\n1,-5,5,ok\n',
        4,
        "num_prefill_tokens",
        "-5",
    ),
    "unparseable timestamp": (AZURE + T0 + ",5,5\n2023-11-16 25:99:00,5,5\n", 3, "TIMESTAMP", "ISO 8601"),
    "empty timestamp": (AZURE + T0 + ",5,5\n,5,5\n", 3, "TIMESTAMP", "empty"),
    "timestamp backwards": (AZURE + T0 + ",5,5\n2023-11-16 18:15:40.0,5,5\n", 3, "TIMESTAMP", "backwards"),
    "azure non-integer tokens": (AZURE + T0 + ",5,2.25\n", 2, "GeneratedTokens", "2.25"),
    "azure zero context": (AZURE + T0 + ",0,3\n", 2, "ContextTokens", ">= 1"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_trace_is_refused_with_file_line_and_column(tmp_path, case):
    text, line, column, phrase = MALFORMED[case]
    path = write(tmp_path, text, name="bad_trace_case.csv")
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    message = str(info.value)
    assert "bad_trace_case.csv" in message
    assert f"line {line}" in message and f"line {line}0" not in message
    assert column in message
    assert phrase in message
    assert isinstance(info.value, ValueError)


def test_missing_file_and_bad_encoding(tmp_path):
    with pytest.raises(TraceFormatError, match=r"nope\.csv.*does not exist"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceFormatError, match="directory"):
        load_trace(tmp_path)
    bad = tmp_path / "latin1.csv"
    bad.write_bytes(SPLIT.encode() + "0,5,5\n1,5,5 caf\xe9\n".encode("latin-1"))
    with pytest.raises(TraceFormatError, match=r"latin1\.csv"):
        load_trace(bad)


# Hypothesis: any valid generated trace, in either format, round-trips exactly.

rows_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=10**8),  # gap [us]
        st.integers(min_value=1, max_value=200_000),  # prompt [tokens]
        st.integers(min_value=1, max_value=20_000),  # output [tokens]
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    rows=rows_strategy,
    azure=st.booleans(),
    start_us=st.integers(min_value=0, max_value=10**9),
    extra_column=st.booleans(),
    trailing_blank=st.booleans(),
)
def test_valid_trace_round_trips(rows, azure, start_us, extra_column, trailing_blank):
    arrival_us = np.cumsum([start_us] + [gap for gap, _, _ in rows[1:]]).tolist()
    base = datetime(2023, 11, 16, 18, 15, 46)
    lines = []
    header = list(AZURE_COLUMNS if azure else SPLITWISE_COLUMNS) + (["extra"] if extra_column else [])
    lines.append(",".join(header))
    for us, (_, prompt, output) in zip(arrival_us, rows):
        if azure:
            when = (base + timedelta(microseconds=us)).isoformat(sep=" ", timespec="microseconds")
        else:
            when = repr(us / 1e6)
        cells = [when, str(prompt), str(output)] + (["x"] if extra_column else [])
        lines.append(",".join(cells))
    text = "\n".join(lines) + "\n" + ("\n" if trailing_blank else "")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "generated.csv"
        path.write_text(text, encoding="utf-8")
        reqs = load_trace(path)
    assert [r.request_id for r in reqs] == list(range(len(rows)))
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(p, o) for _, p, o in rows]
    if azure:
        expected = [(us - arrival_us[0]) / 1e6 for us in arrival_us]
        np.testing.assert_allclose([r.arrival_at_s for r in reqs], expected, rtol=0, atol=1e-6)
    else:
        assert [r.arrival_at_s for r in reqs] == [us / 1e6 for us in arrival_us]
    assert requests_from_frame(requests_to_frame(reqs)) == reqs


# --------------------------------------------------------------------------------------------
# Stats and frames
# --------------------------------------------------------------------------------------------


def test_trace_stats_by_hand():
    reqs = [Request(0, 1.0, 10, 1), Request(1, 2.0, 20, 3), Request(2, 4.0, 30, 5), Request(3, 5.0, 40, 7)]
    stats = trace_stats(reqs)
    assert stats["num_requests"] == 4
    assert stats["duration_s"] == 4.0
    assert stats["rate_per_s"] == 0.75
    gaps = np.array([1.0, 2.0, 1.0])
    assert stats["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean())
    assert stats["prompt_p50_tokens"] == 25.0 and stats["prompt_mean_tokens"] == 25.0
    assert stats["prompt_p90_tokens"] == pytest.approx(37.0)
    assert stats["output_p50_tokens"] == 4.0 and stats["output_mean_tokens"] == 4.0
    single = trace_stats([Request(0, 0.0, 5, 5)])
    assert single["duration_s"] == 0.0 and math.isnan(single["rate_per_s"])
    with pytest.raises(ValueError, match="at least one"):
        trace_stats([])


def test_frames_round_trip():
    reqs = synthetic_workload(num_requests=30, rate_per_s=2.0, prompt=Uniform(1, 50), output=Uniform(1, 9), seed=4)
    frame = requests_to_frame(reqs)
    assert list(frame.columns) == ["request_id", "arrival_at_s", "prompt_tokens", "output_tokens"]
    assert frame["prompt_tokens"].dtype == np.int64 and frame["arrival_at_s"].dtype == np.float64
    assert requests_from_frame(frame) == reqs
    assert list(requests_to_frame([]).columns) == list(frame.columns)


def test_requests_from_frame_defaults_and_errors():
    frame = pd.DataFrame({"arrival_at_s": [0, 1.5], "prompt_tokens": [3.0, 4.0], "output_tokens": [1, 2]})
    assert requests_from_frame(frame) == [Request(0, 0.0, 3, 1), Request(1, 1.5, 4, 2)]
    named = frame.assign(request_id=["a", "b"])
    assert [r.request_id for r in requests_from_frame(named)] == ["a", "b"]
    with pytest.raises(ValueError, match="output_tokens"):
        requests_from_frame(frame.drop(columns="output_tokens"))
    with pytest.raises(ValueError, match="frame row 1"):
        requests_from_frame(frame.assign(prompt_tokens=[3.0, 4.5]))


# --------------------------------------------------------------------------------------------
# Workloads that regenerate at any load (SyntheticWorkload, TraceWorkload)
# --------------------------------------------------------------------------------------------

SMALL = SyntheticWorkload.conversation_like(num_requests=200)


def test_synthetic_workload_common_random_numbers():
    slow = SMALL.requests(rate_per_s=2.0, seed=3)
    fast = SMALL.requests(rate_per_s=8.0, seed=3)
    assert [(r.request_id, r.prompt_tokens, r.output_tokens) for r in slow] == [
        (r.request_id, r.prompt_tokens, r.output_tokens) for r in fast
    ]
    np.testing.assert_allclose([r.arrival_at_s for r in slow], [4.0 * r.arrival_at_s for r in fast], rtol=1e-12)
    assert slow[0].arrival_at_s == 0.0
    assert SMALL.requests(rate_per_s=2.0, seed=3) == slow  # deterministic
    assert SMALL.requests(rate_per_s=2.0, seed=4) != slow
    assert len(slow) == 200


def test_synthetic_workload_columns_are_its_requests():
    """``columns`` (what sweeps simulate: arrays, no Request each) holds exactly ``requests``:
    the arrivals of the load-1 draw divided by the rate, as the requests were always made."""
    columns = SMALL.columns(rate_per_s=7.0, seed=3)
    requests = SMALL.requests(rate_per_s=7.0, seed=3)
    assert columns == requests
    unit = SMALL.columns(rate_per_s=1.0, seed=3)
    assert [r.arrival_at_s for r in requests] == [t / 7.0 for t in unit.arrival_at_s.tolist()]
    assert workload_requests(SMALL, rate_per_s=7.0, seed=3) == requests
    assert type(workload_requests(SMALL, rate_per_s=7.0, seed=3)) is type(columns)


def test_workload_requests_falls_back_to_requests():
    """A workload without ``columns`` is asked for its ``requests``."""

    class Listed:
        label = "listed"

        def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
            return [Request(0, 0.0, 10 * seed + 1, int(rate_per_s))]

    assert workload_requests(Listed(), rate_per_s=3.0, seed=2) == [Request(0, 0.0, 21, 3)]


def test_synthetic_workload_presets_and_validation():
    assert SyntheticWorkload.conversation_like().label == "conversation-like"
    assert SyntheticWorkload.code_like(num_requests=10).num_requests == 10
    with pytest.raises(ParameterError, match="num_requests"):
        SyntheticWorkload(prompt=10, output=10, num_requests=0)
    with pytest.raises(ValueError, match="gamma"):
        SyntheticWorkload(prompt=10, output=10, cv=2.0)
    with pytest.raises(ParameterError, match="rate_per_s"):
        SMALL.requests(rate_per_s=0.0)
    w = SyntheticWorkload(prompt=100, output=Fixed(20), num_requests=5)
    assert w.mean_sequence_tokens() == 120.0


def test_trace_workload_replays_at_any_rate():
    reqs = [Request(i, 10.0 + 2.0 * i, 100 + i, 5) for i in range(11)]  # 0.5 req/s, starts at 10 s
    trace = TraceWorkload.from_requests(reqs, label="t")
    assert trace.native_rate_per_s == pytest.approx(0.5)
    assert trace.time_scale_for(1.0) == pytest.approx(0.5)
    assert trace.rate_for(0.25) == pytest.approx(2.0)
    replay = trace.requests(rate_per_s=1.0, seed=7)
    assert [r.arrival_at_s for r in replay] == pytest.approx([float(i) for i in range(11)])
    assert [r.prompt_tokens for r in replay] == [100 + i for i in range(11)]
    assert trace.mean_sequence_tokens() == pytest.approx(110.0)
    assert "0.5 req/s" in repr(trace)
    with pytest.raises(ParameterError, match="at least two requests"):
        TraceWorkload.from_requests(reqs[:1])


@pytest.mark.parametrize(
    ("arrivals", "prompts", "outputs", "match"),
    [
        # Fractional token counts used to be truncated silently by the int64 cast (12.5 -> 12).
        ([0.0, 1.0], [12.5, 3], [1, 1], "whole numbers"),
        ([0.0, 1.0], [12, 3], [1, 2.5], "whole numbers"),
        ([0.0, 1.0], [12, np.nan], [1, 1], "whole numbers"),
        # A NaN arrival inside the trace used to pass the order check (NaN < x is False).
        ([0.0, np.nan, 2.0], [1, 1, 1], [1, 1, 1], "finite"),
        ([0.0, 1.0, np.inf], [1, 1, 1], [1, 1, 1], "finite"),
    ],
)
def test_trace_workload_refuses_what_it_would_silently_change(arrivals, prompts, outputs, match):
    with pytest.raises(ParameterError, match=match):
        TraceWorkload(np.array(arrivals), np.array(prompts), np.array(outputs))


def test_trace_workload_from_shared_csv(shared_traces):
    trace = TraceWorkload.from_csv(shared_traces / "splitwise_conv.csv", max_requests=500)
    assert trace.label == "splitwise_conv" and trace.num_requests == 500
    replay = trace.requests(rate_per_s=10.0)
    rate = (len(replay) - 1) / (replay[-1].arrival_at_s - replay[0].arrival_at_s)
    assert rate == pytest.approx(10.0)


def test_workloads_pickle():
    trace = TraceWorkload.from_requests([Request(i, float(i), 10, 3) for i in range(5)])
    for w in (SMALL, trace):
        back = pickle.loads(pickle.dumps(w))
        assert back.requests(rate_per_s=3.0, seed=1) == w.requests(rate_per_s=3.0, seed=1)


def test_fixed_length_twins_keep_the_arrivals():
    twin = SMALL.with_fixed_lengths(seed=2)
    real = SMALL.requests(rate_per_s=3.0, seed=2)
    fixed = twin.requests(rate_per_s=3.0, seed=2)
    assert [r.arrival_at_s for r in real] == [r.arrival_at_s for r in fixed]
    assert twin.prompt == Fixed(round(np.mean([r.prompt_tokens for r in real])))
    assert twin.label == f"fixed lengths ({twin.prompt.tokens:,} + {twin.output.tokens:,} tokens)"
    trace = TraceWorkload([0.0, 1.0, 3.0], [10, 20, 33], [1, 2, 4])
    trace_twin = trace.with_fixed_lengths()
    assert trace_twin.prompt_tokens.tolist() == [21, 21, 21] and trace_twin.output_tokens.tolist() == [2, 2, 2]
    assert np.array_equal(trace_twin.arrival_at_s, trace.arrival_at_s)


def test_trace_workload_from_csv_trusts_load_trace(tmp_path, monkeypatch):
    path = tmp_path / "small.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n0.5,20,3\n2.0,30,4\n")
    # the constructor's own array checks would run through __post_init__; from_csv must not need them
    monkeypatch.setattr(TraceWorkload, "__post_init__", lambda self: pytest.fail("re-validated"))
    trace = TraceWorkload.from_csv(path)
    assert trace.label == "small" and trace.num_requests == 3
    assert trace.arrival_at_s.tolist() == [0.0, 0.5, 2.0] and trace.prompt_tokens.tolist() == [10, 20, 30]
    assert trace.native_rate_per_s == pytest.approx(1.0)  # 2 gaps over 2 s
    assert not trace.output_tokens.flags.writeable
    assert pickle.loads(pickle.dumps(trace)).requests(rate_per_s=2.0) == trace.requests(rate_per_s=2.0)
    one = tmp_path / "one.csv"
    one.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n")
    with pytest.raises(ParameterError, match="at least two requests"):  # still checked: a rate needs two
        TraceWorkload.from_csv(one)


def test_workload_stats_by_hand():
    from budgetlab.workload import TraceWorkload
    from budgetlab.workload.frames import WORKLOAD_STATS, workload_stats

    two = TraceWorkload.from_requests([Request(0, 0.0, 100, 10), Request(1, 1.0, 300, 30)])
    stats = workload_stats(two)
    assert tuple(stats) == WORKLOAD_STATS
    assert stats["prompt_p50_tokens"] == 200 and stats["prompt_mean_tokens"] == 200
    assert stats["prompt_p90_tokens"] == pytest.approx(280)  # 100 + 0.9 × 200, linear interpolation
    outputs = (stats["output_p50_tokens"], stats["output_p90_tokens"], stats["output_mean_tokens"])
    assert outputs == pytest.approx((20, 28, 20))
    assert stats["sequence_mean_tokens"] == 220 and stats["num_requests"] == 2


# --------------------------------------------------------------------------------------------
# Prefix columns (Request.prefix_id / prefix_tokens) in frames and traces
# --------------------------------------------------------------------------------------------

PREFIXED = [
    Request(0, 0.0, 120, 5, prefix_id="sys0", prefix_tokens=100),
    Request(1, 1.0, 10, 1, prefix_id=7, prefix_tokens=11),
    Request(2, 1.5, 30, 2),
    Request(3, 2.0, 130, 4, prefix_id="sys0", prefix_tokens=100),
]


def test_frames_round_trip_prefix_columns():
    from budgetlab.workload import PREFIX_ID_COLUMN, PREFIX_TOKENS_COLUMN

    frame = requests_to_frame(PREFIXED)
    assert list(frame.columns) == [
        "request_id",
        "arrival_at_s",
        "prompt_tokens",
        "output_tokens",
        "prefix_id",
        "prefix_tokens",
    ]
    assert (PREFIX_ID_COLUMN, PREFIX_TOKENS_COLUMN) == ("prefix_id", "prefix_tokens")
    assert frame["prefix_id"].tolist() == ["sys0", 7, None, "sys0"] and frame["prefix_tokens"].dtype == np.int64
    assert frame["prefix_tokens"].tolist() == [100, 11, 0, 100]
    assert requests_from_frame(frame) == PREFIXED
    # no request with a prefix: the four columns as before
    assert "prefix_id" not in requests_to_frame([Request(0, 0.0, 4, 1)]).columns


def test_requests_from_frame_reads_prefix_cells_leniently_and_checks_them():
    frame = pd.DataFrame(
        {
            "arrival_at_s": [0.0, 1.0, 2.0],
            "prompt_tokens": [10, 20, 30],
            "output_tokens": [1, 2, 3],
            "prefix_id": [3.0, np.nan, None],  # an int column with gaps, as pandas stores it
            "prefix_tokens": [5.0, np.nan, np.nan],
        }
    )
    got = requests_from_frame(frame)
    assert [(r.prefix_id, r.prefix_tokens) for r in got] == [(3, 5), (None, 0), (None, 0)]
    assert type(got[0].prefix_id) is int and type(got[0].prefix_tokens) is int
    ids_only = requests_from_frame(frame.drop(columns="prefix_tokens"))
    assert [(r.prefix_id, r.prefix_tokens) for r in ids_only] == [(3, 0), (None, 0), (None, 0)]
    with pytest.raises(ValueError, match=r"frame row 1: .*prefix_tokens=4 needs a prefix_id"):
        requests_from_frame(frame.assign(prefix_tokens=[5, 4, 0]))
    with pytest.raises(ValueError, match=r"frame row 2: .*prefix_tokens must be an int in \[0, .* = 33\]"):
        requests_from_frame(frame.assign(prefix_id=["a", "b", "c"], prefix_tokens=[1, 2, 34]))
    with pytest.raises(ValueError, match=r"frame row 0: .*prefix_id must be an int, a str or None"):
        requests_from_frame(frame.assign(prefix_id=[1.5, None, None]))
    with pytest.raises(ValueError, match=r"frame row 0: .*prefix_tokens"):
        requests_from_frame(frame.assign(prefix_id=["a", None, None], prefix_tokens=[np.nan, 0, 0]))


def test_trace_stats_shared_prefix_fraction_by_hand():
    # sys0: request 0 declares 100 tokens, request 3 reuses them (100 of its 130 prompt tokens);
    # id 7 is declared once. 100 shared of 120 + 10 + 30 + 130 = 290 prompt tokens.
    assert trace_stats(PREFIXED)["shared_prefix_fraction"] == pytest.approx(100 / 290)
    # a conversation: turn prompts 10, 31, 63 with streams 11, 33, 66 share 11 and 33 tokens
    turns = [
        Request(i, float(i), p, o, prefix_id="c", prefix_tokens=p + o)
        for i, (p, o) in enumerate([(10, 1), (31, 2), (63, 3)])
    ]
    assert trace_stats(turns)["shared_prefix_fraction"] == pytest.approx(44 / 104)
    # arrival order decides who was first, not list order; a shorter later stream shares its own length
    late_first = [
        Request(0, 5.0, 50, 1, prefix_id="s", prefix_tokens=40),
        Request(1, 0.0, 30, 1, prefix_id="s", prefix_tokens=20),
    ]
    assert trace_stats(late_first)["shared_prefix_fraction"] == pytest.approx(20 / 80)
    assert trace_stats([Request(0, 0.0, 5, 5), Request(1, 1.0, 5, 5)])["shared_prefix_fraction"] == 0.0


SPLITWISE_PREFIX_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens,prefix_id,prefix_tokens\n"


def test_load_trace_keeps_prefix_columns(tmp_path):
    from budgetlab.workload import PREFIX_COLUMNS

    assert PREFIX_COLUMNS == ("prefix_id", "prefix_tokens")
    path = write(
        tmp_path, SPLITWISE_PREFIX_HEADER + "0.0,120,5,sys0,100\n1.0,10,1,7,11\n1.5,30,2,,\n2.0,130,4,sys0,100.0\n"
    )
    assert load_trace(path) == PREFIXED
    assert load_trace(path, max_requests=2, rate_per_s=2.0) == [
        Request(0, 0.0, 120, 5, prefix_id="sys0", prefix_tokens=100),
        Request(1, 0.5, 10, 1, prefix_id=7, prefix_tokens=11),
    ]
    azure = write(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens,prefix_tokens,prefix_id\n"
        "2023-11-16 18:15:46,374,44,300,conv-1\n2023-11-16 18:15:48,400,9,0,\n",
        "azure.csv",
    )
    got = load_trace(azure)
    assert [(r.arrival_at_s, r.prefix_id, r.prefix_tokens) for r in got] == [(0.0, "conv-1", 300), (2.0, None, 0)]
    # a trace without the columns shares nothing, as before
    plain = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n", "plain.csv")
    assert [(r.prefix_id, r.prefix_tokens) for r in load_trace(plain)] == [(None, 0)]
    # and a request table written with the columns loads back from CSV
    frame = requests_to_frame(PREFIXED).rename(
        columns={
            "arrival_at_s": "arrived_at",
            "prompt_tokens": "num_prefill_tokens",
            "output_tokens": "num_decode_tokens",
        }
    )
    frame.to_csv(tmp_path / "round.csv", index=False)
    assert load_trace(tmp_path / "round.csv") == PREFIXED


@pytest.mark.parametrize(
    ("rows", "text"),
    [
        ("0.0,10,2,a,-1\n", r"line 2, column 'prefix_tokens': expected a whole number of tokens >= 0"),
        ("0.0,10,2,a,1\n1.0,10,2,a,2.5\n", r"line 3, column 'prefix_tokens': .*got '2.5'"),
        ("0.0,10,2,a,lots\n", r"line 2, column 'prefix_tokens'"),
        ("0.0,10,2,a,13\n", r"line 2, column 'prefix_tokens': '13' shared tokens is more than .* \(12 tokens\)"),
        ("0.0,10,2,,4\n", r"line 2, column 'prefix_tokens': '4' shared tokens but no prefix_id"),
        # the first problem in file order wins: row 2's prompt before row 3's prefix
        ("0.0,x,2,a,1\n1.0,10,2,,4\n", r"line 2, column 'num_prefill_tokens'"),
        ("0.0,10,2,a,1\n1.0,10,2,,4\n2.0,x,1,,\n", r"line 3, column 'prefix_tokens'"),
    ],
)
def test_load_trace_checks_prefix_cells(tmp_path, rows, text):
    path = write(tmp_path, SPLITWISE_PREFIX_HEADER + rows)
    with pytest.raises(TraceFormatError, match=text):
        load_trace(path)


def test_load_trace_needs_both_prefix_columns(tmp_path):
    path = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens,prefix_id\n0.0,10,2,a\n")
    with pytest.raises(TraceFormatError, match=r"line 1: column 'prefix_id' needs its companion 'prefix_tokens'"):
        load_trace(path)
    path = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens,prefix_tokens\n0.0,10,2,3\n")
    with pytest.raises(TraceFormatError, match="'prefix_tokens' needs its companion 'prefix_id'"):
        load_trace(path)


def test_trace_workload_replays_prefixes(tmp_path):
    path = write(
        tmp_path, SPLITWISE_PREFIX_HEADER + "0.0,120,5,sys0,100\n1.0,10,1,7,11\n1.5,30,2,,\n2.0,130,4,sys0,100\n"
    )
    trace = TraceWorkload.from_csv(path)
    assert trace.prefix_id == ("sys0", 7, None, "sys0") and trace.prefix_tokens.tolist() == [100, 11, 0, 100]
    assert not trace.prefix_tokens.flags.writeable
    fast = trace.requests(rate_per_s=3.0)  # native rate 1.5/s: twice as fast
    assert fast == [
        Request(
            r.request_id,
            r.arrival_at_s / 2,
            r.prompt_tokens,
            r.output_tokens,
            prefix_id=r.prefix_id,
            prefix_tokens=r.prefix_tokens,
        )
        for r in PREFIXED
    ]
    wrapped = TraceWorkload.from_requests(list(reversed(PREFIXED)))
    assert wrapped.requests(rate_per_s=1.5) == PREFIXED
    assert pickle.loads(pickle.dumps(wrapped)).requests(rate_per_s=1.5) == PREFIXED
    twin = wrapped.with_fixed_lengths()
    assert twin.prefix_id is None and all(r.prefix_id is None for r in twin.requests(rate_per_s=1.0))
    plain = TraceWorkload([0.0, 1.0], [10, 20], [1, 2])
    assert plain.prefix_id is None and plain.prefix_tokens is None
    with pytest.raises(ParameterError, match="together"):
        TraceWorkload([0.0, 1.0], [10, 20], [1, 2], prefix_id=("a", "a"))
    with pytest.raises(ParameterError, match="2 entries"):
        TraceWorkload([0.0, 1.0], [10, 20], [1, 2], prefix_id=("a",), prefix_tokens=[3])
    with pytest.raises(ParameterError, match="whole numbers >= 0"):
        TraceWorkload([0.0, 1.0], [10, 20], [1, 2], prefix_id=("a", "a"), prefix_tokens=[3, 2.5])
    with pytest.raises(ParameterError, match=r"trace request 1: prefix_tokens must be an int in \[0, .* = 22\]"):
        TraceWorkload([0.0, 1.0], [10, 20], [1, 2], prefix_id=("a", "a"), prefix_tokens=[3, 23])
    ok = TraceWorkload([0.0, 1.0], [10, 20], [1, 2], prefix_id=(np.int64(4), None), prefix_tokens=np.array([3, 0]))
    assert ok.requests(rate_per_s=1.0)[0].prefix_id == 4


# --------------------------------------------------------------------------------------------
# Columnar loading (issue 14): RequestColumns, exact epoch offsets, pandas' silent drops
# --------------------------------------------------------------------------------------------


def test_load_trace_returns_columns_that_behave_as_a_list(tmp_path):
    from budgetlab.workload.frames import RequestColumns

    path = write(tmp_path, SPLIT + "0.5,12,3\n1.0,7,2\n2.5,30,1\n")
    loaded = load_trace(path)
    assert isinstance(loaded, RequestColumns) and len(loaded) == 3
    as_list = [Request(0, 0.5, 12, 3), Request(1, 1.0, 7, 2), Request(2, 2.5, 30, 1)]
    assert loaded == as_list and as_list == loaded and list(loaded) == as_list
    assert loaded[1] == as_list[1] and loaded[-1] == as_list[2] and loaded[1:] == as_list[1:]
    assert loaded != as_list[:2] and loaded != [Request(0, 0.5, 12, 4), *as_list[1:]]
    with pytest.raises(IndexError):
        loaded[3]
    with pytest.raises(TypeError):
        loaded["0"]  # type: ignore[index]
    with pytest.raises(TypeError):
        hash(loaded)
    # the arrays, read-only: arrivals as written, offsets from the first arrival
    assert loaded.arrival_at_s.tolist() == [0.5, 1.0, 2.5] and loaded.prompt_tokens.tolist() == [12, 7, 30]
    assert loaded.origin_s == 0.5 and loaded.offset_s.tolist() == [0.0, 0.5, 2.0]
    assert not loaded.prompt_tokens.flags.writeable and not loaded.offset_s.flags.writeable
    pd.testing.assert_frame_equal(requests_to_frame(loaded), requests_to_frame(as_list))
    assert trace_stats(loaded) == trace_stats(as_list)
    assert pickle.loads(pickle.dumps(loaded)) == loaded
    # time_scale scales the origin and the offsets alike
    slow = load_trace(path, time_scale=2.0)
    assert slow.origin_s == 1.0 and slow.offset_s.tolist() == [0.0, 1.0, 4.0] and slow[2].arrival_at_s == 5.0
    # a trace workload replays the same columns, lazily or as a list
    trace = TraceWorkload.from_csv(path)
    assert trace.columns(rate_per_s=1.0) == trace.requests(rate_per_s=1.0)
    assert [r.arrival_at_s for r in trace.requests(rate_per_s=1.0)] == [0.0, 0.5, 2.0]  # native 1 req/s


def test_request_columns_refuse_what_a_request_refuses():
    from budgetlab.workload.frames import RequestColumns

    with pytest.raises(ParameterError, match=r"request 1: prompt_tokens must be an int >= 1, got 2\.5"):
        RequestColumns([0.0, 1.0], [3, 2.5], [1, 1])
    with pytest.raises(ParameterError, match=r"request 0: arrival_at_s must be a finite number of seconds >= 0"):
        RequestColumns([np.nan, 1.0], [3, 3], [1, 1])
    with pytest.raises(ParameterError, match=r"request 1: prefix_tokens=4 needs a prefix_id"):
        RequestColumns([0.0, 1.0], [3, 3], [1, 1], prefix_id=("a", None), prefix_tokens=[2, 4])
    with pytest.raises(ParameterError, match="equally long"):
        RequestColumns([0.0, 1.0], [3], [1, 1])
    with pytest.raises(ParameterError, match="origin_s"):
        RequestColumns([0.0, 1.0], [3, 3], [1, 1], origin_s=5.0, offset_s=[0.0, 1.0])
    exact = RequestColumns([10.0, 11.0], [3, 3], [1, 1], origin_s=10.0, offset_s=[0.0, 1.0])
    assert exact.offset_s.tolist() == [0.0, 1.0] and RequestColumns([], [], []).origin_s == 0.0


# 1.7e15 s rounds to 0.25 s as float64 and 1.7e12 s to 0.24 ms: the offsets come from the digits.
EPOCH_TRACE = SPLIT + (
    "1700000000000000.000001,5,5\n1700000000000000.000003,5,5\n1700000000000000.5,5,5\n1700000000000001.25,6,2\n"
)


@pytest.mark.parametrize("quoted", [False, True])
def test_epoch_arrivals_keep_exact_offsets(tmp_path, quoted):
    text = EPOCH_TRACE.replace("1700000000000000.000003", '"1700000000000000.000003"') if quoted else EPOCH_TRACE
    loaded = load_trace(write(tmp_path, text))
    # by hand: each arrival minus 1700000000000000.000001
    assert loaded.offset_s.tolist() == [0.0, 2e-06, 0.499999, 1.249999]
    assert loaded.origin_s == 1.7e15 and loaded.arrival_at_s[1] == 1.7e15  # the floats cannot tell them apart
    trace = TraceWorkload.from_csv(tmp_path / "trace.csv")
    assert trace.native_rate_per_s == pytest.approx(3 / 1.249999, rel=1e-12)
    replay = trace.requests(rate_per_s=3 / 1.249999)
    assert [r.arrival_at_s for r in replay] == pytest.approx([0.0, 2e-06, 0.499999, 1.249999], rel=1e-12, abs=0)
    assert trace_stats(loaded)["duration_s"] == pytest.approx(1.249999, rel=1e-12)
    micro = load_trace(write(tmp_path, SPLIT + "1700000000000.123456,5,5\n 1700000000000.123457 ,5,5\r\n", "us.csv"))
    assert micro.offset_s.tolist() == [0.0, 1e-06]


def test_epoch_arrivals_out_of_order_are_caught_on_their_digits(tmp_path):
    # both round to the same float64; the text says the second comes first
    path = write(tmp_path, SPLIT + "1700000000000000.3,5,5\n1700000000000000.2,5,5\n")
    with pytest.raises(TraceFormatError, match=r"line 3, column 'arrived_at': time goes backwards"):
        load_trace(path)
    huge = write(tmp_path, SPLIT + "1700000000000000000,5,5\n", "ns.csv")  # an epoch in ns read as s
    with pytest.raises(TraceFormatError, match=r"line 2, column 'arrived_at': .*implausibly large.*Fix"):
        load_trace(huge)


def test_extra_cells_on_the_first_row_are_refused(tmp_path):
    # pandas drops them with only a warning when the first data row is the long one
    with pytest.raises(TraceFormatError, match=r"line 2: 4 cells but the header has 3 columns"):
        load_trace(write(tmp_path, SPLIT + "0,5,5,9\n"))
    with pytest.raises(TraceFormatError, match=r"line 3: 4 cells but the header has 3 columns"):
        load_trace(write(tmp_path, SPLIT + "0,5,5,\n1,5,5,9\n", "second.csv"))
    # a trailing comma on every line (empty extra cells) is what pandas' index_col=False is for
    trailing = load_trace(write(tmp_path, SPLIT + "0,5,5,\n1,6,7,\n", "trailing.csv"))
    assert trailing == [Request(0, 0.0, 5, 5), Request(1, 1.0, 6, 7)]


@needs_shared
@pytest.mark.parametrize("name", ["splitwise_conv.csv", "splitwise_code.csv"])
def test_fast_and_text_readers_agree_on_the_shared_traces(name):
    from budgetlab.workload.trace_cells import checked_columns
    from budgetlab.workload.traces import _fast_columns

    fast, text = _fast_columns(TRACES / name), checked_columns(TRACES / name)
    assert fast is not None  # a valid trace never needs the cell-by-cell reader
    for field in ("arrival_at_s", "offset_s", "prompt_tokens", "output_tokens"):
        assert np.array_equal(getattr(fast, field), getattr(text, field)), field


def test_a_large_trace_is_held_as_columns(tmp_path):
    import tracemalloc

    n = 100_000
    frame = pd.DataFrame(
        {"arrived_at": np.arange(n) * 0.01, "num_prefill_tokens": 100 + np.arange(n) % 50, "num_decode_tokens": 7}
    )
    frame.to_csv(tmp_path / "big.csv", index=False)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    loaded = load_trace(tmp_path / "big.csv")
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(loaded) == n and loaded[n - 1] == Request(n - 1, (n - 1) * 0.01, 100 + (n - 1) % 50, 7)
    assert held / n < 200  # bytes per request: 4 arrays of 8 bytes, not one Python object (~1 KB) each


def test_an_int_length_below_one_is_refused_by_its_argument_name():
    from budgetlab.workload import multi_turn_workload, system_prompt_workload

    # An int is Fixed(int): 3 requests of 7 + 2 tokens.
    reqs = synthetic_workload(num_requests=3, rate_per_s=1.0, prompt=7, output=2)
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(7, 2)] * 3
    synthetic = {"num_requests": 3, "rate_per_s": 1.0, "prompt": 7, "output": 2}
    turns = {"num_conversations": 2, "conversation_rate_per_s": 1.0, "turns": 2, "message": 5, "output": 2}
    system = {"num_requests": 3, "rate_per_s": 1.0, "num_prompts": 1, "system": 9, "message": 5, "output": 2}
    calls = [
        ("prompt", synthetic_workload, synthetic),
        ("output", synthetic_workload, synthetic),
        ("turns", multi_turn_workload, turns),
        ("message", multi_turn_workload, turns),
        ("system", system_prompt_workload, system),
    ]
    for name, function, valid in calls:
        what = rf"^{name} must be an int >= 1 \[tokens\] \(Fixed\.tokens\) or a length distribution, got "
        for bad in (0, -1, np.int64(-3)):
            with pytest.raises(ValueError, match=what):
                function(**{**valid, name: bad})


def test_empirical_refuses_a_bool_among_its_values():
    # NumPy alone would read [True, 3] as the lengths [1, 3].
    with pytest.raises(TypeError, match=r"^Empirical\.values\[0\] must be a whole number of tokens, got True$"):
        Empirical([True, 3])
    assert Empirical([1, 3]).values == (1, 3)
