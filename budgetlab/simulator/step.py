"""The reference step: one engine step in plain Python, the rules transliterated.

:func:`reference_step` follows ``shared/reference/vllm-v1-scheduling.md`` ("One step") and is
split the way inference-sim (BLIS) splits a step:

1. **Form the step** — :func:`running_pass` (each running request's chunk, in the policy's
   order, preempting by :func:`pop_victim` while the pool is short, see :func:`make_room`; with
   ``scheduling_policy="priority"`` :func:`running_pass_priority`, whose victim is the largest
   ``(priority, arrival)``, the later-submitted of equal arrivals), then the waiting pass
   (:func:`budgetlab.simulator.state.admit_waiting`), skipped when the step preempted. Blocks
   for each chunk are taken from the pool as it is scheduled (that is what the next request's
   check sees, as in vLLM).
2. **Price it** — the step's :class:`~budgetlab.specs.Batch` through the cost model.
3. **Sample and record** — :func:`sample_step`: a chunk that reaches its request's known tokens
   samples one token; completions free their blocks and slots for the next step.

The compiled core (:mod:`~budgetlab.simulator.core`) states the same rules, compiled; the tests keep the
two equal bit for bit.
"""

from __future__ import annotations

from budgetlab.errors import SchedulerStallError
from budgetlab.simulator.inputs import request_id_at
from budgetlab.simulator.state import (
    DECODE,
    PREFILL,
    RECOMPUTE,
    SimState,
    StepPlan,
    allocate_chunk,
    cache_limit_tokens,
    chunk_slot_tokens,
    new_blocks,
    record_common_gaps,
    record_events,
    record_step,
    release_blocks,
    release_finishing,
    retire_finished,
    step_duration_s,
)
from budgetlab.simulator.waiting import admit_waiting

__all__ = [
    "reference_step",
    "running_pass",
    "running_pass_priority",
    "make_room",
    "pop_victim",
    "priority_victim",
    "preempt",
    "sample_step",
]


def reference_step(state: SimState) -> None:
    """Schedule, price and sample the step that starts at ``state.now_s``."""
    running = state.running
    waiting = state.waiting
    # The threshold is ignored when the scheduler holds exactly one request.
    threshold = state.threshold_tokens if len(running) + len(waiting) != 1 else 0
    plan = StepPlan()
    budget, free = running_pass(state, plan, threshold)
    if not plan.preempted:
        free = admit_waiting(state, plan, budget_left_tokens=budget, free_blocks=free, threshold_tokens=threshold)
    if not plan.requests and not state.finishing and not plan.preempted:
        drafts = state.drafts
        if drafts is None:
            raise RuntimeError(
                f"internal error: the step at t={state.now_s!r} s scheduled nothing with "
                f"{len(state.running)} running and {len(waiting)} waiting requests"
            )
        if not (state.pipelined and drafts.in_flight):
            raise_stuck(state)
        # drafts.py S8: pipelined, a request held at max_model_len - 1 by its in-flight drafts gets no
        # token; like vLLM, an iteration that schedules nothing (or only preempts) is still a step
    batch = plan.batch()
    duration = step_duration_s(state, batch)
    record_step(
        state,
        duration_s=duration,
        num_decode_tokens=batch.num_decodes + batch.decode_draft_tokens,
        num_prefill_tokens=sum(batch.prefill_tokens),
        free_blocks=free,
        num_preemptions=len(plan.preempted),
        num_cached_tokens=plan.num_cached_tokens,
    )
    if state.pipelined:
        free = release_finishing(state, free, plan.requests)
    sample_step(state, plan, state.now_s + duration, free)


