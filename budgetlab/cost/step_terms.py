"""CUDA graphs in the step cost, and the named breakdown of one step's time.

:class:`~budgetlab.cost.CalibratedCost` prices a step from its composition (its terms are in
:mod:`budgetlab.cost.calibrated`). This module holds that one formula (:func:`step_time_s`),
what it needs to price the step the way vLLM 0.33 runs it -- with a FULL CUDA graph, a
PIECEWISE one, or none (:mod:`budgetlab.cudagraph` restates the capture and dispatch rules) --
and :class:`StepTerms`, the step time split into named terms that add up to it.

CUDA-graph terms
----------------
:meth:`CalibratedCost.for_engine <budgetlab.cost.CalibratedCost.for_engine>` records the
engine's capture sizes (:func:`~budgetlab.cudagraph.cudagraph_capture_sizes`), its FULL sizes
(:func:`~budgetlab.cudagraph.full_graph_sizes`) and ``enforce_eager``. Without them (a cost
built without an engine) no step has a mode and none of the terms below applies. With them,
each step is dispatched as :func:`~budgetlab.cudagraph.cudagraph_dispatch` does: a *uniform
decode* -- every chunk one token over a non-empty context (a decode, or a prompt continued by
one token, which vLLM also runs as a decode) -- runs FULL when a FULL size holds it; any other
step up to the largest capture size runs PIECEWISE; a larger one runs with no graph (NONE).
The lookup is a bisection over the sizes (:class:`GraphDispatch`), so it costs the simulator's
per-step path well under a microsecond.

``graph_padding`` (switch)
    In FULL and PIECEWISE a step runs on the captured size it was padded to, so the linear
    layers' math (the compute roof's ``T(n)``, before GEMM tiles) is that of the padded token
    count, and so is the all-reduce's message (:class:`AllReduceTable`; the ring formula keeps
    the real tokens). Attention FLOPs and weight and KV bytes stay those of the real tokens. A
    memory-bound decode step hides the extra math; a compute-bound mixed step pays it (a
    257-token step padded to 272 costs the linear math of 272).
``piecewise_layer_launch_s`` [s per layer]
    Host (CPU) time per layer when the compiled model runs outside a FULL graph: in PIECEWISE
    the attention of every layer runs eagerly between the graph pieces, so each layer costs a
    Python call, the attention launches and a piece replay. A NONE step of an engine that
    captures graphs (a batch above the ladder) runs the same compiled pieces without replay
    and is given the same time (a lower bound: it launches each compiled kernel itself).
``eager_layer_launch_s`` [s per layer]
    Host time per layer of an uncompiled eager forward: ``enforce_eager`` turns both
    ``torch.compile`` and CUDA graphs off (``VllmConfig.__post_init__``), so every step is NONE
    and launches every kernel from Python.

How the launch time shows. The host enqueues kernels ahead of the GPU, so launch time lengthens
a step only where it exceeds the GPU work it feeds: the step pays
``max(0, layers × launch_s − gpu_forward_s)`` with ``gpu_forward_s = layers ×
layer_overhead_s + roof + all-reduce`` (named ``piecewise_launch`` or ``eager_launch``). The
evidence that the excess, not the sum, is paid: without CUDA graphs Llama 2 7B decoded 12 %
slower at batch 1 and no slower at larger batches (vllm-project/vllm PR #1440); on one B200
(vLLM 0.23, issue #47089) PIECEWISE instead of FULL made Qwen3-0.6B 2.4× slower per token at
batch 1 but Qwen3-235B-A22B (94 layers of far more GPU work) only 5 % slower; SGLang measured the
same throughput with and without CUDA graphs for Qwen2-7B at TP1 (sgl-project/sglang PR #2360).
The values and their derivations are in :mod:`budgetlab.cost.presets`.

The breakdown
-------------
:func:`breakdown` recomputes a step the way :func:`step_time_s` prices it and names each part
(:data:`STEP_TERM_NAMES`): the overheads; the binding roof's parts at full value (weight and KV
reads, and ``state_read``, when memory binds; linear math, ``graph_padding``,
``moe_block_padding`` (:mod:`budgetlab.cost.moe_step`), attention math, ``draft_attention``,
``mla_projection`` and ``recurrent_math`` when compute binds; the layout terms are those of
:mod:`budgetlab.cost.attention_terms`, 0 for a model without a layout)
and the other roof's parts at 0, since the roof hides them; ``knee_overlap_loss``; the
all-reduce; the launch term of the step's mode (``piecewise_launch`` for PIECEWISE,
``eager_launch`` for a step without a graph); and the proposer, ``drafter`` (speculative
decoding, below). The terms add up to the step time to rounding. A
new term (an expert read, an all-reduce regime) takes a name in :data:`STEP_TERM_NAMES` and is
computed in both functions, in the same place of the formula.

A FULL step's replay costs a few microseconds of host time, left to ``step_overhead_s``.

Speculative decoding
--------------------
A decode that verifies ``d`` drafts runs ``q = 1 + d`` query tokens (``Batch.decode_draft_tokens``
counts the drafts of all decodes). Every query token goes through the linear layers, the
all-reduce and the LM head like any other token (it is in ``Batch.num_tokens``); the decode reads
its context's KV once, as without drafts, while its queries attend to ``context + 1``, ...,
``context + q`` keys. The pairs the drafts add over a plain decode are the term
``draft_attention`` (:func:`~budgetlab.cost.attention_terms.draft_pairs`, on the compute roof).
With an engine that speculates (:meth:`CalibratedCost.for_engine
<budgetlab.cost.CalibratedCost.for_engine>` records ``q = 1 + k``) a step is a uniform decode when
it holds no prefill chunk and every decode verifies ``k`` drafts (``decode_draft_tokens ==
num_decodes × k``): it runs FULL on a FULL size, a multiple of ``q`` (:mod:`budgetlab.cudagraph`,
D1-D2); any other step (a decode whose drafts the budget trimmed, a one-token prompt extension)
runs PIECEWISE. The proposer's own passes are the term ``drafter``
(:mod:`budgetlab.cost.speculative_terms`), added to the step when the cost prices an engine that
speculates; :attr:`StepTerms.drafter_terms` names its parts.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from budgetlab._checks import finite_array
from budgetlab.cost.attention_terms import LayoutStep, attended_pairs, draft_pairs, layout_step
from budgetlab.cost.step_constants import FUSED_NORM_S as FUSED_NORM_S
from budgetlab.cost.step_constants import AllReduceTable as AllReduceTable
from budgetlab.cost.step_constants import _Constants, all_reduce_time_s
from budgetlab.cost.step_constants import knee_loss as knee_loss
from budgetlab.cudagraph import (
    cudagraph_capture_sizes,
    draft_decode_graph_sizes,
    full_graph_sizes,
    is_uniform_decode,
    uniform_decode_query_len,
)
from budgetlab.display import html_table, one_line
from budgetlab.errors import ConfigError
from budgetlab.specs import Batch
from budgetlab.text import fmt_latency

__all__ = ["GRAPH_MODES", "STEP_TERM_NAMES", "GraphDispatch", "StepTerms"]

#: The modes a dispatched step runs with, indexed by the codes :class:`GraphDispatch` returns.
GRAPH_MODES = ("FULL", "PIECEWISE", "NONE")
FULL, PIECEWISE, NONE = 0, 1, 2

#: The terms of :meth:`CalibratedCost.step_terms <budgetlab.cost.CalibratedCost.step_terms>`,
#: in order. Every term is present (0 when off or hidden).
STEP_TERM_NAMES = (
    "step_overhead",
    "layer_overhead",
    "weight_read",
    "kv_read",
    "state_read",
    "linear_math",
    "graph_padding",
    "moe_block_padding",
    "attention_math",
    "draft_attention",
    "mla_projection",
    "recurrent_math",
    "knee_overlap_loss",
    "all_reduce",
    "piecewise_launch",
    "eager_launch",
    "drafter",
)


@dataclass(frozen=True, slots=True)
class GraphDispatch:
    """An engine's CUDA-graph sizes as floats, ascending, for a fast dispatch (rules D1-D4).

    Attributes
    ----------
    sizes : tuple of float
        Capture sizes [tokens] (every one a PIECEWISE graph); empty: no graph at all.
    full : tuple of float
        FULL (uniform decode) sizes [tokens].
    """

    sizes: tuple[float, ...]
    full: tuple[float, ...]

    def scalar(self, tokens: float, uniform: bool) -> tuple[int, float]:
        """``(mode code, padded tokens)`` of one step of ``tokens`` tokens (a float)."""
        sizes = self.sizes
        if not sizes or tokens > sizes[-1]:
            return NONE, tokens
        if uniform:
            full = self.full
            at = bisect_left(full, tokens)
            if at < len(full):
                return FULL, full[at]
        return PIECEWISE, sizes[bisect_left(sizes, tokens)]

    def arrays(self, tokens: np.ndarray, uniform: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized :meth:`scalar`: mode codes (int8) and padded tokens (float) per step."""
        tokens = np.asarray(tokens, dtype=float)
        modes = np.full(tokens.shape, NONE, dtype=np.int8)
        padded = tokens.copy()
        if not self.sizes:
            return modes, padded
        sizes = np.asarray(self.sizes)
        inside = tokens <= sizes[-1]
        at = np.minimum(np.searchsorted(sizes, tokens, side="left"), len(sizes) - 1)
        modes[inside] = PIECEWISE
        padded[inside] = sizes[at[inside]]
        if self.full:
            full = np.asarray(self.full)
            at_full = np.searchsorted(full, tokens, side="left")
            is_full = inside & np.asarray(uniform, dtype=bool) & (at_full < len(full))
            modes[is_full] = FULL
            padded[is_full] = full[np.minimum(at_full, len(full) - 1)[is_full]]
        return modes, padded


