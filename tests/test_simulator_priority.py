"""Hand-worked scenarios for ``EngineConfig(scheduling_policy="priority")``.

One test per rule of ``shared/reference/vllm-v1-prefix-async-priority.md`` section 3 (rules
32–37), each the reference's scenario rebuilt with block size 16 and ``ConstantCost(1.0)``
(step ``i`` of a busy engine starts at ``t = i``, so "@k" is ``arrival_at_s = k``). The
reference's ``N`` is vLLM's ``num_gpu_blocks``, one of which is the null block:
``num_kv_blocks = N − 1``. Steps are compared in the reference's notation, rebuilt from the
step log by :func:`rendered`: ``id:Kn@p`` is a chunk of ``n`` tokens of kind P(refill),
D(ecode) or R(ecompute) starting at computed position ``p``, ``*`` marks a chunk that samples
a token, and ``| preempted=x`` lists the step's victims. Where the reference leaves a detail
unstated (output lengths, budgets, a pool size), the comment says which value was chosen and
that it reproduces the quoted steps. Every scenario runs in every mode (they must agree
exactly).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pandas as pd
import pytest

from budgetlab import ConfigError, ConstantCost, EngineConfig, Request
from budgetlab.simulator import SimResult, simulate
from budgetlab.simulator.state import PriorityWaitingQueue
from budgetlab.workload import requests_from_frame, requests_to_frame

from sim_modes import assert_same, run_all_modes

STEP = ConstantCost(1.0)
KIND_LETTERS = {"prefill": "P", "decode": "D", "recompute": "R"}


def engine(**kwargs) -> EngineConfig:
    defaults = {
        "max_num_batched_tokens": 100,
        "max_num_seqs": 10,
        "num_kv_blocks": 10_000,
        "scheduling_policy": "priority",
        # section 3's scenarios ran on the synchronous scheduler without a prefix cache
        "enable_prefix_caching": False,
        "async_scheduling": False,
    }
    return EngineConfig(**(defaults | kwargs))


def fcfs(eng: EngineConfig) -> EngineConfig:
    return dataclasses.replace(eng, scheduling_policy="fcfs")


def rendered(result: SimResult, requests: list[Request]) -> list[str]:
    """Each step in the reference's notation, replayed from the step log."""
    prompt = {r.request_id: r.prompt_tokens for r in requests}
    computed: dict = defaultdict(int)
    generated: dict = defaultdict(int)
    lines = []
    for entry in result.step_log():
        for rid in entry["preempted"]:
            computed[rid] = 0
        chunks = []
        for rid, n, kind in entry["scheduled"]:
            position = computed[rid]
            computed[rid] += n
            samples = computed[rid] == prompt[rid] + generated[rid]
            generated[rid] += samples
            chunks.append(f"{rid}:{KIND_LETTERS[kind]}{n}@{position}{'*' if samples else ''}")
        line = " + ".join(chunks)
        if entry["preempted"]:
            line += " | preempted=" + ",".join(str(rid) for rid in entry["preempted"])
        lines.append(line)
    return lines


def admitted_order(result: SimResult) -> list:
    """Request ids in the order they were first scheduled."""
    order: list = []
    for entry in result.step_log():
        for rid, _, _ in entry["scheduled"]:
            if rid not in order:
                order.append(rid)
    return order


def first_step(result: SimResult, request_id) -> int:
    return next(i for i, e in enumerate(result.step_log()) if any(rid == request_id for rid, _, _ in e["scheduled"]))


# --------------------------------------------------------------------------------------------
# Rule 32: the waiting queue is ordered by (priority, arrival), the smallest first
# --------------------------------------------------------------------------------------------