def running_pass(state: SimState, plan: StepPlan, threshold_tokens: int) -> tuple[int, int]:
    """Give each running request its chunk, preempting while the pool is short.

    The walk is the running list in admission order (vLLM), or with ``decode-first`` all
    decodes first, then prefills and recomputes (each group in admission order). Each request
    asks for ``min(remaining, budget left, threshold if > 0)``; the pass stops when the budget
    is used up or a request had to preempt itself. Appends the chunks to ``plan``.

    Returns
    -------
    tuple of int
        The budget left [tokens] and the free blocks left [blocks].
    """
    if state.priority_policy:
        return running_pass_priority(state, plan, threshold_tokens)
    running = state.running
    req = state.req
    computed = req.computed_tokens
    generated = req.generated_tokens
    prompt = req.prompt_tokens
    recomputing = req.recomputing
    block_size = state.block_size
    budget = state.budget_tokens
    free = state.kv.free_blocks
    preempted = plan.preempted
    finishing = state.finishing
    pool = state.pool
    groups = state.groups
    drafts = state.drafts  # speculative decoding (drafts.py): the input budget and drafts, S2-S4
    slots = drafts.slots if drafts is not None else 0
    input_left = budget
    add_request = plan.requests.append
    add_tokens = plan.num_tokens.append
    add_kind = plan.kinds.append
    add_before = plan.computed_before.append

    scheduled: set[int] | None = None  # tracked only when the walk is not admission order
    walk = running  # walked live: victims are popped off its tail, which ends the iteration early
    if state.decode_first and state.num_not_decoding:
        walk = decode_first_order(state)
        scheduled = set()
    for r in walk:
        if budget == 0:
            break
        if drafts is not None and input_left <= slots:
            break
        if preempted and r in preempted:
            continue
        if finishing and r in finishing and (drafts is None or r not in drafts.unsure):
            continue  # pipelined: its last token is in flight (drafts.py S9)
        c = computed[r]
        g = generated[r]
        if drafts is None:
            n = prompt[r] + g - c
            if n > budget:
                n = budget
            if threshold_tokens and n > threshold_tokens:
                n = threshold_tokens
        else:  # S3, S8
            c, n = drafts.running_chunk(r, c, prompt[r] + g, chunk_cap(budget, input_left - slots, threshold_tokens))
            if n <= 0:
                continue  # S3: nothing left below max_model_len (pipelined, past its in-flight drafts)
        if groups is None:
            # new_blocks(c, n, block_size), inlined in this hot loop (same value: see the tests)
            need = (c + n + block_size - 1) // block_size - (c + block_size - 1) // block_size
        else:  # several KV-cache groups (kv_groups.py, G2 and G3)
            free += groups.free_skipped(r, c - groups.in_flight.get(r, 0))
            need = groups.num_new_blocks(r, chunk_slot_tokens(state, c, n))
        if need > free:
            free, still_running = make_room(
                state, plan, current=r, need_blocks=need, free_blocks=free, scheduled=scheduled
            )
            if not still_running:
                break  # it preempted itself: the pass ends
        free -= need
        budget -= n
        if pool is not None:
            allocate_chunk(state, r, computed_tokens=c, num_tokens=n, new_blocks=need)
        elif groups is not None:
            allocate_in_groups(state, r, c, n)
        if drafts is not None:
            input_left -= n + slots
            schedule_drafts(state, plan, r, c + n)
        add_request(r)
        add_tokens(n)
        add_kind(RECOMPUTE if recomputing[r] else (DECODE if g else PREFILL))
        add_before(c)
        if scheduled is not None:
            scheduled.add(r)
    plan.input_left = input_left
    return budget, free


def chunk_cap(budget_tokens: int, input_tokens: int, threshold_tokens: int) -> int:
    """The most tokens a running request may take now: the token budget left, the input budget
    left (less the drafter's slots) and the threshold when set [tokens] (drafts.py, S2 and S3)."""
    cap = budget_tokens if budget_tokens < input_tokens else input_tokens
    return threshold_tokens if threshold_tokens and threshold_tokens < cap else cap


