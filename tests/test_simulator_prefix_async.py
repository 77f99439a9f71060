"""Hand-worked scenarios for prefix caching and async (pipelined) scheduling.

Every scenario of ``shared/reference/vllm-v1-prefix-async-priority.md`` sections 1 (prefix
caching), 2 (async scheduling) and 4 (edge cases), rebuilt with block size B = 16 and
``ConstantCost(1.0)`` (step ``i`` of a busy engine starts at ``t = i``, so "@k" is
``arrival_at_s = k``; an idle engine jumps to the next arrival, so steps are looked up by their
start time with :func:`rendered_at`). ``g:S`` is ``prefix_id="g", prefix_tokens=S``; the
reference's ``N`` (vLLM's ``num_gpu_blocks``, with its null block) is ``num_kv_blocks = N − 1``.
Steps are compared in the reference's notation (:mod:`oracle_notation`): ``id:Kn@p`` is a chunk
of ``n`` tokens of kind P/D/R starting at computed position ``p`` (for an admission, the
prefix-cache hit), ``*`` a chunk that samples, ``| preempted=x`` the step's victims,
``| free=n`` / ``| run=r wait=w`` the step table right after scheduling.

Where the reference leaves a detail unstated (output lengths, budget, ``max_num_seqs``, pool
size, arrival of a helper request), the comment says which value was chosen and derives the
quoted steps from the rules by hand. Prefix scenarios run the synchronous engine
(``async_scheduling=False``) with ``enable_prefix_caching=True``; async scenarios set
``async_scheduling=True``. Every scenario runs in every mode, which must agree exactly.
"""

from __future__ import annotations

import hashlib
import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab import ConstantCost, EngineConfig, Request
from budgetlab.simulator import SimResult

from oracle_notation import rendered, rendered_at
from sim_modes import run_all_modes

STEP = ConstantCost(1.0)
BIG_POOL = 10_000


def engine(
    *,
    budget: int = 256,
    N: int | None = None,
    seqs: int = 16,
    threshold: int = 0,
    caching: bool = True,
    pipelined: bool = False,
    **kwargs,
) -> EngineConfig:
    """The reference's knobs: ``N`` is vLLM's num_gpu_blocks (None: a pool that never binds)."""
    return EngineConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        num_kv_blocks=BIG_POOL if N is None else N - 1,
        long_prefill_token_threshold=threshold,
        enable_prefix_caching=caching,
        async_scheduling=pipelined,
        **kwargs,
    )


def req(rid, at: int, prompt: int, out: int, group=None, shared: int = 0, priority: int = 0) -> Request:
    """``Request(rid, at, prompt, out)``; ``group``/``shared`` is the reference's ``g:S``."""
    return Request(rid, float(at), prompt, out, priority, prefix_id=group, prefix_tokens=shared)


def steps_of(reqs: list[Request], eng: EngineConfig, counters: tuple[str, ...] = ()) -> dict[int, str]:
    return rendered_at(run_all_modes(reqs, eng, STEP), reqs, counters=counters)


def run(reqs: list[Request], eng: EngineConfig) -> SimResult:
    return run_all_modes(reqs, eng, STEP)


def column(result: SimResult, name: str) -> dict:
    """A column of ``result.requests`` keyed by request id."""
    return dict(zip(result.requests["request_id"], result.requests[name].tolist(), strict=True))


def first_scheduled_at(result: SimResult, request_id) -> int:
    return next(
        int(e["start_at_s"]) for e in result.step_log() if any(rid == request_id for rid, _, _ in e["scheduled"])
    )


def event_step(result: SimResult, key: str, request_id) -> int:
    """Start time of the step whose ``key`` ("first_token" / "finished") lists the request."""
    return next(int(e["start_at_s"]) for e in result.step_log() if request_id in e[key])


# ============================================================================================
# 1.2 When a block enters the cache (rules 4-5, edge case 3)
# ============================================================================================


def test_same_step_chunk_a_later_admission_hits_blocks_computed_in_the_same_step():
    # same_step_chunk: budget 40; a 100 g:100 @0, b 100 g:100 @1. Outputs (unstated): 3 each.
    # Step 0: a:P40@0. Step 1: a, first in the running list, takes the whole budget (P40@40), so
    # b waits. Step 2: a:P20@80* (budget 20 left); its allocation registers every full block of
    # min(80 + 20, 100) = 100 tokens, blocks 0..5, before the forward pass. b: known 100, the
    # lookup considers floor(99/16) = 6 blocks, all cached (held by a, so free): hit 96, chunk
    # min(100 − 96, 20) = 4, which reaches its known tokens: it samples.
    reqs = [req("a", 0, 100, 3, "g", 100), req("b", 1, 100, 3, "g", 100)]
    result = run(reqs, engine(budget=40))
    steps = rendered_at(result, reqs)
    assert [steps[0], steps[1], steps[2]] == ["a:P40@0", "a:P40@40", "a:P20@80* + b:P4@96*"]
    # Identical whole prompts generate identical outputs: b's decodes line up with a's.
    assert steps[3] == "a:D1@100* + b:D1@100*"
    assert column(result, "prefix_hit_tokens") == {"a": 0, "b": 96}
    assert result.steps["num_cached_tokens"].tolist()[:3] == [0, 0, 96]
    assert event_step(result, "first_token", "b") == 2


def test_same_step_admissions_hit_each_other():
    # same_step: a 64 g:64, b 64 g:64, c 70 g:50, all @0. Budget (unstated) 256 fits all three;
    # outputs (unstated) 2. a is computed from 0 and registers blocks 0..3 at its allocation.
    # b: known 64, the lookup considers floor(63/16) = 3 blocks → hit 48, chunk 16 (the last
    # block of a fully cached prompt is recomputed). c shares min(50, 64) = 50 tokens = 3 full
    # blocks → hit 48, chunk 70 − 48 = 22.
    reqs = [req("a", 0, 64, 2, "g", 64), req("b", 0, 64, 2, "g", 64), req("c", 0, 70, 2, "g", 50)]
    result = run(reqs, engine(budget=256))
    assert rendered_at(result, reqs)[0] == "a:P64@0* + b:P16@48* + c:P22@48*"
    assert column(result, "prefix_hit_tokens") == {"a": 0, "b": 48, "c": 48}
    assert result.steps["num_cached_tokens"].iloc[0] == 96


def test_a_block_filled_by_a_decode_is_cached_one_schedule_later_when_pipelined():
    # Rule 6 (cache_timing: prompt 30, block 1 hashed at schedule(2) in sync, schedule(3)
    # pipelined), made visible with a conversation turn (constructed, not a reference run):
    # a 40 g:70 out 30 @0 generates the stream's tokens 40..69; b 70 g:70 (the next turn, out 2)
    # arrives @24, when a's decode computes position 63, the last slot of block 3. Budget 128.
    # Sync: token 63 (sampled at step 23) is known at schedule(24), so a's allocation registers
    # block 3 and b, admitted later in the step, hits 4 blocks → P6@64*. Pipelined: token 63
    # is still in flight at schedule(24) (update(23) comes after it): block 3 is registered
    # only at schedule(25), so b hits 3 blocks → P22@48*. One step later both hit 4.
    for at, sync_line, pipe_line in [
        (24, "a:D1@63* + b:P6@64*", "a:D1@63* + b:P22@48*"),
        (25, "a:D1@64* + b:P6@64*", "a:D1@64* + b:P6@64*"),
    ]:
        reqs = [req("a", 0, 40, 30, "g", 70), req("b", at, 70, 2, "g", 70)]
        assert steps_of(reqs, engine(budget=128))[at] == sync_line
        assert steps_of(reqs, engine(budget=128, pipelined=True))[at] == pipe_line