def test_prio_order_admits_by_priority_then_arrival():
    # prio_order: budget 100, 100-token prompts blk(0), p2_early(2), p1_a(1), p0(0), p1_b(1)
    # at step 0 (listed in that order) and neg(−1) at step 1; one admission per step.
    # Output 1 each (unstated): every request is admitted, prefilled and finished in one step,
    # which reproduces "one admitted per step". blk is alone at step 0; from step 1 neg (−1)
    # is the best key, then p0, the two priority-1 requests in arrival (input) order, p2_early.
    names = [("blk", 0), ("p2_early", 2), ("p1_a", 1), ("p0", 0), ("p1_b", 1)]
    reqs = [Request(name, 0.0, 100, 1, priority) for name, priority in names] + [Request("neg", 1.0, 100, 1, -1)]
    result = run_all_modes(reqs, engine(), STEP)
    assert admitted_order(result) == ["blk", "neg", "p0", "p1_a", "p1_b", "p2_early"]
    assert rendered(result, reqs) == [f"{rid}:P100@0*" for rid in admitted_order(result)]
    # FCFS: arrival order, priorities ignored.
    assert admitted_order(run_all_modes(reqs, fcfs(engine()), STEP)) == ["blk", "p2_early", "p1_a", "p0", "p1_b", "neg"]


def test_equal_priority_and_arrival_keep_input_order():
    # The id tie-break is the input order: with one key for all, priority is FCFS.
    reqs = [Request(name, 0.0, 100, 1, 7) for name in ("c", "a", "b")]
    result = run_all_modes(reqs, engine(), STEP)
    assert admitted_order(result) == ["c", "a", "b"]
    assert_same(result, simulate(reqs, engine=fcfs(engine()), cost=STEP, mode="reference"))


# --------------------------------------------------------------------------------------------
# Rule 33: a preempted request re-enters the queue at its own key, not at the front
# --------------------------------------------------------------------------------------------


def test_prio_requeue2_preempted_request_waits_behind_a_better_priority():
    # prio_requeue2, N = 9 (8 usable blocks): lo(5) 48 @0, hi(0) 60 @1, mid(3) 70 @3.
    # Chosen: outputs hi 10, lo 8, mid 3; budget 100. Step 0: lo:P48@0* (3 blocks). Step 1:
    # lo:D1@48* (block 4) + hi:P60@0* (4 blocks, an exact fit: 0 free). hi's 5th block is due at
    # step 6 (hi:D1@64): lo (the largest key) is preempted with 54 known tokens. mid arrives at
    # 3 and waits (0, then 3 free blocks < its 5). hi finishes at step 10 (10 outputs) and frees
    # all 8 blocks: the heap's head is mid (3 < 5), admitted into 5 blocks; lo needs 4 > 3 free
    # and waits (head-of-line) until mid ends at step 13 (3 outputs).
    reqs = [Request("lo", 0.0, 48, 8, 5), Request("hi", 1.0, 60, 10, 0), Request("mid", 3.0, 70, 3, 3)]
    eng = engine(num_kv_blocks=8)
    result = run_all_modes(reqs, eng, STEP)
    steps = rendered(result, reqs)
    assert steps[6] == "hi:D1@64* | preempted=lo"
    assert steps[11] == "mid:P70@0*"
    assert result.steps["num_waiting"].iloc[11] == 1
    assert steps[12:14] == ["mid:D1@70*", "mid:D1@71*"]
    assert steps[14] == "lo:R54@0*"
    # FCFS puts lo at the front: it is admitted first at step 11 and mid waits for blocks.
    fcfs_steps = rendered(run_all_modes(reqs, fcfs(eng), STEP), reqs)
    assert fcfs_steps[6] == "lo:D1@53* | preempted=hi"


def test_priority_waiting_queue_pushes_a_requeued_request_at_its_key():
    queue = PriorityWaitingQueue([5, 0, 3, 3])
    for r in (0, 3, 2):
        queue.append(r)
    queue.appendleft(1)  # a "preempted" request: its key (0, 1) makes it the head
    assert len(queue) == 4 and queue[0] == 1
    assert [queue.popleft() for _ in range(4)] == [1, 2, 3, 0]
    assert not queue
    with pytest.raises(IndexError):
        queue[1]


# --------------------------------------------------------------------------------------------
# Rule 34: the running pass walks the running list in admission order
# --------------------------------------------------------------------------------------------


