"""The budget filled in vLLM's order and the seeds' scripted chunking scenario."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab import (
    Batch,
    CalibratedCost,
    ConstantCost,
    chunk_schedule,
    fill_step,
    longest_gap_s,
    prefill_tokens_left,
    prompt_steps,
    prompt_timeline,
    ttft_s,
)

SEED = {"num_decodes": 100, "prompt_tokens": 5000}


def test_seed_chunks_1948_1948_1104():
    # 2048 − 100 decodes = 1,948 per step; 5,000 = 1,948 + 1,948 + 1,104.
    assert prefill_tokens_left(budget_tokens=2048, num_decodes=100) == 1948
    assert chunk_schedule(budget_tokens=2048, **SEED) == [1948, 1948, 1104]


def test_sixty_versus_four_hundred_decoders():
    # The second seed: 60 decoders leave ~1,988; 400 leave ~1,648.
    np.testing.assert_array_equal(prefill_tokens_left(budget_tokens=2048, num_decodes=[60, 400]), [1988, 1648])
    assert prefill_tokens_left(budget_tokens=100, num_decodes=400) == 0


def test_no_budget_means_one_chunk():
    assert chunk_schedule(budget_tokens=None, **SEED) == [5000]


def test_threshold_caps_chunks():
    assert chunk_schedule(budget_tokens=2048, long_prefill_token_threshold=1000, **SEED) == [1000] * 5
    # With no decoders the prompt is the only request, and vLLM ignores the threshold.
    assert chunk_schedule(budget_tokens=2048, num_decodes=0, prompt_tokens=5000, long_prefill_token_threshold=1000) == [
        2048,
        2048,
        904,
    ]


def test_budget_must_leave_room_for_the_prompt():
    with pytest.raises(ValueError, match=r"leaves nothing for the prompt.*above 100"):
        chunk_schedule(budget_tokens=100, **SEED)
    with pytest.raises(ValueError, match="leaves nothing"):
        ttft_s(None, budget_tokens=[50, 2048], **SEED)


def test_seed_ttft_and_longest_gap(ideal):
    # With the budget: 2 × 33.24 ms (2,048-token steps) + 19.54 ms (1,204 tokens) = 86.0 ms.
    assert ttft_s(ideal, budget_tokens=2048, **SEED) == pytest.approx((2 * 2048 + 1204) * ideal.per_token_s)
    assert ttft_s(ideal, budget_tokens=2048, **SEED) == pytest.approx(86.0e-3, abs=0.1e-3)
    # Without: one 5,100-token step, 82.8 ms — and every decoder waits that long for a token.
    assert ttft_s(ideal, budget_tokens=None, **SEED) == pytest.approx(82.78e-3, abs=0.01e-3)
    assert longest_gap_s(ideal, budget_tokens=None, **SEED) == pytest.approx(82.78e-3, abs=0.01e-3)
    # With the budget the decoders' longest gap is one 2,048-token step: 33.2 ms.
    assert longest_gap_s(ideal, budget_tokens=2048, **SEED) == pytest.approx(33.24e-3, abs=0.01e-3)


def test_ttft_drops_steeply_then_flattens(ideal):
    budgets = np.array([256, 512, 1024, 2048, 4096, 8192])
    ttft = ttft_s(ideal, budget_tokens=budgets, **SEED)
    # Up to ~1,000 tokens TTFT falls by a third or more ...
    assert ttft[0] / ttft[2] > 1.6
    # ... and beyond it changes by under 10 % over an 8× range of budgets.
    assert ttft[2:].max() / ttft[2:].min() < 1.1
    assert np.all(np.diff(ttft) < 0)


def test_vectorized_matches_scalar(ideal):
    budgets = [300, 1000, 2048, 6000]
    vector = ttft_s(ideal, budget_tokens=budgets, **SEED)
    for budget, value in zip(budgets, vector):
        assert value == ttft_s(ideal, budget_tokens=budget, **SEED)
    assert isinstance(ttft_s(ideal, budget_tokens=2048, **SEED), float)


def test_non_integer_budget_rejected(ideal):
    with pytest.raises(ValueError, match="whole numbers"):
        ttft_s(ideal, budget_tokens=2048.5, **SEED)


def test_fill_step_walks_running_then_waiting():
    # A partial prefill admitted before two decoders takes its chunk at its own place.
    fill = fill_step(budget_tokens=10, running_remaining_tokens=[1, 8, 1, 1], waiting_remaining_tokens=[5, 3])
    assert fill.running_tokens == (1, 8, 1, 0)
    assert fill.admitted_tokens == ()
    assert fill.leftover_tokens == 0
    fill = fill_step(budget_tokens=10, running_remaining_tokens=[1, 1], waiting_remaining_tokens=[5, 3, 4])
    assert fill.admitted_tokens == (5, 3)
    fill = fill_step(budget_tokens=10, running_remaining_tokens=[1], waiting_remaining_tokens=[5, 3], max_num_seqs=2)
    assert fill.admitted_tokens == (5,) and fill.leftover_tokens == 4


def test_fill_step_rejects_bad_input():
    with pytest.raises(ValueError, match="budget_tokens"):
        fill_step(budget_tokens=0, running_remaining_tokens=[1])
    with pytest.raises(ValueError, match="at least 1 token"):
        fill_step(budget_tokens=10, running_remaining_tokens=[0])


remaining_lists = st.lists(st.integers(1, 3000), max_size=30)


@given(
    budget=st.integers(1, 4096),
    running=remaining_lists,
    waiting=remaining_lists,
    threshold=st.integers(0, 2000),
    max_num_seqs=st.none() | st.integers(1, 64),
)
def test_filled_step_never_exceeds_budget(budget, running, waiting, threshold, max_num_seqs):
    fill = fill_step(
        budget_tokens=budget,
        running_remaining_tokens=running,
        waiting_remaining_tokens=waiting,
        long_prefill_token_threshold=threshold,
        max_num_seqs=max_num_seqs,
    )
    assert fill.num_tokens + fill.leftover_tokens == budget
    assert all(0 <= got <= want for got, want in zip(fill.running_tokens + fill.admitted_tokens, running + waiting))
    if threshold and len(running) + len(waiting) > 1:
        assert max(fill.running_tokens + fill.admitted_tokens, default=0) <= threshold
    if max_num_seqs is not None:
        assert len(fill.admitted_tokens) <= max(0, max_num_seqs - len(running))


@given(budget=st.integers(1, 4096), num_decodes=st.integers(0, 500), waiting=remaining_lists)
def test_decodes_never_starve_while_budget_covers_them(budget, num_decodes, waiting):
    fill = fill_step(budget_tokens=budget, running_remaining_tokens=[1] * num_decodes, waiting_remaining_tokens=waiting)
    if budget >= num_decodes:
        assert fill.running_tokens == (1,) * num_decodes


@given(
    extra=st.integers(1, 10_000),
    num_decodes=st.integers(0, 400),
    prompt=st.integers(1, 20_000),
    threshold=st.integers(0, 4000),
)
def test_chunks_sum_to_prompt_and_fit_the_budget(extra, num_decodes, prompt, threshold):
    budget = num_decodes + extra
    chunks = chunk_schedule(
        budget_tokens=budget, num_decodes=num_decodes, prompt_tokens=prompt, long_prefill_token_threshold=threshold
    )
    assert sum(chunks) == prompt
    assert all(0 < chunk <= budget - num_decodes for chunk in chunks)
    assert all(chunk == chunks[0] for chunk in chunks[:-1])


@given(
    extra=st.integers(1, 10_000),
    num_decodes=st.integers(0, 400),
    prompt=st.integers(1, 20_000),
    threshold=st.integers(0, 4000),
)
def test_ttft_and_gap_add_up_the_chunk_steps(ideal, extra, num_decodes, prompt, threshold):
    budget = num_decodes + extra
    chunks = chunk_schedule(
        budget_tokens=budget, num_decodes=num_decodes, prompt_tokens=prompt, long_prefill_token_threshold=threshold
    )
    scenario = {"num_decodes": num_decodes, "prompt_tokens": prompt, "long_prefill_token_threshold": threshold}
    assert ttft_s(ideal, budget_tokens=budget, **scenario) == pytest.approx(
        sum(ideal.step_time_s(num_decodes + chunk) for chunk in chunks), rel=1e-12
    )
    assert longest_gap_s(ideal, budget_tokens=budget, **scenario) == max(
        ideal.step_time_s(num_decodes + chunk) for chunk in chunks
    )


@given(
    budgets=st.lists(st.integers(1, 10_000), min_size=2, max_size=2, unique=True).map(sorted),
    num_decodes=st.integers(0, 400),
    prompt=st.integers(1, 20_000),
)
def test_bigger_budget_longer_gap_and_no_later_first_token(ideal, budgets, num_decodes, prompt):
    budgets = np.array(budgets) + num_decodes
    scenario = {"num_decodes": num_decodes, "prompt_tokens": prompt}
    gap = longest_gap_s(ideal, budget_tokens=budgets, **scenario)
    ttft = ttft_s(ideal, budget_tokens=budgets, **scenario)
    assert gap[1] >= gap[0]
    # A bigger budget never delays the first token by more than the last chunk's rounding:
    # that chunk's step may be padded up to the weight read.
    assert ttft[1] <= ttft[0] + ideal.weight_read_s + 1e-15
    assert ttft_s(ideal, budget_tokens=None, **scenario) <= ttft[1] + ideal.weight_read_s + 1e-15


def test_prompt_steps_carry_contexts():
    steps = prompt_steps(budget_tokens=2048, num_decodes=100, prompt_tokens=5000, decode_context_tokens=1000)
    assert steps == [
        Batch(num_decodes=100, decode_context_tokens=100_000, prefill_tokens=(1948,), prefill_context_tokens=(0,)),
        Batch(num_decodes=100, decode_context_tokens=100_100, prefill_tokens=(1948,), prefill_context_tokens=(1948,)),
        Batch(num_decodes=100, decode_context_tokens=100_200, prefill_tokens=(1104,), prefill_context_tokens=(3896,)),
    ]


def test_budget_for_longest_gap_inverts_the_longest_gap(ideal):
    from budgetlab import CalibratedCost, NoBudgetMeetsTargetError, budget_for_longest_gap, budget_for_step_time

    # idealized: the longest step is the first, full one, so the step-time rule applies (2,464)
    assert budget_for_longest_gap(ideal, target_s=0.040, **SEED) == budget_for_step_time(ideal, 0.040) == 2464
    calibrated = CalibratedCost.typical(ideal.hardware, ideal.model)
    busy = dict(SEED, decode_context_tokens=1000)
    budget = budget_for_longest_gap(calibrated, target_s=0.040, **busy)
    assert longest_gap_s(calibrated, budget_tokens=budget, **busy) <= 0.040
    assert longest_gap_s(calibrated, budget_tokens=budget + 1, **busy) > 0.040
    # the decoders' KV reads make every gap step longer than a pure prefill of the same size
    assert budget < budget_for_step_time(calibrated, 0.040)
    # a target the whole prompt in one step meets: every budget does
    assert budget_for_longest_gap(ideal, target_s=1.0, **SEED) == 100 + 5000
    with pytest.raises(NoBudgetMeetsTargetError, match="no budget keeps"):
        budget_for_longest_gap(ideal, target_s=0.001, **SEED)
    with pytest.raises(ValueError, match="target_s"):
        budget_for_longest_gap(ideal, target_s=0.0, **SEED)


# --- the scenario, whole: timeline, sweep, flattening, payoff ------------------------------------------


def test_prompt_timeline_by_hand():
    # a constant 10 ms step: the prompt's three chunks end at 10, 20 and 30 ms
    timeline = prompt_timeline(ConstantCost(0.01), budget_tokens=2048, **SEED)
    assert timeline.step.tolist() == [1, 2, 3]
    assert timeline.chunk_tokens.tolist() == [1948, 1948, 1104]
    assert timeline.decode_tokens.tolist() == [100, 100, 100]
    assert timeline.unused_tokens.tolist() == [0, 0, 844]
    assert timeline.step_tokens.tolist() == [2048, 2048, 1204]
    assert timeline.start_s.tolist() == pytest.approx([0.0, 0.01, 0.02])
    assert timeline.end_s.tolist() == pytest.approx([0.01, 0.02, 0.03])
    assert timeline.max_num_batched_tokens.tolist() == [2048] * 3
    whole = prompt_timeline(ConstantCost(0.01), budget_tokens=None, **SEED)
    assert whole.chunk_tokens.tolist() == [5000] and whole.unused_tokens.tolist() == [0]
    assert whole.max_num_batched_tokens.isna().all()


def test_prompt_timeline_ends_at_the_ttft_of_the_idealized_model(ideal):
    timeline = prompt_timeline(ideal, budget_tokens=2048, **SEED)
    # 2,048 + 2,048 + 1,204 tokens at 16.2 µs each (all past the knee)
    assert timeline.step_time_s.tolist() == pytest.approx([2048 * ideal.per_token_s] * 2 + [1204 * ideal.per_token_s])
    assert timeline.end_s.iloc[-1] == ttft_s(ideal, budget_tokens=2048, **SEED)


def test_prompt_timeline_prices_steps_like_ttft_with_a_calibrated_cost(h100, llama8b):
    """LAYOUT §3.9 bug 2: the timeline once priced steps context-free (130.5 ms), not like
    ttft_s (135.9 ms), with the decoders' KV reads and the chunks' attention (GPU profile)."""
    cost = CalibratedCost.gpu_profile(h100, llama8b)
    timeline = prompt_timeline(cost, budget_tokens=2048, **SEED)
    ttft = ttft_s(cost, budget_tokens=2048, **SEED)
    assert timeline.end_s.iloc[-1] == ttft  # to the last bit
    assert round(ttft * 1e3, 1) == 135.9
    assert timeline.step_time_s.max() == longest_gap_s(cost, budget_tokens=2048, **SEED)
    busy = prompt_timeline(cost, budget_tokens=2048, decode_context_tokens=1000, **SEED)
    assert busy.end_s.iloc[-1] == ttft_s(cost, budget_tokens=2048, decode_context_tokens=1000, **SEED) > ttft


def _chunks_by_filling_steps(budget, num_decodes, prompt_tokens, threshold):
    """The chunk schedule step by step with fill_step (the closed form's reference)."""
    from budgetlab.budget import fill_step

    chunks, remaining = [], prompt_tokens
    while remaining > 0:
        queue = [remaining]
        fill = fill_step(
            budget_tokens=budget,
            running_remaining_tokens=[1] * num_decodes + ([] if not chunks else queue),
            waiting_remaining_tokens=queue if not chunks else [],
            long_prefill_token_threshold=threshold,
        )
        chunk = fill.admitted_tokens[0] if not chunks else fill.running_tokens[-1]
        chunks.append(chunk)
        remaining -= chunk
    return chunks


@settings(max_examples=150, deadline=None)
@given(
    num_decodes=st.integers(0, 300),
    extra=st.integers(1, 3000),
    prompt_tokens=st.integers(1, 20000),
    threshold=st.sampled_from([0, 1, 16, 512, 4096]),
)
def test_chunk_schedule_closed_form_equals_filling_step_by_step(num_decodes, extra, prompt_tokens, threshold):
    budget = num_decodes + extra
    expected = _chunks_by_filling_steps(budget, num_decodes, prompt_tokens, threshold)
    assert (
        chunk_schedule(
            budget_tokens=budget,
            num_decodes=num_decodes,
            prompt_tokens=prompt_tokens,
            long_prefill_token_threshold=threshold,
        )
        == expected
    )


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"budget_tokens": float("nan")}, "budget_tokens must be a whole number"),
        ({"budget_tokens": 2048.5}, "budget_tokens must be a whole number"),
        ({"budget_tokens": True}, "budget_tokens must be a whole number"),
        ({"prompt_tokens": float("inf")}, "prompt_tokens must be an int >= 1"),
        ({"num_decodes": -1}, "num_decodes must be an int >= 0"),
        ({"long_prefill_token_threshold": -5}, "long_prefill_token_threshold must be an int >= 0"),
    ],
)
def test_chunk_schedule_refuses_bad_numbers(changes, match):
    from budgetlab.errors import ParameterError

    arguments = {"budget_tokens": 2048, "num_decodes": 100, "prompt_tokens": 5000, **changes}
    with pytest.raises(ParameterError, match=match):
        chunk_schedule(**arguments)