# ============================================================================================
# 1.3 Lookup for a request leaving the waiting queue (rules 7-9, edge case 1)
# ============================================================================================


def test_p1_the_hit_is_capped_at_known_minus_one_in_whole_blocks():
    # p1: a 40 g:40 @0, b 40 g:40 @5, c 50 g:35 @10, d 32 g:32 @15, full33 33 g:33 (@20,
    # chosen). Outputs (unstated) 1: each request finishes in its admission step, the engine
    # idles until the next arrival, and the finished blocks stay cached in the free queue (the
    # pool is big: nothing is evicted). a computes blocks 0..1 (tokens 0..31) of group g.
    # b: identical 40 tokens, 2 full blocks, cap floor(39/16) = 2 → P8@32*.
    # c: 35 shared tokens = 2 full blocks → P18@32*.  d: 32 shared = 2 blocks, but the cap is
    # floor(31/16) = 1 → the last block is redone: P16@16*.  full33: 33 shared → 2 full blocks,
    # cap floor(32/16) = 2 → P1@32*.
    reqs = [
        req("a", 0, 40, 1, "g", 40),
        req("b", 5, 40, 1, "g", 40),
        req("c", 10, 50, 1, "g", 35),
        req("d", 15, 32, 1, "g", 32),
        req("full33", 20, 33, 1, "g", 33),
    ]
    result = run(reqs, engine(budget=128))
    steps = rendered_at(result, reqs)
    assert steps == {0: "a:P40@0*", 5: "b:P8@32*", 10: "c:P18@32*", 15: "d:P16@16*", 20: "full33:P1@32*"}
    hits = {"a": 0, "b": 32, "c": 32, "d": 16, "full33": 32}
    assert column(result, "prefix_hit_tokens") == hits
    assert column(result, "recompute_hit_tokens") == dict.fromkeys(hits, 0)
    summary = result.summary()
    # vLLM's prefix-cache stats: hits over the tokens looked up (each request's known tokens).
    assert summary["prefix_hit_tokens"] == 112
    assert summary["prefix_query_tokens"] == 40 + 40 + 50 + 32 + 33
    assert summary["prefix_hit_rate"] == pytest.approx(112 / 195)


def test_hit_chunks_only_the_chunk_is_charged_to_the_budget():
    # hit_chunks: budget 64, threshold 40; b 300 g:150 and c 60 arrive together. Chosen to
    # cache group g first: a 150 g:150 out 1 @0, alone (threshold exempt): P64@0, P64@64,
    # P22@128* (finishes at 2). b and c @3, outputs (unstated) 2. b shares 150 tokens → 9 full
    # blocks → hit 144, chunk min(156, 40, 64) = 40; c: min(60, 40, 24 left) = 24. Step 4:
    # b (running) 40 more, c 24 more. Step 5: b 40, c's last 12 (samples).
    reqs = [req("a", 0, 150, 1, "g", 150), req("b", 3, 300, 2, "g", 150), req("c", 3, 60, 2)]
    steps = steps_of(reqs, engine(budget=64, threshold=40))
    assert [steps[k] for k in range(3)] == ["a:P64@0", "a:P64@64", "a:P22@128*"]
    assert steps[3] == "b:P40@144 + c:P24@0"
    assert steps[4] == "b:P40@184 + c:P24@24"
    assert steps[5] == "b:P40@224 + c:P12@48*"
    assert steps[6] == "b:P36@264* + c:D1@60*"


# ============================================================================================
# 1.4 What hits cost at admission; 1.5 reference counts (rules 10-14, edge case 2)
# ============================================================================================


def test_shared_running_hits_on_held_blocks_are_free_and_a_sharer_frees_only_its_own():
    # shared_running, N = 7 (6 usable): a 64 g:64 out 10 @0; b 70 g:64 @2 (out 3, chosen so it
    # finishes at step 4 as in dbg_shared_running). Budget (unstated) 128.
    # Step 0: a:P64@0* takes 4 blocks (2 free). Step 1: a:D1@64 takes a 5th (1 free). Step 2:
    # b's 4 hit blocks are held by a (cost 0): it needs ceil(70/16) − 4 = 1 ≤ 1 free → admitted,
    # P6@64*, free 0; blocks 0..3 now have two holders. b decodes at 70, 71 (steps 3, 4) and a
    # at 66, 67 within their 5th blocks. b finishes at step 4: only its private block returns,
    # so step 5 sees 1 free block (5 if the shared ones had been freed too).
    reqs = [req("a", 0, 64, 10, "g", 64), req("b", 2, 70, 3, "g", 64)]
    result = run(reqs, engine(budget=128, N=7))
    steps = rendered_at(result, reqs, counters=("free",))
    assert steps[2] == "a:D1@65* + b:P6@64* | free=0"
    assert steps[3] == "a:D1@66* + b:D1@70* | free=0"
    assert steps[4] == "a:D1@67* + b:D1@71* | free=0"
    assert steps[5] == "a:D1@68* | free=1"
    assert event_step(result, "finished", "b") == 4
    assert column(result, "prefix_hit_tokens") == {"a": 0, "b": 64}
    # Without caching b needs 5 blocks > 1 free and waits until a finishes at step 9.
    reqs_off = run(reqs, engine(budget=128, N=7, caching=False))
    assert rendered_at(reqs_off, reqs)[10] == "b:P70@0*"
    assert first_scheduled_at(reqs_off, "b") == 10
    assert column(reqs_off, "prefix_hit_tokens") == {"a": 0, "b": 0}


def test_evictable_hits_unreferenced_hits_cost_like_new_blocks():
    # evictable_hits, N = 7 (6 usable): c 20 out 8 and a 64 g:64 out 1 @0; b 70 g:64 @2 (out 2,
    # chosen). Budget 128. Step 0: c 2 blocks + a 4 blocks (free 0); a finishes: its 4 blocks
    # are free but cached. Step 2: b hits them, but they sit in the free queue: it needs
    # ceil(70/16) − 4 + 4 = 5 > 4 free → waits (as without caching) until c (decodes 1..7)
    # ends at step 7. Step 8: 6 free; b takes its 4 hits + 1 new → free 1.
    reqs = [req("c", 0, 20, 8), req("a", 0, 64, 1, "g", 64), req("b", 2, 70, 2, "g", 64)]
    result = run(reqs, engine(budget=128, N=7))
    steps = rendered_at(result, reqs, counters=("free",))
    assert steps[0] == "c:P20@0* + a:P64@0* | free=0"
    assert steps[1] == "c:D1@20* | free=4"
    assert [steps[k] for k in range(2, 8)] == [f"c:D1@{20 + k}* | free=4" for k in range(1, 7)]
    assert result.steps["num_waiting"].tolist()[2:8] == [1] * 6
    assert steps[8] == "b:P6@64* | free=1"
    assert column(result, "prefix_hit_tokens")["b"] == 64


