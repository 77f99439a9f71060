"""Load sweeps, SLOs, capacity under an SLO and the executors (budgetlab.experiments)."""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import json
import math
import pickle
import threading

import pandas as pd
import pytest

from budgetlab import ConfigError, EngineConfig, ParameterError, RequestTooLargeError
from budgetlab.errors import CapacityAboveBoundsError, SLOUnattainableError
from budgetlab.experiments.capacity import capacity, why_no_capacity
from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.slo import SLO, SLO_METRICS, Violation
from budgetlab.experiments.sweep import (
    KNOB_COLUMNS,
    load_grid,
    max_service_rate_per_s,
    percentiles_by_budget,
    sweep,
)
from budgetlab.metrics import GATE_STATS
from budgetlab.simulator import simulate
from budgetlab.workload import SyntheticWorkload, TraceWorkload, Uniform

HW, MODEL = "h100-sxm", "llama-3.1-8b"
SMALL = SyntheticWorkload.conversation_like(num_requests=200)
TINY = SyntheticWorkload(prompt=Uniform(100, 600), output=Uniform(10, 60), num_requests=120, label="tiny")
ENGINE = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
SLO_SEED = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)


# --------------------------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------------------------

GRID = dict(
    budgets=[512, 2048],
    max_num_seqs=[8, 64],
    rates_per_s=[2.0, 12.0],
    seed=[0, 1],
    hardware=HW,
    model=MODEL,
    cost="ideal",
)


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
    got = list(
        table[["max_num_batched_tokens", "max_num_seqs", "seed", "rate_per_s"]].itertuples(index=False, name=None)
    )
    assert got == expected
    assert list(table.columns[: len(KNOB_COLUMNS)]) == list(KNOB_COLUMNS)
    for key in ("ttft_p90_s", "itl_p99_s", "requests_per_s", "kv_peak_fraction", "num_kv_blocks", *GATE_STATS):
        assert key in table.columns
    assert (table["hardware"] == HW).all() and (table["cost"] == "ideal").all()
    assert (table["workload"] == "tiny").all() and (table["num_requests"] == 120).all()
    assert (table["policy"] == "vllm-v1").all() and (table["scheduling_policy"] == "fcfs").all()
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
    from budgetlab.cost import CalibratedCost

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
        TINY,
        budgets=[256, 1024],
        max_num_seqs=[512],
        rates_per_s=1.0,
        hardware=HW,
        model=MODEL,
        skip_invalid=True,
        executor=SerialExecutor(),
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
        (dict(seed=[-1]), r"seed\[0\]"),
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
    with pytest.raises(ParameterError, match=r"TraceWorkload\.from_requests"):
        sweep(TINY.requests(rate_per_s=1.0), budgets=512, max_num_seqs=8, rates_per_s=1.0, hardware=HW, model=MODEL)


def test_sweep_failure_names_the_grid_point():
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, max_model_len=300)
    with pytest.raises(RequestTooLargeError) as info:
        sweep(
            TINY,
            budgets=512,
            max_num_seqs=8,
            rates_per_s=1.0,
            hardware=HW,
            model=MODEL,
            engine=engine,
            executor=SerialExecutor(),
        )
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
    assert str(SLO(ttft_p90_s=0.8, itl_p99_s=0.040)) == "TTFT p90 ≤ 800 ms and ITL p99 ≤ 40 ms"  # the one SLO formatter
    assert str(SLO(max_itl_s=0.25)) == "longest gap ≤ 250 ms"
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
    result = capacity(workload, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL, cost="ideal")
    service = max_service_rate_per_s(
        ideal, max_num_batched_tokens=2048, mean_sequence_tokens=workload.mean_sequence_tokens()
    )
    assert 0.5 * service < result.capacity_per_s < 1.1 * service


def test_capacity_when_even_the_lowest_load_fails():
    long_prompts = SyntheticWorkload(prompt=6000, output=50, num_requests=200)
    big_budget = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=128)
    wide = dict(hardware=HW, model=MODEL, cost="ideal", rate_bounds_per_s=(0.5, 50.0))
    with pytest.raises(SLOUnattainableError, match="max_itl_s") as info:
        capacity(long_prompts, slo=SLO(max_itl_s=0.040), engine=big_budget, **wide)
    assert "lower max_num_batched_tokens" in str(info.value)
    assert info.value.violations[0].metric == "max_itl_s" and info.value.rate_per_s == 0.5
    with pytest.raises(SLOUnattainableError, match=r"one-token step takes 4\.79 ms"):
        capacity(SMALL, slo=SLO(itl_p50_s=0.004), engine=ENGINE, hardware=HW, model=MODEL, cost="ideal")
    small_budget = EngineConfig(max_num_batched_tokens=256, max_num_seqs=128)
    with pytest.raises(SLOUnattainableError, match="raise max_num_batched_tokens"):
        capacity(SMALL, slo=SLO(ttft_p90_s=0.05), engine=small_budget, **wide)


