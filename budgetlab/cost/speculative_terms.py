"""The proposer's own cost in a step of speculative decoding, by vLLM 0.33's Model Runner V2.

A speculating engine (``EngineConfig(num_speculative_tokens=k, speculative_method=...)``) verifies
last step's drafts in the target's forward pass (priced by the cost model itself: the drafts are
``Batch.decode_draft_tokens``, :mod:`budgetlab.cost.step_terms`) and then, in the same step, runs
its proposer to draft ``k`` tokens for the next. :class:`Drafter` describes the proposer;
:func:`drafter_time_s` and :func:`drafter_terms` price it over a step's
:class:`~budgetlab.specs.Batch`. A cost built for a speculating engine
(:meth:`CalibratedCost.for_engine <budgetlab.cost.CalibratedCost.for_engine>`,
:func:`~budgetlab.cost.make_cost` with ``engine=``) adds this time to every step as the term
``drafter``.

What each proposer runs every step (``v1/worker/gpu/spec_decode/``)
--------------------------------------------------------------------
Write ``T`` for the step's tokens (``Batch.num_tokens``: decodes, their drafts, prompt chunks),
``R`` for its requests (decodes plus chunks) and ``Σc`` for their cached tokens.

EAGLE, EAGLE-3, MTP (``TargetDependentARSpeculator.propose``)
    A first pass over all ``T`` scheduled tokens (the target's hidden states, the batch's shape and
    attention metadata reused, so the drafter keeps its KV of every prompt too), then ``k − 1``
    passes of one token per request, each ``R`` tokens attending to ``Σc + T + (j − 1) R``
    cached tokens in pass ``j``; the LM head (``compute_logits`` and sampling) runs on the ``R``
    last positions of every pass, ``k`` times.
Draft model (``StandaloneARSpeculator.propose``)
    The same shape with the draft model's whole forward pass: a first pass over ``T + R`` tokens
    (each request's tokens and one correction slot, ``prepare_prefill_inputs``), then ``k − 1``
    single-token passes; no CUDA graph at all (rule P3 of :mod:`budgetlab.cudagraph`).
N-gram (``NgramGPUSpeculator.propose``)
    Model Runner V2 looks the n-grams up on the GPU: a Triton scan over each scheduled request's
    token history (int32 ids, ``all_token_ids`` kept dense on the GPU) and a small finalize
    kernel. vLLM 0.33 runs V2 for ``"ngram"`` (``use_ngram()`` covers it; V1's CPU
    ``NgramProposer`` only runs where V2 is off).

The head's size, from the target (:class:`Drafter`)
---------------------------------------------------
With ``H`` hidden, ``n_q``/``n_kv`` query/KV heads of ``d`` dims, ``I`` the MLP width and ``V`` the
vocabulary of the target:

* one decoder layer: ``H_in (n_q + 2 n_kv) d + n_q d H`` attention weights plus ``3 H I`` gated
  MLP weights, ``H_in = H`` for EAGLE and ``2 H`` for EAGLE-3 (its first layer's QKV reads the
  token embedding and the hidden state concatenated, ``llama_eagle3.py``); MTP: the target's
  average layer, ``(num_params − embeddings) / layers`` (its experts included, routed as the
  target's; MLA when the target is MLA; ``deepseek_mtp.py``'s ``mtp_block``);
* a fully connected input layer, *replicated* on every tensor-parallel GPU
  (``ReplicatedLinear`` / ``nn.Linear``): ``2 H × H`` every pass for EAGLE (``fc``) and MTP
  (``eh_proj``), ``3 H × H`` once per step over the ``T`` tokens for EAGLE-3
  (``combine_hidden_states`` of three auxiliary hidden states);
* the LM head, ``V × H`` (EAGLE-3: its own ``draft_vocab_size × H``), split over the GPUs
  (``ParallelLMHead``), in 16 bits.

A draft model is its own :class:`~budgetlab.specs.ModelSpec`, priced whole as the target is.

The terms [s] (:data:`DRAFTER_TERM_NAMES`)
------------------------------------------
Every part is priced by the machinery that prices the target: a
:class:`~budgetlab.cost.CalibratedCost` with the target cost's fields (efficiencies, knee loss,
attention and KV reads, mixture of experts, all-reduce, CUDA-graph terms, dtypes) for the part's
own weights, with no ``step_overhead_s`` (the step pays it once). For
:class:`~budgetlab.cost.IdealCost` that is :meth:`CalibratedCost.ideal
<budgetlab.cost.CalibratedCost.ideal>`: the same roofline.

``draft_prefill``
    The first pass: the head's layer over the step's own :class:`~budgetlab.specs.Batch` (its
    attention over each request's context, its KV read, its all-reduces; dispatched to the same
    CUDA graph and padding as the target's step, rule P1 of :mod:`budgetlab.cudagraph`), plus the
    replicated input layer over ``T`` tokens. Draft model: its forward over the step's batch with
    one more token a request, without a graph.
``draft_decode``
    The ``k − 1`` single-token passes: the layer (draft model: the model) over ``R`` decodes of
    context ``Σc + T + (j − 1) R`` (draft model: ``+ j R``), FULL graph at the drafter's decode
    sizes or none (P2, P3), plus the replicated input layer over ``R`` tokens (EAGLE, MTP).
``draft_lm_head``
    ``k`` LM-head evaluations over ``R`` rows, each a roofline of its own (weights read once,
    ``2 V H`` FLOPs a row). 0 for a draft model (its LM head is in its ``2 × num_params``
    per token, as the target's is).
``draft_passes``
    ``k ×`` :data:`DRAFT_PASS_OVERHEAD_S`: each pass's host work and small kernels, fitted to
    published batch-size-1 speed-ups; 0 for n-gram and for a cost without host time.
``ngram_scan``
    ``max(SMALL_KERNEL_S, (Σc + T) × 4 B / achieved bandwidth) + SMALL_KERNEL_S``: the scan
    reads every scheduled request's token history once, the finalize kernel is launch-bound
    (:data:`SMALL_KERNEL_S`, counted where the cost counts small kernels, ``layer_overhead_s >
    0``). No published measurement of V2's GPU n-gram kernels was found.
``ngram_cpu``
    ``ngram_cpu_s_per_token × (Σc + T)``: the V1 runner's CPU ``NgramProposer`` scans the same
    history; 0 by default (vLLM 0.33 runs V2). :data:`NGRAM_CPU_S_PER_TOKEN_V1` is its measured
    single-thread rate (vllm-project/vllm PR #56732: 70.28 ms for 512 requests × 129,536 tokens
    of context, 66.3 M tokens a step, on 4 H100 ranks of one thread each: 1.06 ns a token).

Assumptions: drafts are proposed every step for every scheduled request (vLLM skips drafting,
``skip_drafts``, only in a step whose every request is a non-final prompt chunk or samples its
last token, which a :class:`~budgetlab.specs.Batch` does not say); the proposer runs after the
target's forward in the same step, its work added to the step (its kernel launches are priced
per pass against that pass's own GPU work, as the target's are); dynamic speculation and parallel
drafting are not modelled.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from budgetlab._checks import int_at_least, number_in
from budgetlab.attention import AttentionLayout
from budgetlab.cost.step_constants import FUSED_NORM_S
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.memory import embedding_params
from budgetlab.specs import Batch, EngineConfig, HardwareSpec, ModelSpec
from budgetlab.speculative import MAX_SPECULATIVE_TOKENS, SPECULATIVE_METHODS

__all__ = [
    "DRAFTER_TERM_NAMES",
    "DRAFT_PASS_OVERHEAD_S",
    "NGRAM_CPU_S_PER_TOKEN_V1",
    "SMALL_KERNEL_S",
    "TOKEN_ID_BYTES",
    "Drafter",
    "DrafterCost",
    "decode_run_by_step",
    "drafter_cost",
    "drafter_for_engine",
    "drafter_terms",
    "drafter_time_s",
]

#: The proposer's terms, in the order they are summed into a step's ``drafter`` term.
DRAFTER_TERM_NAMES = ("draft_prefill", "draft_decode", "draft_lm_head", "draft_passes", "ngram_scan", "ngram_cpu")

DRAFT_PASS_OVERHEAD_S = 0.65e-3
"""Time of each draft pass that the roofline of its layers does not see [s], a fitted constant:
the host work and small kernels between passes (input preparation, sampling the draft, launching
the pass). Charged ``k`` times a step for EAGLE, EAGLE-3, MTP and draft models (term
``draft_passes``), by costs that count host time (``step_overhead_s > 0``: :data:`TYPICAL
<budgetlab.cost.presets.TYPICAL>`), never by the roofline.

