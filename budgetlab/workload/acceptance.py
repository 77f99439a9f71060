"""Acceptance of speculative drafts: models that predict how many drafts each verification accepts.

A speculating engine verifies a decoding request's ``k`` drafts in one step and keeps the longest
prefix the target model agrees with, plus one token of its own (the *bonus* token). For prediction,
the accepted count ``A`` of one verification is modelled by per-position rates:

* ``p_i`` -- the probability that draft ``i`` is accepted given drafts ``1 .. i-1`` were (a
  *conditional* rate); positions past those given reuse the last rate.
* ``c_i = p_1 p_2 ... p_i = P(A >= i)`` -- the probability that at least ``i`` drafts are
  accepted. **This unconditional number is what vLLM reports as its "per-position acceptance
  rate"** (``vllm:spec_decode_num_accepted_tokens_per_pos / vllm:spec_decode_num_drafts``, the
  ``SpecDecoding metrics`` log line, ``vllm bench serve``): its scheduler counts position ``i``
  for a verification only when ``i`` drafts or more were accepted
  (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingStats.observe_draft``). Use
  :meth:`AcceptanceRates.from_vllm` for those numbers.

Closed forms, for ``k`` drafts per verification:

* expected accepted drafts ``E[A] = c_1 + c_2 + ... + c_k`` (:func:`expected_accepted_drafts`);
* expected tokens per verification ``1 + E[A]`` -- vLLM's *mean acceptance length*, which counts
  the bonus token (:func:`expected_tokens_per_verification`).

:class:`AcceptanceRates` takes the rates; :class:`MeanAcceptanceLength` takes a mean acceptance
length ``L`` measured at some ``k`` and assumes one constant rate ``p`` at every position, the one
with ``1 + p + p**2 + ... + p**k = L``. Both draw seeded, reproducible counts
(``accepted_drafts(num_verifications, num_speculative_tokens, rng)``), and
:func:`with_accepted_drafts` writes them into ``Request.accepted_drafts`` for the simulator to
replay. A draw uses one uniform number ``u`` per verification and accepts ``#{i <= k : u < c_i}``
drafts, so the same seed gives ``min(A, k)`` of one underlying count at every ``k``: raising ``k``
never lowers a verification's accepted drafts (common random numbers across a sweep of ``k``).

:data:`PUBLISHED_ACCEPTANCE` lists published vLLM acceptance measurements by drafting method, each
with its source; :func:`default_acceptance` builds the model of a method's first row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol, overload, runtime_checkable

import numpy as np

from budgetlab._checks import MAX_TOKENS, int_at_least, is_int, number_in, random_seed, whole_array
from budgetlab.errors import ParameterError
from budgetlab.specs import Request
from budgetlab.speculative import MAX_SPECULATIVE_TOKENS, SPECULATIVE_METHODS

__all__ = [
    "AcceptanceModel",
    "AcceptanceRates",
    "MeanAcceptanceLength",
    "PublishedAcceptance",
    "PUBLISHED_ACCEPTANCE",
    "default_acceptance",
    "with_accepted_drafts",
    "draw_accepted_drafts",
    "expected_accepted_drafts",
    "expected_tokens_per_verification",
]

_K_WHAT = "an int >= 0 [drafts per verification] (0: no speculation)"


def _k(name: str, value: object) -> int:
    return int_at_least(name, value, 0, what=_K_WHAT, error=ParameterError, maximum=MAX_SPECULATIVE_TOKENS)


def _rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(0)), got {rng!r}")
    return rng


def _rates(name: str, values: object) -> tuple[float, ...]:
    """``values`` as a non-empty tuple of probabilities in [0, 1]."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ParameterError(f"{name} must be a non-empty sequence of probabilities in [0, 1], got {values!r}")
    rates = tuple(
        number_in(f"{name}[{i}]", v, low=0.0, high=1.0, what="a probability in [0, 1]", error=ParameterError)
        for i, v in enumerate(values)
    )
    if not rates:
        raise ParameterError(f"{name} is empty; give the rate of draft position 1 at least")
    if len(rates) > MAX_SPECULATIVE_TOKENS.value:
        raise ParameterError(
            f"{name} has {len(rates)} positions; at most {MAX_SPECULATIVE_TOKENS.value} ({MAX_SPECULATIVE_TOKENS.why})"
        )
    return rates


