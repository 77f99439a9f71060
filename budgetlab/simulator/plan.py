"""One step's plan: the chunks it schedules, in order, and the kinds of chunk.

The reference step functions (:mod:`.step`, :mod:`.waiting`, :mod:`.drafts`) fill a
:class:`StepPlan` as they schedule (the compiled core keeps the same rows in an array); its
:meth:`StepPlan.batch`, or :func:`step_batch` of the core's rows, is what the cost model prices.
Re-exported by :mod:`.state`.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from budgetlab.specs import Batch

__all__ = ["STEP_KINDS", "DECODE", "PREFILL", "RECOMPUTE", "StepPlan", "step_batch"]

#: Chunk kinds in the step log, indexed by the codes below.
STEP_KINDS = ("decode", "prefill", "recompute")
DECODE, PREFILL, RECOMPUTE = 0, 1, 2


class StepPlan:
    """The chunks one step schedules, in scheduling order, and the requests it preempted.

    ``requests`` (arrival-order indices), ``num_tokens``, ``kinds`` (:data:`DECODE`, ...) and
    ``computed_before`` (the request's computed tokens before the chunk) are aligned lists;
    ``num_cached_tokens`` sums the prefix-cache hits of the requests it admits [tokens].
    (A plain class with slots: one is made per step, and this is the cheapest to make.)
    """

    __slots__ = (
        "computed_before",
        "drafts",
        "input_left",
        "kinds",
        "num_cached_tokens",
        "num_tokens",
        "padded",
        "preempted",
        "requests",
    )

    def __init__(self) -> None:
        self.num_cached_tokens = 0
        #: speculative decoding only: drafts scheduled per request (padding included), the
        #: requests whose drafts are padding, and the input budget left (drafts.py, S2, S5, S6)
        self.drafts: dict[int, int] = {}
        self.padded: set[int] = set()
        self.input_left = 0
        self.requests: list[int] = []
        self.num_tokens: list[int] = []
        self.kinds: list[int] = []
        self.computed_before: list[int] = []
        self.preempted: list[int] = []

    def batch(self) -> Batch:
        """The step's composition for the cost model."""
        return step_batch(zip(self.requests, self.num_tokens, self.kinds, self.computed_before), self.padded)


def step_batch(chunks: Iterable[tuple[int, int, int, int]], padded: AbstractSet[int] = frozenset()) -> Batch:
    """A step's composition for the cost model from its chunks in scheduling order, each
    ``(request, tokens, kind, computed tokens before it)`` (a :class:`StepPlan`'s lists, or a
    row of the compiled core's plan); ``padded``: the requests whose drafts are padding."""
    num_decodes = 0
    decode_tokens = 0
    decode_context = 0
    prefill_tokens: list[int] = []
    prefill_context: list[int] = []
    for r, n, kind, before in chunks:
        if kind == DECODE or (padded and r in padded and before):
            # a padded admission (drafts.py S5) runs as vLLM runs it: one new token over its
            # context and k placeholder drafts, a decode of the uniform 1 + k batch
            num_decodes += 1
            decode_tokens += n  # 1, or 1 + the drafts it verifies
            decode_context += before
        else:
            prefill_tokens.append(n)
            prefill_context.append(before)
    return Batch(
        num_decodes, decode_context, tuple(prefill_tokens), tuple(prefill_context), decode_tokens - num_decodes
    )