def allocate_in_groups(state: SimState, request: int, computed_tokens: int, num_tokens: int) -> None:
    """The block tables' side of scheduling a running request's chunk (kv_groups.py G3; with
    drafts the lookahead slots too, drafts.py S4): blocks enter the cache up to its known tokens."""
    groups = state.groups
    assert groups is not None
    end = computed_tokens + num_tokens
    slots = chunk_slot_tokens(state, computed_tokens, num_tokens)
    groups.allocate(request, slots, cache_tokens=min(end, cache_limit_tokens(state, request)) if groups.caching else 0)


def schedule_drafts(state: SimState, plan: StepPlan, request: int, end_tokens: int) -> None:
    """S3: ``request``'s chunk, ending at ``end_tokens``, schedules the pending drafts past its known
    tokens (pipelined, as the scheduler counts them: its in-flight drafts included, S8); whatever it
    had pending is spent (vLLM clears ``spec_token_ids``)."""
    drafts = state.drafts
    assert drafts is not None
    if drafts.pending[request]:
        drafts.pending[request] = 0
        req = state.req
        num_drafts = end_tokens - req.prompt_tokens[request] - req.generated_tokens[request] - drafts.lag[request]
        if num_drafts > 0:
            plan.drafts[request] = num_drafts


def decode_first_order(state: SimState) -> list[int]:
    """The running list in ``decode-first`` order: every decode, then the prefills and recomputes,
    each group in admission order."""
    generated = state.req.generated_tokens
    recomputing = state.req.recomputing
    walk = [r for r in state.running if generated[r] and not recomputing[r]]
    walk += [r for r in state.running if not generated[r] or recomputing[r]]
    return walk


def running_pass_priority(state: SimState, plan: StepPlan, threshold_tokens: int) -> tuple[int, int]:
    """:func:`running_pass` under ``scheduling_policy="priority"``.

    The same walk and chunk sizes (admission order, or ``decode-first``'s order); only a
    shortage of blocks is handled differently (``vllm-v1-prefix-async-priority.md`` rule 36):
    the victim is :func:`priority_victim`, the running request with the largest
    ``(priority, arrival)`` (the later-submitted of equal arrivals) wherever it stands. A
    victim already scheduled in this step has its chunk withdrawn (its tokens go back to the
    budget, its chunk's blocks back to the pool); a victim not reached yet is skipped; when the
    request being scheduled is its own victim it is dropped and the pass goes on with the next
    running request.

    Returns
    -------
    tuple of int
        The budget left [tokens] and the free blocks left [blocks].
    """
    running = state.running
    req = state.req
    computed = req.computed_tokens
    generated = req.generated_tokens
    prompt = req.prompt_tokens
    recomputing = req.recomputing
    block_size = state.block_size
    budget = state.budget_tokens
    free = state.kv.free_blocks
    preempted = plan.preempted
    finishing = state.finishing
    pool = state.pool
    groups = state.groups
    drafts = state.drafts  # speculative decoding (drafts.py): the input budget and drafts, S2-S4
    slots = drafts.slots if drafts is not None else 0
    input_left = budget
    # a copy either way: victims leave the running list anywhere
    walk = decode_first_order(state) if state.decode_first and state.num_not_decoding else list(running)
    for r in walk:
        if budget == 0:
            break
        if drafts is not None and input_left <= slots:
            break
        if preempted and r in preempted:
            continue
        if finishing and r in finishing and (drafts is None or r not in drafts.unsure):
            continue  # pipelined: its last token is in flight (drafts.py S9)
        c = computed[r]
        g = generated[r]
        if drafts is None:
            n = prompt[r] + g - c
            if n > budget:
                n = budget
            if threshold_tokens and n > threshold_tokens:
                n = threshold_tokens
        else:  # S3, S8
            c, n = drafts.running_chunk(r, c, prompt[r] + g, chunk_cap(budget, input_left - slots, threshold_tokens))
            if n <= 0:
                continue  # S3: nothing left below max_model_len (pipelined, past its in-flight drafts)
        if groups is None:
            need = new_blocks(c, n, block_size)
        else:  # several KV-cache groups (kv_groups.py, G2 and G3)
            free += groups.free_skipped(r, c - groups.in_flight.get(r, 0))
            need = groups.num_new_blocks(r, chunk_slot_tokens(state, c, n))
        dropped = False
        while need > free:
            victim = priority_victim(state)
            running.remove(victim)
            if victim in plan.requests:  # scheduled earlier in this step: withdraw its chunk
                j = plan.requests.index(victim)
                before = plan.computed_before.pop(j)
                withdrawn = plan.num_tokens.pop(j)
                del plan.requests[j], plan.kinds[j]
                budget += withdrawn
                input_left += withdrawn + slots
                plan.drafts.pop(victim, None)
                if pool is None and groups is None:  # a pool's release below frees this step's blocks too
                    free += new_blocks(before, withdrawn, block_size)
            free += preempt(state, victim)
            preempted.append(victim)
            if victim == r:
                dropped = True  # it was its own victim: the pass goes on with the next one
                break
        if dropped:
            continue
        free -= need
        budget -= n
        if pool is not None:
            allocate_chunk(state, r, computed_tokens=c, num_tokens=n, new_blocks=need)
        elif groups is not None:
            allocate_in_groups(state, r, c, n)
        if drafts is not None:
            input_left -= n + slots
            schedule_drafts(state, plan, r, c + n)
        plan.requests.append(r)
        plan.num_tokens.append(n)
        plan.kinds.append(RECOMPUTE if recomputing[r] else (DECODE if g else PREFILL))
        plan.computed_before.append(c)
    plan.input_left = input_left
    return budget, free