def _survival(conditional: np.ndarray) -> np.ndarray:
    """``c_i = p_1 ... p_i`` (``P(A >= i)``), clipped to be non-increasing against rounding."""
    return np.minimum.accumulate(np.cumprod(conditional))


def _draw(survival: np.ndarray, num_verifications: object, rng: object) -> np.ndarray:
    """Accepted counts of ``num_verifications`` verifications: ``#{i : u < c_i}`` for one uniform ``u``
    each, an int64 array of values in ``[0, len(survival)]``."""
    n = int_at_least("num_verifications", num_verifications, 0, error=ParameterError, maximum=MAX_TOKENS)
    u = _rng(rng).random(n)
    k = survival.size
    # survival is non-increasing: the count of c_i > u is k minus the count of c_i <= u
    return (k - np.searchsorted(survival[::-1], u, side="right")).astype(np.int64)


@runtime_checkable
class AcceptanceModel(Protocol):
    """Anything that predicts accepted drafts: per-position rates and seeded draws.

    ``position_rates(k)`` returns the conditional rates ``p_1 .. p_k`` (a float array of ``k``
    values in [0, 1]); ``accepted_drafts(num_verifications, num_speculative_tokens, rng)`` draws
    the accepted count of each verification (an int array of values in ``0 .. k``).
    """

    def position_rates(self, num_speculative_tokens: int) -> np.ndarray:  # pragma: no cover
        ...

    def accepted_drafts(
        self, num_verifications: int, num_speculative_tokens: int, rng: np.random.Generator
    ) -> np.ndarray:  # pragma: no cover
        ...