def _tiles(tokens: float, tile_tokens: int | None) -> float:
    if tile_tokens is None:
        return tokens
    return float(math.ceil(tokens / tile_tokens)) * tile_tokens


def engine_graphs(engine: Any, hardware: Any) -> dict[str, Any]:
    """An engine's CUDA graphs on ``hardware`` as :meth:`CalibratedCost.for_engine
    <budgetlab.cost.CalibratedCost.for_engine>` records them, by field name: its capture sizes
    and FULL (uniform decode) sizes [tokens], the query tokens of its uniform decode ``q = 1 +
    num_speculative_tokens``, its drafter's single-token FULL sizes and ``enforce_eager``."""
    q = uniform_decode_query_len(engine)
    return {
        "cudagraph_sizes": tuple(cudagraph_capture_sizes(engine, hardware)),
        "cudagraph_full_sizes": tuple(full_graph_sizes(engine, hardware)),
        "cudagraph_decode_query_len": q,
        "cudagraph_draft_sizes": tuple(draft_decode_graph_sizes(engine, hardware)) if q > 1 else (),
        "enforce_eager": bool(engine.enforce_eager),
    }


def graph_constants(cost: Any) -> tuple[GraphDispatch | None, tuple[float, float, float] | None]:
    """A cost's dispatch table and host launch time per step by mode code [s] (``None``: no
    term), from its ``cudagraph_*`` fields and launch times (see the module docstring)."""
    if cost.cudagraph_sizes is None:
        return None, None
    graph = GraphDispatch(tuple(map(float, cost.cudagraph_sizes)), tuple(map(float, cost.cudagraph_full_sizes)))
    layers = cost.model.num_layers
    piecewise_s = layers * cost.piecewise_layer_launch_s
    none_s = layers * (cost.eager_layer_launch_s if cost.enforce_eager else cost.piecewise_layer_launch_s)
    return graph, ((0.0, piecewise_s, none_s) if piecewise_s > 0 or none_s > 0 else None)


