"""Mixture-of-experts terms of :class:`~budgetlab.cost.CalibratedCost`'s step, from :mod:`budgetlab.cost.moe`.

The step cost prices a mixture of experts (``moe=True``) with the expected distinct experts a
step's ``n`` tokens touch: it reads ``shared_bytes + layers × D(n) × expert_bytes`` of weights,
where ``expert`` is one expert's parameters in one layer, ``shared`` the rest (attention,
embeddings, norms, router), and ``D(n) = E × (1 − (1 − k/E)^n)`` the expected number of
distinct experts the step's ``n`` tokens touch per layer (``E`` experts, ``k`` per token). ``D``
assumes each token picks each expert with probability ``k/E``, independently of the other
tokens (uniform, independent routing); real routers are skewed and tokens of one prompt
correlate, so real steps touch somewhat fewer experts. ``D(1) = k`` exactly and ``D(n) → E``
for large ``n``. The parameter split comes from the catalog's totals alone: ``layers × expert
= (num_params − num_active_params) / (E − k)`` and ``shared = num_params − E × layers ×
expert`` (:func:`moe_weight_split`). Unquantized both parts take ``b`` bytes per parameter;
quantized, the experts take ``q`` and the shared part ``embedding × b + (shared − embedding)
× q`` (the embedding and output projection are shared and stay in ``dtype``); under
``"mxfp4"``, which quantizes the experts only, the shared part is what
:func:`~budgetlab.memory.weight_bytes` leaves in ``dtype``. So at large ``n`` the step's
weight bytes tend to :func:`~budgetlab.memory.weight_bytes` with the same
``quantization``.

Two refinements come from the fused-MoE kernel and the deployment (:mod:`budgetlab.cost.moe`
restates what vLLM 0.33 runs):

``moe_block_padding`` (switch)
    ``moe_align_block_size`` pads every expert's routed (token, expert) pairs to a whole
    number of ``BLOCK_SIZE_M`` rows, and the kernel computes the padding too. The compute roof
    adds ``(expert_flops_per_gpu(padded=True) − expert_flops_per_gpu(padded=False)) /
    (peak_flops × flop_efficiency)``: the unpadded part is already in the linear math
    (``2 × num_active_params`` per token). It is priced on the tokens the linear layers run
    on, the CUDA graph's padded count with ``graph_padding`` on (a graph's dummy tokens are
    routed like real ones), and is 0 with ``quantization`` (other MoE kernels run). On
    vLLM PR #24700's Mixtral TP2 H100 kernel times the unpadded math is 2-14 % low from 256 to
    1,536 tokens and the padded math within 6 % (:mod:`budgetlab.cost.moe`).
``expert_parallel`` (vLLM's ``--enable-expert-parallel``)
    The MoE layers are split by whole experts over the ``tp`` GPUs (``ep = tp``; budgetlab
    prices one data-parallel rank) instead of each expert's width. A GPU holds ``E/ep`` whole
    experts, the same bytes as ``1/tp`` of every expert, so the memory model
    (:func:`budgetlab.memory.weight_bytes_per_gpu`) is unchanged. A step waits for the GPU
    that reads the most: the weights a step reads per GPU become ``shared_bytes / tp + S(n)
    × expert_bytes`` with ``S(n)`` the slowest GPU's expected touched experts
    (:func:`~budgetlab.cost.moe.expected_experts_per_gpu` with ``slowest=True``) and
    ``expert_bytes`` one whole expert's bytes over all layers, instead of ``(shared_bytes +
    D(n) × expert_bytes) / tp``. For one token of Mixtral at TP2 that is 1.46 whole experts per
    layer against one (two halves); from a few dozen tokens every local expert is touched and
    the two agree. The all-reduces are unchanged: with one data-parallel rank vLLM sums the
    experts' outputs over the same GPUs as tensor parallelism does.

Both terms take whole token counts: a fractional count is rounded up (a partial token still
takes a row). Each is memoized per token count (:class:`MoeStepTable`), so the simulator's
per-step cost stays about a microsecond after a count's first step.

Sources: vLLM 0.33.0 ``fused_moe/config.py`` (``FusedMoEParallelConfig.make``: with expert
parallelism the MoE layer's tensor parallelism is 1 and ``ep_size`` the flattened TP × DP),
``fused_moe/runner/moe_runner.py`` (the MoE output is all-reduced over the tensor-parallel
group when ``tp_size > 1 or ep_size > 1``), ``config/model.py``
(``_verify_with_expert_parallelism``), and :mod:`budgetlab.cost.moe`'s.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from budgetlab.cost.moe import expected_experts_per_gpu, expert_flops_per_gpu
from budgetlab.errors import ConfigError
from budgetlab.memory import QUANTIZED_BYTES_PER_WEIGHT, activation_dtype_bytes, embedding_params, weight_bytes

__all__ = ["MoeStepTable", "check_expert_parallel", "moe_weight_split"]


def moe_weight_split(cost: Any) -> tuple[float, float]:
    """``(shared_bytes, expert_bytes)`` of a cost's model over all GPUs [B].

    ``expert_bytes`` is one expert's bytes summed over all layers (0 unless the cost prices a
    mixture of experts), ``shared_bytes`` the rest; quantized, the experts take the format's
    bytes and the shared part keeps its embedding and output projection in ``dtype``
    (:mod:`budgetlab.cost.calibrated`'s module docstring).
    """
    m = cost.model
    expert = cost._expert_params_all_layers if cost._moe_active else 0.0
    shared = m.num_params - m.num_experts * expert
    full = float(activation_dtype_bytes(m, cost.dtype))
    if cost.quantization is None:
        return shared * full, expert * full
    quantized = QUANTIZED_BYTES_PER_WEIGHT[cost.quantization]
    if cost.quantization == "mxfp4":  # the experts only: the rest keeps weight_bytes' dtype bytes
        return weight_bytes(
            m, dtype=cost.dtype, quantization="mxfp4"
        ) - m.num_experts * expert * quantized, expert * quantized
    kept = min(float(embedding_params(m)), shared)  # embedding + output projection, in dtype
    return kept * full + (shared - kept) * quantized, expert * quantized


def check_expert_parallel(cost: Any) -> None:
    """Refuse ``expert_parallel`` where vLLM (or this model of it) refuses it.

    Raises
    ------
    ConfigError
        The model has no routed experts (vLLM: "Number of experts in the model must be greater
        than 0 when expert parallelism is enabled"), or ``tp`` does not divide the experts
        (vLLM then gives the first ranks one expert more; that uneven split is not priced).
    """
    if not cost.expert_parallel:
        return
    m = cost.model
    if not m.is_moe:
        raise ConfigError(
            f"expert parallelism needs a mixture of experts, and {m.name} has none: vLLM refuses "
            "--enable-expert-parallel for it at start-up. Leave enable_expert_parallel off"
        )
    if m.num_experts % cost.tp:
        raise ConfigError(
            f"expert parallelism over tp={cost.tp} GPUs does not divide {m.name}'s {m.num_experts} "
            "experts evenly; vLLM would give some GPUs one expert more, which is not priced here. "
            f"Pick a tensor_parallel_size that divides {m.num_experts}, or leave it off"
        )


class MoeStepTable:
    """A cost's two fused-MoE terms per token count, memoized (module docstring).

    Parameters
    ----------
    cost : CalibratedCost
        Its model (a mixture of experts), hardware, ``tp``, ``expert_parallel``,
        ``moe_block_padding`` and ``flop_efficiency``.

    Raises
    ------
    ConfigError
        A deployment :mod:`budgetlab.cost.moe` refuses (e.g. ``tp`` not dividing the expert
        width without expert parallelism).
    """

    __slots__ = ("_ep", "_flop_rate", "_hardware", "_model", "_padding", "_slowest", "_tp")

    def __init__(self, cost: Any) -> None:
        self._model, self._hardware, self._tp = cost.model, cost.hardware, int(cost.tp)
        self._ep = self._tp if cost.expert_parallel else 1
        self._flop_rate = cost.hardware.dense_bf16_flops_per_s * cost.flop_efficiency
        self._padding: dict[int, float] = {}
        self._slowest: dict[int, float] = {}
        # one token priced now, so that a deployment the kernel model refuses fails here
        if cost.moe_block_padding:
            self.padding_s(1.0)
        if self._ep > 1:
            self.slowest_experts(1.0)

    def padding_s(self, tokens: Any) -> Any:
        """Seconds of the expert math spent on ``BLOCK_SIZE_M`` padding, on one GPU [s]: a float
        for a float ``tokens``, else an array."""
        return self._lookup(self._padding, self._padding_one, tokens)

    def slowest_experts(self, tokens: Any) -> Any:
        """The slowest GPU's expected touched whole experts per layer under expert parallelism
        [count]: a float for a float ``tokens``, else an array."""
        return self._lookup(self._slowest, self._slowest_one, tokens)

    def _padding_one(self, n: int) -> float:
        return _padding_flops(self._model, self._hardware, self._tp, self._ep, n) / self._flop_rate

    def _slowest_one(self, n: int) -> float:
        m = self._model
        return _slowest_experts(m.num_experts, m.num_experts_per_token, self._ep, n)

    @staticmethod
    def _lookup(cache: dict[int, float], compute: Any, tokens: Any) -> Any:
        if isinstance(tokens, float):
            n = math.ceil(tokens)
            hit = cache.get(n)
            if hit is None:
                hit = cache[n] = compute(n)
            return hit
        counts = np.ceil(np.asarray(tokens, dtype=float))
        values, inverse = np.unique(counts, return_inverse=True)
        for n in values.tolist():
            if int(n) not in cache:
                cache[int(n)] = compute(int(n))
        found = np.array([cache[int(n)] for n in values.tolist()], dtype=float)
        return found[inverse.reshape(counts.shape)] if values.size else np.zeros(counts.shape)


# Shared by every cost of the same deployment (sweeps build many): about 0.5 ms per new count.
@functools.lru_cache(maxsize=1 << 16)
def _padding_flops(model: Any, hardware: Any, tp: int, ep: int, n: int) -> float:
    """Expert FLOPs per GPU spent on padding rows at ``n`` tokens [FLOP]."""
    args = {"tp": tp, "ep": ep, "num_tokens": n, "hardware": hardware}
    return float(expert_flops_per_gpu(model, padded=True, **args) - expert_flops_per_gpu(model, padded=False, **args))


@functools.lru_cache(maxsize=1 << 16)
def _slowest_experts(num_experts: int, experts_per_token: int, ep: int, n: int) -> float:
    """The slowest of ``ep`` GPUs' expected touched experts at ``n`` tokens [count]."""
    return float(
        expected_experts_per_gpu(n, num_experts=num_experts, experts_per_token=experts_per_token, ep=ep, slowest=True)
    )