def priority_victim(state: SimState) -> int:
    """The running request with the largest ``(priority, arrival index)``, the least important
    and newest one.

    vLLM 0.33 picks ``max(self.running, key=lambda r: (r.priority, r.arrival_time))``
    (``Scheduler.schedule`` in ``vllm/v1/core/sched/scheduler.py``). Python's ``max`` returns
    the first of equal keys, but a server's ``arrival_time`` is a wall-clock stamp, so two
    requests submitted "at the same instant" are never tied: the later-submitted one is newer
    and is evicted first, wherever it stands in the running list. The arrival index
    (:attr:`SimState.victim_keys`: arrival order, equal arrivals in input order) reproduces
    that; keys are therefore unique and the first maximum is the only one."""
    keys = state.victim_keys
    running = state.running
    victim = running[0]
    worst = keys[victim]
    for r in running:
        if keys[r] > worst:
            victim, worst = r, keys[r]
    return victim


def make_room(
    state: SimState, plan: StepPlan, *, current: int, need_blocks: int, free_blocks: int, scheduled: set[int] | None
) -> tuple[int, bool]:
    """Preempt running requests until ``current``'s ``need_blocks`` new blocks fit.

    Returns
    -------
    tuple
        The free blocks after the preemptions [blocks], and whether ``current`` still runs
        (False when it was its own victim).
    """
    free = free_blocks
    while need_blocks > free:
        victim = pop_victim(state.running, current=current, scheduled=scheduled)
        free += preempt(state, victim)
        plan.preempted.append(victim)
        if victim == current:
            return free, False
    return free, True


def pop_victim(running: list[int], *, current: int, scheduled: set[int] | None) -> int:
    """Take the preemption victim out of the running list and return it.

    When the walk is the admission order (``scheduled`` is None) the victim is the tail, the
    newest running request, which is never one already scheduled in this step, and is
    ``current`` itself when ``current`` is the tail (vLLM V1, ``vllm-v1-scheduling.md`` step
    3). In ``decode-first`` order it is the newest running request not scheduled yet in this
    step other than ``current``, and ``current`` only when no such request is left (in
    admission order the two rules agree).
    """
    if scheduled is None:
        return running.pop()
    j = len(running) - 1
    while j >= 0 and (running[j] == current or running[j] in scheduled):
        j -= 1
    if j < 0:
        running.remove(current)
        return current
    return running.pop(j)