def step_time_s(
    c: _Constants,
    per_token_s: float,
    tokens: Any,
    pairs: Any,
    kv_tokens: Any,
    weight_read_s: Any,
    padded: Any = None,
    launch_s: Any = None,
    eager: Any = False,
    layout_s: LayoutStep | None = None,
) -> Any:
    """Step time [s] from token count, attention pairs and KV tokens read: the one formula of
    :class:`~budgetlab.cost.CalibratedCost` (its module docstring, and this one for the graph
    terms). ``padded`` is the tokens the linear layers run on (``None``: ``tokens``);
    ``launch_s`` the host launch time the GPU work may hide (``None``: no term); ``eager``
    whether the step runs without a CUDA graph (its all-reduces then pay their launch);
    ``layout_s`` the terms of the layers other than full attention
    (:func:`~budgetlab.cost.attention_terms.layout_step`; ``None``: a model without them).

    Takes Python floats (the simulator's per-step path, ~1 µs) or float arrays (vectorized
    sweeps and decode runs). Only correctly rounded operations (+, −, ×, ÷, max, min, ceil) run
    here, in the same order on both paths, so a scalar and an array call give identical bits.
    """
    scalar = isinstance(tokens, float)
    memory_s = weight_read_s
    if c.kv_reads:
        memory_s = memory_s + kv_tokens * c.kv_s_per_token
        if layout_s is not None:
            memory_s = memory_s + layout_s.memory_s
    linear_tokens = tokens if padded is None else padded
    graph_tokens = linear_tokens
    if c.tile_tokens is not None:
        tiles = float(math.ceil(linear_tokens / c.tile_tokens)) if scalar else np.ceil(linear_tokens / c.tile_tokens)
        linear_tokens = tiles * c.tile_tokens
    compute_s = linear_tokens * per_token_s
    if c.moe_padding is not None:
        compute_s = compute_s + c.moe_padding.padding_s(graph_tokens)
    if c.attention:
        compute_s = compute_s + pairs * c.attention_s_per_pair
        if layout_s is not None:
            compute_s = compute_s + layout_s.compute_s
    roof_s = max(memory_s, compute_s) if scalar else np.maximum(memory_s, compute_s)
    if c.knee_overlap_loss > 0:
        low_s = min(memory_s, compute_s) if scalar else np.minimum(memory_s, compute_s)
        roof_s = roof_s + c.knee_overlap_loss * low_s * (low_s / roof_s)
    time_s = c.overhead_s + roof_s
    all_reduce_s = 0.0
    if c.all_reduce:
        all_reduce_s = all_reduce_time_s(c, tokens, padded, eager)
        time_s = time_s + all_reduce_s
    if launch_s is not None:  # host launch time beyond the GPU work it feeds
        excess_s = launch_s - (c.layers_overhead_s + roof_s + all_reduce_s)
        time_s = time_s + (max(0.0, excess_s) if scalar else np.maximum(0.0, excess_s))
    if scalar:
        return time_s if tokens > 0 else 0.0
    return np.where(tokens > 0, time_s, 0.0)


