"""Workloads that share tokens: shared system prompts and multi-turn conversations.

Prefix caching only pays when requests repeat each other's leading tokens. Each request here says
what it shares with :attr:`~budgetlab.specs.Request.prefix_id` and
:attr:`~budgetlab.specs.Request.prefix_tokens` (its first ``prefix_tokens`` tokens are the token
stream that ``prefix_id`` names):

* :func:`system_prompt_workload` -- a few system prompts, each request one of them plus its own
  user message: ``prefix_id = "sys{k}"``, ``prefix_tokens`` = the system prompt's length;
* :func:`multi_turn_workload` -- conversations whose turn ``k`` sends the whole conversation so
  far (every earlier message and answer) plus a new message: ``prefix_id = "conv{c}"``,
  ``prefix_tokens`` = the turn's prompt + output (its answer is sent back by the next turn, so
  the whole turn is the conversation's stream).

:class:`SystemPromptWorkload` and :class:`MultiTurnWorkload` are the same recipes as sweepable
workloads (the :class:`~budgetlab.workload.SweepWorkload` protocol: picklable, deterministic,
``requests(rate_per_s=..., seed=...)`` in requests per second).

Every random draw comes from its own child of :class:`numpy.random.SeedSequence` (``spawn``), so
changing one ingredient (say the output lengths) leaves the others' draws as they were. A
conversation's turns draw their lengths in conversation order, turn after turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from budgetlab._checks import (
    MAX_CV,
    MAX_REQUESTS,
    MAX_TIME_S,
    MAX_TOKENS,
    PLAIN_ERRORS,
    Bound,
    finite_number,
    int_at_least,
    positive_rate,
    random_seed,
)
from budgetlab.specs import Request
from budgetlab.workload.arrivals import poisson_arrivals
from budgetlab.workload.frames import mean_total_tokens
from budgetlab.workload.lengths import LengthDistribution, as_distribution
from budgetlab.workload.synthetic import DEFAULT_NUM_REQUESTS, _checked_sample

MAX_THINK_S = Bound(
    MAX_TIME_S.value / 1e3,
    "s",
    "a conversation of up to a thousand turns must fit in the simulated clock's 2**32 s, where a float "
    "still resolves a microsecond",
)
"""The longest mean think time between turns [s] (about 50 days)."""

__all__ = [
    "system_prompt_workload",
    "multi_turn_workload",
    "SystemPromptWorkload",
    "MultiTurnWorkload",
    "DEFAULT_THINK_TIME_S",
    "DEFAULT_MAX_MODEL_LEN_TOKENS",
    "DEFAULT_NUM_CONVERSATIONS",
]

DEFAULT_THINK_TIME_S = 20.0
"""Mean time between a turn's arrival and the next turn's [s]: a user reading an answer of a few
hundred tokens and typing a reply (tens of seconds), well above a turn's latency on a loaded
engine (seconds), so few turns arrive before the previous answer could exist."""

DEFAULT_MAX_MODEL_LEN_TOKENS = 8192
"""Longest turn, prompt + output, a conversation may reach [tokens] (vLLM's ``max_model_len`` of
an 8k-context model such as Llama 3 8B); a conversation stops before the turn that would exceed it."""

DEFAULT_NUM_CONVERSATIONS = 500
"""Conversations per simulation in :class:`MultiTurnWorkload`: with a few turns each, about
:data:`~budgetlab.workload.DEFAULT_NUM_REQUESTS` requests."""


def _popularity(num_prompts: int, zipf_exponent: float) -> np.ndarray:
    """Probability of each system prompt [-]: ``(k + 1) ** -zipf_exponent``, normalised."""
    weights = np.arange(1, num_prompts + 1, dtype=float) ** -zipf_exponent
    return weights / weights.sum()


def _system_prompt_args(
    num_requests: object, num_prompts: object, zipf_exponent: object, seed: object
) -> tuple[int, int, float, int]:
    """The checked counts, exponent and seed of :func:`system_prompt_workload`."""
    return (
        int_at_least("num_requests", num_requests, 1, **PLAIN_ERRORS, maximum=MAX_REQUESTS),
        int_at_least("num_prompts", num_prompts, 1, **PLAIN_ERRORS, maximum=MAX_REQUESTS),
        finite_number("zipf_exponent", zipf_exponent, positive=False, **PLAIN_ERRORS),
        random_seed("seed", seed, **PLAIN_ERRORS),
    )


def system_prompt_workload(
    *,
    num_requests: int,
    rate_per_s: float,
    num_prompts: int,
    system: LengthDistribution | int,
    message: LengthDistribution | int,
    output: LengthDistribution | int,
    zipf_exponent: float = 1.0,
    seed: int = 0,
) -> list[Request]:
    """Requests that start with one of a few shared system prompts, then their own message.

    ``num_prompts`` system prompts get their lengths from ``system`` (one draw each). Request
    ``i`` arrives by a Poisson process, picks prompt ``k`` with probability proportional to
    ``1 / (k + 1) ** zipf_exponent`` (Zipf-like popularity: prompt 0 is the most used; exponent
    0 is uniform), and its prompt is that system prompt followed by a user message of its own:
    ``prompt_tokens = system_k + message_i``, ``prefix_id = f"sys{k}"``,
    ``prefix_tokens = system_k``. The message is at least one token, so two requests never share
    a whole prompt (nor, therefore, their outputs).

    Parameters
    ----------
    num_requests : int
        How many requests [count], >= 1.
    rate_per_s : float
        Mean arrival rate of the Poisson process [1/s], > 0.
    num_prompts : int
        How many distinct system prompts [count], >= 1.
    system : LengthDistribution or int
        System prompt lengths [tokens]; an int means :class:`~budgetlab.workload.Fixed`.
    message : LengthDistribution or int
        Each request's own user message [tokens].
    output : LengthDistribution or int
        Output lengths, the first token included [tokens].
    zipf_exponent : float
        Popularity skew [-], >= 0: 1 (default) is Zipf's law (with 3 prompts: 6/11, 3/11, 2/11),
        0 uniform, larger more skewed.
    seed : int
        Seed [-], >= 0; split into arrival, system-length, choice, message and output streams.

    Returns
    -------
    list of Request
        ``request_id`` 0, 1, ... in arrival order; the first arrives at 0 s.

    Examples
    --------
    >>> reqs = system_prompt_workload(num_requests=2, rate_per_s=1.0, num_prompts=1, system=100,
    ...                               message=20, output=5)
    >>> [(r.prompt_tokens, r.prefix_id, r.prefix_tokens) for r in reqs]
    [(120, 'sys0', 100), (120, 'sys0', 100)]
    """
    n, num_sys, exponent, seed_value = _system_prompt_args(num_requests, num_prompts, zipf_exponent, seed)
    rate = finite_number("rate_per_s", rate_per_s, positive=True, unit="1/s", **PLAIN_ERRORS)
    dists = [as_distribution(name, v) for name, v in (("system", system), ("message", message), ("output", output))]
    arrival_seq, system_seq, choice_seq, message_seq, output_seq = np.random.SeedSequence(seed_value).spawn(5)
    times = poisson_arrivals(rate_per_s=rate, num_requests=n, seed=arrival_seq)
    system_tokens = _checked_sample("system", dists[0], num_sys, np.random.default_rng(system_seq))
    # inverse CDF of one uniform draw per request (the same draws whatever num_prompts is)
    cumulative = np.cumsum(_popularity(num_sys, exponent))
    uniforms = np.random.default_rng(choice_seq).random(n)
    choice = np.minimum(np.searchsorted(cumulative, uniforms, side="right"), num_sys - 1)
    messages = _checked_sample("message", dists[1], n, np.random.default_rng(message_seq))
    outputs = _checked_sample("output", dists[2], n, np.random.default_rng(output_seq))
    shared = system_tokens[choice]
    return [
        Request(i, t, s + m, o, prefix_id=f"sys{k}", prefix_tokens=s)
        for i, (t, k, s, m, o) in enumerate(
            zip(times.tolist(), choice.tolist(), shared.tolist(), messages.tolist(), outputs.tolist())
        )
    ]


def _multi_turn_args(
    num_conversations: object,
    think_time_s: object,
    think_time_cv: object,
    max_model_len_tokens: object,
    seed: object,
) -> tuple[int, float, float, int | None, int]:
    """The checked counts, think time, cap and seed of :func:`multi_turn_workload`."""
    cap = None
    if max_model_len_tokens is not None:
        cap = int_at_least("max_model_len_tokens", max_model_len_tokens, 2, **PLAIN_ERRORS, maximum=MAX_TOKENS)
    return (
        int_at_least("num_conversations", num_conversations, 1, **PLAIN_ERRORS, maximum=MAX_REQUESTS),
        finite_number("think_time_s", think_time_s, positive=True, unit="s", **PLAIN_ERRORS, maximum=MAX_THINK_S),
        finite_number("think_time_cv", think_time_cv, positive=False, **PLAIN_ERRORS, maximum=MAX_CV),
        cap,
        random_seed("seed", seed, **PLAIN_ERRORS),
    )


def multi_turn_workload(
    *,
    num_conversations: int,
    conversation_rate_per_s: float,
    turns: LengthDistribution | int,
    message: LengthDistribution | int,
    output: LengthDistribution | int,
    think_time_s: float = DEFAULT_THINK_TIME_S,
    think_time_cv: float = 1.0,
    max_model_len_tokens: int | None = DEFAULT_MAX_MODEL_LEN_TOKENS,
    seed: int = 0,
) -> list[Request]:
    """Multi-turn conversations: each turn re-sends the whole conversation plus a new message.

    Conversation ``c`` starts at the ``c``-th arrival of a Poisson process of
    ``conversation_rate_per_s`` (the first at 0 s; :func:`~budgetlab.workload.poisson_arrivals`
    seeded with the seed's first :meth:`~numpy.random.SeedSequence.spawn` child) and has
    ``turns`` turns (one draw per conversation). Turn ``k`` sends a new message ``m_k`` after
    everything said so far, and generates ``o_k`` tokens::

        prompt_k        = (m_1 + o_1) + ... + (m_{k-1} + o_{k-1}) + m_k
        prefix_tokens_k = prompt_k + o_k          prefix_id = f"conv{c}"

    (its answer is part of the stream the next turn sends back). Turn ``k + 1`` arrives a think
    time after turn ``k`` *arrived*: gamma-distributed gaps of mean ``think_time_s`` and
    coefficient of variation ``think_time_cv`` (1: exponential; 0: always ``think_time_s``).

    A conversation stops before the first turn whose prompt + output would exceed
    ``max_model_len_tokens``; one whose first turn already does contributes no request.

    Limitation: the generator does not know when turn ``k`` actually finishes (that depends on
    the engine), so a think time shorter than turn ``k``'s latency makes turn ``k + 1`` arrive
    before turn ``k``'s answer exists; the simulator then serves both at once and turn ``k +
    1`` can hit only what of the conversation is cached by then. The default mean,
    :data:`DEFAULT_THINK_TIME_S`, keeps this uncommon; ``think_time_cv < 1`` makes short think
    times rarer (a gap under a tenth of the mean: 9.5 % of gaps with cv 1, 1.6 % with 0.7,
    0.08 % with 0.5).

    Parameters
    ----------
    num_conversations : int
        How many conversations [count], >= 1.
    conversation_rate_per_s : float
        Mean rate at which conversations start [1/s], > 0 (requests arrive about ``turns``
        times faster).
    turns : LengthDistribution or int
        Turns per conversation [count], each >= 1 (any length distribution draws whole numbers
        >= 1); an int means :class:`~budgetlab.workload.Fixed`.
    message : LengthDistribution or int
        Each turn's new user message [tokens].
    output : LengthDistribution or int
        Each turn's answer, the first token included [tokens].
    think_time_s : float
        Mean gap between the arrivals of consecutive turns of a conversation [s], > 0.
    think_time_cv : float
        Coefficient of variation of that gap [-], >= 0.
    max_model_len_tokens : int or None
        Cap on a turn's prompt + output [tokens], >= 2; None: no cap.
    seed : int
        Seed [-], >= 0; split into start, turn-count, message, output and think-time streams.

    Returns
    -------
    list of Request
        ``request_id`` 0, 1, ... in arrival order (ties: by conversation, then turn).

    Raises
    ------
    ValueError
        Every conversation's first turn exceeds the cap (no request at all), or a bad argument.
    TypeError
        An argument of the wrong type.
    """
    rate = finite_number("conversation_rate_per_s", conversation_rate_per_s, positive=True, unit="1/s", **PLAIN_ERRORS)
    plan = _conversation_turns(
        num_conversations=num_conversations,
        turns=turns,
        message=message,
        output=output,
        think_time_s=think_time_s,
        think_time_cv=think_time_cv,
        max_model_len_tokens=max_model_len_tokens,
        seed=seed,
    )
    return _lay_out(plan, _starts(rate, int(num_conversations), int(seed)))


def _starts(rate_per_s: float, num_conversations: int, seed: int) -> np.ndarray:
    """When the conversations start [s]: Poisson arrivals from the seed's first child stream."""
    stream = np.random.SeedSequence(seed).spawn(1)[0]
    return poisson_arrivals(rate_per_s=rate_per_s, num_requests=num_conversations, seed=stream)


# One turn: (conversation, offset from its start [s], prompt [tokens], output [tokens]).
_Turn = tuple[int, float, int, int]


def _conversation_turns(
    *,
    num_conversations: int,
    turns: LengthDistribution | int,
    message: LengthDistribution | int,
    output: LengthDistribution | int,
    think_time_s: float,
    think_time_cv: float,
    max_model_len_tokens: int | None,
    seed: int,
) -> list[_Turn]:
    """Every turn of every conversation, in conversation order; what does not depend on the rate.

    The seed's first child stream is the conversation starts (drawn by the caller); the next
    four are the turn counts, messages, outputs and think times.
    """
    num_conv, mean_s, cv, cap, seed_value = _multi_turn_args(
        num_conversations, think_time_s, think_time_cv, max_model_len_tokens, seed
    )
    dists = [as_distribution(name, v) for name, v in (("turns", turns), ("message", message), ("output", output))]
    _, turn_seq, message_seq, output_seq, think_seq = np.random.SeedSequence(seed_value).spawn(5)
    counts = _checked_sample("turns", dists[0], num_conv, np.random.default_rng(turn_seq)).tolist()
    total = int(sum(counts))
    messages = _checked_sample("message", dists[1], total, np.random.default_rng(message_seq)).tolist()
    outputs = _checked_sample("output", dists[2], total, np.random.default_rng(output_seq)).tolist()
    gaps = total - num_conv  # one think time before every turn but the first
    if cv == 0.0:
        thinks = [mean_s] * gaps
    else:
        shape = 1.0 / cv**2
        thinks = np.random.default_rng(think_seq).gamma(shape, mean_s / shape, size=gaps).tolist()
    plan: list[_Turn] = []
    turn = gap = 0
    for conversation, count in enumerate(counts):
        history, offset_s = 0, 0.0
        for k in range(count):
            if k:
                offset_s += thinks[gap + k - 1]
            prompt, answer = history + messages[turn + k], outputs[turn + k]
            if cap is not None and prompt + answer > cap:
                break
            plan.append((conversation, offset_s, prompt, answer))
            history = prompt + answer
        turn, gap = turn + count, gap + count - 1
    if not plan:
        raise ValueError(
            f"every conversation's first turn exceeds max_model_len_tokens={cap} (prompt + output); "
            "raise the cap or shorten the message or output lengths"
        )
    return plan


def _lay_out(plan: list[_Turn], starts_s: np.ndarray) -> list[Request]:
    """The turns as requests at their conversation's start + offset, ids in arrival order."""
    times = [float(starts_s[c]) + offset_s for c, offset_s, _, _ in plan]
    order = sorted(range(len(plan)), key=lambda j: times[j])  # stable: ties by conversation, turn
    requests = []
    for i, j in enumerate(order):
        conversation, _, prompt, answer = plan[j]
        requests.append(
            Request(i, times[j], prompt, answer, prefix_id=f"conv{conversation}", prefix_tokens=prompt + answer)
        )
    return requests


@dataclass(frozen=True, kw_only=True)
class SystemPromptWorkload:
    """Shared system prompts (:func:`system_prompt_workload`) as a sweepable workload.

    ``requests(rate_per_s=r, seed=s)`` is ``system_prompt_workload(rate_per_s=r, seed=s, ...)``
    with these fields: at every load the same requests, lengths and prompt choices, in the
    same order (Poisson arrivals scale as ``1 / r``).

    Parameters
    ----------
    system, message, output : LengthDistribution or int
        System prompt, user message and output lengths [tokens].
    num_prompts : int
        Distinct system prompts [count], >= 1.
    num_requests : int
        Requests per simulation [count], >= 1.
    zipf_exponent : float
        Popularity skew of the system prompts [-], >= 0 (0: uniform).
    label : str
        Name in tables (the ``workload`` column).
    """

    system: LengthDistribution | int
    message: LengthDistribution | int
    output: LengthDistribution | int
    num_prompts: int
    num_requests: int = DEFAULT_NUM_REQUESTS
    zipf_exponent: float = 1.0
    label: str = "system-prompts"

    def __post_init__(self) -> None:
        int_at_least("num_requests", self.num_requests, 1, **PLAIN_ERRORS, maximum=MAX_REQUESTS)
        # one draw validates the other fields with the generator's messages
        system_prompt_workload(
            num_requests=1,
            rate_per_s=1.0,
            num_prompts=self.num_prompts,
            system=self.system,
            message=self.message,
            output=self.output,
            zipf_exponent=self.zipf_exponent,
        )

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
        """The requests offered at ``rate_per_s`` [1/s]; ids 0, 1, ... in arrival order.

        Parameters
        ----------
        rate_per_s : float
            Offered load [1/s], > 0.
        seed : int
            Seed of every draw [-], >= 0.
        """
        return system_prompt_workload(
            num_requests=self.num_requests,
            rate_per_s=positive_rate("rate_per_s", rate_per_s),
            num_prompts=self.num_prompts,
            system=self.system,
            message=self.message,
            output=self.output,
            zipf_exponent=self.zipf_exponent,
            seed=random_seed("seed", seed),
        )

    def mean_sequence_tokens(self, *, seed: int = 0) -> float:
        """Mean prompt + output length of the requests the seed draws [tokens]."""
        return mean_total_tokens(self.requests(rate_per_s=1.0, seed=seed))


@dataclass(frozen=True, kw_only=True)
class MultiTurnWorkload:
    """Multi-turn conversations (:func:`multi_turn_workload`) as a sweepable workload.

    ``requests(rate_per_s=r)`` offers ``r`` requests per second in the long run:
    conversations start at ``r * C / N`` per second, with ``C`` = ``num_conversations`` and
    ``N`` the turns the seed draws (under the cap), which do not depend on the load. Only the
    starts scale with the load; think times stay what they are in seconds. A finite sample
    ramps up over the first conversations and down over the last ones' turns, so its measured
    rate (:func:`~budgetlab.workload.trace_stats`) is somewhat below ``r``.

    Parameters
    ----------
    turns, message, output : LengthDistribution or int
        Turns per conversation [count], each turn's new message and its answer [tokens].
    num_conversations : int
        Conversations per simulation [count], >= 1.
    think_time_s, think_time_cv : float
        Mean [s] and coefficient of variation [-] of the gap between consecutive turns.
    max_model_len_tokens : int or None
        Cap on a turn's prompt + output [tokens]; None: no cap.
    label : str
        Name in tables.

    Examples
    --------
    >>> w = MultiTurnWorkload(turns=3, message=50, output=10, num_conversations=2)
    >>> [(r.prompt_tokens, r.prefix_tokens) for r in w.requests(rate_per_s=1.0) if r.prefix_id == "conv0"]
    [(50, 60), (110, 120), (170, 180)]
    """

    turns: LengthDistribution | int
    message: LengthDistribution | int
    output: LengthDistribution | int
    num_conversations: int = DEFAULT_NUM_CONVERSATIONS
    think_time_s: float = DEFAULT_THINK_TIME_S
    think_time_cv: float = 1.0
    max_model_len_tokens: int | None = DEFAULT_MAX_MODEL_LEN_TOKENS
    label: str = "multi-turn"

    def __post_init__(self) -> None:
        self._plan(0)  # validates every field with the generator's messages

    def _plan(self, seed: int) -> list[_Turn]:
        return _conversation_turns(
            num_conversations=self.num_conversations,
            turns=self.turns,
            message=self.message,
            output=self.output,
            think_time_s=self.think_time_s,
            think_time_cv=self.think_time_cv,
            max_model_len_tokens=self.max_model_len_tokens,
            seed=seed,
        )

    def conversation_rate_per_s(self, rate_per_s: float, *, seed: int = 0) -> float:
        """Rate at which conversations start to offer ``rate_per_s`` requests per second [1/s]."""
        rate = positive_rate("rate_per_s", rate_per_s)
        return rate * self.num_conversations / len(self._plan(random_seed("seed", seed)))

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
        """The turns offered at ``rate_per_s`` requests per second [1/s]; ids in arrival order.

        The same as :func:`multi_turn_workload` with these fields and
        ``conversation_rate_per_s=self.conversation_rate_per_s(rate_per_s, seed=seed)``.

        Parameters
        ----------
        rate_per_s : float
            Long-run offered load [1/s], > 0.
        seed : int
            Seed of every draw [-], >= 0.
        """
        rate = positive_rate("rate_per_s", rate_per_s)
        seed_value = random_seed("seed", seed)
        plan = self._plan(seed_value)
        conversation_rate = rate * self.num_conversations / len(plan)
        return _lay_out(plan, _starts(conversation_rate, self.num_conversations, seed_value))

    def mean_sequence_tokens(self, *, seed: int = 0) -> float:
        """Mean prompt + output length of the turns the seed draws [tokens]."""
        return float(np.mean([prompt + answer for _, _, prompt, answer in self._plan(random_seed("seed", seed))]))
