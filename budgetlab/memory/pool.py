"""The KV pool vLLM allocates at start-up: every term of GPU memory, and the blocks left.

vLLM 0.19 (V1) sizes its pool on each GPU as (:mod:`budgetlab.memory.profile`)::

    kv_bytes = reported_memory × gpu_memory_utilization
               − weights per GPU − non-torch memory − activation peak

and splits it into blocks of ``block_size`` tokens: ``num_gpu_blocks = floor(kv_bytes /
(block_size × kv_bytes_per_token))``, where ``kv_bytes_per_token`` is each GPU's share of every
layer's keys and values (:func:`budgetlab.memory.kv_bytes_per_token`). It logs ``num_gpu_blocks ×
block_size`` as "GPU KV cache size: N tokens"; one block is its reserved null block, so the
usable blocks here (``num_blocks``, the simulator's pool) are ``num_gpu_blocks − 1``.

Every term is per GPU: with tensor parallelism each GPU holds its share of the weights and of
every cached token, so the tokens a GPU's pool holds are the replica's. With pipeline
parallelism every stage sizes its own pool for its own layers and vLLM keeps the smallest
(``min`` over the workers' block counts); :class:`KVCapacity` describes that stage.

A model with sliding-window, chunked-local, MLA or Mamba layers (an attention layout) gets
vLLM's hybrid pool instead: groups of layers, one page size, ``num_gpu_blocks = floor(kv_bytes
/ page / layers per group)``, and the "GPU KV cache size" and "Maximum concurrency" vLLM logs
for it (:mod:`budgetlab.memory.kv_specs`; :attr:`KVCapacity.plan`).

Accuracy: against all 36 vLLM 0.19 start-ups on H100 in ``vllm_kv_logs.csv`` that the catalog
can express (see :mod:`budgetlab.experiments.kv_logs`; GPT-OSS 20B's two-group pools, Gemma 3's
seven groups, MLA and Llama 4 Scout among them), the predicted "GPU KV cache size" and "Maximum
concurrency" are within 2 % wherever the pool holds ≥ 10 GiB and within 8 % where it is tight.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from budgetlab._checks import MAX_KV_BLOCKS, MAX_TOKENS, at_most, int_at_least
from budgetlab.attention import KVGroup
from budgetlab.errors import ConfigError, DoesNotFitError, ParameterError
from budgetlab.memory.kv_specs import KVPoolPlan, plan_kv_pool
from budgetlab.memory.profile import ActivationPeak, GiB, activation_peak, non_torch_bytes
from budgetlab.memory.sizes import (
    check_tp,
    engine_kv_bytes_per_token,
    engine_weight_bytes_per_gpu,
    stage_layers,
    valid_tp_sizes,
    weight_bytes,
)
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec

__all__ = [
    "ceil_blocks",
    "KVCapacity",
    "kv_capacity",
    "num_kv_blocks",
    "blocks_for_tokens",
    "kv_by_budget",
]


def ceil_blocks(num_tokens: int, block_size: int) -> int:
    """``ceil(num_tokens / block_size)`` without argument checks: the simulator's hot path."""
    return -(-num_tokens // block_size)


def blocks_for_tokens(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens of one sequence: ``ceil(n / block_size)``.

    Raises
    ------
    ParameterError
        ``num_tokens`` not an int >= 0, or ``block_size`` not an int >= 1.
    """
    tokens = int_at_least("num_tokens", num_tokens, 0, what="an int >= 0 [tokens]")
    size = int_at_least("block_size", block_size, 1, what="an int >= 1 (tokens per KV block)")
    return ceil_blocks(tokens, size)


@dataclass(frozen=True)
class KVCapacity:
    """How one GPU's memory splits at start-up, and the KV pool that is left.

    Attributes
    ----------
    reported_memory_bytes : float
        What CUDA reports as the GPU's total [B] (79.19 GiB on an "80GB" H100).
    usable_bytes : float
        ``reported_memory_bytes × gpu_memory_utilization``, vLLM's "requested memory" [B].
    weight_bytes : float
        This GPU's share of the weights [B].
    non_torch_bytes : float
        CUDA context, cuBLAS and NCCL memory outside PyTorch [B].
    activation : ActivationPeak
        The profile run's forward and sampler passes [B].
    kv_bytes : float
        Left for the KV cache [B]: ``usable − weights − non-torch − activation peak``.
    kv_bytes_per_token : int or float
        This GPU's share of one token's keys and values [B/token].
    num_gpu_blocks : int
        vLLM's ``num_gpu_blocks`` (its null block included) [count].
    block_size : int
        Tokens per block [tokens].
    tp : int
        Tensor-parallel GPUs per stage [count].
    pp : int
        Pipeline stages [count].
    stage : int
        The stage these terms describe: the one with the fewest blocks, which sets the pool.
    max_model_len : int or None
        Tokens per request :attr:`max_concurrency` is for (``engine.max_model_len``) [tokens].
    plan : KVPoolPlan or None
        For a model with an attention layout: vLLM's groups, page and block sizes, blocks per
        request (:mod:`budgetlab.memory.kv_specs`); ``None`` for an all-full-attention model.
        ``kv_bytes_per_token`` is then what a token costs if every layer kept it.
    """

    reported_memory_bytes: float
    usable_bytes: float
    weight_bytes: float
    non_torch_bytes: float
    activation: ActivationPeak
    kv_bytes: float
    kv_bytes_per_token: int | float
    num_gpu_blocks: int
    block_size: int
    tp: int = 1
    pp: int = 1
    stage: int = 0
    max_model_len: int | None = None
    plan: KVPoolPlan | None = None

    @property
    def activation_bytes(self) -> float:
        """The activation peak subtracted [B] (``activation.peak_bytes``)."""
        return self.activation.peak_bytes

    @property
    def num_blocks(self) -> int:
        """Usable KV blocks, the simulator's pool: ``num_gpu_blocks − 1`` [count]."""
        return self.num_gpu_blocks - 1

    @property
    def num_tokens(self) -> int:
        """Tokens the usable blocks hold [tokens]: ``num_blocks × block_size``. With several
        KV-cache groups this is ``num_blocks // groups × block_size``, the tokens each group could
        hold if the groups shared the blocks equally: a rough size only (a window or a Mamba
        group holds far fewer blocks per request); what a request really takes is
        :attr:`max_concurrency` (vLLM's own figure) or
        :func:`budgetlab.experiments.guess.requests_pool_holds`."""
        return self.num_blocks // len(self.kv_groups) * self.block_size

    @property
    def vllm_kv_cache_tokens(self) -> int:
        """What vLLM 0.19 logs as "GPU KV cache size: N tokens": ``num_gpu_blocks × block_size``;
        with several groups ``num_gpu_blocks // groups × block_size``."""
        if self.plan is not None:
            return self.plan.vllm_kv_cache_tokens
        return self.num_gpu_blocks * self.block_size

    @property
    def kv_groups(self) -> tuple[KVGroup, ...]:
        """The KV-cache groups sharing the pool (``("full",)`` for an all-full-attention model)."""
        return self.plan.groups if self.plan is not None else ("full",)

    @property
    def max_concurrency(self) -> float | None:
        """vLLM's "Maximum concurrency for max_model_len tokens per request": ``num_gpu_blocks /``
        the blocks one such request may hold in all groups [requests]; ``None`` without a
        ``max_model_len``."""
        if self.plan is not None:
            return self.plan.max_concurrency if self.max_model_len is not None else None
        if self.max_model_len is None:
            return None
        return self.num_gpu_blocks / ceil_blocks(self.max_model_len, self.block_size)

    @property
    def kv_fraction(self) -> float:
        """Share of the usable memory that holds KV cache [-]."""
        return self.kv_bytes / self.usable_bytes

    def terms(self) -> pd.DataFrame:
        """Where every byte goes, one row per term (a tidy table for notebooks).

        Returns
        -------
        pandas.DataFrame
            ``term``, ``bytes``, ``gib`` and ``fraction_of_usable``; the rows are the reported
            memory, the headroom ``1 − gpu_memory_utilization`` leaves (CUDA graphs live
            there), weights, non-torch memory, the activation peak and the KV cache. The last
            four sum to the usable memory.
        """
        rows = [
            ("reported by CUDA", self.reported_memory_bytes),
            ("headroom (1 − gpu_memory_utilization)", self.reported_memory_bytes - self.usable_bytes),
            ("weights", self.weight_bytes),
            ("non-torch (CUDA context, NCCL)", self.non_torch_bytes),
            (f"activation peak ({self.activation.binding_pass} pass)", self.activation_bytes),
            ("KV cache", self.kv_bytes),
        ]
        frame = pd.DataFrame(rows, columns=["term", "bytes"])
        frame["gib"] = frame["bytes"] / GiB
        frame["fraction_of_usable"] = frame["bytes"] / self.usable_bytes
        return frame


def kv_capacity(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig) -> KVCapacity:
    """KV pool left on each GPU after weights, non-torch memory and activations (vLLM 0.19).

    Parameters
    ----------
    hardware : HardwareSpec
        Its ``reported_memory_bytes`` (CUDA's total; the datasheet capacity when unknown).
    model : ModelSpec
    engine : EngineConfig
        ``gpu_memory_utilization``, ``max_num_batched_tokens``, ``max_num_seqs``,
        ``block_size`` and the deployment: ``tensor_parallel_size``,
        ``pipeline_parallel_size`` (the smallest stage's pool is returned), ``dtype``,
        ``kv_cache_dtype``, ``quantization``. For a model with an attention layout the pool is
        vLLM's hybrid one (:mod:`budgetlab.memory.kv_specs`); with prefix caching on, a Mamba
        group is sized as vLLM's ``mamba_cache_mode="align"`` sizes it (two blocks per request),
        a mode the simulator does not schedule (it asks for ``enable_prefix_caching=False``).

    Raises
    ------
    DoesNotFitError
        When weights, non-torch memory and activations leave no room for even one block
        besides the null block; the message says by how much they overflow and what would fit
        (a valid tensor-parallel size, a quantization or fp8 cache, a smaller budget, a bigger
        GPU).
    ParameterError
        A ``tensor_parallel_size`` that does not divide the attention heads.
    """
    check_tp(model, engine.tensor_parallel_size)
    num_stages = len(stage_layers(model.num_layers, engine.pipeline_parallel_size))
    stages = [_stage(hardware, model, engine, stage) for stage in range(num_stages)]
    cap = min(stages, key=lambda c: (c.num_gpu_blocks, c.stage))
    if cap.num_gpu_blocks < 2:  # one block is vLLM's reserved null block
        raise DoesNotFitError(
            _does_not_fit(
                hardware,
                model,
                engine,
                cap.usable_bytes,
                cap.weight_bytes,
                cap.non_torch_bytes,
                cap.activation,
                cap.kv_bytes_per_token * engine.block_size,
            )
        )
    return cap


def _stage(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig, stage: int) -> KVCapacity:
    """One pipeline stage's memory terms and blocks (``num_gpu_blocks`` may be < 2 here)."""
    tp, pp = engine.tensor_parallel_size, engine.pipeline_parallel_size
    reported = hardware.reported_memory_bytes
    usable = reported * engine.gpu_memory_utilization
    weights = engine_weight_bytes_per_gpu(model, engine, stage=stage)
    non_torch = non_torch_bytes(tp, pp)
    activation = activation_peak(model, engine, stage=stage)
    per_token = engine_kv_bytes_per_token(model, engine, stage=stage)
    kv = usable - weights - non_torch - activation.peak_bytes
    plan, block_size = None, engine.block_size
    if model.attention is not None:
        plan = plan_kv_pool(model, engine, kv, stage=stage, stage_layers=stage_layers(model.num_layers, pp))
        num_gpu_blocks, block_size = plan.num_gpu_blocks, plan.block_size
    else:
        num_gpu_blocks = math.floor(kv / (per_token * engine.block_size)) if kv > 0 else 0
    return KVCapacity(
        reported_memory_bytes=reported,
        usable_bytes=usable,
        weight_bytes=weights,
        non_torch_bytes=non_torch,
        activation=activation,
        kv_bytes=kv,
        kv_bytes_per_token=per_token,
        num_gpu_blocks=num_gpu_blocks,
        block_size=block_size,
        tp=tp,
        pp=pp,
        stage=stage,
        max_model_len=engine.max_model_len,
        plan=plan,
    )


def _does_not_fit(
    hardware: HardwareSpec,
    model: ModelSpec,
    engine: EngineConfig,
    usable: float,
    weights: float,
    non_torch: float,
    activation: ActivationPeak,
    block_bytes: float,
) -> str:
    tp = engine.tensor_parallel_size
    short = weights + non_torch + activation.peak_bytes + 2 * block_bytes - usable
    where = f"one {hardware.name}" if tp == 1 else f"{tp} × {hardware.name} (tensor_parallel_size={tp})"
    if engine.pipeline_parallel_size > 1:
        where += f" per stage of {engine.pipeline_parallel_size} (pipeline_parallel_size)"
    weights_text = f"weights {weights / GiB:.2f} GiB" + ("" if tp == 1 else " per GPU")
    fixes = []
    total_weights = weight_bytes(model, dtype=engine.dtype, quantization=engine.quantization)
    for degree in valid_tp_sizes(model):
        if degree <= tp:
            continue
        if total_weights / degree + non_torch_bytes(degree) + activation.peak_bytes + 2 * block_bytes < usable:
            fixes.append(f"tensor_parallel_size={degree}")
            break
    if engine.quantization is None:
        quantized = weight_bytes(model, dtype=engine.dtype, quantization="fp8") / tp
        if quantized + non_torch + activation.peak_bytes + 2 * block_bytes < usable:
            fixes.append('quantization="fp8"')
    if activation.peak_bytes > short and engine.max_num_batched_tokens > engine.max_num_seqs:
        fixes.append(
            "a smaller max_num_batched_tokens or max_num_seqs (the activation peak is "
            f"{activation.peak_bytes / GiB:.2f} GiB)"
        )
    fixes.append("a GPU with more memory")
    return (
        f"{model.name} does not fit on {where}: {weights_text} + non-torch {non_torch / GiB:.2f} GiB + "
        f"activation peak {activation.peak_bytes / GiB:.2f} GiB exceed the {usable / GiB:.2f} GiB usable "
        f"({hardware.reported_memory_bytes / GiB:.2f} GiB reported × gpu_memory_utilization "
        f"{engine.gpu_memory_utilization}) by {short / GiB:.2f} GiB, leaving no KV cache. "
        f"Try {', or '.join(fixes)}."
    )


def num_kv_blocks(engine: EngineConfig, hardware: HardwareSpec | None = None, model: ModelSpec | None = None) -> int:
    """Usable KV blocks: ``engine.num_kv_blocks`` if set, else derived from memory.

    Raises
    ------
    ValueError
        When the engine leaves the pool to be derived but no hardware or model is given.
    DoesNotFitError
        When weights plus activations leave no KV cache (see :func:`kv_capacity`).
    ConfigError
        When the pool derived from memory holds more than
        :data:`~budgetlab._checks.MAX_KV_BLOCKS` blocks (a model far smaller than any served on
        a GPU of that size: the simulator keeps every block in memory).
    """
    if engine.num_kv_blocks is not None:
        return engine.num_kv_blocks
    if hardware is None or model is None:
        raise ValueError(
            "EngineConfig.num_kv_blocks is None (derive from memory) but no hardware and model "
            "were given: pass both, or set num_kv_blocks explicitly"
        )
    blocks = kv_capacity(hardware, model, engine).num_blocks
    at_most(f"the KV pool of {model.slug} on {hardware.slug} (num_kv_blocks)", blocks, MAX_KV_BLOCKS, error=ConfigError)
    return blocks


def kv_by_budget(
    hardware: HardwareSpec,
    model: ModelSpec,
    budgets: Iterable[int],
    engine: EngineConfig,
) -> pd.DataFrame:
    """The KV pool for each token budget: a bigger budget needs more activation memory.

    Each budget gets its own :func:`kv_capacity` (``engine`` with that
    ``max_num_batched_tokens``; every other knob, the deployment included, as given). Budgets
    below ``engine.max_num_seqs`` (a configuration vLLM refuses) are skipped.

    Parameters
    ----------
    hardware, model : HardwareSpec, ModelSpec
        The GPU and the model.
    budgets : iterable of int
        Token budgets [tokens]; duplicates count once.
    engine : EngineConfig
        The rest of the configuration: ``max_num_seqs`` (it sets the sampler's logits),
        ``gpu_memory_utilization``, ``block_size``, ``tensor_parallel_size``, dtypes.

    Returns
    -------
    pandas.DataFrame
        One row per budget, increasing: ``max_num_batched_tokens``, ``activation_bytes``,
        ``forward_bytes``, ``sampler_bytes`` and ``kv_bytes`` [bytes], ``kv_tokens``,
        ``kv_blocks``, ``kv_tokens_lost`` (fewer KV tokens than at the smallest budget)
        [tokens] and ``kv_tokens_lost_fraction`` (that, relative to the smallest budget's) [-].

    Raises
    ------
    ValueError
        When every budget is below ``max_num_seqs``.
    ParameterError
        A budget that is not an int in ``[1, 2**27]`` (:data:`~budgetlab._checks.MAX_TOKENS`).
    """
    if isinstance(budgets, (str, bytes)):
        raise ParameterError(f"budgets must be a sequence of token budgets (ints >= 1), got {budgets!r}")
    checked = {
        int_at_least(f"budgets[{i}]", b, 1, what="an int >= 1 [tokens]", maximum=MAX_TOKENS)
        for i, b in enumerate(budgets)
    }
    rows = []
    for budget in sorted(checked):
        if budget < engine.max_num_seqs:
            continue
        cap = kv_capacity(hardware, model, dataclasses.replace(engine, max_num_batched_tokens=budget))
        rows.append(
            {
                "max_num_batched_tokens": budget,
                "activation_bytes": cap.activation_bytes,
                "forward_bytes": cap.activation.forward_bytes,
                "sampler_bytes": cap.activation.sampler_bytes,
                "kv_bytes": cap.kv_bytes,
                "kv_tokens": cap.num_tokens,
                "kv_blocks": cap.num_blocks,
            }
        )
    if not rows:
        raise ValueError(
            f"every budget is below max_num_seqs ({engine.max_num_seqs}); vLLM refuses those: "
            "use budgets of at least max_num_seqs tokens"
        )
    frame = pd.DataFrame(rows)
    smallest = int(frame.kv_tokens.to_numpy()[0])
    frame["kv_tokens_lost"] = smallest - frame.kv_tokens
    frame["kv_tokens_lost_fraction"] = frame.kv_tokens_lost / smallest
    return frame
