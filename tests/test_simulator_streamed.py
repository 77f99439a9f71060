"""The compiled core fed its requests as they come (:meth:`CoreDriver.make_known`): a replica of
a fleet learns of a request only when the router sends it, so its core runs up to a horizon
(the earliest a request it does not know yet may arrive) and returns for more. Fed in any
slices, a run is the run fed everything at once, bit for bit; by hand, a step is never started
at or after the horizon, and a core with nothing known waits.
"""

from __future__ import annotations

import dataclasses
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_simulator_properties import scenarios

from budgetlab import ConstantCost, EngineConfig, Request
from budgetlab.simulator import compiled, loop, simulate
from budgetlab.simulator import core_state as cs
from budgetlab.simulator.inputs import request_table

from sim_modes import assert_same


def sliced_run(cuts_s):
    """A stand-in for :func:`compiled.run_compiled` that makes the requests known slice by slice:
    those arriving before each cut [s, the run's clock], then the cut as the horizon."""

    def run_compiled(inputs, cost, *, price_in_python=False):
        core = compiled.new_core(inputs, cost, price_in_python=price_in_python, streamed=True)
        driver = compiled.CoreDriver(inputs, cost, core)
        statuses = []
        for cut in [*sorted(cuts_s), math.inf]:
            known = len(inputs.arrival_at_s) if cut == math.inf else int(np.searchsorted(inputs.arrival_at_s, cut))
            driver.make_known(known, cut)
            statuses.append(driver.advance())
        assert statuses[-1] == cs.DONE and all(s == cs.NEED_ARRIVALS for s in statuses[:-1])
        return driver.core

    return run_compiled


def simulate_sliced(requests, eng, cost, cuts_s):
    with mock.patch.object(loop, "run_compiled", sliced_run(cuts_s)):
        return simulate(requests, engine=eng, cost=cost, mode="fast")


@st.composite
def sliced_scenarios(draw):
    requests, eng, cost = draw(scenarios(max_output=60))
    eng = dataclasses.replace(eng, scheduler_reserve_full_isl=True)  # no livelock
    first = min(r.arrival_at_s for r in requests)
    arrivals = sorted({r.arrival_at_s - first for r in requests})
    # cuts at arrivals (the horizon on the dot), between them, and inside long decode runs
    at_arrivals = draw(st.lists(st.sampled_from(arrivals), max_size=4))
    anywhere = draw(st.lists(st.floats(0.0, arrivals[-1] + 30.0, allow_nan=False), max_size=4))
    return requests, eng, cost, sorted(set(at_arrivals + anywhere))


@settings(max_examples=80)
@given(sliced_scenarios())
def test_a_run_fed_in_slices_is_the_run_fed_at_once(scenario):
    requests, eng, cost, cuts = scenario
    whole = simulate(requests, engine=eng, cost=cost, mode="fast")
    assert_same(whole, simulate_sliced(requests, eng, cost, cuts))


def test_no_step_starts_at_or_after_the_horizon():
    # a (prompt 4, 6 outputs) alone, a step 1 s: the horizon at 3 s stops the core after the
    # steps that start at 0, 1 and 2 s (the decode run is cut there), with a's 3 tokens sampled
    eng = EngineConfig(max_num_batched_tokens=100, max_num_seqs=4, enable_prefix_caching=False, async_scheduling=False)
    inputs = compiled.core_inputs(request_table([Request("a", 0.0, 4, 6)]), eng, 100)
    driver = compiled.CoreDriver(inputs, ConstantCost(1.0), compiled.new_core(inputs, ConstantCost(1.0), streamed=True))
    assert driver.advance() == cs.NEED_ARRIVALS  # nothing known: nothing runs
    assert driver.core.n[cs.N_STEPS] == 0
    driver.make_known(1, 3.0)
    assert driver.advance() == cs.NEED_ARRIVALS
    assert driver.core.n[cs.N_STEPS] == 3 and driver.core.t[cs.T_NOW] == 3.0
    assert driver.core.generated[0] == 3
    driver.make_known(1, math.inf)
    assert driver.advance() == cs.DONE
    assert driver.core.n[cs.N_STEPS] == 6 and driver.core.finished_at[0] == 6.0


def test_make_known_refuses_going_back():
    eng = EngineConfig(max_num_batched_tokens=100, max_num_seqs=4, enable_prefix_caching=False)
    inputs = compiled.core_inputs(request_table([Request("a", 0.0, 4, 6), Request("b", 2.0, 4, 6)]), eng, 100)
    driver = compiled.CoreDriver(inputs, ConstantCost(1.0), compiled.new_core(inputs, ConstantCost(1.0), streamed=True))
    driver.make_known(1, 2.0)
    driver.make_known(1, 2.0)  # (the same again: nothing moves)
    with pytest.raises(ValueError, match="arrival order"):
        driver.make_known(0, 3.0)
    with pytest.raises(ValueError, match="arrival order"):
        driver.make_known(1, 1.0)
    fresh = compiled.CoreDriver(inputs, ConstantCost(1.0), compiled.new_core(inputs, ConstantCost(1.0), streamed=True))
    with pytest.raises(ValueError, match="after the horizon"):
        fresh.make_known(2, 1.5)  # b arrives at 2.0
