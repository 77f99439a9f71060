"""Speculative decoding in the scheduler: drafts in the budget, the KV pool and the rollback.

With ``EngineConfig(num_speculative_tokens=k, speculative_method=...)`` the engine proposes ``k``
draft tokens after each step for every request that decoded, and the next step verifies them. The
rules below are vLLM 0.33's (``vllm/v1/core/sched/scheduler.py``: ``Scheduler.schedule``,
``update_from_output``, ``update_draft_token_ids``, ``_preempt_request``; ``vllm/v1/core/
kv_cache_manager.py``: ``KVCacheManager.allocate_slots``; ``vllm/config/vllm.py`` and
``vllm/config/speculative.py`` for the per-method numbers, :mod:`budgetlab.speculative`). ``L`` is
the method's lookahead slots, ``s`` its input slots per request (``new_slots_for_drafting``).

S1. *Drafts are proposed after a step* for each request it scheduled that did not finish and whose
    chunk reached its known tokens (``update_draft_token_ids`` ignores drafts of a prefill chunk):
    ``k`` of them, its pending drafts (vLLM's ``spec_token_ids``). A running request the step left
    out keeps the drafts it had; a preempted request loses them (``_preempt_request``).
S2. *Two budgets.* A step has the token budget ``max_num_scheduled_tokens`` (vLLM sets it to
    ``max_num_batched_tokens``) and an input budget of ``max_num_batched_tokens`` from which each
    scheduled request takes its tokens plus ``s``. Both passes stop when the input budget left is at
    most ``s``.
S3. *A running request asks* for ``known + pending − computed`` tokens (``num_tokens_with_spec −
    num_computed_tokens``: 1 + its drafts when it decodes), capped by the threshold, the token
    budget left, the input budget left less ``s``, and ``max_model_len − computed − 1`` (so the
    sampled token still fits); one left with no token is passed over and the pass goes on (vLLM's
    ``num_new_tokens == 0`` case). Its drafts scheduled are the tokens past its known ones; the
    rest of its drafts are dropped (a cut draft is never verified).
S4. *KV slots.* A chunk of ``n`` tokens needs the blocks of ``min(computed + n + L,
    max_model_len)`` tokens, less those the request holds (which may exceed its computed tokens:
    blocks of rejected drafts and of earlier lookahead are kept); blocks enter the prefix cache only
    up to the request's known tokens (drafts are never cached).
S5. *A waiting request* asks as before (its known tokens less its hit; it has no drafts), capped by
    ``min(token budget, input budget − s)``. One whose chunk is a single token — a prefix hit (or a
    resume's) ending one token short, or a one-token prompt — is padded to ``1 + k`` tokens
    (``pad_spec_decode``: vLLM keeps the step a uniform decode batch, priced as a decode) when no
    running request in the step is a prefill chunk, some running request was scheduled or it
    starts past 0, and ``computed + 1 + k + 1 <= max_model_len``; if ``1 + k`` exceeds the budget
    left the waiting pass ends. Its ``k`` padding drafts are
    placeholders: never accepted. A ``long_prefill_token_threshold`` below ``1 + k`` that would cut
    it is refused (:class:`~budgetlab.errors.ConfigError`): vLLM 0.33 fails an assertion there.
S6. *Verification* (``update_from_output``): a chunk with ``d > 0`` drafts scheduled is the
    request's next verification; it accepts ``a = min(a_i, d)`` (``Request.accepted_drafts``, or an
    acceptance model) and yields ``a + 1`` tokens, trimmed at ``output_tokens``; the ``d − a``
    rejected drafts and the trimmed tokens are rolled back (``num_computed_tokens −= rejected``, and
    ``_update_request_with_output`` takes off the trimmed ones), so all its tokens but the last are
    computed; their slots are reused by the next chunk. Padding drafts are all rejected and do not
    count as a verification.
S7. After a step, every request that sampled enters its blocks in the prefix cache up to its
    computed tokens (``update_from_output`` → ``cache_blocks``, called whenever ``k > 0``).

With ``async_scheduling=True`` (vLLM's ``AsyncScheduler``, ``vllm/v1/core/sched/async_scheduler.py``)
step ``t`` is planned before step ``t − 1``'s outputs are processed, so the scheduler sees that
step's drafts as if all were accepted:

S8. After it is scheduled, a chunk that reaches its known tokens gets ``k`` placeholder drafts
    (``_update_after_schedule``): S1 holds as before. A running request asks for ``1 + k`` tokens
    as in S3, but its chunk starts where the in-flight step left it, past the drafts it had in flight
    (``num_computed_tokens`` is rolled back only when that step's output is processed, right after
    this step is planned); its KV slots (S4) count from there, and its blocks are cached at
    allocation only up to the tokens processed so far.
S9. A request whose in-flight step surely ends it (it had one token left: ``num_computed_tokens +
    2 − num_output_placeholders >= prompt + max_tokens``) is not scheduled; one that finishes only
    because drafts were accepted is scheduled again for ``1 + k`` tokens, computed for nothing, and
    freed once the outputs are processed.
S10. When the in-flight step's outputs are processed, each request that sampled in it enters its
    blocks in the cache up to its computed tokens (S7), unless it was preempted meanwhile (its
    output is stale).

vLLM's refusal (``max_num_batched_tokens <= L``) is :func:`budgetlab.speculative.check_speculative`.
A speculating run keeps its block tables per request (:class:`~budgetlab.simulator.kv_groups.KVGroups`,
even for one full-attention group) and is scheduled step by step in both modes.
"""

