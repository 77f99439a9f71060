"""The waiting pass: who leaves the waiting queue in a step, and what that takes.

:func:`admit_waiting` admits from the head of the queue while :mod:`budgetlab.admission`'s
gates let it through, in vLLM's order (budget, sequence slot, KV blocks);
:func:`head_admission` is the KV gate for one request with prefix caching's hit, vLLM's
``scheduler_reserve_full_isl`` check and its watermark (``vllm-v1-scheduling.md`` step 4,
``vllm-v1-prefix-async-priority.md`` rules 7–13).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from budgetlab.admission import budget_has_room, kv_blocks_fit, seq_slot_free
from budgetlab.errors import ConfigError
from budgetlab.memory import ceil_blocks
from budgetlab.simulator.blocks import Hit
from budgetlab.simulator.kv_groups import GroupHit
from budgetlab.simulator.state import DECODE, PREFILL, RECOMPUTE, SimState, StepPlan, chunk_slot_tokens

__all__ = ["HeadAdmission", "head_admission", "admit_waiting"]


class HeadAdmission(NamedTuple):
    """Whether the head of the waiting queue can be admitted, and what that takes
    (:func:`head_admission`); ``num_tokens`` and ``cost_blocks`` are 0 when it cannot."""

    fits: bool
    hit: Hit | GroupHit | None
    hit_tokens: int
    num_tokens: int
    cost_blocks: int
    padded: bool = False


def head_admission(
    state: SimState,
    head: int,
    *,
    budget_left_tokens: int,
    free_blocks: int,
    threshold_tokens: int,
    prefill_running: bool = False,
    running_scheduled: bool = False,
) -> HeadAdmission:
    """Whether the KV gate (and, with chunked prefill off, the budget) lets ``head`` in now.

    Its prefix-cache hit first (``vllm-v1-prefix-async-priority.md`` rules 7–9: the longest
    run of cached leading blocks, at most ``(known − 1) // block_size``); then vLLM's checks
    (rule 10): with ``scheduler_reserve_full_isl`` the blocks of its whole known sequence, and
    always those of its first chunk, each less the hit blocks running requests hold, plus the
    watermark while anything runs, must fit the free pool. The chunk is
    ``min(known − hit, threshold if > 0, budget left)``.

    Returns
    -------
    HeadAdmission
        Its hit (None with caching off), and whether it fits (with chunked prefill off, also
        whether its tokens fit the budget left); when it does, its chunk [tokens] and the free
        blocks admitting it takes [blocks] (new blocks, and hit blocks nobody held).

    With speculative decoding (always with block tables) a single-token chunk may be padded to
    ``1 + k`` tokens (:mod:`.drafts`, S5): ``prefill_running`` says whether a running request
    scheduled in this step is a prefill chunk, ``running_scheduled`` whether any was scheduled.
    """
    if state.groups is not None:
        return _grouped_admission(
            state,
            head,
            budget_left_tokens=budget_left_tokens,
            free_blocks=free_blocks,
            threshold_tokens=threshold_tokens,
            prefill_running=prefill_running,
            running_scheduled=running_scheduled,
        )
    block_size = state.block_size
    known = state.req.prompt_tokens[head] + state.req.generated_tokens[head]
    hit = None
    hit_tokens = held = 0
    if state.pool is not None:
        hit = state.pool.lookup(head, known)
        hit_tokens = len(hit.blocks) * block_size
        held = hit.num_held
    reserve = state.watermark_blocks if state.running else 0
    if state.reserve_full_isl and not kv_blocks_fit(
        known_tokens=known, free_blocks=free_blocks, block_size=block_size, held_hit_blocks=held, reserve_blocks=reserve
    ):
        return HeadAdmission(False, hit, hit_tokens, 0, 0)
    n = known - hit_tokens
    if threshold_tokens and n > threshold_tokens:
        n = threshold_tokens
    if n > budget_left_tokens:
        if not state.chunked_prefill:
            return HeadAdmission(False, hit, hit_tokens, 0, 0)
        n = budget_left_tokens
    cost = ceil_blocks(hit_tokens + n, block_size) - held
    if cost + reserve > free_blocks:
        return HeadAdmission(False, hit, hit_tokens, 0, 0)
    return HeadAdmission(True, hit, hit_tokens, n, cost)


def _grouped_admission(
    state: SimState,
    head: int,
    *,
    budget_left_tokens: int,
    free_blocks: int,
    threshold_tokens: int,
    prefill_running: bool,
    running_scheduled: bool,
) -> HeadAdmission:
    """:func:`head_admission` with several KV-cache groups (:mod:`budgetlab.simulator.kv_groups`,
    rules G4 and G7): the hit must be cached in every group, and each group counts its own new
    and hit blocks; the whole-sequence check caps each windowed group at its admission bound."""
    groups = state.groups
    assert groups is not None
    known = state.req.prompt_tokens[head] + state.req.generated_tokens[head]
    hit = groups.lookup(head, known)
    reserve = state.watermark_blocks if state.running else 0
    refused = HeadAdmission(False, hit, hit.tokens, 0, 0)
    if state.reserve_full_isl:
        whole = known if groups.max_model_len is None else min(known, groups.max_model_len)
        if groups.admission_blocks(hit, whole, capped=True) + reserve > free_blocks:
            return refused
    n = known - hit.tokens
    drafts = state.drafts
    padded = False
    if drafts is not None:  # drafts.py S5
        pad = drafts.padded_tokens(hit.tokens, n, prefill_running=prefill_running, running_scheduled=running_scheduled)
        if pad:
            if pad > budget_left_tokens:
                return refused
            n, padded = pad, True
    if threshold_tokens and n > threshold_tokens:
        if padded:
            raise_threshold_cuts_padding(threshold_tokens, n)
        n = threshold_tokens
    if n > budget_left_tokens:
        if not state.chunked_prefill:
            return refused
        n = budget_left_tokens
    cost = groups.admission_blocks(hit, chunk_slot_tokens(state, hit.tokens, n), capped=False)
    if cost + reserve > free_blocks:
        return refused
    return HeadAdmission(True, hit, hit.tokens, n, cost, padded)


def admit_waiting(
    state: SimState, plan: StepPlan, *, budget_left_tokens: int, free_blocks: int, threshold_tokens: int
) -> int:
    """The waiting pass: admit from the head of the queue (FCFS, or the best priority) while
    the gates let it through.

    The three gates of :mod:`budgetlab.admission`, in vLLM's order (budget, sequence slot,
    KV blocks, see :func:`head_admission`); the first refusal ends the pass (head-of-line
    blocking: nobody behind the head is tried). Only the blocks of the admitted chunk are
    allocated (``vllm-v1-scheduling.md``, step 4); with prefix caching the chunk starts at the
    hit and the blocks it fills enter the cache at once. Appends the admitted chunks to
    ``plan`` and their hits to ``plan.num_cached_tokens``.

    Returns
    -------
    int
        Free blocks left [blocks].
    """
    running = state.running
    waiting = state.waiting
    req = state.req
    recomputing = req.recomputing
    first_scheduled = req.first_scheduled_at_s
    pool = state.pool
    max_num_seqs = state.max_num_seqs
    budget = budget_left_tokens
    free = free_blocks
    drafts = state.drafts  # speculative decoding (drafts.py): the input budget (S2) and padding (S5)
    slots = drafts.slots if drafts is not None else 0
    input_left = plan.input_left
    # S5's conditions, from the running pass's chunks (only a speculating run reads them)
    prefill_running = drafts is not None and any(kind != DECODE for kind in plan.kinds)
    running_scheduled = bool(plan.requests)
    while waiting:
        if not budget_has_room(budget_left_tokens=budget):
            break
        if drafts is not None and input_left <= slots:
            break
        if not seq_slot_free(num_running=len(running), max_num_seqs=max_num_seqs):
            break
        head = waiting[0]
        admission = head_admission(
            state,
            head,
            budget_left_tokens=budget if drafts is None else min(budget, input_left - slots),
            free_blocks=free,
            threshold_tokens=threshold_tokens,
            prefill_running=prefill_running,
            running_scheduled=running_scheduled,
        )
        if not admission.fits:
            break  # head-of-line blocking
        hit_tokens, n = admission.hit_tokens, admission.num_tokens
        waiting.popleft()
        running.append(head)
        state.num_not_decoding += 1
        free -= admission.cost_blocks
        budget -= n
        groups = state.groups
        if groups is not None:  # G4: the hit's blocks, then the chunk's, in every group
            known = req.prompt_tokens[head] + req.generated_tokens[head]
            assert isinstance(admission.hit, GroupHit)
            groups.take_hit(head, admission.hit)
            groups.allocate(head, chunk_slot_tokens(state, hit_tokens, n), cache_tokens=min(hit_tokens + n, known))
            if groups.caching:
                _count_hit(state, plan, head, known, hit_tokens)
        elif pool is not None and isinstance(admission.hit, Hit):
            known = req.prompt_tokens[head] + req.generated_tokens[head]
            pool.take_hit(head, admission.hit)
            pool.grow(head, ceil_blocks(hit_tokens + n, state.block_size) - len(admission.hit.blocks))
            pool.cache_full_blocks(head, min(hit_tokens + n, known))
            _count_hit(state, plan, head, known, hit_tokens)
        if math.isnan(first_scheduled[head]):
            first_scheduled[head] = state.now_s
        if drafts is not None:
            input_left -= n + slots
            if admission.padded:  # S5: its k drafts are placeholders
                plan.drafts[head] = drafts.k
                plan.padded.add(head)
        plan.requests.append(head)
        plan.num_tokens.append(n)
        plan.kinds.append(RECOMPUTE if recomputing[head] else PREFILL)
        plan.computed_before.append(hit_tokens)
    return free


def _count_hit(state: SimState, plan: StepPlan, head: int, known_tokens: int, hit_tokens: int) -> None:
    """Record an admission's lookup and hit (prefix caching on)."""
    state.num_query_tokens += known_tokens
    state.num_hit_tokens += hit_tokens
    plan.num_cached_tokens += hit_tokens
    if state.req.recomputing[head]:
        state.req.recompute_hit_tokens[head] += hit_tokens
    else:
        state.req.prefix_hit_tokens[head] = hit_tokens


def raise_threshold_cuts_padding(threshold_tokens: int, padded_tokens: int) -> None:
    """vLLM 0.33 stops here: a ``long_prefill_token_threshold`` below ``1 + k`` cuts a padded
    admission (:mod:`.drafts` S5), and ``Scheduler.schedule`` fails its own ``assert num_new_tokens
    == 1 + self.num_spec_tokens``.

    Raises
    ------
    ConfigError
    """
    raise ConfigError(
        f"long_prefill_token_threshold ({threshold_tokens}) cuts a single-token admission padded to 1 + k = "
        f"{padded_tokens} tokens, where vLLM 0.33's scheduler fails its own assertion (num_new_tokens == 1 + "
        f"num_spec_tokens) and the engine stops. Set the threshold to 0 or to at least {padded_tokens}."
    )
