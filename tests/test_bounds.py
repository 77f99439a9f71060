"""Every number a user can pass has a bound that says what it is and why (issue 21 items 5, 6, 8).

Each probe of the issue is refused up front, promptly (well under a second), by a budgetlab
error that names the argument and the bound's reason, or computed without materializing
anything unbounded. The bounds themselves live in :mod:`budgetlab._checks`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import pytest

import budgetlab as bl
from budgetlab._checks import MAX_KV_BLOCKS, MAX_PROMPT_STEPS, MAX_TOKENS, MIN_TOLERANCE_FRACTION, Bound, at_most
from budgetlab.errors import BudgetlabError, ConfigError, ParameterError
from budgetlab.experiments.search import MAX_BISECTIONS, LoadProbe, bisect_bracket, check_tolerance

H100 = bl.hardware("h100-sxm")
LLAMA = bl.model("llama-3.1-8b")
IDEAL = bl.IdealCost(H100, LLAMA)
ENGINE = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64)


@contextmanager
def prompt(seconds: float = 1.0) -> Iterator[None]:
    started = time.perf_counter()
    yield
    assert time.perf_counter() - started < seconds, "the refusal was not prompt"


# --- item 5: a sub-epsilon tolerance ------------------------------------------------------------


@pytest.mark.parametrize("tolerance", [1e-17, 2.2e-16, 1e-7])
def test_a_tolerance_below_the_bound_is_refused_with_its_reason(tolerance):
    with (
        prompt(),
        pytest.raises(ParameterError, match=r"tolerance_fraction must be at least 1e-06, got .*spacing of floats"),
    ):
        check_tolerance(tolerance)


@pytest.mark.parametrize("search", ["capacity", "tune"])
def test_capacity_and_tune_refuse_a_sub_epsilon_tolerance_before_simulating(search):
    workload = bl.SyntheticWorkload.conversation_like(num_requests=50)
    slo = bl.SLO(ttft_p90_s=1.0)
    with prompt(2.0), pytest.raises(ParameterError, match="tolerance_fraction must be at least 1e-06"):
        if search == "capacity":
            bl.capacity(workload, slo=slo, engine=ENGINE, hardware=H100, model=LLAMA, tolerance_fraction=1e-17)
        else:
            bl.tune(workload, slo=slo, hardware=H100, model=LLAMA, tolerance_fraction=1e-17)


class _Threshold:
    """A probe whose SLO holds below a load: bisection on a known answer."""

    def __init__(self, capacity_per_s: float) -> None:
        self.capacity_per_s = capacity_per_s
        self.calls = 0

    def holds(self, rate_per_s: float) -> bool:
        self.calls += 1
        return rate_per_s <= self.capacity_per_s


@pytest.mark.parametrize(("lo", "hi"), [(1.0, 2.0), (5e-324, 1.7e308), (1.0, 1.0 + 4e-6)])
def test_bisection_ends_for_any_bracket_at_the_smallest_tolerance(lo, hi):
    probe = _Threshold(lo + (hi - lo) / 3 if hi / lo < 2 else math.sqrt(lo) * math.sqrt(hi) * 1.0000001)
    with prompt():
        low, high = bisect_bracket(probe, lo, hi, tolerance_fraction=MIN_TOLERANCE_FRACTION)  # type: ignore[arg-type]
    assert probe.calls <= MAX_BISECTIONS
    assert lo <= low < high <= hi and probe.holds(low) and not probe.holds(high)


def test_bisection_refuses_a_tolerance_below_the_bound_itself():
    with pytest.raises(ParameterError, match="tolerance_fraction"):
        bisect_bracket(_Threshold(1.5), 1.0, 2.0, tolerance_fraction=1e-17)  # type: ignore[arg-type]
    assert isinstance(LoadProbe, type)


# --- item 6: memory exhaustion ------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: bl.chunk_schedule(budget_tokens=2048, num_decodes=100, prompt_tokens=10**12),
        lambda: bl.ttft_s(IDEAL, budget_tokens=2048, num_decodes=100, prompt_tokens=10**12),
        lambda: bl.prompt_timeline(IDEAL, budget_tokens=2048, num_decodes=100, prompt_tokens=10**12),
        lambda: bl.longest_gap_s(IDEAL, budget_tokens=[2048, 4096], num_decodes=100, prompt_tokens=10**12),
    ],
)
def test_a_trillion_token_prompt_is_refused_naming_the_bound(call):
    with prompt(), pytest.raises(ParameterError, match=r"prompt_tokens must be at most 134,217,728 tokens \(13 times"):
        call()


def test_a_prompt_of_more_chunks_than_are_priced_is_refused_naming_a_budget_that_would_do():
    with (
        prompt(),
        pytest.raises(ParameterError, match=r"takes 100,000,000 steps; at most 1,048,576 .*A budget of 196 tokens"),
    ):
        bl.ttft_s(IDEAL, budget_tokens=101, num_decodes=100, prompt_tokens=10**8)


def test_the_longest_prompt_allowed_is_priced_in_closed_form_chunks():
    chunks = bl.chunk_schedule(budget_tokens=MAX_TOKENS.value, num_decodes=0, prompt_tokens=MAX_TOKENS.value)
    assert chunks == [MAX_TOKENS.value]
    steps = bl.chunk_schedule(budget_tokens=129, num_decodes=1, prompt_tokens=128 * int(MAX_PROMPT_STEPS.value))
    assert len(steps) == MAX_PROMPT_STEPS.value


class _LinearCost:
    """1 ms a step plus 1 us a token: the longest gap grows with the budget at every size."""

    def batch_time_s(self, batch: bl.Batch) -> float:
        return 1e-3 + 1e-6 * batch.num_tokens


def test_budget_for_longest_gap_searches_only_budgets_it_can_price():
    # budgets under num_decodes + 2 would ingest this prompt in more than 2**20 steps; the
    # target is met only by num_decodes + 1 (one token a step), which is not searched
    prompt_tokens = int(MAX_PROMPT_STEPS.value) + 1
    with prompt(60.0), pytest.raises(ParameterError, match=r"smaller budgets would ingest prompt_tokens=1,048,577"):
        bl.budget_for_longest_gap(_LinearCost(), target_s=1.0095e-3, num_decodes=8, prompt_tokens=prompt_tokens)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: bl.conversation_like(num_requests=10**8, rate_per_s=1.0), r"num_requests must be at most 10,000,000"),
        (lambda: bl.poisson_arrivals(rate_per_s=1.0, num_requests=10**8), r"num_requests must be at most 10,000,000"),
        (
            lambda: bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, num_kv_blocks=10**9),
            r"num_kv_blocks must be at most 16,777,216 blocks",
        ),
        (
            lambda: bl.HardwareSpec("x", "x", 1e15, 3e12, 1e308, "nvlink", 4e11, 1e-5),
            r"memory_bytes must be at most 17,592,186,044,416 B \(16 TiB",
        ),
        (lambda: bl.gamma_arrivals(rate_per_s=1.0, cv=1e308, num_requests=5), r"cv must be at most 1,000"),
        (lambda: bl.LogNormal(median_tokens=100.0, sigma=1e12), r"LogNormal.sigma must be at most 10"),
        (lambda: bl.Fixed(10**12), r"Fixed.tokens must be at most 134,217,728"),
    ],
)
def test_sizes_no_deployment_means_are_refused_up_front(call, match):
    with prompt(), pytest.raises((BudgetlabError, ValueError), match=match):
        call()


def test_a_kv_pool_derived_from_memory_is_bounded_too():
    tiny = bl.ModelSpec("tiny", "tiny", 1e6, 1e6, 1, 64, 1, 1, 1, 64, 1000, dtype_bytes=1)
    huge = bl.HardwareSpec("huge", "huge", 1e15, 3e12, 2.0**44, "nvlink", 4e11, 1e-5)
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, block_size=1)
    with (
        prompt(),
        pytest.raises(ConfigError, match=r"KV pool of tiny on huge \(num_kv_blocks\) must be at most 16,777,216"),
    ):
        bl.simulate([bl.Request(0, 0.0, 10, 2)], engine=engine, hardware=huge, model=tiny, cost=IDEAL)
    assert MAX_KV_BLOCKS.value == 2**24


def test_engine_config_with_no_arguments_is_vllm_serve_on_an_unnamed_gpu():
    engine = bl.EngineConfig()
    assert (engine.max_num_batched_tokens, engine.max_num_seqs) == (2048, 256)
    assert engine == bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    assert repr(engine) == "EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)"
    # vLLM's get_batch_defaults: the same numbers for any GPU under 70 GiB or an A100
    assert bl.EngineConfig.vllm_defaults(bl.hardware("a100-80gb-sxm")) == engine


# --- item 8: bad numbers outside the documented errors ------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: bl.Request(0, 0.0, 2**62, 2), r"request 0: prompt_tokens must be at most 134,217,728"),
        (
            lambda: bl.EngineConfig(max_num_batched_tokens=10**30, max_num_seqs=64),
            r"max_num_batched_tokens must be at most",
        ),
        (
            lambda: bl.chunk_schedule(budget_tokens=10**30, num_decodes=1, prompt_tokens=10),
            r"budget_tokens must be at most",
        ),
        (lambda: bl.prefill_tokens_left(budget_tokens=2**63, num_decodes=1), r"budget_tokens must be"),
        (
            lambda: bl.simulate(
                [bl.Request(0, 0.0, 10, 2), bl.Request(1, 2.0**46, 10, 2)],
                engine=bl.EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, num_kv_blocks=64),
                cost=bl.ConstantCost(duration_s=0.01),
            ),
            r"request 1 arrives 7.03687e\+13 s after the first, more than 4,294,967,296 s \(136 years",
        ),
        (lambda: bl.Request(1, 2.0**63, 10, 2), r"request 1: arrival_at_s must be at most"),
        (
            lambda: bl.requests_from_frame(
                pd.DataFrame({"arrival_at_s": [0.0], "prompt_tokens": [1e19], "output_tokens": [5]})
            ),
            r"prompt_tokens must be at most 134,217,728",
        ),
    ],
)
def test_huge_numbers_are_refused_before_any_overflow(call, match):
    with prompt(), pytest.raises((BudgetlabError, ValueError), match=match):
        call()


def test_at_most_names_the_bound_its_unit_and_why():
    with pytest.raises(ParameterError, match=r"^x must be at most 1,024 apples \(a reason\), got 2000$"):
        at_most("x", 2000, Bound(1024, "apples", "a reason"))
    at_most("x", 1024, Bound(1024, "apples", "a reason"))


@pytest.mark.parametrize("column", ["prompt_tokens", "output_tokens"])
@pytest.mark.parametrize("value", [2**27 + 1, 2**31, float(2**40)])
def test_a_frame_of_requests_is_held_to_the_token_bound_a_request_is(column, value):
    frame = pd.DataFrame(
        {"request_id": ["a", "b"], "arrival_at_s": [0.0, 1.0], "prompt_tokens": [10, 10], "output_tokens": [5, 5]}
    )
    frame[column] = [10, value]
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, num_kv_blocks=1000)
    with pytest.raises(ParameterError, match=rf"request 'b': {column} must be at most 134,217,728 tokens"):
        bl.simulate(frame, engine=engine, cost=bl.ConstantCost(0.01))