def test_evictable_hits2_exact_fit_then_a_recompute_hits_its_own_blocks():
    # evictable_hits2: as evictable_hits with b 64 g:64 (out 3, chosen). Step 2: cap
    # floor(63/16) = 3 hits, all unreferenced: 4 − 3 + 3 = 4 ≤ 4 free, an exact fit → P16@48*
    # (its new block is the head of the free queue: a's evicted block 3; b recomputes and
    # re-registers it). Free 0. Step 3: c's decode needs no block; b's decode at 64 needs a
    # 5th with none free: b is the tail, so FCFS preempts b itself (65 known). Its 4 full
    # blocks stay cached (unreferenced): re-admission needs ceil(65/16) − 4 + 4 = 5 > 4 free
    # until c finishes at step 7. Step 8: lookup cap floor(64/16) = 4 blocks → R1@64*.
    reqs = [req("c", 0, 20, 8), req("a", 0, 64, 1, "g", 64), req("b", 2, 64, 3, "g", 64)]
    result = run(reqs, engine(budget=128, N=7))
    steps = rendered_at(result, reqs, counters=("free",))
    assert steps[2] == "c:D1@21* + b:P16@48* | free=0"
    assert steps[3] == "c:D1@22* | preempted=b | free=4"
    assert steps[8] == "b:R1@64* | free=1"
    assert steps[9] == "b:D1@65* | free=1"
    assert event_step(result, "finished", "b") == 9
    assert column(result, "prefix_hit_tokens")["b"] == 48
    assert column(result, "recompute_hit_tokens")["b"] == 64
    assert result.steps["num_cached_tokens"].tolist()[8] == 64


def _reserve_isl_requests() -> list[Request]:
    # a 64 g:64 out 1 @0 (alone, threshold exempt) caches group g's 4 blocks and finishes.
    # x 116 out 20 @1 (alone: P116@0*) holds 8 blocks, so 14 − 8 = 6 are free (4 of them a's
    # cached blocks) when b 200 g:64 (out 2) arrives @10. x's decodes at 116..127 (steps 2..13)
    # stay in 8 blocks; its decode at 128 (step 14) takes a 9th; it finishes at step 20.
    return [req("a", 0, 64, 1, "g", 64), req("x", 1, 116, 20), req("b", 10, 200, 2, "g", 64)]


def test_reserve_isl_default_checks_the_whole_known_sequence():
    # reserve_isl, N = 15 (14 usable), threshold 16, budget (unstated) 256. Default
    # reserve_full_isl: b needs ceil(200/16) − 4 + 4 = 13 > 6 free and waits until x ends at
    # step 20. Step 21: b alone (threshold exempt), a's 4 blocks still cached (x's 9th block
    # came from the head of the queue, an unused block) → P136@64*.
    reqs = _reserve_isl_requests()
    result = run(reqs, engine(budget=256, N=15, threshold=16))
    steps = rendered_at(result, reqs)
    assert steps[1] == "x:P116@0*"
    assert [steps[k] for k in range(10, 21)] == [f"x:D1@{114 + k}*" for k in range(10, 21)]
    assert steps[21] == "b:P136@64*"
    assert result.summary()["num_preemptions"] == 0


def test_reserve_isl_off_admits_on_the_chunk_and_recomputes_from_its_own_chunks():
    # reserve_full_isl=False: only the chunk must fit. Step 10: b hits a's 4 blocks
    # (unreferenced, cost 4) + 1 new for ceil((64 + 16)/16) = 5 blocks ≤ 6 free → P16@64
    # (threshold 16: x is running), free 1. Step 11: P16@80 takes the last block, free 0.
    # Step 12: x's decode fits; b's next chunk needs a block, none is free, b is the tail:
    # self-preempted. Its 6 blocks (all full, cached) go to the tail of the free queue deepest
    # first: [b5, b4, a3, a2, a1, a0]. Step 13: b could hit 6 blocks (96) but needs
    # ceil(112/16) − 6 + 6 = 7 > 6 free. Step 14: x's 9th block is the queue's head, b's block
    # 5 (evicted). x finishes at 20. Step 21: b alone, hits a's 4 + its own block 4 → 80,
    # chunk 120 (threshold exempt, budget 256) → R120@80*.
    reqs = _reserve_isl_requests()
    result = run(reqs, engine(budget=256, N=15, threshold=16, scheduler_reserve_full_isl=False))
    steps = rendered_at(result, reqs, counters=("free",))
    assert steps[10] == "x:D1@124* + b:P16@64 | free=1"
    assert steps[11] == "x:D1@125* + b:P16@80 | free=0"
    assert steps[12] == "x:D1@126* | preempted=b | free=6"
    assert steps[14] == "x:D1@128* | free=5"
    assert steps[21] == "b:R120@80* | free=1"
    assert column(result, "prefix_hit_tokens")["b"] == 64
    assert column(result, "recompute_hit_tokens")["b"] == 80


def _watermark_requests() -> list[Request]:
    # a 320 out 1 @0 fills all 20 usable blocks and finishes; b 256 out 30 @1 (alone: 16
    # blocks), its first decode (step 2, at 256) takes a 17th → 3 free; b finishes at step 30.
    # c 32 and d 16 @2, outputs (chosen) 1.
    return [req("a", 0, 320, 1), req("b", 1, 256, 30), req("c", 2, 32, 1), req("d", 2, 16, 1)]


def test_watermark_holds_back_waiting_requests_only_while_others_run():
    # watermark, N = 21, watermark 0.1 → W = floor(0.1 · 21) = 2; budget (unstated) 512.
    # Step 0: the running list is empty, so no watermark: 20 ≤ 20 free → admitted. Step 2:
    # c needs 2 + 2 = 4 > 3 free → waits; d, behind it, is not tried (head-of-line). b's 18th
    # block at step 18 is a running request's: no watermark. Step 31 (b gone): c is admitted
    # with an empty running list (W = 0), d with 1 + 2 ≤ 18 free.
    reqs = _watermark_requests()
    result = run(reqs, engine(budget=512, N=21, watermark=0.1))
    steps = rendered_at(result, reqs, counters=("free",))
    assert steps[0] == "a:P320@0* | free=0"
    assert steps[1] == "b:P256@0* | free=4"
    assert steps[2] == "b:D1@256* | free=3"
    assert result.steps["num_waiting"].iloc[2] == 2
    assert steps[18] == "b:D1@272* | free=2"
    assert steps[30] == "b:D1@284* | free=2"
    assert steps[31].startswith("c:P32@0* + d:P16@0*")
    # Watermark 0 (the default): both fit the 3 free blocks at step 2 (2 + 1, an exact fit).
    no_mark = steps_of(reqs, engine(budget=512, N=21))
    assert no_mark[2] == "b:D1@256* + c:P32@0* + d:P16@0*"