def batch_sums(batch: Batch) -> tuple[float, float, float]:
    """``(tokens, attention pairs, KV tokens read)`` of a step, as
    :meth:`CalibratedCost.batch_time_s <budgetlab.cost.CalibratedCost.batch_time_s>` sums them."""
    if len(batch.prefill_tokens) != len(batch.prefill_context_tokens):
        raise ValueError(
            f"Batch has {len(batch.prefill_tokens)} prefill chunks but "
            f"{len(batch.prefill_context_tokens)} context entries; give one "
            "prefill_context_tokens entry per chunk"
        )
    prefill_tokens = prefill_pairs = prefill_context = 0.0
    for chunk, context in zip(batch.prefill_tokens, batch.prefill_context_tokens, strict=True):
        n, c = float(chunk), float(context)
        prefill_tokens = prefill_tokens + n
        prefill_pairs = prefill_pairs + attended_pairs("full", n, c)
        prefill_context = prefill_context + c
    decodes = float(batch.num_decodes)
    decode_context = float(batch.decode_context_tokens)
    tokens = (decodes + float(batch.decode_draft_tokens)) + prefill_tokens  # + 0.0 is exact: no drafts, no change
    pairs = prefill_pairs + (decode_context + decodes)
    kv_tokens = prefill_context + decode_context
    return tokens, pairs, kv_tokens


def batch_draft_pairs(batch: Batch) -> float:
    """The attention pairs the step's drafts add to its decodes' [count]: ``draft_attention``
    (:func:`~budgetlab.cost.attention_terms.draft_pairs`); 0.0 without drafts."""
    drafts = batch.decode_draft_tokens
    if not drafts:
        return 0.0
    return float(draft_pairs(float(batch.num_decodes), float(batch.decode_context_tokens), float(drafts)))


