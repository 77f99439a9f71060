"""Mixture-of-experts terms of a step, as vLLM 0.33's fused-MoE Triton kernel runs them.

A mixture-of-experts (MoE) layer sends each of a step's ``n`` tokens to ``k`` of its ``E``
experts. On NVIDIA GPUs vLLM 0.33 runs an unquantized MoE layer (Mixtral, Qwen3-MoE) with one
grouped GEMM per weight matrix, the Triton ``fused_moe_kernel``
(``vllm/model_executor/layers/fused_moe/fused_moe.py``: the unquantized-backend oracle moves
FlashInfer's kernels behind Triton on Hopper, and they do not run on Ampere). This module
prices what that kernel touches, per GPU, as pure functions of the model, the parallelism and
the token count. The cost model (:class:`~budgetlab.cost.CalibratedCost`) turns bytes into
seconds with its bandwidth and FLOPs into seconds with its FLOP rate.

How the kernel works, and what follows
--------------------------------------
1. **Routing.** Under uniform, independent routing each token picks each expert with
   probability ``k/E``, so an expert's routed tokens are ``X ~ Binomial(n, k/E)`` (mean
   ``n·k/E``) and the expected number of distinct experts touched is
   ``D(n) = E·(1 − (1 − k/E)^n)`` (:func:`expected_experts`): ``D(1) = k``, ``D → E``.
2. **Tile config.** ``try_get_optimal_moe_config`` looks up a tuned file named by the local
   expert count, the expert's per-GPU width ``N`` (``w2``'s last dimension: ``intermediate /
   tp``, or the full width under expert parallelism) and the device, and takes the entry whose
   token-count key is nearest to ``n`` (ties to the smaller key); without a file it uses
   ``get_default_config``: ``BLOCK_SIZE_M`` 16 up to 32 tokens, 32 up to 96, 64 up to 512, 128
   above; ``GROUP_SIZE_M`` 16 when more than 128 tokens per expert, else 1
   (:func:`fused_moe_config`, :data:`TUNED_CONFIGS`).
3. **Padding.** ``moe_align_block_size`` sorts the ``n·k`` (token, expert) pairs by expert and
   pads every expert's pairs up to a whole number of ``BLOCK_SIZE_M`` rows; an expert with no
   pair gets no block. Every block runs full ``BLOCK_SIZE_M``-row tiles, so the math is that of
   ``Σ_e ceil(X_e / BLOCK_SIZE_M) × BLOCK_SIZE_M`` rows (:func:`expected_m_blocks_per_gpu`,
   :func:`expert_flops_per_gpu`). With at most ``E/4`` pairs and no expert map the kernel
   skips the alignment and gives every pair its own block (``naive_block_assignment``).
4. **Weight reads.** Each program reads a ``BLOCK_SIZE_N`` column panel of its expert's
   weights over the full ``K``; the blocks of one expert that share a panel re-read it. Here
   they are assumed to hit in L2: the launch order (``GROUP_SIZE_M`` M-blocks per N column) runs
   an expert's M-blocks on the same panel at the same time, and the tuned configs pick
   ``GROUP_SIZE_M`` so that it does. Each touched expert's weights then cross HBM once per layer
   (:func:`expert_bytes_read_per_gpu`); ``l2_reuse=False`` gives the other bound, one read per
   M-block. The published kernel times below fit the first and not the second.
5. **Tensor vs expert parallelism.** Without ``--enable-expert-parallel`` every GPU holds all
   ``E`` experts at ``1/tp`` of their width (``N = intermediate / tp``) and sees every token. With
   it (``ep = tp × dp``; here ``dp = 1``, so ``ep = tp``) vLLM sets the MoE layer's tensor
   parallelism to 1 and each GPU holds ``E/ep`` whole experts, still seeing every token (the
   attention part stays tensor-parallel) and skipping pairs routed elsewhere. Per GPU, the
   expected touched experts are ``D(n)/ep`` at full width (the same bytes, on average, as
   tensor parallelism) and the expected pairs ``n·k/ep``. The step waits for the slowest GPU:
   :func:`expected_experts_per_gpu` with ``slowest=True`` gives the expected largest count of
   touched local experts over the ``ep`` GPUs, which for a decode batch is well above the mean
   (one token, ``k = 2`` of ``E = 8``, ``ep = 8``: one whole expert on the slowest GPU, where
   tensor parallelism reads an eighth of each of the two).

Check against published kernel times
------------------------------------
vLLM PR #24700 (H100, Mixtral 8x7B bf16 at TP2: ``E = 8``, ``N = 7168``, ``K = 4096``, the
tuned config file, ``benchmarks/kernels/benchmark_moe.py`` with uniform random routing)
measured one MoE layer at 144, 229, 351, 435, 471 µs for 1, 2, 4, 8, 16 tokens, 483-494 µs
from 24 to 128, and 537, 662, 834, 1,123 µs at 256, 512, 1,024, 1,536 tokens. The weights of
all 8 experts at TP2 are 1.41 GB per layer, 467 µs at 90 % of 3.35 TB/s; the padded math
(this module) at 70 % of 989 TFLOP/s, joined with the same overlap rule as
:class:`~budgetlab.cost.CalibratedCost` (knee loss 0.7), gives 464-493 µs from 16 to 128
tokens and 522, 623, 883, 1,076 µs at 256, 512, 1,024, 1,536 tokens: within 6 % of every
point from 16 tokens up (below 16 tokens the kernel adds a fixed ~25 µs). Without the padding
the same rule gives 493, 569, 815 and 977 µs, 8 %, 14 %, 2 % and 13 % low. One read per
M-block would need 1,157, 1,161 and 1,630 µs of weight reads alone at 512, 1,024 and 1,536
tokens, above the measured times, so the L2 assumption stands. On this config the padding adds
47, 24, 24 and 16 % to the expert math at 256-1,536 tokens.

The functions accept ``num_tokens`` as an int or an array of whole numbers (vectorized, the
shape kept) and return floats or float arrays. Model, ``tp`` and ``ep`` are checked as vLLM
checks them.

Sources: vLLM 0.33.0 ``fused_moe/fused_moe.py`` (``fused_moe_kernel``,
``invoke_fused_moe_triton_kernel``, ``try_get_optimal_moe_config``, ``get_default_config``,
``_prepare_expert_assignment``), ``fused_moe/moe_align_block_size.py``, ``fused_moe/config.py``
(``FusedMoEParallelConfig.make``), ``fused_moe/oracle/unquantized.py`` and the tuned files
``fused_moe/configs/E=…,N=…,device_name=….json``; vLLM PR #24700 (kernel times above).
"""

