"""What vLLM's start-up profiler subtracts before the KV cache: non-torch memory and activations.

vLLM 0.19's V1 worker (``determine_available_memory``) runs one dummy forward pass of
``max_num_batched_tokens`` tokens and one dummy sampler pass over ``max_num_seqs`` sequences,
then sizes the KV cache as::

    available_kv = total_memory × gpu_memory_utilization
                   − weights − non_torch_memory − torch_peak_increase

``total_memory`` is what CUDA reports (:attr:`HardwareSpec.reported_memory_bytes
<budgetlab.specs.HardwareSpec.reported_memory_bytes>`), ``weights`` is "Model loading took"
(:mod:`budgetlab.memory.sizes`), and the other two are modelled here. CUDA-graph memory is
captured after the KV cache is allocated and, in 0.19, is *not* taken from the pool
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` off; the log only prints an estimate), so it is
not a term here: it comes out of the ``1 − gpu_memory_utilization`` headroom.

Non-torch memory
----------------
Memory the process holds outside PyTorch's allocator (CUDA context, cuBLAS workspaces; NCCL's
buffers once ``tensor_parallel_size > 1``). Measured in the 0.19 logs on H100: 0.24–0.27 GiB
on one GPU (0.46 GiB for the two Granite 3.1 models), 2.07–2.21 GiB per GPU with TP 2 or 4.
budgetlab uses 0.25 GiB and 2.1 GiB.

The activation peak
-------------------
The largest ``torch_peak_increase`` of the two dummy passes, a documented formula fitted to the
"activation peak" vLLM 0.19 printed for 21 start-ups of 15 catalog models on H100
(``../shared/data/real/vllm_kv_logs.csv``; :func:`fit_activation_coefficients` refits it and
notebook 05 shows the residuals)::

    forward = T × a_bytes × (3 × I_tp × k + b_hidden × H)
    sampler = T × a_bytes × H + moe_workspace + bytes_per_logit × S × V + sampler_fixed
    peak    = max(forward, sampler)

with ``T = max_num_batched_tokens``, ``S = max_num_seqs``, ``H`` the hidden size, ``V`` the
vocabulary, ``I_tp = intermediate_size / tp`` (per expert), ``k`` the experts per token (1
for a dense model) and ``a_bytes`` the activation dtype's bytes.

* ``forward``: one layer's MLP holds the fused gate/up output (``2 I``) and the activated
  product (``I``) at once; ``b_hidden`` counts the hidden-sized tensors alive beside them
  (residual, normed input, attention output). Fitted: ``b_hidden`` = 4.24, from the two logs
  where the forward pass is the larger (Code Llama 7B 0.77 GiB, Granite 3.1 8B 0.85 GiB).
* ``sampler``: the forward pass's hidden states (``T × H``) are still alive while the dummy
  sampler runs over ``S`` sequences: the logits in the model dtype, their FP32 copy, the FP32
  softmax and the FP32 exponential noise of random sampling (2 + 4 + 4 + 4 = 14 B per logit),
  plus the Triton top-k/top-p buffer of at most one vocabulary row per SM (vLLM 0.19
  ``gpu_model_runner._dummy_sampler_run``, ``sample/sampler.py``). Fitted: 14.47 B per logit
  and 0.058 GiB fixed. With a vocabulary of 128k–256k this is the peak of every model in the
  logs but two: Llama 3.1 8B at 8,192 tokens and 1,024 sequences has a 0.92 GiB forward pass
  and a 1.89 GiB sampler pass.
* ``moe_workspace``: a mixture-of-experts layer's fused-MoE kernel keeps its workspaces,
  ``T × k × (max(2 I_tp, H) + I_tp) × a_bytes`` (vLLM's ``workspace13`` and ``workspace2``),
  which are still allocated when the sampler runs (structural, not fitted: Qwen3 30B-A3B's
  log is 0.15 GiB above it). Not with MXFP4 experts: vLLM 0.19 runs those through other
  kernels and GPT-OSS 20B logged 2.87 GiB at TP 1 and TP 2 alike, its sampler pass alone
  (2.87 GiB predicted; the workspace would add 0.53 GiB).

* ``encoder_cache``: a multimodal model (:attr:`ModelSpec.vision
  <budgetlab.specs.ModelSpec.vision>`) first encodes ``n`` dummy images of the largest size and
  keeps, through both passes, their outputs in the encoder cache (``tokens_per_item × H`` each)
  and the batched pixel values (``pixels_per_item`` each), both in the model dtype
  (:func:`encoder_cache_bytes`; vLLM 0.19 ``profile_run``, ``multimodal/encoder_budget.py``).
  Structural, not fitted: Gemma 3 4B/12B/27B logged 3.89/3.94/3.99 GiB, 3.90/3.94/3.98 here
  (32 images of 256 tokens and 3 × 896² pixels, 0.18–0.23 GiB). The encoder's own pass (its
  transient activations) is not modelled; it is below the text passes in these logs.

The peak does not grow with ``max_model_len`` (the dummy pass has ``T`` tokens however long a
request may be), and it is the same on every GPU of a tensor-parallel group (the logits are
gathered whole). Fit residuals: root-mean-square 0.034 GiB, largest 0.15 GiB (Qwen3 30B-A3B);
1.5 % of the smallest pool ≥ 10 GiB.

Older versions
--------------
* vLLM 0.11–0.16 (V1): the same profile, but top-k/top-p sorted the whole FP32 logits (values
  and int64 indices) where 0.17 has a Triton kernel (vllm PR #33538), so the sampler pass was
  about 2.5 times larger (Qwen3 14B on H100: 5.64 GiB of activations in 0.15 and 0.16, 2.23 GiB
  from 0.17); non-torch memory was 0.13–0.14 GiB on one GPU (0.25 GiB from 0.18, whose
  CUDA-graph estimate runs inside the profiling window, PR #30515).
* vLLM after 0.19 subtracts the CUDA-graph estimate from the pool by default
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, off in 0.19), 0.7–1.8 GiB in the 0.19 logs.
* vLLM V0 (``worker.py``, before 0.8's V1 default): the dummy batch was ``max_num_seqs``
  sequences sharing ``max_num_batched_tokens`` tokens; 0.2.4 subtracted only PyTorch's peak
  (NCCL ignored), PR #2031 (0.2.5) everything ``cudaMemGetInfo`` saw in use (other processes
  included), PR #10511 (0.7) introduced the weights / non-torch / activation split of today's
  log line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from budgetlab._checks import int_at_least
from budgetlab.errors import ParameterError
from budgetlab.memory.sizes import activation_dtype_bytes, check_tp
from budgetlab.specs import EngineConfig, ModelSpec

__all__ = [
    "GiB",
    "PROFILER_VERSION",
    "NON_TORCH_BYTES_ONE_GPU",
    "NON_TORCH_BYTES_TENSOR_PARALLEL",
    "ActivationCoefficients",
    "ACTIVATION_COEFFICIENTS",
    "ActivationPeak",
    "NON_TORCH_BYTES_PIPELINE",
    "non_torch_bytes",
    "MM_ITEMS_PER_PROMPT",
    "encoder_profile_items",
    "encoder_cache_bytes",
    "activation_peak",
    "ActivationFit",
    "fit_activation_coefficients",
]

GiB = 2**30
"""One gibibyte [B]: the unit vLLM's logs print memory in."""