Fitted (:func:`budgetlab.experiments.spec_published.fit_draft_pass_overhead`, 0.05 ms grid, the
smallest largest error) to the 12 batch-size-1 TPOT speed-ups of vllm-project/vllm issue #20780
(Llama 3.1 8B, EAGLE-3 and EAGLE-1 at k = 2..7, H100 assumed), each step priced at the mean
context of its MT-Bench request: the predicted speed-up was 1.14-1.47 times the published one
without it, 0.89-1.11 times with it. Published steps grow by about 1.0 ms (EAGLE-3) and 0.7 ms
(EAGLE-1) per draft where the layers' roofline gives 0.5 ms."""

TOKEN_ID_BYTES = 4
"""Bytes of one token id in the n-gram scan's history (``all_token_ids`` is int32) [B]."""

SMALL_KERNEL_S = FUSED_NORM_S
"""GPU time of a launch-bound small kernel [s]: 4 µs, Vidur's H100 operator profile's median for
each RMSNorm of a layer (the figure :data:`~budgetlab.cost.step_terms.FUSED_NORM_S` uses); the
n-gram kernels' floor."""

NGRAM_CPU_S_PER_TOKEN_V1 = 70.28e-3 / (512 * 129_536)
"""CPU time of V1's ``NgramProposer`` per token of history scanned, one thread [s]
(vllm-project/vllm PR #56732, microbenchmark "main" arm: 70.28 ms a step for 512 requests of
129,536 tokens): about 1.06 ns. For ``Drafter(ngram_cpu_s_per_token=...)`` when the V1 runner
drafts on the CPU; vLLM 0.33's default V2 runner does not."""