from __future__ import annotations

import math
from typing import Any, Final, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from budgetlab._checks import MAX_TOKENS, int_at_least, number_in, whole_array
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.memory import check_tp
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = [
    "VLLM_DEVICE_NAMES",
    "TUNED_CONFIGS",
    "MoeTileConfig",
    "expected_experts",
    "expected_experts_per_gpu",
    "fused_moe_config",
    "moe_block_size_m",
    "expected_m_blocks_per_gpu",
    "padded_rows_per_gpu",
    "expert_params_per_layer",
    "expert_flops_per_gpu",
    "expert_bytes_read_per_gpu",
]

MATRICES_PER_EXPERT: Final = 3
"""Weight matrices of one SwiGLU expert: gate and up (``w1``, fused) and down (``w2``) [count]."""

VLLM_DEVICE_NAMES: Final[dict[str, str]] = {
    "h100-sxm": "NVIDIA_H100_80GB_HBM3",
    "a100-80gb-sxm": "NVIDIA_A100-SXM4-80GB",
    "h200-sxm": "NVIDIA_H200",
}
"""Catalog GPU → the device name in vLLM's tuned-config file names (``get_config_file_name``)."""

# vLLM 0.33.0 fused_moe/configs/E={E},N={N},device_name={device}.json (bf16/fp16: no dtype
# suffix), every entry as "tokens:BLOCK_SIZE_M:GROUP_SIZE_M". All E=8 files of the three
# devices (Mixtral 8x7B: N = 14336/tp; 8x22B: N = 16384/tp) and the E=128 ones of the catalog's
# Qwen3 MoE models (N = 768/tp, 1536/tp).
_TUNED_TEXT: Final[dict[tuple[str, int, int], str]] = {
    ("NVIDIA_H100_80GB_HBM3", 8, 1792): "1:16:32 2:16:32 4:16:64 8:16:1 16:16:64 24:32:64 32:32:64 48:32:1 64:32:16 "
    "96:32:1 128:64:1 256:128:1 512:64:32 1024:64:64 1536:128:32 2048:128:64 3072:128:64 4096:128:32",
    ("NVIDIA_H100_80GB_HBM3", 8, 2048): "1:16:32 2:16:64 4:16:16 8:16:16 16:16:64 24:32:1 32:16:1 48:32:1 64:32:1 "
    "96:32:1 128:64:1 256:64:32 512:64:64 1024:128:32 1536:128:64 2048:128:16 3072:128:32 4096:128:1",
    ("NVIDIA_H100_80GB_HBM3", 8, 3584): "1:16:64 2:16:32 4:16:16 8:16:1 16:16:1 24:16:1 32:16:1 48:32:1 64:32:1 "
    "96:32:32 128:64:1 256:128:1 512:64:32 1024:64:64 1536:128:64 2048:128:64 3072:128:64 4096:128:1",
    ("NVIDIA_H100_80GB_HBM3", 8, 4096): "1:16:16 2:16:64 4:16:16 8:16:16 16:16:32 24:16:64 32:16:1 48:32:1 64:32:1 "
    "96:32:32 128:64:1 256:64:64 512:64:32 1024:128:64 1536:128:64 2048:128:16 3072:128:64 4096:128:32",
    ("NVIDIA_H100_80GB_HBM3", 8, 7168): "1:16:64 2:16:32 4:16:16 8:16:32 16:16:1 24:16:1 32:16:1 48:32:1 64:32:1 "
    "96:32:64 128:64:1 256:64:64 512:64:32 1024:128:16 1536:128:64 2048:128:32 3072:128:64 4096:128:16",
    ("NVIDIA_A100-SXM4-80GB", 8, 1792): "1:16:16 2:16:16 4:16:1 8:16:32 16:16:32 24:32:32 32:16:32 48:16:32 64:32:16 "
    "96:32:64 128:16:64 256:64:32 512:64:64 1024:64:32 1536:64:64 2048:64:32 3072:128:16 4096:128:16",
    ("NVIDIA_A100-SXM4-80GB", 8, 2048): "1:16:16 2:16:16 4:16:16 8:16:1 16:16:32 24:16:1 32:16:1 48:16:16 64:32:1 "
    "96:32:32 128:32:32 256:64:32 512:64:32 1024:64:64 1536:64:16 2048:128:16 3072:128:16 4096:128:16",
    ("NVIDIA_A100-SXM4-80GB", 8, 3584): "1:16:32 2:16:1 4:16:32 8:16:1 16:16:64 24:16:1 32:16:1 48:16:64 64:32:1 "
    "96:32:32 128:32:16 256:64:32 512:64:32 1024:64:64 1536:64:16 2048:128:16 3072:128:16 4096:128:32",
    ("NVIDIA_A100-SXM4-80GB", 8, 4096): "1:16:1 2:16:64 4:16:16 8:16:32 16:16:1 24:16:1 32:16:1 48:32:1 64:32:1 "
    "96:32:16 128:32:16 256:64:16 512:64:32 1024:64:64 1536:64:16 2048:128:16 3072:128:16 4096:128:16",
    ("NVIDIA_A100-SXM4-80GB", 8, 7168): "1:16:1 2:16:16 4:16:64 8:16:16 16:16:1 24:16:1 32:16:1 48:32:1 64:32:1 "
    "96:32:16 128:32:32 256:64:64 512:64:32 1024:64:64 1536:64:32 2048:128:16 3072:128:16 4096:128:16",
    ("NVIDIA_H200", 8, 1792): "1:16:1 2:16:1 4:16:16 8:16:64 16:16:1 24:16:1 32:16:1 48:32:1 64:64:64 96:64:1 "
    "128:64:1 256:64:16 512:128:16 1024:128:16 1536:128:16 2048:128:16 3072:128:64 4096:128:1",
    ("NVIDIA_H200", 8, 2048): "1:16:64 2:16:1 4:16:16 8:16:32 16:16:32 24:16:32 32:16:1 48:64:32 64:64:32 96:64:32 "
    "128:64:64 256:128:32 512:128:32 1024:128:32 1536:128:32 2048:128:64 3072:128:64 4096:128:32",
    ("NVIDIA_H200", 8, 3584): "1:16:16 2:16:1 4:16:16 8:16:16 16:16:32 24:16:1 32:16:1 48:32:1 64:64:64 96:64:1 "
    "128:64:1 256:128:32 512:128:16 1024:128:32 1536:128:16 2048:128:16 3072:128:32 4096:128:32",
    ("NVIDIA_H200", 8, 4096): "1:16:16 2:32:32 4:16:16 8:32:64 16:16:16 24:16:64 32:16:1 48:32:64 64:32:1 96:64:1 "
    "128:64:1 256:128:1 512:128:64 1024:128:32 1536:128:64 2048:128:64 3072:128:64 4096:128:32",
    ("NVIDIA_H200", 8, 7168): "1:16:64 2:16:16 4:16:32 8:32:1 16:16:16 24:16:16 32:16:1 48:32:1 64:32:1 96:64:1 "
    "128:64:1 256:128:1 512:128:32 1024:128:64 1536:128:16 2048:128:16 3072:128:64 4096:128:16",
    ("NVIDIA_H200", 8, 14336): "1:16:16 2:32:1 4:16:1 8:16:1 16:16:16 24:16:16 32:16:16 48:32:16 64:32:64 96:32:64 "
    "128:64:1 256:128:1 512:128:16 1024:128:16 1536:128:16 2048:128:32 3072:128:16 4096:128:16",
    ("NVIDIA_H100_80GB_HBM3", 128, 192): "1:16:1 2:16:64 4:16:32 8:16:16 16:16:1 24:16:1 32:16:16 48:16:64 64:16:32 "
    "96:16:16 128:16:32 256:32:32 512:64:16 1024:64:32 1536:128:16 2048:128:16 3072:128:16 4096:128:16",
    ("NVIDIA_H100_80GB_HBM3", 128, 384): "1:16:64 2:16:1 4:16:64 8:16:1 16:16:1 24:16:16 32:16:32 48:16:32 64:16:16 "
    "96:16:16 128:16:16 256:32:32 512:64:64 1024:64:1 1536:128:1 2048:128:1 3072:128:16 4096:128:16",
    ("NVIDIA_A100-SXM4-80GB", 128, 192): "1:16:32 2:16:64 4:16:16 8:16:32 16:16:32 24:16:16 32:16:1 48:16:64 64:16:32 "
    "96:16:1 128:16:16 256:32:16 512:64:16 1024:64:32 1536:128:16 2048:64:16 3072:64:1 4096:128:1",
    ("NVIDIA_H200", 128, 192): "1:16:1 2:16:32 4:16:1 8:16:64 16:16:32 24:16:1 32:16:32 48:32:16 64:16:16 96:16:16 "
    "128:16:32 256:32:16 512:64:16 1024:128:16 1536:128:16 2048:64:32 3072:128:16 4096:128:1",
    ("NVIDIA_H200", 128, 384): "1:16:1 2:16:1 4:16:32 8:16:16 16:16:64 24:16:1 32:16:1 48:16:16 64:16:16 96:16:16 "
    "128:16:16 256:32:32 512:64:1 1024:128:16 1536:128:16 2048:128:1 3072:128:16 4096:128:1",
    ("NVIDIA_H200", 128, 768): "1:16:1 2:16:1 4:16:16 8:16:1 16:16:1 24:16:1 32:16:16 48:16:16 64:16:1 96:16:1 "
    "128:16:1 256:32:16 512:64:1 1024:128:16 1536:128:1 2048:128:1 3072:128:1 4096:128:16",
}


