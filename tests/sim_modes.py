"""Run a simulation in every mode and check the results agree exactly (shared by the simulator
tests)."""

from __future__ import annotations

import math

import pandas as pd

from budgetlab.simulator import RunOptions, SimResult, simulate, simulate_with


def assert_same(a: SimResult, b: SimResult) -> None:
    """Tables, step log and summary identical, bit for bit (NaN equals NaN)."""
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert a.step_log() == b.step_log()
    sa, sb = a.summary(), b.summary()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key] == sb[key] or (math.isnan(sa[key]) and math.isnan(sb[key])), key


def run_all_modes(requests, eng, cost) -> SimResult:
    """Simulate in reference mode; check the compiled core (``mode="fast"``), and the compiled
    core with every step and run priced in Python, agree exactly; return the reference result."""
    reference = simulate(requests, engine=eng, cost=cost, mode="reference")
    assert_same(reference, simulate(requests, engine=eng, cost=cost, mode="fast"))
    vectorized = simulate_with(requests, engine=eng, cost=cost, options=RunOptions(mode="fast", price_in_python=True))
    assert_same(reference, vectorized)
    return reference