def test_capacity_when_the_highest_load_passes():
    with pytest.raises(CapacityAboveBoundsError, match="upper end"):
        capacity(SMALL, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL, rate_bounds_per_s=(0.5, 1.0))


def test_both_ends_of_a_capacity_search_share_one_error_base():
    from budgetlab.errors import BudgetlabError, CapacitySearchError

    broke = Violation(metric="ttft_p90_s", value_s=0.9, limit_s=0.8)
    low = SLOUnattainableError("fails at 0.5 req/s", rate_per_s=0.5, violations=[broke])
    high = CapacityAboveBoundsError("holds at 50 req/s")
    for error in (low, high):
        assert isinstance(error, CapacitySearchError)
        assert isinstance(error, BudgetlabError) and isinstance(error, ValueError)
    assert (str(low), low.rate_per_s, low.violations) == ("fails at 0.5 req/s", 0.5, (broke,))
    assert math.isnan(high.rate_per_s) and high.violations == ()
    assert not issubclass(SLOUnattainableError, CapacityAboveBoundsError)


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
    from budgetlab.experiments.capacity import CapacityTask, run_capacity_task

    task = CapacityTask(workload=SMALL, slo=SLO_SEED, engine=ENGINE, hardware=HW, model=MODEL)
    found = run_capacity_task(task)
    assert found.status == "ok" and found.rate_per_s == found.result.capacity_per_s
    row = found.row("ttft_p90_s")
    assert row["capacity_per_s"] == found.result.capacity_per_s and row["breaks_on"] == found.violations[0].metric
    assert row["ttft_p90_s"] == found.result.summary["ttft_p90_s"]
    failing = run_capacity_task(dataclass_replace(task, slo=SLO(ttft_p90_s=0.001)))
    assert failing.status == "fails at every load" and failing.result is None and "fails even at" in failing.message
    assert failing.violations[0].metric == "ttft_p90_s"
    assert math.isnan(failing.row("ttft_p90_s")["capacity_per_s"]) and math.isnan(
        failing.row("ttft_p90_s")["ttft_p90_s"]
    )
    holding = run_capacity_task(dataclass_replace(task, rate_bounds_per_s=(0.5, 1.0)))
    assert holding.status == "holds at every load" and holding.violations == () and holding.rate_per_s == 1.0
    pickle.loads(pickle.dumps(task))  # ships to worker processes


def dataclass_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_slo_bracket_from_a_sweep():
    from budgetlab.experiments.by_budget import slo_bracket_per_s

    table = pd.DataFrame({"rate_per_s": [3.0, 1.0, 2.0], "ttft_p90_s": [2.0, 0.1, 0.5]})
    assert slo_bracket_per_s(table, SLO(ttft_p90_s=0.8)) == (2.0, 3.0)
    assert slo_bracket_per_s(table, SLO(ttft_p90_s=5.0)) is None  # holds everywhere
    assert slo_bracket_per_s(table, SLO(ttft_p90_s=0.01)) is None  # fails at the lowest load


def test_service_rate_is_the_best_budget_and_mean_sequence_tokens(ideal):
    from budgetlab.experiments.sweep import service_rate_per_s
    from budgetlab.workload import mean_sequence_tokens

    mean = mean_sequence_tokens(SMALL)
    assert mean == SMALL.mean_sequence_tokens()
    rates = [max_service_rate_per_s(ideal, max_num_batched_tokens=b, mean_sequence_tokens=mean) for b in (512, 4096)]
    assert service_rate_per_s(SMALL, budgets=[512, 4096], hardware=HW, model=MODEL, cost="ideal") == max(rates)


def test_capacity_result_numbers(seed_capacity):
    numbers = seed_capacity.numbers()
    assert numbers["capacity_per_s"] == seed_capacity.capacity_per_s
    assert numbers["upper_per_s"] == seed_capacity.upper_per_s
    assert numbers["breaks_on"] == seed_capacity.binding_limit
    assert numbers["num_simulations"] == len(seed_capacity.evaluations)
    assert (numbers["max_num_batched_tokens"], numbers["max_num_seqs"]) == (2048, 128)
    assert numbers["slo"] == {"ttft_p90_s": 0.8, "itl_p99_s": 0.040}
    assert numbers["at_capacity"]["ttft_p90_s"] == seed_capacity.summary["ttft_p90_s"] <= 0.8
    assert set(numbers["at_capacity"]) == {f"{m}_{p}_s" for m in ("ttft", "itl") for p in ("p50", "p90", "p99")}
    json.dumps(numbers)  # plain numbers, ready for a report's results