PROFILER_VERSION = "0.19"
"""The vLLM version whose start-up profiler this module follows (V1 engine)."""

NON_TORCH_BYTES_ONE_GPU = 0.25 * GiB
"""Non-torch memory of a single-GPU vLLM 0.19 worker [B] (H100 logs: 0.24–0.27 GiB)."""

NON_TORCH_BYTES_TENSOR_PARALLEL = 2.1 * GiB
"""Non-torch memory per GPU once ``tensor_parallel_size > 1`` [B] (NCCL; logs: 2.07–2.21 GiB)."""

NON_TORCH_BYTES_PIPELINE = 0.07 * GiB
"""Non-torch memory per GPU of a pipeline without tensor parallelism [B] (vLLM 0.19 logs of
Llama 3.1 8B at ``pp`` 2 and 4: 0.07 GiB on all six workers)."""


def non_torch_bytes(tensor_parallel_size: int, pipeline_parallel_size: int = 1) -> float:
    """Non-torch memory vLLM 0.19 subtracts on each GPU [B]: 0.25 GiB alone, 2.1 GiB with TP,
    0.07 GiB with pipeline parallelism only."""
    if tensor_parallel_size > 1:
        return NON_TORCH_BYTES_TENSOR_PARALLEL
    return NON_TORCH_BYTES_PIPELINE if pipeline_parallel_size > 1 else NON_TORCH_BYTES_ONE_GPU


