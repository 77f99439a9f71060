"""The reference's step notation, rebuilt from a simulation's step log (shared by the simulator
tests).

``shared/reference/vllm-v1-prefix-async-priority.md`` quotes the steps vLLM scheduled as
``id:Kn@p``: a chunk of ``n`` tokens of kind P(refill), D(ecode) or R(ecompute) starting at
computed position ``p`` (the log's ``start``: for an admission chunk, the prefix-cache hit);
``*`` marks a chunk that samples a token (it reaches the end of the request's known tokens:
prompt plus every token sampled before it, in flight or not). Chunks of one step are joined by
`` + ``; `` | preempted=x,y`` lists the step's victims, and the optional counters
(`` | free=n``, `` | run=r wait=w``) are the step table's values right after scheduling.
An iteration that schedules nothing (an async empty step) renders as ``""`` (plus counters).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable

from budgetlab import Request
from budgetlab.simulator import SimResult

__all__ = ["KIND_LETTERS", "COUNTER_COLUMNS", "rendered", "rendered_at"]

KIND_LETTERS = {"prefill": "P", "decode": "D", "recompute": "R"}
#: Counter name in the notation -> column of ``SimResult.steps``.
COUNTER_COLUMNS = {"free": "num_free_kv_blocks", "run": "num_running", "wait": "num_waiting"}


def rendered(result: SimResult, requests: Iterable[Request], *, counters: tuple[str, ...] = ()) -> list[str]:
    """Every step in the reference's notation, in order (one string per executed step).

    ``counters`` picks the step-table values appended to each line, among ``"free"``,
    ``"run"`` and ``"wait"`` (in the given order, e.g. ``("run", "wait")`` gives
    ``"a:D1@23* | run=2 wait=1"``).
    """
    prompt = {r.request_id: r.prompt_tokens for r in requests}
    generated: dict[Hashable, int] = defaultdict(int)
    columns = {name: result.steps[COUNTER_COLUMNS[name]].tolist() for name in counters}
    lines = []
    for index, entry in enumerate(result.step_log()):
        chunks = []
        for (rid, n, kind), position in zip(entry["scheduled"], entry["start"], strict=True):
            samples = position + n == prompt[rid] + generated[rid]
            generated[rid] += samples
            chunks.append(f"{rid}:{KIND_LETTERS[kind]}{n}@{position}{'*' if samples else ''}")
        parts = [" + ".join(chunks)] if chunks else []
        if entry["preempted"]:
            parts.append("preempted=" + ",".join(str(rid) for rid in entry["preempted"]))
        if counters:
            parts.append(" ".join(f"{name}={columns[name][index]}" for name in counters))
        lines.append(" | ".join(parts))
    return lines


def rendered_at(result: SimResult, requests: Iterable[Request], *, counters: tuple[str, ...] = ()) -> dict[int, str]:
    """:func:`rendered` keyed by each step's start time as an int: with ``ConstantCost(1.0)``
    that is the reference's step number, also across idle gaps (an idle engine starts its next
    step at the next arrival, where the reference keeps counting)."""
    starts = [round(entry["start_at_s"]) for entry in result.step_log()]
    return dict(zip(starts, rendered(result, requests, counters=counters), strict=True))