def test_watermark_n_counts_the_null_block():
    # watermark_n, N = 20 (19 usable), 0.1. Chosen: a 60 out 4 @0 holds 4 blocks (peak
    # ceil(63/16) = 4) until it finishes at step 3 → 15 free; x 224 @1 (out 1) needs 14 blocks.
    # W = floor(0.1 · 20) = 2: 14 + 2 = 16 > 15 → held back at steps 1-3 (with N − 1 = 19,
    # W would be 1 and 15 ≤ 15 would admit it). Step 4: running list empty → W = 0.
    reqs = [req("a", 0, 60, 4), req("x", 1, 224, 1)]
    steps = steps_of(reqs, engine(budget=512, N=20, watermark=0.1), counters=("free", "wait"))
    assert [steps[k] for k in (1, 2, 3)] == [f"a:D1@{59 + k}* | free=15 wait=1" for k in (1, 2, 3)]
    assert steps[4] == "x:P224@0* | free=5 wait=0"
    assert steps_of(reqs, engine(budget=512, N=20))[1] == "a:D1@60* + x:P224@0*"


# ============================================================================================
# 1.6 Free-queue order and eviction (rules 15-20, edge cases 4 and 8)
# ============================================================================================


def test_evict_tail_freed_cached_blocks_go_behind_unused_ones_deepest_first():
    # evict_tail, N = 13 (12 usable), budget (unstated) 256, outputs (unstated) 1. a 64 g:64 @0
    # takes blocks 1-4 and finishes: its 4 hashed blocks are appended to the tail, last block
    # first: queue [5..12, a3, a2, a1, a0]. x 144 @2 takes 9 blocks from the head: the 8 unused
    # ones and a3 (evicted). y 80 g:64 @4: blocks 0-2 still cached → hit 48 → P32@48*.
    reqs = [req("a", 0, 64, 1, "g", 64), req("x", 2, 144, 1), req("y", 4, 80, 1, "g", 64)]
    steps = steps_of(reqs, engine(budget=256, N=13), counters=("free",))
    assert steps == {0: "a:P64@0* | free=8", 2: "x:P144@0* | free=3", 4: "y:P32@48* | free=7"}


def test_evict_head_freed_partial_blocks_go_to_the_head():
    # evict_head, N = 7 (6 usable), budget 128, outputs 1. p 32 P:32 and a 40 @0 (p first):
    # p takes 1-2, a 3-5 (a's block 2, tokens 32..39, stays partial), 6 is unused. Both finish
    # in step 0, p released first: queue [a's partial, 6, p1, p0, a1, a0] (a partial block goes
    # to the head, hashed blocks to the tail). x 32 @4 takes the first two. q 48 P:32 @6 still
    # hits p0, p1 → P16@32*. (Had the partial block gone to the tail, x would take 6 and p1,
    # and q would hit only 16.)
    reqs = [req("p", 0, 32, 1, "P", 32), req("a", 0, 40, 1), req("x", 4, 32, 1), req("q", 6, 48, 1, "P", 32)]
    steps = steps_of(reqs, engine(budget=128, N=7))
    assert steps == {0: "p:P32@0* + a:P40@0*", 4: "x:P32@0*", 6: "q:P16@32*"}


def _lru_requests(with_r: bool) -> list[Request]:
    # All outputs 1 (each finishes in its admission step). p 32 P:32 @0 takes 1-2, q 32 Q:32
    # @1 takes 3-4; queue [5..8, p1, p0, q1, q0]. r 48 P:32 @2 hits p0, p1 (pulling them out)
    # and takes 5; r finishes: [6, 7, 8, q1, q0, r2, p1, p0]. x 96 @3 takes 6 blocks from the
    # head: 6, 7, 8, q1, q0, r2 — q's blocks, not p's; x finishes and its 6 blocks join the
    # tail: [p1, p0, x5..x0]. Without r the queue is [5..8, p1, p0, q1, q0] and x takes 5..8,
    # p1, p0: [q1, q0, x5..x0]. The probes t 48 P:32 and s 48 Q:32 come one per step, the one
    # whose chain survived first: a probe that misses takes 3 blocks from the head and so
    # evicts the surviving chain itself, which would hide it from a later probe.
    reqs = [req("p", 0, 32, 1, "P", 32), req("q", 1, 32, 1, "Q", 32)]
    if with_r:
        reqs.append(req("r", 2, 48, 1, "P", 32))
    probes = ("t", "P"), ("s", "Q")
    first, second = probes if with_r else probes[::-1]
    return [*reqs, req("x", 3, 96, 1), req(first[0], 4, 48, 1, first[1], 32), req(second[0], 5, 48, 1, second[1], 32)]


def test_lru_touch_a_hit_refreshes_a_freed_block():
    # lru_touch, pool chosen N = 9 (8 usable) and budget 128, so that x's 6 blocks reach
    # exactly into the older of the two cached chains: with r (which touched p's blocks) that
    # is q's (t hits p's 2 blocks, s hits nothing); without r, p's (s hits, t misses).
    reqs = _lru_requests(with_r=True)
    steps = steps_of(reqs, engine(budget=128, N=9), counters=("free",))
    assert steps[2] == "r:P16@32* | free=5"
    assert steps[3] == "x:P96@0* | free=2"
    assert (steps[4], steps[5]) == ("t:P16@32* | free=5", "s:P48@0* | free=5")
    reqs = _lru_requests(with_r=False)
    steps = steps_of(reqs, engine(budget=128, N=9))
    assert (steps[4], steps[5]) == ("s:P16@32*", "t:P48@0*")


def test_shared_preempt_duplicate_hashes_resolve_to_the_earliest_copy():
    # shared_preempt, N = 8 (7 usable); a and b both 64 g:64, a @0, b @1. Chosen: budget 128,
    # outputs a 45 (peak ceil(108/16) = 7 blocks), b 25.
    # Step 0: a:P64@0* (blocks 1-4). Step 1: a:D1@64 takes 5; b hits 3 blocks (cap 63) held by
    # a and recomputes block 3 into its own copy (block 6, same hash) → free 1. Step 2: b's
    # decode at 64 takes block 7 → free 0. Both decode in lockstep (b one position behind).
    # Step 16: a computes position 79: its block 4 (with generated tokens) is registered.
    # Step 17: a's decode at 80 needs a 6th block: the tail, b (80 known), is preempted: its
    # partial block 7 goes to the head, its copy of block 3 (6) to the tail; a takes 7 → free 1.
    # Step 18: b's lookup (cap 79 → 4 blocks) finds hash 3 twice; the earliest copy is a's
    # (held, free of charge), so b needs 5 − 4 = 1 ≤ 1 → R16@64*, free 0 (its own copy would
    # have cost a second block and kept it waiting). Step 19: b's decode at 80 needs a block:
    # none free, b is the tail: self-preempted (81 known). Step 20: hash 4 is now held twice,
    # a's block 4 (registered at step 16) first: 5 held hits → R1@80* (edge case 8).
    reqs = [req("a", 0, 64, 45, "g", 64), req("b", 1, 64, 25, "g", 64)]
    result = run(reqs, engine(budget=128, N=8))
    steps = rendered_at(result, reqs, counters=("free",))
    assert steps[1] == "a:D1@64* + b:P16@48* | free=1"
    assert steps[2] == "a:D1@65* + b:D1@64* | free=0"
    assert steps[16] == "a:D1@79* + b:D1@78* | free=0"
    assert steps[17] == "a:D1@80* | preempted=b | free=1"
    assert steps[18] == "a:D1@81* + b:R16@64* | free=0"
    assert steps[19] == "a:D1@82* | preempted=b | free=1"
    assert steps[20] == "a:D1@83* + b:R1@80* | free=0"
    assert event_step(result, "finished", "b") == 27
    assert column(result, "prefix_hit_tokens")["b"] == 48
    assert column(result, "recompute_hit_tokens")["b"] == 64 + 80


