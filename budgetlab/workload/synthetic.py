"""Synthetic workloads: seeded random arrivals and lengths, as a list or as a sweepable object.

:func:`synthetic_workload` (and its presets :func:`conversation_like` and :func:`code_like`)
returns a list of :class:`~budgetlab.specs.Request` for one offered load.
:class:`SyntheticWorkload` is the same recipe as a small, picklable description that regenerates
its requests at any offered load with common random numbers (what :func:`budgetlab.sweep`,
:func:`budgetlab.capacity` and :func:`budgetlab.tune` take).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from budgetlab._checks import (
    MAX_CV,
    MAX_REQUESTS,
    PLAIN_ERRORS,
    finite_number,
    int_at_least,
    positive_rate,
    random_seed,
)
from budgetlab.specs import Request
from budgetlab.workload.arrivals import ARRIVAL_KINDS, ArrivalKind, gamma_arrivals, poisson_arrivals
from budgetlab.workload.frames import RequestColumns, fixed_lengths_label, mean_lengths_tokens, mean_total_tokens
from budgetlab.workload.lengths import PRESETS, Fixed, LengthDistribution, as_distribution, whole_numbers

__all__ = ["synthetic_workload", "conversation_like", "code_like", "SyntheticWorkload", "DEFAULT_NUM_REQUESTS"]


DEFAULT_NUM_REQUESTS = 2000
"""Requests per simulation in the presets: enough for stable p90/p99, fast enough to sweep."""


def synthetic_workload(
    *,
    num_requests: int,
    rate_per_s: float,
    prompt: LengthDistribution | int,
    output: LengthDistribution | int,
    arrivals: ArrivalKind = "poisson",
    cv: float = 1.0,
    seed: int = 0,
) -> list[Request]:
    """A seeded random workload: arrivals from a process, lengths from two distributions.

    The seed is split (:meth:`numpy.random.SeedSequence.spawn`) into three independent child
    streams -- arrivals, prompt lengths, output lengths -- so changing one of the three leaves
    the other two draws exactly as they were (e.g. a longer prompt distribution keeps the same
    arrival instants and output lengths).

    Parameters
    ----------
    num_requests : int
        How many requests [count], >= 1.
    rate_per_s : float
        Mean arrival rate [1/s], > 0.
    prompt : LengthDistribution or int
        Prompt lengths [tokens]; an int means :class:`Fixed`.
    output : LengthDistribution or int
        Output lengths, the first token included [tokens]; an int means :class:`Fixed`.
    arrivals : {"poisson", "gamma"}
        Arrival process (:func:`poisson_arrivals` or :func:`gamma_arrivals`).
    cv : float
        Coefficient of variation of the gaps [-], for ``arrivals="gamma"`` only (a value other
        than 1 with ``"poisson"`` is an error rather than silently ignored).
    seed : int
        Seed [-], >= 0.

    Returns
    -------
    list of Request
        ``request_id`` 0, 1, ... in arrival order; the first arrives at 0 s.

    Examples
    --------
    >>> reqs = synthetic_workload(num_requests=3, rate_per_s=2.0, prompt=Uniform(100, 200),
    ...                           output=Fixed(50), seed=7)
    >>> [r.output_tokens for r in reqs]
    [50, 50, 50]
    """
    times, prompts, outputs = _draw(num_requests, rate_per_s, prompt, output, arrivals, cv, seed)
    return [Request(i, t, p, o) for i, (t, p, o) in enumerate(zip(times.tolist(), prompts.tolist(), outputs.tolist()))]


def _draw(
    num_requests: int,
    rate_per_s: float,
    prompt: LengthDistribution | int,
    output: LengthDistribution | int,
    arrivals: ArrivalKind,
    cv: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`synthetic_workload`'s arguments checked and drawn: arrival instants [s], prompt
    and output lengths [tokens], in arrival order."""
    n = int_at_least("num_requests", num_requests, 1, **PLAIN_ERRORS, maximum=MAX_REQUESTS)
    rate = finite_number("rate_per_s", rate_per_s, positive=True, unit="1/s", **PLAIN_ERRORS)
    prompt_dist = as_distribution("prompt", prompt)
    output_dist = as_distribution("output", output)
    seed_value = random_seed("seed", seed, **PLAIN_ERRORS)
    if arrivals not in ARRIVAL_KINDS:
        raise ValueError(f"arrivals must be one of {', '.join(ARRIVAL_KINDS)}, got {arrivals!r}")
    cv_value = finite_number("cv", cv, positive=False, **PLAIN_ERRORS, maximum=MAX_CV)
    if arrivals == "poisson" and cv_value != 1.0:
        raise ValueError(
            f"cv={cv!r} only applies to gamma arrivals (Poisson gaps always have cv = 1); pass arrivals='gamma'"
        )
    arrival_seq, prompt_seq, output_seq = np.random.SeedSequence(seed_value).spawn(3)
    if arrivals == "poisson":
        times = poisson_arrivals(rate_per_s=rate, num_requests=n, seed=arrival_seq)
    else:
        times = gamma_arrivals(rate_per_s=rate, cv=cv_value, num_requests=n, seed=arrival_seq)
    prompts = _checked_sample("prompt", prompt_dist, n, np.random.default_rng(prompt_seq))
    outputs = _checked_sample("output", output_dist, n, np.random.default_rng(output_seq))
    return times, prompts, outputs


