"""The checks of :class:`~budgetlab.cost.CalibratedCost`'s fields, run when a cost is built.

Kept apart from :mod:`budgetlab.cost.calibrated` so that module holds the cost's terms. Every
error names the field and how to mend it.
"""

from __future__ import annotations

from typing import Any

from budgetlab._checks import MAX_TIME_S, MAX_TOKENS, flag, int_at_least, number_in
from budgetlab.cost.moe_step import check_expert_parallel
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.memory import activation_dtype_bytes, check_tp, kv_dtype_bytes, weight_bytes
from budgetlab.specs import DTYPES, KV_CACHE_DTYPES, QUANTIZATIONS, HardwareSpec, ModelSpec

__all__ = ["check_deployment", "check_fields", "check_graph_sizes", "check_speculation"]


def check_fields(cost: Any) -> None:
    """Check a :class:`~budgetlab.cost.CalibratedCost`'s fields (hardware, model, deployment,
    overheads, efficiencies, switches, expert parallelism, CUDA-graph sizes).

    Raises
    ------
    ParameterError, ConfigError
        A field out of range or of the wrong type, with how to mend it.
    """
    if not isinstance(cost.hardware, HardwareSpec):
        raise ParameterError(f"hardware must be a HardwareSpec, got {type(cost.hardware).__name__}")
    if not isinstance(cost.model, ModelSpec):
        raise ParameterError(f"model must be a ModelSpec, got {type(cost.model).__name__}")
    check_tp(cost.model, cost.tp)
    check_deployment(cost)
    for name in ("step_overhead_s", "layer_overhead_s", "piecewise_layer_launch_s", "eager_layer_launch_s"):
        number_in(name, getattr(cost, name), low=0.0, what="seconds >= 0", maximum=MAX_TIME_S)
    for name in ("bandwidth_efficiency", "flop_efficiency"):
        number_in(name, getattr(cost, name), low=0.0, high=1.0, low_open=True, what="a fraction in (0, 1]")
    number_in("knee_overlap_loss", cost.knee_overlap_loss, low=0.0, high=1.0, what="a fraction in [0, 1]")
    for name in ("knee_weight_exponent", "knee_hidden_exponent"):
        number_in(name, getattr(cost, name), low=0.0, high=4.0, what="an exponent in [0, 4] (0: no scaling)")
    switches = ("attention", "kv_reads", "moe", "all_reduce", "all_reduce_kernels", "graph_padding", "enforce_eager")
    for name in (*switches, "moe_block_padding", "expert_parallel"):
        flag(name, getattr(cost, name))
    check_expert_parallel(cost)
    check_speculation(cost)
    check_graph_sizes(cost.cudagraph_sizes, cost.cudagraph_full_sizes, cost.cudagraph_decode_query_len)
    check_graph_sizes(cost.cudagraph_sizes, cost.cudagraph_draft_sizes, 1, name="cudagraph_draft_sizes")
    if cost.enforce_eager and cost.cudagraph_sizes:
        raise ParameterError(
            f"enforce_eager=True with cudagraph_sizes {cost.cudagraph_sizes!r}: an eager engine captures no "
            "graph (vLLM empties the sizes); record the engine's with cost.for_engine(engine)"
        )
    if cost.tile_tokens is not None:
        int_at_least(
            "tile_tokens",
            cost.tile_tokens,
            1,
            what="a positive int (GEMM tile rows, e.g. 64 or 128) or None to turn tile quantization off",
            maximum=MAX_TOKENS,
        )
    if cost._moe_active:
        shared = cost.model.num_params - cost.model.num_experts * cost._expert_params_all_layers
        if shared < 0:
            raise ParameterError(
                f"{cost.model.name}: num_params {cost.model.num_params:g} and num_active_params "
                f"{cost.model.num_active_params:g} imply negative shared (non-expert) parameters "
                f"for {cost.model.num_experts} experts with {cost.model.num_experts_per_token} per "
                "token; check the catalog row, or pass moe=False"
            )


