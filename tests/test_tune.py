"""The SLO-to-knobs tuner (budgetlab.experiments.tune and .guess)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab import EngineConfig, Gate, NoBudgetMeetsTargetError, ParameterError
from budgetlab.cost import CalibratedCost, budget_for_step_time
from budgetlab.errors import CapacityAboveBoundsError, DoesNotFitError, SLOUnattainableError
from budgetlab.experiments.capacity import capacity
from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.guess import (
    BUDGET_WITHOUT_ITL_TOKENS,
    Candidate,
    FirstGuess,
    KnobRange,
    budget_candidate,
    budget_candidates,
    budget_range,
    cap_candidates,
    first_guess,
    longest_sequence_tokens,
    tile_budget,
)
from budgetlab.experiments.slo import SLO, SLOUnitWarning
from budgetlab.experiments.tune import _pick, budget_frontier, tune
from budgetlab.memory import kv_capacity
from budgetlab.simulator import simulate
from budgetlab.workload import SyntheticWorkload

HW, MODEL = "h100-sxm", "llama-3.1-8b"
SLO_SEED = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)
WORKLOAD = SyntheticWorkload.conversation_like(num_requests=300)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (2464, 2304),
        (2560, 2560),
        (1024, 1024),
        (1023, 896),
        (1000, 896),
        (256, 256),
        (255, 128),
        (128, 128),
        (127, 112),
        (100, 96),
        (16, 16),
        (15, 15),
        (1, 1),
        (100_000, 99_840),
    ],
)
def test_tile_budget_rounds_down_to_tiles(tokens, expected):
    assert tile_budget(tokens) == expected
    assert tile_budget(expected) == expected  # idempotent


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "2048"])
def test_tile_budget_refuses_non_positive_ints(bad):
    with pytest.raises(ParameterError, match="tokens"):
        tile_budget(bad)


def test_budget_for_step_time_inverts_any_cost_model(ideal):
    assert budget_for_step_time(ideal, 0.040) == 2464  # the seed: 40 ms / 16.2 µs
    numeric = budget_for_step_time(CalibratedCost.ideal(ideal.hardware, ideal.model), 0.040)
    assert abs(numeric - 2464) <= 1  # the numeric inverse agrees with the closed form
    typical = CalibratedCost.typical(ideal.hardware, ideal.model)
    n = budget_for_step_time(typical, 0.040)
    assert n < 2464  # real steps are slower
    from budgetlab.specs import Batch

    assert typical.batch_time_s(Batch(prefill_tokens=(n,), prefill_context_tokens=(0,))) <= 0.040
    assert typical.batch_time_s(Batch(prefill_tokens=(n + 1,), prefill_context_tokens=(0,))) > 0.040
    for cost in (ideal, typical):
        with pytest.raises(NoBudgetMeetsTargetError):
            budget_for_step_time(cost, 0.001)


def test_first_guess_on_the_seed_setting(h100, llama8b):
    guess = first_guess(WORKLOAD, slo=SLO_SEED, hardware=HW, model=MODEL, cost="ideal")
    assert isinstance(guess, FirstGuess)
    assert guess.step_budget_tokens == 2464
    assert guess.max_num_batched_tokens == 2304
    assert guess.itl_target_s == 0.040 and guess.itl_metric == "itl_p99_s"
    engine = EngineConfig(max_num_batched_tokens=2304, max_num_seqs=guess.max_num_seqs)
    assert guess.kv_tokens == kv_capacity(h100, llama8b, engine).num_tokens
    expected_cap = int(guess.kv_tokens // guess.mean_sequence_tokens) // 16 * 16
    assert guess.max_num_seqs == expected_cap
    assert "2,464" in guess.explanation[0] and "2,304" in guess.explanation[0]


def test_first_guess_says_when_memory_is_tight():
    comfortable = first_guess(WORKLOAD, slo=SLO_SEED, hardware=HW, model=MODEL, cost="ideal")
    assert not comfortable.memory_tight and comfortable.memory_levers is None
    assert len(comfortable.explanation) == 2
    two_gpus = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, tensor_parallel_size=2)
    tight = first_guess(WORKLOAD, slo=SLO_SEED, hardware=HW, model="llama-3.1-70b", cost="typical", engine=two_gpus)
    assert tight.memory_tight
    warning = tight.explanation[-1]
    assert "the answer is memory, sharding or replicas, not a knob" in warning
    levers = tight.memory_levers.set_index("lever")
    assert levers.loc["as configured", "kv_tokens"] == tight.kv_tokens
    gained = int(levers.loc["tensor_parallel_size 2 → 4", "kv_tokens_gained"])
    assert gained > 10 * tight.kv_tokens and f"+{gained:,} tokens" in warning
    assert "fp8 KV cache +" in warning


def test_first_guess_without_itl_limit_and_with_a_fixed_pool():
    guess = first_guess(
        WORKLOAD,
        slo=SLO(ttft_p90_s=1.0),
        hardware=HW,
        model=MODEL,
        engine=EngineConfig(max_num_batched_tokens=512, max_num_seqs=16, num_kv_blocks=1000),
    )
    assert guess.max_num_batched_tokens == BUDGET_WITHOUT_ITL_TOKENS
    assert guess.step_budget_tokens is None
    assert guess.kv_tokens == 16_000
    assert guess.max_num_seqs == int(16_000 // guess.mean_sequence_tokens)  # below 16: not rounded


def test_first_guess_cap_never_exceeds_the_budget():
    tiny_prompts = SyntheticWorkload(prompt=4, output=4, num_requests=50)
    guess = first_guess(tiny_prompts, slo=SLO(max_itl_s=0.006), hardware=HW, model=MODEL, cost="ideal")
    assert guess.max_num_batched_tokens == 256  # 6 ms / 16.2 µs = 370 -> 256
    assert guess.max_num_seqs == 256  # memory would allow far more
    assert "clipped to the budget" in guess.explanation[1]


def test_budget_candidates_are_tiles_around_the_guess():
    from budgetlab.experiments.guess import budget_candidate
    from budgetlab.experiments.tune import BUDGET_FACTORS

    assert [budget_candidate(2304, f) for f in BUDGET_FACTORS] == [1024, 1536, 1792, 2304, 2560]
    assert [budget_candidate(1536, f) for f in BUDGET_FACTORS] == [768, 1024, 1280, 1536, 1792]
    assert budget_candidate(512, 1.1) == 640  # never folded back onto the guess


def test_pick_keeps_the_guess_among_ties():
    rows = [
        {"k": 1024, "capacity_per_s": 10.0, "status": "ok"},
        {"k": 2048, "capacity_per_s": 10.1, "status": "ok"},
        {"k": 3072, "capacity_per_s": 10.3, "status": "ok"},
        {"k": 4096, "capacity_per_s": 10.2, "status": "ok"},
    ]
    # robust capacities (the lowest among a candidate and its neighbours): 10.0, 10.0, 10.1, 10.2
    assert _pick(rows, "k", 2048, 0.02) == 2048  # all within 2 %: the guess
    assert _pick(rows, "k", 1024, 0.02) == 2048  # 1,024's own 10.0 is not within 2 % of 10.3
    assert _pick(rows, "k", 1024, 0.001) == 4096  # the best robust capacity, 10.2
    failed = [*rows[:3], {"k": 4096, "capacity_per_s": 0.0, "status": "fails at every load"}]
    assert _pick(failed[3:], "k", 1024, 0.02) is None


def test_pick_never_keeps_the_cliff_edge():
    # The seed's setting before: 2,304 reached 39.1 req/s, 2,560 next to it 8.49 (its full step
    # breaks the ITL limit), and the tuner kept 2,304. Ranked by the lowest capacity among a
    # candidate and its neighbours, 1,792 (38.7, neighbours 38.7 and 39.1) wins.
    rows = [
        {"k": 1024, "capacity_per_s": 37.8, "status": "ok"},
        {"k": 1536, "capacity_per_s": 38.7, "status": "ok"},
        {"k": 1792, "capacity_per_s": 38.7, "status": "ok"},
        {"k": 2304, "capacity_per_s": 39.1, "status": "ok"},
        {"k": 2560, "capacity_per_s": 8.49, "status": "ok"},
    ]
    assert _pick(rows, "k", 2304, 0.02) == 1792
    rows[-1] = {"k": 2560, "capacity_per_s": math.nan, "status": "fails at every load"}
    assert _pick(rows, "k", 2304, 0.02) == 1792
    assert _pick(rows[:4], "k", 2304, 0.02) == 2304  # without the cliff, the best is kept


def test_pick_never_keeps_a_candidate_that_failed_where_the_best_held():
    # Within 5 % of the best, but its own search failed at 72.6 req/s, where the best held: it is
    # measurably worse, not tied. Before, the guess (8,192) was kept: a looser ITL limit
    # recommended 69.5 req/s where a tighter one had 72.6.
    rows = [
        {"k": 4096, "capacity_per_s": 72.6, "upper_per_s": 76.2, "status": "ok"},
        {"k": 8192, "capacity_per_s": 69.5, "upper_per_s": 72.6, "status": "ok"},
        {"k": 9216, "capacity_per_s": 72.6, "upper_per_s": 76.2, "status": "ok"},
    ]
    # one of the two at 72.6 (4,096: no neighbour within NEAR_RATIO; 9,216's neighbour is 8,192)
    assert _pick(rows, "k", 8192, 0.05) in (4096, 9216)
    rows[1]["upper_per_s"] = 72.7  # never seen failing at 72.6: a tie, the guess is kept
    assert _pick(rows, "k", 8192, 0.05) == 8192


@pytest.fixture(scope="module")
def seed_tune():
    # the default executor: a local process pool; the seeds' idealized cost
    return tune(WORKLOAD, slo=SLO_SEED, hardware=HW, model=MODEL, cost="ideal")


def test_tune_on_the_seed_setting_lands_below_2500(seed_tune):
    result = seed_tune
    assert 0.7 * 2464 <= result.max_num_batched_tokens <= 2464  # 1,792: 2,304 is a cliff edge
    assert result.max_num_batched_tokens % 256 == 0
    assert result.max_num_batched_tokens >= result.max_num_seqs
    assert result.first_guess.max_num_batched_tokens == 2304
    assert result.capacity_per_s == result.capacity.capacity_per_s > 0
    assert result.engine == EngineConfig(
        max_num_batched_tokens=result.max_num_batched_tokens, max_num_seqs=result.max_num_seqs
    )


def test_tune_recommendation_meets_the_slo_in_a_confirming_simulation(seed_tune, ideal):
    result = seed_tune
    for fraction in (1.0, 0.95, 0.8):
        reqs = WORKLOAD.requests(rate_per_s=fraction * result.capacity_per_s, seed=0)
        summary = simulate(reqs, engine=result.engine, cost=ideal).summary()
        assert SLO_SEED.holds(summary), (fraction, SLO_SEED.violations(summary))
    above = WORKLOAD.requests(rate_per_s=result.capacity.upper_per_s, seed=0)
    assert not SLO_SEED.holds(simulate(above, engine=result.engine, cost=ideal).summary())


def test_tune_reports_candidates_and_reasons(seed_tune):
    result = seed_tune
    table = result.candidates
    assert list(table["phase"].unique()) == ["budget", "max_num_seqs"]
    budgets = table.loc[table.phase == "budget", "max_num_batched_tokens"].tolist()
    assert budgets == sorted(budgets) and 2304 in budgets and len(budgets) >= 4
    caps = table.loc[table.phase == "max_num_seqs"]
    assert (caps["max_num_batched_tokens"] == result.max_num_batched_tokens).all()  # one knob at a time
    chosen = table[table.chosen]
    assert set(zip(chosen.max_num_batched_tokens, chosen.max_num_seqs)) == {
        (result.max_num_batched_tokens, result.max_num_seqs)
    }
    assert (chosen["capacity_per_s"] == result.capacity_per_s).all()
    # a budget above the ITL-derived one breaks the ITL limit at some load
    over = table[(table.phase == "budget") & (table.max_num_batched_tokens > 2464)]
    assert not over.empty and (over["breaks_on"] == "itl_p99_s").all()
    text = str(result)
    assert result.binding_gate in set(Gate)  # the one gate vocabulary (budgetlab.admission.Gate)
    assert "Recommendation" in text and "binds" in text and "breaks on" in text
    assert len(result.explanation) >= 7


def _one_candidate() -> dict[str, object]:
    """Keywords of a tune() that simulates only the first guess, serially (idealized cost)."""
    return dict(
        hardware=HW, model=MODEL, cost="ideal", executor=SerialExecutor(), budget_factors=(1.0,), cap_factors=(1.0,)
    )


def test_tune_same_answer_on_any_executor(seed_tune):
    serial = tune(WORKLOAD, slo=SLO_SEED, **_one_candidate())
    assert serial.max_num_batched_tokens == 2304
    guess_row = seed_tune.candidates[seed_tune.candidates.is_first_guess].iloc[0]
    assert serial.capacity_per_s == guess_row["capacity_per_s"]


def test_tune_when_nothing_meets_the_slo():
    with pytest.raises(SLOUnattainableError, match="no budget meets the SLO"):
        tune(WORKLOAD, slo=SLO(ttft_p50_s=0.005), **_one_candidate())
    with pytest.raises(NoBudgetMeetsTargetError):
        tune(WORKLOAD, slo=SLO(itl_p99_s=0.002), hardware=HW, model=MODEL)


def test_tune_when_the_slo_holds_at_every_load():
    # 20 requests never build a queue, so a loose SLO holds at every load the capacity search
    # tries. This used to be reported as "no budget meets the SLO ... loosen the SLO", the
    # opposite of what happened.
    tiny = SyntheticWorkload(prompt=100, output=10, num_requests=20)
    with pytest.raises(CapacityAboveBoundsError, match=r"holds at every load.*num_requests") as info:
        tune(tiny, slo=SLO(e2e_p99_s=500.0), progress=False, **_one_candidate())
    assert info.value.rate_per_s > 0


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (dict(slo={"itl_p99_s": 0.04}), "slo must be an SLO"),
        (dict(budget_factors=()), "budget_factors"),
        (dict(cap_factors=(1.0, -1.0)), "cap_factors"),
        (dict(cost="fast"), "unknown cost model"),
        (dict(engine="vllm"), "EngineConfig"),
    ],
)
def test_tune_argument_errors(changes, match):
    args = dict(slo=SLO_SEED, hardware=HW, model=MODEL)
    args.update(changes)
    with pytest.raises(ParameterError, match=match):
        tune(WORKLOAD, **args)


def test_tune_capacity_matches_a_direct_capacity_search(seed_tune):
    direct = capacity(WORKLOAD, slo=SLO_SEED, engine=seed_tune.engine, hardware=HW, model=MODEL, cost="ideal")
    assert direct.capacity_per_s == seed_tune.capacity_per_s


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        (
            {"cap_bound_fraction": 0.3, "budget_full_fraction": 0.2, "kv_blocked_fraction": 0.0, "num_preemptions": 0},
            Gate.SLOT,
        ),
        (
            {"cap_bound_fraction": 0.0, "budget_full_fraction": 0.2, "kv_blocked_fraction": 0.1, "num_preemptions": 0},
            Gate.BUDGET,
        ),
        (
            {"cap_bound_fraction": 0.9, "budget_full_fraction": 0.9, "kv_blocked_fraction": 0.0, "num_preemptions": 2},
            Gate.KV,
        ),  # a preemption scores the KV gate 1: it wins every tie
        (
            {
                "cap_bound_fraction": 0.04,
                "budget_full_fraction": 0.01,
                "kv_blocked_fraction": 0.0,
                "num_preemptions": 0,
            },
            Gate.NONE,
        ),  # nothing holds back 5 % of the steps
        ({"cap_bound_fraction": float("nan"), "budget_full_fraction": float("nan")}, Gate.NONE),  # no step ran
    ],
)
def test_binding_gate_by_hand(summary, expected):
    from budgetlab.experiments.tune import binding_gate

    assert binding_gate(summary) is expected


def test_tune_numbers_are_the_report_keys(seed_tune):
    numbers = seed_tune.numbers()
    assert numbers["max_num_batched_tokens"] == seed_tune.max_num_batched_tokens
    assert numbers["max_num_seqs"] == seed_tune.max_num_seqs
    assert numbers["capacity_per_s"] == seed_tune.capacity_per_s
    assert numbers["upper_per_s"] == seed_tune.capacity.upper_per_s
    assert numbers["binding_gate"] == seed_tune.binding_gate.key
    assert numbers["binding_gate_label"] == seed_tune.binding_gate.label
    assert numbers["slo"] == {"ttft_p90_s": 0.8, "itl_p99_s": 0.040}
    assert numbers["first_guess"]["max_num_batched_tokens"] == 2304
    assert numbers["first_guess"]["step_budget_tokens"] == 2464
    assert len(numbers["candidates"]) == len(seed_tune.candidates)
    assert sum(c["chosen"] for c in numbers["candidates"]) >= 1
    assert numbers["explanation"] == list(seed_tune.explanation)
    assert numbers["cost"] == "ideal" and numbers["rate_per_s"] == seed_tune.rate_per_s
    assert numbers["margin"]["rate_per_s"] == seed_tune.margin.rate_per_s
    assert len(numbers["margin"]["members"]) == len(seed_tune.margin.members)


def test_a_candidate_without_capacity_is_nan_not_zero():
    import math

    from budgetlab.experiments.capacity import CapacityOutcome
    from budgetlab.experiments.tune import _candidate_row

    guess = FirstGuess(
        max_num_batched_tokens=2304,
        max_num_seqs=256,
        step_budget_tokens=2464,
        itl_target_s=0.04,
        itl_metric="itl_p99_s",
        kv_tokens=400_000,
        mean_sequence_tokens=1500.0,
        explanation=(),
    )
    failed = CapacityOutcome(status="fails at every load", result=None, violations=(), rate_per_s=0.5)
    row = _candidate_row("budget", EngineConfig(max_num_batched_tokens=4096, max_num_seqs=256), failed, guess)
    assert math.isnan(row["capacity_per_s"]) and row["upper_per_s"] == 0.5 and not row["is_first_guess"]
    assert _pick([row], "max_num_batched_tokens", 2304, 0.02) is None  # never picked


def test_budget_frontier_by_hand():
    table = pd.DataFrame(
        {
            "max_num_batched_tokens": [2048, 512],
            "rate_per_s": [30.0, 30.0],
            "max_num_seqs": [256, 256],
            "ttft_p90_s": [0.3, 1.2],
            "itl_p99_s": [0.033, 0.009],
            "max_itl_s": [0.05, 0.02],
        }
    )
    slo = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)
    frontier = budget_frontier(table, slo=slo)
    assert frontier.max_num_batched_tokens.tolist() == [512, 2048]  # budgets increasing
    assert frontier.ttft_s.tolist() == [1.2, 0.3] and frontier.itl_s.tolist() == [0.009, 0.033]
    assert frontier.meets.tolist() == [False, True]  # 1.2 s breaks the 0.8 s TTFT limit
    assert set(frontier.ttft_metric) == {"ttft_p90_s"} and set(frontier.itl_metric) == {"itl_p99_s"}
    tightest = budget_frontier(table, slo=SLO(ttft_p90_s=0.8, max_itl_s=0.030, itl_p99_s=0.040))
    assert tightest.itl_s.tolist() == [0.02, 0.05] and set(tightest.itl_metric) == {"max_itl_s"}
    assert budget_frontier(table, slo=slo, itl_metric="max_itl_s").itl_s.tolist() == [0.02, 0.05]


def test_tune_result_shows_a_compact_summary(seed_tune):
    text, table = repr(seed_tune), seed_tune._repr_html_()
    assert text.startswith("TuneResult(") and "\n" not in text and len(text) <= 300
    assert f"{seed_tune.max_num_batched_tokens:,}" in text and "ideal cost" in text and "margin" in text
    assert table.startswith("<table") and len(table) <= 3000 and "capacity per replica" in table
    assert "latency headroom" in table and "cost model" in table and "recommended load" in table


# --------------------------------------------------------------------------------------------
# A bounded, monotone tuner whose every candidate is valid (issue 14)
# --------------------------------------------------------------------------------------------

#: A cheap setting for tune(): 120 requests, three budgets, two caps, a 5 % search (~3 s).
SMALL = SyntheticWorkload.conversation_like(num_requests=120)
SMALL_TUNE = dict(
    hardware=HW,
    model=MODEL,
    cost="ideal",
    executor=SerialExecutor(),
    progress=False,
    budget_factors=(0.5, 1.0, 1.125),
    cap_factors=(0.5, 1.0),
    tolerance_fraction=0.05,
)


def _budgets_range(high: int = 400_000) -> KnobRange:
    return KnobRange("max_num_batched_tokens", 16, high, "the floor", "the ceiling")


def test_budget_candidates_are_clamped_into_range_and_deduplicated():
    # 0.5 × 2304 = 1152 -> tile 1024; 1e6 asks for 2,304,000,000 tokens -> the largest tile in
    # range, 400,000 // 256 × 256 = 399,872; 1e-9 asks for 0 -> the floor, 16; 1.0 twice is the guess.
    found = budget_candidates(2304, (0.5, 1e6, 1e-9, 1.0, 1.0, 1e300), _budgets_range())
    assert [c.value for c in found] == [16, 1024, 2304, 399_872]
    low, half, guess, top = found
    assert low.note == "budget_factors[2] = 1e-09 asks for 0 tokens: raised to 16, the floor"
    assert half.note == "" and half.sources == ("budget_factors[0] = 0.5",)
    assert guess.note == "" and guess.sources == ("the first guess", "budget_factors[3] = 1", "budget_factors[4] = 1")
    assert top.sources == ("budget_factors[1] = 1e+06", "budget_factors[5] = 1e+300")
    assert "budget_factors[1] = 1e+06 asks for 2,304,000,000 tokens: lowered to 399,872, the ceiling" in top.note
    assert "budget_factors[5] = 1e+300 asks for 2.3e+303 tokens" in top.note
    # a product past float range saturates instead of overflowing
    assert budget_candidate(2304, 1e308) == 16_777_216


def test_a_range_whose_floor_is_not_a_tile_keeps_its_floor():
    chunked_off = KnobRange("max_num_batched_tokens", 4097, 5000, "max_model_len", "the pool")
    assert chunked_off.clamp(4200) == (4097, "")  # tile 4096 would fall below the floor
    assert chunked_off.clamp(1e9) == (4864, "lowered to 4,864, the pool")
    assert KnobRange("max_num_batched_tokens", 4097, 4100, "a", "b").top == 4100
    assert chunked_off.clamp(float("nan"))[0] == 4864


def test_cap_candidates_are_clamped_into_range():
    caps = KnobRange("max_num_seqs", 16, 2304, "the floor", "the budget")
    found = cap_candidates(272, (0.25, 1e6, 1e-9, 1.5), caps)
    assert [c.value for c in found] == [16, 64, 272, 400, 2304]  # 68 -> 64, 408 -> 400
    assert found[0].note == "cap_factors[2] = 1e-09 asks for 0 sequences: raised to 16, the floor"
    assert found[-1].note == "cap_factors[1] = 1e+06 asks for 272,000,000 sequences: lowered to 2,304, the budget"
    # a guess above the budget is the budget, without a note (the cap never exceeds the budget);
    # a factor moved there says so
    (clipped,) = cap_candidates(272, (1.0,), KnobRange("max_num_seqs", 16, 100, "f", "the budget"))
    assert clipped == Candidate(
        100,
        ("the first guess", "cap_factors[0] = 1"),
        "cap_factors[0] = 1 asks for 272 sequences: lowered to 100, the budget; "
        "the same value as the first guess: simulated once",
    )


def test_a_loose_itl_limit_starts_where_no_limit_starts(ideal):
    # Before: ITL <= 5 s gave a first guess of 307,968 tokens (5 s / 16.2 µs), whose activation
    # peak shrank the KV pool to a cap of 96, and the search never left that region (29 req/s
    # against 35 at ITL <= 40 ms in notebook 08's setting). A limit that allows more than vLLM's
    # default no longer argues for long steps: the guess is the no-limit one.
    loose = first_guess(WORKLOAD, slo=SLO(ttft_p90_s=0.8, itl_p99_s=5.0), hardware=HW, model=MODEL, cost="ideal")
    none = first_guess(WORKLOAD, slo=SLO(ttft_p90_s=0.8), hardware=HW, model=MODEL, cost="ideal")
    assert loose.step_budget_tokens == int(5.0 / ideal.per_token_s) > BUDGET_WITHOUT_ITL_TOKENS
    assert (loose.max_num_batched_tokens, loose.max_num_seqs) == (none.max_num_batched_tokens, none.max_num_seqs)
    assert loose.max_num_batched_tokens == BUDGET_WITHOUT_ITL_TOKENS
    assert "more than vLLM's API-server default of 8,192" in loose.explanation[0]
    # the guess never goes down as the limit loosens
    budgets = [
        first_guess(SMALL, slo=SLO(itl_p99_s=itl), hardware=HW, model=MODEL, cost="ideal").max_num_batched_tokens
        for itl in (0.02, 0.04, 0.1, 0.2, 5.0, 9.0)
    ]
    assert budgets == sorted(budgets) and budgets[-1] == BUDGET_WITHOUT_ITL_TOKENS


def test_a_looser_itl_limit_never_lowers_the_recommendation(seed_tune):
    # The seed's setting: ITL <= 40 ms recommends 2,304 tokens at ~39 req/s; ITL <= 5 s used to
    # recommend 307,968 tokens at ~34 req/s. Now its first guess, 8,192 tokens, alone beats it.
    loose = tune(WORKLOAD, slo=SLO(ttft_p90_s=0.8, itl_p99_s=5.0), **_one_candidate())
    assert loose.max_num_batched_tokens == BUDGET_WITHOUT_ITL_TOKENS
    assert loose.capacity_per_s >= seed_tune.capacity_per_s


def test_a_huge_itl_limit_does_not_overflow_memory():
    # Before: ITL <= 900 s asked for a 16,777,216-token budget, whose activation peak (1,887 GiB)
    # raised DoesNotFitError although the model fits. Now it is the no-limit tuner.
    with pytest.warns(SLOUnitWarning, match="itl_p99_s=0.9"):
        slo_900 = SLO(ttft_p90_s=0.8, itl_p99_s=900.0)
    guess = first_guess(SMALL, slo=slo_900, hardware=HW, model=MODEL, cost="ideal")
    assert guess.step_budget_tokens == 16_777_216 and guess.max_num_batched_tokens == BUDGET_WITHOUT_ITL_TOKENS
    huge = tune(SMALL, slo=slo_900, **SMALL_TUNE)
    none = tune(SMALL, slo=SLO(ttft_p90_s=0.8), **SMALL_TUNE)
    assert (huge.max_num_batched_tokens, huge.max_num_seqs, huge.capacity_per_s) == (
        none.max_num_batched_tokens,
        none.max_num_seqs,
        none.capacity_per_s,
    )


def test_budget_range_is_what_the_engine_can_use(h100, llama8b):
    cap = 272
    bounds = budget_range(WORKLOAD, hardware=HW, model=MODEL, max_num_seqs=cap)
    assert bounds.low == 16
    longest = longest_sequence_tokens(WORKLOAD)
    assert longest == max(r.prompt_tokens + r.output_tokens for r in WORKLOAD.requests(rate_per_s=1.0))

    def pool_tokens(budget):
        return kv_capacity(h100, llama8b, EngineConfig(max_num_batched_tokens=budget, max_num_seqs=cap)).num_tokens

    # here the pool binds: the top budget fits in its own pool, one token more does not
    assert pool_tokens(bounds.high) >= bounds.high and pool_tokens(bounds.high + 1) < bounds.high + 1
    assert pool_tokens(bounds.high) >= longest and "KV pool" in bounds.high_reason
    assert bounds.top == tile_budget(bounds.high)
    # few sequences of short requests: max_num_seqs × the longest request binds
    short = SyntheticWorkload(prompt=100, output=28, num_requests=20)
    assert budget_range(short, hardware=HW, model=MODEL, max_num_seqs=4).high == 4 * 128


def test_a_budget_vllm_refuses_is_never_a_candidate():
    # Chunked prefill off: vLLM refuses a budget below max_model_len. Before, the ITL-derived
    # guess (2,304) raised ConfigError; now the guess is raised to max_model_len, and says why.
    engine = EngineConfig(
        max_num_batched_tokens=16_384, max_num_seqs=256, enable_chunked_prefill=False, max_model_len=16_384
    )
    guess = first_guess(WORKLOAD, slo=SLO_SEED, hardware=HW, model=MODEL, cost="ideal", engine=engine)
    assert guess.max_num_batched_tokens == 16_384
    assert "raised to 16,384, vLLM's floor with chunked prefill off" in guess.explanation[0]
    found = budget_candidates(guess.max_num_batched_tokens, (0.5, 1.0, 1.125), guess.budget_range)
    assert all(guess.budget_range.low <= c.value <= guess.budget_range.high for c in found)
    assert found[0].value == 16_384 and "raised to 16,384" in found[0].note  # 0.5 × 16,384


def test_does_not_fit_only_when_no_candidate_fits():
    with pytest.raises(DoesNotFitError, match="does not fit"):
        # 141 GB of weights on one 80 GB GPU: no budget, however small, fits
        tune(WORKLOAD, slo=SLO(ttft_p90_s=0.8), hardware=HW, model="llama-3.1-70b", executor=SerialExecutor())


def test_an_extreme_factor_is_clamped_and_the_search_goes_on():
    # Before: budget_factors 1e6 asked for 2,304,000,000 tokens and DoesNotFitError aborted the
    # search; 1e-9 simulated a 1-token budget (34 s). Now both are clamped into the budget range,
    # the reasons recorded, and the rest of the search runs.
    result = tune(SMALL, slo=SLO_SEED, **{**SMALL_TUNE, "budget_factors": (1e-9, 1.0, 1e6), "cap_factors": (1e6,)})
    bounds = result.first_guess.budget_range
    table = result.candidates
    budgets = table[table.phase == "budget"]
    assert budgets.max_num_batched_tokens.tolist() == [16, 2304, bounds.top]
    assert budgets.note.str.contains("budget_factors\\[0\\] = 1e-09 asks for 0 tokens: raised to 16").tolist() == [
        True,
        False,
        False,
    ]
    assert "budget_factors[2] = 1e+06 asks for 2,304,000,000 tokens: lowered to" in budgets.note.iloc[2]
    assert (table.max_num_seqs <= table.max_num_batched_tokens).all()
    caps = table[table.phase == "max_num_seqs"]
    assert caps.max_num_seqs.max() == result.max_num_batched_tokens  # 1e6 × the cap: lowered to the budget
    assert result.max_num_batched_tokens == 2304
    text = str(result)
    assert "(clamped)" in text and "Clamped into the values of max_num_batched_tokens worth simulating" in text
    assert [c["note"] for c in result.numbers()["candidates"]] == table.note.tolist()
    clamped = int((table.note != "").sum())
    assert clamped == 3 and f"{clamped} candidates moved into the range worth simulating" in result._repr_html_()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0.0, "2", True, None])
@pytest.mark.parametrize("name", ["budget_factors", "cap_factors"])
def test_a_bad_factor_is_refused_up_front(name, bad):
    with pytest.raises(ParameterError, match=rf"{name}\[1\] must be a finite number > 0, got"):
        tune(WORKLOAD, slo=SLO_SEED, hardware=HW, model=MODEL, **{name: (1.0, bad)})


#: How a limit is loosened: by a factor, or (inf) dropped. TTFT only a little: with 120 requests
#: a TTFT limit of seconds holds at every load (no queue builds), and capacities cannot be ranked.
LOOSENINGS = [("itl_p99_s", 1.5), ("itl_p99_s", 4.0), ("itl_p99_s", 100.0), ("itl_p99_s", math.inf)]
LOOSENINGS += [("ttft_p90_s", 1.5), ("ttft_p90_s", 2.0)]


@pytest.mark.slow  # 8 s: the tuner's logic, the same at any dependency version (make test only)
@settings(max_examples=4, deadline=None)
@given(
    itl_ms=st.sampled_from([25.0, 40.0, 70.0, 100.0]),
    ttft_s=st.sampled_from([0.4, 0.5, 0.6, 0.8]),
    loosening=st.sampled_from(LOOSENINGS),
)
def test_loosening_a_limit_never_lowers_the_recommended_capacity(itl_ms, ttft_s, loosening):
    """The set of configurations that meet a looser SLO only grows, and so does what the tuner
    finds: its best candidate is at least the tighter SLO's recommendation, and its own
    recommendation too, up to the search's tolerance, within which it keeps the candidate
    nearest its guess among those the search cannot tell apart (the tie rule). All 96 examples
    of this space were checked once (tight -> loose: strictly higher or equal every time)."""
    tight = SLO(ttft_p90_s=ttft_s, itl_p99_s=itl_ms / 1e3)
    limits = dict(tight.limits)
    key, factor = loosening
    if math.isinf(factor):
        del limits[key]  # no limit at all: the loosest
    else:
        limits[key] *= factor
    loose = SLO(**limits)
    before, after = tune(SMALL, slo=tight, **SMALL_TUNE), tune(SMALL, slo=loose, **SMALL_TUNE)
    tol = SMALL_TUNE["tolerance_fraction"]
    assert after.capacity_per_s * (1.0 + tol) >= before.capacity_per_s, (tight, loose)
    assert after.candidates.capacity_per_s.max() >= before.capacity_per_s, (tight, loose)


# --------------------------------------------------------------------------------------------
# The real-engine cost by default, a margin against the neighbours, progress (issue 20)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def readme_tune():
    """The README's tuner example, exactly as printed there (the typical cost by default)."""
    import budgetlab as bl

    chat = bl.SyntheticWorkload.conversation_like(num_requests=300)
    return bl.tune(chat, slo=bl.SLO(ttft_p90_s=0.8, itl_p99_s=0.040), hardware="h100-sxm", model="llama-3.1-8b")