def test_prio_inversion_an_earlier_low_priority_prefill_keeps_its_budget():
    # prio_inversion, budget 512: lo(5) 2000 @0, hi(0) 300 @1. lo, admitted first, takes each
    # step's budget in the running pass; hi is first scheduled at step 3 with the 48 tokens
    # left after lo's last chunk (2000 − 3·512 = 464). Outputs (unstated): 5 and 3.
    reqs = [Request("lo", 0.0, 2000, 5, 5), Request("hi", 1.0, 300, 3, 0)]
    result = run_all_modes(reqs, engine(max_num_batched_tokens=512), STEP)
    steps = rendered(result, reqs)
    assert steps[:4] == ["lo:P512@0", "lo:P512@512", "lo:P512@1024", "lo:P464@1536* + hi:P48@0"]
    assert first_step(result, "hi") == 3


# --------------------------------------------------------------------------------------------
# Rule 35: arrivals never preempt
# --------------------------------------------------------------------------------------------


def test_prio_nopreempt_a_better_priority_arrival_waits_for_a_slot():
    # prio_nopreempt: max_num_seqs 2 held by lo1, lo2 (5), 16-token prompts @0; hi(0) 16 @2.
    # Chosen outputs: lo1 6 (prefill at step 0, decodes 1..5: finishes at 5), lo2 10, hi 2.
    # hi waits for lo1's slot and starts at step 6, exactly as under FCFS.
    reqs = [Request("lo1", 0.0, 16, 6, 5), Request("lo2", 0.0, 16, 10, 5), Request("hi", 2.0, 16, 2, 0)]
    eng = engine(max_num_seqs=2)
    result = run_all_modes(reqs, eng, STEP)
    assert result.step_log()[5]["finished"] == ["lo1"]
    assert first_step(result, "hi") == 6
    assert rendered(result, reqs)[6] == "lo2:D1@21* + hi:P16@0*"
    assert result.summary()["num_preemptions"] == 0
    assert result.step_log() == run_all_modes(reqs, fcfs(eng), STEP).step_log()


def test_prio_nopreempt_kv_a_better_priority_arrival_waits_for_blocks():
    # prio_nopreempt_kv, N = 7 (6 usable): lo(5) 64 @0, hi(0) 40 @2. Chosen: lo 6 outputs (its
    # decodes at 64..68 hold 5 blocks; it finishes at step 5), hi 2. hi needs 3 blocks and 1 is
    # free: it waits until lo finishes, then starts at step 6, exactly as under FCFS.
    reqs = [Request("lo", 0.0, 64, 6, 5), Request("hi", 2.0, 40, 2, 0)]
    eng = engine(num_kv_blocks=6)
    result = run_all_modes(reqs, eng, STEP)
    assert result.step_log()[5]["finished"] == ["lo"]
    assert rendered(result, reqs)[6] == "hi:P40@0*"
    assert result.summary()["num_preemptions"] == 0
    assert result.step_log() == run_all_modes(reqs, fcfs(eng), STEP).step_log()


# --------------------------------------------------------------------------------------------
# Rule 36: the victim is the largest (priority, arrival), wherever it is
# --------------------------------------------------------------------------------------------


def test_prio_victim_an_already_scheduled_decode_is_withdrawn():
    # prio_victim, N = 9 (8 usable): lo(5) 48 @0, hi(0) 60 @1 (the prio_requeue2 pair; outputs
    # chosen 8 and 10). At step 6 lo's decode (lo:D1@53, first in the list) is scheduled, then
    # hi:D1@64 needs a 5th block with none free: the victim is lo, already scheduled, whose
    # chunk is withdrawn. FCFS preempts the tail, hi itself, and ends the pass.
    reqs = [Request("lo", 0.0, 48, 8, 5), Request("hi", 1.0, 60, 10, 0)]
    eng = engine(num_kv_blocks=8)
    priority = run_all_modes(reqs, eng, STEP)
    assert rendered(priority, reqs)[6] == "hi:D1@64* | preempted=lo"
    assert rendered(run_all_modes(reqs, fcfs(eng), STEP), reqs)[6] == "lo:D1@53* | preempted=hi"


