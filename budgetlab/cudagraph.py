"""CUDA graphs as vLLM 0.33 captures and dispatches them: which batch sizes have a graph, and
which graph (if any) one step runs with.

vLLM captures CUDA graphs at start-up for a ladder of batch sizes [tokens] and, at every step,
pads the batch to the smallest captured size that holds it. A step with no graph large enough
runs eagerly, every kernel launched from Python, which is why a decode batch just past the top
of the ladder costs more than one just below it. This module restates the rules (never the
code) of the vLLM 0.33.0 wheel, file and function named for each; what each mode costs is
:mod:`budgetlab.cost.step_terms`'s (padding, launch time). ``tests/fixtures/cudagraph/`` holds
the table that vLLM's own functions computed and ``tests/test_cudagraph.py`` checks this module
against it.

Defaults that hold throughout
-----------------------------
G1. Mode. ``vllm serve`` starts at optimization level O2, whose ``cudagraph_mode`` is
    ``FULL_AND_PIECEWISE`` (``config/vllm.py``, ``OPTIMIZATION_LEVEL_02``; O3 is the same):
    FULL graphs (the whole forward pass, attention included) for uniform decode batches and
    PIECEWISE graphs (everything between the attention calls) for every other batch.
    ``EngineConfig(enforce_eager=True)`` sets the mode to NONE and empties the sizes
    (``VllmConfig.__post_init__``): no graph is captured and every step runs eagerly. Model
    families vLLM downgrades (pooling models: PIECEWISE only; encoder-decoder: FULL decode only)
    and user-set ``cudagraph_mode`` / ``performance_mode="interactivity"`` are not modelled.
G2. Query length of a decode. A uniform decode gives every request ``q = 1 +
    num_speculative_tokens`` query tokens (``VllmConfig.uniform_decode_query_len``,
    ``config/vllm.py``; Model Runner V2's ``decode_query_len``, ``v1/worker/gpu/model_runner.py``):
    ``q = 1`` without speculative decoding, ``1 + k`` with ``EngineConfig(num_speculative_tokens=k)``
    whatever the method (n-gram, draft model, EAGLE, EAGLE-3, MTP).
G3. Blackwell. The platform ceiling is 1,024 tokens on a GPU of compute capability 10.x and
    512 elsewhere (``current_platform.is_device_capability_family(100)``,
    ``platforms/interface.py``: the major version is 10). :class:`~budgetlab.specs.HardwareSpec`
    has no compute capability, so :func:`is_data_center_blackwell` reads the catalog slug and
    name: B100, B200, B300, GB200 and GB300 are 10.x (the catalog's ``b200``); the RTX 50 and
    RTX PRO Blackwell cards are 12.x and keep 512.

Capture sizes (``VllmConfig._set_cudagraph_sizes``, ``config/vllm.py``)
---------------------------------------------------------------------
Write ``S`` for ``max_num_seqs``, ``B`` for ``max_num_batched_tokens``, ``P`` for the platform
ceiling (G3) and ``ladder(c)`` for 1, 2, 4, the multiples of 8 from 8 to 248, then the
multiples of 16 from 256, every entry at most ``c``.

C1. With ``enforce_eager``: no sizes (G1), whatever else is set.
C2. The ceiling. Without ``max_cudagraph_capture_size``: ``min(2·S·q, P)``; with it, that value.
    Either way it is then clipped to the budget: ``ceiling = min(B, ceiling)``.
C3. User sizes. With ``cudagraph_capture_sizes``: those sizes, duplicates dropped, those above
    ``B`` dropped (not those above the ceiling), sorted ascending. Nothing else is added.
C4. Default sizes. Otherwise ``ladder(ceiling)``; plus ``B`` itself when ``B <= ceiling`` (so an
    off-stride budget is captured); plus the decode sizes of C5 that are ``<= B``; duplicates
    dropped, sorted ascending.
C5. Decode sizes, only when ``max_cudagraph_capture_size`` is not set. With ``q = 1``: ``S``,
    if ``S <= min(2·S, P)``, i.e. if ``S <= P``. With ``q > 1``: ``n·q`` for every request count
    ``n`` in ``ladder(m)`` plus ``m`` itself, ``m = min(S, P)``, that is ``<= min(2·S·q, P)``
    (the ``request_counts`` grid of ``_set_cudagraph_sizes``: it scales a request-count ladder by
    ``q`` rather than widening the token ladder, so every decode size is a multiple of ``q``;
    dynamic speculative decoding's tiers are not modelled). The V1 runner's
    ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` (every size rounded up to a
    multiple of ``q``) runs only when ``use_v2_model_runner`` is false
    (``resolve_cudagraph_mode_and_sizes``, ``config/compilation.py``); vLLM 0.33 runs V2 for
    all five methods budgetlab models, so the sizes stay as C1-C6 give them.
C6. The largest size becomes ``max_cudagraph_capture_size``; with both user fields set they must
    agree (vLLM refuses to start otherwise: :class:`~budgetlab.specs.EngineConfig` raises
    ``ConfigError``), with only the maximum set it is truncated to the largest ladder entry with
    a warning. No sizes at all (every user size above ``B``) means no graphs.

So the default H100 engine (``S`` = 1,024, ``B`` = 8,192) captures 51 sizes up to 512, and
``S`` is not among them; ``S`` = 256 captures the same 51; ``S`` = 8 captures 1, 2, 4, 8, 16.

Dispatch (Model Runner V2: ``CudaGraphManager._init_candidates`` and ``dispatch``,
``v1/worker/gpu/cudagraph_utils.py``)
-------------------------------------------------------------------------------------------------
vLLM 0.33 runs Model Runner V2 by default (``VllmConfig.use_v2_model_runner``); the V1 runner's
``v1/cudagraph_dispatcher.py`` gives the same answers when ``q = 1`` and is not modelled
otherwise.

D1. FULL sizes. Each capture size ``s`` rounded up to a multiple of ``q`` is a FULL graph for
    ``round_up(s, q) / q`` requests of ``q`` tokens each, if ``round_up(s, q) <= q·S`` and
    ``<= max_cudagraph_capture_size`` (:func:`full_graph_sizes`). With ``q = 1``: the capture
    sizes up to ``S``. Every capture size is also a PIECEWISE graph.
D2. Uniform decode. A batch is a uniform decode when every request is decoding (or continues a
    prompt by one token) and all schedule the same number of tokens, ``q``
    (``GPUModelRunner.gather_batch_req_state``, ``get_uniform_decode_token_count``; the FULL
    graph's ``uniform_token_count`` must equal it, ``_is_compatible``). It runs the smallest
    FULL size ``>= num_tokens``, if there is one; only that one is tried. With ``q > 1`` that
    means every decode verifies ``k`` drafts and no prompt is in the step: a one-token prompt
    continuation schedules 1 token, not ``q``, and a decode whose drafts were trimmed fewer
    (:func:`is_uniform_decode`); such a batch runs PIECEWISE (D3).
D3. Otherwise (a mixed batch, or a uniform one above the largest FULL size) it runs PIECEWISE,
    padded to the smallest capture size ``>= num_tokens``.
D4. Above the largest capture size there is no graph: mode NONE, the batch unpadded. With no
    sizes at all (C1, C6) every batch is NONE.

So on the default H100 engine a decode batch of 300 runs FULL padded to 304, one of 600 runs
NONE (600 > 512); with ``S`` = 256 a batch of 300 tokens is never a decode (at most 256
requests) and runs PIECEWISE at 304.

With speculative decoding (``k = 3``, ``q = 4``) and ``S = 8``, ``B = 2048``: the ceiling is
``min(2·8·4, 512) = 64``, the ladder 1, 2, 4, 8, ..., 64 and the decode sizes ``4·{1, 2, 4, 8}
= 4, 8, 16, 32`` (all in it), so the capture sizes are 1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64;
the FULL sizes are those rounded up to multiples of 4 and at most ``4·8 = 32``: 4, 8, 16, 24,
32. Five decodes verifying 3 drafts each (20 tokens) run FULL at 24 (six requests' worth); five
decodes of which one verifies 2 (19 tokens) run PIECEWISE at 24; eight of 4 tokens (32) run FULL
at 32 and 64 tokens with a prompt chunk run PIECEWISE at 64.

The drafter's own graphs (Model Runner V2, ``v1/worker/gpu/spec_decode/``)
-------------------------------------------------------------------------
P1. EAGLE, EAGLE-3 and MTP (``TargetDependentARSpeculator.init_cudagraph_manager``): the first
    pass over the step's tokens has its own manager with the engine's mode, sizes and ``q``, and
    is dispatched on the target's padded token count and uniform token count
    (``propose``): it runs in the same mode, padded to the same size, as the target's step.
P2. Their ``k − 1`` single-token passes run ``FULL_DECODE_ONLY`` with ``q = 1`` (PIECEWISE graphs
    are not supported for draft decodes): FULL at the smallest capture size ``>=`` the step's
    request count among those ``<= max_num_seqs`` (D1 with ``q = 1``,
    :func:`draft_decode_graph_sizes`), else no graph.
P3. A draft model (``StandaloneARSpeculator``: "CUDA graph not yet supported") and the n-gram
    kernels (``NgramGPUSpeculator``) capture nothing: every pass runs without a graph.
"""