def test_a_long_prompt_among_many_decodes_is_scheduled_at_once():
    chunks = chunk_schedule(budget_tokens=1025, num_decodes=1024, prompt_tokens=100_000)
    assert chunks == [1] * 100_000  # one token a step: 100,000 steps, computed in closed form


def test_budget_for_a_huge_target_is_capped_not_overflowed(ideal):
    from budgetlab import budget_for_step_time
    from budgetlab.cost.inverse import MAX_SEARCH_TOKENS

    assert budget_for_step_time(ideal, 1e300) == MAX_SEARCH_TOKENS


def test_blocks_and_costs_refuse_bad_arguments_with_a_message():
    from budgetlab import IdealCost, blocks_for_tokens
    from budgetlab.errors import ParameterError, UnknownNameError

    with pytest.raises(ParameterError, match="block_size must be an int >= 1"):
        blocks_for_tokens(10, 0)
    from budgetlab.catalog import hardware, model

    assert IdealCost("h100-sxm", "llama-3.1-8b") == IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))
    with pytest.raises(UnknownNameError):
        IdealCost("h100-sxn", "llama-3.1-8b")
    with pytest.raises(ParameterError):
        IdealCost(42, "llama-3.1-8b")


def test_prefill_tokens_left_refuses_what_is_not_a_whole_count():
    from budgetlab.errors import ParameterError

    # Integral floats are whole numbers: 2048.0 − 48.0 = 2,000 tokens left.
    assert prefill_tokens_left(budget_tokens=2048.0, num_decodes=48.0) == 2000
    refused = [
        ({"budget_tokens": float("nan")}, r"^budget_tokens must be whole numbers of tokens >= 1, got nan$"),
        ({"budget_tokens": -1}, r"budget_tokens must be whole numbers of tokens >= 1, got -1"),
        ({"budget_tokens": [2048, "3"]}, r"budget_tokens .* got \[2048, '3'\]"),
        ({"num_decodes": 2.5}, r"^num_decodes must be whole numbers of requests >= 0, got 2.5$"),
        ({"num_decodes": True}, r"num_decodes .* got True"),
        ({"num_decodes": None}, r"num_decodes .* got None"),
    ]
    for changes, message in refused:
        with pytest.raises(ParameterError, match=message):
            prefill_tokens_left(**{"budget_tokens": 2048, "num_decodes": 100, **changes})