class MoeTileConfig(NamedTuple):
    """The two fields of a fused-MoE config this module uses, for one token count."""

    block_size_m: int
    """Rows of one M-block: every expert's pairs are padded to a multiple of it [tokens]."""
    group_size_m: int
    """M-blocks launched together per N column (the kernel's L2 grouping) [count]."""


def _parse_tuned(text: str) -> tuple[tuple[int, MoeTileConfig], ...]:
    entries = []
    for item in text.split():
        tokens, block, group = (int(part) for part in item.split(":"))
        entries.append((tokens, MoeTileConfig(block, group)))
    return tuple(entries)


TUNED_CONFIGS: Final[dict[tuple[str, int, int], tuple[tuple[int, MoeTileConfig], ...]]] = {
    key: _parse_tuned(text) for key, text in _TUNED_TEXT.items()
}
"""vLLM 0.33.0's tuned fused-MoE configs: ``(device, E, N) → ((tokens, config), ...)`` ascending."""


# --------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------


def _tokens(num_tokens: ArrayLike) -> np.ndarray:
    return whole_array(
        "num_tokens",
        num_tokens,
        0,
        what="a whole number of tokens >= 0 (or an array of them)",
        maximum=MAX_TOKENS,
    )


def _routing(num_experts: object, experts_per_token: object) -> tuple[int, int]:
    experts = int_at_least("num_experts", num_experts, 2, what="an int >= 2 (routed experts per layer)")
    chosen = int_at_least("experts_per_token", experts_per_token, 1, what="an int >= 1 (experts each token uses)")
    if chosen >= experts:
        raise ParameterError(
            f"experts_per_token={chosen} must be below num_experts={experts}: with every expert chosen the "
            "layer is dense, not a mixture of experts"
        )
    return experts, chosen