def preempt(state: SimState, victim: int) -> int:
    """Evict ``victim`` (already out of the running list) to the waiting queue: its front under
    FCFS, its own place (its key) under the priority policy.

    Its computed tokens reset to 0 and it recomputes prompt + generated tokens when it runs
    again (``vllm-v1-scheduling.md`` steps 3 and 6); with prefix caching its full blocks stay
    cached, so the recompute may hit them. Pipelined, a victim whose last token is in flight
    (:attr:`SimState.finishing`) is reported as preempted but has finished: it frees its blocks
    and does not queue again (``vllm-v1-prefix-async-priority.md`` section 4, edge case 7).

    Returns
    -------
    int
        The blocks that became free [blocks].
    """
    req = state.req
    req.num_preemptions[victim] += 1
    if state.drafts is not None:
        state.drafts.pending[victim] = 0  # S1: a preempted request loses its drafts
    if state.finishing and victim in state.finishing:
        state.finishing.remove(victim)
        return release_blocks(state, victim, finished=True)
    freed = release_blocks(state, victim, finished=False)
    computed = req.computed_tokens
    computed[victim] = 0
    if not req.generated_tokens[victim] or req.recomputing[victim]:
        state.num_not_decoding -= 1
    req.recomputing[victim] = 1
    state.waiting.appendleft(victim)
    return freed


def sample_step(state: SimState, plan: StepPlan, end_s: float, free_blocks: int) -> None:
    """End of step: sample, finish, record the chunks and events, move the clock to ``end_s``.

    A chunk that reaches its request's known tokens samples one token (the first one after a
    prompt; a recompute samples its next token directly); a partial chunk samples nothing. A
    request that samples its last token finishes and frees its blocks and slot
    (``vllm-v1-scheduling.md`` step 5); pipelined, it keeps them through the next step's
    planning (:attr:`SimState.finishing`, ``vllm-v1-prefix-async-priority.md`` rule 29).
    """
    req = state.req
    computed = req.computed_tokens
    generated = req.generated_tokens
    prompt = req.prompt_tokens
    output = req.output_tokens
    recomputing = req.recomputing
    last_token = req.last_token_at_s
    max_gap = req.max_gap_s
    first_token = req.first_token_at_s
    add_gap = state.gaps.single.append
    now = state.now_s
    num_common = 0  # gaps of requests that sampled in the previous step too: all end − now
    free = free_blocks
    first: list[int] = []
    finished: list[int] = []
    groups = state.groups
    track_in_flight = state.pipelined and (state.pool is not None or (groups is not None and groups.caching))
    if groups is not None and state.pipelined:  # G2: what the next step plans before this one is processed
        groups.in_flight = dict(zip(plan.requests, plan.num_tokens))
    sampled: list[int] = []
    sampled_any = False
    drafts = state.drafts
    pipelined_drafts = drafts is not None and state.pipelined
    for r, n, kind, before in zip(plan.requests, plan.num_tokens, plan.kinds, plan.computed_before):
        if pipelined_drafts and req.finished_at_s[r] == req.finished_at_s[r]:
            continue  # drafts.py S9: it finished in the step before; this chunk's output is dropped
        c = before + n
        computed[r] = c
        g = generated[r]
        if kind != DECODE:  # a decode always reaches the end of its known tokens
            if c < prompt[r] + g:
                continue  # a partial chunk samples nothing
            state.num_not_decoding -= 1
            recomputing[r] = 0
        g = g + 1 if drafts is None else verify(state, plan, r, g)
        generated[r] = g
        sampled_any = True
        if track_in_flight:
            sampled.append(r)
        if g == 1:
            first_token[r] = end_s
            first.append(r)
        else:
            last = last_token[r]
            gap = end_s - last
            if last == now:
                num_common += 1
            else:
                add_gap(gap)
            if gap > max_gap[r]:
                max_gap[r] = gap
        last_token[r] = end_s
        if g == output[r]:
            req.finished_at_s[r] = end_s
            finished.append(r)
        if drafts is not None:
            drafts.pending[r] = drafts.k  # S1, S8: drafts proposed (pipelined: placeholders) for its next step
    record_common_gaps(state, end_s - now, num_common)
    if track_in_flight:
        state.in_flight = set(sampled)
    if sampled_any:
        state.last_sample_step = state.num_steps
    if finished:
        free = retire_finished(state, finished, free)
    state.kv.free_blocks = free
    steps = state.steps
    steps.chunk_request.extend(plan.requests)
    steps.chunk_tokens.extend(plan.num_tokens)
    steps.chunk_kind.extend(plan.kinds)
    steps.chunk_start.extend(plan.computed_before)
    steps.step_end.append(len(steps.chunk_request))
    record_events(state, plan.preempted, first, finished)
    state.num_preemptions += len(plan.preempted)
    state.now_s = end_s


