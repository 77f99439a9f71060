"""The stall guard: when a run that samples nothing is a livelock, and the error that says so.

vLLM's rules can cycle (requests preempting each other forever, e.g. with
``scheduler_reserve_full_isl=False``); both the reference steps (:mod:`.loop`) and the compiled
core (:mod:`.compiled`) stop a run that samples no token for :func:`stall_limit_steps` steps
and raise :func:`stall_error`'s error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from budgetlab.errors import SchedulerStallError
from budgetlab.specs import EngineConfig

if TYPE_CHECKING:
    from budgetlab.simulator.drafts import Drafts
    from budgetlab.simulator.inputs import RequestTable

__all__ = ["stall_limit_steps", "stall_error"]


def stall_limit_steps(table: RequestTable) -> int:
    """Steps without a sampled token after which the run is a livelock [steps]: twice every
    request's prompt and output, plus 1,000 (a run that makes progress samples a token at
    least every time the pending prompts' tokens are computed once)."""
    return 2 * int(table.prompt_tokens.sum() + table.output_tokens.sum()) + 1000


def stall_error(
    engine: EngineConfig,
    limit: int,
    *,
    now_s: float,
    num_running: int,
    num_waiting: int,
    num_preemptions: int,
    drafts: Drafts | None = None,
) -> SchedulerStallError:
    """The :class:`~budgetlab.errors.SchedulerStallError` of a run stuck in a preemption cycle
    (no token sampled in ``limit`` steps), with what to change."""
    hint = (
        "With scheduler_reserve_full_isl=False admission lets in requests the pool cannot hold "
        "together: set it to True (vLLM's default)"
        if not engine.scheduler_reserve_full_isl
        else "Give the KV cache more blocks"
    )
    if drafts is not None:  # speculating: a request's chunk may need more blocks than its tokens fill
        hint += (
            f" (speculating, a request also holds blocks for up to {drafts.k} drafts and "
            f"{drafts.lookahead} lookahead slots past its tokens: a pool that holds its prompt and output "
            "alone can be too small; lower num_speculative_tokens)"
        )
    return SchedulerStallError(
        f"no request sampled a token in the last {limit:,} steps (t = {now_s:.6g} s, "
        f"{num_running} running, {num_waiting} waiting, {num_preemptions:,} "
        f"preemptions so far): the requests preempt each other in a cycle, as vLLM's scheduler "
        f"would. {hint}, or a larger KV pool (num_kv_blocks, gpu_memory_utilization)."
    )