def _ep(ep: object, *, num_experts: int, tp: int | None = None) -> int:
    degree = int_at_least("ep", ep, 1, what="an int >= 1 (expert-parallel GPUs; 1 = tensor-parallel experts)")
    if num_experts % degree:
        raise ConfigError(
            f"ep={degree} does not divide the {num_experts} experts; vLLM requires it to (each GPU holds "
            f"num_experts / ep whole experts). Pick a divisor of {num_experts}."
        )
    if tp is not None and degree not in (1, tp):
        raise ConfigError(
            f"ep={degree} with tp={tp}: vLLM's --enable-expert-parallel makes ep = tp × dp, and this model "
            f"prices one data-parallel rank (dp = 1), so ep must be 1 (experts sharded by tp) or {tp}"
        )
    return degree


def _moe_model(model: object) -> ModelSpec:
    if not isinstance(model, ModelSpec):
        raise ParameterError(f"model must be a ModelSpec, got {type(model).__name__}")
    if model.num_experts < 2 or model.num_experts_per_token >= model.num_experts:
        raise ParameterError(
            f"{model.name} is not a mixture of experts ({model.num_experts} experts, "
            f"{model.num_experts_per_token} per token); these terms price routed experts only"
        )
    return model


def _deployment(model: object, tp: object, ep: object) -> tuple[ModelSpec, int, int, int]:
    """(model, tp, ep, the experts' per-GPU width N) as vLLM accepts them."""
    spec = _moe_model(model)
    degree = check_tp(spec, tp)
    experts_ep = _ep(ep, num_experts=spec.num_experts, tp=degree)
    moe_tp = degree if experts_ep == 1 else 1
    if spec.intermediate_size % moe_tp:
        raise ConfigError(
            f"tp={degree} does not divide {spec.name}'s expert width {spec.intermediate_size}; vLLM asserts "
            "intermediate_size % tp == 0 for tensor-parallel experts (try ep=tp)"
        )
    return spec, degree, experts_ep, spec.intermediate_size // moe_tp


