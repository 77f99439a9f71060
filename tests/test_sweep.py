"""Load sweeps, SLOs and capacity under an SLO (budgetlab.sweep)."""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import math
import pickle
import threading

import numpy as np
import pandas as pd
import pytest

from budgetlab import ConfigError, EngineConfig, ParameterError, Request, RequestTooLargeError
from budgetlab.simulator import simulate
from budgetlab.sweep import (
    GATE_STATS,
    KNOB_COLUMNS,
    SLO,
    SLO_METRICS,
    CapacityAboveBoundsError,
    SerialExecutor,
    SLOUnattainableError,
    SyntheticWorkload,
    TraceWorkload,
    Violation,
    capacity,
    gate_stats,
    max_service_rate_per_s,
    sweep,
)
from budgetlab.workload import Fixed, Uniform

HW, MODEL = "h100-sxm", "llama-3.1-8b"
SMALL = SyntheticWorkload.conversation_like(num_requests=200)
TINY = SyntheticWorkload(prompt=Uniform(100, 600), output=Uniform(10, 60), num_requests=120, label="tiny")
ENGINE = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
SLO_SEED = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


def test_synthetic_workload_common_random_numbers():
    slow = SMALL.requests(rate_per_s=2.0, seed=3)
    fast = SMALL.requests(rate_per_s=8.0, seed=3)
    assert [(r.request_id, r.prompt_tokens, r.output_tokens) for r in slow] == [
        (r.request_id, r.prompt_tokens, r.output_tokens) for r in fast
    ]
    np.testing.assert_allclose([r.arrival_at_s for r in slow], [4.0 * r.arrival_at_s for r in fast], rtol=1e-12)
    assert slow[0].arrival_at_s == 0.0
    assert SMALL.requests(rate_per_s=2.0, seed=3) == slow  # deterministic
    assert SMALL.requests(rate_per_s=2.0, seed=4) != slow
    assert len(slow) == 200


def test_synthetic_workload_presets_and_validation():
    assert SyntheticWorkload.conversation_like().label == "conversation-like"
    assert SyntheticWorkload.code_like(num_requests=10).num_requests == 10
    with pytest.raises(ParameterError, match="num_requests"):
        SyntheticWorkload(prompt=10, output=10, num_requests=0)
    with pytest.raises(ValueError, match="gamma"):
        SyntheticWorkload(prompt=10, output=10, cv=2.0)
    with pytest.raises(ParameterError, match="rate_per_s"):
        SMALL.requests(rate_per_s=0.0)
    w = SyntheticWorkload(prompt=100, output=Fixed(20), num_requests=5)
    assert w.mean_sequence_tokens() == 120.0


def test_trace_workload_replays_at_any_rate():
    reqs = [Request(i, 10.0 + 2.0 * i, 100 + i, 5) for i in range(11)]  # 0.5 req/s, starts at 10 s
    trace = TraceWorkload.from_requests(reqs, label="t")
    assert trace.native_rate_per_s == pytest.approx(0.5)
    assert trace.time_scale_for(1.0) == pytest.approx(0.5)
    assert trace.rate_for(0.25) == pytest.approx(2.0)
    replay = trace.requests(rate_per_s=1.0, seed=7)
    assert [r.arrival_at_s for r in replay] == pytest.approx([float(i) for i in range(11)])
    assert [r.prompt_tokens for r in replay] == [100 + i for i in range(11)]
    assert trace.mean_sequence_tokens() == pytest.approx(110.0)
    assert "0.5 req/s" in repr(trace)
    with pytest.raises(ParameterError, match="at least two requests"):
        TraceWorkload.from_requests(reqs[:1])


@pytest.mark.parametrize(
    ("arrivals", "prompts", "outputs", "match"),
    [
        # Fractional token counts used to be truncated silently by the int64 cast (12.5 -> 12).
        ([0.0, 1.0], [12.5, 3], [1, 1], "whole numbers"),
        ([0.0, 1.0], [12, 3], [1, 2.5], "whole numbers"),
        ([0.0, 1.0], [12, np.nan], [1, 1], "whole numbers"),
        # A NaN arrival inside the trace used to pass the order check (NaN < x is False).
        ([0.0, np.nan, 2.0], [1, 1, 1], [1, 1, 1], "finite"),
        ([0.0, 1.0, np.inf], [1, 1, 1], [1, 1, 1], "finite"),
    ],
)
def test_trace_workload_refuses_what_it_would_silently_change(arrivals, prompts, outputs, match):
    with pytest.raises(ParameterError, match=match):
        TraceWorkload(np.array(arrivals), np.array(prompts), np.array(outputs))