@pytest.mark.slow
def test_the_readme_example_holds_its_slo_under_the_typical_cost(readme_tune):
    import budgetlab as bl

    result = readme_tune
    assert result.cost == "typical" and "typical cost" in repr(result)
    assert result.margin is not None and result.margin.holds
    assert 0 < result.rate_per_s <= result.capacity_per_s
    chat = bl.SyntheticWorkload.conversation_like(num_requests=300)
    # simulated again through the public API, at the stated load and at capacity: the SLO holds
    for rate in (result.rate_per_s, result.capacity_per_s):
        run = bl.simulate(
            chat.requests(rate_per_s=rate, seed=0), engine=result.engine, cost="typical", hardware=HW, model=MODEL
        )
        assert result.slo.holds(run.summary()), (rate, result.slo.violations(run.summary()))
    # and so do the neighbours one step away, at the stated load
    members = result.margin.members
    assert members.holds.all() and len(members) >= 3 and set(members.role) >= {"recommended", "budget +1 step"}
    assert (members[[c for c in members if c.endswith("_used_fraction")]] <= 1.0).all().all()
    assert "Margin: at" in str(result)


@pytest.mark.slow
def test_the_typical_recommendation_is_not_the_idealized_one(readme_tune, seed_tune):
    # the idealized roofline's recommendation carries a fraction of its stated load on a real engine
    assert readme_tune.max_num_batched_tokens < seed_tune.max_num_batched_tokens
    real = capacity(WORKLOAD, slo=SLO_SEED, engine=seed_tune.engine, hardware=HW, model=MODEL, cost="typical")
    assert real.capacity_per_s < 0.5 * seed_tune.capacity_per_s and real.cost == "typical"