def layout_sums(c: _Constants, batch: Batch) -> LayoutStep | None:
    """The step's terms of the layers other than full attention (``None`` without them)."""
    if c.layout is None:
        return None
    decodes = float(batch.num_decodes)
    return layout_step(
        c.layout,
        decodes,
        float(batch.decode_context_tokens),
        batch.prefill_tokens,
        batch.prefill_context_tokens,
        drafts=float(batch.decode_draft_tokens),
    )


def dispatch_step(
    c: _Constants,
    tokens: float,
    chunks: tuple[int, ...],
    contexts: tuple[int, ...],
    num_decodes: int = 0,
    drafts: int = 0,
) -> tuple[int | None, float]:
    """``(mode code, padded tokens)`` of a step of ``tokens`` tokens: ``num_decodes`` decodes
    verifying ``drafts`` drafts and prefill ``chunks`` after ``contexts`` cached tokens;
    ``(None, tokens)`` without graph information."""
    if c.graph is None or tokens <= 0:
        return None, tokens
    return c.graph.scalar(tokens, is_uniform_decode(c.decode_query_len, num_decodes, drafts, chunks, contexts))


def graph_args(c: _Constants, mode: int | None, padded: float) -> tuple[float | None, float | None]:
    """``(padded, launch_s)`` for :func:`step_time_s` of a step dispatched to ``mode``."""
    if mode is None:
        return None, None
    return (padded if c.graph_padding else None), (None if c.launch_s is None else c.launch_s[mode])


def graph_modes(c: _Constants, num_tokens: Any, uniform_decode: Any) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`CalibratedCost.cudagraph_modes <budgetlab.cost.CalibratedCost.cudagraph_modes>`
    on a cost's constants: mode names and padded tokens per step."""
    if c.graph is None:
        raise ConfigError(
            "this cost has no engine's CUDA graphs recorded, so steps have no mode: build it "
            "with CalibratedCost.typical(hw, model, engine=engine) or cost.for_engine(engine)"
        )
    tokens = finite_array("num_tokens", num_tokens, what="finite numbers of tokens >= 1", low=1.0, error=ValueError)
    modes, padded = c.graph.arrays(tokens, np.broadcast_to(np.asarray(uniform_decode, dtype=bool), tokens.shape))
    return np.asarray(GRAPH_MODES, dtype=object)[modes], padded.astype(np.int64)


def graph_arrays(c: _Constants, tokens: np.ndarray, context: np.ndarray) -> tuple[Any, Any, Any]:
    """``(padded, launch_s, eager)`` for :func:`step_time_s` of single-chunk steps (vectorized)."""
    if c.graph is None:
        return None, None, False
    # one chunk of one token over a cache runs as a decode of 1 token: uniform only when q = 1
    modes, padded = c.graph.arrays(tokens, (tokens == 1.0) & (context > 0.0) & (c.decode_query_len == 1))
    launch_s = None if c.launch_s is None else np.asarray(c.launch_s)[modes]
    return (padded if c.graph_padding else None), launch_s, modes == NONE