def test_trace_workload_from_shared_csv(shared_traces):
    trace = TraceWorkload.from_csv(shared_traces / "splitwise_conv.csv", max_requests=500)
    assert trace.label == "splitwise_conv" and trace.num_requests == 500
    replay = trace.requests(rate_per_s=10.0)
    rate = (len(replay) - 1) / (replay[-1].arrival_at_s - replay[0].arrival_at_s)
    assert rate == pytest.approx(10.0)


def test_workloads_pickle():
    trace = TraceWorkload.from_requests([Request(i, float(i), 10, 3) for i in range(5)])
    for w in (SMALL, trace):
        back = pickle.loads(pickle.dumps(w))
        assert back.requests(rate_per_s=3.0, seed=1) == w.requests(rate_per_s=3.0, seed=1)


# --------------------------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------------------------

GRID = dict(budgets=[512, 2048], max_num_seqs=[8, 64], rates_per_s=[2.0, 12.0], seeds=[0, 1], hardware=HW, model=MODEL)


class _ReverseExecutor(cf.Executor):
    """Completes futures in reverse submission order, once ``expected`` tasks are in."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.pending: list[tuple[cf.Future, object]] = []
        self.order: list[int] = []

    def submit(self, fn, /, *args, **kwargs):
        future: cf.Future = cf.Future()
        self.pending.append((future, lambda: fn(*args, **kwargs)))
        if len(self.pending) == self.expected:
            threading.Thread(target=self._finish).start()
        return future

    def _finish(self) -> None:
        for i, (future, call) in reversed(list(enumerate(self.pending))):
            self.order.append(i)
            future.set_result(call())


@pytest.fixture(scope="module")
def serial_table() -> pd.DataFrame:
    return sweep(TINY, **GRID, executor=SerialExecutor(), progress=False)


def test_sweep_rows_in_grid_order(serial_table):
    table = serial_table
    expected = list(itertools.product([512, 2048], [8, 64], [0, 1], [2.0, 12.0]))
    got = list(table[["max_num_batched_tokens", "max_num_seqs", "seed", "rate_per_s"]].itertuples(index=False, name=None))
    assert got == expected
    assert list(table.columns[: len(KNOB_COLUMNS)]) == list(KNOB_COLUMNS)
    for key in ("ttft_p90_s", "itl_p99_s", "requests_per_s", "kv_peak_fraction", "num_kv_blocks", *GATE_STATS):
        assert key in table.columns
    assert (table["hardware"] == HW).all() and (table["cost"] == "ideal").all()
    assert (table["workload"] == "tiny").all() and (table["num_requests"] == 120).all()
    # the sweep row is the simulation's own summary
    row = table.iloc[5]
    engine = EngineConfig(max_num_batched_tokens=int(row.max_num_batched_tokens), max_num_seqs=int(row.max_num_seqs))
    from budgetlab import IdealCost, hardware, model

    result = simulate(
        TINY.requests(rate_per_s=row.rate_per_s, seed=int(row.seed)),
        engine=engine,
        cost=IdealCost(hardware(HW), model(MODEL)),
    )
    for key, value in result.summary().items():
        assert row[key] == value or (math.isnan(value) and math.isnan(row[key]))


def test_sweep_order_independent_of_completion_order(serial_table):
    executor = _ReverseExecutor(expected=len(serial_table))
    table = sweep(TINY, **GRID, executor=executor, progress=False)
    assert executor.order[0] == len(serial_table) - 1  # really completed backwards
    pd.testing.assert_frame_equal(table, serial_table)


def test_sweep_process_pool_matches_serial(serial_table):
    table = sweep(TINY, **GRID, progress=True)  # default: a local process pool
    pd.testing.assert_frame_equal(table, serial_table)
    with cf.ProcessPoolExecutor(max_workers=2) as pool:
        pd.testing.assert_frame_equal(sweep(TINY, **GRID, executor=pool, progress=False), serial_table)


def test_sweep_axes_of_hardware_models_costs_and_time_scales():
    trace = TraceWorkload.from_requests(TINY.requests(rate_per_s=1.0), label="replayed")
    table = sweep(
        trace,
        budgets=1024,
        max_num_seqs=32,
        time_scales=[1.0, 0.25],
        hardware=[HW, "h200-sxm"],
        model=MODEL,
        cost=["ideal", "typical"],
        executor=SerialExecutor(),
    )
    assert list(table["hardware"]) == [HW] * 4 + ["h200-sxm"] * 4
    assert list(table["cost"]) == ["ideal", "ideal", "typical", "typical"] * 2
    assert list(table["time_scale"]) == [1.0, 0.25] * 4
    assert table["rate_per_s"].iloc[1] == pytest.approx(4 * table["rate_per_s"].iloc[0])
    assert (table["workload"] == "replayed").all()


def test_sweep_cost_factories_and_instances(ideal):
    from budgetlab import IdealCost
    from budgetlab.calibrated import CalibratedCost

    args = dict(budgets=1024, max_num_seqs=32, rates_per_s=5.0, model=MODEL, executor=SerialExecutor())
    by_name = sweep(TINY, hardware=HW, cost="ideal", **args)
    by_class = sweep(TINY, hardware=HW, cost=IdealCost, **args)
    by_instance = sweep(TINY, hardware=HW, cost=ideal, **args)
    assert list(by_class["cost"]) == list(by_instance["cost"]) == ["IdealCost"]
    summary_cols = by_name.columns.drop("cost")
    pd.testing.assert_frame_equal(by_name[summary_cols], by_class[summary_cols])
    pd.testing.assert_frame_equal(by_name[summary_cols], by_instance[summary_cols])
    typical = sweep(TINY, hardware=HW, cost=CalibratedCost.typical, **args)
    assert list(typical["cost"]) == ["CalibratedCost.typical"]
    with pytest.raises(ParameterError, match="built for 'h100-sxm'"):
        sweep(TINY, hardware="h200-sxm", cost=ideal, **args)
    with pytest.raises(ParameterError, match="returned int"):
        sweep(TINY, hardware=HW, cost=lambda hw, m: 3, **args)


def test_sweep_budget_below_cap_is_refused_or_skipped():
    with pytest.raises(ConfigError, match="256/512"):
        sweep(TINY, budgets=[256, 1024], max_num_seqs=[512], rates_per_s=1.0, hardware=HW, model=MODEL)
    table = sweep(
        TINY, budgets=[256, 1024], max_num_seqs=[512], rates_per_s=1.0, hardware=HW, model=MODEL,
        skip_invalid=True, executor=SerialExecutor(),
    )
    assert list(table["max_num_batched_tokens"]) == [1024]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (dict(budgets=[]), "budgets is empty"),
        (dict(budgets=[512, 512]), "repeats 512"),
        (dict(rates_per_s=[1.0, -2.0]), r"rates_per_s\[1\]"),
        (dict(rates_per_s=None), "exactly one"),
        (dict(time_scales=[1.0]), "exactly one"),
        (dict(rates_per_s=None, time_scales=[1.0]), "synthetic"),
        (dict(cost="ideel"), "Did you mean 'ideal'"),
        (dict(seeds=[-1]), "seeds"),
        (dict(hardware=3), "hardware"),
        (dict(executor=object()), "concurrent.futures.Executor"),
        (dict(progress="yes"), "progress"),
    ],
)
def test_sweep_argument_errors(changes, match):
    args = dict(budgets=[512], max_num_seqs=[8], rates_per_s=[1.0], hardware=HW, model=MODEL, executor=SerialExecutor())
    args.update(changes)
    with pytest.raises(ParameterError, match=match):
        sweep(TINY, **args)


def test_sweep_needs_a_regenerable_workload():
    with pytest.raises(ParameterError, match="TraceWorkload.from_requests"):
        sweep(TINY.requests(rate_per_s=1.0), budgets=512, max_num_seqs=8, rates_per_s=1.0, hardware=HW, model=MODEL)


def test_sweep_failure_names_the_grid_point():
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, max_model_len=300)
    with pytest.raises(RequestTooLargeError) as info:
        sweep(TINY, budgets=512, max_num_seqs=8, rates_per_s=1.0, hardware=HW, model=MODEL, engine=engine,
              executor=SerialExecutor())
    assert "grid point 0" in "".join(info.value.__notes__)


def test_serial_executor_refuses_after_shutdown():
    ex = SerialExecutor()
    assert ex.submit(pow, 2, 5).result() == 32
    with pytest.raises(ZeroDivisionError):
        ex.submit(lambda: 1 / 0).result()
    ex.shutdown()
    with pytest.raises(RuntimeError):
        ex.submit(pow, 2, 5)


# --------------------------------------------------------------------------------------------
# Gate diagnostics
# --------------------------------------------------------------------------------------------


def test_gate_stats_see_the_cap_and_the_kv_pool(ideal):
    reqs = TINY.requests(rate_per_s=30.0)
    capped = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=2)
    stats = gate_stats(simulate(reqs, engine=capped, cost=ideal), engine=capped)
    assert stats["cap_bound_fraction"] > 0.5
    assert stats["kv_blocked_fraction"] == 0.0
    small_kv = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, num_kv_blocks=60)
    stats = gate_stats(simulate(reqs, engine=small_kv, cost=ideal), engine=small_kv)
    assert stats["kv_blocked_fraction"] > 0.2
    assert stats["cap_bound_fraction"] == 0.0
    assert 0.0 < stats["budget_utilization_fraction"] <= 1.0


# --------------------------------------------------------------------------------------------
# SLOs
# --------------------------------------------------------------------------------------------


def test_slo_holds_and_violations_worst_first():
    slo = SLO(ttft_p90_s=0.8, itl_p99_s=0.040, e2e_p99_s=20.0)
    assert slo.limits == {"ttft_p90_s": 0.8, "itl_p99_s": 0.040, "e2e_p99_s": 20.0}
    summary = {"ttft_p90_s": 0.9, "itl_p99_s": 0.060, "e2e_p99_s": 5.0}
    found = slo.violations(summary)
    assert [v.metric for v in found] == ["itl_p99_s", "ttft_p90_s"]  # 1.5x over, then 1.125x
    assert found[0] == Violation("itl_p99_s", 0.060, 0.040)
    assert str(found[0]) == "itl_p99_s = 60 ms > 40 ms"
    assert not slo.holds(summary)
    assert slo.holds({"ttft_p90_s": 0.8, "itl_p99_s": 0.040, "e2e_p99_s": 20.0})  # at the limit holds
    assert SLO(itl_p99_s=0.04).holds({"itl_p99_s": math.nan})  # no gaps: nothing to violate
    assert str(SLO(ttft_p90_s=0.8, itl_p99_s=0.040)) == "ttft_p90_s ≤ 800 ms and itl_p99_s ≤ 40 ms"
    with pytest.raises(KeyError, match="ttft_p90_s"):
        slo.violations({"itl_p99_s": 0.01})


def test_slo_itl_target_is_the_tightest_inter_token_limit():
    assert SLO(ttft_p90_s=0.5).itl_target_s is None
    slo = SLO(itl_p90_s=0.05, itl_p99_s=0.08, max_itl_s=0.03)
    assert slo.itl_target_s == 0.03 and slo.itl_target_metric == "max_itl_s"


@pytest.mark.parametrize(
    ("limits", "match"),
    [
        ({}, "at least one limit"),
        ({"ttft_p90_s": 0.0}, "> 0"),
        ({"ttft_p90_s": -1.0}, "> 0"),
        ({"itl_p99_s": math.inf}, "finite"),
        ({"itl_p99_s": "40ms"}, "number of seconds"),
        ({"itl_p99_s": True}, "number of seconds"),
        ({"itl_p99_s": 40_000}, "for 40000 ms write 40"),
        ({"itl_p99_ms": 40}, r"'itl_p99_s': 40 / 1000"),
        ({"tfft_p90_s": 1.0}, "Did you mean 'ttft_p90_s'"),
        ({"throughput": 1.0}, "The metrics are"),
    ],
)
def test_slo_parsing_errors(limits, match):
    with pytest.raises(ParameterError, match=match):
        SLO.from_dict(limits)


def test_slo_from_dict_round_trip():
    assert SLO.from_dict({"ttft_p90_s": 0.8, "itl_p99_s": 0.04}) == SLO_SEED
    assert set(SLO_METRICS) == {f.name for f in SLO.__dataclass_fields__.values()}
    with pytest.raises(ParameterError, match="mapping"):
        SLO.from_dict([("ttft_p90_s", 0.8)])


# --------------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_capacity():
    return capacity(SMALL, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL)


def test_capacity_brackets_the_slo_boundary(seed_capacity):
    result = seed_capacity
    assert SLO_SEED.holds(result.summary)
    assert not SLO_SEED.holds(result.summary_above)
    assert result.upper_per_s > result.capacity_per_s
    assert result.upper_per_s / result.capacity_per_s - 1 <= result.tolerance_fraction
    assert result.bracket_per_s == (result.capacity_per_s, result.upper_per_s)
    assert result.binding_limit == result.breaking[0].metric
    assert result.num_simulations == len(result.evaluations) <= 14
    evals = result.evaluations
    assert (evals.loc[evals.holds, "rate_per_s"] <= result.capacity_per_s).all()
    assert (evals.loc[~evals.holds, "rate_per_s"] >= result.upper_per_s).all()
    assert "req/s" in str(result)
    again = capacity(SMALL, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL)
    assert again.capacity_per_s == result.capacity_per_s


def test_capacity_with_explicit_bounds_agrees(seed_capacity):
    lo, hi = seed_capacity.capacity_per_s / 3, seed_capacity.upper_per_s * 1.5
    result = capacity(SMALL, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL, rate_bounds_per_s=(lo, hi))
    assert result.capacity_per_s == pytest.approx(seed_capacity.capacity_per_s, rel=0.05)


@pytest.mark.parametrize(
    ("tight", "loose"),
    [
        (SLO(ttft_p90_s=0.3, itl_p99_s=0.040), SLO(ttft_p90_s=0.8, itl_p99_s=0.040)),
        (SLO(ttft_p90_s=0.8, itl_p99_s=0.040), SLO(ttft_p90_s=0.8)),
        (SLO(ttft_p99_s=0.5), SLO(ttft_p99_s=2.0)),
    ],
)
def test_looser_slo_never_lowers_capacity(tight, loose):
    bounds = (1.0, 200.0)
    args = dict(engine=ENGINE, hardware=HW, model=MODEL, rate_bounds_per_s=bounds)
    assert capacity(SMALL, slo=loose, **args).capacity_per_s >= capacity(SMALL, slo=tight, **args).capacity_per_s
    # and with the automatic bracket
    args.pop("rate_bounds_per_s")
    assert capacity(SMALL, slo=loose, **args).capacity_per_s >= capacity(SMALL, slo=tight, **args).capacity_per_s


@pytest.mark.parametrize("cost", ["ideal", "typical"])
def test_faster_gpu_never_lowers_capacity(cost):
    args = dict(slo=SLO(ttft_p90_s=0.5, itl_p99_s=0.060), engine=ENGINE, model=MODEL, cost=cost)
    h100 = capacity(SMALL, hardware="h100-sxm", **args).capacity_per_s
    h200 = capacity(SMALL, hardware="h200-sxm", **args).capacity_per_s
    assert h200 >= h100


def test_capacity_near_the_service_rate_with_enough_requests(ideal):
    workload = SyntheticWorkload.conversation_like(num_requests=1500)
    result = capacity(workload, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL)
    service = max_service_rate_per_s(ideal, max_num_batched_tokens=2048, mean_sequence_tokens=workload.mean_sequence_tokens())
    assert 0.5 * service < result.capacity_per_s < 1.1 * service


def test_capacity_when_even_the_lowest_load_fails():
    long_prompts = SyntheticWorkload(prompt=6000, output=50, num_requests=200)
    big_budget = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=128)
    with pytest.raises(SLOUnattainableError, match="max_itl_s") as info:
        capacity(long_prompts, slo=SLO(max_itl_s=0.040), engine=big_budget, hardware=HW, model=MODEL,
                 rate_bounds_per_s=(0.5, 50.0))
    assert "lower max_num_batched_tokens" in str(info.value)
    assert info.value.violations[0].metric == "max_itl_s" and info.value.rate_per_s == 0.5
    with pytest.raises(SLOUnattainableError, match="one-token step takes 4.79 ms"):
        capacity(SMALL, slo=SLO(itl_p50_s=0.004), engine=ENGINE, hardware=HW, model=MODEL)
    small_budget = EngineConfig(max_num_batched_tokens=256, max_num_seqs=128)
    with pytest.raises(SLOUnattainableError, match="raise max_num_batched_tokens"):
        capacity(SMALL, slo=SLO(ttft_p90_s=0.05), engine=small_budget, hardware=HW, model=MODEL,
                 rate_bounds_per_s=(0.5, 50.0))


def test_capacity_when_the_highest_load_passes():
    with pytest.raises(CapacityAboveBoundsError, match="upper end"):
        capacity(SMALL, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL, rate_bounds_per_s=(0.5, 1.0))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (dict(slo={"ttft_p90_s": 0.8}), "slo must be an SLO"),
        (dict(tolerance_fraction=0.0), "tolerance_fraction"),
        (dict(rate_bounds_per_s=(5.0, 1.0)), "low < high"),
        (dict(rate_bounds_per_s=5.0), "pair"),
        (dict(engine=None), "EngineConfig"),
    ],
)
def test_capacity_argument_errors(changes, match):
    args = dict(slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL)
    args.update(changes)
    with pytest.raises(ParameterError, match=match):
        capacity(SMALL, **args)


# --------------------------------------------------------------------------------------------
# Capacity of several configurations: outcomes instead of errors
# --------------------------------------------------------------------------------------------


def test_run_capacity_task_reports_every_ending_as_an_outcome():
    from budgetlab.sweep import CapacityTask, run_capacity_task

    task = CapacityTask(workload=SMALL, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL)
    found = run_capacity_task(task)
    assert found.status == "ok" and found.rate_per_s == found.result.capacity_per_s
    row = found.row("ttft_p90_s")
    assert row["capacity_per_s"] == found.result.capacity_per_s and row["breaks_on"] == found.violations[0].metric
    assert row["ttft_p90_s"] == found.result.summary["ttft_p90_s"]
    failing = run_capacity_task(dataclass_replace(task, slo=SLO(ttft_p90_s=0.001)))
    assert failing.status == "fails at every load" and failing.result is None and "fails even at" in failing.message
    assert failing.violations[0].metric == "ttft_p90_s"
    assert math.isnan(failing.row("ttft_p90_s")["capacity_per_s"]) and math.isnan(failing.row("ttft_p90_s")["ttft_p90_s"])
    holding = run_capacity_task(dataclass_replace(task, rate_bounds_per_s=(0.5, 1.0)))
    assert holding.status == "holds at every load" and holding.violations == () and holding.rate_per_s == 1.0
    pickle.loads(pickle.dumps(task))  # ships to worker processes


def dataclass_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_slo_bracket_from_a_sweep():
    from budgetlab.sweep import slo_bracket_per_s

    table = pd.DataFrame({"rate_per_s": [3.0, 1.0, 2.0], "ttft_p90_s": [2.0, 0.1, 0.5]})
    assert slo_bracket_per_s(table, SLO(ttft_p90_s=0.8)) == (2.0, 3.0)
    assert slo_bracket_per_s(table, SLO(ttft_p90_s=5.0)) is None  # holds everywhere
    assert slo_bracket_per_s(table, SLO(ttft_p90_s=0.01)) is None  # fails at the lowest load


def test_service_rate_is_the_best_budget_and_mean_sequence_tokens(ideal):
    from budgetlab.sweep import mean_sequence_tokens, service_rate_per_s

    mean = mean_sequence_tokens(SMALL)
    assert mean == SMALL.mean_sequence_tokens()
    rates = [max_service_rate_per_s(ideal, max_num_batched_tokens=b, mean_sequence_tokens=mean) for b in (512, 4096)]
    assert service_rate_per_s(SMALL, budgets=[512, 4096], hardware=HW, model=MODEL) == max(rates)


def test_fixed_length_twins_keep_the_arrivals():
    twin = SMALL.with_fixed_lengths(seed=2)
    real = SMALL.requests(rate_per_s=3.0, seed=2)
    fixed = twin.requests(rate_per_s=3.0, seed=2)
    assert [r.arrival_at_s for r in real] == [r.arrival_at_s for r in fixed]
    assert twin.prompt == Fixed(round(np.mean([r.prompt_tokens for r in real])))
    assert twin.label == f"fixed lengths ({twin.prompt.tokens:,} + {twin.output.tokens:,} tokens)"
    trace = TraceWorkload([0.0, 1.0, 3.0], [10, 20, 33], [1, 2, 4])
    trace_twin = trace.with_fixed_lengths()
    assert trace_twin.prompt_tokens.tolist() == [21, 21, 21] and trace_twin.output_tokens.tolist() == [2, 2, 2]
    assert np.array_equal(trace_twin.arrival_at_s, trace.arrival_at_s)