from __future__ import annotations

import bisect
import re
from functools import lru_cache

from budgetlab._checks import flag, int_at_least
from budgetlab.errors import ParameterError
from budgetlab.specs import EngineConfig, HardwareSpec

__all__ = [
    "CUDAGRAPH_MODES",
    "PLATFORM_CEILING_TOKENS",
    "BLACKWELL_CEILING_TOKENS",
    "cudagraph_capture_sizes",
    "cudagraph_dispatch",
    "draft_decode_graph_sizes",
    "full_graph_sizes",
    "is_uniform_decode",
    "is_data_center_blackwell",
    "uniform_decode_query_len",
]

#: The runtime modes :func:`cudagraph_dispatch` returns, as vLLM's ``CUDAGraphMode`` names them.
CUDAGRAPH_MODES = ("FULL", "PIECEWISE", "NONE")
#: Default capture ceiling [tokens] off Blackwell (G3).
PLATFORM_CEILING_TOKENS = 512
#: Default capture ceiling [tokens] on a compute-capability 10.x GPU (G3).
BLACKWELL_CEILING_TOKENS = 1024

# B100, B200, B300, GB200, GB300 as a word (not the H200, GH200 or an RTX PRO Blackwell)
_SM100_FAMILY = re.compile(r"(?<![a-z0-9])g?b[123]00(?![0-9])")


