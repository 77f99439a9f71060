"""The two parameter sets of :class:`~budgetlab.cost.CalibratedCost`, and the data each was fitted to.

:data:`GPU_PROFILE` times a step as the GPU's operators take it, fitted to Vidur's H100 operator
profile of Llama 2 7B. :data:`TYPICAL`, the out-of-the-box preset of
:meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`, times a step of a real
``vllm serve`` engine. It starts from the GPU profile and adds what the ten steady published
vLLM runs on H100 show: the per-step CPU time the engine does not hide, and the weight-read
bandwidth of its CUDA-graph decode steps. Use it with :meth:`ServingOverhead.vllm
<budgetlab.serving.ServingOverhead.vllm>` for what a client measures.

GPU_PROFILE (Vidur, ``data/measured/vidur-h100-llama2-7b-linear.csv``)
----------------------------------------------------------------------
========================  ========  ================================================
``layer_overhead_s``      20 µs     Vidur's H100 Llama 2 7B operator profile
                                    (microsoft/vidur, ``data/profiling/compute/
                                    h100/meta-llama/Llama-2-7b-hf/mlp.csv``, TP 1):
                                    at 1 token the two RMSNorms, rotary embedding,
                                    SiLU·mul and residual add take 4 + 4 + 4 + 6 +
                                    1 = 19 µs per layer (medians), launch-bound.
``bandwidth_efficiency``  0.80      The same profile at 1 token: the four GEMMs of a
                                    layer read 405 MB of weights in 156 µs,
                                    2.6 TB/s = 78 % of 3.35 TB/s.
``flop_efficiency``       0.70      The same profile from 2,048 to 4,096 tokens adds
                                    20.9 µs per token for 12.95 GFLOP of layer math:
                                    620 TFLOP/s = 63 % of 989.4; 0.70 with the
                                    catalog's parameter count (embeddings and LM
                                    head included) and the knee loss below.
``knee_overlap_loss``     0.70      Fitted to the same profile's knee (9.2 ms at 256
                                    tokens, 12.0 ms at 512, where a sharp max gives
                                    5.7 and 10.6).
``step_overhead_s``       0         The profile times GPU operators only.
========================  ========  ================================================

With ``attention=False`` it reproduces the profile's eight published points (1 to 4,096 tokens)
within 3.5 %.

TYPICAL (vLLM serving runs, ``../shared/data/real/vllm_serving_h100_inference_sim.csv``)
-----------------------------------------------------------------------------------------
The GPU profile with two changes, chosen by a grid search (bandwidth efficiency 0.85 / 0.90 /
0.95 × per-step time 1.5 / 2.0 / 2.5 ms, :func:`budgetlab.experiments.serving_runs.preset_grid`)
for the smallest largest error on the ten steady runs: Llama 2 7B at TP1 and Mixtral 8x7B at
TP2, 5–20 requests/s, budget 2,048, 128 sequences, vLLM's defaults otherwise, with one step of
output lag (:class:`~budgetlab.serving.ServingOverhead`).

========================  ========  ================================================
``bandwidth_efficiency``  0.90      Decode steps run as CUDA graphs and read the
                                    weights at 90 % of peak: a step of Mixtral at TP2
                                    (46.7 GB per GPU) took 18.4 ms per token at 5
                                    requests/s, which 0.80 (17.4 ms of weight read
                                    alone, 20.4 ms with the CPU time) cannot give.
``step_overhead_s``       2.0 ms    CPU time per step the engine does not overlap:
                                    scheduling, input preparation, sampling and output
                                    processing. Llama 2 7B's decode steps took 9.3 ms
                                    per token at 5 requests/s where its GPU work is
                                    about 7 ms.
========================  ========  ================================================

Terms the runs do not separate, and how they are covered:

- **Async scheduling.** vLLM's default pipelined loop plans step k + 1 while step k runs, so only
  part of the CPU work lengthens a step. ``step_overhead_s`` is that part. Without async
  scheduling the whole CPU time would add; none of the runs was made that way, so it has no term
  of its own.
- **CUDA graphs.** vLLM pads a decode batch to the next captured size. That costs extra math
  only, which a memory-bound decode step hides. Where CUDA graphs do show — fewer launch gaps, so
  a higher achieved bandwidth — is ``bandwidth_efficiency``.
- **Tensor-parallel all-reduce.** It keeps the catalog's link latency and bandwidth. Mixtral at
  TP2 comes out within 4–11 % on the time per output token with it, so the runs do not ask for
  a different figure.

The other values are the GPU profile's. Errors on the ten runs (no per-run fitting): TTFT mean
within 20 %, time per output token within 12 %, end-to-end within 11 %, and both overloaded runs
predicted overloaded (``tests/test_serving_runs.py`` prints the table). The runs are two models
on one GPU type: other GPUs and models get the same fractions, which is a guess until you
calibrate against your own benchmark (:func:`budgetlab.serving.calibrate_serving`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["GPU_PROFILE", "TYPICAL"]

GPU_PROFILE: Mapping[str, Any] = MappingProxyType(
    {
        "step_overhead_s": 0.0,
        "layer_overhead_s": 20e-6,
        "bandwidth_efficiency": 0.80,
        "flop_efficiency": 0.70,
        "knee_overlap_loss": 0.70,
        "attention": True,
        "kv_reads": True,
        "tile_tokens": None,
        "moe": True,
        "all_reduce": True,
    }
)
"""Step cost as the GPU's operators take it (Vidur's H100 profile); read-only."""

TYPICAL: Mapping[str, Any] = MappingProxyType({**GPU_PROFILE, "bandwidth_efficiency": 0.90, "step_overhead_s": 2.0e-3})
"""The preset of :meth:`CalibratedCost.typical`: a real vLLM engine's step (module docstring); read-only."""