def check_deployment(cost: Any) -> None:
    """``dtype``, ``kv_cache_dtype`` and ``quantization`` as EngineConfig accepts them."""
    for name, allowed in (("dtype", DTYPES), ("kv_cache_dtype", KV_CACHE_DTYPES)):
        value = getattr(cost, name)
        if not isinstance(value, str) or value not in allowed:
            raise ConfigError(
                f"CalibratedCost {name} must be one of {', '.join(allowed)} (as EngineConfig's "
                f"{name}), got {value!r}; build the cost for an engine with "
                "CalibratedCost.typical(hw, model, engine=engine) or cost.for_engine(engine)"
            )
    if cost.quantization is not None and (
        not isinstance(cost.quantization, str) or cost.quantization not in QUANTIZATIONS
    ):
        names = ", ".join(repr(q) for q in QUANTIZATIONS)
        raise ConfigError(
            f"CalibratedCost quantization must be one of {names} (as EngineConfig's "
            f"quantization), got {cost.quantization!r}"
        )
    # The memory model's own checks (the same messages as kv_capacity's).
    activation_dtype_bytes(cost.model, cost.dtype)
    kv_dtype_bytes(cost.model, dtype=cost.dtype, kv_cache_dtype=cost.kv_cache_dtype)
    weight_bytes(cost.model, dtype=cost.dtype, quantization=cost.quantization)


def check_speculation(cost: Any) -> None:
    """``cudagraph_decode_query_len`` an int in [1, 65] and ``drafter`` a
    :class:`~budgetlab.cost.speculative_terms.Drafter` of the cost's model (or None), of ``k =
    q − 1`` drafts when the engine's graphs are recorded with ``q > 1``.

    Raises
    ------
    ParameterError, ConfigError
        A field of the wrong type or range; a drafter of another model or another ``k``.
    """
    from budgetlab.cost.speculative_terms import Drafter

    q = int_at_least(
        "cudagraph_decode_query_len",
        cost.cudagraph_decode_query_len,
        1,
        what="an int >= 1 (1 + num_speculative_tokens; record an engine's with cost.for_engine(engine))",
    )
    if q > 65:
        raise ParameterError(f"cudagraph_decode_query_len must be at most 65 (1 + 64 drafts), got {q}")
    drafter = cost.drafter
    if drafter is None:
        return
    if not isinstance(drafter, Drafter):
        raise ParameterError(f"drafter must be a budgetlab.cost.speculative_terms.Drafter or None, got {drafter!r}")
    if drafter.target != cost.model:
        raise ConfigError(
            f"the drafter describes a proposer for {drafter.target.slug!r} but the cost prices "
            f"{cost.model.slug!r}; build it for the cost's engine with cost.for_engine(engine)"
        )
    if q > 1 and drafter.num_speculative_tokens != q - 1:
        raise ConfigError(
            f"the drafter proposes {drafter.num_speculative_tokens} tokens but the recorded uniform decode "
            f"has {q} query tokens (1 + k); record the engine with cost.for_engine(engine)"
        )


def check_graph_sizes(sizes: Any, full: Any, q: int = 1, *, name: str = "cudagraph_full_sizes") -> None:
    """``sizes`` None or distinct ascending ints >= 1 [tokens]; ``full`` (the FULL sizes of
    decodes of ``q`` tokens a request) such ints: among ``sizes`` when ``q = 1``, multiples of
    ``q`` no larger than the largest of ``sizes`` otherwise (:mod:`budgetlab.cudagraph`, D1).

    Raises
    ------
    ParameterError
        Otherwise (as :meth:`CalibratedCost.for_engine
        <budgetlab.cost.CalibratedCost.for_engine>` records them, they always pass).
    """
    for name_, value in (("cudagraph_sizes", sizes), (name, full)):
        if value is None and name_ == "cudagraph_sizes":
            continue
        if (
            not isinstance(value, tuple)
            or not all(type(v) is int and 1 <= v <= MAX_TOKENS[0] for v in value)
            or list(value) != sorted(set(value))
        ):
            raise ParameterError(
                f"{name_} must be a tuple of distinct ascending ints >= 1 [tokens], got {value!r}; "
                "record an engine's with cost.for_engine(engine)"
            )
    if q == 1 and not set(full) <= set(sizes or ()):
        raise ParameterError(
            f"{name} {full!r} must be among cudagraph_sizes {sizes!r} (a FULL graph "
            "is also captured as a piecewise one); record an engine's with cost.for_engine(engine)"
        )
    if q > 1 and full and (any(v % q for v in full) or not sizes or full[-1] > sizes[-1]):
        raise ParameterError(
            f"{name} {full!r} must be multiples of {q} (1 + num_speculative_tokens) no larger than the "
            f"largest of cudagraph_sizes {sizes!r}; record an engine's with cost.for_engine(engine)"
        )
