"""Step-cost models: how long one forward pass (one engine step) takes.

A step reads every weight once and does ``2 × params`` FLOPs per token it processes; on a
roofline the slower of the two sets the time. That is the seeds' idealized model,
:class:`IdealCost`. :class:`ConstantCost` makes every step the same length (time counted in
steps), which is what hand-worked scheduling examples want.

The cost-model interface
------------------------
Anything with these two methods can drive :func:`budgetlab.simulate` and the sweeps:

``batch_time_s(batch: Batch) -> float``
    Seconds for a step of the given composition.
``decode_run_time_s(*, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray``
    Seconds for each of a run of consecutive decode-only steps, where step ``i`` holds
    ``num_decodes`` decodes whose contexts sum to ``decode_context_tokens[i]``. It must equal
    ``batch_time_s`` of each step to the last bit, so the simulator can jump over such runs.
    :func:`budgetlab.simulate` does without it (it then prices each step of a run with
    ``batch_time_s``, more slowly); :class:`CostModel` and the sweeps expect both methods.

``step_time_s(num_tokens)`` is the scripted, vectorized view used by the notebooks: the time
of a step that processes ``num_tokens`` tokens.

Sources: the roofline model (Williams, Waterman & Patterson, CACM 2009); ``2 × params`` FLOPs
per token for a dense transformer's linear layers (Kaplan et al. 2020, §2.1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from budgetlab._checks import number_in
from budgetlab.errors import NoBudgetMeetsTargetError
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = [
    "Batch",
    "CostModel",
    "IdealCost",
    "ConstantCost",
    "knee_tokens",
    "shortest_step_s",
    "budget_for_step_time",
    "bisect_largest",
]


@dataclass(frozen=True, slots=True)
class Batch:
    """The composition of one step: what the forward pass processes.

    Attributes
    ----------
    num_decodes : int
        Decoding sequences, one token each [count].
    decode_context_tokens : int
        Sum over those decodes of the tokens already in their KV cache [tokens].
    prefill_tokens : tuple of int
        One entry per prefill (or recompute) chunk: its length [tokens].
    prefill_context_tokens : tuple of int
        For each chunk, the tokens of the same request already in the KV cache [tokens]
        (0 for a first chunk; a later chunk attends to all earlier ones).
    """

    num_decodes: int = 0
    decode_context_tokens: int = 0
    prefill_tokens: tuple[int, ...] = ()
    prefill_context_tokens: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        """Tokens the step processes [tokens]."""
        return self.num_decodes + sum(self.prefill_tokens)


@runtime_checkable
class CostModel(Protocol):
    """What the simulator needs from a step-cost model (see the module docstring)."""

    def batch_time_s(self, batch: Batch) -> float: ...

    def decode_run_time_s(
        self, *, num_decodes: int, decode_context_tokens: np.ndarray
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class IdealCost:
    """The seeds' idealized step: ``max(weight read, token math)`` on one GPU.

    ``step_time_s(n) = max(weight_bytes / mem_bandwidth, n × 2 × num_params / peak_flops)``.
    Attention, KV reads and overheads are left out on purpose: the shape is the point
    (see :mod:`budgetlab.calibrated` for what real steps add). Every parameter counts as
    touched by every token, as in a dense model; for a mixture-of-experts model this overstates
    the math (``CalibratedCost(moe=True)`` uses the active parameters).

    Parameters
    ----------
    hardware : HardwareSpec
        The GPU (peak dense BF16 FLOP/s and memory bandwidth are used).
    model : ModelSpec
        The model (``num_params`` and ``dtype_bytes`` are used).

    Examples
    --------
    Llama 3.1 8B on an H100 SXM: 4.79 ms weight read, 16.2 µs per token, knee ≈ 295 tokens.
    """

    hardware: HardwareSpec
    model: ModelSpec
    weight_read_s: float = field(init=False)
    per_token_s: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "weight_read_s", self.model.weight_bytes / self.hardware.mem_bandwidth_bytes_per_s
        )
        object.__setattr__(
            self, "per_token_s", self.flops_per_token / self.hardware.dense_bf16_flops_per_s
        )

    @property
    def flops_per_token(self) -> float:
        """Linear-layer math per token [FLOP]: ``2 × num_params``."""
        return 2.0 * self.model.num_params

    def step_time_s(self, num_tokens: ArrayLike) -> np.ndarray | float:
        """Time of a step that processes ``num_tokens`` tokens [s] (vectorized).

        Parameters
        ----------
        num_tokens : int or array_like of int
            Tokens in the step [tokens], >= 0. A step of 0 tokens is not run (0 s).
        """
        tokens = np.asarray(num_tokens, dtype=float)
        if not np.all(tokens >= 0):  # NaN too
            raise ValueError("num_tokens must be >= 0")
        time_s = np.where(tokens > 0, np.maximum(self.weight_read_s, tokens * self.per_token_s), 0.0)
        return float(time_s) if time_s.ndim == 0 else time_s

    def batch_time_s(self, batch: Batch) -> float:
        """Time of a step of the given composition [s]: only its token count matters here.

        Plain float arithmetic, equal to the last bit to :meth:`step_time_s` (the simulator
        calls this once per step, where NumPy's per-call overhead would dominate).
        """
        num_tokens = batch.num_tokens
        if num_tokens < 0:
            raise ValueError("num_tokens must be >= 0")
        if num_tokens == 0:
            return 0.0
        return max(self.weight_read_s, num_tokens * self.per_token_s)

    def decode_run_time_s(
        self, *, num_decodes: int, decode_context_tokens: np.ndarray
    ) -> np.ndarray:
        """Times of consecutive decode-only steps [s]: all equal, context does not matter."""
        step_s = self.batch_time_s(Batch(num_decodes=num_decodes))
        return np.full(np.shape(decode_context_tokens), step_s)


@dataclass(frozen=True)
class ConstantCost:
    """Every step takes the same time, whatever it holds: time counted in steps.

    Parameters
    ----------
    step_time_s : float
        Duration of every step [s], > 0.
    """

    step_time_s: float = 1.0

    def __post_init__(self) -> None:
        seconds = "a positive number of seconds"
        number_in("step_time_s", self.step_time_s, low=0.0, low_open=True, what=seconds, error=ValueError)

    def batch_time_s(self, batch: Batch) -> float:
        """The constant step time [s]."""
        return float(self.step_time_s)

    def decode_run_time_s(
        self, *, num_decodes: int, decode_context_tokens: np.ndarray
    ) -> np.ndarray:
        """The constant step time for every step of the run [s]."""
        return np.full(np.shape(decode_context_tokens), float(self.step_time_s))


def knee_tokens(cost: IdealCost) -> float:
    """Tokens at which the step's math catches up with its weight read [tokens].

    Below the knee a step costs the weight read whatever it holds; above it every token adds
    ``per_token_s``. Equals ``peak_flops / mem_bandwidth × dtype_bytes / 2`` for a dense model.
    """
    return cost.weight_read_s / cost.per_token_s


def shortest_step_s(cost: CostModel) -> float:
    """The shortest step a busy server runs: one decode token with one token of context [s].

    Every token waits at least this long after the one before it, so no token budget meets an
    inter-token limit below it (the weight read and more).
    """
    return float(cost.batch_time_s(Batch(num_decodes=1, decode_context_tokens=1)))


def budget_for_step_time(cost: CostModel, target_s: ArrayLike) -> np.ndarray | int:
    """Largest token budget whose step stays within ``target_s`` (vectorized) [tokens].

    For :class:`IdealCost` this is the inverse of :meth:`IdealCost.step_time_s` on its rising
    branch, ``floor(target_s / per_token_s)``: the seeds' rule of thumb, 40 ms ÷ 16 µs ≈ 2,500
    tokens (2,464 on H100 SXM + Llama 3.1 8B). For any other cost model it is found by
    bisection on the time of a step holding one fresh prompt chunk of ``n`` tokens
    (``batch_time_s``), which must not shrink as ``n`` grows.

    Raises
    ------
    NoBudgetMeetsTargetError
        When a target is below a one-token step (the weight read): no budget meets it.
    """
    target = np.asarray(target_s, dtype=float)
    if isinstance(cost, IdealCost):
        one_token_s = cost.weight_read_s
    else:

        def time_s(num_tokens: int) -> float:
            return cost.batch_time_s(Batch(prefill_tokens=(num_tokens,), prefill_context_tokens=(0,)))

        one_token_s = time_s(1)
    if np.any(~np.isfinite(target)) or np.any(target < one_token_s):
        raise NoBudgetMeetsTargetError(
            f"a step-time target below a one-token step (the weight read and more: {one_token_s * 1e3:.2f} ms on "
            f"{cost.hardware.name} + {cost.model.name} with {type(cost).__name__}) cannot be met "
            f"by any budget; got {np.round(target * 1e3, 3).tolist()} ms. Raise the target, or "
            "use faster memory or tensor parallelism to shorten the weight read."
        )
    if isinstance(cost, IdealCost):
        tokens = np.floor(target / cost.per_token_s).astype(np.int64)
    else:
        tokens = np.array([_largest_within(time_s, float(t)) for t in target.ravel()], dtype=np.int64)
        tokens = tokens.reshape(target.shape)
    return int(tokens) if tokens.ndim == 0 else tokens


def _largest_within(time_s: Callable[[int], float], target_s: float, limit_tokens: int = 1 << 24) -> int:
    """Largest ``n`` with ``time_s(n) <= target_s``, given ``time_s(1) <= target_s`` (doubling,
    then :func:`bisect_largest`)."""
    low, high = 1, 2
    while time_s(high) <= target_s:
        low, high = high, high * 2
        if high > limit_tokens:
            return low
    return bisect_largest(time_s, target_s, low=low, high=high)


def bisect_largest(time_s: Callable[[int], float], target_s: float, *, low: int, high: int) -> int:
    """Largest whole ``n`` in ``[low, high)`` with ``time_s(n) <= target_s``, by bisection.

    ``time_s`` must not shrink as ``n`` grows, meet the target at ``low`` and miss it at
    ``high``: the inverse of a step-time curve [tokens].
    """
    while high - low > 1:
        middle = (low + high) // 2
        if time_s(middle) <= target_s:
            low = middle
        else:
            high = middle
    return low
