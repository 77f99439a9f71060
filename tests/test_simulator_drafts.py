"""Speculative decoding in the scheduler (``budgetlab/simulator/drafts.py``, rules S1–S7), each rule
on a hand-worked run with a constant step cost (step ``i`` starts at ``t = i``).

Each expected step is ``(step, [(request, tokens, computed position the chunk starts at), ...])``,
worked out by hand from vLLM 0.33's ``Scheduler.schedule`` / ``update_from_output`` as the module
states them; ``tests/test_simulator_vs_vllm_spec.py`` checks the same rules against vLLM's own
scheduler on random workloads.
"""

from __future__ import annotations

import pytest

from budgetlab import ConstantCost, EngineConfig, Request
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.simulator import simulate
from budgetlab.workload import AcceptanceRates, MeanAcceptanceLength, with_accepted_drafts

STEP = ConstantCost(1.0)


def engine(k: int, method: str | None = "ngram", **knobs) -> EngineConfig:
    values = dict(
        max_num_batched_tokens=64,
        max_num_seqs=8,
        num_kv_blocks=1000,
        async_scheduling=False,
        enable_prefix_caching=False,
        num_speculative_tokens=k,
        speculative_method=method if k else None,
    )
    values.update(knobs)
    return EngineConfig(**values)  # type: ignore[arg-type]


def steps(result) -> list[tuple[int, list[tuple]]]:
    return [
        (round(e["start_at_s"]), [(rid, n, start) for (rid, n, _kind), start in zip(e["scheduled"], e["start"])])
        for e in result.step_log()
    ]


#: Every draft rejected (for runs whose requests carry no ``accepted_drafts``).
NOTHING_ACCEPTED = AcceptanceRates((0.0,))


def run(requests, eng, mode="reference", acceptance=None):
    return simulate(requests, engine=eng, cost=STEP, mode=mode, acceptance=acceptance)


def test_a_decode_asks_for_one_plus_its_drafts_and_rejected_drafts_roll_back():
    # S1, S3, S6: k = 3; accepted 2, 1, 0, 3, then nothing (the tuple is exhausted).
    # computed: 20 → 20 + 4 − 1 = 23 → 23 + 4 − 2 = 25 → 26 → 30; generated 1 → 4 → 6 → 7 → 11 → 12 (done).
    result = run([Request(0, 0.0, 20, 12, accepted_drafts=(2, 1, 0, 3))], engine(3))
    assert steps(result) == [
        (0, [(0, 20, 0)]),
        (1, [(0, 4, 20)]),
        (2, [(0, 4, 23)]),
        (3, [(0, 4, 25)]),
        (4, [(0, 4, 26)]),
        (5, [(0, 4, 30)]),
    ]
    row = result.requests.iloc[0]
    assert (row["ttft_s"], row["e2e_s"]) == (1.0, 6.0)
    # Without speculation the same request takes 12 steps.
    assert run([Request(0, 0.0, 20, 12)], engine(0)).requests.iloc[0]["e2e_s"] == 12.0


def test_drafts_are_cut_by_the_budget_and_only_the_scheduled_ones_are_verified():
    # S3: k = 5, budget 8. Step 1: request 0 takes 1 + 5, request 1 the 2 left (1 + 1 draft),
    # so its verification accepts min(5, 1) = 1.
    requests = [Request(i, 0.0, 4, 10, accepted_drafts=(5, 5, 5)) for i in range(2)]
    result = run(requests, engine(5, max_num_batched_tokens=8, max_num_seqs=2))
    assert steps(result) == [
        (0, [(0, 4, 0), (1, 4, 0)]),
        (1, [(0, 6, 4), (1, 2, 4)]),
        (2, [(0, 6, 10), (1, 2, 6)]),
        (3, [(1, 6, 8)]),
    ]


def test_a_draft_model_reserves_one_input_slot_per_scheduled_request():
    # S2: draft_model (s = 1), k = 3, budget 16. Step 1: each decode takes 4 tokens and 1 slot;
    # after three the input budget left is 16 − 3 × 5 = 1 <= s, so the fourth waits a step
    # (n-gram, s = 0, schedules all four: 16 tokens).
    requests = [Request(i, 0.0, 3, 5, accepted_drafts=(3,)) for i in range(4)]
    drafted = run(requests, engine(3, "draft_model", max_num_batched_tokens=16))
    assert steps(drafted) == [
        (0, [(0, 3, 0), (1, 3, 0), (2, 3, 0), (3, 3, 0)]),
        (1, [(0, 4, 3), (1, 4, 3), (2, 4, 3)]),
        (2, [(3, 4, 3)]),
    ]
    ngram = run(requests, engine(3, "ngram", max_num_batched_tokens=16))
    assert steps(ngram)[1] == (1, [(0, 4, 3), (1, 4, 3), (2, 4, 3), (3, 4, 3)])
    assert len(steps(ngram)) == 2