def _hardware(hardware: object) -> HardwareSpec | None:
    if hardware is not None and not isinstance(hardware, HardwareSpec):
        raise ParameterError(f"hardware must be a HardwareSpec or None, got {type(hardware).__name__}")
    return hardware


def _out(values: np.ndarray, like: np.ndarray) -> Any:
    return float(np.asarray(values).reshape(())) if like.ndim == 0 else np.asarray(values).reshape(like.shape)


# --------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------


def expected_experts(num_tokens: ArrayLike, *, num_experts: int, experts_per_token: int) -> np.ndarray | float:
    """Expected distinct experts ``n`` tokens touch in one layer, over all GPUs [count].

    ``D(n) = E × (1 − (1 − k/E)^n)`` under uniform, independent routing: ``D(0) = 0``,
    ``D(1) = k``, ``D(n) → E``.

    Parameters
    ----------
    num_tokens : int or array_like of int
        Tokens in the step [tokens], >= 0.
    num_experts : int
        Routed experts per layer ``E`` [count], >= 2.
    experts_per_token : int
        Experts each token uses ``k`` [count], 1 <= k < E.

    Returns
    -------
    float or numpy.ndarray
        ``D(n)`` [count], the shape of ``num_tokens``.
    """
    tokens = _tokens(num_tokens)
    experts, chosen = _routing(num_experts, experts_per_token)
    touched = experts * (1.0 - np.power(1.0 - chosen / experts, tokens.astype(float)))
    return _out(touched, tokens)


def expected_experts_per_gpu(
    num_tokens: ArrayLike, *, num_experts: int, experts_per_token: int, ep: int = 1, slowest: bool = False
) -> np.ndarray | float:
    """Expected distinct experts whose weights one GPU reads in one layer [count].

    With ``ep = 1`` (tensor-parallel experts) every GPU reads a ``1/tp`` slice of every touched
    expert: ``D(n)`` (:func:`expected_experts`). With ``ep > 1`` each GPU holds ``E/ep`` whole
    experts. ``slowest=False`` gives the mean over GPUs, ``D(n)/ep``. ``slowest=True`` gives
    the expected largest count over the ``ep`` GPUs, the one a step waits for: each expert is
    taken as touched with its exact probability ``π = 1 − (1 − k/E)^n`` independently of the
    others, so a GPU's count is ``Binomial(E/ep, π)`` and ``E[max] = Σ_{c=1}^{E/ep} (1 −
    F(c − 1)^ep)`` for ``ep`` independent GPUs. This ignores that a token's ``k`` experts are
    distinct (a weak negative correlation); for one token it gives 0.90 where the exact
    maximum is 1 (``k = 2``, ``E = ep = 8``) and 1.46 for 1.43 (``ep = 2``).

    Parameters
    ----------
    num_tokens : int or array_like of int
        Tokens every GPU sees in the step [tokens], >= 0.
    num_experts, experts_per_token : int
        ``E`` and ``k`` as in :func:`expected_experts`.
    ep : int
        Expert-parallel GPUs [count], dividing ``E``; 1 for tensor-parallel experts.
    slowest : bool
        The slowest GPU's expected count instead of the mean (no effect with ``ep = 1``).

    Returns
    -------
    float or numpy.ndarray
        Experts [count], the shape of ``num_tokens``.
    """
    tokens = _tokens(num_tokens)
    experts, chosen = _routing(num_experts, experts_per_token)
    degree = _ep(ep, num_experts=experts)
    return _out(_touched_per_gpu(tokens, experts, chosen, degree, _flag("slowest", slowest)), tokens)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _touched_per_gpu(tokens: np.ndarray, experts: int, chosen: int, degree: int, slowest: bool) -> np.ndarray:
    """:func:`expected_experts_per_gpu` on checked arguments, flattened."""
    touched_p = 1.0 - np.power(1.0 - chosen / experts, tokens.astype(float).ravel())
    local = experts // degree
    if degree == 1 or not slowest:
        return local * touched_p
    counts = np.arange(local + 1)
    weights = np.array([math.comb(local, c) for c in counts], dtype=float)
    pmf = weights * touched_p[:, None] ** counts * (1.0 - touched_p[:, None]) ** (local - counts)
    cdf = np.cumsum(pmf, axis=1)[:, :-1]  # F(c - 1) for c = 1..local
    return np.sum(1.0 - np.clip(cdf, 0.0, 1.0) ** degree, axis=1)


