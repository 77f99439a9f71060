"""The number formats vLLM takes for weights, activations and the KV cache.

Kept apart from :mod:`budgetlab.specs` (which re-exports them) so the list of weight formats can
grow with the bytes each one stores (:func:`budgetlab.memory.weight_bytes`).
"""

from __future__ import annotations

__all__ = ["DTYPES", "KV_CACHE_DTYPES", "QUANTIZATIONS"]

DTYPES = ("auto", "bfloat16", "float16", "half", "float32", "float")
"""Values of :attr:`EngineConfig.dtype`: vLLM's ``--dtype`` (weights and activations)."""
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
"""Values of :attr:`EngineConfig.kv_cache_dtype`: vLLM's ``--kv-cache-dtype`` ("auto" follows
``dtype``; the three fp8 spellings store one byte per element)."""
QUANTIZATIONS = (None, "fp8", "int8", "int4", "mxfp4", "nvfp4")
"""Values of :attr:`EngineConfig.quantization`: how the linear layers' weights are stored
(``None``: in ``dtype``; ``"fp8"``/``"int8"``: one byte per weight, e.g. vLLM's ``fp8`` (per-tensor,
per-channel or DeepSeek's 128×128 blocks: a block's FP32 scale adds 0.02 %) or a compressed-tensors
W8A8 checkpoint; ``"int4"``: four bits with a 16-bit scale per 128 weights, e.g. GPTQ/AWQ/W4A16;
``"mxfp4"``: OCP MX FP4, four bits with one 8-bit E8M0 scale per 32 weights, 4.25 bits (GPT-OSS's
experts; vLLM ``mxfp4``); ``"nvfp4"``: four bits with one FP8 E4M3 scale per 16 weights, 4.5 bits,
plus one FP32 scale per tensor (vLLM ``modelopt_fp4`` / compressed-tensors NVFP4)). Embeddings
and the output projection stay in ``dtype``; :func:`budgetlab.hf_families.hf_quantization` reads
the value off a checkpoint's ``quantization_config``."""
