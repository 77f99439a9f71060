"""The roofline step costs: how long one forward pass (one engine step) takes, to first order.

A step reads every weight once and does ``2 × params`` FLOPs per token it processes; on a
roofline the slower of the two sets the time. That is the seeds' idealized model,
:class:`IdealCost`. :class:`ConstantCost` makes every step the same length (time counted in
steps), which is what hand-worked scheduling examples want. :func:`knee_tokens` and
:func:`shortest_step_s` read two landmarks off a cost.

Both models follow the contract of :mod:`budgetlab.cost.protocol` (``batch_time_s``,
``decode_run_time_s`` and the vectorized ``step_time_s``); the inverse (the budget for a
step-time target) is in :mod:`budgetlab.cost.inverse`, the calibrated model in
:mod:`budgetlab.cost.calibrated`.

Sources: the roofline model (Williams, Waterman & Patterson, CACM 2009); ``2 × params`` FLOPs
per token for a dense transformer's linear layers (Kaplan et al. 2020, §2.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from budgetlab._checks import MAX_TIME_S, finite_array, number_in
from budgetlab.cost.speculative_terms import Drafter, DrafterCost, decode_run_by_step, drafter_cost
from budgetlab.display import html_table, one_line
from budgetlab.specs import Batch, HardwareSpec, ModelSpec
from budgetlab.text import fmt_latency

if TYPE_CHECKING:
    from budgetlab.cost.protocol import CostModel

__all__ = ["IdealCost", "ConstantCost", "knee_tokens", "shortest_step_s"]


_TOKENS = "finite numbers of tokens >= 0"
"""What ``step_time_s`` accepts as ``num_tokens``: the curve is continuous (a knee at 295.3
tokens is a point on it), but NaN, infinities, bools, strings and ``None`` are refused."""


@dataclass(frozen=True)
class IdealCost:
    """The seeds' idealized step: ``max(weight read, token math)`` on one GPU.

    ``step_time_s(n) = max(weight_bytes / mem_bandwidth, n × 2 × num_params / peak_flops)``.
    Attention, KV reads and overheads are left out on purpose: the shape is the point
    (see :mod:`budgetlab.cost.calibrated` for what real steps add). Every parameter counts as
    touched by every token, as in a dense model; for a mixture-of-experts model this overstates
    the math (``CalibratedCost(moe=True)`` uses the active parameters). An attention layout
    (sliding window, MLA, Mamba: :attr:`~budgetlab.specs.ModelSpec.attention`) changes only
    terms this model leaves out; :class:`~budgetlab.cost.CalibratedCost` prices them
    (:mod:`budgetlab.cost.attention_terms`), and quantized weights (MXFP4, NVFP4, ...).

    Parameters
    ----------
    hardware : HardwareSpec
        The GPU (peak dense BF16 FLOP/s and memory bandwidth are used).
    model : ModelSpec
        The model (``num_params`` and ``dtype_bytes`` are used).
    drafter : Drafter or None
        Speculative decoding's proposer, priced on the same roofline every step
        (:mod:`budgetlab.cost.speculative_terms`; :func:`~budgetlab.cost.make_cost` sets it for a
        speculating engine); None (default): none. A step's drafts
        (``Batch.decode_draft_tokens``) are tokens like any other.

    Examples
    --------
    Llama 3.1 8B on an H100 SXM: 4.79 ms weight read, 16.2 µs per token, knee ≈ 295 tokens.
    """

    hardware: HardwareSpec
    model: ModelSpec
    drafter: Drafter | None = None
    weight_read_s: float = field(init=False)
    per_token_s: float = field(init=False)
    _drafter_cost: DrafterCost | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        from budgetlab.catalog import resolve_hardware, resolve_model  # the catalog reads files: only when asked
        from budgetlab.cost.calibrated import CalibratedCost

        object.__setattr__(self, "hardware", resolve_hardware(self.hardware))  # a slug works too
        object.__setattr__(self, "model", resolve_model(self.model))
        object.__setattr__(self, "weight_read_s", self.model.weight_bytes / self.hardware.mem_bandwidth_bytes_per_s)
        object.__setattr__(self, "per_token_s", self.flops_per_token / self.hardware.dense_bf16_flops_per_s)
        if self.drafter is not None:  # the same roofline: CalibratedCost.ideal's fields
            object.__setattr__(
                self, "_drafter_cost", drafter_cost(self.drafter, CalibratedCost.ideal(self.hardware, self.model))
            )

    @property
    def flops_per_token(self) -> float:
        """Linear-layer math per token [FLOP]: ``2 × num_params``."""
        return 2.0 * self.model.num_params

    def _display_rows(self) -> list[tuple[str, str]]:
        return [
            ("weight read", fmt_latency(self.weight_read_s)),
            ("per token", fmt_latency(self.per_token_s)),
            ("knee", f"{self.weight_read_s / self.per_token_s:,.0f} tokens"),
        ] + ([("drafter", self.drafter.describe())] if self.drafter is not None else [])

    def __repr__(self) -> str:
        return one_line("IdealCost", f"{self.hardware.slug}, {self.model.slug}", self._display_rows())

    def _repr_html_(self) -> str:
        return html_table(f"IdealCost: {self.model.name} on {self.hardware.name}", self._display_rows())

    def step_time_s(self, num_tokens: ArrayLike) -> np.ndarray | float:
        """Time of a step that processes ``num_tokens`` tokens [s] (vectorized).

        Parameters
        ----------
        num_tokens : int or array_like of int
            Tokens in the step [tokens], >= 0. A step of 0 tokens is not run (0 s).
        """
        tokens = finite_array("num_tokens", num_tokens, what=_TOKENS, low=0.0, error=ValueError)
        time_s = np.where(tokens > 0, np.maximum(self.weight_read_s, tokens * self.per_token_s), 0.0)
        if self._drafter_cost is not None:  # the proposer's passes over one fresh chunk
            time_s = time_s + self._drafter_cost.curve_s(tokens, np.zeros_like(tokens))
        return float(time_s) if time_s.ndim == 0 else time_s

    def batch_time_s(self, batch: Batch) -> float:
        """Time of a step of the given composition [s]: only its token count matters here (the
        drafts a verification checks included), plus the proposer's passes with a ``drafter``.

        Plain float arithmetic, equal to the last bit to :meth:`step_time_s` (the simulator
        calls this once per step, where NumPy's per-call overhead would dominate).
        """
        num_tokens = batch.num_tokens
        if num_tokens < 0:
            raise ValueError("num_tokens must be >= 0")
        if num_tokens == 0:
            return 0.0
        time_s = max(self.weight_read_s, num_tokens * self.per_token_s)
        return time_s if self._drafter_cost is None else time_s + self._drafter_cost.time_s(batch)

    def decode_run_time_s(
        self, *, num_decodes: int, decode_context_tokens: np.ndarray, decode_draft_tokens: int = 0
    ) -> np.ndarray:
        """Times of consecutive decode-only steps [s] verifying ``decode_draft_tokens`` drafts each:
        all equal without a ``drafter`` (context does not matter), step by step with one."""
        if self._drafter_cost is None:
            step_s = self.batch_time_s(Batch(num_decodes=num_decodes, decode_draft_tokens=decode_draft_tokens))
            return np.full(np.shape(decode_context_tokens), step_s)
        return decode_run_by_step(self, num_decodes, np.asarray(decode_context_tokens), decode_draft_tokens)


@dataclass(frozen=True)
class ConstantCost:
    """Every step takes the same time, whatever it holds: time counted in steps.

    Parameters
    ----------
    duration_s : float
        Duration of every step [s], > 0 (positional: ``ConstantCost(0.05)``).

    Examples
    --------
    >>> ConstantCost(0.05).batch_time_s(Batch(num_decodes=8))
    0.05
    """

    duration_s: float = 1.0

    def __post_init__(self) -> None:
        seconds = "a positive number of seconds"
        number_in(
            "duration_s", self.duration_s, low=0.0, low_open=True, what=seconds, error=ValueError, maximum=MAX_TIME_S
        )

    def step_time_s(self, num_tokens: ArrayLike) -> np.ndarray | float:
        """Time of a step that processes ``num_tokens`` tokens [s] (vectorized).

        ``duration_s`` for any step that holds a token; a step of 0 tokens is not run (0 s).

        Parameters
        ----------
        num_tokens : int or array_like of int
            Tokens in the step [tokens], >= 0.
        """
        tokens = finite_array("num_tokens", num_tokens, what=_TOKENS, low=0.0, error=ValueError)
        time_s = np.where(tokens > 0, float(self.duration_s), 0.0)
        return float(time_s) if time_s.ndim == 0 else time_s

    def batch_time_s(self, batch: Batch) -> float:
        """The constant step time [s], whatever the step holds (a verification's drafts included)."""
        return float(self.duration_s)

    def decode_run_time_s(
        self, *, num_decodes: int, decode_context_tokens: np.ndarray, decode_draft_tokens: int = 0
    ) -> np.ndarray:
        """The constant step time for every step of the run [s] (drafts or not: time counted in steps)."""
        return np.full(np.shape(decode_context_tokens), float(self.duration_s))


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
