"""What arrives at the engine: one inference request, as the simulator sees it.

Re-exported by :mod:`budgetlab.specs` and the package.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgetlab import _checks as limits
from budgetlab._checks import int_at_least, number_in

__all__ = ["Request"]


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request as the simulator sees it.

    Parameters
    ----------
    request_id : int or str
        Unique name, used in step logs and result tables.
    arrival_at_s : float
        When it reaches the server [s], in [0, 2**62] (:data:`budgetlab._checks.MAX_INSTANT_S`; the
        simulator measures times from the first arrival and bounds the span).
    prompt_tokens : int
        Prompt length [tokens], in [1, 2**27] (:data:`budgetlab._checks.MAX_TOKENS`).
    output_tokens : int
        Tokens it generates, the first one included [tokens], in [1, 2**27].
    priority : int
        Its priority under ``EngineConfig(scheduling_policy="priority")`` (vLLM's
        ``priority``): a smaller value is served first, negative values allowed; default 0.
        Ignored by the FCFS policy. At most 2**62 in magnitude (it is stored as int64).
    prefix_id : int, str or None
        Names the token stream this request shares with others (a system prompt, one
        conversation); None (default): it shares nothing.
    prefix_tokens : int
        How many of its first tokens are that stream [tokens], 0 to ``prompt_tokens +
        output_tokens``; two requests of one ``prefix_id`` have their first
        ``min(prefix_tokens)`` tokens in common. Beyond ``prompt_tokens`` it declares that the
        output it generates is the stream too (a conversation turn whose answer the next turn
        sends back). Equal to ``prompt_tokens``: as in vLLM's own tests, two requests with the
        same whole prompt generate the same tokens, so they share their output blocks too.
        Read by ``EngineConfig(enable_prefix_caching=True)`` only.
    accepted_drafts : tuple of int
        Speculative decoding, replayed exactly: the drafts accepted at this request's 1st, 2nd, ...
        verification (a step that scheduled at least one of its drafts), each an int >= 0; a
        verification of ``d`` drafts yields ``min(a_i, d) + 1`` tokens. Verifications past the end
        of the tuple accept nothing. Default ``()``; any sequence is stored as a tuple. Read only
        with ``EngineConfig(num_speculative_tokens > 0)``, and only when the run is given no
        acceptance model.
    """

    request_id: int | str
    arrival_at_s: float
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    prefix_id: int | str | None = None
    prefix_tokens: int = 0
    accepted_drafts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        where = f"request {self.request_id!r}: "
        if type(self.accepted_drafts) is not tuple:
            if isinstance(self.accepted_drafts, str | bytes) or not hasattr(self.accepted_drafts, "__iter__"):
                raise ValueError(
                    f"{where}accepted_drafts must be a sequence of ints >= 0, got {self.accepted_drafts!r}"
                )
            object.__setattr__(self, "accepted_drafts", tuple(self.accepted_drafts))
        for i, value in enumerate(self.accepted_drafts):
            int_at_least(f"{where}accepted_drafts[{i}]", value, 0, error=ValueError, maximum=limits.MAX_TOKENS)
        if any(type(value) is not int for value in self.accepted_drafts):  # NumPy ints, stored as ints
            object.__setattr__(self, "accepted_drafts", tuple(int(value) for value in self.accepted_drafts))
        seconds = "a finite number of seconds >= 0"
        bound = limits.MAX_INSTANT_S
        number_in(where + "arrival_at_s", self.arrival_at_s, low=0.0, what=seconds, error=ValueError, maximum=bound)
        for name in ("prompt_tokens", "output_tokens"):
            int_at_least(where + name, getattr(self, name), 1, error=ValueError, maximum=limits.MAX_TOKENS)
        priority = "an int in [-2**62, 2**62] (smaller is served first)"
        int_at_least(where + "priority", self.priority, -(2**62), what=priority, error=ValueError)
        if self.priority > 2**62:
            raise ValueError(f"{where}priority must be {priority}, got {self.priority!r}")
        if self.prefix_id is not None and (
            isinstance(self.prefix_id, bool) or not isinstance(self.prefix_id, int | str)
        ):
            raise ValueError(f"{where}prefix_id must be an int, a str or None, got {self.prefix_id!r}")
        total = self.prompt_tokens + self.output_tokens
        shared = f"an int in [0, prompt_tokens + output_tokens = {total}]"
        int_at_least(where + "prefix_tokens", self.prefix_tokens, 0, what=shared, error=ValueError)
        if self.prefix_tokens > total:
            raise ValueError(f"{where}prefix_tokens must be {shared}, got {self.prefix_tokens!r}")
        if self.prefix_tokens and self.prefix_id is None:
            raise ValueError(
                f"{where}prefix_tokens={self.prefix_tokens} needs a prefix_id naming what it shares "
                "(or set prefix_tokens=0)"
            )

    @property
    def total_tokens(self) -> int:
        """Prompt plus output [tokens]."""
        return self.prompt_tokens + self.output_tokens
