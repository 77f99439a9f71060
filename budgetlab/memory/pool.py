"""KV-cache memory: bytes per token, and how many blocks fit after weights and activations.

vLLM sizes its KV pool at start-up: ``total memory × gpu_memory_utilization − weights − peak
activations`` (the activation peak is measured with a dummy batch of
``max_num_batched_tokens`` tokens, so a bigger budget leaves less KV), split into blocks of
``block_size`` tokens. vLLM's ``num_gpu_blocks`` includes one reserved null block; the
``num_blocks`` here are the usable ones (N − 1).

The activation estimate
-----------------------
budgetlab has no GPU to profile, so it estimates the peak of a forward pass over a batch of
``max_num_batched_tokens`` tokens as the largest live tensors of one layer plus the sampler's
logits::

    activation_bytes = num_tokens × (2 × intermediate_size + 4 × hidden_size) × dtype_bytes
                       + max_num_seqs × vocab_size × 4

The first term is the MLP's fused gate/up projection output (``2 × intermediate``) plus the
residual stream, normed input, attention output and MLP output (``4 × hidden``); layers run one
after another, so only one layer's tensors are live. The second is the FP32 logits of the last
position of each sequence. For Llama 3.1 8B with a 2,048-token budget and 256 sequences this is
≈ 0.31 GB; vLLM's profiler typically reports somewhat more (CUDA graphs, allocator slack), so
treat the KV capacity here as an upper bound within a few percent.

Tensor parallelism
------------------
With ``tp`` GPUs per replica vLLM shards every weight matrix, so each GPU holds
``weight_bytes / tp`` (:func:`weight_bytes_per_gpu`), and splits the KV heads: each GPU stores
``num_kv_heads / min(tp, num_kv_heads)`` heads of every token, because once ``tp`` exceeds the
KV heads vLLM replicates them rather than splitting a head (:func:`kv_bytes_per_token`). Every
GPU holds its share of every cached token, so the pool's tokens per GPU are the replica's. The
activation estimate is not split (an upper bound per GPU). ``tp`` must divide the attention
heads, as vLLM requires.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from budgetlab._checks import int_at_least
from budgetlab.errors import DoesNotFitError, ParameterError
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec

__all__ = [
    "check_tp",
    "weight_bytes_per_gpu",
    "weights_fit",
    "kv_bytes_per_token",
    "activation_bytes",
    "KVCapacity",
    "kv_capacity",
    "num_kv_blocks",
    "blocks_for_tokens",
    "kv_by_budget",
]

LOGITS_BYTES = 4  # the sampler works on FP32 logits


def check_tp(model: ModelSpec, tp: object) -> int:
    """``tp`` as an int, if it is a tensor-parallel degree vLLM accepts for ``model`` [count].

    Raises
    ------
    ParameterError
        Not an int >= 1, or it does not divide the model's attention heads.
    """
    degree = int_at_least("tp", tp, 1, what="an int >= 1 (GPUs per replica)")
    if model.num_attention_heads % degree:
        raise ParameterError(
            f"tp={degree} does not divide {model.name}'s {model.num_attention_heads} "
            "attention heads; vLLM requires it to. Pick a divisor such as "
            f"{_divisors_text(model.num_attention_heads)}."
        )
    return degree


def _divisors_text(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and d <= 16)


def weight_bytes_per_gpu(model: ModelSpec, *, tp: int = 1) -> float:
    """Weight bytes each GPU holds when tensor parallelism splits the model over ``tp`` [B].

    ``weight_bytes / tp``: 141 GB of Llama 3.1 70B in BF16 are 70.6 GB per GPU at ``tp=2``.

    Parameters
    ----------
    model : ModelSpec
    tp : int
        GPUs per replica [count]; must divide the attention heads (:func:`check_tp`).
    """
    return model.weight_bytes / check_tp(model, tp)


def weights_fit(hardware: HardwareSpec, model: ModelSpec, *, tp: int = 1) -> bool:
    """Whether each GPU's share of the weights fits in its memory [-].

    ``weight_bytes / tp <= memory_bytes``: the first question before any KV cache (which
    :func:`kv_capacity` answers, after ``gpu_memory_utilization`` and activations).
    """
    return bool(weight_bytes_per_gpu(model, tp=tp) <= hardware.memory_bytes)


def kv_bytes_per_token(model: ModelSpec, *, tp: int = 1) -> int | float:
    """KV-cache bytes one token occupies on each GPU [B].

    ``2 (K and V) × layers × KV heads × head_dim × dtype_bytes``: 131,072 B (128 KiB) for
    Llama 3.1 8B in BF16 (2 × 32 × 8 × 128 × 2). With tensor parallelism each GPU stores
    ``1 / min(tp, num_kv_heads)`` of it (vLLM replicates KV heads beyond their number): 16 KiB
    for Llama 3.1 8B at ``tp=8`` and at ``tp=16`` alike. An int whenever the split is even.

    Parameters
    ----------
    model : ModelSpec
    tp : int
        GPUs per replica [count]; must divide the attention heads (:func:`check_tp`).
    """
    per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.dtype_bytes
    shards = min(check_tp(model, tp), model.num_kv_heads)
    return per_token // shards if per_token % shards == 0 else per_token / shards


def activation_bytes(model: ModelSpec, *, num_batched_tokens: int, max_num_seqs: int) -> float:
    """Estimated activation peak of one forward pass [B] (see the module docstring).

    Parameters
    ----------
    model : ModelSpec
    num_batched_tokens : int
        Tokens in the profiling batch, vLLM's ``max_num_batched_tokens`` [tokens].
    max_num_seqs : int
        Sequences whose last position produces logits [count].
    """
    per_token = (2 * model.intermediate_size + 4 * model.hidden_size) * model.dtype_bytes
    return float(num_batched_tokens * per_token + max_num_seqs * model.vocab_size * LOGITS_BYTES)


def blocks_for_tokens(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens of one sequence: ``ceil(n / block_size)``."""
    return -(-num_tokens // block_size)


@dataclass(frozen=True)
class KVCapacity:
    """How GPU memory splits at start-up, and the KV pool that is left.

    Attributes
    ----------
    usable_bytes : float
        ``memory_bytes × gpu_memory_utilization`` [B].
    weight_bytes : float
        Model weights [B].
    activation_bytes : float
        Estimated activation peak for the budget [B].
    kv_bytes : float
        Left for the KV cache [B].
    kv_bytes_per_token : int or float
        [B/token].
    num_tokens : int
        Tokens the pool holds, rounded down to whole blocks [tokens].
    num_blocks : int
        Usable KV blocks (vLLM's ``num_gpu_blocks`` − 1 null block) [count].
    block_size : int
        Tokens per block [tokens].
    tp : int
        GPUs per replica [count]; every byte above is per GPU.
    """

    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: int | float
    num_tokens: int
    num_blocks: int
    block_size: int
    tp: int = 1

    @property
    def kv_fraction(self) -> float:
        """Share of the usable memory that holds KV cache."""
        return self.kv_bytes / self.usable_bytes


def kv_capacity(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig, *, tp: int = 1) -> KVCapacity:
    """KV pool left on each GPU after weights and activations.

    Parameters
    ----------
    hardware : HardwareSpec
    model : ModelSpec
    engine : EngineConfig
        ``gpu_memory_utilization``, ``max_num_batched_tokens``, ``max_num_seqs`` and
        ``block_size`` are used.
    tp : int
        GPUs per replica [count]: each holds ``1 / tp`` of the weights and its share of every
        token's KV (see the module docstring).

    Raises
    ------
    DoesNotFitError
        When weights plus activations leave no room for even one block; the message says by
        how much they overflow and suggests tensor parallelism or a bigger GPU.
    ParameterError
        A ``tp`` vLLM refuses (:func:`check_tp`).
    """
    tp = check_tp(model, tp)
    usable = hardware.memory_bytes * engine.gpu_memory_utilization
    weights = weight_bytes_per_gpu(model, tp=tp)
    activations = activation_bytes(
        model, num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs
    )
    per_token = kv_bytes_per_token(model, tp=tp)
    kv = usable - weights - activations
    block_bytes = per_token * engine.block_size
    num_gpu_blocks = math.floor(kv / block_bytes) if kv > 0 else 0
    if num_gpu_blocks < 2:  # one block is vLLM's reserved null block
        short = weights + activations + 2 * block_bytes - usable
        min_tp = math.ceil((weights * tp + activations) / max(usable - 2 * block_bytes, 1.0))
        where = f"one {hardware.name}" if tp == 1 else f"{tp} × {hardware.name} (tp={tp})"
        weights_text = f"weights {weights / 1e9:.1f} GB" + ("" if tp == 1 else " per GPU")
        raise DoesNotFitError(
            f"{model.name} does not fit on {where}: {weights_text} + "
            f"activations {activations / 1e9:.2f} GB exceed the {usable / 1e9:.1f} GB usable "
            f"({hardware.memory_bytes / 1e9:.0f} GB × gpu_memory_utilization "
            f"{engine.gpu_memory_utilization}) by {short / 1e9:.1f} GB, leaving no KV cache. "
            f"Shard it with tensor parallelism (at least {max(min_tp, tp + 1, 2)} GPUs), pick a GPU "
            "with more memory, or a smaller model."
        )
    num_blocks = num_gpu_blocks - 1
    return KVCapacity(
        usable_bytes=usable,
        weight_bytes=weights,
        activation_bytes=activations,
        kv_bytes=kv,
        kv_bytes_per_token=per_token,
        num_tokens=num_blocks * engine.block_size,
        num_blocks=num_blocks,
        block_size=engine.block_size,
        tp=tp,
    )


def num_kv_blocks(engine: EngineConfig, hardware: HardwareSpec | None = None, model: ModelSpec | None = None) -> int:
    """Usable KV blocks: ``engine.num_kv_blocks`` if set, else derived from memory.

    Raises
    ------
    ValueError
        When the engine leaves the pool to be derived but no hardware or model is given.
    DoesNotFitError
        When weights plus activations leave no KV cache (see :func:`kv_capacity`).
    """
    if engine.num_kv_blocks is not None:
        return engine.num_kv_blocks
    if hardware is None or model is None:
        raise ValueError(
            "EngineConfig.num_kv_blocks is None (derive from memory) but no hardware and model "
            "were given: pass both, or set num_kv_blocks explicitly"
        )
    return kv_capacity(hardware, model, engine).num_blocks


def kv_by_budget(
    hardware: HardwareSpec,
    model: ModelSpec,
    budgets: Iterable[int],
    *,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
    tp: int = 1,
) -> pd.DataFrame:
    """The KV pool for each token budget: a bigger budget needs more activation memory.

    Each budget gets its own :func:`kv_capacity` (an :class:`~budgetlab.specs.EngineConfig` with
    that ``max_num_batched_tokens``). Budgets below ``max_num_seqs`` (a configuration vLLM
    refuses) are skipped.

    Parameters
    ----------
    hardware, model : HardwareSpec, ModelSpec
        The GPU and the model.
    budgets : iterable of int
        Token budgets [tokens]; duplicates count once.
    max_num_seqs : int
        Sequence cap [count]: it sets the logits term of the activations.
    gpu_memory_utilization : float
        Share of the GPU memory vLLM may use [-].
    block_size : int
        Tokens per KV block [tokens].
    tp : int
        GPUs per replica [count].

    Returns
    -------
    pandas.DataFrame
        One row per budget, increasing: ``max_num_batched_tokens``, ``activation_bytes`` and
        ``kv_bytes`` [bytes], ``kv_tokens``, ``kv_blocks``, ``kv_tokens_lost`` (fewer KV tokens
        than at the smallest budget) [tokens] and ``kv_tokens_lost_fraction`` (that, relative to
        the smallest budget's) [-].

    Raises
    ------
    ValueError
        When every budget is below ``max_num_seqs``.
    """
    rows = []
    for budget in sorted({int(b) for b in budgets}):
        if budget < max_num_seqs:
            continue
        engine = EngineConfig(
            max_num_batched_tokens=budget,
            max_num_seqs=max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization,
            block_size=block_size,
        )
        cap = kv_capacity(hardware, model, engine, tp=tp)
        rows.append(
            {
                "max_num_batched_tokens": budget,
                "activation_bytes": cap.activation_bytes,
                "kv_bytes": cap.kv_bytes,
                "kv_tokens": cap.num_tokens,
                "kv_blocks": cap.num_blocks,
            }
        )
    if not rows:
        raise ValueError(
            f"every budget is below max_num_seqs ({max_num_seqs}); vLLM refuses those: "
            "use budgets of at least max_num_seqs tokens"
        )
    frame = pd.DataFrame(rows)
    smallest = int(frame.kv_tokens.to_numpy()[0])
    frame["kv_tokens_lost"] = smallest - frame.kv_tokens
    frame["kv_tokens_lost_fraction"] = frame.kv_tokens_lost / smallest
    return frame