def breakdown(
    c: _Constants,
    per_token_s: float,
    tokens: float,
    pairs: float,
    kv_tokens: float,
    weight_read_s: float,
    mode: int | None,
    padded: float,
    layout_s: LayoutStep | None = None,
    draft_pairs: float = 0.0,
    drafter_terms: Mapping[str, float] | None = None,
) -> StepTerms:
    """The named terms of one step, computed as :func:`step_time_s` computes the step.

    The binding roof's terms count in full and the other roof's terms are 0 (hidden under it);
    ``knee_overlap_loss`` is what the imperfect overlap adds back. ``pairs`` are the step's
    attention pairs without its drafts', ``draft_pairs`` the drafts' (``draft_attention``);
    ``drafter_terms`` the proposer's named parts, summed into ``drafter``.
    """
    terms = dict.fromkeys(STEP_TERM_NAMES, 0.0)
    linear_padded, launch_s = graph_args(c, mode, padded)
    kv_s = kv_tokens * c.kv_s_per_token if c.kv_reads else 0.0
    memory_s = weight_read_s + kv_s if c.kv_reads else weight_read_s
    layout_kv_s = layout_state_s = 0.0
    if c.kv_reads and layout_s is not None:  # the same additions as step_time_s, in its order
        layout_kv_s, layout_state_s = layout_s.kv_s, layout_s.state_s
        memory_s = memory_s + layout_s.memory_s
    real_linear_s = _tiles(tokens, c.tile_tokens) * per_token_s
    graph_tokens = tokens if linear_padded is None else linear_padded
    linear_s = _tiles(graph_tokens, c.tile_tokens) * per_token_s
    moe_s = c.moe_padding.padding_s(graph_tokens) if c.moe_padding is not None and tokens > 0 else 0.0
    all_pairs_s = (pairs + draft_pairs) * c.attention_s_per_pair if c.attention else 0.0  # step_time_s's product
    attention_s = pairs * c.attention_s_per_pair if c.attention else 0.0
    compute_s = linear_s + moe_s if c.moe_padding is not None else linear_s
    compute_s = compute_s + all_pairs_s if c.attention else compute_s
    layout_compute = (0.0, 0.0, 0.0, 0.0)
    if c.attention and layout_s is not None:
        layout_compute = (layout_s.attention_s, layout_s.projection_s, layout_s.recurrent_s, layout_s.draft_attention_s)
        compute_s = compute_s + layout_s.compute_s
    high, low = max(memory_s, compute_s), min(memory_s, compute_s)
    knee_s = c.knee_overlap_loss * low * (low / high) if c.knee_overlap_loss > 0 and high > 0 else 0.0
    bound = "memory" if memory_s >= compute_s else "compute"
    if tokens > 0:
        if bound == "memory":
            terms["weight_read"], terms["kv_read"] = weight_read_s, kv_s + layout_kv_s
            terms["state_read"] = layout_state_s
        else:
            terms["linear_math"], terms["graph_padding"] = real_linear_s, linear_s - real_linear_s
            terms["moe_block_padding"], terms["attention_math"] = moe_s, attention_s + layout_compute[0]
            terms["mla_projection"], terms["recurrent_math"] = layout_compute[1:3]
            terms["draft_attention"] = (all_pairs_s - attention_s) + layout_compute[3]
        terms["knee_overlap_loss"] = knee_s
        terms["step_overhead"], terms["layer_overhead"] = c.step_overhead_s, c.layers_overhead_s
        eager = mode == NONE
        all_reduce_s = all_reduce_time_s(c, tokens, linear_padded, eager) if c.all_reduce else 0.0
        terms["all_reduce"] = all_reduce_s
        if launch_s is not None:
            excess_s = max(0.0, launch_s - (c.layers_overhead_s + (high + knee_s) + all_reduce_s))
            terms["eager_launch" if mode == NONE else "piecewise_launch"] = excess_s
        if drafter_terms:
            terms["drafter"] = sum(drafter_terms.values())
    return StepTerms(
        terms=MappingProxyType(terms),
        mode=None if mode is None else GRAPH_MODES[mode],
        num_tokens=int(tokens),
        padded_tokens=int(padded),
        bound=bound,
        drafter_terms=MappingProxyType(dict(drafter_terms or {})),
    )