def test_a_withdrawn_chunk_gives_its_tokens_back_to_the_budget():
    # Constructed (not a reference scenario): budget 8, 5 usable blocks; lo(5) 8 @0, hi(0) 11
    # @1 (outputs 40), big(1) 44 @2 (output 1). Before step 8 lo holds 1 block (15 computed),
    # hi 1 (16), big 3 (33): none free. Step 8: lo:D1@15 is scheduled (budget 7 left); hi:D1@16
    # needs a 2nd block: the victim is lo, the largest key, already scheduled: its decode is
    # withdrawn and its token goes back to the budget, so big, budget-limited, takes
    # 8 − 1 (hi) = 7 tokens, not 6, within its 3rd block.
    reqs = [Request("lo", 0.0, 8, 40, 5), Request("hi", 1.0, 11, 40, 0), Request("big", 2.0, 44, 1, 1)]
    result = run_all_modes(reqs, engine(max_num_batched_tokens=8, max_num_seqs=4, num_kv_blocks=5), STEP)
    steps = rendered(result, reqs)
    assert steps[7] == "lo:D1@14* + hi:D1@15* + big:P6@27"
    assert result.steps["num_free_kv_blocks"].iloc[7] == 0
    assert steps[8] == "hi:D1@16* + big:P7@33 | preempted=lo"
    assert steps[9] == "hi:D1@17* + big:P4@40*"  # lo waits for a free block; big finishes
    assert steps[10] == "hi:D1@18* + lo:R7@0"


# --------------------------------------------------------------------------------------------
# Rule 36 / edge case 10: a request that is its own victim is dropped, the pass goes on
# --------------------------------------------------------------------------------------------


def test_prio_self_the_pass_continues_after_self_preemption():
    # prio_self, N = 8 (7 usable): lo(5) 50 @0, hi(0) 24 @1; outputs chosen 20 and 20. Step 0:
    # lo:P50@0* (4 blocks); step 1: lo:D1@50* + hi:P24@0* (2 blocks, 1 free); hi takes the last
    # block at step 10 (hi:D1@32). At step 15 lo, first in the list, needs a 5th block
    # (lo:D1@64) with none free: under priority lo is its own victim and is dropped, and the
    # pass goes on with hi; FCFS preempts the tail, hi, and lo runs.
    reqs = [Request("lo", 0.0, 50, 20, 5), Request("hi", 1.0, 24, 20, 0)]
    eng = engine(num_kv_blocks=7)
    priority = rendered(run_all_modes(reqs, eng, STEP), reqs)
    assert priority[:2] == ["lo:P50@0*", "lo:D1@50* + hi:P24@0*"]
    assert priority[15] == "hi:D1@37* | preempted=lo"
    assert rendered(run_all_modes(reqs, fcfs(eng), STEP), reqs)[15] == "lo:D1@64* | preempted=hi"


def test_the_waiting_pass_is_skipped_in_a_step_that_preempted():
    # prio_self plus x(−1) 16 @15 (output 1): at step 15 x is the best waiting request and its
    # one block would fit the 4 that lo freed, but a step that preempted admits nobody: x starts
    # at step 16, ahead of lo (key (−1, 15) < (5, 0)).
    reqs = [Request("lo", 0.0, 50, 20, 5), Request("hi", 1.0, 24, 20, 0), Request("x", 15.0, 16, 1, -1)]
    result = run_all_modes(reqs, engine(num_kv_blocks=7), STEP)
    steps = rendered(result, reqs)
    assert steps[15] == "hi:D1@37* | preempted=lo"
    assert steps[16].startswith("hi:D1@38* + x:P16@0*")


# --------------------------------------------------------------------------------------------
# Rule 37: head-of-line blocking applies to the best-priority waiting request
# --------------------------------------------------------------------------------------------


def test_prio_hol_the_best_priority_head_blocks_the_queue():
    # prio_hol, N = 11 (10 usable). Chosen to leave 4 free blocks: a(0) 80 @0 with 6 outputs
    # (5 blocks after its prefill, 6 from its first decode, finishes at step 5). lo(5) 16 and
    # hi(0) 100 arrive at step 1, lo listed first; budget 256. hi needs 7 blocks > 4 free and
    # heads the priority queue, so lo (1 block, it fits) is not tried until step 6, when both
    # are admitted. FCFS tries lo first and admits it at step 1.
    reqs = [Request("a", 0.0, 80, 6, 0), Request("lo", 1.0, 16, 2, 5), Request("hi", 1.0, 100, 2, 0)]
    eng = engine(max_num_batched_tokens=256, num_kv_blocks=10)
    result = run_all_modes(reqs, eng, STEP)
    steps = rendered(result, reqs)
    assert steps[1:6] == [f"a:D1@{80 + k}*" for k in range(5)]
    assert steps[6] == "hi:P100@0* + lo:P16@0*"
    assert first_step(run_all_modes(reqs, fcfs(eng), STEP), "lo") == 1