MM_ITEMS_PER_PROMPT = 999
"""Images a prompt may hold by default (vLLM 0.19 ``--limit-mm-per-prompt``'s default) [count]."""


def encoder_profile_items(model: ModelSpec, engine: EngineConfig) -> int:
    """Dummy images vLLM 0.19's profile run encodes for ``model`` under ``engine`` [count]; 0
    for a text-only model.

    ``MultiModalBudget._get_max_items``: the encoder budget (``max(max_num_batched_tokens,
    tokens_per_item)``, vLLM's ``max_num_encoder_input_tokens`` and ``encoder_cache_size``)
    over the tokens of one image, at most what the decoder could hold (``max_num_seqs`` ×
    ``min(999, max_model_len // tokens_per_item)`` images; without chunked prefill the
    requests are also at most ``max_num_batched_tokens // tokens_per_item``), and at least 1.
    Gemma 3 at 8,192 tokens: 8,192 // 256 = 32; Llama 4 Scout: 8,192 // 2,448 = 3.
    """
    vision = model.vision
    if vision is None:
        return 0
    tokens = vision.tokens_per_item
    budget = max(engine.max_num_batched_tokens, tokens)
    length = engine.max_model_len
    per_prompt = max(1, min(MM_ITEMS_PER_PROMPT, length // tokens)) if length is not None else MM_ITEMS_PER_PROMPT
    requests = engine.max_num_seqs
    if not engine.enable_chunked_prefill:
        requests = min(requests, engine.max_num_batched_tokens // tokens)
    return max(1, min(budget // tokens, requests * per_prompt))


def encoder_cache_bytes(model: ModelSpec, engine: EngineConfig) -> float:
    """What vLLM 0.19's profile run keeps of its multimodal encoder pass while the text model's
    dummy passes run [B]: :func:`encoder_profile_items` × (``tokens_per_item × hidden_size +
    pixels_per_item``) × activation bytes; 0 for a text-only model.

    The encoder outputs (projected to the text width) sit in the encoder cache and the batched
    pixel values stay referenced until ``profile_run`` returns; both are in the model dtype
    (the processor casts floating inputs to it). Gemma 3 27B at 8,192 tokens: 32 × (256 × 5,376
    + 2,408,448) × 2 B = 0.226 GiB. Every GPU holds all of it (the outputs are gathered).
    """
    vision = model.vision
    if vision is None:
        return 0.0
    a_bytes = activation_dtype_bytes(model, engine.dtype)
    per_item = vision.tokens_per_item * model.hidden_size + vision.pixels_per_item
    return float(encoder_profile_items(model, engine) * per_item * a_bytes)


@dataclass(frozen=True)
class ActivationCoefficients:
    """The fitted constants of the activation-peak formula (module docstring).

    Attributes
    ----------
    intermediate_copies : float
        Intermediate-sized tensors alive in one MLP (3: gate/up output and product) [-].
    hidden_copies : float
        Hidden-sized tensors alive beside them (``b_hidden``) [-].
    bytes_per_logit : float
        Sampler bytes per (sequence × vocabulary entry) [B].
    sampler_fixed_bytes : float
        The sampler pass's fixed part [B].
    """

    intermediate_copies: float
    hidden_copies: float
    bytes_per_logit: float
    sampler_fixed_bytes: float


ACTIVATION_COEFFICIENTS = ActivationCoefficients(
    intermediate_copies=3.0,
    hidden_copies=4.24,
    bytes_per_logit=14.47,
    sampler_fixed_bytes=0.058 * GiB,
)
"""The shipped fit (to three significant figures) of :func:`fit_activation_coefficients` on
vLLM 0.19's H100 logs; a test refits it from the data and compares."""


@dataclass(frozen=True)
class ActivationPeak:
    """The two dummy passes of vLLM's profile run, and their peak [B].

    Attributes
    ----------
    forward_bytes : float
        Peak of the forward pass over ``max_num_batched_tokens`` tokens [B].
    sampler_bytes : float
        Peak while the sampler runs over ``max_num_seqs`` sequences (hidden states, MoE
        workspaces and the logits' working set) [B].
    moe_workspace_bytes : float
        The part of ``sampler_bytes`` that is fused-MoE workspace [B]; 0 for a dense model.
    pipeline_buffer_bytes : float
        With pipeline parallelism, the hidden states and residual a stage receives or sends,
        ``2 × T × H × a_bytes``, alive through both passes [B]; 0 without.
    encoder_cache_bytes : float
        A multimodal model's dummy encoder outputs and pixel values, alive through both passes
        (:func:`encoder_cache_bytes`) [B]; 0 for a text-only model.
    """

    forward_bytes: float
    sampler_bytes: float
    moe_workspace_bytes: float = 0.0
    pipeline_buffer_bytes: float = 0.0
    encoder_cache_bytes: float = 0.0

    @property
    def peak_bytes(self) -> float:
        """``max(forward_bytes, sampler_bytes) + pipeline_buffer_bytes + encoder_cache_bytes``:
        what vLLM logs as the activation peak [B]."""
        return max(self.forward_bytes, self.sampler_bytes) + self.pipeline_buffer_bytes + self.encoder_cache_bytes

    @property
    def binding_pass(self) -> str:
        """``"forward"`` or ``"sampler"``: which pass sets the peak."""
        return "forward" if self.forward_bytes >= self.sampler_bytes else "sampler"


def activation_peak(
    model: ModelSpec,
    engine: EngineConfig,
    *,
    stage: int | None = None,
    coefficients: ActivationCoefficients = ACTIVATION_COEFFICIENTS,
) -> ActivationPeak:
    """The activation peak of vLLM 0.19's profile run for ``model`` under ``engine`` [B].

    Uses ``engine``'s ``max_num_batched_tokens``, ``max_num_seqs``, ``tensor_parallel_size``,
    ``pipeline_parallel_size`` and ``dtype``; the formula and its sources are in the module
    docstring. Llama 3.1 8B at 8,192 tokens and 1,024 sequences: forward 0.92 GiB, sampler
    1.89 GiB (vLLM logged 1.89).

    With pipeline parallelism only the last stage (``stage`` None or ``pp − 1``) runs the
    sampler; every stage adds the pipeline buffers (Llama 3.1 8B at ``pp=4``: 1.05 GiB logged on
    the middle stages, 2.01 GiB on the last; 1.05 and 2.02 here).

    Raises
    ------
    ParameterError
        A ``tensor_parallel_size`` that does not divide the attention heads, or a ``stage``
        that is neither None nor an int in ``[0, pipeline_parallel_size)``.
    """
    tp = check_tp(model, engine.tensor_parallel_size)
    pp = engine.pipeline_parallel_size
    if stage is not None:
        what = f"None or an int in [0, pipeline_parallel_size = {pp}) (the pipeline stage)"
        if int_at_least("stage", stage, 0, what=what) >= pp:
            raise ParameterError(f"stage must be {what}, got {stage!r}")
    a_bytes = activation_dtype_bytes(model, engine.dtype)
    tokens = float(engine.max_num_batched_tokens)
    sequences = float(min(engine.max_num_seqs, engine.max_num_batched_tokens))
    per_expert = model.intermediate_size / tp
    routed = model.num_experts_per_token if model.is_moe else 1
    c = coefficients
    forward = tokens * a_bytes * (c.intermediate_copies * per_expert * routed + c.hidden_copies * model.hidden_size)
    workspace = model.is_moe and engine.quantization != "mxfp4"
    moe = tokens * routed * (max(2.0 * per_expert, model.hidden_size) + per_expert) * a_bytes if workspace else 0.0
    sampler = (
        tokens * a_bytes * model.hidden_size
        + moe
        + c.bytes_per_logit * sequences * model.vocab_size
        + c.sampler_fixed_bytes
    )
    last = stage is None or stage == pp - 1
    buffers = 2.0 * tokens * model.hidden_size * a_bytes if pp > 1 else 0.0
    return ActivationPeak(
        forward_bytes=forward,
        sampler_bytes=sampler if last else 0.0,
        moe_workspace_bytes=moe if last else 0.0,
        pipeline_buffer_bytes=buffers,
        encoder_cache_bytes=encoder_cache_bytes(model, engine),
    )


@dataclass(frozen=True)
class ActivationFit:
    """Result of :func:`fit_activation_coefficients`.

    Attributes
    ----------
    coefficients : ActivationCoefficients
        The fitted constants.
    predicted_bytes, measured_bytes : numpy.ndarray
        Per observation [B].
    binding_pass : tuple of str
        ``"forward"`` or ``"sampler"`` per observation, under the fit.
    used_in_fit : numpy.ndarray
        Which observations informed the constants (mixture-of-experts rows do not).
    """

    coefficients: ActivationCoefficients
    predicted_bytes: np.ndarray
    measured_bytes: np.ndarray
    binding_pass: tuple[str, ...]
    used_in_fit: np.ndarray

    @property
    def residual_bytes(self) -> np.ndarray:
        """Predicted minus measured [B]."""
        return self.predicted_bytes - self.measured_bytes

    @property
    def rms_residual_bytes(self) -> float:
        """Root-mean-square residual over every observation [B]."""
        return float(np.sqrt(np.mean(self.residual_bytes**2)))


def fit_activation_coefficients(
    observations: Iterable[tuple[ModelSpec, EngineConfig, float]],
    *,
    intermediate_copies: float = 3.0,
    max_rounds: int = 20,
) -> ActivationFit:
    """Fit the activation-peak formula to measured peaks (vLLM's "activation peak", in bytes).

    Starting from the shipped constants, each observation is assigned to the pass that binds
    under the current constants; the
    sampler constants (``bytes_per_logit``, ``sampler_fixed_bytes``) are then a least-squares
    line through the dense sampler-bound observations, and ``hidden_copies`` the mean that makes
    the forward-bound ones exact (``intermediate_copies`` is structural and fixed). Repeated
    until the assignment no longer changes. Mixture-of-experts observations are predicted but
    not fitted (their workspace term is structural).

    Parameters
    ----------
    observations : iterable of (ModelSpec, EngineConfig, float)
        Model, engine (budget, sequence cap, TP, dtype) and the measured peak [B].
    intermediate_copies : float
        The forward formula's intermediate-sized tensors [-].
    max_rounds : int
        Assignment rounds before giving up on convergence (the last round's fit is returned).

    Raises
    ------
    ValueError
        Fewer than two dense sampler-bound observations, or none forward-bound.
    """
    rows = list(observations)
    measured = np.array([float(peak) for _, _, peak in rows])
    held = np.array([encoder_cache_bytes(model, engine) for model, engine, _ in rows])  # structural
    dense = np.array([not model.is_moe for model, _, _ in rows])
    coefficients = dataclasses.replace(ACTIVATION_COEFFICIENTS, intermediate_copies=intermediate_copies)
    assignment: tuple[str, ...] | None = None
    for _ in range(max_rounds):
        peaks = [activation_peak(m, e, coefficients=coefficients) for m, e, _ in rows]
        current = tuple(p.binding_pass for p in peaks)
        if current == assignment:
            break
        assignment = current
        sampler_rows = [i for i in range(len(rows)) if dense[i] and assignment[i] == "sampler"]
        forward_rows = [i for i in range(len(rows)) if dense[i] and assignment[i] == "forward"]
        if len(sampler_rows) < 2 or not forward_rows:
            raise ValueError(
                "fit_activation_coefficients needs at least two dense observations whose peak is the "
                f"sampler pass and one whose peak is the forward pass; got {len(sampler_rows)} and "
                f"{len(forward_rows)}"
            )
        logits, rest = [], []
        for i in sampler_rows:
            model, engine, _ = rows[i]
            a_bytes = activation_dtype_bytes(model, engine.dtype)
            logits.append(min(engine.max_num_seqs, engine.max_num_batched_tokens) * model.vocab_size)
            rest.append(measured[i] - held[i] - engine.max_num_batched_tokens * a_bytes * model.hidden_size)
        design = np.column_stack([np.array(logits, dtype=float), np.ones(len(logits))])
        (per_logit, fixed), *_ = np.linalg.lstsq(design, np.array(rest), rcond=None)
        hidden = []
        for i in forward_rows:
            model, engine, _ = rows[i]
            a_bytes = activation_dtype_bytes(model, engine.dtype)
            tp = engine.tensor_parallel_size
            routed = model.num_experts_per_token if model.is_moe else 1
            mlp = intermediate_copies * model.intermediate_size / tp * routed
            hidden.append(
                ((measured[i] - held[i]) / (engine.max_num_batched_tokens * a_bytes) - mlp) / model.hidden_size
            )
        coefficients = ActivationCoefficients(
            intermediate_copies, float(np.mean(hidden)), float(per_logit), float(fixed)
        )
    peaks = [activation_peak(m, e, coefficients=coefficients) for m, e, _ in rows]
    return ActivationFit(
        coefficients=coefficients,
        predicted_bytes=np.array([p.peak_bytes for p in peaks]),
        measured_bytes=measured,
        binding_pass=tuple(p.binding_pass for p in peaks),
        used_in_fit=dense,
    )
