"""Property tests of the simulator on random small workloads and configurations.

Each example (every scheduling option at random: FCFS or the priority policy, vLLM's or the
decode-first order, prefix caching, async scheduling, chunking, watermark) is simulated in
reference mode, by the compiled core, and by the compiled core with every step priced in Python;
all three must agree exactly. The reference run's step log
is then replayed independently (computed tokens, KV blocks, sampled tokens) to check the
invariants: every request finishes with exactly its output tokens, no step exceeds the budget
or ``max_num_seqs``, KV blocks in use never exceed the pool and match ``num_free_kv_blocks``,
no admissions in a step that preempted, chunk kinds follow the reference's labels, time never
goes backwards, and the per-request and summary latencies equal those recomputed from the
replayed token times. A second replay runs every step through the pedagogical model,
:func:`budgetlab.budget.fill_step` and :func:`budgetlab.admission.admit`, so the executed
scheduler and the one the notebooks explain cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict, deque
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab import Batch, CalibratedCost, ConstantCost, EngineConfig, IdealCost, Request, SchedulerStallError
from budgetlab.admission import Gate, admit
from budgetlab.budget import fill_step
from budgetlab.catalog import hardware, model
from budgetlab.memory import blocks_for_tokens
from budgetlab.simulator import compiled, simulate
from budgetlab.simulator.state import blocks_for_tokens_array, new_blocks

from sim_modes import assert_same, run_all_modes

IDEAL = IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))


class ContextCost:
    """A step cost that depends on every field of the batch (attention-like context terms)."""

    def batch_time_s(self, batch: Batch) -> float:
        chunks = sum(n * (c + n) for n, c in zip(batch.prefill_tokens, batch.prefill_context_tokens))
        return 1e-3 + 3e-6 * batch.num_tokens + 7e-9 * batch.decode_context_tokens + 1e-9 * chunks

    def decode_run_time_s(self, *, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        return np.array([self.batch_time_s(Batch(num_decodes, int(c))) for c in decode_context_tokens])


COSTS = {"constant": ConstantCost(0.25), "ideal": IDEAL, "context": ContextCost()}
GAPS_S = [0.0, 0.0, 0.0, 0.001, 0.004, 0.01, 0.1, 0.25, 1.0, 3.0]


@st.composite
def scenarios(draw, *, max_requests: int = 20, max_prompt: int = 40, max_output: int = 30):
    num = draw(st.integers(1, max_requests))
    # one example in three is tie-heavy: bursts of equal arrivals and two priorities, so that
    # equal (priority, arrival) keys meet in the queue and among the victims
    tied = draw(st.sampled_from([False, False, True]))
    gap_choices, priority_choices = ([0.0, 0.0, 0.0, 1.0], st.integers(0, 1)) if tied else (GAPS_S, st.integers(-2, 3))
    gaps = draw(st.lists(st.sampled_from(gap_choices), min_size=num, max_size=num))
    prompts = draw(st.lists(st.integers(1, max_prompt), min_size=num, max_size=num))
    outputs = draw(st.lists(st.integers(1, max_output), min_size=num, max_size=num))
    priorities = draw(st.lists(priority_choices, min_size=num, max_size=num))  # ties likely
    groups = draw(st.lists(st.sampled_from([None, None, "a", "a", "b"]), min_size=num, max_size=num))
    arrivals = np.cumsum(gaps).tolist()
    requests = []
    for i in range(num):
        total = prompts[i] + outputs[i]
        # shared: the whole prompt (identical prompts decode alike), part of it, or prompt and answer
        shares = [prompts[i], prompts[i], draw(st.integers(0, prompts[i])), total] if groups[i] else [0]
        shared = draw(st.sampled_from(shares))
        requests.append(Request(i, arrivals[i], prompts[i], outputs[i], priorities[i], groups[i], shared))
    order = draw(st.permutations(range(num)))  # any input order
    requests = [requests[i] for i in order]

    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    max_num_seqs = draw(st.integers(1, 8))
    budget = draw(st.integers(max_num_seqs, 48))
    chunked = draw(st.sampled_from([True, True, True, False]))
    max_model_len = max_prompt + max_output
    if not chunked:
        budget = max(budget, max_model_len)
    threshold = draw(st.sampled_from([0, 0, 1, 3, 8]))
    peak = max(-(-(r.prompt_tokens + r.output_tokens - 1) // block_size) for r in requests)
    # From the tightest pool that lets every request finish (preemption churn) to plenty.
    num_kv_blocks = draw(st.one_of(st.integers(peak, peak + 3), st.integers(peak, 4 * peak + 8)))
    eng = EngineConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        num_kv_blocks=num_kv_blocks,
        long_prefill_token_threshold=threshold,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        policy=draw(st.sampled_from(["vllm-v1", "decode-first"])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
        enable_prefix_caching=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
        scheduler_reserve_full_isl=draw(st.sampled_from([True, True, False])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.05, 0.2])),
    )
    name = draw(st.sampled_from([*sorted(COSTS), "calibrated"]))
    # the real-engine cost, with this engine's CUDA graphs (priced by the compiled core itself)
    cost = CalibratedCost.typical(IDEAL.hardware, IDEAL.model, engine=eng) if name == "calibrated" else COSTS[name]
    return requests, eng, cost


def relative_arrivals(result, requests) -> dict:
    """Each request's arrival in the result's clock: seconds since the trace's origin, its
    first arrival (``result.time_origin_s``), computed as the simulator does."""
    origin = min(r.arrival_at_s for r in requests)
    assert result.time_origin_s == origin
    return {r.request_id: r.arrival_at_s - origin if origin else r.arrival_at_s for r in requests}


def replay_and_check(result, requests, eng) -> None:
    """Re-derive the run from its step log and check every invariant against the tables.

    With prefix caching a request starts at its hit (the log's ``start``: whole blocks, fewer
    than its known tokens) and shared blocks make the pool's use at most the sum of each
    request's blocks (exactly it without sharing); pipelined, a finished request holds its
    place in the running list through the next step, and a step may schedule nothing while
    last tokens are in flight."""
    spec = {r.request_id: r for r in requests}
    arrival = relative_arrivals(result, requests)
    rank = {r.request_id: k for k, r in enumerate(sorted(requests, key=lambda r: r.arrival_at_s))}  # stable
    pipelined = eng.async_scheduling
    sharing = eng.enable_prefix_caching and any(r.prefix_id is not None for r in requests)
    finishing: list = []
    bs, pool = eng.block_size, result.num_kv_blocks
    computed: dict = defaultdict(int)
    generated: dict = defaultdict(int)
    recomputing: set = set()
    running: list = []
    finished: set = set()
    token_times: dict = defaultdict(list)
    first_admitted: dict = {}
    log = result.step_log()
    steps = result.steps
    assert len(log) == len(steps) == result.summary()["num_steps"]
    starts = steps["start_at_s"].to_numpy()
    ends = starts + steps["duration_s"].to_numpy()
    forward = steps["forward_pass"].to_numpy()
    assert np.all(steps["duration_s"].to_numpy()[forward] > 0)
    assert np.all(starts[1:] >= ends[:-1])  # time never goes backwards; steps never overlap
    arrival_times = set(arrival.values())
    for i, (entry, row) in enumerate(zip(log, steps.itertuples(index=False))):
        assert entry["start_at_s"] == row.start_at_s
        if i and row.start_at_s > ends[i - 1]:
            assert not running and row.start_at_s in arrival_times  # idle until an arrival
        for rid in entry["preempted"]:
            if eng.scheduling_policy == "priority":
                # the largest (priority, arrival, input order): of equal keys the later-submitted
                assert rid == max(running, key=lambda r: (spec[r].priority, rank[r]))
            elif eng.policy == "vllm-v1":
                assert rid == running[-1]  # FCFS: the newest admitted, the tail
            running.remove(rid)
            if rid in finishing:  # pipelined: finished, its last token in flight
                finishing.remove(rid)
                continue
            computed[rid] = 0
            recomputing.add(rid)
        assert row.num_preemptions == len(entry["preempted"])
        assert len(entry["start"]) == len(entry["scheduled"])
        total = 0
        for (rid, n, kind), start in zip(entry["scheduled"], entry["start"]):
            assert rid not in finished and rid not in finishing and n >= 1
            assert arrival[rid] <= row.start_at_s
            if rid not in running:
                assert not entry["preempted"], "no admissions in a step that preempted"
                assert computed[rid] == 0
                assert start % bs == 0 and start < spec[rid].prompt_tokens + generated[rid]
                assert start == 0 or eng.enable_prefix_caching
                computed[rid] = start
                running.append(rid)
                first_admitted.setdefault(rid, row.start_at_s)
            assert start == computed[rid]
            known = spec[rid].prompt_tokens + generated[rid]
            assert computed[rid] + n <= known
            if rid in recomputing:
                assert kind == "recompute"
            elif generated[rid] == 0:
                assert kind == "prefill"
            else:
                assert kind == "decode" and n == 1
            if eng.long_prefill_token_threshold and kind != "decode" and n > eng.long_prefill_token_threshold:
                assert len(running) == 1 and row.num_waiting == 0  # alone: threshold ignored
            computed[rid] += n
            total += n
        assert total <= eng.max_num_batched_tokens
        # only a pipelined step with last tokens in flight may be empty
        assert total > 0 or (finishing and not row.forward_pass)
        assert row.forward_pass == (total > 0)
        assert len({rid for rid, _, _ in entry["scheduled"]}) == len(entry["scheduled"])
        assert len(running) == row.num_running <= eng.max_num_seqs
        used = sum(-(-computed[rid] // bs) for rid in running)
        if sharing:
            assert 0 <= pool - row.num_free_kv_blocks <= min(used, pool)
        else:
            assert used == pool - row.num_free_kv_blocks <= pool
        for rid in finishing:  # their slots and blocks are free from the next step on
            running.remove(rid)
        finishing = []
        assert row.num_decode_tokens == sum(1 for _, _, k in entry["scheduled"] if k == "decode")
        assert row.num_decode_tokens + row.num_prefill_tokens == total
        first, done = [], []
        for rid, _, _ in entry["scheduled"]:
            if computed[rid] == spec[rid].prompt_tokens + generated[rid]:
                generated[rid] += 1
                recomputing.discard(rid)
                token_times[rid].append(ends[i])
                if generated[rid] == 1:
                    first.append(rid)
                if generated[rid] == spec[rid].output_tokens:
                    done.append(rid)
        assert entry["first_token"] == first
        assert entry["finished"] == done
        for rid in done:
            finished.add(rid)
            if pipelined:
                finishing.append(rid)
            else:
                running.remove(rid)
    assert finished == set(spec)
    assert all(generated[rid] == spec[rid].output_tokens for rid in spec)

    # Latencies from the replayed token times.
    table = result.requests.set_index("request_id")
    all_gaps = []
    for rid, times in token_times.items():
        row = table.loc[rid]
        gaps = np.diff(times)
        all_gaps.extend(gaps.tolist())
        assert row["arrival_at_s"] == arrival[rid]
        assert row["first_token_at_s"] == times[0] >= arrival[rid]
        assert row["finished_at_s"] == times[-1]
        assert row["queue_s"] == first_admitted[rid] - arrival[rid]
        if len(gaps):
            assert row["max_itl_s"] == gaps.max()
        else:
            assert math.isnan(row["max_itl_s"])
    summary = result.summary()
    if all_gaps:
        expected = np.quantile(np.array(all_gaps), [0.5, 0.9, 0.99])
        assert [summary["itl_p50_s"], summary["itl_p90_s"], summary["itl_p99_s"]] == expected.tolist()
        assert summary["max_itl_s"] == max(all_gaps)
    assert table["num_preemptions"].sum() == summary["num_preemptions"] == steps["num_preemptions"].sum()
    peak_used = int((pool - steps["num_free_kv_blocks"]).max())
    assert summary["kv_peak_fraction"] == peak_used / pool <= 1.0


@settings(max_examples=300)
@given(scenarios())
def test_random_workloads_obey_the_invariants_and_modes_agree(scenario):
    requests, eng, cost = scenario
    try:
        result = run_all_modes(requests, eng, cost)
    except SchedulerStallError:
        # vLLM's rules can livelock only when admission checks the first chunk alone; every
        # mode must then stop with the same error
        assert not eng.scheduler_reserve_full_isl
        for mode in ("fast", "reference"):
            with pytest.raises(SchedulerStallError):
                simulate(requests, engine=eng, cost=cost, mode=mode)
        return
    replay_and_check(result, requests, eng)
    # Same input, same result.
    assert_same(result, simulate(requests, engine=eng, cost=cost, mode="reference"))


@settings(max_examples=40)
@given(scenarios(max_requests=40, max_prompt=300, max_output=200))
def test_longer_decodes_with_jumps_agree(scenario):
    # Longer outputs give long decode-only runs (jumped in fast mode) crossing KV block
    # boundaries, arrivals and completions.
    requests, eng, cost = scenario
    eng = dataclasses.replace(eng, scheduler_reserve_full_isl=True)  # no livelock (see above)
    result = run_all_modes(requests, eng, cost)
    replay_and_check(result, requests, eng)
    # the gaps' quantiles selected in passes over the step rows (as a run of more than
    # MAX_GAPS_IN_MEMORY gaps has them) are those of the gaps gathered in memory
    with mock.patch.object(compiled, "MAX_GAPS_IN_MEMORY", -1):
        assert_same(result, simulate(requests, engine=eng, cost=cost, mode="fast"))


# --------------------------------------------------------------------------------------------
# The pedagogical model and the executed one cannot drift: the step log, replayed through
# budget.fill_step (token budget) and admission.admit (the three gates), gives the same steps.
# --------------------------------------------------------------------------------------------


def replay_through_the_gates(result, requests, eng) -> None:
    """Re-derive every step's running pass with :func:`budget.fill_step` and every admission
    decision with :func:`admission.admit`, from the state the step log implies. Under the
    priority policy the waiting queue is kept sorted by (priority, arrival order), and a step
    that preempted is only checked to run a subsequence of the walk without its victims (a
    withdrawn chunk gives its tokens back, so later chunks may exceed the token model's)."""
    spec = {r.request_id: r for r in requests}
    arrival = relative_arrivals(result, requests)
    arrivals = deque(r.request_id for r in sorted(requests, key=lambda r: r.arrival_at_s))  # stable
    rank = {rid: k for k, rid in enumerate(arrivals)}
    by_priority = eng.scheduling_policy == "priority"

    def queue_order(queue: deque) -> deque:
        return deque(sorted(queue, key=lambda rid: (spec[rid].priority, rank[rid]))) if by_priority else queue

    bs, pool, budget = eng.block_size, result.num_kv_blocks, eng.max_num_batched_tokens
    computed: dict = defaultdict(int)
    generated: dict = defaultdict(int)
    recomputing: set = set()
    running: list = []
    waiting: deque = deque()

    def known(rid) -> int:
        return spec[rid].prompt_tokens + generated[rid]

    for entry in result.step_log():
        while arrivals and arrival[arrivals[0]] <= entry["start_at_s"]:
            waiting.append(arrivals.popleft())
        waiting = queue_order(waiting)
        decoding = [r for r in running if generated[r] and r not in recomputing]
        if eng.policy == "decode-first" and len(decoding) < len(running):
            walk = decoding + [r for r in running if r not in decoding]
        else:
            walk = list(running)
        scheduled = [(rid, n) for rid, n, _ in entry["scheduled"]]
        fill = fill_step(
            budget_tokens=budget,
            running_remaining_tokens=[known(r) - computed[r] for r in walk],
            waiting_remaining_tokens=[known(r) for r in waiting],
            long_prefill_token_threshold=eng.long_prefill_token_threshold,
            max_num_seqs=eng.max_num_seqs,
        )
        if entry["preempted"] and by_priority:
            ids = [rid for rid, _ in scheduled]
            rest = iter([r for r in walk if r not in entry["preempted"]])
            assert all(rid in rest for rid in ids), "a subsequence of the walk, victims left out"
        elif entry["preempted"]:
            # Preemption cuts the running pass short and skips the waiting pass: what ran is
            # the token model's running pass minus the victims, in walk order.
            ran = [(r, n) for r, n in zip(walk, fill.running_tokens) if n and r not in entry["preempted"]]
            assert scheduled == ran[: len(scheduled)]
        else:
            ran = [(r, n) for r, n in zip(walk, fill.running_tokens) if n]
            assert scheduled[: len(ran)] == ran
            admitted = scheduled[len(ran) :]
            assert [n for _, n in admitted] == list(fill.admitted_tokens[: len(admitted)])
            free = pool - sum(blocks_for_tokens(computed[r] + n, bs) for r, n in ran)
            free -= sum(blocks_for_tokens(computed[r], bs) for r in running if r not in dict(ran))
            left = budget - sum(n for _, n in ran)
            for j, (rid, n) in enumerate(admitted):
                assert rid == waiting[j]
                decision = admit(
                    num_running=len(running) + j,
                    max_num_seqs=eng.max_num_seqs,
                    budget_left_tokens=left,
                    known_tokens=known(rid),
                    free_blocks=free,
                    block_size=bs,
                )
                assert decision.admitted, decision.reason
                left -= n
                free -= blocks_for_tokens(n, bs)
            if len(admitted) < len(waiting):  # why the next one in line was not admitted
                head = waiting[len(admitted)]
                decision = admit(
                    num_running=len(running) + len(admitted),
                    max_num_seqs=eng.max_num_seqs,
                    budget_left_tokens=left,
                    known_tokens=known(head),
                    free_blocks=free,
                    block_size=bs,
                )
                threshold = eng.long_prefill_token_threshold
                chunk = min(known(head), threshold) if threshold and len(running) + len(waiting) > 1 else known(head)
                if decision.admitted:  # only a whole prompt that does not fit stops it, chunking off
                    assert not eng.enable_chunked_prefill and chunk > left
                elif decision.refused_by is Gate.KV:  # the token model alone would have taken it
                    assert len(fill.admitted_tokens) > len(admitted)
                else:
                    assert decision.refused_by in (Gate.BUDGET, Gate.SLOT)
                    assert len(fill.admitted_tokens) == len(admitted)
            for _ in admitted:
                running.append(waiting.popleft())
        for rid in entry["preempted"]:
            running.remove(rid)
            computed[rid] = 0
            recomputing.add(rid)
            waiting.appendleft(rid)
        waiting = queue_order(waiting)
        for rid, n in scheduled:
            computed[rid] += n
            if computed[rid] == known(rid):
                generated[rid] += 1
                recomputing.discard(rid)
                if generated[rid] == spec[rid].output_tokens:
                    running.remove(rid)
    assert not running and not waiting and not arrivals


@settings(max_examples=200)
@given(scenarios())
def test_step_log_replays_through_fill_step_and_admit(scenario):
    # The pedagogical model is the synchronous engine without a prefix cache (and vLLM's
    # default admission check).
    requests, eng, cost = scenario
    eng = dataclasses.replace(
        eng, enable_prefix_caching=False, async_scheduling=False, scheduler_reserve_full_isl=True, watermark=0.0
    )
    result = simulate(requests, engine=eng, cost=cost, mode="reference")
    replay_through_the_gates(result, requests, eng)


@given(st.integers(0, 10_000), st.integers(0, 5_000), st.sampled_from([1, 2, 3, 4, 16, 32]))
def test_block_helpers_equal_memory_blocks_for_tokens(computed, num_tokens, block_size):
    # The simulator's block arithmetic: the named helpers and the form its two hottest loops
    # inline (running pass, decode-run advance) are all memory.blocks_for_tokens.
    expected = blocks_for_tokens(computed + num_tokens, block_size) - blocks_for_tokens(computed, block_size)
    assert new_blocks(computed, num_tokens, block_size) == expected
    inlined = (computed + num_tokens + block_size - 1) // block_size - (computed + block_size - 1) // block_size
    assert inlined == expected
    values = np.array([computed, num_tokens, computed + num_tokens], dtype=np.int64)
    expected_each = [blocks_for_tokens(int(v), block_size) for v in values]
    assert blocks_for_tokens_array(values, block_size).tolist() == expected_each
