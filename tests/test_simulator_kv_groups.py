"""Hand-worked scenarios for KV-cache groups on one pool (``EngineConfig(kv_groups=...)``).

Each rule G1–G7 of :mod:`budgetlab.simulator.kv_groups` (vLLM 0.33's hybrid KV cache manager)
on a scenario small enough to follow by hand, with block size B = 16 and ``ConstantCost(1.0)``
(step ``i`` starts at ``t = i``). Steps are compared in the reference documents' notation
(:mod:`oracle_notation`): ``id:Kn@p`` a chunk of ``n`` tokens of kind P/D/R from computed
position ``p`` (an admission's hit), ``*`` a chunk that samples, ``| free=n`` the free blocks
right after scheduling. The comments derive each ``free`` from the rules.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab import ConstantCost, EngineConfig, Request, simulate
from budgetlab.attention import AttentionLayout, kv_cache_groups, max_admission_blocks, skipped_tokens
from budgetlab.errors import ConfigError, RequestTooLargeError
from budgetlab.simulator.inputs import request_table
from budgetlab.simulator.loop import queue_arrivals
from budgetlab.simulator.state import new_state
from budgetlab.simulator.step import reference_step

from oracle_notation import rendered
from sim_modes import assert_same, run_all_modes

STEP = ConstantCost(1.0)
SW32 = (("sliding_window", 32), "full")


def engine(groups, *, budget: int = 16, blocks: int = 100, caching: bool = False, pipelined: bool = False, **kw):
    return EngineConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=kw.pop("seqs", 4),
        num_kv_blocks=blocks,
        kv_groups=groups,
        enable_prefix_caching=caching,
        async_scheduling=pipelined,
        **kw,
    )


def steps(reqs: list[Request], eng: EngineConfig, count: int | None = None) -> list[str]:
    lines = rendered(run_all_modes(reqs, eng, STEP), reqs, counters=("free",))
    return lines if count is None else lines[:count]


# ---------------------------------------------------------------------------------------------
# The vLLM statements the rules restate


def test_skipped_tokens_and_admission_cap_as_vllm_states_them():
    # SlidingWindowManager.get_num_skipped_tokens docstring: window 4, 7 computed -> 4 skipped
    assert skipped_tokens(("sliding_window", 4), 7) == 4
    assert skipped_tokens(("sliding_window", 4), 2) == 0
    # ChunkedLocalAttentionManager examples: chunk 8 -> 13: 8, 8: 8, 7: 0
    assert [skipped_tokens(("chunked_local", 8), c) for c in (13, 8, 7)] == [8, 8, 0]
    assert skipped_tokens("full", 10**6) == 0
    # cdiv(min(W - 1 + in_flight, max_model_len), B) + 1: (127 + 2048) / 16 -> 136, + 1
    assert (
        max_admission_blocks(("sliding_window", 128), block_size=16, in_flight_tokens=2048, max_model_len=None) == 137
    )
    assert max_admission_blocks(("sliding_window", 128), block_size=16, in_flight_tokens=2048, max_model_len=1000) == 64
    assert (
        max_admission_blocks(("chunked_local", 8192), block_size=16, in_flight_tokens=8192, max_model_len=None) == 1024
    )
    assert max_admission_blocks("full", block_size=16, in_flight_tokens=1, max_model_len=None) is None


def test_groups_are_formed_as_vllm_forms_them():
    gemma3 = AttentionLayout.from_pattern(["sliding_window"] * 5 + ["full"], 62, sliding_window=1024)
    groups, size = kv_cache_groups(gemma3)  # 52 sliding + 10 full: groups of 10, 6 sliding (padded) + 1 full
    assert size == 10 and groups == (("sliding_window", 1024),) * 6 + ("full",)
    gpt_oss = AttentionLayout.from_pattern(["sliding_window", "full"], 24, sliding_window=128)
    assert kv_cache_groups(gpt_oss) == ((("sliding_window", 128), "full"), 12)
    uneven = AttentionLayout(("full",) + ("sliding_window",) * 13 + ("full",) * 11, sliding_window=64)
    assert kv_cache_groups(uneven) == (("full", ("sliding_window", 64)), 13)  # 13 < 12 * 1.5: groups of 13
    assert kv_cache_groups(None) == (("full",), 0)


def test_layout_text_is_read_strictly():
    layout = AttentionLayout.parse("sliding_window*5 full; sliding_window=1024", 62)
    assert layout.to_text() == "sliding_window*5 full; sliding_window=1024" and layout.count("full") == 10
    for bad, words in (
        ("sliding_window*0 full; sliding_window=8", "n a whole number >= 1"),
        ("sliding_window*٣ full; sliding_window=8", "n a whole number"),
        ("full; sliding_window=٣", "name=int"),
        ("sliding_window full; sliding_window=8 sliding_window=9", "given twice"),
        ("full*63", "names 63 layers but the model has 62"),
        ("full; window=8", "name=int"),
        ("diagonal", "unknown layer kind"),
    ):
        with pytest.raises(ConfigError, match=words):
            AttentionLayout.parse(bad, 62)


def test_explicit_groups_of_a_mamba_hybrid_keep_vllms_block_size():
    # Setting kv_groups to the groups vLLM derives must schedule the same as leaving it None:
    # the Mamba hybrid's 272-token block (Qwen3-Next at TP 4) stays, it does not fall to 16.
    from budgetlab import hardware, model
    from budgetlab.memory import scheduler_kv_groups

    next80b = model("qwen3-next-80b-a3b")
    base = EngineConfig.vllm_defaults(hardware("h100-sxm"), tensor_parallel_size=4, enable_prefix_caching=False)
    derived = scheduler_kv_groups(next80b, base)
    assert derived[1] == 272 and derived[0][-1] == "full"
    assert scheduler_kv_groups(next80b, replace(base, kv_groups=derived[0])) == derived
    # a what-if without its Mamba groups takes the engine's block size
    assert scheduler_kv_groups(next80b, replace(base, kv_groups=SW32))[1] == 16


def test_kv_groups_are_checked():
    assert EngineConfig(kv_groups=[["sliding_window", 64], "full"]).kv_groups == (("sliding_window", 64), "full")
    for bad in ((), "full", (("sliding_window", 0),), (("window", 5),), (("sliding_window", 4.5),)):
        with pytest.raises(ConfigError):
            EngineConfig(kv_groups=bad)


# ---------------------------------------------------------------------------------------------
# G1-G3: a running request's chunks


def test_sliding_window_frees_blocks_out_of_its_window_before_each_allocation():
    # W 32, B 16, budget 16. Both groups take a block per 16-token chunk (G3) ...
    #   step 0: c=0: 2 blocks -> 98; step 1: c=16 -> 96; step 2: c=32, skipped 32-31=1 token,
    #   no whole block -> 94; step 3: c=48, skipped 17 -> block 0 of the sliding table is freed
    #   first (G2): 95, then 2 new -> 93; step 4: c=64, skipped 33 -> block 1 freed (94), the
    #   decode needs ceil(65/16) - 4 = 1 block per group -> 92; step 5: nothing new.
    assert steps([Request("a", 0.0, 64, 40)], engine(SW32), 6) == [
        "a:P16@0 | free=98",
        "a:P16@16 | free=96",
        "a:P16@32 | free=94",
        "a:P16@48* | free=93",
        "a:D1@64* | free=92",
        "a:D1@65* | free=92",
    ]


def test_chunked_local_attention_frees_the_chunks_before_the_current_one():
    # chunk 32: at c=32 the first chunk (2 blocks) is skipped: 96 + 2 - 2 = 96; at c=64 the
    # second: 94 + 2 - 2 (the decode's block in each group) = 94.
    lines = steps([Request("a", 0.0, 64, 3)], engine((("chunked_local", 32), "full")))
    assert lines[:5] == [
        "a:P16@0 | free=98",
        "a:P16@16 | free=96",
        "a:P16@32 | free=96",
        "a:P16@48* | free=94",
        "a:D1@64* | free=94",
    ]


def test_a_mamba_group_holds_one_block_per_request_from_its_first_chunk():
    # step 0: full 1 + Mamba 1 -> 98; then only the full group grows: 97, 96; all free at the end
    result = run_all_modes([Request("a", 0.0, 32, 3)], engine((("mamba", 4096), "full")), STEP)
    assert rendered(result, [Request("a", 0.0, 32, 3)], counters=("free",)) == [
        "a:P16@0 | free=98",
        "a:P16@16* | free=97",
        "a:D1@32* | free=96",
        "a:D1@33* | free=96",
    ]


def test_mamba_groups_with_prefix_caching_are_refused():
    with pytest.raises(ConfigError, match="mamba_cache_mode"):
        simulate([Request("a", 0.0, 32, 3)], engine=engine((("mamba", 4096), "full"), caching=True), cost=STEP)


def test_pipelined_frees_on_the_processed_tokens_one_step_later():
    # Async: step k is planned while step k-1's tokens are in flight, so the skip is computed
    # on c - (tokens scheduled in step k-1) (G2): W 16 frees its first block at step 3
    # (processed 32: skipped 17) instead of step 2, and its second at step 4.
    reqs = [Request("a", 0.0, 48, 3)]
    assert steps(reqs, engine((("sliding_window", 16), "full"))) == [
        "a:P16@0 | free=98",
        "a:P16@16 | free=96",
        "a:P16@32* | free=95",
        "a:D1@48* | free=94",
        "a:D1@49* | free=94",
    ]
    assert steps(reqs, engine((("sliding_window", 16), "full"), pipelined=True)) == [
        "a:P16@0 | free=98",
        "a:P16@16 | free=96",
        "a:P16@32* | free=94",
        "a:D1@48* | free=93",
        "a:D1@49* | free=94",
        "free=94",
    ]


# ---------------------------------------------------------------------------------------------
# G4: admission


def test_whole_sequence_check_caps_the_sliding_group_at_its_window():
    # Pool 20. x (16 tokens) takes 2 blocks, then 2 more for its decode: 16 free at step 1.
    # y (160 tokens) arrives: the whole-sequence check asks 10 blocks of the full group but only
    # cdiv(31 + 16, 16) + 1 = 4 of the sliding one (G4's cap, sync: 16 tokens in flight):
    # 14 <= 16, so y starts with 15 tokens (2 blocks) -> 14. Were both groups full attention
    # it would need 20 and wait.
    reqs = [Request("x", 0.0, 16, 10), Request("y", 1.0, 160, 1)]
    assert steps(reqs, engine(SW32, blocks=20), 2) == ["x:P16@0* | free=18", "x:D1@16* + y:P15@0 | free=14"]
    assert steps(reqs, engine(("full", "full"), blocks=20), 2) == ["x:P16@0* | free=18", "x:D1@16* | free=16"]


def test_a_request_no_empty_pool_admits_is_refused_up_front():
    # 5 sliding groups of W 32 + 1 full, budget 64 pipelined (128 tokens in flight): a recompute
    # of 170 + 11 - 1 known tokens needs 12 + 5 * min(12, cdiv(31 + 128, 16) + 1 = 11) = 67
    # blocks at admission (even its first admission needs 11 + 55); the pool has 60.
    eng = engine((("sliding_window", 32),) * 5 + ("full",), budget=64, blocks=60, pipelined=True)
    with pytest.raises(RequestTooLargeError, match="67 KV blocks"):
        simulate([Request("a", 0.0, 170, 11)], engine=eng, cost=STEP)


# ---------------------------------------------------------------------------------------------
# G5-G7: prefix caching with groups


def test_a_hit_must_be_cached_in_every_group():
    # a (112 tokens, 96 shared with b) runs alone: its sliding table takes blocks 1-7, its full
    # table 8-14; it finishes and frees group by group, last block first (G5): the free queue is
    # 15-20, then 7..1 (sliding), then 14..8 (full). c (80 private tokens) takes 5 blocks per
    # group from the head: 15-19 for sliding, 20, 7, 6, 5, 4 for full, evicting sliding blocks
    # 6, 5, 4 and 3 of a. b's lookup (G7): the full groups hit blocks 0-5 (96 tokens); the
    # sliding group needs cdiv(31, 16) = 2 consecutive cached blocks within them, the rightmost
    # run is blocks 1-2, so the hit is 48 tokens. b takes, full: 7 - 3 new + 3 hit = 7,
    # sliding: 7 - max(skip 1, 3) = 4 new + 2 hit blocks past its skipped one = 6: 20 - 13 = 7.
    shared = {"prefix_id": "g", "prefix_tokens": 96}
    reqs = [Request("a", 0.0, 112, 1, **shared), Request("c", 1.0, 80, 1), Request("b", 2.0, 112, 1, **shared)]
    eng = engine(SW32, blocks=20, budget=256, caching=True)
    assert steps(reqs, eng) == ["a:P112@0* | free=6", "c:P80@0* | free=10", "b:P64@48* | free=7"]
    # without c in between every block of a is still cached: the whole 96 tokens hit
    # (full 7 - 6 + 6 = 7; sliding: skip cdiv... (96 - 31) // 16 = 4, 7 - 6 = 1 new + 2 = 3)
    assert steps([reqs[0], reqs[2]], eng) == ["a:P112@0* | free=6", "b:P16@96* | free=10"]


def test_priority_preemption_withdraws_a_grouped_chunk():
    # Priority policy, pool 10, budget 32, W 32. Step 1: lo (priority 1) ends its prompt (2
    # blocks) and hi (priority 0) starts (whole sequence 2 + 2 <= 4; chunk 2): 2 free. Step 2:
    # lo's decode (c 48) first frees its sliding block 0 (3), takes 2 (1); hi's chunk needs 2:
    # the victim is lo, already scheduled in this step: its chunk is withdrawn and its blocks in
    # every group freed, 3 sliding + 4 full: 8, then hi takes 2: 6. Step 3: lo's recompute (49
    # known: 4 + min(4, cap 5) = 8 blocks) does not fit the 4 left after hi's decode; step 4 it
    # does (hi finished and freed its 6).
    reqs = [Request("lo", 0.0, 48, 4, priority=1), Request("hi", 1.0, 32, 2, priority=0)]
    eng = engine(SW32, blocks=10, budget=32, scheduling_policy="priority")
    assert steps(reqs, eng) == [
        "lo:P32@0 | free=6",
        "lo:P16@32* + hi:P16@0 | free=2",
        "hi:P16@16* | preempted=lo | free=6",
        "hi:D1@32* | free=4",
        "lo:R32@0 | free=6",
        "lo:R17@32* | free=2",
        "lo:D1@49* | free=3",
        "lo:D1@50* | free=3",
    ]


# ---------------------------------------------------------------------------------------------
# Properties


def _checked_run(reqs: list[Request], eng: EngineConfig) -> None:
    """Step by step: the free count always equals the pool less what the tables hold (no
    caching) or the free queue (caching); everything is free at the end."""
    table = request_table(reqs)
    state = new_state(table, eng, STEP, eng.num_kv_blocks, eng.kv_groups)
    groups = state.groups
    assert groups is not None
    n = len(reqs)
    while state.num_done < n or state.finishing:
        i = state.next_arrival
        if i < n and (state.arrival_list[i] <= state.now_s or not (state.running or state.waiting)):
            queue_arrivals(state)
        reference_step(state)
        if groups.caching:
            assert groups.num_free == state.kv.free_blocks
        else:
            held = sum(groups.held_blocks(r) for r in range(n))
            assert eng.num_kv_blocks - held == state.kv.free_blocks
    assert state.kv.free_blocks == eng.num_kv_blocks


_window = st.sampled_from([16, 24, 32, 100])
_groups = st.one_of(
    _window.map(lambda w: (("sliding_window", w), "full")),
    _window.map(lambda w: (("sliding_window", w),) * 3 + ("full",)),
    _window.map(lambda w: (("sliding_window", w),)),
    st.just((("chunked_local", 64), "full")),
)
_requests = st.lists(
    st.tuples(st.integers(1, 150), st.integers(1, 30), st.integers(0, 12), st.booleans()), min_size=1, max_size=8
)


@settings(max_examples=60, deadline=None)
@given(
    groups=_groups,
    specs=_requests,
    budget=st.sampled_from([32, 64, 256]),
    blocks=st.integers(48, 120),
    caching=st.booleans(),
    pipelined=st.booleans(),
    reserve=st.booleans(),
)
def test_block_counts_stay_consistent(groups, specs, budget, blocks, caching, pipelined, reserve):
    reqs = [
        Request(i, float(at), p, o, prefix_id="s" if shared else None, prefix_tokens=min(p, 48) if shared else 0)
        for i, (p, o, at, shared) in enumerate(specs)
    ]
    eng = engine(
        groups, budget=budget, blocks=blocks, caching=caching, pipelined=pipelined, scheduler_reserve_full_isl=reserve
    )
    with contextlib.suppress(RequestTooLargeError):  # a pool no request fits in is refused up front
        _checked_run(reqs, eng)


@settings(max_examples=40, deadline=None)
@given(specs=_requests, budget=st.sampled_from([32, 64]), blocks=st.integers(40, 100), caching=st.booleans())
def test_a_window_longer_than_every_request_is_full_attention(specs, budget, blocks, caching):
    # A window no request outgrows skips nothing and its hit is the leading run, exactly as a
    # full-attention group's: the step log is the same bit for bit.
    reqs = [
        Request(i, float(at), p, o, prefix_id="s" if shared else None, prefix_tokens=min(p, 48) if shared else 0)
        for i, (p, o, at, shared) in enumerate(specs)
    ]
    try:
        full = simulate(reqs, engine=engine(("full", "full"), budget=budget, blocks=blocks, caching=caching), cost=STEP)
    except RequestTooLargeError:
        return
    wide = engine((("sliding_window", 10_000), "full"), budget=budget, blocks=blocks, caching=caching)
    assert_same(full, simulate(reqs, engine=wide, cost=STEP))


@settings(max_examples=30, deadline=None)
@given(specs=_requests, budget=st.sampled_from([32, 64]), blocks=st.integers(20, 60), pipelined=st.booleans())
def test_two_full_groups_on_twice_the_blocks_schedule_as_one(specs, budget, blocks, pipelined):
    reqs = [Request(i, float(at), p, o) for i, (p, o, at, _) in enumerate(specs)]
    try:
        one = simulate(reqs, engine=engine(("full",), budget=budget, blocks=blocks, pipelined=pipelined), cost=STEP)
    except RequestTooLargeError:
        return
    two = simulate(
        reqs, engine=engine(("full", "full"), budget=budget, blocks=2 * blocks, pipelined=pipelined), cost=STEP
    )
    assert rendered(one, reqs) == rendered(two, reqs)
