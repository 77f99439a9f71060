"""The calibrated step cost: what real forward passes add to the seeds' idealized roofline.

:class:`~budgetlab.cost.IdealCost` says a step of ``n`` tokens takes
``max(weight_bytes / bandwidth, n × 2 × params / peak_flops)``. Real steps are slower, and how
much slower depends on what the step holds, not only on how many tokens: a later prompt chunk
attends to every earlier one, and every decode re-reads its whole KV cache.
:class:`CalibratedCost` keeps the same interface (``step_time_s``, ``batch_time_s``,
``decode_run_time_s``, ``weight_read_s``, ``per_token_s``) so the simulator and the notebooks
can use either, and builds the step time from documented terms, each of which can be switched
off.

The terms
---------
For a step holding ``n`` tokens in total (decodes plus prefill chunks), on ``tp`` GPUs:

Memory roof ``M`` [s]
    ``(W(n) / tp + kv_bytes_per_token × Σ context / s_kv) / (mem_bandwidth × bandwidth_efficiency)``

    * ``W(n)`` is the weight bytes the step reads, priced by :mod:`budgetlab.memory.sizes`
      (the functions the KV pool is sized with). Dense model:
      :func:`~budgetlab.memory.weight_bytes` -- ``num_params × b`` unquantized, with ``b`` the
      bytes of ``dtype`` (``dtype_bytes`` for ``"auto"``); with ``quantization`` the embedding
      and output projection (:func:`~budgetlab.memory.embedding_params`) stay at ``b`` and every
      other weight takes :data:`~budgetlab.memory.QUANTIZED_BYTES_PER_WEIGHT` ``q`` bytes (1 for
      fp8 and int8, 0.515625 for int4 with its group scales).
      Mixture of experts (``moe=True``): ``shared_bytes + layers × D(n) × expert_bytes``,
      ``D(n)`` the expected distinct experts the step's ``n`` tokens touch per layer
      (:mod:`budgetlab.cost.moe_step` has the split and ``D``).
    * ``kv_reads=True`` adds the KV cache every sequence in the step reads: each decode reads
      its whole context, and each prefill chunk reads the cached tokens before it (its own new
      keys and values stay on chip). The bytes per token per GPU are
      :func:`~budgetlab.memory.kv_bytes_per_token` with ``kv_cache_dtype`` (an fp8 cache reads
      one byte per element, half of a 16-bit one); ``s_kv = min(tp, num_kv_heads)``: tensor
      parallelism splits the KV heads, and vLLM replicates them when ``tp`` exceeds their number.
    * A model with an attention layout (sliding-window, chunked-local, MLA, Mamba layers):
      these terms count its full-attention layers; the others add ``kv_read``, ``state_read``,
      ``attention_math``, ``mla_projection`` and ``recurrent_math`` (:mod:`budgetlab.cost.attention_terms`).

Compute roof ``C`` [s]
    ``(T(n) × 2 × P + A) / (peak_flops × flop_efficiency × tp)``

    * ``P`` is ``num_active_params`` with ``moe=True`` and ``num_params`` otherwise (the
      idealized model's count; the two are equal for a dense model).
    * ``T(n) = ceil(n / tile_tokens) × tile_tokens`` with GEMM tile quantization on, else ``n``:
      a GEMM pads its token dimension to whole tiles, so 129 tokens cost what 256 do with
      256-token tiles.
    * ``attention=True`` adds the attention score and value products, ``A = 4 × layers ×
      heads × head_dim × pairs``, where a prefill chunk of ``m`` tokens after ``c`` cached
      tokens of its request contributes ``pairs = m × c + m (m + 1) / 2`` (causal ``QKᵀ`` and
      ``AV``, 2 FLOPs per multiply-add each) and a decode with context ``c`` contributes
      ``c + 1`` (a chunk of one token). The same chunk therefore costs more at a later
      position. Attention runs on the same FLOP roof at the same efficiency.
    * ``moe_block_padding`` adds the fused-MoE kernel's padding rows (each expert's tokens
      rounded up to ``BLOCK_SIZE_M``) to the expert math (:mod:`budgetlab.cost.moe_step`).
    * The roof is the peak dense 16-bit (BF16) rate whatever ``dtype`` and ``quantization``
      say: quantized weights shrink the bytes read, not the math. Quantized activations
      (W8A8's int8 GEMMs, fp8 tensor cores at twice the BF16 rate) and a float32 ``dtype``'s
      slower math are not modelled; calibrate (:mod:`budgetlab.cost.fit`) when they matter.

Roof [s]
    ``max(M, C) + L × min(M, C)² / max(M, C)``, ``L`` :func:`~budgetlab.cost.step_terms.knee_loss`
    (``knee_overlap_loss``, scaled by the GPU's layer bytes and hidden size when the
    ``knee_*_exponent`` fields are set)

    With ``L = 0`` this is the idealized ``max``. Real kernels overlap weight streaming and math
    imperfectly, worst at the knee: with ``L = 1`` the roof is ``M + C`` there, ``max(M, C)``
    far from it (Vidur's H100 Llama 2 7B profile: 5.9 ms at 64 tokens, 9.2 ms at 256).

Step [s]
    ``step_overhead_s + layers × layer_overhead_s + roof + all-reduce``

    * ``step_overhead_s``: fixed per-step time outside the forward pass's roofline work
      (scheduling, input preparation, sampling, launch gaps).
    * ``layer_overhead_s``: per-layer time the roofline does not see: small kernels (norms,
      rotary embedding, activation, residual add) that are launch- and latency-bound.
    * All-reduce (``tp > 1`` and ``all_reduce=True``): two per layer of ``n × hidden_size × b``
      bytes (activations travel in ``dtype``), not overlapped with compute. With
      ``all_reduce_kernels`` (the presets) each is priced by
      :func:`budgetlab.cost.collective.all_reduce_s`: the kernel vLLM 0.33 runs at that size
      and TP (FlashInfer, custom one-/two-shot, symmetric memory or NCCL), fitted to published
      H100 measurements, on the graph's padded tokens; else the ring formula
      ``2 (tp − 1) / tp × bytes / interconnect_bandwidth + interconnect_latency``.
    * CUDA graphs (a cost built for an engine, :mod:`budgetlab.cost.step_terms`): each step
      runs FULL, PIECEWISE or without a graph as vLLM dispatches it; ``graph_padding`` prices
      the linear math on the padded tokens, and the host launch time per layer outside a FULL
      graph adds the part that exceeds the GPU work. :meth:`CalibratedCost.step_terms` names
      every term of a step.
    * Speculative decoding: a verification's drafts are tokens of the step, their queries'
      attention is ``draft_attention`` (:mod:`budgetlab.cost.step_terms`); an engine that
      speculates adds its proposer's passes, ``drafter`` (:mod:`budgetlab.cost.speculative_terms`).

A step of 0 tokens is not run and costs 0 s.

The deployment
--------------
``tp``, ``dtype``, ``kv_cache_dtype`` and ``quantization`` are the fields of the same names
on :class:`~budgetlab.specs.EngineConfig` (``tp`` is its ``tensor_parallel_size``), which
also sizes the KV pool (:func:`budgetlab.memory.kv_capacity`). Build the cost for an engine
with :meth:`CalibratedCost.typical` ``(hw, model, engine=engine)`` or
:meth:`CalibratedCost.for_engine`; :func:`budgetlab.simulate` refuses a cost whose deployment
differs from its engine's.

With every extra off (``attention``, ``kv_reads``, ``moe``, ``graph_padding``, ``moe_block_padding``,
``expert_parallel`` false, ``tile_tokens``
None, ``tp`` 1, the dtypes ``"auto"``, no ``quantization``, overheads and launch times 0,
``knee_overlap_loss`` 0) and both
efficiencies 1, every term above reduces to the
seeds' ``max(weight_read_s, n × per_token_s)`` with the same floating-point operations in the
same order as :class:`~budgetlab.cost.IdealCost`, so the two agree to the last bit.

Sources: the roofline model (Williams, Waterman & Patterson, CACM 2009); attention FLOPs
(Kaplan et al. 2020, §2.1, with the causal half counted); ring all-reduce cost (Patarasuk &
Yuan, JPDC 2009); Megatron-LM tensor parallelism, two all-reduces per layer (Shoeybi et al.
2019); expected distinct experts under uniform routing (the occupancy formula); bytes per
quantized weight and KV element as :mod:`budgetlab.memory.sizes` (vLLM 0.19's load logs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from budgetlab._checks import finite_array, flag
from budgetlab.cost.attention_terms import attended_pairs, full_attention_layers, layout_step
from budgetlab.cost.calibrated_checks import check_fields
from budgetlab.cost.presets import GPU_PROFILE, TYPICAL
from budgetlab.cost.speculative_terms import Drafter, decode_run_by_step, drafter_cost, drafter_for_engine
from budgetlab.cost.step_constants import _Constants, all_reduce_time_s, cost_constants
from budgetlab.cost.step_terms import (
    NONE,
    StepTerms,
    batch_draft_pairs,
    batch_sums,
    breakdown,
    cost_display_rows,
    dispatch_step,
    engine_graphs,
    graph_args,
    graph_arrays,
    graph_constants,
    graph_modes,
    layout_sums,
    step_time_s,
)
from budgetlab.display import html_table, one_line
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.memory import weight_bytes, weight_bytes_per_gpu
from budgetlab.specs import Batch, EngineConfig, HardwareSpec, ModelSpec

__all__ = ["CalibratedCost", "TYPICAL", "GPU_PROFILE"]


@dataclass(frozen=True, kw_only=True)
class CalibratedCost:
    """Step cost from the step's composition, with overheads, efficiencies, attention and more.

    See the module docstring for every term's formula. The defaults switch every extra off, so
    ``CalibratedCost(hardware=h, model=m)`` equals ``IdealCost(h, m)`` to the last bit; use
    :meth:`typical` for realistic values and :meth:`with_` for variants.

    Parameters
    ----------
    hardware : HardwareSpec
        The GPU: peak dense BF16 FLOP/s, memory bandwidth, interconnect bandwidth and latency.
    model : ModelSpec
        The model: parameters, layers, widths, heads, experts, ``dtype_bytes``.
    tp : int
        Tensor-parallel GPUs [count], >= 1; must divide ``num_attention_heads``
        (``EngineConfig.tensor_parallel_size``).
    dtype : str
        Weights' and activations' dtype, one of :data:`~budgetlab.specs.DTYPES` (vLLM's
        ``--dtype``); ``"auto"`` keeps the model's ``dtype_bytes``. It sets the bytes of
        unquantized weights, of the embedding and output projection, of the all-reduce and of
        an ``"auto"`` KV cache; the FLOP roof stays the 16-bit one.
    kv_cache_dtype : str
        KV-cache element type, one of :data:`~budgetlab.specs.KV_CACHE_DTYPES` (vLLM's
        ``--kv-cache-dtype``): an fp8 cache halves the KV bytes every step reads (of a 16-bit
        model).
    quantization : {None, "fp8", "int8", "int4"}
        Stored format of the linear layers' weights (:data:`~budgetlab.specs.QUANTIZATIONS`):
        it shrinks the weight read (see the module docstring), not the math.
    step_overhead_s : float
        Fixed time every step adds [s], >= 0.
    layer_overhead_s : float
        Time every layer adds to every step [s], >= 0.
    bandwidth_efficiency : float
        Achieved fraction of peak memory bandwidth, in (0, 1].
    flop_efficiency : float
        Achieved fraction of peak dense BF16 FLOP/s, in (0, 1].
    knee_overlap_loss : float
        How imperfectly weight streaming and math overlap, in [0, 1]: 0 is the idealized
        ``max(M, C)``, 1 is ``M + C`` at the knee.
    attention : bool
        Count attention FLOPs (they grow with context).
    kv_reads : bool
        Count KV-cache bytes read by every decode and every later chunk.
    tile_tokens : int or None
        Round the linear layers' token count up to whole GEMM tiles of this many tokens;
        ``None`` turns tile quantization off.
    moe : bool
        For a mixture-of-experts model, use active parameters for FLOPs and the expected
        distinct experts for weight bytes; without it every parameter is read and computed,
        as in the idealized model. No effect on a dense model.
    all_reduce, all_reduce_kernels : bool, bool
        Add the two all-reduces per layer when ``tp > 1``; price them as the kernels vLLM runs
        (:mod:`budgetlab.cost.collective`) rather than a ring over the catalog's link.
    knee_weight_exponent, knee_hidden_exponent : float, float
        Scale the knee loss by the GPU's layer bytes and the hidden size, each in [0, 4]
        (:func:`~budgetlab.cost.step_terms.knee_loss`); 0 and 0: the loss as given.
    graph_padding, piecewise_layer_launch_s, eager_layer_launch_s : bool, float, float
        The CUDA-graph terms (:mod:`budgetlab.cost.step_terms`): linear math on the padded
        tokens; host time per layer [s], >= 0, outside a FULL graph and under ``enforce_eager``.
    cudagraph_sizes, cudagraph_full_sizes, enforce_eager : tuple or None, tuple, bool
        The engine's capture and FULL sizes [tokens] and ``enforce_eager``, recorded by
        :meth:`for_engine`; ``cudagraph_sizes=None`` (the default): no graph modelling.
    moe_block_padding : bool
        With ``moe``, add the fused-MoE kernel's ``BLOCK_SIZE_M`` padding to the expert math
        (:mod:`budgetlab.cost.moe_step`; 0 with ``quantization``).
    expert_parallel : bool
        vLLM's ``--enable-expert-parallel`` (``EngineConfig.enable_expert_parallel``, recorded
        by :meth:`for_engine`): with ``moe`` and ``tp > 1`` each GPU holds ``E/tp`` whole
        experts and a step reads the slowest GPU's touched experts (:mod:`budgetlab.cost.moe_step`).
    cudagraph_decode_query_len, cudagraph_draft_sizes : int, tuple
        Speculative decoding, recorded by :meth:`for_engine`: the query tokens of a uniform
        decode, ``1 + num_speculative_tokens`` (FULL sizes are multiples of it), and the FULL
        sizes of an EAGLE or MTP drafter's single-token passes (:mod:`budgetlab.cudagraph`, P2).
    drafter : Drafter or None
        The proposer whose passes every step adds as the term ``drafter``
        (:mod:`budgetlab.cost.speculative_terms`); :meth:`for_engine` sets it from the engine's
        ``speculative_method`` and ``num_speculative_tokens``; None: no proposer.

    Attributes
    ----------
    weight_read_s : float
        Time to read all of one GPU's weights at the achieved bandwidth [s]:
        :func:`~budgetlab.memory.weight_bytes_per_gpu` ``(model, tp=tp, dtype=dtype,
        quantization=quantization) / (bandwidth × bandwidth_efficiency)`` (``num_params ×
        dtype_bytes / tp / ...`` unquantized). For a mixture-of-experts model with
        ``moe=True`` a step reads less (see :meth:`weight_bytes`).
    per_token_s : float
        Linear-layer math per token at the achieved FLOP rate [s]:
        ``2 × P / (peak_flops × flop_efficiency × tp)``.

    Examples
    --------
    >>> from budgetlab.catalog import hardware, model
    >>> cost = CalibratedCost.gpu_profile(hardware("h100-sxm"), model("llama-2-7b"))
    >>> round(cost.with_(attention=False).step_time_s(2048) * 1e3, 1)  # Vidur measured 40.4
    40.9
    >>> from budgetlab.specs import EngineConfig
    >>> engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, quantization="fp8")
    >>> round(CalibratedCost.typical(hardware("h100-sxm"), model("llama-3.1-8b"), engine=engine).weight_read_s * 1e3, 2)
    3.01
    """

    hardware: HardwareSpec
    model: ModelSpec
    tp: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    step_overhead_s: float = 0.0
    layer_overhead_s: float = 0.0
    bandwidth_efficiency: float = 1.0
    flop_efficiency: float = 1.0
    knee_overlap_loss: float = 0.0
    attention: bool = False
    kv_reads: bool = False
    tile_tokens: int | None = None
    moe: bool = False
    all_reduce: bool = True
    all_reduce_kernels: bool = False
    knee_weight_exponent: float = 0.0
    knee_hidden_exponent: float = 0.0
    graph_padding: bool = False
    piecewise_layer_launch_s: float = 0.0
    eager_layer_launch_s: float = 0.0
    cudagraph_sizes: tuple[int, ...] | None = None
    cudagraph_full_sizes: tuple[int, ...] = ()
    enforce_eager: bool = False
    moe_block_padding: bool = False
    expert_parallel: bool = False
    cudagraph_decode_query_len: int = 1
    cudagraph_draft_sizes: tuple[int, ...] = ()
    drafter: Drafter | None = None
    weight_read_s: float = field(init=False, repr=False)
    per_token_s: float = field(init=False, repr=False)
    _constants: _Constants = field(init=False, repr=False, compare=False)

    # ----------------------------------------------------------------------------------------
    # Construction
    # ----------------------------------------------------------------------------------------

    def __post_init__(self) -> None:
        check_fields(self)
        hw, m = self.hardware, self.model
        bandwidth = hw.mem_bandwidth_bytes_per_s * self.bandwidth_efficiency
        flop_rate = hw.dense_bf16_flops_per_s * self.flop_efficiency * self.tp
        # Same operations, same order as IdealCost: x / 1 and x * 1.0 are exact.
        replica_bytes = weight_bytes_per_gpu(m, tp=self.tp, dtype=self.dtype, quantization=self.quantization)
        object.__setattr__(self, "weight_read_s", replica_bytes / bandwidth)
        object.__setattr__(self, "per_token_s", self.flops_per_token / flop_rate)
        constants = cost_constants(self, *graph_constants(self))
        if self.drafter is not None:  # the proposer's parts, priced with this cost's fields
            constants = dataclasses.replace(constants, drafter=drafter_cost(self.drafter, self))
        object.__setattr__(self, "_constants", constants)

    @classmethod
    def ideal(cls, hardware: HardwareSpec, model: ModelSpec) -> CalibratedCost:
        """Every extra off and efficiencies 1: equals ``IdealCost(hardware, model)`` exactly."""
        return cls(hardware=hardware, model=model)

    @classmethod
    def typical(
        cls,
        hardware: HardwareSpec,
        model: ModelSpec,
        *,
        tp: int | None = None,
        engine: EngineConfig | None = None,
        draft_model: ModelSpec | str | None = None,
    ) -> CalibratedCost:
        """A real vLLM engine's step on a datacenter GPU: the :data:`~budgetlab.cost.presets.TYPICAL` preset.

        Every term is on (attention, KV reads, mixture of experts; all-reduce when ``tp > 1``)
        except GEMM tile quantization. The numbers and the data they were fitted to are in
        :mod:`budgetlab.cost.presets`: Vidur's H100 operator profile for the GPU's operators,
        and ten steady published vLLM serving runs on H100 for the weight-read bandwidth of
        CUDA-graph decode steps (0.90) and the engine's per-step CPU time (2.0 ms). With an
        engine, each step runs the CUDA graph vLLM gives it, padded, and pays the launch time
        a graph does not hide. For the GPU operators alone use :meth:`gpu_profile`.

        Parameters
        ----------
        hardware : HardwareSpec
        model : ModelSpec
        tp : int or None
            Tensor-parallel GPUs [count]; ``None``: the engine's ``tensor_parallel_size``, or 1
            without an engine.
        engine : EngineConfig or None
            The deployment to price: ``tensor_parallel_size``, ``dtype``, ``kv_cache_dtype``
            and ``quantization`` are taken from it (:meth:`for_engine`), so the cost describes
            the same deployment the engine's KV pool is sized for, with its proposer when it
            speculates. ``None``: one GPU, the model's dtype, no quantization.
        draft_model : ModelSpec, str or None
            The draft model of an engine with ``speculative_method="draft_model"`` (required
            there, ignored otherwise; :meth:`for_engine`).

        Raises
        ------
        ConfigError
            ``tp`` and ``engine`` both given and disagreeing; a draft-model engine without
            ``draft_model``.

        Examples
        --------
        >>> from budgetlab.catalog import hardware, model
        >>> from budgetlab.specs import EngineConfig
        >>> engine = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=256, tensor_parallel_size=2)
        >>> CalibratedCost.typical(hardware("h100-sxm"), model("llama-3.1-70b"), engine=engine).tp
        2
        """
        if engine is None:
            return cls(hardware=hardware, model=model, tp=1 if tp is None else tp, **TYPICAL)
        if not isinstance(engine, EngineConfig):
            raise ParameterError(f"engine must be an EngineConfig or None, got {type(engine).__name__}")
        if tp is not None and tp != engine.tensor_parallel_size:
            raise ConfigError(
                f"CalibratedCost.typical got tp={tp!r} but engine tensor_parallel_size="
                f"{engine.tensor_parallel_size}: they describe different deployments. Pass one of "
                "them (engine= alone takes tp from the engine)"
            )
        return cls(hardware=hardware, model=model, **TYPICAL).for_engine(engine, draft_model=draft_model)

    @classmethod
    def gpu_profile(
        cls,
        hardware: HardwareSpec,
        model: ModelSpec,
        *,
        engine: EngineConfig | None = None,
        draft_model: ModelSpec | str | None = None,
    ) -> CalibratedCost:
        """The step as the GPU's operators take it: the :data:`~budgetlab.cost.presets.GPU_PROFILE`
        preset (Vidur's H100 profile; no CPU time), for ``engine``'s deployment if given."""
        cost = cls(hardware=hardware, model=model, **GPU_PROFILE)
        return cost if engine is None else cost.for_engine(engine, draft_model=draft_model)

    def for_engine(self, engine: EngineConfig, *, draft_model: ModelSpec | str | None = None) -> CalibratedCost:
        """A copy priced for ``engine``'s deployment; validated again.

        ``tp`` becomes ``engine.tensor_parallel_size``, and ``dtype``, ``kv_cache_dtype`` and
        ``quantization`` the engine's fields of those names; its CUDA graphs on this hardware
        are recorded for dispatch (``cudagraph_*`` and ``enforce_eager``,
        :mod:`budgetlab.cost.step_terms`), ``expert_parallel`` becomes the engine's
        ``enable_expert_parallel``, and an engine that speculates gets its proposer
        (``drafter``: :meth:`Drafter.for_engine <budgetlab.cost.speculative_terms.Drafter.for_engine>`,
        with ``draft_model`` for ``speculative_method="draft_model"``; ignored otherwise). Every
        other field is kept.

        Raises
        ------
        ParameterError
            ``engine`` is not an EngineConfig, or its ``tensor_parallel_size`` does not divide
            the model's attention heads.
        ConfigError
            ``enable_expert_parallel`` for a model without experts (vLLM refuses it too); a
            draft-model engine without ``draft_model``.
        """
        if not isinstance(engine, EngineConfig):
            raise ParameterError(f"engine must be an EngineConfig, got {type(engine).__name__}")
        return dataclasses.replace(
            self,
            tp=engine.tensor_parallel_size,
            dtype=engine.dtype,
            kv_cache_dtype=engine.kv_cache_dtype,
            quantization=engine.quantization,
            expert_parallel=bool(engine.enable_expert_parallel),
            drafter=Drafter.for_engine(engine, self.model, draft_model=draft_model),
            **engine_graphs(engine, self.hardware),
        )

    def graphs_for(self, engine: EngineConfig) -> CalibratedCost:
        """This cost with ``engine``'s CUDA graphs and proposer (itself if recorded already, or if
        it records none: a cost built without an engine): :func:`budgetlab.simulate` dispatches
        the steps of the engine it runs. A proposer of another ``k`` keeps its fields; a draft
        model carries over (:func:`~budgetlab.cost.speculative_terms.drafter_for_engine`)."""
        if self.cudagraph_sizes is None:
            return self
        now = {**engine_graphs(engine, self.hardware), "drafter": drafter_for_engine(self.drafter, engine, self.model)}
        if all(getattr(self, name) == value for name, value in now.items()):
            return self
        return dataclasses.replace(self, **now)

    def with_(self, **changes: Any) -> CalibratedCost:
        """A copy with some fields changed (``cost.with_(attention=False)``); validated again."""
        return dataclasses.replace(self, **changes)

    # Derived quantities ---------------------------------------------------------------------

    def __repr__(self) -> str:
        return one_line("CalibratedCost", f"{self.hardware.slug}, {self.model.slug}", cost_display_rows(self)[:5])

    def _repr_html_(self) -> str:
        return html_table(f"CalibratedCost: {self.model.name} on {self.hardware.name}", cost_display_rows(self))

    @property
    def _moe_active(self) -> bool:
        m = self.model
        return bool(self.moe) and m.num_experts > 1 and m.num_experts_per_token < m.num_experts

    @property
    def _expert_params_all_layers(self) -> float:
        """One expert's parameters summed over all layers [count]."""
        m = self.model
        return (m.num_params - m.num_active_params) / (m.num_experts - m.num_experts_per_token)

    @property
    def flops_per_token(self) -> float:
        """Linear-layer math per token over all GPUs [FLOP]: ``2 × P`` (see the class docs)."""
        params = self.model.num_active_params if self._moe_active else self.model.num_params
        return 2.0 * params

    @property
    def attention_flops_per_pair(self) -> float:
        """Attention FLOPs per (query, key) pair over the full-attention layers [FLOP]: ``4 × L × H
        × d`` (every layer without a layout; :mod:`budgetlab.cost.attention_terms` the others)."""
        m = self.model
        return 4.0 * full_attention_layers(m) * m.num_attention_heads * m.head_dim

    @property
    def overhead_s(self) -> float:
        """Fixed time every step adds [s]: ``step_overhead_s + layers × layer_overhead_s``."""
        return self._constants.overhead_s

    def expected_experts(self, num_tokens: ArrayLike) -> np.ndarray | float:
        """Expected distinct experts ``n`` tokens touch in one layer [count] (vectorized).

        ``E × (1 − (1 − k/E)^n)``, assuming uniform, independent routing (see the module
        docstring). For a dense model (or ``moe=False``) every expert, 1 or ``E``, is read.
        """
        tokens = np.asarray(num_tokens, dtype=float)
        c = self._constants
        if not c.moe:
            experts = np.full(tokens.shape, c.num_experts)
        else:
            # math.pow on each distinct value, as the scalar path does: identical bits.
            values, inverse = np.unique(tokens, return_inverse=True)
            touched = np.array([c.num_experts * (1.0 - math.pow(c.miss_fraction, v)) for v in values.tolist()])
            experts = touched[inverse.reshape(tokens.shape)] if values.size else np.zeros(tokens.shape)
        return float(experts) if experts.ndim == 0 else experts

    def weight_bytes(self, num_tokens: ArrayLike) -> np.ndarray | float:
        """Weight bytes a step of ``num_tokens`` tokens reads, over all GPUs [B] (vectorized).

        :func:`budgetlab.memory.weight_bytes` (``num_params × dtype_bytes`` unquantized) for a
        dense model; for a mixture of experts with ``moe=True``, ``shared_bytes + layers × D(n)
        × expert_bytes`` (see the module docstring for the split under ``quantization``).
        """
        tokens = np.asarray(num_tokens, dtype=float)
        c = self._constants
        if not c.moe:
            out = np.full(tokens.shape, weight_bytes(self.model, dtype=self.dtype, quantization=self.quantization))
        else:
            experts = np.asarray(self.expected_experts(tokens))
            out = c.shared_bytes + experts * c.expert_bytes
        return float(out) if out.ndim == 0 else out

    def weight_bytes_per_gpu(self, num_tokens: ArrayLike) -> np.ndarray | float:
        """Weight bytes a step of ``num_tokens`` tokens reads on each of the ``tp`` GPUs [B]
        (vectorized): :meth:`weight_bytes` ``/ tp``; with ``expert_parallel``, the slowest GPU's
        ``shared_bytes / tp + S(n) × expert_bytes`` (:mod:`budgetlab.cost.moe_step`)."""
        c = self._constants
        if c.expert_parallel is None:
            out = np.asarray(self.weight_bytes(num_tokens)) / self.tp
        else:
            slowest = c.expert_parallel.slowest_experts(np.asarray(num_tokens, dtype=float))
            out = c.shared_bytes / self.tp + np.asarray(slowest) * c.expert_bytes
        return float(out) if out.ndim == 0 else out

    def all_reduce_s(self, num_tokens: ArrayLike, *, cuda_graph: bool = True) -> np.ndarray | float:
        """Time of the step's all-reduces [s] (vectorized): 0 without tensor parallelism. Two per
        layer of ``n × hidden × b`` bytes: with ``all_reduce_kernels`` the kernels vLLM runs
        (:class:`~budgetlab.cost.step_terms.AllReduceTable`; ``cuda_graph=False`` pays each launch),
        else the ring ``2 × layers × (2 (tp − 1) / tp × n × hidden × b / link_bandwidth + link_latency)``.
        """
        tokens = np.asarray(num_tokens, dtype=float)
        c = self._constants
        flag("cuda_graph", cuda_graph)
        if not c.all_reduce:
            out = np.zeros(tokens.shape)
        else:
            out = np.asarray(all_reduce_time_s(c, tokens, None, not cuda_graph), dtype=float)
        return float(out) if out.ndim == 0 else out

    # ----------------------------------------------------------------------------------------
    # The one formula every public method goes through
    # ----------------------------------------------------------------------------------------

    def _time_s(
        self,
        tokens: Any,
        pairs: Any,
        kv_tokens: Any,
        weight_read_s: Any,
        padded: Any = None,
        launch_s: Any = None,
        eager: Any = False,
        layout_s: Any = None,
    ) -> Any:
        """Step time [s]: :func:`budgetlab.cost.step_terms.step_time_s` with this cost's constants."""
        c, per_token_s = self._constants, self.per_token_s
        return step_time_s(c, per_token_s, tokens, pairs, kv_tokens, weight_read_s, padded, launch_s, eager, layout_s)

    def _weight_read_s(self, tokens: Any) -> Any:
        """Seconds to read the weights a step of ``tokens`` tokens touches, on one GPU."""
        c = self._constants
        if not c.moe:
            return self.weight_read_s
        if isinstance(tokens, float) and c.expert_parallel is not None:
            return (c.shared_bytes / self.tp + c.expert_parallel.slowest_experts(tokens) * c.expert_bytes) / c.bandwidth
        if isinstance(tokens, float):
            experts = c.num_experts * (1.0 - math.pow(c.miss_fraction, tokens))
            return (c.shared_bytes + experts * c.expert_bytes) / self.tp / c.bandwidth
        return np.asarray(self.weight_bytes_per_gpu(tokens)) / c.bandwidth

    # ----------------------------------------------------------------------------------------
    # The cost-model interface
    # ----------------------------------------------------------------------------------------

    def step_time_s(self, num_tokens: ArrayLike, *, context_tokens: ArrayLike = 0) -> np.ndarray | float:
        """Time of a pure-prefill step: one chunk of ``num_tokens`` after ``context_tokens`` [s].

        Vectorized: the two arguments broadcast against each other.

        Parameters
        ----------
        num_tokens : int or array_like of int
            Tokens in the chunk [tokens], >= 0. A step of 0 tokens is not run (0 s).
        context_tokens : int or array_like of int
            Tokens of the same request already in the KV cache [tokens], >= 0.
        """
        tokens = finite_array("num_tokens", num_tokens, what="finite numbers of tokens >= 0", low=0.0, error=ValueError)
        context = finite_array(
            "context_tokens", context_tokens, what="finite numbers of tokens >= 0", low=0.0, error=ValueError
        )
        tokens, context = np.broadcast_arrays(tokens, context)
        pairs = attended_pairs("full", tokens, context)
        padded, launch_s, eager = graph_arrays(self._constants, tokens, context)
        lc = self._constants.layout
        layout_s = None if lc is None else layout_step(lc, 0.0, 0.0, (tokens,), (context,))
        time_s = self._time_s(tokens, pairs, context, self._weight_read_s(tokens), padded, launch_s, eager, layout_s)
        if self._constants.drafter is not None:  # the proposer runs in every step of a speculating engine
            time_s = time_s + self._constants.drafter.curve_s(tokens, context)
        return float(time_s) if time_s.ndim == 0 else time_s

    def batch_time_s(self, batch: Batch) -> float:
        """Time of a step of the given composition [s].

        Prefill chunks attend to their own earlier tokens (``prefill_context_tokens``) and read
        them from the KV cache; each decode attends to and reads its context. With the engine's
        CUDA graphs recorded (:meth:`for_engine`) the step is dispatched as vLLM does it and
        pays the graph terms that are on (:mod:`budgetlab.cost.step_terms`).
        """
        c = self._constants
        tokens, pairs, kv_tokens = batch_sums(batch)
        drafts, chunks = batch.decode_draft_tokens, batch.prefill_tokens
        mode, graph_tokens = dispatch_step(c, tokens, chunks, batch.prefill_context_tokens, batch.num_decodes, drafts)
        padded, launch_s = graph_args(c, mode, graph_tokens)
        if drafts:  # the verification's draft queries (draft_attention)
            pairs = pairs + batch_draft_pairs(batch)
        weight_read_s, layout_s = self._weight_read_s(tokens), layout_sums(c, batch)
        time_s = float(self._time_s(tokens, pairs, kv_tokens, weight_read_s, padded, launch_s, mode == NONE, layout_s))
        return time_s if c.drafter is None else time_s + c.drafter.time_s(batch)

    def step_terms(self, batch: Batch) -> StepTerms:
        """The step time of :meth:`batch_time_s` split into named terms [s] that add up to it.

        The terms are :data:`~budgetlab.cost.step_terms.STEP_TERM_NAMES`: overheads, the
        binding roof's parts (weight and KV reads, or linear, padding and attention math; the
        other roof is hidden and shows 0), the knee overlap loss, the all-reduce and the
        launch time a graph mode does not hide; with the step's CUDA-graph mode and padded
        tokens. ``StepTerms.as_dict()`` gives one table row.

        Examples
        --------
        >>> from budgetlab.catalog import hardware, model
        >>> from budgetlab.specs import Batch, EngineConfig
        >>> engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
        >>> cost = CalibratedCost.typical(hardware("h100-sxm"), model("llama-2-7b"), engine=engine)
        >>> terms = cost.step_terms(Batch(num_decodes=100, decode_context_tokens=50_000))
        >>> terms.mode, terms.padded_tokens, terms.bound
        ('FULL', 104, 'memory')
        >>> abs(terms.total_s - cost.batch_time_s(Batch(num_decodes=100, decode_context_tokens=50_000))) < 1e-15
        True
        """
        c, per_token_s = self._constants, self.per_token_s
        tokens, pairs, kv_tokens = batch_sums(batch)
        drafts, chunks = batch.decode_draft_tokens, batch.prefill_tokens
        mode, padded = dispatch_step(c, tokens, chunks, batch.prefill_context_tokens, batch.num_decodes, drafts)
        weight_read_s, layout_s = self._weight_read_s(tokens), layout_sums(c, batch)
        drafter = None if c.drafter is None else c.drafter.terms(batch)
        args = (c, per_token_s, tokens, pairs, kv_tokens, weight_read_s, mode, padded, layout_s)
        return breakdown(*args, draft_pairs=batch_draft_pairs(batch), drafter_terms=drafter)

    def cudagraph_modes(self, num_tokens: ArrayLike, uniform_decode: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """The CUDA-graph mode and padded tokens of steps (vectorized), as :meth:`batch_time_s`
        dispatches them: :func:`budgetlab.cudagraph.cudagraph_dispatch` on the recorded engine.

        Parameters
        ----------
        num_tokens : array_like of int
            Tokens each step schedules [tokens], >= 1.
        uniform_decode : array_like of bool
            Whether each step is a uniform decode (every chunk one token over a cached context).

        Returns ``(modes, padded_tokens)``: arrays of str and int. Raises ``ConfigError`` when the
        cost has no engine's graphs recorded (build it with :meth:`for_engine`).
        """
        return graph_modes(self._constants, num_tokens, uniform_decode)

    def decode_run_time_s(
        self, *, num_decodes: int, decode_context_tokens: np.ndarray, decode_draft_tokens: int = 0
    ) -> np.ndarray:
        """Times of consecutive decode-only steps [s], equal to :meth:`batch_time_s` bit for bit.

        Parameters
        ----------
        num_decodes : int
            Decodes in every step of the run [count].
        decode_context_tokens : numpy.ndarray
            For each step, the sum of the decodes' contexts [tokens].
        decode_draft_tokens : int
            Drafts the decodes verify in every step [tokens] (speculative decoding); 0 by default.
        """
        decode_context = np.asarray(decode_context_tokens, dtype=float)
        if decode_draft_tokens or self._constants.drafter is not None:  # step by step, over distinct contexts
            return decode_run_by_step(self, num_decodes, decode_context, decode_draft_tokens)
        # The same operations as batch_time_s with no prefill chunk (its sums are 0.0).
        decodes = float(num_decodes)
        tokens = (decodes + 0.0) + 0.0
        pairs = 0.0 + (decode_context + decodes)
        kv_tokens = 0.0 + decode_context
        weight_read_s = self._weight_read_s(tokens)  # the same in every step of the run
        mode, graph_tokens = dispatch_step(self._constants, tokens, (), (), num_decodes)  # the same in every step
        padded, launch_s = graph_args(self._constants, mode, graph_tokens)
        token_array, lc = np.full(decode_context.shape, tokens), self._constants.layout
        layout_s = None if lc is None else layout_step(lc, decodes, decode_context)
        return self._time_s(token_array, pairs, kv_tokens, weight_read_s, padded, launch_s, mode == NONE, layout_s)