def test_drafts_are_cut_at_max_model_len():
    # S3: max_model_len 12 = prompt 4 + output 8; a chunk stops at max_model_len − computed − 1.
    result = run([Request(0, 0.0, 4, 8)], engine(5, max_model_len=12), acceptance=NOTHING_ACCEPTED)
    assert steps(result) == [
        (0, [(0, 4, 0)]),
        (1, [(0, 6, 4)]),
        (2, [(0, 6, 5)]),
        (3, [(0, 5, 6)]),
        (4, [(0, 4, 7)]),
        (5, [(0, 3, 8)]),
        (6, [(0, 2, 9)]),
        (7, [(0, 1, 10)]),
    ]


def test_lookahead_slots_take_blocks_and_rejected_drafts_keep_theirs():
    # S4, blocks of 4 tokens, pool of 10. draft_model (L = 3): the prefill holds min(0 + 4 + 3) = 7
    # tokens' blocks (2); the first verification 4 + 4 + 3 = 11 (3 blocks); all rejected, computed
    # 5: the next one needs 5 + 4 + 3 = 12 (still 3); accepted 3, computed 9: 9 + 4 + 3 = 16 (4).
    # n-gram (L = 0): 4 → 1 block, 8 → 2, 9 → 3, 13 → 4.
    request = [Request(0, 0.0, 4, 7, accepted_drafts=(0, 3))]
    knobs = dict(block_size=4, num_kv_blocks=10)
    drafted = run(request, engine(3, "draft_model", **knobs))
    ngram = run(request, engine(3, "ngram", **knobs))
    assert drafted.steps["num_free_kv_blocks"].tolist() == [8, 7, 7, 6]
    assert ngram.steps["num_free_kv_blocks"].tolist() == [9, 8, 7, 6]
    assert steps(drafted) == steps(ngram) == [(0, [(0, 4, 0)]), (1, [(0, 4, 4)]), (2, [(0, 4, 5)]), (3, [(0, 4, 9)])]


def test_a_single_token_admission_is_padded_to_one_plus_k():
    # S5, prefix caching, blocks of 4, k = 2: b shares a's whole 9-token prompt, so its hit is 8
    # tokens and its chunk 1 token; a decodes in the same step, so b is padded to 3 tokens whose 2
    # drafts are placeholders (rejected: computed 8 + 3 − 2 = 9, one token, its first).
    a = Request("a", 0.0, 9, 6, prefix_id="p", prefix_tokens=9)
    b = Request("b", 1.0, 9, 3, prefix_id="p", prefix_tokens=9, accepted_drafts=(2,))
    result = run([a, b], engine(2, block_size=4, enable_prefix_caching=True))
    assert steps(result)[:3] == [
        (0, [("a", 9, 0)]),
        (1, [("a", 3, 9), ("b", 3, 8)]),
        (2, [("a", 3, 10), ("b", 3, 9)]),  # b's first verification accepts both drafts: its last 2 tokens
    ]
    assert result.requests.loc[result.requests["request_id"] == "b", "e2e_s"].item() == 2.0
    assert result.requests.loc[result.requests["request_id"] == "b", "ttft_s"].item() == 1.0


def test_the_padding_needs_a_scheduled_running_request_or_a_hit():
    # S5: a lone 1-token prompt is not padded (nothing runs, no hit).
    result = run([Request(0, 0.0, 1, 3)], engine(2))
    assert steps(result)[0] == (0, [(0, 1, 0)])


def test_a_preempted_request_loses_its_drafts():
    # S1, S4: 3 blocks of 4 tokens, k = 2 (n-gram), nothing accepted. Step 1: request 0's 1 + 2
    # tokens need a second block (slots up to 7), the last free one; request 1 then needs one too
    # and is its own victim (its block returns: 1 free). It waits (its 5 known tokens need 2
    # blocks) until request 0 finishes, then recomputes exactly its known tokens, no drafts.
    requests = [Request(0, 0.0, 4, 6), Request(1, 0.0, 4, 6)]
    result = run(requests, engine(2, block_size=4, num_kv_blocks=3), acceptance=NOTHING_ACCEPTED)
    assert steps(result) == [
        (0, [(0, 4, 0), (1, 4, 0)]),
        (1, [(0, 3, 4)]),
        (2, [(0, 3, 5)]),
        (3, [(0, 3, 6)]),
        (4, [(0, 3, 7)]),
        (5, [(0, 3, 8)]),
        (6, [(1, 5, 0)]),
        (7, [(1, 3, 5)]),
        (8, [(1, 3, 6)]),
        (9, [(1, 3, 7)]),
        (10, [(1, 3, 8)]),
    ]
    assert [list(e["preempted"]) for e in result.step_log()][:2] == [[], [1]]
    assert result.steps["num_free_kv_blocks"].tolist() == [1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0]


@pytest.mark.parametrize("mode", ["reference", "fast"])
def test_no_speculation_is_the_plain_scheduler(mode):
    requests = [Request(i, 0.1 * i, 30 + 7 * i, 9 + i, accepted_drafts=(3, 3)) for i in range(6)]
    plain = EngineConfig(max_num_batched_tokens=48, max_num_seqs=4, num_kv_blocks=40)
    result = simulate(requests, engine=plain, cost=STEP, mode=mode)
    stripped = [Request(r.request_id, r.arrival_at_s, r.prompt_tokens, r.output_tokens) for r in requests]
    assert result.requests.equals(simulate(stripped, engine=plain, cost=STEP, mode=mode).requests)


