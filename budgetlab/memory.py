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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from budgetlab.errors import DoesNotFitError
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec

__all__ = [
    "kv_bytes_per_token",
    "activation_bytes",
    "KVCapacity",
    "kv_capacity",
    "num_kv_blocks",
    "blocks_for_tokens",
]

LOGITS_BYTES = 4  # the sampler works on FP32 logits


def kv_bytes_per_token(model: ModelSpec) -> int:
    """KV-cache bytes one token occupies [B].

    ``2 (K and V) × layers × KV heads × head_dim × dtype_bytes``: 131,072 B (128 KiB) for
    Llama 3.1 8B in BF16 (2 × 32 × 8 × 128 × 2).
    """
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.dtype_bytes


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
    kv_bytes_per_token : int
        [B/token].
    num_tokens : int
        Tokens the pool holds, rounded down to whole blocks [tokens].
    num_blocks : int
        Usable KV blocks (vLLM's ``num_gpu_blocks`` − 1 null block) [count].
    block_size : int
        Tokens per block [tokens].
    """

    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: int
    num_tokens: int
    num_blocks: int
    block_size: int

    @property
    def kv_fraction(self) -> float:
        """Share of the usable memory that holds KV cache."""
        return self.kv_bytes / self.usable_bytes


def kv_capacity(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig) -> KVCapacity:
    """KV pool left on one GPU after weights and activations.

    Parameters
    ----------
    hardware : HardwareSpec
    model : ModelSpec
    engine : EngineConfig
        ``gpu_memory_utilization``, ``max_num_batched_tokens``, ``max_num_seqs`` and
        ``block_size`` are used.

    Raises
    ------
    DoesNotFitError
        When weights plus activations leave no room for even one block; the message says by
        how much they overflow and suggests tensor parallelism or a bigger GPU.
    """
    usable = hardware.memory_bytes * engine.gpu_memory_utilization
    weights = model.weight_bytes
    activations = activation_bytes(
        model, num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs
    )
    per_token = kv_bytes_per_token(model)
    kv = usable - weights - activations
    block_bytes = per_token * engine.block_size
    num_gpu_blocks = math.floor(kv / block_bytes) if kv > 0 else 0
    if num_gpu_blocks < 2:  # one block is vLLM's reserved null block
        short = weights + activations + 2 * block_bytes - usable
        min_tp = math.ceil((weights + activations) / max(usable - 2 * block_bytes, 1.0))
        raise DoesNotFitError(
            f"{model.name} does not fit on one {hardware.name}: weights {weights / 1e9:.1f} GB + "
            f"activations {activations / 1e9:.2f} GB exceed the {usable / 1e9:.1f} GB usable "
            f"({hardware.memory_bytes / 1e9:.0f} GB × gpu_memory_utilization "
            f"{engine.gpu_memory_utilization}) by {short / 1e9:.1f} GB, leaving no KV cache. "
            f"Shard it with tensor parallelism (at least {max(min_tp, 2)} GPUs), pick a GPU with "
            "more memory, or a smaller model."
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