_EAGLE_FAMILY = ("eagle", "eagle3", "mtp")


@dataclass(frozen=True)
class Drafter:
    """What proposes the drafts of a speculating engine, and the size of what it runs.

    Parameters
    ----------
    method : str
        One of :data:`~budgetlab.speculative.SPECULATIVE_METHODS` (vLLM's ``method``).
    num_speculative_tokens : int
        Drafts proposed per request per step, ``k`` [tokens], 1 to 64.
    target : ModelSpec or str
        The model being served (a catalog slug works): the EAGLE and MTP heads are derived from it
        (module docstring).
    draft_model : ModelSpec, str or None
        The draft model of ``method="draft_model"`` (required there, refused elsewhere).
    draft_vocab_size : int or None
        EAGLE-3's own LM-head vocabulary (``draft_vocab_size`` of its ``config.json``, often
        32,000) [tokens]; None: the target's. Only with ``method="eagle3"``.
    ngram_cpu_s_per_token : float
        CPU time of an n-gram lookup per token of history [s], >= 0: 0 for vLLM 0.33's GPU
        kernels (default), :data:`NGRAM_CPU_S_PER_TOKEN_V1` for V1's CPU proposer. Only with
        ``method="ngram"``.

    Raises
    ------
    ConfigError
        An unknown method, ``k`` out of range, a draft model missing for ``"draft_model"`` or given
        for another method, or a field given for a method that does not read it.
    """

    method: str
    num_speculative_tokens: int
    target: ModelSpec
    draft_model: ModelSpec | None = None
    draft_vocab_size: int | None = None
    ngram_cpu_s_per_token: float = 0.0

    def __post_init__(self) -> None:
        from budgetlab.catalog import resolve_model  # the catalog reads files: only when asked

        if self.method not in SPECULATIVE_METHODS:
            raise ConfigError(f"Drafter method must be one of {', '.join(SPECULATIVE_METHODS)}, got {self.method!r}")
        int_at_least(
            "num_speculative_tokens",
            self.num_speculative_tokens,
            1,
            what="an int >= 1 (drafts per request per step)",
            error=ConfigError,
            maximum=MAX_SPECULATIVE_TOKENS,
        )
        object.__setattr__(self, "target", resolve_model(self.target, name="target"))
        if self.method == "draft_model":
            if self.draft_model is None:
                raise ConfigError(_NEEDS_DRAFT_MODEL)
            object.__setattr__(self, "draft_model", resolve_model(self.draft_model, name="draft_model"))
        elif self.draft_model is not None:
            raise ConfigError(
                f"draft_model is read only with speculative_method='draft_model', not {self.method!r}; "
                "drop it (EAGLE and MTP heads are derived from the target model)"
            )
        if self.draft_vocab_size is not None:
            if self.method != "eagle3":
                raise ConfigError(f"draft_vocab_size is EAGLE-3's own LM-head vocabulary; {self.method!r} has none")
            int_at_least("draft_vocab_size", self.draft_vocab_size, 1, what="an int >= 1 [tokens]", error=ConfigError)
        number_in("ngram_cpu_s_per_token", self.ngram_cpu_s_per_token, low=0.0, what="seconds >= 0", error=ConfigError)
        if self.ngram_cpu_s_per_token and self.method != "ngram":
            raise ConfigError(f"ngram_cpu_s_per_token prices the n-gram lookup; {self.method!r} has none")

    @classmethod
    def for_engine(
        cls, engine: EngineConfig, target: ModelSpec | str, *, draft_model: ModelSpec | str | None = None
    ) -> Drafter | None:
        """The proposer of ``engine`` serving ``target``; None when the engine does not speculate.

        ``draft_model`` is read only when the engine's method is ``"draft_model"`` (so a sweep may
        pass it for every point) and is required there.

        Raises
        ------
        ConfigError
            ``speculative_method="draft_model"`` without ``draft_model``.
        """
        if not isinstance(engine, EngineConfig):
            raise ParameterError(f"engine must be an EngineConfig, got {type(engine).__name__}")
        if not engine.num_speculative_tokens or engine.speculative_method is None:
            return None
        from budgetlab.catalog import resolve_model

        method = engine.speculative_method
        draft = resolve_model(draft_model, name="draft_model") if method == "draft_model" and draft_model else None
        return cls(method, engine.num_speculative_tokens, resolve_model(target, name="target"), draft_model=draft)

    # The head's size, derived from the target (module docstring) ------------------------------

    @property
    def fc_params(self) -> float:
        """Weights of the replicated input layer [count]: ``2 H²`` (EAGLE ``fc``, MTP ``eh_proj``),
        ``3 H²`` (EAGLE-3 ``fc``), 0 for a draft model and n-gram."""
        width = {"eagle": 2, "eagle3": 3, "mtp": 2}.get(self.method, 0)
        return float(width * self.target.hidden_size**2)

    @property
    def layer_params(self) -> float:
        """Weights of the head's decoder layer [count] (all experts for an MTP layer of a mixture of
        experts); 0 for a draft model and n-gram."""
        m = self.target
        if self.method == "mtp":
            return (m.num_params - embedding_params(m)) / m.num_layers
        if self.method not in ("eagle", "eagle3"):
            return 0.0
        width = 2 * m.hidden_size if self.method == "eagle3" else m.hidden_size
        attention = width * (m.num_attention_heads + 2 * m.num_kv_heads) * m.head_dim
        attention += m.num_attention_heads * m.head_dim * m.hidden_size
        return float(attention + 3 * m.hidden_size * m.intermediate_size)

    @property
    def lm_head_params(self) -> float:
        """Weights of the head's LM head [count]: ``V × H`` (EAGLE-3: ``draft_vocab_size × H``); 0
        for a draft model and n-gram."""
        if self.method not in _EAGLE_FAMILY:
            return 0.0
        return float((self.draft_vocab_size or self.target.vocab_size) * self.target.hidden_size)

    def layer_spec(self) -> ModelSpec | None:
        """The head's decoder layer as a one-layer :class:`~budgetlab.specs.ModelSpec` (priced by a
        :class:`~budgetlab.cost.CalibratedCost`); the draft model itself for ``"draft_model"``;
        None for n-gram."""
        if self.method == "draft_model":
            return self.draft_model
        if self.method == "ngram":
            return None
        m = self.target
        params = self.layer_params
        moe = self.method == "mtp" and m.is_moe
        active = (m.num_active_params - embedding_params(m)) / m.num_layers if moe else params
        return _one_layer(m, f"{self.method}-layer", params, active, moe=moe, layout=_mtp_layout(m, self.method))

    def describe(self) -> str:
        """One line: the method, ``k`` and what it runs."""
        head = f"{self.method}, k={self.num_speculative_tokens}"
        if self.method == "draft_model":
            assert self.draft_model is not None
            return f"{head}: draft model {self.draft_model.name}"
        if self.method == "ngram":
            return f"{head}: GPU n-gram lookup" + (" + CPU lookup" if self.ngram_cpu_s_per_token else "")
        parts = [f"layer {self.layer_params / 1e9:.3g}B", f"LM head {self.lm_head_params / 1e9:.3g}B"]
        if self.fc_params:
            parts.append(f"replicated fc {self.fc_params / 1e9:.3g}B")
        return f"{head}: " + ", ".join(parts)