from __future__ import annotations

from array import array
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from budgetlab.attention import KVGroup, describe_kv_groups
from budgetlab.errors import ConfigError
from budgetlab.specs import EngineConfig
from budgetlab.workload.acceptance import AcceptanceModel, default_acceptance, draw_accepted_drafts

if TYPE_CHECKING:  # the input module imports the state module, which imports this one
    from budgetlab.simulator.inputs import RequestTable
from budgetlab.speculative import DraftRules, draft_rules

__all__ = ["Drafts", "new_drafts", "check_drafts_supported"]


class Drafts:
    """Each request's speculative state, and the rules that read it (S1–S10 above).

    Parameters
    ----------
    rules : DraftRules
    num_requests : int
    accepted : numpy.ndarray
        The drafts accepted at each verification (S6), every request's in turn (int64).
    accepted_at, accepted_len : numpy.ndarray
        Per request (arrival order), where its values start in ``accepted`` and how many it has
        (verifications past them accept nothing).
    max_model_len : int or None
    """

    __slots__ = (
        "accepted",
        "accepted_at",
        "accepted_len",
        "in_flight",
        "in_flight_tokens",
        "k",
        "lag",
        "lookahead",
        "max_model_len",
        "pending",
        "rules",
        "slots",
        "unsure",
        "verifications",
    )

    def __init__(
        self,
        rules: DraftRules,
        num_requests: int,
        accepted: np.ndarray,
        accepted_at: np.ndarray,
        accepted_len: np.ndarray,
        max_model_len: int | None,
    ) -> None:
        self.rules = rules
        self.k = rules.num_speculative_tokens
        self.lookahead = rules.lookahead_tokens
        self.slots = rules.new_slots_for_drafting
        self.max_model_len = max_model_len if max_model_len is not None else 2**62
        #: S1: drafts proposed for each request's next step (vLLM's ``len(spec_token_ids)``)
        self.pending = array("q", [0]) * num_requests
        #: S6: verifications each request has had
        self.verifications = array("q", [0]) * num_requests
        self.accepted = accepted.tolist()
        self.accepted_at = accepted_at.tolist()
        self.accepted_len = accepted_len.tolist()
        #: S8-S10, pipelined only: the rollback (rejected and trimmed tokens) each request's in-flight
        #: step has not applied yet, the tokens it sampled in that step, the requests that sampled in
        #: it, and those it finished only thanks to accepted drafts
        self.lag = array("q", [0]) * num_requests
        self.in_flight_tokens = array("q", [0]) * num_requests
        self.in_flight: list[int] = []
        self.unsure: set[int] = set()

    def chunk_tokens(self, request: int, computed: int, known: int, cap: int) -> int:
        """S3: the tokens a running ``request`` asks for, within ``cap`` (the token budget left,
        the threshold and the input budget left less ``s``, already combined) [tokens]."""
        n = known + self.pending[request] - computed
        if n > cap:
            n = cap
        room = self.max_model_len - computed - 1
        return n if n < room else room

    def running_chunk(self, request: int, computed: int, known: int, cap: int) -> tuple[int, int]:
        """S3 and S8: where a running ``request``'s chunk starts (pipelined: past its drafts still in
        flight, which the scheduler counts as accepted, in its known tokens too) and how many tokens
        it takes within ``cap`` (0: none) [tokens]."""
        lag = self.lag[request]
        return computed + lag, self.chunk_tokens(request, computed + lag, known + lag, cap)

    def slot_tokens(self, computed: int, num_tokens: int) -> int:
        """S4: the tokens a chunk's allocation must hold, lookahead included [tokens]."""
        end = computed + num_tokens + self.lookahead
        return end if end < self.max_model_len else self.max_model_len

    def padded_tokens(self, hit_tokens: int, num_tokens: int, *, prefill_running: bool, running_scheduled: bool) -> int:
        """S5: ``1 + k`` when a waiting request's single-token chunk is padded, else 0."""
        if (
            num_tokens == 1
            and not prefill_running
            and (running_scheduled or hit_tokens > 0)
            and hit_tokens + 1 + self.k + 1 <= self.max_model_len
        ):
            return 1 + self.k
        return 0

    def verify(self, request: int, num_drafts: int, *, padded: bool) -> int:
        """S6: the drafts accepted out of ``num_drafts`` scheduled (0 for padding); counts the
        verification."""
        if padded:
            return 0
        v = self.verifications[request]
        self.verifications[request] = v + 1
        a = self.accepted[self.accepted_at[request] + v] if v < self.accepted_len[request] else 0
        return a if a < num_drafts else num_drafts