def _checked_sample(name: str, dist: LengthDistribution, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw from a (possibly user-written) distribution and check the result's shape and values."""
    values = np.asarray(dist.sample(n, rng))
    if values.shape != (n,):
        raise ValueError(f"{name}: {dist!r}.sample({n}, rng) returned shape {values.shape}, not ({n},)")
    return whole_numbers(f"{name} sample from {dist!r}", values)


def _preset_workload(
    preset: str, num_requests: int, rate_per_s: float, *, seed: int, arrivals: ArrivalKind, cv: float
) -> list[Request]:
    """:func:`synthetic_workload` with the prompt and output lengths of ``PRESETS[preset]``."""
    prompt, output = PRESETS[preset]
    return synthetic_workload(
        num_requests=num_requests,
        rate_per_s=rate_per_s,
        prompt=prompt,
        output=output,
        arrivals=arrivals,
        cv=cv,
        seed=seed,
    )


def conversation_like(
    *,
    num_requests: int,
    rate_per_s: float,
    seed: int = 0,
    arrivals: ArrivalKind = "poisson",
    cv: float = 1.0,
) -> list[Request]:
    """A chat-service workload: Splitwise conversation-trace prompt and output lengths.

    Prompts follow :data:`CONVERSATION_PROMPT` (median 1,020 tokens) and outputs
    :data:`CONVERSATION_OUTPUT` (median 129 tokens), log-normals fitted to the trace's median
    and 90th percentile. (The trace itself arrives at ≈ 5.5 req/s with gap cv ≈ 1.09.)

    Parameters
    ----------
    num_requests, rate_per_s, seed, arrivals, cv
        As in :func:`synthetic_workload`: count, mean rate [1/s], seed, arrival process and
        the gaps' coefficient of variation for gamma arrivals [-].

    Returns
    -------
    list of Request
    """
    return _preset_workload("conversation-like", num_requests, rate_per_s, seed=seed, arrivals=arrivals, cv=cv)


def code_like(
    *,
    num_requests: int,
    rate_per_s: float,
    seed: int = 0,
    arrivals: ArrivalKind = "poisson",
    cv: float = 1.0,
) -> list[Request]:
    """A code-completion workload: Splitwise code-trace prompt and output lengths.

    Prompts follow :data:`CODE_PROMPT` (median 1,469 tokens) and outputs :data:`CODE_OUTPUT`
    (median 13 tokens): long prompts, short answers. The real trace (≈ 2.6 req/s) is very
    bursty, gap cv ≈ 13; pass ``arrivals="gamma", cv=...`` to imitate that.

    Parameters
    ----------
    num_requests, rate_per_s, seed, arrivals, cv
        As in :func:`conversation_like`.

    Returns
    -------
    list of Request
    """
    return _preset_workload("code-like", num_requests, rate_per_s, seed=seed, arrivals=arrivals, cv=cv)


@dataclass(frozen=True, kw_only=True)
class SyntheticWorkload:
    """Random arrivals and lengths, regenerated at any offered load with common random numbers.

    Arrivals are drawn once at 1 request/s (Poisson or gamma gaps) and every instant is divided
    by the offered rate, so two loads differ only in time scale: the same requests, in the same
    order, with the same lengths (see :func:`budgetlab.workload.synthetic_workload` for how the
    seed splits into arrival and length streams).

    Parameters
    ----------
    prompt : LengthDistribution or int
        Prompt lengths [tokens]; an int means :class:`~budgetlab.workload.Fixed`.
    output : LengthDistribution or int
        Output lengths, first token included [tokens].
    num_requests : int
        Requests per simulation [count], >= 1. A few thousand give stable p90/p99 latencies
        and keep a sweep point well under a second.
    arrivals : {"poisson", "gamma"}
        Arrival process.
    cv : float
        Coefficient of variation of the gaps, for gamma arrivals [-].
    label : str
        Name in tables (the ``workload`` column).

    Examples
    --------
    >>> w = SyntheticWorkload.conversation_like(num_requests=100)
    >>> slow, fast = w.requests(rate_per_s=1.0), w.requests(rate_per_s=4.0)
    >>> slow[7].prompt_tokens == fast[7].prompt_tokens
    True
    """

    prompt: LengthDistribution | int
    output: LengthDistribution | int
    num_requests: int = DEFAULT_NUM_REQUESTS
    arrivals: ArrivalKind = "poisson"
    cv: float = 1.0
    label: str = "synthetic"

    def __post_init__(self) -> None:
        int_at_least("num_requests", self.num_requests, maximum=MAX_REQUESTS)
        # One draw validates the distributions, the arrival kind and cv with workload's messages.
        synthetic_workload(
            num_requests=1,
            rate_per_s=1.0,
            prompt=self.prompt,
            output=self.output,
            arrivals=self.arrivals,
            cv=self.cv,
            seed=0,
        )

    @classmethod
    def conversation_like(
        cls,
        *,
        num_requests: int = DEFAULT_NUM_REQUESTS,
        arrivals: ArrivalKind = "poisson",
        cv: float = 1.0,
    ) -> SyntheticWorkload:
        """Chat traffic: Splitwise conversation-trace lengths (prompt median ≈ 1,020 tokens,
        output median ≈ 129), see :func:`budgetlab.workload.conversation_like`."""
        prompt, output = PRESETS["conversation-like"]
        return cls(
            prompt=prompt, output=output, num_requests=num_requests, arrivals=arrivals, cv=cv, label="conversation-like"
        )

    @classmethod
    def code_like(
        cls,
        *,
        num_requests: int = DEFAULT_NUM_REQUESTS,
        arrivals: ArrivalKind = "poisson",
        cv: float = 1.0,
    ) -> SyntheticWorkload:
        """Code completion: Splitwise code-trace lengths (long prompts, short answers), see
        :func:`budgetlab.workload.code_like`."""
        prompt, output = PRESETS["code-like"]
        return cls(prompt=prompt, output=output, num_requests=num_requests, arrivals=arrivals, cv=cv, label="code-like")

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
        """The requests offered at ``rate_per_s`` [1/s]; ids 0, 1, ... in arrival order.

        Parameters
        ----------
        rate_per_s : float
            Offered load [1/s], > 0.
        seed : int
            Seed of the arrival and length draws [-], >= 0.
        """
        return list(self.columns(rate_per_s=rate_per_s, seed=seed))

    def columns(self, *, rate_per_s: float, seed: int = 0) -> RequestColumns:
        """:meth:`requests` as columns (no ``Request`` built until one is asked for): what
        the sweeps, capacity searches and the tuner simulate."""
        rate = positive_rate("rate_per_s", rate_per_s)
        times, prompts, outputs = _draw(
            self.num_requests, 1.0, self.prompt, self.output, self.arrivals, self.cv, random_seed("seed", seed)
        )
        return RequestColumns(times / rate, prompts, outputs)

    def mean_sequence_tokens(self, *, seed: int = 0) -> float:
        """Mean prompt + output length of the requests the seed draws [tokens]."""
        return mean_total_tokens(self.columns(rate_per_s=1.0, seed=seed))

    def with_fixed_lengths(self, *, seed: int = 0) -> SyntheticWorkload:
        """This workload's fixed-length twin: the same arrivals, every prompt and every output at
        the mean length the seed draws (rounded to whole tokens, at least 1).

        "Uniform-length" traffic with the same mean load, to show what heterogeneous lengths
        change; labelled ``"fixed lengths (1,234 + 345 tokens)"``.

        Parameters
        ----------
        seed : int
            Seed of the draw whose mean lengths are used [-].
        """
        prompt_tokens, output_tokens = mean_lengths_tokens(self.columns(rate_per_s=1.0, seed=seed))
        return replace(
            self,
            prompt=Fixed(prompt_tokens),
            output=Fixed(output_tokens),
            label=fixed_lengths_label(prompt_tokens, output_tokens),
        )