_NEEDS_DRAFT_MODEL = (
    "speculative_method='draft_model' needs the draft model to price its passes: pass draft_model= (a "
    "ModelSpec or a catalog slug such as 'qwen3-0.6b') where the cost is built, e.g. "
    "CalibratedCost.typical(hw, model, engine=engine, draft_model='qwen3-0.6b') or make_cost(..., "
    "engine=engine, draft_model='qwen3-0.6b')"
)


def _mtp_layout(m: ModelSpec, method: str) -> AttentionLayout | None:
    """An MTP layer's attention: MLA when the target's layers are MLA, else full attention."""
    layout = m.attention
    if method != "mtp" or layout is None or not layout.count("mla"):
        return None
    keep = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank")
    return AttentionLayout(("mla",), **{name: getattr(layout, name) for name in keep})


def _one_layer(
    m: ModelSpec, part: str, params: float, active: float, *, moe: bool = False, layout: AttentionLayout | None = None
) -> ModelSpec:
    """A one-layer model of ``params`` weights with the target's widths: a part of the head.

    Its vocabulary is 1 and tied, so quantization keeps just ``H`` of its weights in 16 bits (the
    embedding rule of :func:`~budgetlab.memory.weight_bytes`; ``1 / H`` of a layer, negligible).
    """
    return ModelSpec(
        slug=f"{m.slug}-{part}",
        name=f"{m.name} {part}",
        num_params=params,
        num_active_params=active,
        num_layers=1,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_kv_heads=m.num_kv_heads,
        head_dim=m.head_dim,
        intermediate_size=m.intermediate_size,
        vocab_size=1,
        num_experts=m.num_experts if moe else 1,
        num_experts_per_token=m.num_experts_per_token if moe else 1,
        dtype_bytes=m.dtype_bytes,
        tie_word_embeddings=True,
        attention=layout,
    )