def is_data_center_blackwell(hardware: HardwareSpec) -> bool:
    """Whether vLLM would see compute capability 10.x on ``hardware`` (rule G3).

    Read from the catalog slug and name (``HardwareSpec`` has no compute capability): B100,
    B200, B300, GB200 or GB300 as a word in either.
    """
    if not isinstance(hardware, HardwareSpec):
        raise ParameterError(f"hardware must be a HardwareSpec (budgetlab.hardware('h100-sxm')), got {hardware!r}")
    return bool(_SM100_FAMILY.search(f"{hardware.slug} {hardware.name}".lower()))


def uniform_decode_query_len(engine: EngineConfig) -> int:
    """Query tokens per request in a uniform decode batch: ``1 + num_speculative_tokens`` (G2).

    ``num_speculative_tokens`` is read from ``engine`` when it has one, else 0.
    """
    if not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig, got {engine!r}")
    spec = getattr(engine, "num_speculative_tokens", 0)
    return 1 + int_at_least("num_speculative_tokens", spec, 0, what="an int >= 0")


def is_uniform_decode(
    q: int, num_decodes: int, num_draft_tokens: int, chunks: tuple[int, ...], contexts: tuple[int, ...]
) -> bool:
    """Whether vLLM 0.33 runs a step as a uniform decode of ``q`` tokens a request (rule D2).

    Every request must schedule ``q`` tokens and none be prefilling, a prompt continued by one
    token over a cached context counting as a decode of one token. With ``q = 1``: no drafts, and
    every prefill chunk one token over a non-empty context. With ``q > 1``: no prefill chunk and
    ``num_draft_tokens == num_decodes × (q − 1)`` (a decode verifies at most ``q − 1`` drafts, so
    each verifies exactly that many).

    Parameters
    ----------
    q : int
        :func:`uniform_decode_query_len` of the engine [tokens].
    num_decodes, num_draft_tokens : int, int
        The step's decodes [count] and the drafts they verify together [tokens]
        (``Batch.num_decodes``, ``Batch.decode_draft_tokens``).
    chunks, contexts : tuple of int, tuple of int
        The prefill chunks [tokens] and the cached tokens before each [tokens].
    """
    if q == 1:
        return not num_draft_tokens and all(n == 1 and x > 0 for n, x in zip(chunks, contexts))
    return not chunks and num_decodes > 0 and num_draft_tokens == num_decodes * (q - 1)


