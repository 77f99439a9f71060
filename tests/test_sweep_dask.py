"""A sweep on a real Dask cluster gives the same table as the local process pool, whether Dask's
own executor pickles the workload into every task or :class:`DaskExecutor` scatters it once
(budgetlab.experiments.dask_executor)."""

from __future__ import annotations

import os
import pickle

import pandas as pd
import pytest

from budgetlab.catalog import hardware, model
from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.shipping import without_workload
from budgetlab.experiments.sweep import SweepPoint, sweep
from budgetlab.specs import EngineConfig, Request
from budgetlab.workload import SyntheticWorkload, TraceWorkload, Uniform

distributed = pytest.importorskip(
    "distributed", reason="Dask distributed is not installed (pip install 'budgetlab[distributed]')"
)

from budgetlab.experiments.dask_executor import DaskExecutor  # noqa: E402

WORKLOAD = SyntheticWorkload(prompt=Uniform(100, 800), output=Uniform(10, 80), num_requests=150, label="dask")
GRID = dict(
    budgets=[512, 2048],
    max_num_seqs=[16, 128],
    rates_per_s=[2.0, 10.0, 30.0],
    hardware=["h100-sxm", "h200-sxm"],
    model="llama-3.1-8b",
    cost=["ideal", "typical"],
    progress=False,
)

pytestmark = [pytest.mark.slow, pytest.mark.floors]  # distributed at its floor


@pytest.fixture(scope="module")
def on_dask():
    executor = DaskExecutor(n_workers=2)
    try:
        yield executor
    finally:
        executor.shutdown()


def test_sweep_on_a_dask_local_cluster_matches_the_local_executor(on_dask):
    local = sweep(WORKLOAD, **GRID)  # the default local process pool
    on_dask_plain = sweep(WORKLOAD, **GRID, executor=on_dask.client.get_executor())
    # the workers really are other processes, on this machine's loopback interface
    pids = set(on_dask.client.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids
    assert all(address.startswith("tcp://127.0.0.1:") for address in on_dask.client.scheduler_info()["workers"])
    assert len(on_dask_plain) == 2 * 2 * 3 * 2 * 2
    pd.testing.assert_frame_equal(on_dask_plain, local)
    # and the first rows are what a serial run of that corner of the grid gives
    corner = sweep(
        WORKLOAD, **{**GRID, "hardware": "h100-sxm", "cost": "ideal", "budgets": [512]}, executor=SerialExecutor()
    )
    pd.testing.assert_frame_equal(on_dask_plain.iloc[: len(corner)], corner)


def test_the_scattering_executor_sends_a_trace_once_and_gives_the_same_table(on_dask):
    trace = TraceWorkload.from_requests(
        [Request(i, i * 0.05, 300 + i % 700, 20 + i % 90) for i in range(400)], label="trace"
    )
    grid = {**GRID, "hardware": "h100-sxm", "rates_per_s": None, "time_scales": [1.0]}
    serial = sweep(trace, **grid, executor=SerialExecutor())
    before = on_dask.num_shared
    table = sweep(trace, **grid, executor=on_dask)
    pd.testing.assert_frame_equal(table, serial)
    assert on_dask.num_shared == before + 1  # 8 points, the trace scattered once
    # what each task pickles leaves the trace out
    point = SweepPoint(trace, 1.0, 0, EngineConfig(), hardware("h100-sxm"), model("llama-3.1-8b"))
    assert len(pickle.dumps(without_workload(point))) < len(pickle.dumps(trace)) / 4


def test_a_closed_dask_executor_refuses_work_and_a_client_is_not_its_to_close(on_dask):
    borrowed = DaskExecutor(on_dask.client)
    assert borrowed.submit(sum, [1, 2]).result() == 3
    borrowed.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        borrowed.submit(sum, [1, 2])
    assert on_dask.submit(sum, [3, 4]).result() == 7  # the client still serves
    with pytest.raises(TypeError, match="without a client"):
        DaskExecutor(on_dask.client, n_workers=2)