def test_capacity_errors_declare_where_the_search_stopped():
    error = SLOUnattainableError("fails", rate_per_s=0.5, violations=(Violation("itl_p99_s", 0.06, 0.04),))
    assert error.rate_per_s == 0.5 and error.violations[0].metric == "itl_p99_s" and str(error) == "fails"
    back = pickle.loads(pickle.dumps(error))  # a worker's error reaches the caller whole
    assert back.rate_per_s == 0.5 and back.violations == error.violations
    bare = CapacityAboveBoundsError("holds")
    assert math.isnan(bare.rate_per_s) and bare.violations == ()
    assert CapacityAboveBoundsError("holds", rate_per_s=3.0).rate_per_s == 3.0


# --------------------------------------------------------------------------------------------
# Capacity for each budget
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def by_budget():
    from budgetlab.experiments.by_budget import capacity_by_budget

    grid = dict(budgets=[512, 2048], max_num_seqs=128, hardware=HW, model=MODEL, executor=SerialExecutor())
    table = sweep(SMALL, rates_per_s=[5.0, 20.0, 40.0], progress=False, **grid)
    found = capacity_by_budget(SMALL, slo=SLO_SEED, sweep_table=table, **grid)
    return table, found


def test_capacity_by_budget_uses_the_sweep_column_names(by_budget):
    from budgetlab.experiments.by_budget import CapacityByBudget, slo_bracket_per_s

    table, found = by_budget
    assert isinstance(found, CapacityByBudget)
    caps = found.capacities
    assert list(caps.columns[:3]) == ["max_num_batched_tokens", "max_num_seqs", "workload"]
    assert "budget_tokens" not in caps.columns and "budget_tokens" not in found.evaluations.columns
    assert caps.max_num_batched_tokens.tolist() == [512, 2048] and (caps.status == "ok").all()
    for row in caps.itertuples():
        budget = row.max_num_batched_tokens
        bracket = slo_bracket_per_s(table[table.max_num_batched_tokens == budget], SLO_SEED)
        engine = EngineConfig(max_num_batched_tokens=budget, max_num_seqs=128)
        direct = capacity(
            SMALL,
            slo=SLO_SEED,
            engine=engine,
            hardware=HW,
            model=MODEL,
            tolerance_fraction=0.05,
            rate_bounds_per_s=bracket,
        )
        assert row.capacity_per_s == direct.capacity_per_s  # one search per budget, from the sweep's bracket
        searched = found.evaluations[found.evaluations.max_num_batched_tokens == row.max_num_batched_tokens]
        assert len(searched) == row.num_simulations
    best = found.best
    assert best is not None and best.capacity_per_s == caps.capacity_per_s.max()
    numbers = found.numbers()
    assert numbers["capacity_per_s"] == dict(zip([512, 2048], caps.capacity_per_s))
    assert numbers["capacity_status"] == {512: "ok", 2048: "ok"}
    assert numbers["capacity_breaks_on"] == dict(zip([512, 2048], caps.breaks_on))
    assert numbers["best_budget_tokens"] == int(best.max_num_batched_tokens)


def test_capacity_by_budget_reports_an_unattainable_slo():
    from budgetlab.experiments.by_budget import capacity_by_budget

    found = capacity_by_budget(
        SMALL,
        slo=SLO(ttft_p90_s=0.001),
        budgets=[2048],
        max_num_seqs=128,
        hardware=HW,
        model=MODEL,
        executor=SerialExecutor(),
    )
    row = found.capacities.iloc[0]
    assert row.status == "fails at every load" and math.isnan(row.capacity_per_s) and row.breaks_on == "ttft_p90_s"
    assert found.evaluations.empty and "max_num_batched_tokens" in found.evaluations.columns
    assert found.best is None and found.numbers()["best_budget_tokens"] is None
    assert math.isnan(found.numbers()["capacity_per_s"][2048])  # NaN, never 0, for "no capacity"


def test_best_capacity_prefers_the_smaller_budget_on_ties():
    from budgetlab.experiments.by_budget import best_capacity

    frame = pd.DataFrame(
        {
            "max_num_batched_tokens": [2048, 512, 8192],
            "capacity_per_s": [30.0, 30.0, math.nan],
            "status": ["ok", "ok", "fails at every load"],
        }
    )
    assert best_capacity(frame).max_num_batched_tokens == 512
    assert best_capacity(frame.iloc[2:]) is None


# --------------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------------


def test_forkserver_preloads_modules_that_exist():
    import importlib

    from budgetlab.experiments.executors import FORKSERVER_PRELOAD

    # the forkserver ignores an ImportError in its preload list (workers then start slowly)
    for name in FORKSERVER_PRELOAD:
        importlib.import_module(name)
    assert "budgetlab.experiments.sweep" in FORKSERVER_PRELOAD