@dataclass(frozen=True)
class AcceptanceRates:
    """Per-position conditional acceptance rates.

    Parameters
    ----------
    per_position : sequence of float
        ``p_1, p_2, ...`` [-]: ``p_i`` is the probability that draft ``i`` is accepted given drafts
        ``1 .. i-1`` were, each in [0, 1]. Positions past the tuple use its last value (a constant
        tail). For the unconditional rates vLLM reports, use :meth:`from_vllm`.

    Examples
    --------
    >>> model = AcceptanceRates(per_position=(0.8, 0.5))
    >>> round(expected_accepted_drafts(model, 2), 9)  # 0.8 + 0.8 * 0.5
    1.2
    """

    per_position: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_position", _rates("AcceptanceRates.per_position", self.per_position))

    @classmethod
    def from_vllm(cls, per_position: Iterable[float]) -> AcceptanceRates:
        """The model of vLLM's reported per-position acceptance rates ``c_1, c_2, ...``.

        vLLM's rate at position ``i`` is ``P(A >= i)``, the share of verifications that accepted
        draft ``i`` (and so every draft before it); the conditional rates are ``p_1 = c_1`` and
        ``p_i = c_i / c_{i-1}`` (0 where ``c_{i-1} = 0``: that position is never reached).

        Raises
        ------
        ParameterError
            A rate outside [0, 1], or one larger than the rate before it (impossible for vLLM's
            counts: conditional rates belong in ``AcceptanceRates(per_position=...)``).
        """
        rates = _rates("vLLM per-position acceptance rates", per_position)
        for i in range(1, len(rates)):
            if rates[i] > rates[i - 1]:
                raise ParameterError(
                    f"vLLM per-position acceptance rates cannot increase (position {i + 1} is accepted only "
                    f"when position {i} is), got {rates[i]!r} after {rates[i - 1]!r} in {rates!r}. Conditional "
                    "rates (draft i accepted given drafts 1..i-1 were) go in AcceptanceRates(per_position=...)"
                )
        conditional = [rates[0]] + [rates[i] / rates[i - 1] if rates[i - 1] > 0 else 0.0 for i in range(1, len(rates))]
        return cls(per_position=tuple(conditional))

    def position_rates(self, num_speculative_tokens: int) -> np.ndarray:
        """Conditional rates ``p_1 .. p_k`` [-], the tuple's last value repeated past its end."""
        k = _k("num_speculative_tokens", num_speculative_tokens)
        rates = np.asarray(self.per_position, dtype=float)
        return np.concatenate([rates[:k], np.full(max(k - rates.size, 0), rates[-1])])

    def vllm_per_position(self, num_speculative_tokens: int) -> np.ndarray:
        """What vLLM would report as its per-position acceptance rates, ``c_i = P(A >= i)`` for
        ``i = 1 .. k`` [-]."""
        return _survival(self.position_rates(num_speculative_tokens))

    def accepted_drafts(
        self, num_verifications: int, num_speculative_tokens: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Accepted drafts of ``num_verifications`` verifications of ``num_speculative_tokens``
        drafts each: an int64 array of counts in ``0 .. k``, each the number of leading drafts
        accepted, drawn from ``rng`` (one uniform number per verification)."""
        return _draw(self.vllm_per_position(num_speculative_tokens), num_verifications, rng)


def _constant_rate(mean_tokens: float, k: int) -> float:
    """The ``p`` in [0, 1] with ``1 + p + ... + p**k = mean_tokens`` (bisection; the sum rises with p)."""
    target = mean_tokens - 1.0
    if target <= 0.0:
        return 0.0
    if target >= k:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        total = sum(mid**i for i in range(1, k + 1))
        if total < target:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


@dataclass(frozen=True)
class MeanAcceptanceLength:
    """A mean acceptance length, as vLLM reports it, and the constant rate it implies.

    Assumption: every draft position is accepted with one rate ``p`` given the earlier ones were,
    so a verification of ``k`` drafts yields on average ``1 + p + p**2 + ... + p**k`` tokens
    (``= (1 - p**(k+1)) / (1 - p)`` for ``p < 1``). ``p`` is solved so that this equals
    ``mean_tokens`` at the ``k`` it was measured at; at any other ``k`` the same ``p`` is used.

    Parameters
    ----------
    mean_tokens : float
        vLLM's *mean acceptance length* [tokens per verification]: ``1 + accepted drafts /
        verifications``, the bonus token included; in ``[1, k + 1]``.
    num_speculative_tokens : int
        The ``k`` it was measured at [drafts per verification], >= 1.

    Attributes
    ----------
    rate : float
        The implied constant per-position rate ``p`` [-].

    Raises
    ------
    ParameterError
        ``mean_tokens`` below 1 or above ``k + 1``: impossible for ``k`` drafts.

    Examples
    --------
    >>> MeanAcceptanceLength(mean_tokens=1.75, num_speculative_tokens=2).rate  # 1 + p + p**2 = 1.75
    0.5
    """

    mean_tokens: float
    num_speculative_tokens: int
    rate: float = field(init=False)

    def __post_init__(self) -> None:
        k = int_at_least(
            "MeanAcceptanceLength.num_speculative_tokens",
            self.num_speculative_tokens,
            1,
            what="an int >= 1 [drafts per verification], the k the mean was measured at",
            error=ParameterError,
            maximum=MAX_SPECULATIVE_TOKENS,
        )
        mean = number_in(
            "MeanAcceptanceLength.mean_tokens",
            self.mean_tokens,
            what="a finite number of tokens per verification",
            error=ParameterError,
        )
        if mean < 1.0:
            raise ParameterError(
                f"MeanAcceptanceLength.mean_tokens must be >= 1 (vLLM's mean acceptance length counts the bonus "
                f"token, so every verification yields at least 1), got {self.mean_tokens!r}. A mean number of "
                f"accepted drafts m is a mean acceptance length of 1 + m = {1.0 + mean:g}"
            )
        if mean > k + 1:
            raise ParameterError(
                f"MeanAcceptanceLength.mean_tokens = {self.mean_tokens!r} is impossible with "
                f"num_speculative_tokens={k}: a verification of {k} drafts yields at most {k + 1} tokens. "
                f"Give the k it was measured at (at least {math.ceil(mean - 1.0)})"
            )
        object.__setattr__(self, "num_speculative_tokens", k)
        object.__setattr__(self, "mean_tokens", mean)
        object.__setattr__(self, "rate", _constant_rate(mean, k))

    def as_rates(self) -> AcceptanceRates:
        """The same model as :class:`AcceptanceRates` (``per_position=(rate,)``)."""
        return AcceptanceRates(per_position=(self.rate,))

    def position_rates(self, num_speculative_tokens: int) -> np.ndarray:
        """``rate`` at each of the ``k`` positions [-]."""
        return self.as_rates().position_rates(num_speculative_tokens)

    def vllm_per_position(self, num_speculative_tokens: int) -> np.ndarray:
        """What vLLM would report per position, ``rate**i`` for ``i = 1 .. k`` [-]."""
        return self.as_rates().vllm_per_position(num_speculative_tokens)

    def accepted_drafts(
        self, num_verifications: int, num_speculative_tokens: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Accepted drafts per verification, as :meth:`AcceptanceRates.accepted_drafts`."""
        return self.as_rates().accepted_drafts(num_verifications, num_speculative_tokens, rng)


def _model(model: object) -> AcceptanceModel:
    if not isinstance(model, AcceptanceModel):
        raise TypeError(
            "model must be an acceptance model (AcceptanceRates, MeanAcceptanceLength, or an object with "
            f"position_rates(k) and accepted_drafts(n, k, rng)), got {model!r}"
        )
    return model


def _survival_of(model: AcceptanceModel, k: int) -> np.ndarray:
    rates = np.asarray(model.position_rates(k), dtype=float)
    if rates.shape != (k,) or not np.all((rates >= 0.0) & (rates <= 1.0)):
        raise ParameterError(f"{model!r}.position_rates({k}) must return {k} probabilities in [0, 1], got {rates!r}")
    return _survival(rates)


def _expected(model: object, num_speculative_tokens: object) -> float | np.ndarray:
    """``c_1 + ... + c_k`` for an int ``k`` (a float) or an array of them (an array)."""
    acceptance = _model(model)
    if is_int(num_speculative_tokens):
        k = _k("num_speculative_tokens", num_speculative_tokens)
        return float(_survival_of(acceptance, k).sum())
    ks = whole_array(
        "num_speculative_tokens",
        num_speculative_tokens,
        0,
        what=f"ints in [0, {MAX_SPECULATIVE_TOKENS.value}] [drafts per verification]",
        error=ParameterError,
        maximum=MAX_SPECULATIVE_TOKENS,
    )
    k_max = int(ks.max()) if ks.size else 0
    cumulative = np.concatenate([[0.0], np.cumsum(_survival_of(acceptance, k_max))])
    return float(cumulative[ks]) if ks.ndim == 0 else cumulative[ks]


@overload
def expected_accepted_drafts(model: AcceptanceModel, num_speculative_tokens: int) -> float: ...
@overload
def expected_accepted_drafts(
    model: AcceptanceModel, num_speculative_tokens: Iterable[int] | np.ndarray
) -> np.ndarray: ...
def expected_accepted_drafts(model: AcceptanceModel, num_speculative_tokens: object) -> float | np.ndarray:
    """Expected accepted drafts per verification, ``c_1 + ... + c_k`` with ``c_i = p_1 ... p_i`` [drafts].

    Parameters
    ----------
    model : AcceptanceModel
    num_speculative_tokens : int or array_like of int
        ``k`` [drafts per verification], >= 0 (0 gives 0); an array sweeps ``k``. Whole floats
        (``2.0``) are read as ints.

    Returns
    -------
    float or numpy.ndarray
        A float for a single ``k``, else a float array of ``k``'s shape.
    """
    return _expected(model, num_speculative_tokens)


@overload
def expected_tokens_per_verification(model: AcceptanceModel, num_speculative_tokens: int) -> float: ...
@overload
def expected_tokens_per_verification(
    model: AcceptanceModel, num_speculative_tokens: Iterable[int] | np.ndarray
) -> np.ndarray: ...
def expected_tokens_per_verification(model: AcceptanceModel, num_speculative_tokens: object) -> float | np.ndarray:
    """Expected tokens a verification yields, ``1 + E[A]`` [tokens]: vLLM's mean acceptance length.

    Parameters and returns as :func:`expected_accepted_drafts`.
    """
    return 1.0 + _expected(model, num_speculative_tokens)


def with_accepted_drafts(
    requests: Iterable[Request], model: AcceptanceModel, num_speculative_tokens: int, *, seed: int = 0
) -> list[Request]:
    """Copies of ``requests`` whose ``accepted_drafts`` are drawn from ``model``.

    Request ``i`` (its position in ``requests``) gets ``output_tokens`` draws, one per output
    token (an upper bound on its verifications, each of which yields at least one token), from a
    generator seeded by ``(seed, i)`` alone: its draws do not depend on the other requests, and a
    longer output only appends draws. With ``num_speculative_tokens = 0`` the tuple is empty
    (verifications past the tuple accept nothing).

    Parameters
    ----------
    requests : iterable of Request
    model : AcceptanceModel
        E.g. :class:`AcceptanceRates`, :class:`MeanAcceptanceLength`, :func:`default_acceptance`.
    num_speculative_tokens : int
        ``k`` [drafts per verification], >= 0: each count is in ``0 .. k``.
    seed : int
        Seed [-], >= 0.

    Returns
    -------
    list of Request
        New requests (:func:`dataclasses.replace`); every other field as it was.
    """
    items = list(requests)
    for i, request in enumerate(items):
        if not isinstance(request, Request):
            raise TypeError(f"requests[{i}] must be a Request, got {request!r}")
    outputs = np.fromiter((r.output_tokens for r in items), dtype=np.int64, count=len(items))
    counts, offsets = draw_accepted_drafts(model, outputs, num_speculative_tokens, seed=seed)
    return [
        replace(request, accepted_drafts=tuple(counts[offsets[i] : offsets[i + 1]].tolist()))
        for i, request in enumerate(items)
    ]


def draw_accepted_drafts(
    model: AcceptanceModel, num_verifications: np.ndarray, num_speculative_tokens: int, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Every request's accepted drafts drawn from ``model``, as one flat array: request ``i`` gets
    ``num_verifications[i]`` draws from a generator seeded by ``(seed, i)`` alone (what
    :func:`with_accepted_drafts` stores in ``Request.accepted_drafts``, and what
    :func:`budgetlab.simulate` draws with ``acceptance=``).

    Returns
    -------
    tuple of numpy.ndarray
        The counts (int64, each in ``0 .. k``; none with ``k = 0``) and the offsets (``len + 1``
        int64: request ``i``'s counts are ``counts[offsets[i]:offsets[i + 1]]``).
    """
    acceptance = _model(model)
    k = _k("num_speculative_tokens", num_speculative_tokens)
    seed_value = random_seed("seed", seed, error=ParameterError)
    sizes = np.asarray(num_verifications, dtype=np.int64) if k else np.zeros(len(num_verifications), dtype=np.int64)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    counts = np.empty(int(offsets[-1]), dtype=np.int64)
    for i, size in enumerate(sizes.tolist()):
        if not size:
            continue
        drawn = np.asarray(acceptance.accepted_drafts(size, k, np.random.default_rng([seed_value, i])))
        if drawn.shape != (size,) or drawn.min() < 0 or drawn.max() > k:
            raise ParameterError(
                f"{acceptance!r}.accepted_drafts({size}, {k}, rng) must return {size} counts in [0, {k}], "
                f"got shape {drawn.shape}"
            )
        counts[offsets[i] : offsets[i + 1]] = drawn
    return counts, offsets


# --------------------------------------------------------------------------------------------
# Published acceptance, by method
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedAcceptance:
    """One published measurement of acceptance in vLLM (or, where said, of the model's authors).

    Attributes
    ----------
    method : str
        vLLM's ``--speculative-config`` method (one of ``SPECULATIVE_METHODS``).
    model : str
        The target model, and the drafter where it is a separate checkpoint.
    dataset : str
        The prompts, and the sampling where the source states it.
    num_speculative_tokens : int
        ``k`` of the measurement [drafts per verification].
    vllm_per_position : tuple of float
        vLLM's per-position acceptance rates ``c_1 .. c_k`` (``P(A >= i)``) [-]; empty if not given.
    mean_tokens : float or None
        vLLM's mean acceptance length (bonus token included) [tokens per verification]; None if
        not given.
    source : str
        URL of the source.
    title : str
        Its title, and where in it the numbers are.
    note : str
        Caveats: how the numbers were read off, what they leave out.
    """

    method: str
    model: str
    dataset: str
    num_speculative_tokens: int
    vllm_per_position: tuple[float, ...]
    mean_tokens: float | None
    source: str
    title: str
    note: str = ""

    def acceptance(self) -> AcceptanceRates | MeanAcceptanceLength:
        """The acceptance model of this row: :meth:`AcceptanceRates.from_vllm` of its per-position
        rates where given, else :class:`MeanAcceptanceLength` of its mean at its ``k``."""
        if self.vllm_per_position:
            return AcceptanceRates.from_vllm(self.vllm_per_position)
        if self.mean_tokens is None:
            raise ParameterError(f"{self.source}: a published row needs vllm_per_position or mean_tokens")
        return MeanAcceptanceLength(self.mean_tokens, self.num_speculative_tokens)


_VLLM_AL_TEST = "https://github.com/vllm-project/vllm/blob/main/tests/v1/spec_decode/test_acceptance_length.py"
_VLLM_AL_TITLE = "vLLM tests/v1/spec_decode/test_acceptance_length.py, {} (acceptance-length regression baselines)"
_MT_BENCH = "MT-Bench (philschmid/mt-bench), 80 prompts, 256 output tokens, temperature 0"
_ISSUE_20780 = "https://github.com/vllm-project/vllm/issues/20780"
_TITLE_20780 = "vLLM issue #20780 (EAGLE-1 vs EAGLE-3 on Llama 3.1 8B), table 'AL' by K"
_NOTE_20780 = "Mean acceptance length only; per-position rates not given."


def _al_sweep(method: str, model: str, values: tuple[float, ...]) -> tuple[PublishedAcceptance, ...]:
    """Rows of issue #20780's acceptance-length table, k = 2 .. 7."""
    return tuple(
        PublishedAcceptance(method, model, "MT-Bench", k, (), v, _ISSUE_20780, _TITLE_20780, _NOTE_20780)
        for k, v in zip(range(2, 8), values)
    )


_ROWS: dict[str, tuple[PublishedAcceptance, ...]] = {
    "eagle3": (
        PublishedAcceptance(
            "eagle3",
            "meta-llama/Llama-3.1-8B-Instruct + RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
            _MT_BENCH,
            3,
            (0.7296, 0.5208, 0.3545),
            2.60,
            _VLLM_AL_TEST,
            _VLLM_AL_TITLE.format("EAGLE3_MODEL_CONFIGS 'llama3-8b-eagle3'"),
        ),
        PublishedAcceptance(
            "eagle3",
            "Qwen/Qwen3-8B + RedHatAI/Qwen3-8B-speculator.eagle3",
            _MT_BENCH,
            3,
            (0.6541, 0.3993, 0.2020),
            2.26,
            _VLLM_AL_TEST,
            _VLLM_AL_TITLE.format("EAGLE3_MODEL_CONFIGS 'qwen3-8b-eagle3'"),
        ),
        PublishedAcceptance(
            "eagle3",
            "openai/gpt-oss-20b + RedHatAI/gpt-oss-20b-speculator.eagle3",
            _MT_BENCH,
            3,
            (0.7165, 0.5120, 0.3337),
            2.56,
            _VLLM_AL_TEST,
            _VLLM_AL_TITLE.format("EAGLE3_MODEL_CONFIGS 'gpt-oss-20b-eagle3'"),
        ),
        PublishedAcceptance(
            "eagle3",
            "meta-llama/Llama-3.1-8B-Instruct + yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "MT-Bench (philschmid/mt-bench), 80 prompts, temperature 0",
            7,
            (),
            3.53,
            "https://github.com/vllm-project/vllm/issues/26191",
            "vLLM issue #26191 'Performance Regression in Acceptance length for EAGLE3', 'Previous AL=3.53'",
            "num_drafts 4816, num_accepted_tokens 12208 (1 + 12208/4816 = 3.53); the value before the regression.",
        ),
        *_al_sweep(
            "eagle3",
            "meta-llama/Llama-3.1-8B-Instruct + yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            (2.36, 2.79, 3.08, 3.32, 3.46, 3.54),
        ),
    ),
    # k = 3 first: the default (the issue's best k for EAGLE-1)
    "eagle": tuple(
        sorted(
            _al_sweep(
                "eagle",
                "meta-llama/Llama-3.1-8B-Instruct + yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                (2.1, 2.29, 2.39, 2.43, 2.45, 2.47),
            ),
            key=lambda row: row.num_speculative_tokens != 3,
        )
    ),
    "mtp": (
        PublishedAcceptance(
            "mtp",
            "deepseek-ai/DeepSeek-V3 (its MTP module), FP8, TP 8",
            "MT-Bench (philschmid/mt-bench), 80 prompts, 256 output tokens, greedy",
            1,
            (),
            1.882,
            _VLLM_AL_TEST,
            _VLLM_AL_TITLE.format("MTP_MODEL_CONFIGS 'deepseek-v3-mtp-fp8-tp8'"),
            "The file's later version; a single rate of 0.882, inside DeepSeek's own 85-90 %.",
        ),
        PublishedAcceptance(
            "mtp",
            "deepseek-ai/DeepSeek-V3 (its MTP module)",
            "'various generation topics' (DeepSeek's own evaluation, not vLLM)",
            1,
            (0.85,),
            None,
            "https://arxiv.org/abs/2412.19437",
            "DeepSeek-V3 Technical Report, sec. 5.4.3: 'the acceptance rate of the second token prediction "
            "ranges between 85% and 90%'",
            "Low end of the reported range; 1.8x TPS reported with it.",
        ),
        PublishedAcceptance(
            "mtp",
            "deepseek-ai/DeepSeek-V3 (its MTP module)",
            "'various generation topics' (DeepSeek's own evaluation, not vLLM)",
            1,
            (0.90,),
            None,
            "https://arxiv.org/abs/2412.19437",
            "DeepSeek-V3 Technical Report, sec. 5.4.3 (high end of the 85-90 % range)",
        ),
        PublishedAcceptance(
            "mtp",
            "deepseek-ai/DeepSeek-R1 (its MTP module), TP 8",
            "online serving benchmark (PR #12755)",
            1,
            (0.81,),
            None,
            "https://github.com/vllm-project/vllm/pull/12755",
            "vLLM PR #12755 'DeepSeek MTP spec decode': 'The acceptance rate is 81% ~ 82.3% on R1 k=1'",
            "Low end of the reported 81-82.3 %.",
        ),
        PublishedAcceptance(
            "mtp",
            "nvidia/DeepSeek-V4-Flash-NVFP4 (its MTP module), TP 4",
            "MT-Bench (philschmid/mt-bench), 80 prompts, 256 output tokens, greedy",
            1,
            (),
            1.70,
            _VLLM_AL_TEST,
            _VLLM_AL_TITLE.format("MTP_MODEL_CONFIGS 'deepseek-v4-flash-mtp-nvfp4-tp4'"),
        ),
        PublishedAcceptance(
            "mtp",
            "zai-org/GLM-4.5-Air (106B; one MTP head, run for 3 positions), 4 x H100",
            "GPQA-Main (reasoning)",
            3,
            (0.92, 0.68, 0.38),
            None,
            "https://specdecode-bench.github.io",
            "Liu et al., 'Speculative Decoding: Performance or Illusion?' (arXiv 2601.11580), project page, "
            "'Reasoning Workloads': 'position-wise acceptance rate degrades sharply ... (0.92 -> 0.68 -> 0.38 on "
            "GPQA-Main)'",
            "Read as vLLM's per-position rates (vLLM v0.10.1 metrics); the page does not define them further.",
        ),
    ),
    "ngram": (
        PublishedAcceptance(
            "ngram",
            "the default model of vLLM's examples/offline_inference/spec_decode.py (not named in the post)",
            "code editing: vdaita/edit_5k_char (blazedit), 90 prompts, 2048 output tokens; prompt_lookup 2..5",
            5,
            (0.81, 0.74, 0.70, 0.68, 0.66),
            4.59,
            "https://github.com/vllm-project/vllm/pull/24344",
            "vLLM PR #24344 '[Spec Decode][Hybrid] Add ngram-eagle SD method', method ngram output",
            "Per verification that had drafts: 821 of 5376 tokens came from steps with no n-gram match "
            "('seq normalized acceptance length: 2.96'); a model of these rates overstates n-gram where "
            "matches are missing.",
        ),
    ),
    "draft_model": (),
}

PUBLISHED_ACCEPTANCE: Mapping[str, tuple[PublishedAcceptance, ...]] = MappingProxyType(_ROWS)
"""Published acceptance measurements by vLLM method name (each row cites its source). The first row
of each method is what :func:`default_acceptance` uses. ``draft_model`` has none: no vLLM
acceptance figure for a draft-model pair was found in the sources searched."""


def default_acceptance(method: str) -> AcceptanceRates | MeanAcceptanceLength:
    """The acceptance model of ``PUBLISHED_ACCEPTANCE[method][0]``.

    * ``"eagle3"``: Llama-3.1-8B-Instruct with RedHatAI's EAGLE-3 speculator, MT-Bench, k = 3,
      vLLM per-position rates 0.7296, 0.5208, 0.3545 (vLLM's acceptance-length regression test).
    * ``"eagle"``: Llama-3.1-8B-Instruct with yuhuili/EAGLE-LLaMA3.1-Instruct-8B, MT-Bench, mean
      acceptance length 2.29 at k = 3 (vLLM issue #20780), as a constant rate.
    * ``"mtp"``: DeepSeek-V3's MTP module, MT-Bench, mean acceptance length 1.882 at k = 1 (vLLM's
      regression test): rate 0.882 at every position -- optimistic past k = 1 for a model with one
      MTP module run repeatedly (the GLM-4.5-Air row's rates fall 0.92, 0.68, 0.38).
    * ``"ngram"``: code editing (blazedit), k = 5, vLLM per-position rates 0.81 .. 0.66 (vLLM PR
      #24344), counted over verifications that had drafts.

    Raises
    ------
    ParameterError
        An unknown method, or ``"draft_model"`` (no published row: pass an
        :class:`AcceptanceRates` or :class:`MeanAcceptanceLength` measured for the pair).
    """
    if method not in SPECULATIVE_METHODS:
        raise ParameterError(f"method must be one of {', '.join(SPECULATIVE_METHODS)}, got {method!r}")
    rows = PUBLISHED_ACCEPTANCE.get(method, ())
    if not rows:
        raise ParameterError(
            f"no published vLLM acceptance for {method!r} in PUBLISHED_ACCEPTANCE: draft-model acceptance depends "
            "on the pair; measure it (vLLM's 'SpecDecoding metrics' log line) and pass "
            "AcceptanceRates.from_vllm([...]) or MeanAcceptanceLength(mean_tokens, num_speculative_tokens) "
            "(simulate's acceptance=, or Request.accepted_drafts through with_accepted_drafts)"
        )
    return rows[0].acceptance()