# --------------------------------------------------------------------------------------------
# Tile configs and padding
# --------------------------------------------------------------------------------------------


def _default_config(num_tokens: int, local_experts: int) -> MoeTileConfig:
    """``get_default_config`` for bf16/fp16 weights without block quantization."""
    if num_tokens <= 32:
        block = 16
    elif num_tokens <= 96:
        block = 32
    elif num_tokens <= 512:
        block = 64
    else:
        block = 128
    group = 16 if num_tokens // local_experts > 128 else 1
    return MoeTileConfig(block, group)


def _config_for(num_tokens: int, table: tuple[tuple[int, MoeTileConfig], ...] | None, local: int) -> MoeTileConfig:
    if table is None:
        return _default_config(num_tokens, local)
    return min(table, key=lambda entry: abs(entry[0] - num_tokens))[1]  # first (smaller) key on a tie


def fused_moe_config(
    num_tokens: ArrayLike, *, hardware: HardwareSpec | None, num_local_experts: int, shard_intermediate_size: int
) -> list[MoeTileConfig] | MoeTileConfig:
    """The fused-MoE tile config vLLM 0.33 runs for ``num_tokens`` tokens (unquantized weights).

    The tuned file ``E={num_local_experts},N={shard_intermediate_size},device_name=…`` when
    vLLM ships one for the GPU (:data:`TUNED_CONFIGS`, :data:`VLLM_DEVICE_NAMES`): the entry
    whose key is nearest ``num_tokens``. Otherwise ``get_default_config``'s rule.

    Parameters
    ----------
    num_tokens : int or array_like of int
        Tokens in the step (the kernel's ``M``) [tokens], >= 0.
    hardware : HardwareSpec or None
        The GPU; ``None`` or a GPU without tuned files: the default rule.
    num_local_experts : int
        Experts on one GPU (``E``, or ``E/ep``) [count].
    shard_intermediate_size : int
        One expert's per-GPU width ``N`` (``intermediate / tp``, or the full width under expert
        parallelism) [count].

    Returns
    -------
    MoeTileConfig or list of MoeTileConfig
        One config per token count (flattened, row-major, for an array).
    """
    tokens = _tokens(num_tokens)
    local = int_at_least("num_local_experts", num_local_experts, 1, what="an int >= 1 (experts on one GPU)")
    width = int_at_least("shard_intermediate_size", shard_intermediate_size, 1, what="an int >= 1 (expert width)")
    configs = _configs(tokens, _hardware(hardware), local, width)
    return configs[0] if tokens.ndim == 0 else configs


def _configs(tokens: np.ndarray, gpu: HardwareSpec | None, local: int, width: int) -> list[MoeTileConfig]:
    """:func:`fused_moe_config` on checked arguments, flattened."""
    device = VLLM_DEVICE_NAMES.get(gpu.slug) if gpu is not None else None
    table = TUNED_CONFIGS.get((device, local, width)) if device is not None else None
    return [_config_for(int(n), table, local) for n in tokens.ravel().tolist()]


def _block_sizes(tokens: np.ndarray, gpu: HardwareSpec | None, local: int, width: int) -> np.ndarray:
    return np.array([c.block_size_m for c in _configs(tokens, gpu, local, width)], dtype=np.int64)


def moe_block_size_m(
    num_tokens: ArrayLike, *, hardware: HardwareSpec | None, num_local_experts: int, shard_intermediate_size: int
) -> np.ndarray | int:
    """``BLOCK_SIZE_M`` of :func:`fused_moe_config` [tokens]: an int, or an int array shaped like
    ``num_tokens``."""
    tokens = _tokens(num_tokens)
    local = int_at_least("num_local_experts", num_local_experts, 1, what="an int >= 1 (experts on one GPU)")
    width = int_at_least("shard_intermediate_size", shard_intermediate_size, 1, what="an int >= 1 (expert width)")
    blocks = _block_sizes(tokens, _hardware(hardware), local, width)
    return int(blocks[0]) if tokens.ndim == 0 else blocks.reshape(tokens.shape)


def _expected_blocks_one_expert(num_tokens: int, share: float, block: int) -> float:
    """``E[ceil(X / block)]`` for ``X ~ Binomial(num_tokens, share)``, exact to ~1e-15."""
    if num_tokens == 0:
        return 0.0
    mean = num_tokens * share
    spread = math.sqrt(mean * (1.0 - share))
    low = max(0, math.floor(mean - 12.0 * spread - 10.0))
    high = min(num_tokens, math.ceil(mean + 12.0 * spread + 10.0))
    counts = np.arange(low, high + 1, dtype=float)
    log_first = (
        math.lgamma(num_tokens + 1)
        - math.lgamma(low + 1)
        - math.lgamma(num_tokens - low + 1)
        + low * math.log(share)
        + (num_tokens - low) * math.log1p(-share)
    )
    steps = np.log((num_tokens - counts[:-1]) / (counts[:-1] + 1.0)) + math.log(share) - math.log1p(-share)
    pmf = np.exp(log_first + np.concatenate(([0.0], np.cumsum(steps))))
    return float(np.sum(pmf * np.ceil(counts / block)))


