"""Shared fixtures: the seeds' hardware and model, and hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI gets reproducible examples; nobody gets flaky deadlines on a loaded 2-core machine.
settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def h100():
    from budgetlab.catalog import hardware

    return hardware("h100-sxm")


@pytest.fixture(scope="session")
def llama8b():
    from budgetlab.catalog import model

    return model("llama-3.1-8b")


@pytest.fixture(scope="session")
def ideal(h100, llama8b):
    from budgetlab import IdealCost

    return IdealCost(h100, llama8b)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The shared Splitwise traces; skipped in a user's clone, where ../shared/data is absent."""
    traces = SHARED_DATA / "traces"
    if not traces.is_dir():
        pytest.skip(f"shared traces not found at {traces} (present for developers and in CI only)")
    return traces
