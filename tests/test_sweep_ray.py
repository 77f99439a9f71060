"""Sweeps and frontiers on a real local Ray cluster give the tables a serial run and a Dask
LocalCluster give, bit for bit, with the workload put in Ray's object store once (and scattered
once on Dask)
(:class:`budgetlab.experiments.ray_executor.RayExecutor`)."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.pareto import throughput_frontier
from budgetlab.experiments.sweep import sweep
from budgetlab.workload import SyntheticWorkload, Uniform

if os.environ.get("CI"):  # CI installs Ray (the test extra): it must run there
    import ray  # noqa: F401
else:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'budgetlab[ray]')")

from budgetlab.experiments.ray_executor import RayExecutor

WORKLOAD = SyntheticWorkload(prompt=Uniform(100, 800), output=Uniform(10, 80), num_requests=120, label="ray")
GRID = dict(
    budgets=[512, 2048],
    max_num_seqs=[16, 128],
    rates_per_s=[2.0, 30.0],
    hardware="h100-sxm",
    model="llama-3.1-8b",
    cost=["ideal", "typical"],
    progress=False,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def on_ray():
    executor = RayExecutor(num_cpus=2)
    try:
        yield executor
    finally:
        executor.shutdown()


def test_a_sweep_on_ray_is_the_serial_sweep_and_the_dask_one(on_ray):
    serial = sweep(WORKLOAD, **GRID, executor=SerialExecutor())
    ray_table = sweep(WORKLOAD, **GRID, executor=on_ray)
    assert len(ray_table) == 2 * 2 * 2 * 2
    pd.testing.assert_frame_equal(ray_table, serial)
    assert on_ray.num_shared == 1  # 16 points, one workload put once
    pytest.importorskip("distributed")
    from budgetlab.experiments.dask_executor import DaskExecutor

    on_dask = DaskExecutor(n_workers=2)
    try:
        pd.testing.assert_frame_equal(sweep(WORKLOAD, **GRID, executor=on_dask), serial)
        assert on_dask.num_shared == 1
    finally:
        on_dask.shutdown()


def test_a_frontier_on_ray_is_the_serial_frontier(on_ray):
    grid = dict(
        hardware="h100-sxm",
        model="llama-3.1-8b",
        max_num_batched_tokens=[512, 2048],
        max_num_seqs=[64],
        concurrency=[1, 8],
        replicas=[1, 2],
        progress=False,
    )
    serial = throughput_frontier(WORKLOAD, **grid, executor=SerialExecutor())
    pd.testing.assert_frame_equal(throughput_frontier(WORKLOAD, **grid, executor=on_ray), serial)


def test_a_closed_executor_refuses_work(on_ray):
    executor = RayExecutor()  # Ray is already up: this one uses it and leaves it running
    executor.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(print, 1)
    assert on_ray.submit(sum, [1, 2]).result() == 3  # the cluster still serves