def verify(state: SimState, plan: StepPlan, request: int, generated_tokens: int) -> int:
    """S6 and S7 for a chunk that reached ``request``'s known tokens: the drafts it scheduled are
    verified (the accepted ones become tokens, the rejected ones are rolled back out of its
    computed tokens), then its blocks enter the cache up to its computed tokens; pipelined, the
    rollback and the caching wait for the next step's planning (S8, S10). Returns its generated
    tokens after the step (at most its output tokens) [tokens]."""
    drafts = state.drafts
    assert drafts is not None
    req = state.req
    num_drafts = plan.drafts.get(request, 0)
    generated = generated_tokens + 1
    rollback = 0
    if num_drafts:
        accepted = drafts.verify(request, num_drafts, padded=request in plan.padded)
        generated += accepted
        rollback = num_drafts - accepted
        if generated > req.output_tokens[request]:
            rollback += generated - req.output_tokens[request]
            generated = req.output_tokens[request]  # vLLM trims the tokens past the last one
    # The rejected drafts and any trimmed tokens roll back: all its tokens but the last are computed
    # (pipelined, the chunk started past the previous step's rollback, applied since).
    computed = req.prompt_tokens[request] + generated - 1
    req.computed_tokens[request] = computed
    if state.pipelined:  # S8-S10: the scheduler learns all this after planning the next step
        drafts.lag[request] = rollback
        drafts.in_flight_tokens[request] = generated - generated_tokens
        drafts.in_flight.append(request)
        if generated == req.output_tokens[request] and generated_tokens + 1 < generated:
            drafts.unsure.add(request)
        return generated
    groups = state.groups
    if groups is not None and groups.caching:
        groups.cache(request, computed)
    return generated


def raise_stuck(state: SimState) -> None:
    """Raise :class:`~budgetlab.errors.SchedulerStallError` for a speculating engine that can
    schedule nothing, ever: vLLM's scheduler would wait forever here too."""
    head = state.waiting[0] if state.waiting else None
    who = "no request"
    if head is not None:
        who = f"the head of the waiting queue (request {request_id_at(state.ids, head)!r})"
    drafts = state.drafts
    assert drafts is not None
    causes = [f"its chunk does not fit the budget (a single-token chunk is padded to 1 + k = {1 + drafts.k} tokens"]
    if drafts.slots:
        causes[0] += f", and {drafts.rules.method} reserves {drafts.slots} more input slot per request"
    causes[0] += ": raise max_num_batched_tokens)"
    if drafts.lookahead:
        causes.append(
            f"its KV blocks with {drafts.rules.method}'s {drafts.lookahead} lookahead slots do not fit the free pool "
            "(a larger KV pool)"
        )
    raise SchedulerStallError(
        f"at t = {state.now_s:.6g} s nothing can be scheduled and nothing is running: {who} cannot be admitted, "
        f"and vLLM's scheduler would wait forever too: {' or '.join(causes)}; or lower num_speculative_tokens."
    )