# --------------------------------------------------------------------------------------------
# Ties: equal (priority, arrival) break by submission order, the later-submitted is the newer
# (vLLM's arrival_time is a wall-clock stamp, so two submissions are never truly tied)
# --------------------------------------------------------------------------------------------


def test_the_victim_among_equal_keys_is_the_later_submitted_one():
    # hi(0) 8 and the tied x(5), y(5), 4-token prompts, all @0 (outputs 3), block 4, 5 usable
    # blocks. Step 0 admits hi (2 blocks), then x and y in input order (1 each): 1 block free.
    # Step 1: hi:D1@8 takes it; x:D1@4 needs a 2nd block with none free. The victim is the
    # largest (priority, arrival, input order): y, submitted after x (not reached yet, it
    # leaves the list), and x takes y's block. vLLM's max over equal keys would pick x, the
    # first in the list, but its stamps differ and y's is later. Listing y first swaps them.
    for first, second in (("x", "y"), ("y", "x")):
        reqs = [Request("hi", 0.0, 8, 3, 0), Request(first, 0.0, 4, 3, 5), Request(second, 0.0, 4, 3, 5)]
        steps = rendered(run_all_modes(reqs, engine(block_size=4, num_kv_blocks=5), STEP), reqs)
        assert steps == [
            f"hi:P8@0* + {first}:P4@0* + {second}:P4@0*",
            f"hi:D1@8* + {first}:D1@4* | preempted={second}",
            f"hi:D1@9* + {first}:D1@5*",
            f"{second}:R5@0*",
            f"{second}:D1@5*",
        ]


def test_tied_requests_preempt_the_newer_and_requeue_in_submission_order():
    # Three tied requests @0, priority 0: a, b (20-token prompts, outputs 2), c (8, output 1);
    # budget 8, threshold 4, 2 slots, block 4, 6 usable blocks, first-chunk admission
    # (scheduler_reserve_full_isl=False). a and b prefill 4 tokens a step; c waits for a slot.
    # Step 3: a needs a 4th block, none free: the victim is b (submitted after a), not a (the
    # first of equal keys in the list, which would evict itself; before ties broke by
    # submission order the two evicted each other forever). Step 5: a's decode needs a 6th
    # block: b again. Step 6: a has finished; b (re-queued) and c wait with equal keys and b,
    # submitted first, is admitted first. With one key for all, priority is FCFS, step for step.
    reqs = [Request("a", 0.0, 20, 2), Request("b", 0.0, 20, 2), Request("c", 0.0, 8, 1)]
    eng = engine(
        max_num_batched_tokens=8,
        max_num_seqs=2,
        block_size=4,
        num_kv_blocks=6,
        long_prefill_token_threshold=4,
        scheduler_reserve_full_isl=False,
    )
    result = run_all_modes(reqs, eng, STEP)
    steps = rendered(result, reqs)
    assert steps[:3] == [f"a:P4@{k}* + b:P4@{k}*".replace("*", "") for k in (0, 4, 8)]
    assert steps[3:7] == [
        "a:P4@12 | preempted=b",
        "a:P4@16* + b:R4@0",
        "a:D1@20* | preempted=b",
        "b:R4@0 + c:P4@0",
    ]
    assert result.requests["finished_at_s"].notna().all()
    assert_same(result, run_all_modes(reqs, fcfs(eng), STEP))


# --------------------------------------------------------------------------------------------
# Fast mode: decode-only jumps under the priority policy
# --------------------------------------------------------------------------------------------