def new_drafts(
    engine: EngineConfig,
    table: RequestTable,
    order: np.ndarray,
    kv_groups: tuple[KVGroup, ...],
    *,
    acceptance: AcceptanceModel | None = None,
    acceptance_seed: int = 0,
) -> Drafts | None:
    """The speculative state of a run of ``engine`` with ``kv_groups`` (None when it does not
    speculate). Acceptance (S6): drawn from ``acceptance`` when given (each request's draws seeded
    by ``(acceptance_seed, its input position)``,
    :func:`~budgetlab.workload.acceptance.draw_accepted_drafts`); else replayed from the requests'
    ``accepted_drafts`` when any has them; else drawn from the method's published acceptance
    (:func:`~budgetlab.workload.acceptance.default_acceptance`). ``order`` is the arrival order."""
    if not engine.num_speculative_tokens or engine.speculative_method is None:
        return None
    check_drafts_supported(engine, kv_groups)
    rules = draft_rules(engine.speculative_method, engine.num_speculative_tokens)
    if acceptance is None and table.accepted_drafts:
        sizes = np.fromiter(map(len, table.accepted_drafts), dtype=np.int64, count=len(table.accepted_drafts))
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        counts = np.fromiter(chain.from_iterable(table.accepted_drafts), dtype=np.int64, count=int(offsets[-1]))
    else:
        model = acceptance if acceptance is not None else default_acceptance(engine.speculative_method)
        counts, offsets = draw_accepted_drafts(
            model, table.output_tokens, engine.num_speculative_tokens, seed=acceptance_seed
        )
    return Drafts(rules, len(order), counts, offsets[:-1][order], np.diff(offsets)[order], engine.max_model_len)


def check_drafts_supported(engine: EngineConfig, kv_groups: tuple[KVGroup, ...]) -> None:
    """Refuse the speculative configurations budgetlab does not schedule yet, with the change that
    makes the run possible.

    Raises
    ------
    ConfigError
    """
    unsupported = []
    if engine.policy != "vllm-v1":
        unsupported.append(f"policy={engine.policy!r} (use the default policy='vllm-v1')")
    if kv_groups != ("full",):
        unsupported.append(
            f"KV-cache groups {describe_kv_groups(kv_groups)} (set kv_groups=('full',): vLLM's "
            "--disable-hybrid-kv-cache-manager)"
        )
    if engine.speculative_method in ("eagle", "eagle3", "mtp") and engine.enable_prefix_caching:
        unsupported.append(
            f"{engine.speculative_method} with prefix caching (vLLM hashes each block with the token after it for "
            "EAGLE-family drafters; set enable_prefix_caching=False or use ngram/draft_model)"
        )
    if unsupported:
        raise ConfigError("budgetlab does not yet simulate speculative decoding with " + "; ".join(unsupported) + ".")
