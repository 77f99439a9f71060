"""The compiled core's step record (:mod:`budgetlab.simulator.core_steps`): a decode-only run
of steps kept as one row, regenerated step by step; the inter-token gaps read from the rows,
in memory or selected in passes (:class:`~budgetlab.simulator.compiled.CoreGaps`); and
:func:`budgetlab.metrics.quantile_of_ranked`, the interpolation both share.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from budgetlab import ConstantCost, EngineConfig, IdealCost, Request, hardware, model
from budgetlab.metrics import WeightedGaps, quantile, quantile_of_ranked, summarize
from budgetlab.simulator import compiled, simulate
from budgetlab.simulator import core_state as cs
from budgetlab.simulator.compiled import CoreGaps
from budgetlab.simulator.core_runs import MAX_RUN_STEPS
from budgetlab.simulator.core_steps import NUM_STEP_COLUMNS, expand_steps
from budgetlab.simulator.plan import DECODE, PREFILL

from sim_modes import assert_same


def capped_engine(**kwargs) -> EngineConfig:
    defaults = {
        "max_num_batched_tokens": 100,
        "max_num_seqs": 1,
        "num_kv_blocks": 10,
        "block_size": 4,
        "enable_prefix_caching": False,
        "async_scheduling": False,
    }
    return EngineConfig(**(defaults | kwargs))


# --------------------------------------------------------------------------------------------
# A run's rows, by hand: a (4-token prompt, 9 outputs) alone, block size 4, 10 blocks, one
# sequence slot, a step 1 s. Step 0 prefills 4 tokens (1 block: 9 free); steps 1-8 decode
# (token 5 needs a 2nd block: 8 free; token 9, in step 5, a 3rd: 7 free). b arrives at 3.5 s
# and waits behind the slot from the step that starts at 4 s.
# --------------------------------------------------------------------------------------------

FREE = [9, 8, 8, 8, 8, 7, 7, 7, 7]
WAITING = [0, 0, 0, 0, 1, 1, 1, 1, 1]


@pytest.mark.parametrize(
    ("kind", "run_step_s", "starts"),
    [
        # the core prices the run again: 1 s a step
        (cs.COST_CONSTANT, np.zeros(0), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
        # a cost priced in Python: the run's durations were kept (0.5, 1, ..., 4 s)
        (cs.COST_PYTHON, np.arange(1, 9) / 2, [0.0, 1.0, 1.5, 2.5, 4.0, 6.0, 8.5, 11.5, 15.0]),
    ],
)
def test_a_run_row_expands_into_its_steps_by_hand(kind, run_step_s, starts):
    si = np.zeros((2, len(cs.STEP_INT_FIELDS)), dtype=np.int32)
    sf = np.zeros((2, 4))
    # row 0: the prefill step; its prefix-cache hits as if 3 billion tokens (past int32: a
    # float64 column holds them exactly)
    si[0, [cs.S_PREFILL, cs.S_RUNNING, cs.S_FREE, cs.S_CHUNKS, cs.S_NUM_STEPS]] = [4, 1, 9, 1, 1]
    sf[0] = [0.0, 1.0, 0.0, 3e9]
    # row 1: the 8 decode steps as one run: the counts of its first step
    si[1, [cs.S_DECODE, cs.S_RUNNING, cs.S_FREE, cs.S_COMMON, cs.S_CHUNKS, cs.S_NUM_STEPS]] = [1, 1, 8, 1, 1, 8]
    sf[1] = [1.0, run_step_s[0] if len(run_step_s) else 1.0, 4.0, 0.0]
    runs = np.zeros((2, len(cs.RUN_FIELDS)), dtype=np.int32)
    runs[0, [cs.R_REQUEST, cs.R_FIRST_STEP, cs.R_NUM_STEPS, cs.R_START, cs.R_TOKENS, cs.R_KIND]] = [
        0,
        0,
        1,
        0,
        4,
        PREFILL,
    ]
    runs[1, [cs.R_REQUEST, cs.R_FIRST_STEP, cs.R_NUM_STEPS, cs.R_START, cs.R_TOKENS, cs.R_KIND]] = [
        0,
        1,
        8,
        4,
        1,
        DECODE,
    ]
    arrival = np.array([0.0, 3.5])
    floats, ints = expand_steps(sf, si, 9, arrival, runs, 4, kind, np.array([1.0]), run_step_s, np.empty(MAX_RUN_STEPS))
    assert floats[:, 0].tolist() == starts
    assert floats[:, 1].tolist() == [1.0, *(run_step_s if len(run_step_s) else [1.0] * 8)]
    assert ints.shape == (9, NUM_STEP_COLUMNS)
    assert ints[:, cs.S_FREE].tolist() == FREE
    assert ints[:, cs.S_WAITING].tolist() == WAITING
    assert ints[:, cs.S_DECODE].tolist() == [0] + [1] * 8
    assert ints[:, cs.S_PREFILL].tolist() == [4] + [0] * 8
    assert ints[:, cs.S_COMMON].tolist() == [0] + [1] * 8
    assert floats[:, 2].tolist() == [3e9] + [0.0] * 8


@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_the_simulated_run_gives_the_hand_worked_steps(mode):
    reqs = [Request("a", 0.0, 4, 9), Request("b", 3.5, 4, 2)]
    result = simulate(reqs, engine=capped_engine(), cost=ConstantCost(1.0), mode=mode)
    steps = result.steps.iloc[:9]
    assert steps["num_free_kv_blocks"].tolist() == FREE
    assert steps["num_waiting"].tolist() == WAITING
    assert steps["start_at_s"].tolist() == [float(s) for s in range(9)]
    if mode == "fast":  # a's prefill, its decode run; b's prefill, its decode
        assert result.num_records == 4


# --------------------------------------------------------------------------------------------
# The gaps: in memory, or selected 16 bits a pass, give quantile()'s numbers bit for bit
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def varied_run():
    rng = np.random.default_rng(11)
    n = 300
    reqs = [
        Request(i, float(t), int(p), int(o))
        for i, (t, p, o) in enumerate(
            zip(np.sort(rng.uniform(0, 3, n)), rng.integers(1, 400, n), rng.integers(1, 120, n))
        )
    ]
    cost = IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))
    eng = EngineConfig(max_num_batched_tokens=256, max_num_seqs=24, num_kv_blocks=900)
    return reqs, eng, cost


def test_gaps_selected_in_passes_equal_those_gathered_in_memory(varied_run, monkeypatch):
    reqs, eng, cost = varied_run
    gathered = simulate(reqs, engine=eng, cost=cost, mode="fast")
    gaps = gathered._record.gaps
    assert isinstance(gaps, CoreGaps) and gaps.num_entries <= compiled.MAX_GAPS_IN_MEMORY
    monkeypatch.setattr(compiled, "MAX_GAPS_IN_MEMORY", 0)
    streamed = simulate(reqs, engine=eng, cost=cost, mode="fast")
    qs = np.array([0.0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0])
    assert streamed._record.gaps.quantile(qs).tolist() == gaps.quantile(qs).tolist()
    assert streamed._record.gaps.max_s() == gaps.max_s()
    assert_same(gathered, streamed)
    assert_same(simulate(reqs, engine=eng, cost=cost, mode="reference"), streamed)


def test_quantile_of_ranked_is_numpys_interpolation():
    rng = np.random.default_rng(5)
    values = np.sort(rng.lognormal(size=1001))
    qs = np.linspace(0, 1, 37)
    by_rank = quantile_of_ranked(qs, len(values), lambda ranks: values[ranks])
    assert np.asarray(by_rank).tolist() == np.quantile(values, qs).tolist()
    assert quantile_of_ranked(0.5, 3, lambda ranks: np.array([1.0, 2.0, 4.0])[ranks]) == 2.0
    assert np.isnan(quantile_of_ranked(0.5, 0, lambda ranks: ranks))
    # weights: 1.0 twice, 3.0 once = the sample (1, 1, 3)
    assert quantile([1.0, 3.0], 0.5, weights=[2, 1]) == 1.0


def test_summarize_takes_the_gaps_one_way():
    common = {
        "arrival_at_s": np.zeros(1),
        "first_token_at_s": np.ones(1),
        "finished_at_s": np.full(1, 3.0),
        "output_tokens": np.array([3]),
        "prompt_tokens": np.array([5]),
        "num_preemptions": 0,
        "kv_peak_blocks": 1,
        "num_kv_blocks": 10,
        "num_steps": 3,
    }
    pairs = summarize(gap_values_s=np.array([1.0]), gap_weights=np.array([2]), **common)
    sample = summarize(gaps=WeightedGaps(np.array([1.0]), np.array([2])), **common)
    assert pairs == sample and pairs["itl_p50_s"] == 1.0 and pairs["max_itl_s"] == 1.0
    with pytest.raises(TypeError, match="gap_values_s with gap_weights, or as gaps"):
        summarize(**common)
    with pytest.raises(TypeError, match="gap_values_s with gap_weights, or as gaps"):
        summarize(gap_values_s=np.array([1.0]), gap_weights=np.array([2]), gaps=sample, **common)


def test_a_run_past_what_one_simulation_records_is_an_error(monkeypatch):
    # 2^30 steps take hours to reach: the core's status is stood in for (the driver calls
    # the dispatcher once, then its compiled entry point)
    def too_long(core):
        return cs.TOO_LONG

    too_long.overloads = defaultdict(lambda: SimpleNamespace(entry_point=too_long))  # type: ignore[attr-defined]
    monkeypatch.setattr(compiled, "advance", too_long)
    with pytest.raises(ValueError, match="simulate the workload in parts"):
        simulate([Request("a", 0.0, 4, 9)], engine=capped_engine(), cost=ConstantCost(1.0), mode="fast")