def expected_m_blocks_per_gpu(
    num_tokens: ArrayLike,
    *,
    num_experts: int,
    experts_per_token: int,
    ep: int = 1,
    block_size_m: ArrayLike,
) -> np.ndarray | float:
    """Expected M-blocks the fused-MoE kernel runs on one GPU in one layer [count].

    ``(E/ep) × E[ceil(X / BLOCK_SIZE_M)]`` with ``X ~ Binomial(n, k/E)`` the pairs routed to
    one expert (``moe_align_block_size`` pads each expert's pairs to whole blocks; an expert
    with none gets none). Without expert parallelism and with ``n·k·4 <= E`` vLLM skips the
    alignment and runs one block per pair: ``n·k`` blocks. The mean over GPUs; real routers
    are skewed, which adds partly filled blocks.

    Parameters
    ----------
    num_tokens : int or array_like of int
        Tokens every GPU sees [tokens], >= 0.
    num_experts, experts_per_token : int
        ``E`` and ``k``.
    ep : int
        Expert-parallel GPUs [count] (1: tensor-parallel experts).
    block_size_m : int or array_like of int
        ``BLOCK_SIZE_M`` [tokens], one value or one per token count
        (:func:`moe_block_size_m`).

    Returns
    -------
    float or numpy.ndarray
        M-blocks [count], the shape of ``num_tokens``.
    """
    tokens = _tokens(num_tokens)
    experts, chosen = _routing(num_experts, experts_per_token)
    degree = _ep(ep, num_experts=experts)
    blocks = whole_array("block_size_m", block_size_m, 1, what="a whole number of rows >= 1 (BLOCK_SIZE_M)")
    blocks = np.broadcast_to(blocks, tokens.shape) if blocks.ndim == 0 else blocks
    if blocks.shape != tokens.shape:
        raise ParameterError(
            f"block_size_m must be one value or one per token count: shape {blocks.shape} for num_tokens "
            f"of shape {tokens.shape}"
        )
    return _out(_m_blocks(tokens, experts, chosen, degree, blocks), tokens)


