"""Percentiles with multiplicities and the summary dict (budgetlab.metrics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab.metrics import gate_shares, quantile, run_end_s, run_numbers, summarize, timeline

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


# --- which gate held the waiting requests back (one classification for every report) ---------

from budgetlab.metrics import GATES, busy_stats, step_gates  # noqa: E402


def _steps(rows):
    import pandas as pd

    columns = ["duration_s", "num_decode_tokens", "num_prefill_tokens", "num_running", "num_waiting", "num_preemptions"]
    return pd.DataFrame(rows, columns=columns)


def test_step_gates_by_hand():
    steps = _steps(
        [
            (0.01, 4, 0, 4, 0, 0),  # nobody waits
            (0.02, 4, 0, 4, 3, 0),  # at the cap of 4: the slot gate
            (0.03, 2, 98, 2, 3, 0),  # the budget of 100 is full: the budget gate
            (0.04, 2, 10, 2, 3, 0),  # slot and budget left: KV held the queue back
            (0.05, 4, 96, 4, 3, 1),  # preempted: KV, although at the cap and budget full
        ]
    )
    gates = step_gates(steps, max_num_seqs=4, max_num_batched_tokens=100)
    assert gates.gate.tolist() == ["none", "slot", "budget", "kv", "kv"]
    assert gates.at_cap.tolist() == [True, True, False, False, True]
    assert gates.budget_full.tolist() == [False, False, True, False, True]
    assert gates.num_tokens.tolist() == [4, 4, 100, 12, 100]
    assert set(gates.gate) <= set(GATES)


def test_busy_stats_weigh_each_step_by_its_duration():
    steps = _steps([(1.0, 2, 0, 2, 0, 0), (3.0, 4, 100, 4, 0, 0)])
    stats = busy_stats(steps, makespan_s=8.0)
    assert stats == {"running_mean": 3.5, "running_max": 4, "tokens_per_step_mean": 78.5, "busy_fraction": 0.5}
    assert busy_stats(steps, makespan_s=2.0)["busy_fraction"] == 1.0  # at most 1
    assert busy_stats(steps, makespan_s=0.0)["busy_fraction"] == 1.0


def test_sweep_gate_stats_and_notebook_gate_shares_classify_alike(h100, llama8b):
    import dataclasses

    from budgetlab import EngineConfig, IdealCost, conversation_like
    from budgetlab.charts import gate_share_frame
    from budgetlab.metrics import gate_stats
    from budgetlab.simulator import simulate

    requests = conversation_like(num_requests=120, rate_per_s=6.0, seed=1)
    engine = EngineConfig(max_num_batched_tokens=512, max_num_seqs=256, num_kv_blocks=600)
    runs = {
        "small pool": simulate(requests, engine=engine, cost=IdealCost(h100, llama8b)),
        "cap 2": simulate(requests, engine=dataclasses.replace(engine, max_num_seqs=2), cost=IdealCost(h100, llama8b)),
    }
    shares = gate_share_frame(runs).set_index(["case", "gate"])
    for case, result in runs.items():
        stats = gate_stats(result, engine=result.engine)
        steps = result.steps
        kv_time = float(
            steps.duration_s[
                step_gates(steps, max_num_seqs=result.engine.max_num_seqs, max_num_batched_tokens=512).gate == "kv"
            ].sum()
        )
        assert shares.loc[(case, "kv"), "time_s"] == kv_time
        assert (stats["kv_blocked_fraction"] > 0) == (kv_time > 0)
    assert runs["small pool"].summary()["num_preemptions"] > 0


# --- gate_stats: the gate columns of every sweep row, in the one gate vocabulary ---------------


def test_gate_vocabulary_is_admission_gate():
    from budgetlab.admission import Gate
    from budgetlab.metrics import GATE_FRACTION_COLUMNS, GATE_STATS

    assert tuple(g.key for g in Gate) == GATES
    assert GATES == ("slot", "budget", "kv", "none")
    labels = ["sequence slot (max_num_seqs)", "token budget", "KV memory", "nobody waiting"]
    assert [Gate(key).label for key in GATES] == labels
    assert dict(GATE_FRACTION_COLUMNS) == {
        Gate.SLOT: "cap_bound_fraction",
        Gate.BUDGET: "budget_full_fraction",
        Gate.KV: "kv_blocked_fraction",
    }
    assert (*GATE_FRACTION_COLUMNS.values(), "budget_utilization_fraction") == GATE_STATS


def test_gate_stats_by_hand():
    from types import SimpleNamespace

    from budgetlab import EngineConfig
    from budgetlab.metrics import gate_stats

    steps = _steps(
        [
            (0.01, 4, 0, 4, 0, 0),  # nobody waits (at the cap, though)
            (0.02, 4, 0, 4, 3, 0),  # slot
            (0.03, 2, 98, 2, 3, 0),  # budget
            (0.04, 2, 10, 2, 3, 0),  # kv
            (0.05, 4, 96, 4, 3, 1),  # kv (preempted)
        ]
    )
    engine = EngineConfig(max_num_batched_tokens=100, max_num_seqs=4)
    stats = gate_stats(SimpleNamespace(steps=steps), engine=engine)
    # at the cap in steps 1, 2, 5; budget full in 3, 5; KV in 4, 5; (4+4+100+12+100) / 5 / 100 tokens
    expected = {"cap_bound_fraction": 0.6, "budget_full_fraction": 0.4, "kv_blocked_fraction": 0.4}
    assert stats == pytest.approx({**expected, "budget_utilization_fraction": 0.44})
    empty = gate_stats(SimpleNamespace(steps=steps.iloc[:0]), engine=engine)
    assert all(math.isnan(v) for v in empty.values()) and len(empty) == 4


def test_gate_stats_see_the_cap_and_the_kv_pool(ideal):
    from budgetlab import EngineConfig, SyntheticWorkload, Uniform
    from budgetlab.metrics import gate_stats
    from budgetlab.simulator import simulate

    tiny = SyntheticWorkload(prompt=Uniform(100, 600), output=Uniform(10, 60), num_requests=120)
    reqs = tiny.requests(rate_per_s=30.0)
    capped = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=2)
    stats = gate_stats(simulate(reqs, engine=capped, cost=ideal), engine=capped)
    assert stats["cap_bound_fraction"] > 0.5
    assert stats["kv_blocked_fraction"] == 0.0
    small_kv = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, num_kv_blocks=60)
    stats = gate_stats(simulate(reqs, engine=small_kv, cost=ideal), engine=small_kv)
    assert stats["kv_blocked_fraction"] > 0.2
    assert stats["cap_bound_fraction"] == 0.0
    assert 0.0 < stats["budget_utilization_fraction"] <= 1.0


# --- numbers of whole runs, by hand ------------------------------------------------------------


class _Run:
    """A SimResult's shape with three hand-made steps: 1 s (nobody waiting), 2 s (at the cap of 2,
    three waiting), 1 s (one waiting, one preemption); a pool of 100 blocks of 16 tokens."""

    def __init__(self) -> None:
        import pandas as pd

        from budgetlab.specs import EngineConfig

        self.engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=2)
        self.num_kv_blocks = 100
        self.steps = pd.DataFrame(
            {
                "start_at_s": [0.0, 1.0, 3.0],
                "duration_s": [1.0, 2.0, 1.0],
                "num_decode_tokens": [10, 4, 4],
                "num_prefill_tokens": [0, 2044, 0],
                "num_running": [1, 2, 2],
                "num_waiting": [0, 3, 1],
                "num_preemptions": [0, 0, 1],
                "num_free_kv_blocks": [90, 80, 50],
            }
        )

    def summary(self) -> dict[str, float | int]:
        return {"makespan_s": 5.0, "num_preemptions": 1, "ttft_p50_s": 0.5}


def test_gate_shares_by_hand():
    shares = gate_shares(_Run())
    assert shares.index.tolist() == ["slot", "budget", "kv", "none"]
    assert shares.time_s.tolist() == [2.0, 0.0, 1.0, 1.0]
    assert shares.fraction.tolist() == [0.5, 0.0, 0.25, 0.25]  # of 4 s of steps


def test_timeline_by_hand():
    run = _Run()
    assert run_end_s(run) == 4.0
    frame = timeline(run, num_bins=2)
    assert frame.time_s.tolist() == [0.0, 2.0] and frame.max_num_seqs.tolist() == [2, 2]
    assert frame.running_mean.tolist() == pytest.approx([(1 * 1 + 2 * 2) / 3, 2.0])  # weighted by 1 s and 2 s
    assert frame.waiting_mean.tolist() == pytest.approx([(0 * 1 + 3 * 2) / 3, 1.0])
    assert frame.tokens_per_step_mean.tolist() == pytest.approx([(10 * 1 + 2048 * 2) / 3, 4.0])
    assert frame.kv_used_fraction_mean.tolist() == pytest.approx([(0.1 * 1 + 0.2 * 2) / 3, 0.5])
    assert frame.kv_used_fraction_max.tolist() == pytest.approx([0.2, 0.5])
    assert frame.running_max.tolist() == [2, 2] and frame.num_preemptions.tolist() == [0.0, 1.0]
    assert frame.busy_fraction.tolist() == [1.0, 0.5]  # 3 s of steps in a 2 s bin is capped at 1
    wide = timeline(run, num_bins=4, end_s=8.0)  # bins of 2 s up to 8 s: the last two are empty
    assert wide.bin.tolist() == [0, 1]
    with pytest.raises(ValueError, match="num_bins"):
        timeline(run, num_bins=0)


def test_run_numbers_by_hand():
    numbers = run_numbers(_Run())
    assert numbers["policy"] == "vllm-v1" and numbers["scheduling_policy"] == "fcfs" and numbers["max_num_seqs"] == 2
    assert numbers["max_num_batched_tokens"] == 2048 and numbers["long_prefill_token_threshold"] == 0
    assert numbers["num_kv_blocks"] == 100 and numbers["kv_tokens"] == 1600  # 100 blocks of 16 tokens
    assert numbers["ttft_p50_s"] == 0.5 and numbers["num_preemptions"] == 1  # the summary's keys
    assert numbers["running_mean"] == pytest.approx((1 * 1 + 2 * 2 + 2 * 1) / 4)
    assert numbers["tokens_per_step_mean"] == pytest.approx((10 + 2048 * 2 + 4) / 4)
    assert numbers["running_max"] == 2 and numbers["busy_fraction"] == pytest.approx(4 / 5)
