"""Per-cost constants of :class:`~budgetlab.cost.CalibratedCost`'s step formula, computed once.

:func:`cost_constants` turns a cost's fields into :class:`_Constants`, the numbers the one step
formula of :mod:`budgetlab.cost.step_terms` reads on the simulator's per-step path (about a
microsecond a step). The all-reduce kernel table (:class:`AllReduceTable`) and the knee loss of a
deployment (:func:`knee_loss`) are here because only the constants need them; both are documented
where they enter the formula (:mod:`budgetlab.cost.calibrated`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from budgetlab.cost.attention_terms import LayoutCost, full_kv_bytes_per_token, layout_cost
from budgetlab.cost.collective import all_reduce_s, fused_with_norm
from budgetlab.cost.moe_step import MoeStepTable, moe_weight_split
from budgetlab.memory import activation_dtype_bytes, weight_bytes_per_gpu

if TYPE_CHECKING:
    from budgetlab.cost.step_terms import GraphDispatch

__all__ = [
    "FUSED_NORM_S",
    "KNEE_REFERENCE_HIDDEN",
    "KNEE_REFERENCE_LAYER_BYTES",
    "AllReduceTable",
    "all_reduce_time_s",
    "cost_constants",
    "knee_loss",
]


@dataclass(frozen=True, slots=True)
class _Constants:
    """Per-cost constants, computed once so a scalar step costs about a microsecond."""

    overhead_s: float
    step_overhead_s: float
    layers_overhead_s: float
    bandwidth: float
    kv_reads: bool
    kv_s_per_token: float
    attention: bool
    attention_s_per_pair: float
    tile_tokens: int | None
    knee_overlap_loss: float
    all_reduce: bool
    all_reduce_fixed_s: float
    all_reduce_per_token_s: float
    all_reduce_table: AllReduceTable | None  # None: the ring formula above
    moe: bool
    num_experts: float
    miss_fraction: float
    shared_bytes: float
    expert_bytes: float
    moe_padding: MoeStepTable | None  # the moe_block_padding term; None: off
    expert_parallel: MoeStepTable | None  # the slowest GPU's expert reads; None: tensor-parallel experts
    graph: GraphDispatch | None
    graph_padding: bool
    launch_s: tuple[float, float, float] | None  # host time per step by mode code; None: no term
    layout: LayoutCost | None = None  # layers other than full attention; None: none
    decode_query_len: int = 1  # query tokens of a uniform decode, 1 + num_speculative_tokens (cudagraph.py G2)
    drafter: Any = None  # the proposer's passes (budgetlab.cost.speculative_terms.DrafterCost); None: none


FUSED_NORM_S = 4e-6
"""Time of the ``fused_add_rms_norm`` kernel an all-reduce absorbs when vLLM fuses the two [s]:
Vidur's H100 operator profile times each RMSNorm of a layer at 4 µs (medians at 1 token,
Llama 2 7B, ``data/measured/README.md``)."""


class AllReduceTable:
    """A step's two all-reduces per layer as :func:`budgetlab.cost.collective.all_reduce_s`
    prices them (the kernel vLLM 0.33 picks for the message), memoized per token count.

    The message is the step's tokens (padded to the CUDA graph's size when the step runs in
    one) × ``hidden_size`` × the activation bytes; a step without a graph pays each call's
    launch (``cuda_graph=False``). Where vLLM fuses the all-reduce with the residual add and
    RMSNorm after it (:func:`~budgetlab.cost.collective.fused_with_norm`: TP > 1 on Hopper and
    Blackwell, small messages, a compiled engine: not under ``enforce_eager``), the norm kernel
    no longer runs on its own: each such call counts :data:`FUSED_NORM_S` less (never below 0),
    taken from the norm time ``layer_overhead_s`` includes.
    """

    __slots__ = ("_bytes_per_token", "_cache", "_calls", "_fuse", "_hardware", "_tp")

    def __init__(self, hardware: Any, tp: int, bytes_per_token: float, num_layers: int, *, fuse: bool = True) -> None:
        self._hardware, self._tp, self._bytes_per_token = hardware, tp, bytes_per_token
        self._calls = 2.0 * num_layers
        self._fuse = fuse  # False under enforce_eager: no torch.compile, so no fusion pass
        self._cache: dict[tuple[float, bool], float] = {}

    def _net_s(self, nbytes: Any, eager: bool) -> Any:
        """One call's time less the norm it absorbs [s] (same operations for floats and arrays)."""
        one = np.asarray(all_reduce_s(self._hardware, tp=self._tp, message_bytes=nbytes, cuda_graph=not eager))
        if not self._fuse:
            return self._calls * one
        fused = np.asarray(fused_with_norm(self._hardware, tp=self._tp, message_bytes=nbytes), dtype=float)
        return self._calls * (one - np.minimum(FUSED_NORM_S, one) * fused)

    def time_s(self, tokens: Any, eager: Any) -> Any:
        """Seconds of a step's all-reduces: a float for a float ``tokens``, else an array."""
        if isinstance(tokens, float):
            key = (tokens, bool(eager))
            hit = self._cache.get(key)
            if hit is None:
                hit = self._cache[key] = float(self._net_s(tokens * self._bytes_per_token, key[1]))
            return hit
        counts = np.asarray(tokens, dtype=float)
        flags = np.broadcast_to(np.asarray(eager, dtype=bool), counts.shape)
        out = np.zeros(counts.shape)
        for flag in (False, True):
            where = flags == flag
            if where.any():
                out[where] = self._net_s(counts[where] * self._bytes_per_token, flag)
        return out