def _linear_spec(m: ModelSpec, part: str, params: float, vocab: int) -> ModelSpec:
    """A matrix of ``params`` weights (an input layer or an LM head) as a one-layer model; with
    ``vocab × H == params`` and tied embeddings every weight stays in 16 bits under quantization."""
    return dataclasses.replace(_one_layer(m, part, params, params), vocab_size=vocab)


@dataclass(frozen=True)
class DrafterCost:
    """A :class:`Drafter` priced on one deployment: the cost models of its parts.

    Built by :func:`drafter_cost`; :meth:`terms` and :meth:`time_s` price a step. Every part is
    a :class:`~budgetlab.cost.CalibratedCost` (``None`` where the method has no such part).

    Attributes
    ----------
    drafter : Drafter
    first, rest : CalibratedCost or None
        The head's layer (the draft model) in the first pass and in the single-token passes.
    fc, lm_head : CalibratedCost or None
        The replicated input layer (one GPU's copy, no all-reduce) and the LM head (split over
        the GPUs, no all-reduce; the gather of the logits is not priced).
    bandwidth : float
        Achieved memory bandwidth for the n-gram scan [B/s].
    kernel_s : float
        Floor of each n-gram kernel [s] (:data:`SMALL_KERNEL_S` or 0).
    pass_s : float
        Each draft pass's time outside its layers [s] (:data:`DRAFT_PASS_OVERHEAD_S` or 0).
    """

    drafter: Drafter
    first: Any = None
    rest: Any = None
    fc: Any = None
    lm_head: Any = None
    bandwidth: float = math.inf
    kernel_s: float = 0.0
    pass_s: float = 0.0
    _memo: dict[tuple[str, int], float] = field(default_factory=dict, repr=False, compare=False)  # by part, rows

    def terms(self, batch: Batch) -> dict[str, float]:
        """The proposer's parts in a step of composition ``batch`` [s], by
        :data:`DRAFTER_TERM_NAMES` (module docstring); all 0 for an empty step."""
        out = dict.fromkeys(DRAFTER_TERM_NAMES, 0.0)
        tokens = batch.num_tokens
        if tokens <= 0:
            return out
        d = self.drafter
        requests = batch.num_decodes + len(batch.prefill_tokens)
        history = batch.decode_context_tokens + sum(batch.prefill_context_tokens) + tokens
        if d.method == "ngram":
            scan_s = history * TOKEN_ID_BYTES / self.bandwidth
            out["ngram_scan"] = max(self.kernel_s, scan_s) + self.kernel_s
            out["ngram_cpu"] = d.ngram_cpu_s_per_token * history
            return out
        k = d.num_speculative_tokens
        fc_first, fc_rest = self._fc(tokens, requests)
        if d.method == "draft_model":  # one more slot a request: the correction token
            first = Batch(
                num_decodes=batch.num_decodes,
                decode_context_tokens=batch.decode_context_tokens,
                prefill_tokens=tuple(n + 1 for n in batch.prefill_tokens),
                prefill_context_tokens=batch.prefill_context_tokens,
                decode_draft_tokens=batch.decode_draft_tokens + batch.num_decodes,
            )
            context, lm_head_s = history + requests, 0.0
        else:
            first, context = batch, history
            lm_head_s = k * self._rows("lm_head", requests)
        out["draft_prefill"] = self.first.batch_time_s(first) + fc_first
        decode_s = 0.0
        for j in range(1, k):
            step = Batch(num_decodes=requests, decode_context_tokens=context + (j - 1) * requests)
            decode_s += self.rest.batch_time_s(step) + fc_rest
        out["draft_decode"] = decode_s
        out["draft_lm_head"] = lm_head_s
        out["draft_passes"] = k * self.pass_s
        return out

    def time_s(self, batch: Batch) -> float:
        """The proposer's time in a step of composition ``batch`` [s]: the terms' sum."""
        terms = self.terms(batch)
        return sum(terms[name] for name in DRAFTER_TERM_NAMES)

    def curve_s(self, num_tokens: np.ndarray, context_tokens: np.ndarray) -> np.ndarray:
        """:meth:`time_s` of single-chunk steps (one fresh chunk of ``num_tokens`` after
        ``context_tokens``), element by element over the distinct pairs [s]."""
        pairs = np.stack([num_tokens.ravel(), context_tokens.ravel()], axis=1)
        values, inverse = np.unique(pairs, axis=0, return_inverse=True)
        times = np.array(
            [
                self.time_s(Batch(prefill_tokens=(int(n),), prefill_context_tokens=(int(c),))) if n > 0 else 0.0
                for n, c in values.tolist()
            ]
        )
        return times[np.asarray(inverse).ravel()].reshape(num_tokens.shape)

    def _rows(self, part: str, rows: int) -> float:
        """A matrix part (``"fc"`` or ``"lm_head"``) over ``rows`` token rows [s], memoized: steps
        repeat their sizes."""
        key = (part, rows)
        hit = self._memo.get(key)
        if hit is None:
            hit = float(getattr(self, part).batch_time_s(Batch(num_decodes=rows)))
            if len(self._memo) < 8192:
                self._memo[key] = hit
        return hit

    def _fc(self, tokens: int, requests: int) -> tuple[float, float]:
        """The replicated input layer's time in the first pass and in each later pass [s]."""
        if self.fc is None:
            return 0.0, 0.0
        if self.drafter.method == "eagle3":  # combine_hidden_states: once, over the step's tokens
            return self._rows("fc", tokens), 0.0
        return self._rows("fc", tokens), self._rows("fc", requests)