# ============================================================================================
# 1.7 Preemption and recompute (rules 21-22, edge case 5)
# ============================================================================================


def test_recompute_budget_a_recompute_hits_its_surviving_blocks():
    # recompute_budget: budget 64, N = 11 (10 usable); a and b 60 tokens out 60, both @0.
    # Step 0: a:P60@0* + b:P4@0; step 1: b's remaining 56 (first token). Step 20: a holds 5
    # blocks (0..79), b 5 (computed 79) → free 0. Step 21: a's decode at 80 needs a 6th: b (80
    # known) is preempted; its partial block 4 goes to the head, blocks 3..0 to the tail; a
    # takes the partial one. a's next blocks (decodes at 96, step 37; at 112, step 53) evict
    # b's blocks 3, then 2. b waits (5 blocks needed, at most 4 free) until a finishes at step
    # 59. Step 60: b hits its blocks 0-1 → R48@32* in one step; it finishes at 60 + 39 = 99.
    reqs = [req("a", 0, 60, 60), req("b", 0, 60, 60)]
    result = run(reqs, engine(budget=64, N=11))
    steps = rendered_at(result, reqs, counters=("free",))
    assert steps[0] == "a:P60@0* + b:P4@0 | free=5"
    assert steps[21] == "a:D1@80* | preempted=b | free=4"
    assert steps[37] == "a:D1@96* | free=3"
    assert steps[53] == "a:D1@112* | free=2"
    assert steps[60] == "b:R48@32* | free=5"
    assert event_step(result, "finished", "b") == 99
    assert column(result, "recompute_hit_tokens")["b"] == 32
    # Without caching: R64@0 (the budget) + R16@64*, one step later.
    off = run(reqs, engine(budget=64, N=11, caching=False))
    steps_off = rendered_at(off, reqs)
    assert (steps_off[60], steps_off[61]) == ("b:R64@0", "b:R16@64*")
    assert event_step(off, "finished", "b") == 100
    assert column(off, "recompute_hit_tokens")["b"] == 0


def test_decode_blocks_a_recompute_hits_blocks_filled_by_decodes():
    # decode_blocks: b has a 20-token prompt and re-runs as R17@48*. Chosen: budget 128,
    # N = 14 (13 usable); a 100 out 60 and b 20 out 50 @0. Step 44: b computes position 63
    # (known 64 = 20 + 44 sampled), so its block 3 is full and registered. Step 45: a's decode
    # at 144 needs a 10th block: a holds 9, b 4 → free 0 → b (65 known) is preempted; its 4
    # full blocks go to the tail deepest first, and a takes b's block 3. a finishes at step 59
    # (peak ceil(159/16) = 10 blocks, no further block). Step 60: b's cap is floor(64/16) = 4
    # blocks, blocks 0-2 survive (1-2 hold generated tokens) → R17@48*.
    reqs = [req("a", 0, 100, 60), req("b", 0, 20, 50)]
    result = run(reqs, engine(budget=128, N=14))
    steps = rendered_at(result, reqs)
    assert steps[44] == "a:D1@143* + b:D1@63*"
    assert steps[45] == "a:D1@144* | preempted=b"
    assert steps[60] == "b:R17@48*"
    assert rendered_at(run(reqs, engine(budget=128, N=14, caching=False)), reqs)[60] == "b:R65@0*"


# kv_starved (rule 22: `a_2:R209@0*` → `a_2:R81@128*`) comes from one of the random
# cmp_pc_noshare workloads, which the reference does not list: not reconstructible. Its effect
# (shorter recompute chunks on the requests' own surviving blocks) is pinned by
# recompute_budget, decode_blocks and evictable_hits2 above.


# ============================================================================================
# Rule 22 / edge case 5: requests that share nothing, no preemption → cache on == cache off
# ============================================================================================


@st.composite
def unshared_workloads(draw):
    num = draw(st.integers(1, 12))
    reqs = [
        Request(
            i,
            float(draw(st.integers(0, 12))),
            draw(st.integers(1, 120)),
            draw(st.integers(1, 40)),
            draw(st.integers(0, 2)),
        )
        for i in range(num)
    ]
    max_num_seqs = draw(st.integers(1, 8))
    eng = dict(
        max_num_batched_tokens=draw(st.integers(max(max_num_seqs, 8), 160)),
        max_num_seqs=max_num_seqs,
        num_kv_blocks=BIG_POOL,  # never binds: no preemption
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 8, 32])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
        policy=draw(st.sampled_from(["vllm-v1", "decode-first"])),
        async_scheduling=draw(st.booleans()),
    )
    return reqs, eng


@settings(max_examples=60)
@given(unshared_workloads())
def test_cache_on_or_off_schedules_unshared_requests_identically(workload):
    reqs, knobs = workload
    on = run_all_modes(reqs, EngineConfig(**knobs, enable_prefix_caching=True), STEP)
    off = run_all_modes(reqs, EngineConfig(**knobs, enable_prefix_caching=False), STEP)
    assert on.summary()["num_preemptions"] == 0
    assert on.step_log() == off.step_log()
    pd.testing.assert_frame_equal(on.steps, off.steps, check_exact=True)
    pd.testing.assert_frame_equal(on.requests, off.requests, check_exact=True)
    assert on.summary()["prefix_hit_tokens"] == 0


# ============================================================================================
# Both flags off: exactly the synchronous, cache-less simulator (as before these features)
# ============================================================================================

OLD_LOG_KEYS = ("start_at_s", "scheduled", "preempted", "first_token", "finished")
OLD_STEP_COLUMNS = (
    "start_at_s",
    "duration_s",
    "num_decode_tokens",
    "num_prefill_tokens",
    "num_running",
    "num_waiting",
    "num_free_kv_blocks",
    "num_preemptions",
)
OLD_RESULT_COLUMNS = (
    "arrival_at_s",
    "first_token_at_s",
    "finished_at_s",
    "ttft_s",
    "e2e_s",
    "mean_itl_s",
    "max_itl_s",
    "num_preemptions",
    "queue_s",
    "prompt_tokens",
    "output_tokens",
)


def old_digest(result: SimResult) -> str:
    """A digest of everything the simulator reported before prefix caching and async
    scheduling existed (the step log without ``start``, the old step and request columns)."""
    log = [[entry[key] for key in OLD_LOG_KEYS] for entry in result.step_log()]
    steps = result.steps[list(OLD_STEP_COLUMNS)].to_numpy(dtype=float).tolist()
    requests = result.requests[list(OLD_RESULT_COLUMNS)].to_numpy(dtype=float).tolist()
    return hashlib.sha256(repr((log, steps, requests)).encode()).hexdigest()[:16]


