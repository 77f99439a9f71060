"""Per-GPU linear layers under tensor parallelism: their shapes, and the work TP does not split.

Megatron-style tensor parallelism (Shoeybi et al. 2019), as vLLM runs it, splits each
transformer layer's four GEMMs across the ``tp`` GPUs: the QKV and MLP gate/up projections by
output columns, the attention output and MLP down projections by input rows. Each GPU's GEMM
then has the shape :func:`gemm_shapes` gives, and its weights and FLOPs shrink as ``1 / tp``.
The step cost (:class:`~budgetlab.cost.CalibratedCost`) prices that part as
``weight_bytes / tp`` and ``2 × params × tokens / tp``, with ``params`` the whole model's:
:func:`layer_params` leaves out the embedding and the LM head, which prefill tokens do not run.

This module is analysis: the step cost does not call it. It states what Vidur's TP profiles
show (``tests/test_cost_tp_profiles.py``) beyond the knee rule the presets adopted.

What tensor parallelism does not split
--------------------------------------
The two RMSNorms and the residual adds of every layer work on the full hidden vector of every
token, on every GPU: they are replicated, not sharded (Korthikanti et al., *Reducing Activation
Recomputation in Large Transformer Models*, MLSys 2023, name exactly this replicated work as
what their sequence parallelism removes; plain tensor parallelism, as Vidur profiles it, keeps
it). They are memory-bound elementwise kernels, so their time per GPU is ``tokens ×
replicated bytes / achieved bandwidth`` whatever ``tp`` is (:func:`replicated_time_s`).

Vidur's operator profiles show it (microsoft/vidur, ``data/profiling/compute/{h100,a100}/<model>/
mlp.csv``, ``data/measured/vidur-*-tp.csv``): at 4,096 tokens Llama 2 70B's two norms and its
residual add take 124 + 126 + 62 µs per layer on an H100 at TP 1 and 112 + 111 + 63 µs at TP 8,
while its four GEMMs shrink from 10.2 to 1.2 ms per layer. A cost that divides all per-token time by
``tp`` therefore prices TP 8 too fast (Llama 2 7B at TP 8, 2,048 tokens: 35 % below Vidur).

The replicated bytes are counted as Vidur's kernels move them: each RMSNorm reads and writes
the hidden vector (``2 × 2 × hidden``) and the residual add reads two and writes one
(``3 × hidden``), ``7 × hidden × b`` bytes per token per layer. A least-squares fit of the
three operators' medians against those bytes (rows of 512 to 4,096 tokens, every TP) gives
0.43-0.48 of peak bandwidth on each of the three H100 and five A100 profiles:
:data:`REPLICATED_BANDWIDTH_EFFICIENCY`. (vLLM fuses the add into the next norm; the bytes
moved are about the same, ``8 × hidden × b``, and its kernels may reach a higher fraction.)

What the same profiles show and this module does not model
----------------------------------------------------------
* A floor per GEMM: at one token each GEMM takes about 4.5 µs (H100) or 5 µs (A100) more than
  its weight read at 90 % (H100) or 81 % (A100) of peak bandwidth (least squares over every
  GEMM of every profile and TP), so small shards (TP 8 of a 7B model) read their weights at a
  lower apparent rate. Vidur times each kernel alone in eager mode, so launch latency is part
  of it; a CUDA-graph step largely hides it.
* The knee: between about 128 and 512 tokens the four GEMMs overlap weight streaming and math
  better the larger they are. Fitted per profile and TP, the knee loss of
  :class:`~budgetlab.cost.CalibratedCost` runs from 0.10 (Llama 2 70B at TP1 on H100) to 1.0
  (Llama 2 7B at TP 4-8); :func:`~budgetlab.cost.step_terms.knee_loss` is the rule the presets use.
* Tile and wave quantization: 8 tokens past 128, 256 or 512 the four GEMMs take up to 1.8
  times as long as at the multiple (Llama 2 70B on H100, 512 to 520 tokens, at every TP).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from budgetlab._checks import finite_array, number_in
from budgetlab.memory import activation_dtype_bytes, check_tp, embedding_params
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = [
    "REPLICATED_BANDWIDTH_EFFICIENCY",
    "REPLICATED_ACCESSES_PER_HIDDEN",
    "gemm_shapes",
    "layer_params",
    "replicated_bytes_per_token",
    "replicated_time_s",
]

#: Achieved fraction of peak memory bandwidth of the replicated norm and residual-add kernels
#: in Vidur's H100 and A100 operator profiles (module docstring): 0.43-0.48 per profile.
REPLICATED_BANDWIDTH_EFFICIENCY = 0.45

#: Hidden-vector reads and writes per token per layer by the replicated kernels [count]: two
#: RMSNorms (read + write each) and one residual add (two reads, one write).
REPLICATED_ACCESSES_PER_HIDDEN = 7


def gemm_shapes(model: ModelSpec, *, tp: int) -> dict[str, tuple[int, int]]:
    """Each GPU's ``(K, N)`` for the four GEMMs of one layer [elements].

    A GEMM of ``n`` tokens multiplies an ``n × K`` activation by a ``K × N`` weight: ``2 K N``
    bytes of 16-bit weight and ``2 n K N`` FLOPs. Keys are Vidur's operator names:
    ``attn_pre_proj`` (QKV; KV heads replicated when ``tp`` exceeds them, as vLLM does),
    ``attn_post_proj``, ``mlp_up_proj`` (gate and up fused) and ``mlp_down_proj``.

    Parameters
    ----------
    model : ModelSpec
        A dense model (the MLP shapes assume a gated MLP of ``intermediate_size``).
    tp : int
        Tensor-parallel GPUs [count]; must divide the attention heads.

    Raises
    ------
    ParameterError
        ``tp`` is not an int >= 1 or does not divide the model's attention heads.
    """
    tp = check_tp(model, tp)
    kv_heads = max(model.num_kv_heads // tp, 1)
    q_width = model.num_attention_heads // tp * model.head_dim
    hidden, mlp = model.hidden_size, model.intermediate_size
    return {
        "attn_pre_proj": (hidden, q_width + 2 * kv_heads * model.head_dim),
        "attn_post_proj": (q_width, hidden),
        "mlp_up_proj": (hidden, 2 * mlp // tp),
        "mlp_down_proj": (mlp // tp, hidden),
    }


def layer_params(model: ModelSpec) -> float:
    """Parameters of the transformer layers, without the token embedding and the LM head [count].

    ``num_params − embedding_params`` (:func:`~budgetlab.memory.embedding_params`; norm weights
    are a rounding error). The embedding is a gather: it does no math and reads only the rows it
    looks up. The LM head runs on the tokens that are sampled (one per decode, one per prompt's
    last chunk), not on every prefill token. So a prefill token's linear-layer math is ``2 ×
    layer_params`` FLOPs, not ``2 × num_params``: 13 % less for Llama 3.1 8B (1.05 of its 8.03 B
    parameters are embedding and LM head), 4 % less for Llama 2 7B. Vidur's ``mlp.csv`` times
    exactly these layers: its Llama 3 8B steps are 1.05 times its Llama 2 7B steps at 4,096 tokens
    on an A100 (273.3 and 259.9 ms), as ``layer_params`` (6.98 and 6.48 B, 1.08) has it and
    ``num_params`` (8.03 and 6.74 B, 1.19) does not.

    Examples
    --------
    >>> from budgetlab.catalog import model
    >>> round(layer_params(model("llama-3.1-8b")) / 1e9, 2)
    6.98
    """
    return float(model.num_params - embedding_params(model))


def replicated_bytes_per_token(model: ModelSpec, *, dtype: str = "auto") -> float:
    """Bytes the replicated norms and residual adds move per token on *each* GPU [B].

    ``num_layers × 7 × hidden_size × b`` with ``b`` the activation bytes of ``dtype``
    (:func:`~budgetlab.memory.activation_dtype_bytes`); the same at every ``tp``.

    Examples
    --------
    >>> from budgetlab.catalog import model
    >>> replicated_bytes_per_token(model("llama-2-70b"))  # 80 layers x 7 x 8192 x 2 B
    9175040.0
    """
    b = activation_dtype_bytes(model, dtype)
    return float(model.num_layers * REPLICATED_ACCESSES_PER_HIDDEN * model.hidden_size * b)


def replicated_time_s(
    hardware: HardwareSpec,
    model: ModelSpec,
    num_tokens: ArrayLike,
    *,
    bandwidth_efficiency: float = REPLICATED_BANDWIDTH_EFFICIENCY,
    dtype: str = "auto",
) -> np.ndarray | float:
    """Time of a step's replicated norms and residual adds on each GPU [s] (vectorized).

    ``num_tokens × replicated_bytes_per_token / (mem_bandwidth × bandwidth_efficiency)``: not
    divided by ``tp``, and serial with the GEMMs (separate kernels), so it adds to the roof.

    Parameters
    ----------
    hardware : HardwareSpec
        The GPU (its peak memory bandwidth).
    model : ModelSpec
        The model (layers, hidden size, dtype bytes).
    num_tokens : int or array_like
        Tokens in the step [tokens], >= 0.
    bandwidth_efficiency : float
        Achieved fraction of peak bandwidth, in (0, 1]; default the profiles' 0.45.
    dtype : str
        vLLM's ``--dtype`` (``"auto"``: the model's).

    Raises
    ------
    ValueError
        A token count that is negative or not finite.
    ParameterError
        ``bandwidth_efficiency`` outside (0, 1].

    Examples
    --------
    >>> from budgetlab.catalog import hardware, model
    >>> round(replicated_time_s(hardware("h100-sxm"), model("llama-2-7b"), 4096) * 1e3, 2)
    4.99
    """
    tokens = finite_array("num_tokens", num_tokens, what="finite numbers of tokens >= 0", low=0.0, error=ValueError)
    efficiency = number_in(
        "bandwidth_efficiency", bandwidth_efficiency, what="a fraction in (0, 1]", low=0.0, high=1.0, low_open=True
    )
    rate = hardware.mem_bandwidth_bytes_per_s * efficiency
    out = tokens * (replicated_bytes_per_token(model, dtype=dtype) / rate)
    return float(out) if out.ndim == 0 else out