def test_fast_mode_jumps_decode_runs_with_priority():
    # Eight requests of 20 + 300 tokens at step 0 with mixed priorities: after the prefills
    # every step is a decode-only step, jumped in fast mode exactly as under FCFS.
    reqs = [Request(i, 0.0, 20, 300, i % 3 - 1) for i in range(8)]
    eng = engine(max_num_batched_tokens=256, num_kv_blocks=400)
    result = run_all_modes(reqs, eng, STEP)
    fast = simulate(reqs, engine=eng, cost=STEP, mode="fast")
    assert fast.num_records == 16  # each request: its prefill chunk, then one decode run
    # Only the admission order at step 0 differs from FCFS (by priority): every step's counts agree.
    pd.testing.assert_frame_equal(result.steps, simulate(reqs, engine=fcfs(eng), cost=STEP).steps, check_exact=True)
    assert admitted_order(result) == [0, 3, 6, 1, 4, 7, 2, 5]


def test_a_better_priority_arrival_ends_a_decode_run_behind_a_kv_blocked_head():
    # 8 usable blocks. a(0) 64 @0 with 50 outputs holds 5 blocks from step 1 on (3 free);
    # b(1) 80 @1 needs 5: the head is blocked by KV. c(−1) 16 @10 (1 block) becomes the head
    # and fits: under priority it is admitted at step 10, in the middle of a's decode run (fast
    # mode must stop its jump there); under FCFS it waits behind b until a finishes.
    reqs = [Request("a", 0.0, 64, 50, 0), Request("b", 1.0, 80, 1, 1), Request("c", 10.0, 16, 1, -1)]
    eng = engine(num_kv_blocks=8)
    result = run_all_modes(reqs, eng, STEP)
    assert rendered(result, reqs)[10] == "a:D1@73* + c:P16@0*"
    assert simulate(reqs, engine=eng, cost=STEP, mode="fast").num_records < len(result.step_log().chunks())
    assert first_step(run_all_modes(reqs, fcfs(eng), STEP), "c") > 10


# --------------------------------------------------------------------------------------------
# Configuration and inputs
# --------------------------------------------------------------------------------------------


def test_scheduling_policy_defaults_to_fcfs_and_is_validated():
    eng = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    assert eng.scheduling_policy == "fcfs"
    with pytest.raises(ConfigError, match="scheduling_policy must be one of fcfs, priority"):
        EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, scheduling_policy="lifo")
    # Combines with the step-order option.
    both = EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, policy="decode-first", scheduling_policy="priority")
    assert (both.policy, both.scheduling_policy) == ("decode-first", "priority")


@pytest.mark.parametrize("value", [1.5, "0", True, None, 2**63])
def test_request_priority_must_be_an_int(value):
    with pytest.raises(ValueError, match="priority must be an int"):
        Request("a", 0.0, 4, 1, value)


def test_priority_is_read_from_a_dataframe_and_round_trips_through_frames():
    reqs = [Request("blk", 0.0, 100, 1, 0), Request("late", 0.0, 100, 1, 9), Request("neg", 0.0, 100, 1, -3)]
    frame = requests_to_frame(reqs)
    assert list(frame.columns) == ["request_id", "arrival_at_s", "prompt_tokens", "output_tokens", "priority"]
    assert requests_from_frame(frame) == reqs
    assert requests_from_frame(frame.assign(priority=frame["priority"].astype(float))) == reqs
    assert "priority" not in requests_to_frame([Request("a", 0.0, 4, 1)]).columns  # default: 4 columns
    eng = engine()
    assert_same(simulate(reqs, engine=eng, cost=STEP), simulate(frame, engine=eng, cost=STEP))
    assert admitted_order(simulate(frame, engine=eng, cost=STEP)) == ["neg", "blk", "late"]
    # Without the column every priority is 0: FCFS order.
    assert admitted_order(simulate(frame.drop(columns="priority"), engine=eng, cost=STEP)) == ["blk", "late", "neg"]
    for bad in (frame.assign(priority=0.5), frame.assign(priority="x"), frame.assign(priority=True)):
        with pytest.raises(ValueError, match="priority must"):
            simulate(bad, engine=eng, cost=STEP)
    assert pd.api.types.is_integer_dtype(frame["priority"])