def test_the_margin_holds_for_every_neighbour_at_the_stated_load(seed_tune, ideal):
    margin = seed_tune.margin
    assert margin.holds and margin.rate_per_s <= seed_tune.capacity_per_s
    roles = set(margin.members.role)
    assert {"recommended", "budget −1 step", "budget +1 step"} <= roles
    for row in margin.members.itertuples():
        engine = EngineConfig(max_num_batched_tokens=row.max_num_batched_tokens, max_num_seqs=row.max_num_seqs)
        summary = simulate(WORKLOAD.requests(rate_per_s=margin.rate_per_s, seed=0), engine=engine, cost=ideal).summary()
        assert SLO_SEED.holds(summary), (row.role, SLO_SEED.violations(summary))
    assert 0 < margin.used_fraction() <= 1.0 and 0 < margin.used_fraction("neighbours") <= 1.0


def test_tune_reports_progress_to_a_callback():
    calls: list[tuple[int, int, str]] = []
    result = tune(SMALL, slo=SLO_SEED, **{**SMALL_TUNE, "progress": lambda *call: calls.append(call)})
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1] > 0  # from nothing to all of it
    done = [d for d, _, _ in calls]
    assert done == sorted(done) and all(d <= t for d, t, _ in calls)
    labels = {label for _, _, label in calls}
    assert {"budget search", "max_num_seqs search", "margin"} <= {lab.rsplit(": ", 1)[-1] for lab in labels}
    assert all(lab.startswith("budgetlab tune (ideal cost)") for lab in labels)
    assert result.margin is not None


def test_tune_refuses_a_progress_that_is_neither_flag_nor_callable():
    with pytest.raises(ParameterError, match="progress must be"):
        tune(SMALL, slo=SLO_SEED, **{**SMALL_TUNE, "progress": "yes"})