def _ladder(limit: int) -> list[int]:
    """1, 2, 4, multiples of 8 below 256, multiples of 16 from 256: each at most ``limit``."""
    return (
        [n for n in (1, 2, 4) if n <= limit] + list(range(8, min(limit + 1, 256), 8)) + list(range(256, limit + 1, 16))
    )


@lru_cache(maxsize=256)
def _sizes(
    max_num_seqs: int,
    budget: int,
    q: int,
    user_sizes: tuple[int, ...] | None,
    user_max: int | None,
    eager: bool,
    platform_ceiling: int,
) -> tuple[int, ...]:
    """Rules C1-C6 on plain values (cached: the simulator asks once per step)."""
    if eager:  # C1
        return ()
    decode_sizes: list[int] = []
    if user_max is None:  # C2 and C5
        ceiling = min(2 * max_num_seqs * q, platform_ceiling)
        if q > 1:
            most = min(max_num_seqs, platform_ceiling)
            decode_sizes = [n * q for n in {*_ladder(most), most} if n * q <= ceiling]
        elif max_num_seqs <= ceiling:
            decode_sizes = [max_num_seqs]
    else:
        ceiling = user_max
    ceiling = min(budget, ceiling)
    if user_sizes is not None:  # C3
        return tuple(sorted({s for s in user_sizes if s <= budget}))
    sizes = set(_ladder(ceiling))  # C4
    if budget <= ceiling:
        sizes.add(budget)
    sizes.update(s for s in decode_sizes if s <= budget)
    return tuple(sorted(sizes))


