"""Tests for budgetlab.workload.sharing: shared system prompts and multi-turn conversations,
with hand-worked prompts, prefix chains and caps, seeds, validation and the sweep protocol."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from dataclasses import FrozenInstanceError, dataclass

import numpy as np
import pytest

import budgetlab
from budgetlab.errors import ParameterError
from budgetlab.specs import Request
from budgetlab.workload import (
    DEFAULT_MAX_MODEL_LEN_TOKENS,
    DEFAULT_THINK_TIME_S,
    Fixed,
    MultiTurnWorkload,
    SweepWorkload,
    SystemPromptWorkload,
    Uniform,
    check_workload,
    mean_sequence_tokens,
    multi_turn_workload,
    poisson_arrivals,
    system_prompt_workload,
    trace_stats,
)
from budgetlab.workload.sharing import _popularity


@dataclass(frozen=True)
class Counting:
    """A deterministic 'distribution': the n-th draw is ``start + step * n`` (ignores rng)."""

    start: int
    step: int

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.start + self.step * np.arange(n, dtype=np.int64)


@dataclass(frozen=True)
class Listed:
    """A deterministic 'distribution' returning the first n listed values."""

    values: tuple[int, ...]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.array(self.values[:n], dtype=np.int64)


def first_child(seed: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(seed).spawn(1)[0]


# --------------------------------------------------------------------------------------------
# Shared system prompts
# --------------------------------------------------------------------------------------------


def test_one_system_prompt_by_hand():
    reqs = system_prompt_workload(num_requests=3, rate_per_s=2.0, num_prompts=1, system=100, message=20, output=5)
    assert [(r.request_id, r.prompt_tokens, r.output_tokens) for r in reqs] == [(0, 120, 5), (1, 120, 5), (2, 120, 5)]
    assert [(r.prefix_id, r.prefix_tokens) for r in reqs] == [("sys0", 100)] * 3
    # arrivals: the Poisson process of the seed's first child stream
    expected = poisson_arrivals(rate_per_s=2.0, num_requests=3, seed=first_child(0))
    assert [r.arrival_at_s for r in reqs] == expected.tolist() and reqs[0].arrival_at_s == 0.0
    # 3 requests × 120 prompt tokens; the 2nd and 3rd reuse the 100-token system prompt
    assert trace_stats(reqs)["shared_prefix_fraction"] == pytest.approx(200 / 360)


def test_popularity_is_zipf_like():
    assert _popularity(3, 1.0) == pytest.approx([6 / 11, 3 / 11, 2 / 11])  # 1 : 1/2 : 1/3
    assert _popularity(4, 0.0) == pytest.approx([0.25] * 4)
    assert _popularity(2, 2.0) == pytest.approx([4 / 5, 1 / 5])  # 1 : 1/4
    reqs = system_prompt_workload(
        num_requests=20_000, rate_per_s=1.0, num_prompts=3, system=10, message=1, output=1, seed=3
    )
    counts = Counter(r.prefix_id for r in reqs)
    for k, share in enumerate((6 / 11, 3 / 11, 2 / 11)):
        assert counts[f"sys{k}"] / 20_000 == pytest.approx(share, abs=0.015)
    flat = system_prompt_workload(
        num_requests=20_000, rate_per_s=1.0, num_prompts=4, system=10, message=1, output=1, zipf_exponent=0.0
    )
    assert all(abs(n / 20_000 - 0.25) < 0.015 for n in Counter(r.prefix_id for r in flat).values())


def test_system_prompts_have_one_length_each_and_a_message_after_them():
    reqs = system_prompt_workload(
        num_requests=500, rate_per_s=5.0, num_prompts=4, system=Uniform(100, 2000), message=Uniform(1, 50), output=7
    )
    lengths: dict[object, set[int]] = {}
    for r in reqs:
        lengths.setdefault(r.prefix_id, set()).add(r.prefix_tokens)
        assert 1 <= r.prompt_tokens - r.prefix_tokens <= 50  # the own message, never empty
        assert 100 <= r.prefix_tokens <= 2000 and r.output_tokens == 7
    assert set(lengths) <= {"sys0", "sys1", "sys2", "sys3"} and all(len(v) == 1 for v in lengths.values())
    assert [r.request_id for r in reqs] == list(range(500))
    assert all(a.arrival_at_s <= b.arrival_at_s for a, b in itertools.pairwise(reqs))


def test_system_prompt_streams_are_independent_and_seeded():
    kwargs = dict(num_requests=50, rate_per_s=3.0, num_prompts=5, system=Uniform(10, 90), message=Uniform(1, 9))
    base = system_prompt_workload(output=Uniform(1, 20), seed=4, **kwargs)
    assert system_prompt_workload(output=Uniform(1, 20), seed=4, **kwargs) == base
    assert system_prompt_workload(output=Uniform(1, 20), seed=5, **kwargs) != base
    other_output = system_prompt_workload(output=Fixed(3), seed=4, **kwargs)
    keep = [(r.arrival_at_s, r.prompt_tokens, r.prefix_id, r.prefix_tokens) for r in base]
    assert [(r.arrival_at_s, r.prompt_tokens, r.prefix_id, r.prefix_tokens) for r in other_output] == keep


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"num_prompts": 0}, ValueError, "num_prompts"),
        ({"num_prompts": True}, TypeError, "num_prompts"),
        ({"num_requests": 0}, ValueError, "num_requests"),
        ({"zipf_exponent": -1.0}, ValueError, "zipf_exponent"),
        ({"zipf_exponent": float("nan")}, ValueError, "zipf_exponent"),
        ({"rate_per_s": 0.0}, ValueError, "rate_per_s"),
        ({"system": "long"}, TypeError, "system"),
        ({"system": 0}, ValueError, "Fixed.tokens"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_system_prompt_arguments_are_checked(kwargs, error, text):
    args = dict(num_requests=3, rate_per_s=1.0, num_prompts=2, system=10, message=5, output=2) | kwargs
    with pytest.raises(error, match=text):
        system_prompt_workload(**args)


def test_system_prompt_workload_is_a_sweepable_twin():
    w = SystemPromptWorkload(system=Uniform(50, 500), message=Uniform(1, 30), output=9, num_prompts=3, num_requests=40)
    assert isinstance(w, SweepWorkload) and check_workload(w) is w and w.label == "system-prompts"
    direct = system_prompt_workload(
        num_requests=40,
        rate_per_s=4.0,
        num_prompts=3,
        system=Uniform(50, 500),
        message=Uniform(1, 30),
        output=9,
        seed=2,
    )
    assert w.requests(rate_per_s=4.0, seed=2) == direct
    slow, fast = w.requests(rate_per_s=1.0), w.requests(rate_per_s=4.0)
    assert [(r.prompt_tokens, r.prefix_id) for r in slow] == [(r.prompt_tokens, r.prefix_id) for r in fast]
    assert [r.arrival_at_s / 4 for r in slow] == pytest.approx([r.arrival_at_s for r in fast])
    assert mean_sequence_tokens(w) == pytest.approx(np.mean([r.total_tokens for r in slow]))
    back = pickle.loads(pickle.dumps(w))
    assert back == w and back.requests(rate_per_s=2.0, seed=1) == w.requests(rate_per_s=2.0, seed=1)
    with pytest.raises(FrozenInstanceError):
        w.num_prompts = 4  # type: ignore[misc]
    with pytest.raises(ValueError, match="num_prompts"):
        SystemPromptWorkload(system=10, message=5, output=2, num_prompts=0)
    with pytest.raises(ValueError, match="num_requests"):
        SystemPromptWorkload(system=10, message=5, output=2, num_prompts=1, num_requests=0)
    with pytest.raises(ParameterError, match="rate_per_s"):
        w.requests(rate_per_s=-1.0)


# --------------------------------------------------------------------------------------------
# Multi-turn conversations
# --------------------------------------------------------------------------------------------

# Two conversations of three turns; messages drawn in conversation order 10, 20, ..., 60,
# outputs 1, 2, ..., 6; think time always 20 s.
#   conv0: turn 1 prompt 10,            output 1, prefix 11
#          turn 2 prompt 11 + 20 = 31,  output 2, prefix 33
#          turn 3 prompt 33 + 30 = 63,  output 3, prefix 66
#   conv1: turn 1 prompt 40,            output 4, prefix 44
#          turn 2 prompt 44 + 50 = 94,  output 5, prefix 99
#          turn 3 prompt 99 + 60 = 159, output 6, prefix 165
TWO_BY_THREE = dict(
    num_conversations=2,
    conversation_rate_per_s=1.0,
    turns=3,
    message=Counting(10, 10),
    output=Counting(1, 1),
    think_time_s=20.0,
    think_time_cv=0.0,
)


def test_two_conversations_of_three_turns_by_hand():
    reqs = multi_turn_workload(max_model_len_tokens=None, **TWO_BY_THREE)
    start1 = float(poisson_arrivals(rate_per_s=1.0, num_requests=2, seed=first_child(0))[1])
    assert 0.0 < start1 < 20.0  # seed 0: conversation 1 starts between conv0's turns 1 and 2
    got = [(r.request_id, r.arrival_at_s, r.prompt_tokens, r.output_tokens, r.prefix_id, r.prefix_tokens) for r in reqs]
    assert got == [
        (0, 0.0, 10, 1, "conv0", 11),
        (1, start1, 40, 4, "conv1", 44),
        (2, 20.0, 31, 2, "conv0", 33),
        (3, start1 + 20.0, 94, 5, "conv1", 99),
        (4, 40.0, 63, 3, "conv0", 66),
        (5, start1 + 40.0, 159, 6, "conv1", 165),
    ]
    # shared: conv0 11 + 33, conv1 44 + 99 of the 10+31+63+40+94+159 = 397 prompt tokens
    assert trace_stats(reqs)["shared_prefix_fraction"] == pytest.approx((11 + 33 + 44 + 99) / 397)


def test_the_cap_ends_a_conversation_before_the_turn_that_exceeds_it():
    # cap 100: conv1's third turn (159 + 6 = 165) is over; everything else fits (99 <= 100)
    capped = multi_turn_workload(max_model_len_tokens=100, **TWO_BY_THREE)
    assert sorted((r.prefix_id, r.prefix_tokens) for r in capped) == [
        ("conv0", 11),
        ("conv0", 33),
        ("conv0", 66),
        ("conv1", 44),
        ("conv1", 99),
    ]
    # cap 98: conv1 keeps only its first turn (44); 99 is over
    assert [r.prefix_tokens for r in multi_turn_workload(max_model_len_tokens=98, **TWO_BY_THREE)] == [11, 44, 33, 66]
    # cap 40: conv0 keeps turns 1 and 2 (11, 33 fit; 66 does not); conv1's first turn (44) is over: no request
    assert [r.prefix_tokens for r in multi_turn_workload(max_model_len_tokens=40, **TWO_BY_THREE)] == [11, 33]
    with pytest.raises(ValueError, match="every conversation's first turn exceeds max_model_len_tokens=10"):
        multi_turn_workload(max_model_len_tokens=10, **TWO_BY_THREE)
    assert DEFAULT_MAX_MODEL_LEN_TOKENS == 8192
    assert len(multi_turn_workload(**TWO_BY_THREE)) == 6  # the default cap is far above 165


def test_drawn_turn_counts_take_lengths_in_conversation_order():
    # conv0 has 2 turns (messages 10, 20), conv1 3 turns (30, 40, 50); outputs all 5
    reqs = multi_turn_workload(**(TWO_BY_THREE | {"turns": Listed((2, 3)), "output": 5}))
    chains = {c: [(r.prompt_tokens, r.prefix_tokens) for r in reqs if r.prefix_id == c] for c in ("conv0", "conv1")}
    assert chains == {"conv0": [(10, 15), (35, 40)], "conv1": [(30, 35), (75, 80), (130, 135)]}


def test_think_times_are_gamma_and_do_not_scale_with_the_rate():
    w = MultiTurnWorkload(turns=5, message=10, output=2, num_conversations=400, think_time_s=12.0)
    gaps = []
    for reqs in (w.requests(rate_per_s=1.0, seed=3), w.requests(rate_per_s=50.0, seed=3)):
        by_conv: dict[object, list[float]] = {}
        for r in reqs:
            by_conv.setdefault(r.prefix_id, []).append(r.arrival_at_s)
        gaps.append(np.concatenate([np.diff(times) for _, times in sorted(by_conv.items())]))
    assert gaps[0] == pytest.approx(gaps[1], abs=1e-9)  # the same think times at both loads
    assert gaps[0].mean() == pytest.approx(12.0, rel=0.1)  # 1,600 exponential gaps, mean 12 s
    assert gaps[0].std() / gaps[0].mean() == pytest.approx(1.0, rel=0.1)  # cv 1
    regular = MultiTurnWorkload(turns=5, message=10, output=2, num_conversations=400, think_time_cv=0.5)
    by_conv = {}
    for r in regular.requests(rate_per_s=1.0):
        by_conv.setdefault(r.prefix_id, []).append(r.arrival_at_s)
    half = np.concatenate([np.diff(t) for t in by_conv.values()])
    assert half.mean() == pytest.approx(DEFAULT_THINK_TIME_S, rel=0.1)
    assert half.std() / half.mean() == pytest.approx(0.5, rel=0.1)


def test_multi_turn_seeds_are_reproducible():
    kwargs = dict(TWO_BY_THREE, turns=Uniform(1, 6), message=Uniform(5, 50), output=Uniform(1, 30), think_time_cv=1.0)
    a = multi_turn_workload(**kwargs, seed=7)
    assert multi_turn_workload(**kwargs, seed=7) == a
    assert multi_turn_workload(**kwargs, seed=8) != a
    # prefix chains: within a conversation, each prompt extends the previous turn's whole stream
    for conv in {r.prefix_id for r in a}:
        turns = [r for r in a if r.prefix_id == conv]
        assert turns[0].prefix_tokens == turns[0].total_tokens
        for before, after in itertools.pairwise(turns):
            assert after.prompt_tokens > before.prefix_tokens == before.total_tokens
            assert after.arrival_at_s >= before.arrival_at_s


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"num_conversations": 0}, ValueError, "num_conversations"),
        ({"conversation_rate_per_s": 0.0}, ValueError, "conversation_rate_per_s"),
        ({"turns": 0}, ValueError, "Fixed.tokens"),
        ({"turns": 2.5}, TypeError, "turns"),
        ({"think_time_s": 0.0}, ValueError, "think_time_s"),
        ({"think_time_s": float("inf")}, ValueError, "think_time_s"),
        ({"think_time_cv": -0.1}, ValueError, "think_time_cv"),
        ({"max_model_len_tokens": 1}, ValueError, "max_model_len_tokens"),
        ({"max_model_len_tokens": 9.0}, TypeError, "max_model_len_tokens"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_multi_turn_arguments_are_checked(kwargs, error, text):
    with pytest.raises(error, match=text):
        multi_turn_workload(**(TWO_BY_THREE | kwargs))


def test_multi_turn_workload_offers_requests_per_second():
    w = MultiTurnWorkload(
        turns=3, message=Counting(10, 10), output=Counting(1, 1), num_conversations=2, think_time_cv=0.0
    )
    # 2 conversations, 6 turns: conversations start at a third of the request rate
    assert w.conversation_rate_per_s(3.0) == pytest.approx(1.0)
    direct = multi_turn_workload(**(TWO_BY_THREE | {"think_time_s": DEFAULT_THINK_TIME_S}))
    assert w.requests(rate_per_s=3.0) == direct
    assert isinstance(w, SweepWorkload) and check_workload(w) is w and w.label == "multi-turn"
    # mean of the six turns' prompt + output: (11 + 33 + 66 + 44 + 99 + 165) / 6
    assert mean_sequence_tokens(w) == pytest.approx(418 / 6)
    back = pickle.loads(pickle.dumps(w))
    assert back == w and back.requests(rate_per_s=2.0) == w.requests(rate_per_s=2.0)
    with pytest.raises(FrozenInstanceError):
        w.turns = 4  # type: ignore[misc]
    with pytest.raises(ValueError, match="think_time_s"):
        MultiTurnWorkload(turns=3, message=10, output=1, think_time_s=-1.0)
    with pytest.raises(ParameterError, match="rate_per_s"):
        w.requests(rate_per_s=0.0)
    with pytest.raises(ParameterError, match="seed"):
        w.requests(rate_per_s=1.0, seed=-2)


def test_many_conversations_arrive_at_about_the_offered_rate():
    w = MultiTurnWorkload(turns=5, message=20, output=5, num_conversations=2000, think_time_s=1.0)
    reqs = w.requests(rate_per_s=10.0)
    assert len(reqs) == 10_000 and [r.request_id for r in reqs] == list(range(10_000))
    # conversations start at 2 per second over ~1,000 s; the last ones' turns add ~4 s of tail
    assert trace_stats(reqs)["rate_per_s"] == pytest.approx(10.0, rel=0.05)


def test_sharing_workloads_are_on_the_facade():
    for name in ("system_prompt_workload", "multi_turn_workload", "SystemPromptWorkload", "MultiTurnWorkload"):
        assert name in budgetlab.__all__ and getattr(budgetlab, name) is getattr(budgetlab.workload, name)


def test_requests_are_plain_requests():
    for r in multi_turn_workload(**TWO_BY_THREE) + system_prompt_workload(
        num_requests=3, rate_per_s=1.0, num_prompts=2, system=10, message=5, output=2
    ):
        assert type(r) is Request and isinstance(r.prefix_id, str) and type(r.prefix_tokens) is int


def test_sharing_workloads_sweep_and_hit_the_prefix_cache():
    from budgetlab.cost import ConstantCost

    system = SystemPromptWorkload(system=640, message=Uniform(1, 40), output=8, num_prompts=2, num_requests=30)
    chat = MultiTurnWorkload(turns=3, message=40, output=8, num_conversations=10, think_time_s=5.0)
    for workload in (system, chat):
        rows = budgetlab.sweep(
            workload,
            budgets=512,
            max_num_seqs=16,
            rates_per_s=2.0,
            hardware="h100-sxm",
            model="llama-3.1-8b",
            executor=budgetlab.SerialExecutor(),
            progress=False,
        )
        assert rows["workload"].tolist() == [workload.label]
        engine = budgetlab.EngineConfig(max_num_batched_tokens=512, max_num_seqs=16, num_kv_blocks=400)
        summary = budgetlab.simulate(
            workload.requests(rate_per_s=2.0), engine=engine, cost=ConstantCost(0.01)
        ).summary()
        assert summary["prefix_hit_tokens"] > 0  # the declared streams are shared in the simulator