def test_pipelined_a_chunk_starts_past_the_drafts_still_in_flight():
    # S8: async scheduling plans step t before step t − 1's rejections are known: the chunk starts
    # at the true computed tokens plus those rejections (1, 2, 3, then 0), and still asks 1 + k.
    # Step 5 surely ends it (one token left), so step 6 plans nothing (S9): an empty iteration.
    request = [Request(0, 0.0, 20, 12, accepted_drafts=(2, 1, 0, 3))]
    result = run(request, engine(3, async_scheduling=True))
    assert steps(result) == [
        (0, [(0, 20, 0)]),
        (1, [(0, 4, 20)]),
        (2, [(0, 4, 24)]),
        (3, [(0, 4, 27)]),
        (4, [(0, 4, 29)]),
        (5, [(0, 4, 30)]),
        (6, []),
    ]
    assert result.requests.iloc[0]["e2e_s"] == 6.0


def test_pipelined_a_request_ended_by_accepted_drafts_runs_one_wasted_chunk():
    # S9: with 11 output tokens the 4th verification (3 accepted) ends it, which the scheduler
    # cannot know when it plans step 5: it schedules 1 + k tokens for it again (at 30 = 20 + 11 − 1),
    # computed for nothing; its blocks are freed once step 4's outputs are processed.
    request = [Request(0, 0.0, 20, 11, accepted_drafts=(2, 1, 0, 3))]
    result = run(request, engine(3, async_scheduling=True))
    assert steps(result)[4:] == [(4, [(0, 4, 29)]), (5, [(0, 4, 30)])]
    assert result.requests.iloc[0]["e2e_s"] == 5.0


def test_a_batch_counts_the_drafts_it_verifies():
    result = run([Request(0, 0.0, 20, 12, accepted_drafts=(2, 1, 0, 3))], engine(3))
    assert result.steps["num_decode_tokens"].tolist() == [0, 4, 4, 4, 4, 4]


@pytest.mark.parametrize(
    ("knobs", "needle"),
    [
        (dict(policy="decode-first"), "decode-first"),
        (dict(kv_groups=(("sliding_window", 64), "full")), "KV-cache groups"),
    ],
)
def test_what_is_not_simulated_yet_is_refused_with_the_fix(knobs, needle):
    with pytest.raises(ConfigError, match=needle):
        run([Request(0, 0.0, 4, 4)], engine(2, **knobs))


def test_eagle_with_prefix_caching_is_refused():
    with pytest.raises(ConfigError, match="enable_prefix_caching=False"):
        run([Request(0, 0.0, 4, 4)], engine(2, "eagle3", enable_prefix_caching=True))


def test_an_acceptance_model_is_drawn_as_with_accepted_drafts_draws_it():
    # The run's draws are those with_accepted_drafts stores (seeded by (seed, input position)).
    requests = [Request(i, 0.25 * i, 40 + 3 * i, 30) for i in range(12)]
    model = MeanAcceptanceLength(2.4, 3)
    drawn = run(requests, engine(3), acceptance=model)
    replayed = run(with_accepted_drafts(requests, model, 3, seed=0), engine(3))
    assert drawn.requests.equals(replayed.requests)
    assert not drawn.requests.equals(run(requests, engine(3), acceptance=AcceptanceRates((0.9,))).requests)


def test_without_acceptance_the_methods_published_one_is_drawn_and_a_draft_model_needs_its_own():
    requests = [Request(i, 0.0, 10, 20) for i in range(3)]
    published = run(requests, engine(3, "eagle3"))
    assert (
        published.requests["e2e_s"].max()
        < run(requests, engine(3, "eagle3"), acceptance=NOTHING_ACCEPTED).requests["e2e_s"].max()
    )
    with pytest.raises(ParameterError, match="acceptance="):
        run(requests, engine(3, "draft_model"))


def test_a_threshold_that_cuts_a_padded_admission_stops_as_vllm_does():
    # S5: b's hit leaves one token, padded to 1 + 2 = 3; a threshold of 2 would cut it, where vLLM
    # 0.33's schedule() fails `assert num_new_tokens == 1 + self.num_spec_tokens`.
    a = Request("a", 0.0, 9, 6, prefix_id="p", prefix_tokens=9)
    b = Request("b", 1.0, 9, 3, prefix_id="p", prefix_tokens=9)
    eng = engine(2, block_size=4, enable_prefix_caching=True, long_prefill_token_threshold=2)
    with pytest.raises(ConfigError, match="threshold"):
        run([a, b], eng, acceptance=NOTHING_ACCEPTED)
    # A threshold of 1 + k or more, or none, is fine.
    run([a, b], engine(2, block_size=4, enable_prefix_caching=True, long_prefill_token_threshold=3))
