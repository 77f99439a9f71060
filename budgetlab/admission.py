"""The three gates a waiting request passes before it runs: a sequence slot, room in this
step's token budget, and free KV-cache blocks.

The first two are knobs you set (``max_num_seqs``, ``max_num_batched_tokens``); the third is
what GPU memory leaves after the weights (:mod:`budgetlab.memory`). As in vLLM V1 (0.33), the
KV gate checks the blocks for the request's whole *known* sequence (its prompt, plus tokens it
had generated before a preemption) against the free pool, although only the blocks for this
step's chunk are then allocated; future output tokens are not counted, which is why running
requests can later run the pool dry and force a preemption.

Each gate is a pure function returning ``True`` when it lets the request through;
:func:`admit` applies them in vLLM's order and says which one refused. Every count must be an
int (Python's or NumPy's; not a bool, a float or a string) in its range, else
:class:`~budgetlab.errors.ParameterError` names it. The simulator calls the gates once per
scheduling decision with Python ints, so each tests ``type(x) is int`` and the range inline and
calls the general check (:func:`budgetlab._checks.int_at_least`) only when that fails.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from budgetlab._checks import FAST_INT_TYPES, int_at_least
from budgetlab.memory import ceil_blocks

__all__ = [
    "Gate",
    "Admission",
    "seq_slot_free",
    "budget_has_room",
    "kv_blocks_fit",
    "admit",
    "slot_open",
    "budget_open",
    "blocks_open",
]


class Gate(enum.Enum):
    """The package's one gate vocabulary: which gate refused a request, or held a step's
    waiting requests back.

    Members are listed in the order reports list them. ``value`` is the short stable key that
    tables store (``"slot"``, ``"budget"``, ``"kv"``, ``"none"``; ``Gate("kv")`` looks one up);
    :attr:`label` is the words a chart or a table shows. :data:`NONE` is not a gate: it marks a
    step at which nobody waited (:func:`budgetlab.metrics.step_gates`); :func:`admit` never
    returns it.
    """

    SLOT = "slot"
    BUDGET = "budget"
    KV = "kv"
    NONE = "none"

    @property
    def label(self) -> str:
        """The gate in words, for display (``"sequence slot (max_num_seqs)"``, ...)."""
        return _GATE_LABELS[self.value]

    @property
    def key(self) -> str:
        """The short stable key tables store (the same as ``value``)."""
        return str(self.value)


_GATE_LABELS = {
    "slot": "sequence slot (max_num_seqs)",
    "budget": "token budget",
    "kv": "KV memory",
    "none": "nobody waiting",
}


#: Each count's smallest value and its description in a refusal's message.
_RANGES: dict[str, tuple[int, str]] = {
    "num_running": (0, "an int >= 0 [requests]"),
    "max_num_seqs": (1, "an int >= 1 [requests]"),
    "budget_left_tokens": (0, "an int >= 0 [tokens]"),
    "known_tokens": (0, "an int >= 0 [tokens]"),
    "free_blocks": (0, "an int >= 0 [blocks]"),
    "block_size": (1, "an int >= 1 [tokens per block]"),
    "held_hit_blocks": (0, "an int >= 0 [blocks]"),
    "reserve_blocks": (0, "an int >= 0 [blocks]"),
}


def _count(name: str, value: object) -> int:
    """``value`` as a Python int if it is an int in the range :data:`_RANGES` gives ``name``;
    else :class:`~budgetlab.errors.ParameterError` naming it. The gates' slow path: each gate
    first tests ``type(x) is int`` and the range inline (the simulator passes Python ints)."""
    minimum, what = _RANGES[name]
    if type(value) in FAST_INT_TYPES and value >= minimum:  # type: ignore[operator]
        return int(value)  # type: ignore[call-overload]
    return int_at_least(name, value, minimum, what=what)


def seq_slot_free(*, num_running: int, max_num_seqs: int) -> bool:
    """Whether a sequence slot is free: fewer than ``max_num_seqs`` requests run (partially
    prefilled ones count).

    Raises
    ------
    ParameterError
        ``num_running`` not an int >= 0, or ``max_num_seqs`` not an int >= 1.
    """
    if type(num_running) is not int or type(max_num_seqs) is not int or num_running < 0 or max_num_seqs < 1:
        num_running = _count("num_running", num_running)
        max_num_seqs = _count("max_num_seqs", max_num_seqs)
    return slot_open(num_running, max_num_seqs)


def slot_open(num_running: int, max_num_seqs: int) -> bool:
    """:func:`seq_slot_free` without the argument checks: the rule itself, in plain arithmetic
    that the compiled engine core (:mod:`budgetlab.simulator.core`) compiles as it is."""
    return num_running < max_num_seqs


def budget_open(budget_left_tokens: int) -> bool:
    """:func:`budget_has_room` without the argument checks (see :func:`slot_open`)."""
    return budget_left_tokens > 0


def blocks_open(
    known_tokens: int, free_blocks: int, block_size: int, held_hit_blocks: int, reserve_blocks: int
) -> bool:
    """:func:`kv_blocks_fit` without the argument checks (see :func:`slot_open`)."""
    return -(-known_tokens // block_size) - held_hit_blocks + reserve_blocks <= free_blocks  # ceil_blocks, inline


def budget_has_room(*, budget_left_tokens: int) -> bool:
    """Whether this step's token budget has at least one token left [tokens].

    Raises
    ------
    ParameterError
        ``budget_left_tokens`` not an int >= 0 (a budget cannot be overdrawn).
    """
    if type(budget_left_tokens) is not int or budget_left_tokens < 0:
        budget_left_tokens = _count("budget_left_tokens", budget_left_tokens)
    return budget_open(budget_left_tokens)


def kv_blocks_fit(
    *, known_tokens: int, free_blocks: int, block_size: int, held_hit_blocks: int = 0, reserve_blocks: int = 0
) -> bool:
    """Whether the blocks for the request's whole known sequence fit in the free pool.

    ``ceil(known_tokens / block_size) − held_hit_blocks + reserve_blocks <= free_blocks`` (an
    exact fit is admitted). ``held_hit_blocks`` are prefix-cache hits on blocks that running
    requests hold: they cost nothing (a hit on a cached block nobody holds leaves the free
    queue, so it costs as much as a new block); ``reserve_blocks`` is vLLM's watermark
    (``vllm-v1-prefix-async-priority.md`` rules 10–13).

    Raises
    ------
    ParameterError
        A count that is not an int >= 0 (``block_size``: >= 1).
    """
    if (
        type(known_tokens) is not int
        or type(free_blocks) is not int
        or type(block_size) is not int
        or type(held_hit_blocks) is not int
        or type(reserve_blocks) is not int
        or known_tokens < 0
        or free_blocks < 0
        or block_size < 1
        or held_hit_blocks < 0
        or reserve_blocks < 0
    ):
        known_tokens = _count("known_tokens", known_tokens)
        free_blocks = _count("free_blocks", free_blocks)
        block_size = _count("block_size", block_size)
        held_hit_blocks = _count("held_hit_blocks", held_hit_blocks)
        reserve_blocks = _count("reserve_blocks", reserve_blocks)
    return blocks_open(known_tokens, free_blocks, block_size, held_hit_blocks, reserve_blocks)


@dataclass(frozen=True)
class Admission:
    """Outcome of :func:`admit`.

    Attributes
    ----------
    admitted : bool
    refused_by : Gate or None
        The first gate that refused, in vLLM's order; ``None`` when admitted.
    reason : str
        One sentence with the numbers behind the decision.
    """

    admitted: bool
    refused_by: Gate | None
    reason: str


def admit(
    *,
    num_running: int,
    max_num_seqs: int,
    budget_left_tokens: int,
    known_tokens: int,
    free_blocks: int,
    block_size: int = 16,
) -> Admission:
    """Apply the three gates in vLLM's order: budget, sequence slot, then KV blocks.

    Parameters
    ----------
    num_running : int
        Requests in the running list now [count].
    max_num_seqs : int
        Sequence cap [count].
    budget_left_tokens : int
        This step's budget not yet handed out [tokens].
    known_tokens : int
        The request's known sequence: prompt plus tokens generated before a preemption [tokens].
    free_blocks : int
        Free KV blocks in the pool [count].
    block_size : int
        Tokens per block [tokens].

    Raises
    ------
    ParameterError
        A count that is not an int in its range (``max_num_seqs`` and ``block_size`` >= 1,
        the others >= 0), checked before any gate.
    """
    num_running = _count("num_running", num_running)
    max_num_seqs = _count("max_num_seqs", max_num_seqs)
    budget_left_tokens = _count("budget_left_tokens", budget_left_tokens)
    known_tokens = _count("known_tokens", known_tokens)
    free_blocks = _count("free_blocks", free_blocks)
    block_size = _count("block_size", block_size)
    if not budget_has_room(budget_left_tokens=budget_left_tokens):
        return Admission(False, Gate.BUDGET, "this step's token budget is used up")
    if not seq_slot_free(num_running=num_running, max_num_seqs=max_num_seqs):
        return Admission(False, Gate.SLOT, f"all {max_num_seqs} sequence slots (max_num_seqs) are taken")
    needed = ceil_blocks(known_tokens, block_size)
    if not kv_blocks_fit(known_tokens=known_tokens, free_blocks=free_blocks, block_size=block_size):
        return Admission(
            False,
            Gate.KV,
            f"its {known_tokens} known tokens need {needed} KV blocks but only {free_blocks} are free",
        )
    return Admission(
        True, None, f"admitted: slot {num_running + 1} of {max_num_seqs}, {needed} of {free_blocks} free blocks"
    )