@lru_cache(maxsize=256)
def _full(sizes: tuple[int, ...], q: int, max_num_seqs: int) -> tuple[int, ...]:
    """Rule D1 on plain values."""
    if not sizes:
        return ()
    limit = min(q * max_num_seqs, sizes[-1])
    return tuple(sorted({r for r in (-(-s // q) * q for s in sizes) if r <= limit}))


def _engine_sizes(engine: EngineConfig, hardware: HardwareSpec) -> tuple[int, ...]:
    q = uniform_decode_query_len(engine)  # checks the engine first
    blackwell = is_data_center_blackwell(hardware)
    return _sizes(
        engine.max_num_seqs,
        engine.max_num_batched_tokens,
        q,
        engine.cudagraph_capture_sizes,
        engine.max_cudagraph_capture_size,
        engine.enforce_eager,
        BLACKWELL_CEILING_TOKENS if blackwell else PLATFORM_CEILING_TOKENS,
    )


def cudagraph_capture_sizes(engine: EngineConfig, hardware: HardwareSpec) -> list[int]:
    """The batch sizes vLLM 0.33 captures CUDA graphs for, ascending [tokens] (rules C1-C6).

    Parameters
    ----------
    engine : EngineConfig
        ``max_num_seqs``, ``max_num_batched_tokens``, ``cudagraph_capture_sizes``,
        ``max_cudagraph_capture_size`` and ``enforce_eager`` are read.
    hardware : HardwareSpec
        Decides the platform ceiling: 1,024 tokens on B100/B200/B300/GB200/GB300, else 512.

    Returns
    -------
    list of int
        Every size is a PIECEWISE graph; the last is vLLM's final ``max_cudagraph_capture_size``.
        Empty when no graph is captured (``enforce_eager``, or every user size above the budget).

    Examples
    --------
    >>> import budgetlab as bl
    >>> sizes = bl.cudagraph_capture_sizes(bl.EngineConfig.vllm_defaults(bl.hardware("h100-sxm")),
    ...                                    bl.hardware("h100-sxm"))
    >>> sizes[:5], sizes[-1], len(sizes)
    ([1, 2, 4, 8, 16], 512, 51)
    """
    return list(_engine_sizes(engine, hardware))


def full_graph_sizes(engine: EngineConfig, hardware: HardwareSpec) -> list[int]:
    """The token counts captured as FULL (uniform decode) graphs, ascending [tokens] (rule D1).

    Each is ``round_up(s, q)`` of a capture size ``s``, kept when it is at most
    ``q · max_num_seqs`` and at most the largest capture size; ``q = 1 + num_speculative_tokens``.
    """
    return list(_full(_engine_sizes(engine, hardware), uniform_decode_query_len(engine), engine.max_num_seqs))


def draft_decode_graph_sizes(engine: EngineConfig, hardware: HardwareSpec) -> list[int]:
    """The FULL graph sizes of an EAGLE, EAGLE-3 or MTP drafter's single-token passes [tokens]
    (rule P2): the engine's capture sizes up to ``max_num_seqs`` (D1 with ``q = 1``). Empty for
    an engine without graphs.

    Examples
    --------
    >>> import budgetlab as bl
    >>> engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, num_speculative_tokens=3,
    ...                          speculative_method="eagle3")
    >>> draft_decode_graph_sizes(engine, bl.hardware("h100-sxm"))
    [1, 2, 4, 8]
    """
    return list(_full(_engine_sizes(engine, hardware), 1, engine.max_num_seqs))


def cudagraph_dispatch(
    engine: EngineConfig, hardware: HardwareSpec, num_tokens: int, uniform_decode: bool
) -> tuple[str, int]:
    """The graph one step of ``num_tokens`` runs with in vLLM 0.33, and its padded size (D1-D4).

    Parameters
    ----------
    engine : EngineConfig
    hardware : HardwareSpec
    num_tokens : int
        Tokens the step schedules [tokens], >= 1.
    uniform_decode : bool
        Whether every request is a decode of ``q = 1 + num_speculative_tokens`` tokens (D2);
        then ``num_tokens`` must be a multiple of ``q``.

    Returns
    -------
    (mode, padded_num_tokens) : (str, int)
        ``mode`` is ``"FULL"``, ``"PIECEWISE"`` or ``"NONE"``; ``padded_num_tokens`` [tokens] is
        the captured size the batch is padded to, or ``num_tokens`` itself under ``"NONE"``.

    Raises
    ------
    ParameterError
        ``num_tokens`` not an int >= 1, ``uniform_decode`` not a bool, or a uniform decode whose
        ``num_tokens`` is not a multiple of ``q``.

    Examples
    --------
    >>> import budgetlab as bl
    >>> h100 = bl.hardware("h100-sxm")
    >>> engine = bl.EngineConfig.vllm_defaults(h100)  # max_num_seqs 1024, budget 8192
    >>> bl.cudagraph_dispatch(engine, h100, 300, True), bl.cudagraph_dispatch(engine, h100, 600, True)
    (('FULL', 304), ('NONE', 600))
    """
    num_tokens = int_at_least("num_tokens", num_tokens, 1, what="an int >= 1 (tokens the step schedules)")
    uniform = flag("uniform_decode", uniform_decode)
    sizes = _engine_sizes(engine, hardware)
    q = uniform_decode_query_len(engine)
    if uniform and num_tokens % q:
        raise ParameterError(
            f"a uniform decode gives every request q = {q} tokens (1 + num_speculative_tokens), so "
            f"num_tokens must be a multiple of {q}, got {num_tokens}; pass uniform_decode=False "
            "for a mixed batch"
        )
    if not sizes or num_tokens > sizes[-1]:  # D4
        return "NONE", num_tokens
    if uniform:  # D2
        full = _full(sizes, q, engine.max_num_seqs)
        at = bisect.bisect_left(full, num_tokens)
        if at < len(full):
            return "FULL", full[at]
    return "PIECEWISE", sizes[bisect.bisect_left(sizes, num_tokens)]  # D3