KNEE_REFERENCE_LAYER_BYTES = 6.74e9 * 2 / 32
"""Weight bytes per layer on one GPU of the GPU profile's calibration step (Llama 2 7B, bf16,
TP1: 421 MB) [B]: there the knee loss is the cost's ``knee_overlap_loss`` exactly."""

KNEE_REFERENCE_HIDDEN = 4096
"""Hidden size of that step (Llama 2 7B) [count]."""


def knee_loss(cost: Any, replica_bytes: float) -> float:
    """The knee overlap loss of a deployment [-]: ``min(1, knee_overlap_loss × (W₀ / W)^a ×
    (H₀ / H)^b)``.

    ``W`` is the 16-bit weight bytes of one layer on one GPU (``replica_bytes / num_layers``,
    unquantized: a quantized model keeps its GEMM shapes, and the fit saw 16-bit profiles only;
    for a mixture of experts with ``moe`` on, the active share: the GEMMs a token runs), ``H`` the
    hidden size (the GEMMs' reduction width), ``W₀`` and ``H₀`` the calibration step's
    (:data:`KNEE_REFERENCE_LAYER_BYTES`, :data:`KNEE_REFERENCE_HIDDEN`), ``a`` and ``b`` the
    cost's ``knee_weight_exponent`` and ``knee_hidden_exponent``. A layer with more weights
    per GPU, and wider GEMMs, hides its math behind its weight stream better: Vidur's operator
    profiles at TP 1/2/4/8 (``data/measured/vidur-*-tp.csv``: Llama 2 7B/70B, CodeLlama 34B on
    H100 and A100, Llama 3 8B/70B on A100) are each best fitted by a loss from 0.10 (Llama 2 70B
    at TP1 on H100, 1.7 GB per layer) to 1.0 (Llama 2 7B at TP4-8, 53-105 MB), and ``a = 0.7``,
    ``b = 0.6`` fit all 32 together (median error 6.7 % → 5.8 %, P90 20.6 % → 16.1 %,
    ``tests/test_cost_tp_profiles.py``). With both exponents 0 the loss is the field itself.
    """
    loss = float(cost.knee_overlap_loss)
    a, b = float(cost.knee_weight_exponent), float(cost.knee_hidden_exponent)
    if loss == 0.0 or (a == 0.0 and b == 0.0):
        return loss
    layer_bytes = replica_bytes / cost.model.num_layers
    if cost._moe_active:  # a token's GEMMs are its experts': the active share
        layer_bytes = layer_bytes * (cost.model.num_active_params / cost.model.num_params)
    scale = (KNEE_REFERENCE_LAYER_BYTES / layer_bytes) ** a * (KNEE_REFERENCE_HIDDEN / cost.model.hidden_size) ** b
    return min(1.0, loss * scale)