def test_executor_for_owns_only_the_executor_it_makes():
    from budgetlab.experiments.executors import executor_for

    with executor_for(None, 1) as made:
        assert isinstance(made, SerialExecutor)
    with pytest.raises(RuntimeError):  # shut down when the block ended
        made.submit(pow, 2, 3)
    with executor_for(None, 2) as pool:
        assert isinstance(pool, cf.ProcessPoolExecutor)
    passed = SerialExecutor()
    with executor_for(passed, 5) as same:
        assert same is passed
    assert passed.submit(pow, 2, 3).result() == 8  # left running
    with pytest.raises(ParameterError, match=r"concurrent\.futures\.Executor"), executor_for(object(), 1):
        pass


def test_run_tasks_keeps_task_order_and_names_a_failing_task():
    from budgetlab.experiments.executors import run_tasks

    executor = _ReverseExecutor(expected=3)
    assert run_tasks(abs, [-1, -2, -3], executor=executor, progress=False, describe=str) == [1, 2, 3]
    assert executor.order == [2, 1, 0]
    with pytest.raises(TypeError) as info:
        run_tasks(abs, [1, "x"], executor=SerialExecutor(), progress=False, describe=lambda i: f"task {i}")
    assert info.value.__notes__ == ["(while simulating task 1)"]


# --------------------------------------------------------------------------------------------
# Reading sweeps: the load grid, SLO checks, percentiles per budget, why no capacity
# --------------------------------------------------------------------------------------------


def test_load_grid():
    # 38 × 1.1 = 41.8 in four steps: 10.45, 20.9, 31.35, 41.8, rounded to three digits
    assert load_grid(38.0, num_loads=4).tolist() == [10.5, 20.9, 31.4, 41.8]
    assert load_grid(38.0, num_loads=2, max_load_fraction=1.0).tolist() == [19.0, 38.0]
    assert load_grid(1000.0, num_loads=3, max_load_fraction=0.001).tolist() == [0.333, 0.667, 1.0]
    with pytest.raises(ValueError, match="num_loads"):
        load_grid(38.0, num_loads=0)
    with pytest.raises(ValueError, match="must be > 0"):
        load_grid(0.0, num_loads=3)
    with pytest.raises(ParameterError, match="max_load_fraction"):
        load_grid(38.0, num_loads=3, max_load_fraction=-1.0)


def test_slo_check_rows_by_hand():
    table = pd.DataFrame(
        {
            "rate_per_s": [35.6, 37.2],
            "max_num_batched_tokens": [2304, 2304],
            "max_num_seqs": [288, 288],
            "ttft_p90_s": [0.73, 0.97],
            "itl_p99_s": [0.0374, 0.0374],
        }
    )
    check = SLO_SEED.check(table)
    assert check.metric.tolist() == ["ttft_p90_s", "itl_p99_s"] * 2
    assert check.meets.tolist() == [True, True, False, True]
    assert check.slo_met.tolist() == [True, True, False, False]  # 0.97 s > 0.8 s breaks the second row
    assert check.used_fraction.tolist() == pytest.approx([0.73 / 0.8, 0.0374 / 0.040, 0.97 / 0.8, 0.0374 / 0.040])
    assert check.limit_s.tolist() == [0.8, 0.040, 0.8, 0.040] and check.max_num_seqs.tolist() == [288] * 4
    empty = SLO_SEED.check(table.iloc[:0])
    assert empty.empty and "slo_met" in empty.columns


def test_percentiles_by_budget_by_hand():
    table = pd.DataFrame(
        {"max_num_batched_tokens": [2048, 512, 512], "rate_per_s": [5.0, 20.0, 10.0]}
        | {f"{m}_{p}_s": [0.3, 0.2, 0.1] for m in ("ttft", "itl") for p in ("p50", "p90", "p99")}
    )
    numbers = percentiles_by_budget(table)
    assert list(numbers) == [512, 2048]
    assert numbers[512]["rate_per_s"] == [10.0, 20.0] and numbers[512]["itl_p99_s"] == [0.1, 0.2]
    assert numbers[2048] == {
        **{f"{m}_{p}_s": [0.3] for m in ("ttft", "itl") for p in ("p50", "p90", "p99")},
        "rate_per_s": [5.0],
    }
    json.dumps(numbers)


def test_why_no_capacity():
    def statuses(*values):
        return pd.DataFrame({"status": list(values)})

    assert why_no_capacity(statuses("ok", "fails at every load")) == ""
    short = why_no_capacity(statuses("holds at every load", "fails at every load"))
    assert "more requests per load" in short and "num_requests_per_load" not in short  # no notebook parameter
    assert why_no_capacity(statuses("fails at every load")).startswith("No budget meets the SLO")