def _m_blocks(tokens: np.ndarray, experts: int, chosen: int, degree: int, blocks: np.ndarray) -> np.ndarray:
    """:func:`expected_m_blocks_per_gpu` on checked arguments (``blocks`` shaped like
    ``tokens``), flattened."""
    share = chosen / experts
    memo: dict[tuple[int, int], float] = {}
    out = np.empty(tokens.size, dtype=float)
    for i, (n, block) in enumerate(zip(tokens.ravel().tolist(), blocks.ravel().tolist(), strict=True)):
        if degree == 1 and n * chosen * 4 <= experts:
            out[i] = float(n * chosen)  # naive_block_assignment: one block per (token, expert) pair
            continue
        if (n, block) not in memo:
            memo[(n, block)] = (experts // degree) * _expected_blocks_one_expert(n, share, block)
        out[i] = memo[(n, block)]
    return out


def padded_rows_per_gpu(
    model: ModelSpec, *, tp: int, ep: int = 1, num_tokens: ArrayLike, hardware: HardwareSpec | None = None
) -> np.ndarray | float:
    """Rows the expert GEMMs of one layer compute on one GPU, padding included [token rows].

    ``BLOCK_SIZE_M × M-blocks`` (:func:`fused_moe_config`, :func:`expected_m_blocks_per_gpu`),
    against ``n·k/ep`` routed pairs without padding.

    Parameters
    ----------
    model : ModelSpec
        A mixture of experts (``num_experts > experts_per_token``).
    tp : int
        Tensor-parallel GPUs [count] (vLLM's ``--tensor-parallel-size``).
    ep : int
        1 (experts sharded by ``tp``) or ``tp`` (``--enable-expert-parallel``, one DP rank).
    num_tokens : int or array_like of int
        Tokens in the step [tokens].
    hardware : HardwareSpec or None
        The GPU, for vLLM's tuned tile configs; ``None``: the default rule.
    """
    spec, _, degree, width = _deployment(model, tp, ep)
    tokens = _tokens(num_tokens)
    return _out(_padded_rows(spec, degree, width, tokens, _hardware(hardware)), tokens)


def _padded_rows(spec: ModelSpec, degree: int, width: int, tokens: np.ndarray, gpu: HardwareSpec | None) -> np.ndarray:
    """:func:`padded_rows_per_gpu` on checked arguments, flattened."""
    local = spec.num_experts // degree
    block = _block_sizes(tokens, gpu, local, width)
    blocks = _m_blocks(tokens, spec.num_experts, spec.num_experts_per_token, degree, block)
    return blocks * block


# --------------------------------------------------------------------------------------------
# FLOPs and bytes
# --------------------------------------------------------------------------------------------


def expert_params_per_layer(model: ModelSpec) -> int:
    """Parameters of one expert in one layer [count]: ``3 × hidden × intermediate`` (gate, up
    and down projections of a SwiGLU expert; the catalog's ``intermediate_size`` of a MoE model
    is the expert's)."""
    spec = _moe_model(model)
    return MATRICES_PER_EXPERT * spec.hidden_size * spec.intermediate_size


def expert_flops_per_gpu(
    model: ModelSpec,
    *,
    tp: int,
    ep: int = 1,
    num_tokens: ArrayLike,
    hardware: HardwareSpec | None = None,
    padded: bool = True,
) -> np.ndarray | float:
    """Math of the routed experts on one GPU over all layers [FLOP].

    ``layers × rows × 2 × 3 × hidden × N`` with ``N`` the expert's per-GPU width
    (``intermediate / tp``; the full width with ``ep = tp``) and ``rows`` the padded rows
    (:func:`padded_rows_per_gpu`), or with ``padded=False`` the routed pairs ``n·k/ep``: the
    ``n × 2 × (active − shared) / tp`` an unpadded roofline charges.

    Parameters
    ----------
    model : ModelSpec
        A mixture of experts.
    tp, ep : int
        As in :func:`padded_rows_per_gpu`.
    num_tokens : int or array_like of int
        Tokens in the step [tokens].
    hardware : HardwareSpec or None
        The GPU, for vLLM's tuned tile configs.
    padded : bool
        Include ``moe_align_block_size``'s padding (default) or not.

    Returns
    -------
    float or numpy.ndarray
        FLOPs [FLOP] per GPU, the shape of ``num_tokens`` (the mean over GPUs under ``ep``).
    """
    spec, _, degree, width = _deployment(model, tp, ep)
    tokens = _tokens(num_tokens)
    if _flag("padded", padded):
        rows = _padded_rows(spec, degree, width, tokens, _hardware(hardware))
    else:
        rows = tokens.astype(float).ravel() * spec.num_experts_per_token / degree
    flops_per_row = 2.0 * MATRICES_PER_EXPERT * spec.hidden_size * width
    return _out(spec.num_layers * flops_per_row * rows, tokens)


def expert_bytes_read_per_gpu(
    model: ModelSpec,
    *,
    tp: int,
    ep: int = 1,
    num_tokens: ArrayLike,
    bytes_per_param: float,
    hardware: HardwareSpec | None = None,
    l2_reuse: bool = True,
    slowest: bool = True,
) -> np.ndarray | float:
    """Expert weight bytes one GPU reads from HBM in a step, over all layers [B].

    ``layers × experts × 3 × hidden × N × bytes_per_param`` with ``N`` the per-GPU expert width
    and ``experts`` the touched experts on the GPU (:func:`expected_experts_per_gpu`; with
    ``ep > 1`` and ``slowest=True`` the slowest GPU's). With ``l2_reuse=False``, ``experts``
    becomes the M-blocks (:func:`expected_m_blocks_per_gpu`, mean over GPUs): one read of the
    expert per block, the bound without L2 reuse (see the module docstring for why the default
    holds).

    Parameters
    ----------
    model : ModelSpec
        A mixture of experts.
    tp, ep : int
        As in :func:`padded_rows_per_gpu`.
    num_tokens : int or array_like of int
        Tokens in the step [tokens].
    bytes_per_param : float
        Bytes of one expert weight [B], > 0: the dtype's bytes, or the quantized format's
        (:data:`budgetlab.memory.QUANTIZED_BYTES_PER_WEIGHT`).
    hardware : HardwareSpec or None
        The GPU, for vLLM's tuned tile configs (used by ``l2_reuse=False`` only).
    l2_reuse : bool
        Each touched expert read once (default) or once per M-block.
    slowest : bool
        Under expert parallelism, the slowest GPU (default) or the mean.

    Returns
    -------
    float or numpy.ndarray
        Bytes [B] per GPU, the shape of ``num_tokens``.
    """
    spec, _, degree, width = _deployment(model, tp, ep)
    tokens = _tokens(num_tokens)
    size = number_in(
        "bytes_per_param", bytes_per_param, what="a number of bytes > 0 and <= 8", low=0.0, high=8.0, low_open=True
    )
    gpu, reuse, slowest_gpu = _hardware(hardware), _flag("l2_reuse", l2_reuse), _flag("slowest", slowest)
    experts, chosen = spec.num_experts, spec.num_experts_per_token
    if reuse:
        reads = _touched_per_gpu(tokens, experts, chosen, degree, slowest_gpu)
    else:
        reads = _m_blocks(tokens, experts, chosen, degree, _block_sizes(tokens, gpu, experts // degree, width))
    expert_bytes = MATRICES_PER_EXPERT * spec.hidden_size * width * size
    return _out(spec.num_layers * expert_bytes * reads, tokens)