@dataclass(frozen=True)
class StepTerms:
    """One step's time split into named terms that add up to it
    (:meth:`CalibratedCost.step_terms <budgetlab.cost.CalibratedCost.step_terms>`).

    Attributes
    ----------
    terms : Mapping of str to float
        Every name of :data:`STEP_TERM_NAMES` [s], read-only; hidden or switched-off terms are 0.
    mode : str or None
        ``"FULL"``, ``"PIECEWISE"`` or ``"NONE"``; ``None`` when the cost has no CUDA-graph
        information (built without an engine) or the step is empty.
    num_tokens : int
        Tokens the step schedules [tokens].
    padded_tokens : int
        Tokens the graph runs on [tokens]: the captured size under FULL and PIECEWISE, else
        ``num_tokens``.
    bound : str
        ``"memory"`` or ``"compute"``: the roof whose terms count in full.
    drafter_terms : Mapping of str to float
        The proposer's parts [s] that add up to the term ``drafter``, by the names of
        :data:`~budgetlab.cost.speculative_terms.DRAFTER_TERM_NAMES`; empty when the cost prices no
        proposer (an engine without speculative decoding).
    """

    terms: Mapping[str, float]
    mode: str | None
    num_tokens: int
    padded_tokens: int
    bound: str
    drafter_terms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def total_s(self) -> float:
        """The step time [s]: the sum of :attr:`terms`."""
        return float(sum(self.terms.values()))

    def as_dict(self) -> dict[str, Any]:
        """The terms [s], then ``total_s``, ``mode``, ``num_tokens``, ``padded_tokens`` and
        ``bound``: one row of a table (``pandas.DataFrame([t.as_dict() for t in ...])``)."""
        return {
            **self.terms,
            "total_s": self.total_s,
            "mode": self.mode,
            "num_tokens": self.num_tokens,
            "padded_tokens": self.padded_tokens,
            "bound": self.bound,
        }

    def _display_rows(self) -> list[tuple[str, str]]:
        head = [
            ("step", fmt_latency(self.total_s)),
            ("mode", f"{self.mode or 'not modelled'}, {self.num_tokens} tokens padded to {self.padded_tokens}"),
            ("bound", self.bound),
        ]
        parts = [(f"drafter: {name}", fmt_latency(value)) for name, value in self.drafter_terms.items() if value != 0.0]
        return head + [(name, fmt_latency(value)) for name, value in self.terms.items() if value != 0.0] + parts

    def __repr__(self) -> str:
        return one_line("StepTerms", fmt_latency(self.total_s), self._display_rows()[1:6])

    def _repr_html_(self) -> str:
        return html_table("Step terms", self._display_rows())


def graph_display(cost: Any) -> str:
    """One line on a cost's CUDA-graph modelling, for its ``repr`` and HTML table."""
    sizes = cost.cudagraph_sizes
    if sizes is None:
        return "not modelled (no engine recorded)"
    ladder = (
        "enforce_eager: none captured" if cost.enforce_eager else f"{len(sizes)} sizes up to {max(sizes, default=0)}"
    )
    full = f", FULL up to {max(cost.cudagraph_full_sizes)}" if cost.cudagraph_full_sizes else ""
    q = cost.cudagraph_decode_query_len
    full += f" ({q} tokens a decode)" if q > 1 and full else ""
    terms = [name for name in ("graph_padding",) if cost.graph_padding] + [
        f"{label} {fmt_latency(value)}/layer"
        for label, value in (("piecewise", cost.piecewise_layer_launch_s), ("eager", cost.eager_layer_launch_s))
        if value > 0
    ]
    return f"{ladder}{full}; terms: {', '.join(terms) or 'none'}"


def cost_display_rows(cost: Any) -> list[tuple[str, str]]:
    """The rows of a :class:`~budgetlab.cost.CalibratedCost`'s ``repr`` and HTML table."""
    deployment = [f"tp={cost.tp}"] + [
        f"{name}={getattr(cost, name)}"
        for name, default in (("dtype", "auto"), ("kv_cache_dtype", "auto"), ("quantization", None))
        if getattr(cost, name) != default
    ]
    if cost.expert_parallel:
        deployment.append("expert parallel")
    switches = ("attention", "kv_reads", "moe", "moe_block_padding", "all_reduce")
    terms = [name for name in switches if getattr(cost, name)]
    return [
        ("deployment", ", ".join(deployment)),
        ("weight read", fmt_latency(cost.weight_read_s)),
        ("per token", fmt_latency(cost.per_token_s)),
        ("step / layer overhead", f"{fmt_latency(cost.step_overhead_s)} / {fmt_latency(cost.layer_overhead_s)}"),
        ("bandwidth / FLOP efficiency", f"{cost.bandwidth_efficiency:.2f} / {cost.flop_efficiency:.2f}"),
        ("knee overlap loss", f"{cost.knee_overlap_loss:.2f}"),
        (
            "terms on",
            (", ".join(terms) or "none") + ("" if cost.tile_tokens is None else f"; {cost.tile_tokens}-token tiles"),
        ),
        ("CUDA graphs", graph_display(cost)),
    ] + ([("drafter", cost.drafter.describe())] if cost.drafter is not None else [])
