"""The simulator's input: the request table, checked once before the run.

:func:`request_table` turns :class:`~budgetlab.Request` objects or a DataFrame with the columns
of :data:`budgetlab.workload.REQUEST_COLUMNS` (and optionally ``priority``) into five aligned
arrays (in input order) and checks ids, arrival times, token counts and priorities with one
message per problem.
:func:`check_requests_fit` rejects, before anything runs, the requests vLLM would reject or
could never finish (``shared/reference/vllm-v1-scheduling.md``, "Capacity and configuration").
:func:`kv_pool_blocks` sizes the KV pool with :func:`budgetlab.memory.num_kv_blocks`, and
:func:`check_cost_matches_engine` makes sure the cost model prices the deployment that pool is
sized for (issue 11: one place for the deployment).

The DataFrame path is vectorized (a 20,000-row trace is checked in milliseconds), which is why
it does not go through :func:`budgetlab.workload.requests_from_frame` (one ``Request`` per row).
The table is columnar: ids are one NumPy array (int64 when every id is an int, else object),
checked for uniqueness with a hash table in C, so a million requests cost a few tens of bytes
each here.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from budgetlab import memory
from budgetlab._checks import MAX_TIME_S, MAX_TOKENS, at_most
from budgetlab.attention import KVGroup, describe_kv_groups, max_in_flight_tokens
from budgetlab.cost import IdealCost, model_of
from budgetlab.errors import ConfigError, ParameterError, RequestTooLargeError
from budgetlab.simulator.kv_groups import empty_pool_admission_blocks, peak_blocks
from budgetlab.simulator.state import blocks_for_tokens_array
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.workload import REQUEST_COLUMNS as INPUT_COLUMNS
from budgetlab.workload.frames import PREFIX_ID_COLUMN, PREFIX_TOKENS_COLUMN, PRIORITY_COLUMN, RequestColumns

__all__ = [
    "RequestTable",
    "request_table",
    "id_array",
    "request_id_at",
    "check_requests_fit",
    "kv_pool_blocks",
    "check_cost_matches_engine",
    "INPUT_COLUMNS",
]

#: The optional column of ``Request.accepted_drafts`` in a requests DataFrame.
ACCEPTED_DRAFTS_COLUMN = "accepted_drafts"

_DEPLOYMENT_FIELDS = ("tp", "dtype", "kv_cache_dtype", "quantization")
"""The cost-model attributes that describe a deployment (those of CalibratedCost)."""


@dataclass(frozen=True, eq=False)
class RequestTable:
    """The requests to simulate, as aligned columns in input order.

    Attributes
    ----------
    ids : numpy.ndarray
        Request ids (unique, hashable): int64 when every id is an int, else objects. Read one
        as a Python value with :func:`request_id_at`.
    arrival_at_s : numpy.ndarray of float64
        Arrival times [s].
    prompt_tokens, output_tokens : numpy.ndarray of int64
        Prompt and output lengths [tokens], each >= 1.
    priority : numpy.ndarray of int64
        ``Request.priority`` (0 when the input has none); used by the priority policy only.
    prefix_id : list
        ``Request.prefix_id`` (None: shares nothing); used by prefix caching only.
    prefix_tokens : numpy.ndarray of int64
        ``Request.prefix_tokens`` (0 when the input has none) [tokens].
    accepted_drafts : list of tuple of int
        ``Request.accepted_drafts`` per request, or empty when no request has any; read by
        speculative decoding only.
    """

    ids: np.ndarray
    arrival_at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    priority: np.ndarray
    prefix_id: list[Hashable | None]
    prefix_tokens: np.ndarray
    accepted_drafts: list[tuple[int, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, rows: np.ndarray) -> RequestTable:
        """The table of the requests at ``rows`` (positions, in the order given)."""
        picked = rows.tolist()
        return RequestTable(
            self.ids[rows],
            self.arrival_at_s[rows],
            self.prompt_tokens[rows],
            self.output_tokens[rows],
            self.priority[rows],
            [self.prefix_id[i] for i in picked],
            self.prefix_tokens[rows],
            [self.accepted_drafts[i] for i in picked] if self.accepted_drafts else [],
        )


def request_table(requests: Iterable[Request] | pd.DataFrame) -> RequestTable:
    """The request table of ``requests`` (Request-like objects, a DataFrame, or the columns
    :func:`~budgetlab.workload.load_trace` returns, read as arrays without a Request each).

    Raises
    ------
    ParameterError
        No requests, duplicate or unhashable ids, a DataFrame lacking a column, or a value out
        of range (a negative or non-finite arrival, a token count that is not an int >= 1, a
        priority that is not an int).
    TypeError
        An item that is not a Request (nor has its four attributes).
    """
    if isinstance(requests, pd.DataFrame):
        return _table_from_frame(requests)
    if isinstance(requests, RequestColumns):  # a loaded trace: straight from its arrays
        return _table_from_frame(requests.to_frame())
    ids: list[Hashable] = []
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    priority: list[int] = []
    prefix_id: list[Hashable | None] = []
    prefix_tokens: list[int] = []
    accepted: list[tuple[int, ...]] = []
    for item in requests:
        if not isinstance(item, Request):
            try:
                item = Request(
                    item.request_id,
                    item.arrival_at_s,
                    item.prompt_tokens,
                    item.output_tokens,
                    getattr(item, "priority", 0),
                    getattr(item, "prefix_id", None),
                    getattr(item, "prefix_tokens", 0),
                    getattr(item, "accepted_drafts", ()),
                )
            except AttributeError:
                raise TypeError(
                    f"requests must be budgetlab.Request objects or a DataFrame, got {type(item).__name__}"
                ) from None
        ids.append(item.request_id)
        arrival.append(float(item.arrival_at_s))
        prompt.append(int(item.prompt_tokens))
        output.append(int(item.output_tokens))
        priority.append(int(item.priority))
        prefix_id.append(item.prefix_id)
        prefix_tokens.append(int(item.prefix_tokens))
        accepted.append(item.accepted_drafts)
    table = RequestTable(
        id_array(ids),
        np.asarray(arrival, dtype=float),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        np.asarray(priority, dtype=np.int64),
        prefix_id,
        np.asarray(prefix_tokens, dtype=np.int64),
        accepted if any(accepted) else [],
    )
    _check_ids(table.ids)
    _check_span(table)
    return table


def _table_from_frame(frame: pd.DataFrame) -> RequestTable:
    missing = [c for c in INPUT_COLUMNS if c not in frame.columns]
    if missing:
        raise ParameterError(
            f"the requests DataFrame lacks column(s) {', '.join(missing)}; it needs {', '.join(INPUT_COLUMNS)}"
        )
    ids = frame["request_id"].to_numpy(copy=True)
    if ids.dtype.kind not in "iuf":
        ids = id_array(ids.tolist())
    try:
        arrival = frame["arrival_at_s"].to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise ParameterError("arrival_at_s must be numeric seconds") from None
    bad = ~(np.isfinite(arrival) & (arrival >= 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ParameterError(
            f"request {request_id_at(ids, i)!r}: arrival_at_s must be a finite number of seconds >= 0, "
            f"got {arrival[i]!r}"
        )
    tokens = {name: _token_column(frame, name, ids) for name in ("prompt_tokens", "output_tokens")}
    if PRIORITY_COLUMN in frame.columns:
        priority = _int_column(frame, PRIORITY_COLUMN, ids)
    else:
        priority = np.zeros(len(ids), dtype=np.int64)
    prefix_id, prefix_tokens = _prefix_columns(frame, ids, tokens["prompt_tokens"] + tokens["output_tokens"])
    table = RequestTable(
        ids,
        arrival,
        tokens["prompt_tokens"],
        tokens["output_tokens"],
        priority,
        prefix_id,
        prefix_tokens,
        _accepted_column(frame, ids),
    )
    _check_ids(table.ids)
    _check_span(table)
    return table


def _accepted_column(frame: pd.DataFrame, ids: np.ndarray) -> list[tuple[int, ...]]:
    """The optional ``accepted_drafts`` column (a sequence of ints >= 0 per row, or empty), checked
    as ``Request`` checks it; empty when the frame has none."""
    if ACCEPTED_DRAFTS_COLUMN not in frame.columns:
        return []
    out = []
    for i, cell in enumerate(frame[ACCEPTED_DRAFTS_COLUMN].tolist()):
        values = () if cell is None or (isinstance(cell, float) and math.isnan(cell)) else cell
        try:
            out.append(Request(0, 0.0, 1, 1, accepted_drafts=values).accepted_drafts)
        except ValueError as error:
            message = str(error).removeprefix("request 0: ")
            raise ParameterError(f"request {request_id_at(ids, i)!r}: {message}") from None
    return out if any(out) else []


def _token_column(frame: pd.DataFrame, name: str, ids: np.ndarray) -> np.ndarray:
    """A token-count column as int64, every value an integer >= 1 and at most
    :data:`~budgetlab._checks.MAX_TOKENS` (as :class:`~budgetlab.specs.Request` checks it)."""
    raw = frame[name].to_numpy()
    if raw.dtype == bool or not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
        raise ParameterError(f"{name} must hold integer token counts, got dtype {raw.dtype}")
    values = raw.astype(float)
    bad = ~(np.isfinite(values) & (values == np.floor(values)) & (values >= 1))
    if bad.any():
        i = int(np.argmax(bad))
        raise ParameterError(f"request {request_id_at(ids, i)!r}: {name} must be an int >= 1, got {raw[i]!r}")
    if len(values) and values.max() > MAX_TOKENS.value:
        i = int(np.argmax(values))
        at_most(f"request {request_id_at(ids, i)!r}: {name}", raw[i].item(), MAX_TOKENS)
    return raw.astype(np.int64)


def _int_column(frame: pd.DataFrame, name: str, ids: np.ndarray) -> np.ndarray:
    """An integer column of any sign (``priority``) as int64."""
    raw = frame[name].to_numpy()
    if raw.dtype == bool or not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
        raise ParameterError(f"{name} must hold integers (smaller is served first), got dtype {raw.dtype}")
    values = raw.astype(float)
    bad = ~(np.isfinite(values) & (values == np.floor(values)) & (np.abs(values) <= 2.0**62))
    if bad.any():
        i = int(np.argmax(bad))
        raise ParameterError(
            f"request {request_id_at(ids, i)!r}: {name} must be an int in [-2**62, 2**62], got {raw[i]!r}"
        )
    return raw.astype(np.int64)


def _prefix_columns(
    frame: pd.DataFrame, ids: np.ndarray, total_tokens: np.ndarray
) -> tuple[list[Hashable | None], np.ndarray]:
    """The optional ``prefix_id`` / ``prefix_tokens`` columns, checked as ``Request`` checks
    them (a missing or null id: shares nothing; a missing count: 0)."""
    count = len(ids)
    if PREFIX_ID_COLUMN in frame.columns:
        raw = frame[PREFIX_ID_COLUMN].tolist()
        prefix_id: list[Hashable | None] = [None if _is_null(v) else v for v in raw]
        for i, value in enumerate(prefix_id):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | str | np.integer)):
                raise ParameterError(
                    f"request {request_id_at(ids, i)!r}: prefix_id must be an int, a str or empty, got {value!r}"
                )
        prefix_id = [int(v) if isinstance(v, np.integer) else v for v in prefix_id]
    else:
        prefix_id = [None] * count
    if PREFIX_TOKENS_COLUMN in frame.columns:
        column = frame[PREFIX_TOKENS_COLUMN]
        raw_tokens = column.fillna(0) if column.dtype.kind == "f" else column  # empty cells: shares nothing
        shared = _int_column(pd.DataFrame({PREFIX_TOKENS_COLUMN: raw_tokens}), PREFIX_TOKENS_COLUMN, ids)
        bad = (shared < 0) | (shared > total_tokens)
        if bad.any():
            i = int(np.argmax(bad))
            raise ParameterError(
                f"request {request_id_at(ids, i)!r}: prefix_tokens must be an int in [0, prompt_tokens + "
                f"output_tokens = {int(total_tokens[i])}], got {int(shared[i])}"
            )
        orphan = (shared > 0) & np.array([v is None for v in prefix_id], dtype=bool)
        if orphan.any():
            i = int(np.argmax(orphan))
            raise ParameterError(
                f"request {request_id_at(ids, i)!r}: prefix_tokens={int(shared[i])} needs a prefix_id naming "
                "what it shares"
            )
    else:
        shared = np.zeros(count, dtype=np.int64)
    return prefix_id, shared


def _is_null(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def id_array(ids: list[Hashable]) -> np.ndarray:
    """Request ids as one array: int64 when every id is a (non-bool) int that fits, else
    objects (the ids themselves)."""
    values = np.fromiter(ids, dtype=object, count=len(ids))  # one object each: tuples stay whole
    if pd.api.types.infer_dtype(values, skipna=False) == "integer":
        try:
            return values.astype(np.int64)
        except OverflowError:
            pass
    return values


def request_id_at(ids: np.ndarray, i: int) -> Hashable:
    """The id at position ``i`` as a Python value (an ``int``, not a NumPy integer)."""
    value = ids[i]
    return value.item() if isinstance(value, np.generic) else value


def _check_span(table: RequestTable) -> None:
    """The arrivals span at most :data:`~budgetlab._checks.MAX_TIME_S` (times are measured from the
    first arrival, so only the span has to fit the simulated clock's resolution)."""
    arrival = table.arrival_at_s
    span = float(arrival.max() - arrival.min())
    if span > MAX_TIME_S.value:
        last = int(np.argmax(arrival))
        raise ParameterError(
            f"request {request_id_at(table.ids, last)!r} arrives {span:.6g} s after the first, more than "
            f"{MAX_TIME_S.value:,.0f} s ({MAX_TIME_S.why}); check the arrival times' unit"
        )


def _check_ids(ids: np.ndarray) -> None:
    if not len(ids):
        raise ParameterError("no requests to simulate")
    try:
        if ids.dtype == object:
            deque(map(hash, ids), maxlen=0)  # every id hashable (pandas would hash a list too)
        duplicated = pd.Index(ids).duplicated()
    except TypeError:
        raise ParameterError("request ids must be hashable (int or str)") from None
    if duplicated.any():
        duplicate = request_id_at(ids, int(np.argmax(duplicated)))
        raise ParameterError(f"duplicate request_id {duplicate!r}: ids must be unique")


def kv_pool_blocks(
    engine: EngineConfig, *, hardware: HardwareSpec | None, model: ModelSpec | None, cost_name: str
) -> int:
    """Usable KV blocks for the run: :func:`budgetlab.memory.num_kv_blocks` [blocks].

    ``hardware`` and ``model`` are those passed to :func:`~budgetlab.simulate`, else the cost
    model's; ``cost_name`` (the cost model's class name) only makes the error say which.

    Raises
    ------
    ValueError
        ``engine.num_kv_blocks`` is None and the hardware or the model is unknown.
    """
    try:
        return int(memory.num_kv_blocks(engine, hardware, model))
    except ValueError as error:
        if hardware is not None and model is not None:
            raise
        raise ParameterError(
            f"{error}. Pass hardware= and model= to simulate(), use a cost model that carries "
            f"them (IdealCost does; {cost_name} does not), or set EngineConfig(num_kv_blocks=...)"
        ) from error


def check_cost_matches_engine(cost: object, engine: EngineConfig) -> None:
    """Refuse a cost model that prices another deployment than the engine's.

    The engine's ``tensor_parallel_size``, ``dtype``, ``kv_cache_dtype`` and ``quantization``
    size the KV pool (:func:`budgetlab.memory.kv_capacity`); a cost model that knows its model
    prices the weight and KV reads of a deployment too, and the two must be the same one:

    * a cost with any of the attributes ``tp``, ``dtype``, ``kv_cache_dtype``,
      ``quantization`` (:class:`~budgetlab.cost.CalibratedCost`) is compared field by field,
      a missing one counting as its default (1, ``"auto"``, ``"auto"``, None);
    * an :class:`~budgetlab.cost.IdealCost` is the seeds' deployment: ``tp`` 1, ``dtype`` and
      ``kv_cache_dtype`` ``"auto"``, no quantization;
    * a cost without a :class:`~budgetlab.specs.ModelSpec` ``model`` (ConstantCost,
      table-driven or hand-written models) is not checked.

    ``tp``, ``quantization`` and expert parallelism must be equal; the dtypes must give the same bytes per element
    (:func:`budgetlab.memory.activation_dtype_bytes`, :func:`budgetlab.memory.kv_dtype_bytes`),
    so ``"auto"`` and ``"bfloat16"`` agree for a 16-bit model, as in vLLM.

    Raises
    ------
    ConfigError
        The deployments differ; the message names both values and the fix.
    """
    model = model_of(cost)
    if model is None:
        return
    if any(hasattr(cost, name) for name in _DEPLOYMENT_FIELDS):
        tp = getattr(cost, "tp", 1)
        dtype = getattr(cost, "dtype", "auto")
        kv_cache_dtype = getattr(cost, "kv_cache_dtype", "auto")
        quantization = getattr(cost, "quantization", None)
    elif isinstance(cost, IdealCost):
        tp, dtype, kv_cache_dtype, quantization = 1, "auto", "auto", None
    else:
        return
    differences = []
    if tp != engine.tensor_parallel_size:
        differences.append(f"cost tp={tp!r}, engine tensor_parallel_size={engine.tensor_parallel_size}")
    cost_bytes = memory.activation_dtype_bytes(model, dtype)
    engine_bytes = memory.activation_dtype_bytes(model, engine.dtype)
    if cost_bytes != engine_bytes:
        differences.append(f"cost dtype={dtype!r} ({cost_bytes} B), engine dtype={engine.dtype!r} ({engine_bytes} B)")
    cost_kv = memory.kv_dtype_bytes(model, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    engine_kv = memory.kv_dtype_bytes(model, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype)
    if cost_kv != engine_kv:
        differences.append(
            f"cost kv_cache_dtype={kv_cache_dtype!r} ({cost_kv} B per element), engine "
            f"kv_cache_dtype={engine.kv_cache_dtype!r} ({engine_kv} B)"
        )
    if quantization != engine.quantization:
        differences.append(f"cost quantization={quantization!r}, engine quantization={engine.quantization!r}")
    expert_parallel = bool(getattr(cost, "expert_parallel", False))
    if engine.tensor_parallel_size > 1 and expert_parallel != engine.enable_expert_parallel:  # no effect at TP1
        differences.append(
            f"cost expert_parallel={expert_parallel}, engine enable_expert_parallel={engine.enable_expert_parallel}"
        )
    if not differences:
        return
    name = type(cost).__name__
    ideal = (
        f" ({name} is the seeds' single-GPU 16-bit roofline; make_cost('ideal', hw, model, "
        "engine=engine) is the idealized roofline of the engine's deployment)"
        if isinstance(cost, IdealCost) and not hasattr(cost, "for_engine")
        else ""
    )
    raise ConfigError(
        f"the cost model ({name} for {model.name}) describes another deployment than the engine, "
        f"whose KV pool is sized for its own: {'; '.join(differences)}. Price the engine's "
        "deployment: build it with CalibratedCost.typical(hw, model, engine=engine) or "
        f"cost.for_engine(engine){ideal}."
    )


def engine_kv_groups(engine: EngineConfig, model: ModelSpec | None) -> tuple[EngineConfig, tuple[KVGroup, ...]]:
    """The KV-cache groups a run schedules, and the engine it runs: ``engine.kv_groups``, else
    those vLLM forms from the model's layers (:func:`budgetlab.memory.scheduler_kv_groups`; one
    full group when the model is unknown or all full attention). With several groups the engine
    returned names them (``kv_groups``) and has the block size vLLM uses for the model (larger
    for Mamba / linear-attention hybrids, :func:`budgetlab.memory.kv_block_size`), so
    ``SimResult.engine`` says what ran and simulates the same again."""
    groups, block_size = memory.scheduler_kv_groups(model, engine)
    if groups != ("full",) and (engine.kv_groups != groups or block_size != engine.block_size):
        engine = replace(engine, kv_groups=groups, block_size=block_size)  # the result says what ran
    return engine, groups


def _peak_formula(prompt: int, output: int, block_size: int, kv_groups: tuple[KVGroup, ...]) -> str:
    one = f"ceil(({prompt} prompt + {output} output − 1) / {block_size})"
    return (
        one
        if kv_groups == ("full",)
        else f"{one} per group, less what windows free at the last step, or the whole-sequence admission "
        f"check's blocks if more, in {describe_kv_groups(kv_groups)}"
    )


def check_requests_fit(
    table: RequestTable, engine: EngineConfig, num_blocks: int, kv_groups: tuple[KVGroup, ...] = ("full",)
) -> None:
    """Reject the requests vLLM rejects, or that could never finish in ``num_blocks`` blocks.

    A request's peak is ``ceil((prompt + output − 1) / block_size)`` blocks (the last sampled
    token is never written to KV): at or below the usable pool it completes; above it, vLLM
    would preempt it over and over (``vllm-v1-scheduling.md``, "Capacity and configuration").
    With several KV-cache groups it is what its last step holds in all of them together
    (:func:`budgetlab.simulator.kv_groups.peak_blocks`: each group's table, less the blocks a
    window has freed).

    Raises
    ------
    RequestTooLargeError
        A request longer than ``max_model_len``, or one whose peak exceeds the pool.
    """
    total = table.prompt_tokens + table.output_tokens
    if engine.max_model_len is not None:
        too_long = np.flatnonzero(total > engine.max_model_len)
        if too_long.size:
            i = int(too_long[0])
            raise RequestTooLargeError(
                f"request {request_id_at(table.ids, i)!r} has {int(table.prompt_tokens[i])} prompt + "
                f"{int(table.output_tokens[i])} output = {int(total[i])} tokens, more than max_model_len "
                f"({engine.max_model_len}); vLLM rejects it ({too_long.size} request(s) in all). "
                "Raise max_model_len or shorten the request."
            )
    bs = engine.block_size
    peak = blocks_for_tokens_array(total - 1, bs)
    if kv_groups != ("full",):
        in_flight = max_in_flight_tokens(
            max_num_batched_tokens=engine.max_num_batched_tokens,
            async_scheduling=engine.async_scheduling,
            pipeline_parallel_size=engine.pipeline_parallel_size,
        )
        peaks = []
        for t in (total - 1).tolist():
            peak_t = peak_blocks(kv_groups, t, bs)
            if engine.scheduler_reserve_full_isl:  # a recompute's whole known sequence must fit
                need = empty_pool_admission_blocks(
                    kv_groups, t, block_size=bs, in_flight_tokens=in_flight, max_model_len=engine.max_model_len
                )
                peak_t = max(peak_t, need)
            peaks.append(peak_t)
        peak = np.array(peaks, dtype=np.int64)
    too_big = np.flatnonzero(peak > num_blocks)
    if too_big.size:
        i = int(too_big[0])
        raise RequestTooLargeError(
            f"request {request_id_at(table.ids, i)!r} needs {int(peak[i])} KV blocks at its peak "
            f"({_peak_formula(int(table.prompt_tokens[i]), int(table.output_tokens[i]), bs, kv_groups)}) "
            f"but the pool holds only {num_blocks} usable blocks: it could never finish (vLLM "
            f"would preempt it over and over; {too_big.size} request(s) in all). Give the KV "
            "cache more memory (a higher gpu_memory_utilization, a bigger GPU, tensor "
            "parallelism), lower max_num_batched_tokens (smaller activations leave more KV), "
            "or set a shorter max_model_len so vLLM rejects such requests."
        )