def drafter_cost(drafter: Drafter, cost: Any) -> DrafterCost:
    """``drafter`` priced with the fields of ``cost``, a :class:`~budgetlab.cost.CalibratedCost` of
    the target (module docstring): its efficiencies, switches, dtypes, tensor parallelism and
    recorded CUDA graphs; ``step_overhead_s`` 0 in every part.

    Raises
    ------
    ConfigError
        ``drafter.target`` is not the model ``cost`` prices.
    """
    if drafter.target != cost.model:
        raise ConfigError(
            f"the drafter was described for {drafter.target.slug!r} but the cost prices {cost.model.slug!r}: "
            "describe it with the cost's model (Drafter.for_engine(engine, cost.model))"
        )
    bandwidth = cost.hardware.mem_bandwidth_bytes_per_s * cost.bandwidth_efficiency
    kernel_s = SMALL_KERNEL_S if cost.layer_overhead_s > 0 else 0.0
    if drafter.method == "ngram":
        return DrafterCost(drafter, bandwidth=bandwidth, kernel_s=kernel_s)
    spec = drafter.layer_spec()
    assert spec is not None
    pass_s = DRAFT_PASS_OVERHEAD_S if cost.step_overhead_s > 0 else 0.0
    base = dict(step_overhead_s=0.0, drafter=None, cudagraph_draft_sizes=())
    eager = cost.enforce_eager
    if drafter.method == "draft_model":
        graphs = dict(cudagraph_sizes=None if cost.cudagraph_sizes is None else (), cudagraph_full_sizes=())
        whole = dataclasses.replace(
            cost, model=spec, quantization=None, expert_parallel=False, cudagraph_decode_query_len=1, **graphs, **base
        )
        return DrafterCost(drafter, first=whole, rest=whole, bandwidth=bandwidth, kernel_s=kernel_s, pass_s=pass_s)
    moe = spec.is_moe
    layer = dict(
        model=spec,
        quantization=cost.quantization if drafter.method == "mtp" else None,
        expert_parallel=cost.expert_parallel and moe,
        **base,
    )
    first = dataclasses.replace(cost, **layer)
    rest = None
    if drafter.num_speculative_tokens > 1:
        sizes = None if cost.cudagraph_sizes is None else tuple(cost.cudagraph_draft_sizes)
        rest = dataclasses.replace(
            cost, cudagraph_sizes=sizes, cudagraph_full_sizes=sizes or (), cudagraph_decode_query_len=1, **layer
        )
    plain = dict(
        attention=False,
        kv_reads=False,
        all_reduce=False,
        moe=False,
        layer_overhead_s=0.0,
        quantization=None,
        expert_parallel=False,
        cudagraph_sizes=None,
        cudagraph_full_sizes=(),
        cudagraph_decode_query_len=1,
        enforce_eager=eager,
        **base,
    )
    m = drafter.target
    fc = None
    if drafter.fc_params:
        fc_spec = _linear_spec(m, f"{drafter.method}-fc", drafter.fc_params, 1)
        fc = dataclasses.replace(cost, model=fc_spec, tp=1, **plain)
    vocab = int(drafter.lm_head_params // m.hidden_size)
    lm_spec = _linear_spec(m, f"{drafter.method}-lm-head", drafter.lm_head_params, vocab)
    lm_head = dataclasses.replace(cost, model=lm_spec, **plain)
    return DrafterCost(
        drafter,
        first=first,
        rest=rest,
        fc=fc,
        lm_head=lm_head,
        bandwidth=bandwidth,
        kernel_s=kernel_s,
        pass_s=pass_s,
    )


def drafter_for_engine(current: Drafter | None, engine: EngineConfig, target: ModelSpec) -> Drafter | None:
    """The proposer of ``engine`` serving ``target``, keeping what ``current`` knows: ``current``
    itself when the engine speculates the same way, with the engine's ``k`` when only that differs,
    else :meth:`Drafter.for_engine` (with ``current``'s draft model, if any). None when the engine
    does not speculate.

    Raises
    ------
    ConfigError
        A draft-model engine and no draft model known.
    """
    k, method = engine.num_speculative_tokens, engine.speculative_method
    if not k or method is None:
        return None
    if current is not None and current.method == method and current.target == target:
        same = current.num_speculative_tokens == k
        return current if same else dataclasses.replace(current, num_speculative_tokens=k)
    return Drafter.for_engine(engine, target, draft_model=current.draft_model if current is not None else None)


def decode_run_by_step(cost: Any, num_decodes: int, contexts: np.ndarray, drafts: int) -> np.ndarray:
    """``cost.decode_run_time_s`` step by step: ``batch_time_s`` of each distinct context [s] (so
    the run equals its steps bit for bit), for runs with drafts or a proposer."""
    values, inverse = np.unique(contexts, return_inverse=True)
    batches = (Batch(num_decodes, int(c), decode_draft_tokens=int(drafts)) for c in values.tolist())
    times = np.array([cost.batch_time_s(b) for b in batches])
    return times[np.asarray(inverse).ravel()].reshape(np.shape(contexts))


@lru_cache(maxsize=64)
def _priced(drafter: Drafter, cost: Any) -> DrafterCost:
    return drafter_cost(drafter, cost)


def _template(drafter: Drafter, hardware: HardwareSpec | str, cost: Any) -> Any:
    """The target cost whose fields price the proposer: ``cost``, or the ideal roofline."""
    from budgetlab.catalog import resolve_hardware
    from budgetlab.cost.calibrated import CalibratedCost

    if not isinstance(drafter, Drafter):
        raise ParameterError(f"drafter must be a Drafter, got {type(drafter).__name__}")
    hw = resolve_hardware(hardware)
    if cost is None:
        return CalibratedCost.ideal(hw, drafter.target)
    if not isinstance(cost, CalibratedCost):
        raise ParameterError(
            f"cost must be a CalibratedCost (its fields price the proposer) or None, got {type(cost).__name__}"
        )
    if cost.hardware != hw:
        raise ParameterError(f"cost prices {cost.hardware.slug!r}, not the hardware given ({hw.slug!r})")
    return cost.with_(drafter=None)


def drafter_terms(
    batch: Batch, drafter: Drafter, hardware: HardwareSpec | str, *, cost: Any = None
) -> dict[str, float]:
    """The proposer's parts in one step [s], by :data:`DRAFTER_TERM_NAMES` (module docstring).

    Parameters
    ----------
    batch : Batch
        The step's composition (its decodes' drafts in ``decode_draft_tokens``).
    drafter : Drafter
    hardware : HardwareSpec or str
    cost : CalibratedCost or None
        The target's cost, whose fields price the proposer (efficiencies, overheads, CUDA graphs
        recorded by :meth:`~budgetlab.cost.CalibratedCost.for_engine`, ...); None: the ideal
        roofline (:meth:`CalibratedCost.ideal <budgetlab.cost.CalibratedCost.ideal>`).

    Examples
    --------
    >>> from budgetlab.specs import Batch
    >>> eagle = Drafter("eagle", 3, "llama-3.1-8b")
    >>> terms = drafter_terms(Batch(num_decodes=1, decode_context_tokens=100, decode_draft_tokens=3), eagle, "h100-sxm")
    >>> round(terms["draft_lm_head"] * 1e6, 1)  # 3 × 525.3 M weights × 2 B / 3.35 TB/s
    940.9
    """
    return _priced(drafter, _template(drafter, hardware, cost)).terms(batch)


def drafter_time_s(batch: Batch, drafter: Drafter, hardware: HardwareSpec | str, *, cost: Any = None) -> float:
    """The proposer's time in one step [s]: the sum of :func:`drafter_terms`."""
    return _priced(drafter, _template(drafter, hardware, cost)).time_s(batch)
