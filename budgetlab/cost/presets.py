"""The two parameter sets of :class:`~budgetlab.cost.CalibratedCost`, and the data each was fitted to.

:data:`GPU_PROFILE` times a step as the GPU's operators take it, fitted to Vidur's H100 operator
profile of Llama 2 7B. :data:`TYPICAL`, the out-of-the-box preset of
:meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`, times a step of a real
``vllm serve`` engine. It starts from the GPU profile and adds what the ten steady published
vLLM runs on H100 show: the per-step CPU time the engine does not hide, and the weight-read
bandwidth of its CUDA-graph decode steps; and the CUDA-graph terms (padding, host launch time
outside a FULL graph), derived from published graph-versus-eager measurements. Use it with
:meth:`ServingOverhead.vllm <budgetlab.serving.ServingOverhead.vllm>` for what a client measures.

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

Tensor parallelism (issue 22), from other GPUs' and models' measurements:

==========================  ========  ================================================
``knee_weight_exponent``    0.7       Vidur's operator profiles at TP 1/2/4/8 (32
``knee_hidden_exponent``    0.6       tables, ``data/measured/vidur-*-tp.csv``): the
                                      best knee loss falls from 1.0 (Llama 2 7B at
                                      TP 4-8) to 0.10 (Llama 2 70B at TP1) as a GPU's
                                      layer weights and the GEMM width grow; the loss
                                      is 0.70 × (421 MB / layer bytes)^0.7 × (4,096 /
                                      hidden)^0.6, capped at 1
                                      (:func:`~budgetlab.cost.step_terms.knee_loss`):
                                      median error 6.7 → 5.8 %, P90 20.6 → 16.1 %.
                                      The 7B TP1 calibration step keeps 0.70 exactly.
``all_reduce_kernels``      on        Each all-reduce priced as the kernel vLLM 0.33
                                      runs for its size and TP
                                      (:mod:`budgetlab.cost.collective`, fitted to
                                      vLLM PR #24111 and aiconfigurator's H100 data).
==========================  ========  ================================================

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

CUDA graphs (the engine's own capture sizes, :mod:`budgetlab.cost.step_terms`)
-------------------------------------------------------------------------------
TYPICAL also switches on the CUDA-graph terms, which apply to a cost built for an engine
(:meth:`CalibratedCost.for_engine <budgetlab.cost.CalibratedCost.for_engine>`; vLLM captures
graphs by default). Neither launch time was fitted to the runs below: each is derived from
published measurements of one model with and without graphs, as the host time per layer that,
less the GPU work of that step as this preset prices it, leaves the published difference
(``(difference + GPU forward) / layers``; the CPU runs ahead, so only the excess shows).

============================  ========  ============================================
``graph_padding``             on        vLLM pads a FULL or PIECEWISE step to its
                                        captured size (``cudagraph_dispatch``): the
                                        linear layers compute the padded tokens.
``piecewise_layer_launch_s``  100 µs    vllm-project/vllm issue #47089 (one B200,
                                        vLLM 0.23): Qwen3-0.6B at batch 1 took 3.64 ms
                                        per output token PIECEWISE and 1.53 ms FULL
                                        (medians of 3 runs), 2.11 ms more; with its GPU
                                        forward of 0.73 ms here, (2.11 + 0.73) / 28
                                        layers = 101 µs. PR #20059 (one A100 40GB):
                                        Qwen2.5-1.5B at 1 request/s, median ITL 5.39 ms
                                        PIECEWISE vs 5.03 ms FULL; its GPU forward (1.54 B
                                        parameters, 28 layers, not in the catalog) is
                                        about 2.8 ms here, so about 113 µs. Only a range
                                        is derived: issue #47089 at batch 128 (4.75 vs
                                        2.50 ms) gives 179 µs; 100 µs is the low end.
``eager_layer_launch_s``      240 µs    vllm-project/vllm PR #10058 (``benchmark_latency``
                                        at its defaults, batch 8, 32 prompt and 128
                                        output tokens; GPU not stated, H100 assumed):
                                        Llama 3.1 8B bf16 took 1.26 s without graphs and
                                        1.04 s with piecewise graphs, 1.72 ms per step
                                        (the piecewise launches, 32 × 100 µs, hide under
                                        the GPU work); with its GPU forward of 6.0 ms
                                        here, (1.72 + 6.0) / 32 = 241 µs. The same PR's older engine
                                        (V0, 1.10 vs 0.99 s) gives 215 µs; on an A100
                                        the V1 figure would be 350 µs.
============================  ========  ============================================

On the ten runs below (budget 2,048, 128 sequences: graphs up to 256 tokens, FULL up to 128)
every step's GPU work exceeds 32 × 100 µs, so the launch terms show nowhere; a smaller model,
a higher TP or ``enforce_eager`` makes them show at small batches.

Mixture of experts (:mod:`budgetlab.cost.moe_step`)
---------------------------------------------------

=====================  ========  ================================================
``moe_block_padding``  off       Decided on the ten steady runs above (the
                                 check of ``tests/test_serving_runs.py``). On,
                                 Mixtral at TP2 gets closer TTFTs (largest error
                                 19.4 → 14.5 %, median 9.7 % both) but a worse
                                 time per output token (median 6.4 → 8.1 %,
                                 largest 12.3 → 22.5 % at 20 requests/s, past
                                 the 15 % bound; end-to-end 11.7 → 21.8 %): a
                                 decode-sized step's padded expert math is
                                 counted in the knee loss, where the kernel ran
                                 weight-bound and flat from 24 to 128 tokens
                                 (vLLM PR #24700). Off until that overlap is
                                 modelled; switch it on to price prefill-heavy
                                 steps (``cost.with_(moe_block_padding=True)``).
=====================  ========  ================================================

Expert parallelism (``expert_parallel``) is a deployment field, recorded from the engine's
``enable_expert_parallel`` by :meth:`CalibratedCost.for_engine
<budgetlab.cost.CalibratedCost.for_engine>`, not a preset value.

Terms the runs do not separate, and how they are covered:

- **Async scheduling.** vLLM's default pipelined loop plans step k + 1 while step k runs, so only
  part of the CPU work lengthens a step. ``step_overhead_s`` is that part. Without async
  scheduling the whole CPU time would add; none of the runs was made that way, so it has no term
  of its own.
- **CUDA graphs.** Padding costs extra math only, which a memory-bound decode step hides; the
  launch terms above are hidden under these runs' GPU work. Where CUDA graphs also show — fewer
  launch gaps on the GPU, so a higher achieved bandwidth — is ``bandwidth_efficiency``.
- **Tensor-parallel all-reduce.** Each is the kernel vLLM 0.33 runs, priced from published H100
  measurements (``all_reduce_kernels``, in the GPU profile above), not fitted to these runs:
  Mixtral at TP2 comes out within 1–11 % on the time per output token with it.

The other values are the GPU profile's. Errors on the ten runs (no per-run fitting, their first
60 s): TTFT mean within 20.2 % (median 9.9 %), time per output token within 10.7 % (median
5.6 %), end-to-end within 10.1 % (median 5.5 %), and both overloaded runs
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
        "all_reduce_kernels": True,
        "knee_weight_exponent": 0.7,
        "knee_hidden_exponent": 0.6,
        "moe_block_padding": False,
    }
)
"""Step cost as the GPU's operators take it (Vidur's H100 profile); read-only."""

TYPICAL: Mapping[str, Any] = MappingProxyType(
    {
        **GPU_PROFILE,
        "bandwidth_efficiency": 0.90,
        "step_overhead_s": 2.0e-3,
        "graph_padding": True,
        "piecewise_layer_launch_s": 100e-6,
        "eager_layer_launch_s": 240e-6,
    }
)
"""The preset of :meth:`CalibratedCost.typical`: a real vLLM engine's step (module docstring); read-only."""