def all_reduce_time_s(c: _Constants, tokens: Any, padded: Any, eager: Any) -> Any:
    """The all-reduce term of :func:`step_time_s`: the kernel table when the cost has one, else
    the ring formula ``fixed + tokens × per_token`` on the real tokens."""
    if c.all_reduce_table is None:
        return c.all_reduce_fixed_s + tokens * c.all_reduce_per_token_s
    return c.all_reduce_table.time_s(tokens if padded is None else padded, eager)


def cost_constants(cost: Any, graph: GraphDispatch | None, launch: tuple[float, float, float] | None) -> _Constants:
    """The :class:`_Constants` of a :class:`~budgetlab.cost.CalibratedCost` whose CUDA-graph dispatch
    table and launch times are ``graph`` and ``launch`` (:func:`~budgetlab.cost.step_terms.graph_constants`).

    The proposer's passes (``drafter``) are left ``None``: the cost adds them once its own constants
    exist (:func:`budgetlab.cost.speculative_terms.drafter_cost`).
    """
    hw, m = cost.hardware, cost.model
    bandwidth = hw.mem_bandwidth_bytes_per_s * cost.bandwidth_efficiency
    flop_rate = hw.dense_bf16_flops_per_s * cost.flop_efficiency * cost.tp
    moe = cost._moe_active
    shared_bytes, expert_bytes = moe_weight_split(cost)
    full = float(activation_dtype_bytes(m, cost.dtype))
    table = MoeStepTable(cost) if moe and (cost.moe_block_padding or cost.expert_parallel) else None
    kv_bytes = full_kv_bytes_per_token(m, tp=cost.tp, dtype=cost.dtype, kv_cache_dtype=cost.kv_cache_dtype)
    ring = 2.0 * (cost.tp - 1) / cost.tp
    link = hw.interconnect_bandwidth_bytes_per_s
    return _Constants(
        overhead_s=cost.step_overhead_s + m.num_layers * cost.layer_overhead_s,
        step_overhead_s=float(cost.step_overhead_s),
        layers_overhead_s=m.num_layers * cost.layer_overhead_s,
        bandwidth=bandwidth,
        kv_reads=bool(cost.kv_reads),
        kv_s_per_token=kv_bytes / bandwidth,
        attention=bool(cost.attention),
        attention_s_per_pair=cost.attention_flops_per_pair / flop_rate,
        tile_tokens=cost.tile_tokens,
        knee_overlap_loss=knee_loss(cost, weight_bytes_per_gpu(m, tp=cost.tp, dtype=cost.dtype)),
        all_reduce=cost.tp > 1 and bool(cost.all_reduce),
        all_reduce_fixed_s=2.0 * m.num_layers * hw.interconnect_latency_s,
        all_reduce_per_token_s=2.0 * m.num_layers * ring * m.hidden_size * full / link,
        all_reduce_table=(
            AllReduceTable(hw, cost.tp, m.hidden_size * full, m.num_layers, fuse=not cost.enforce_eager)
            if cost.all_reduce_kernels and cost.tp > 1
            else None
        ),
        moe=moe,
        num_experts=float(m.num_experts),
        miss_fraction=1.0 - m.num_experts_per_token / m.num_experts,
        shared_bytes=shared_bytes,
        expert_bytes=expert_bytes,
        moe_padding=table if cost.moe_block_padding and cost.quantization is None else None,
        expert_parallel=table if cost.expert_parallel and cost.tp > 1 else None,
        graph=graph,
        graph_padding=graph is not None and bool(cost.graph_padding),
        launch_s=launch,
        layout=layout_cost(cost, bandwidth, flop_rate),
        decode_query_len=int(cost.cudagraph_decode_query_len),
    )