def test_fill_step_refuses_bad_caps_by_name():
    from budgetlab.errors import ParameterError

    # A cap of 1 running + 1 admitted: 10 − 1 − 5 = 4 tokens left over.
    fill = fill_step(budget_tokens=10, running_remaining_tokens=[1], waiting_remaining_tokens=[5, 3], max_num_seqs=2)
    assert fill.admitted_tokens == (5,) and fill.leftover_tokens == 4
    with pytest.raises(ParameterError, match=r"^long_prefill_token_threshold must be an int >= 0 \(0 disables"):
        fill_step(budget_tokens=10, running_remaining_tokens=[1], long_prefill_token_threshold=-1)
    with pytest.raises(ParameterError, match=r"^max_num_seqs must be an int >= 1 \[requests\], or None, got 0$"):
        fill_step(budget_tokens=10, running_remaining_tokens=[1], max_num_seqs=0)
    with pytest.raises(ValueError, match=r"^waiting_remaining_tokens must be a sequence of ints"):
        fill_step(budget_tokens=10, running_remaining_tokens=[1], waiting_remaining_tokens=["3"])


def test_scenario_functions_refuse_bad_scenario_numbers_by_name(ideal):
    from budgetlab.errors import ParameterError

    for function in (ttft_s, longest_gap_s, prompt_timeline):
        with pytest.raises(ParameterError, match=r"^num_decodes must be an int >= 0 \[requests\], got inf$"):
            function(ideal, budget_tokens=2048, num_decodes=float("inf"), prompt_tokens=5000)
        with pytest.raises(ParameterError, match=r"^decode_context_tokens must be an int >= 0 \[tokens\], got 2.5$"):
            function(ideal, budget_tokens=2048, decode_context_tokens=2.5, **SEED)
    with pytest.raises(ParameterError, match=r"decode_context_tokens must be an int >= 0 \[tokens\], got None"):
        prompt_steps(budget_tokens=2048, decode_context_tokens=None, **SEED)
    # A budget that is not a number is refused by name, not read as one ("3", True).
    for bad in ("3", True, [2048, None]):
        with pytest.raises(ValueError, match=r"^budget_tokens must be whole numbers of tokens >= 1"):
            ttft_s(ideal, budget_tokens=bad, **SEED)
    # 100 decodes take one token each of a 100-token budget: nothing is left for the prompt.
    with pytest.raises(ValueError, match=r"^budget_tokens must leave room for the prompt, got 100: .*above 100"):
        ttft_s(ideal, budget_tokens=[100, 2048], **SEED)