OFF_WORKLOADS = {
    # Preemptions, threshold, max_num_seqs and a tight pool.
    "mixed": (
        [Request(i, float(i // 3), 20 + 7 * i, 6 + (i * 5) % 11) for i in range(9)],
        dict(max_num_batched_tokens=48, max_num_seqs=4, num_kv_blocks=10, long_prefill_token_threshold=24),
        "930896cbd4412bd0",
    ),
    # The classic example of vllm-v1-scheduling.md.
    "classic": (
        [Request(i, 0.0, 10, 30) for i in range(100)] + [Request("big", 3.0, 5000, 5)],
        dict(max_num_batched_tokens=2048, max_num_seqs=256, num_kv_blocks=BIG_POOL),
        "9908ed6b73f4b74a",
    ),
    "priority": (
        [
            Request("lo", 0.0, 48, 8, 5),
            Request("hi", 1.0, 60, 10, 0),
            Request("mid", 3.0, 70, 3, 3),
            Request("x", 4.0, 30, 12, 1),
            Request("y", 4.0, 17, 20, 5),
        ],
        dict(max_num_batched_tokens=64, max_num_seqs=4, num_kv_blocks=12, scheduling_policy="priority"),
        "78b1c1a39f519213",
    ),
    "decode_first": (
        [Request(i, 0.5 * i, 5 + (13 * i) % 70, 1 + (7 * i) % 25) for i in range(24)],
        dict(
            max_num_batched_tokens=96,
            max_num_seqs=6,
            num_kv_blocks=20,
            long_prefill_token_threshold=32,
            policy="decode-first",
        ),
        "c3afee73ca69d015",
    ),
}


@pytest.mark.parametrize("name", sorted(OFF_WORKLOADS))
def test_both_flags_off_reproduce_the_synchronous_cacheless_simulator(name):
    # The digests were taken from the simulator before prefix caching and async scheduling
    # existed (commit ad5eadb, mode="reference" and "fast" agreeing); "mixed" also
    # spelled out below.
    reqs, knobs, digest = OFF_WORKLOADS[name]
    result = run_all_modes(reqs, EngineConfig(**knobs, enable_prefix_caching=False, async_scheduling=False), STEP)
    assert old_digest(result) == digest
    # Without a cache every chunk starts where the request's replayed computed tokens are.
    computed: dict = {}
    for entry in result.step_log():
        for rid in entry["preempted"]:
            computed[rid] = 0
        for (rid, n, _), start in zip(entry["scheduled"], entry["start"], strict=True):
            assert start == computed.get(rid, 0)
            computed[rid] = start + n
    assert result.summary()["num_forward_passes"] == len(result.step_log())
    assert result.steps["forward_pass"].all()
    # Rule 22: these requests share nothing, so without preemptions the cache changes nothing.
    if result.summary()["num_preemptions"] == 0:
        cached = run_all_modes(reqs, EngineConfig(**knobs, enable_prefix_caching=True, async_scheduling=False), STEP)
        assert old_digest(cached) == digest


def test_both_flags_off_mixed_workload_step_by_step():
    reqs, knobs, _ = OFF_WORKLOADS["mixed"]
    result = run_all_modes(reqs, EngineConfig(**knobs, enable_prefix_caching=False, async_scheduling=False), STEP)
    letters = {"prefill": "P", "decode": "D", "recompute": "R"}
    compact = []
    for entry in result.step_log():
        line = " ".join(f"{rid}:{letters[kind]}{n}" for rid, n, kind in entry["scheduled"])
        compact.append(line + (" |pre=" + ",".join(map(str, entry["preempted"])) if entry["preempted"] else ""))
    assert compact[:21] == [
        "0:P20 1:P24 2:P4",
        "0:D1 1:P3 2:P24 3:P20",
        "0:D1 1:D1 2:P6 3:P21",
        *["0:D1 1:D1 2:D1 3:D1"] * 3,
        *["1:D1 2:D1 3:D1"] * 6,
        *["2:D1 4:P24 5:P23"] * 2,
        "2:D1 4:D1 |pre=5",
        *["2:D1 4:D1"] * 3,
        *["4:D1 5:R24 6:P23"] * 2,
        "4:D1 5:R7 |pre=6",
    ]
    assert compact[28:32] == ["5:D1 6:R24", "6:R24 7:P24", "6:R14 7:P24", "6:D1 7:P21"]
    assert len(compact) == 55
    # With caching on the preempted requests recompute on their own surviving blocks (rule 22):
    # the same workload is scheduled differently.
    cached = run_all_modes(reqs, EngineConfig(**knobs, enable_prefix_caching=True, async_scheduling=False), STEP)
    assert cached.step_log() != result.step_log()
    assert sum(column(cached, "recompute_hit_tokens").values()) > 0


def test_classic_example_with_both_flags_off():
    # vllm-v1-scheduling.md: budget 2048; 100 10-token prompts @0, a 5000-token prompt @3.
    reqs, knobs, _ = OFF_WORKLOADS["classic"]
    result = run_all_modes(reqs, EngineConfig(**knobs, enable_prefix_caching=False, async_scheduling=False), STEP)
    log = result.step_log()
    assert [len(log[k]["scheduled"]) for k in range(7)] == [100, 100, 100, 101, 101, 101, 101]
    assert [log[k]["scheduled"][-1][1:] for k in (3, 4, 5)] == [(1948, "prefill"), (1948, "prefill"), (1104, "prefill")]
    assert log[5]["first_token"] == ["big"]


# ============================================================================================
# 2.2 Async: placeholder accounting (rules 25-27)
# ============================================================================================


def test_placeholders_a_decode_is_planned_before_the_previous_token_exists():
    # placeholders: prompt 20, 3 outputs (budget, unstated, 64). schedule(0): 20 tokens,
    # 1 placeholder. schedule(1) runs before update(0): the request asks for known 20 +
    # 1 placeholder − computed 20 = 1 token, a decode planned before token 1 exists. Likewise
    # schedule(2). The log files the finish under step 2, where the last token was sampled.
    reqs = [req("a", 0, 20, 3)]
    result = run(reqs, engine(budget=64, pipelined=True))
    assert rendered(result, reqs)[:3] == ["a:P20@0*", "a:D1@20*", "a:D1@21*"]
    assert event_step(result, "finished", "a") == 2
    assert column(result, "finished_at_s")["a"] == 3.0
    assert result.summary()["num_forward_passes"] == 3
    # Synchronous: the same three steps, nothing after.
    sync = run(reqs, engine(budget=64))
    assert rendered(sync, reqs) == ["a:P20@0*", "a:D1@20*", "a:D1@21*"]
    assert column(sync, "finished_at_s")["a"] == 3.0


def test_partial_prefill_chunks_add_no_placeholder():
    # Rule 27: a 40-token prompt in budget-16 chunks goes on chunk after chunk exactly as in
    # the synchronous engine (a partial chunk samples nothing, so nothing is in flight).
    reqs = [req("a", 0, 40, 2)]
    pipelined = run(reqs, engine(budget=16, pipelined=True))
    assert rendered(pipelined, reqs)[:4] == ["a:P16@0", "a:P16@16", "a:P8@32*", "a:D1@40*"]
    assert rendered(run(reqs, engine(budget=16)), reqs) == rendered(pipelined, reqs)[:4]


def test_a_pipelined_run_ends_with_an_empty_iteration():
    # Rules 26, 29-30 and the placeholders trace: after the last token is sampled at step k
    # (prompt 20, 3 outputs: k = 2), schedule(k + 1) still runs before update(k): computed
    # 22 + 2 − 1 placeholder = 23 ≥ 20 + 3, so the request (still running) gets no tokens
    # ("schedule(3): 0 tokens (skip rule)"); it is seen finished only after that iteration.
    # Nothing else can run: an iteration that schedules nothing, counted as a step (one
    # ConstantCost step) but not a forward pass. The same holds at the very end of seqs_bound
    # (step 62 after the last two finish at 61).
    reqs = [req("a", 0, 20, 3)]
    result = run(reqs, engine(budget=64, pipelined=True))
    assert rendered(result, reqs, counters=("run",)) == [
        "a:P20@0* | run=1",
        "a:D1@20* | run=1",
        "a:D1@21* | run=1",
        "run=1",
    ]
    assert result.steps["forward_pass"].tolist() == [True, True, True, False]
    assert result.steps["start_at_s"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert result.summary()["num_forward_passes"] == 3


# ============================================================================================
# 2.3 Async: what changes in the step log (rules 29-31, edge cases 6, 7, 9)
# ============================================================================================


def test_seqs_bound_slots_are_refilled_one_step_later():
    # seqs_bound: max_num_seqs 4, ten 50-token prompts, 20 outputs, all @0; budget (unstated)
    # 256 fits four 50-token prefills, pool big. Sync: the first four finish at 19 (prefill at
    # 0, decodes 1..19), the next four are admitted at 20 and finish at 39, the last two at 40.
    # Pipelined: at step 20 the four are still running, skipped (last tokens in flight): an
    # empty step with run=4 wait=6; the next four start at 21, finish at 40; step 41 is empty;
    # the last two start at 42. Both execute 60 forward passes.
    names = [f"s_{i}" for i in range(10)]
    reqs = [req(name, 0, 50, 20) for name in names]
    sync = run(reqs, engine(budget=256, seqs=4))
    sync_steps = rendered_at(sync, reqs)
    assert sync.step_log()[19]["finished"] == names[:4]
    assert sync_steps[20] == " + ".join(f"{name}:P50@0*" for name in names[4:8])
    assert sync_steps[40] == "s_8:P50@0* + s_9:P50@0*"
    assert sync.summary()["num_forward_passes"] == 60
    pipe = run(reqs, engine(budget=256, seqs=4, pipelined=True))
    pipe_steps = rendered_at(pipe, reqs, counters=("run", "wait"))
    assert pipe.step_log()[19]["finished"] == names[:4]
    assert pipe_steps[20] == "run=4 wait=6"
    assert pipe_steps[21] == " + ".join(f"{name}:P50@0*" for name in names[4:8]) + " | run=4 wait=2"
    assert pipe.step_log()[40]["finished"] == names[4:8]
    assert pipe_steps[41] == "run=4 wait=2"
    assert pipe_steps[42] == "s_8:P50@0* + s_9:P50@0* | run=2 wait=0"
    assert [event_step(pipe, "first_token", name) for name in names] == [0] * 4 + [21] * 4 + [42] * 2
    assert pipe.summary()["num_forward_passes"] == 60
    empty = pipe.steps.loc[~pipe.steps["forward_pass"], "start_at_s"].tolist()
    assert empty[:2] == [20.0, 41.0]  # (and 62, see test_a_pipelined_run_ends_with_an_empty_iteration)


@pytest.mark.parametrize("caching", [True, False])
def test_hol_blocks_come_back_one_step_later(caching):
    # hol (KV-bound): b and c start at 11 instead of 10. Chosen: N = 7 (6 usable), budget 128;
    # a 64 out 10 @0 holds 5 blocks from step 1 (decodes 64..72) and samples its last token at
    # step 9; b 40 (3 blocks) and c 16 (1 block) @1, outputs 2. b, the head, needs 3 > 1 free;
    # c, which would fit, is not tried. Sync: a's blocks are free at step 10. Pipelined: at
    # step 10 a is skipped but still holds them: nothing can run (an empty step); 11: b and c.
    reqs = [req("a", 0, 64, 10), req("b", 1, 40, 2), req("c", 1, 16, 2)]
    sync = rendered_at(run(reqs, engine(budget=128, N=7, caching=caching)), reqs, counters=("free",))
    assert sync[9] == "a:D1@72* | free=1"
    assert sync[10] == "b:P40@0* + c:P16@0* | free=2"
    pipe = rendered_at(run(reqs, engine(budget=128, N=7, caching=caching, pipelined=True)), reqs, counters=("free",))
    assert pipe[9] == "a:D1@72* | free=1"
    assert pipe[10] == "free=1"
    assert pipe[11] == "b:P40@0* + c:P16@0* | free=2"


def test_pipe_slot_a_finished_request_holds_its_slot_one_more_step():
    # pipe_slot: max_num_seqs 2. Chosen: a 20 out 10 and b 20 out 4 @0, c 20 out 2 @1, budget
    # 128. b samples its last token at step 3. Pipelined step 4: b is skipped but still holds
    # its slot (run=2) and c waits (wait=1); c starts at 5. Sync: c starts at 4.
    reqs = [req("a", 0, 20, 10), req("b", 0, 20, 4), req("c", 1, 20, 2)]
    pipe = run(reqs, engine(budget=128, seqs=2, pipelined=True))
    steps = rendered_at(pipe, reqs, counters=("run", "wait"))
    assert event_step(pipe, "finished", "b") == 3
    assert steps[3] == "a:D1@22* + b:D1@22* | run=2 wait=1"
    assert steps[4] == "a:D1@23* | run=2 wait=1"
    assert steps[5] == "a:D1@24* + c:P20@0* | run=2 wait=0"
    sync = rendered_at(run(reqs, engine(budget=128, seqs=2)), reqs, counters=("run", "wait"))
    assert sync[4] == "a:D1@23* + c:P20@0* | run=2 wait=0"


def test_pipe_threshold_a_finished_request_still_counts_for_the_exemption():
    # pipe_threshold (edge case 6): threshold 512; a 10 out 3 and big 5000 @0. Chosen: budget
    # 2048 and big out 2. a samples its last token at step 2. Sync step 3: big is alone →
    # exempt → min(5000 − 1536, 2048) = 2048. Pipelined step 3: a is finished but unprocessed:
    # running + waiting = 2 → threshold 512. 6 vs 7 forward passes.
    reqs = [req("a", 0, 10, 3), req("big", 0, 5000, 2)]
    head = ["a:P10@0* + big:P512@0", "a:D1@10* + big:P512@512", "a:D1@11* + big:P512@1024"]
    sync = run(reqs, engine(budget=2048, threshold=512))
    assert rendered(sync, reqs) == [*head, "big:P2048@1536", "big:P1416@3584*", "big:D1@5000*"]
    assert sync.summary()["num_forward_passes"] == 6
    pipe = run(reqs, engine(budget=2048, threshold=512, pipelined=True))
    steps = rendered(pipe, reqs, counters=("run",))
    assert steps[3] == "big:P512@1536 | run=2"
    assert [line.split(" | ")[0] for line in steps[:7]] == [
        *head,
        "big:P512@1536",
        "big:P2048@2048",
        "big:P904@4096*",
        "big:D1@5000*",
    ]
    assert pipe.summary()["num_forward_passes"] == 7


def test_pipe_preempt_done_a_finished_but_unprocessed_request_can_be_the_victim():
    # pipe_preempt_done (edge case 7), N = 5 (4 usable). Chosen: x 30 out 10 and y 20 out 3 @0,
    # budget 128: 2 + 2 blocks, free 0. y samples its last token at step 2. Pipelined step 3:
    # x's decode at 32 needs a 3rd block; the running tail is y (finished, unprocessed): it is
    # preempted and its blocks go to x. y's in-flight last token still arrives: y finishes at
    # step 2 with all 3 tokens and never runs again. Sync: y's blocks are free at step 3.
    reqs = [req("x", 0, 30, 10), req("y", 0, 20, 3)]
    pipe = run(reqs, engine(budget=128, N=5, pipelined=True))
    steps = rendered_at(pipe, reqs, counters=("free",))
    assert steps[2] == "x:D1@31* + y:D1@21* | free=0"
    assert steps[3] == "x:D1@32* | preempted=y | free=1"
    assert event_step(pipe, "finished", "y") == 2
    assert column(pipe, "finished_at_s")["y"] == 3.0
    assert column(pipe, "output_tokens")["y"] == 3
    assert all(rid != "y" for e in pipe.step_log()[3:] for rid, _, _ in e["scheduled"])
    sync = rendered_at(run(reqs, engine(budget=128, N=5)), reqs, counters=("free",))
    assert sync[3] == "x:D1@32* | free=1"


@pytest.mark.parametrize("caching", [True, False])
def test_prio_requeue_pipelined_a_stale_token_is_part_of_the_recompute(caching):
    # prio_requeue.pipe: prio_requeue2 (N = 9; lo(5) 48 @0, hi(0) 60 @1, mid(3) 70 @3) with the
    # engine pipelined; outputs chosen as in test_simulator_priority: lo 8, hi 10, mid 3;
    # budget 100. Step 6: lo's decode (its step-5 token still in flight) is planned, then hi
    # needs a 5th block: the victim is lo, withdrawn. update(5) still appends lo's token: 54
    # known. hi samples its last token at 10; step 11 is empty (hi holds its blocks, mid needs
    # 5 > 3 free); mid runs 12-14; step 15 is empty (lo needs 4 > 3); lo:R54@0* at 16 (its
    # cached blocks were evicted by mid's allocation, so caching changes nothing).
    reqs = [req("lo", 0, 48, 8, priority=5), req("hi", 1, 60, 10, priority=0), req("mid", 3, 70, 3, priority=3)]
    eng = engine(budget=100, N=9, caching=caching, pipelined=True, scheduling_policy="priority")
    steps = steps_of(reqs, eng)
    assert steps[5] == "lo:D1@52* + hi:D1@63*"
    assert steps[6] == "hi:D1@64* | preempted=lo"
    assert steps[10] == "hi:D1@68*"
    assert steps[11] == ""
    assert (steps[12], steps[13], steps[14]) == ("mid:P70@0*", "mid:D1@70*", "mid:D1@71*")
    assert steps[15] == ""
    assert steps[16] == "lo:R54@0*"
    sync = steps_of(reqs, engine(budget=100, N=9, caching=caching, scheduling_policy="priority"))
    assert (sync[6], sync[11], sync[14]) == ("hi:D1@64* | preempted=lo", "mid:P70@0*", "lo:R54@0*")


def _blocks_at_finish(r: Request) -> int:
    return math.ceil((r.prompt_tokens + r.output_tokens - 1) / 16)


@pytest.mark.parametrize(
    "reqs",
    [
        # The classic example (outputs chosen: 30 and 5).
        [Request(i, 0.0, 10, 30) for i in range(100)] + [Request("big", 3.0, 5000, 5)],
        # Staggered arrivals and lengths, nothing binding.
        [Request(i, float(i % 7), 5 + (37 * i) % 200, 1 + (11 * i) % 23) for i in range(40)],
    ],
    ids=["classic", "staggered"],
)
def test_only_run_and_free_lag_when_nothing_binds(reqs):
    # Rule 31: no slot or KV limit binds (max_num_seqs 256, a big pool), so the pipelined
    # engine schedules the very same tokens step for step; the only differences are the
    # trailing empty step and the counters: a request that finished in step k − 1 still counts
    # as running, and still holds its blocks, after scheduling step k.
    knobs = dict(budget=2048, seqs=256)
    sync = run(reqs, engine(**knobs))
    pipe = run(reqs, engine(**knobs, pipelined=True))
    sync_log, pipe_log = sync.step_log(), pipe.step_log()
    # (The pipelined run's trailing empty iteration is test_a_pipelined_run_ends_with_an_empty_iteration's.)
    assert len(pipe_log) - len(sync_log) in (0, 1) and all(e["scheduled"] for e in pipe_log[: len(sync_log)])
    for a, b in zip(sync_log, pipe_log):
        assert (a["start_at_s"], a["scheduled"], a["start"], a["first_token"], a["finished"]) == (
            b["start_at_s"],
            b["scheduled"],
            b["start"],
            b["first_token"],
            b["finished"],
        )
    by_id = {r.request_id: r for r in reqs}
    lag_run = [0] + [len(e["finished"]) for e in sync_log]
    lag_free = [0] + [sum(_blocks_at_finish(by_id[rid]) for rid in e["finished"]) for e in sync_log]
    n = len(sync_log)
    assert pipe.steps["num_running"].tolist()[:n] == [x + y for x, y in zip(sync.steps["num_running"], lag_run)]
    assert pipe.steps["num_free_kv_blocks"].tolist()[:n] == [
        x - y for x, y in zip(sync.steps["num_free_kv_blocks"], lag_free)
    ]
    assert sync.summary()["num_forward_passes"] == pipe.summary()["num_forward_passes"] == n


# ============================================================================================
# Defaults
# ============================================================================================


def test_defaults_are_vllm_033s():
    eng = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    assert (eng.enable_prefix_caching, eng.async_scheduling, eng.scheduler_reserve_full_isl, eng.watermark) == (
        True,
        True,
        True,
        0.0,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(prefix_id="g", prefix_tokens=31),
            r"prefix_tokens must be an int in \[0, prompt_tokens \+ output_tokens = 30\]",
        ),
        (dict(prefix_id="g", prefix_tokens=-1), "prefix_tokens must be"),
        (dict(prefix_tokens=8), "needs a prefix_id"),
        (dict(prefix_id=True, prefix_tokens=8), "prefix_id must be an int, a str or None"),
        (dict(prefix_id=1.5, prefix_tokens=8), "prefix_id must be an int, a str or None"),
    ],
)
def test_request_prefix_fields_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Request("a", 0.0, 20, 10, **kwargs)
    # The whole prompt plus the whole output may be the shared stream.
    assert Request("a", 0.0, 20, 10, prefix_id=7, prefix_tokens=30).prefix_tokens == 30
