"""A sweep on a real Dask cluster gives the same table as the local process pool (budgetlab.experiments)."""

from __future__ import annotations

import pandas as pd
import pytest

from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.sweep import sweep
from budgetlab.workload import SyntheticWorkload, Uniform

distributed = pytest.importorskip(
    "distributed", reason="Dask distributed is not installed (pip install 'budgetlab[distributed]')"
)

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


@pytest.mark.slow
@pytest.mark.floors  # distributed at its floor
def test_sweep_on_a_dask_local_cluster_matches_the_local_executor():
    local = sweep(WORKLOAD, **GRID)  # the default local process pool
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        executor = client.get_executor()
        on_dask = sweep(WORKLOAD, **GRID, executor=executor)
        # the workers really are other processes
        pids = set(client.run(lambda: __import__("os").getpid()).values())
        assert len(pids) == 2
    assert len(on_dask) == 2 * 2 * 3 * 2 * 2
    pd.testing.assert_frame_equal(on_dask, local)
    # and the first rows are what a serial run of that corner of the grid gives
    corner = sweep(
        WORKLOAD, **{**GRID, "hardware": "h100-sxm", "cost": "ideal", "budgets": [512]}, executor=SerialExecutor()
    )
    pd.testing.assert_frame_equal(on_dask.iloc[: len(corner)], corner)
