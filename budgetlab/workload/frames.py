"""Workloads as tables and numbers: DataFrame round trips and headline statistics.

:data:`REQUEST_COLUMNS` are the four required columns of an *input* request table
(:func:`requests_to_frame`, :func:`requests_from_frame`), and :data:`PRIORITY_COLUMN`,
:data:`PREFIX_ID_COLUMN` and :data:`PREFIX_TOKENS_COLUMN` the optional ones
(``Request.priority``, ``prefix_id`` and ``prefix_tokens``; 0, None and 0 when absent); the
simulator's per-request *results*
have their own columns (``budgetlab.simulator.RESULT_COLUMNS``). :func:`trace_stats` gives the
headline numbers of a list of requests, :func:`workload_stats` those of a sweepable workload
(what notebooks 07 and 08 tabulate), and :func:`mean_total_tokens` /
:func:`mean_lengths_tokens` the mean lengths the sweepable workloads and the tuner use.

:class:`RequestColumns` is a sequence of requests held as aligned arrays (what
:func:`~budgetlab.workload.load_trace` returns): a :class:`~budgetlab.specs.Request` is built
only when one is asked for, and every function here reads the arrays directly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

import numpy as np
import pandas as pd

from budgetlab._checks import MAX_TIME_S, MAX_TOKENS, is_int
from budgetlab.errors import ParameterError
from budgetlab.specs import Request

if TYPE_CHECKING:  # the package imports this module
    from budgetlab.workload import SweepWorkload

__all__ = [
    "REQUEST_COLUMNS",
    "PRIORITY_COLUMN",
    "PREFIX_ID_COLUMN",
    "PREFIX_TOKENS_COLUMN",
    "RequestColumns",
    "trace_stats",
    "workload_stats",
    "WORKLOAD_STATS",
    "requests_to_frame",
    "requests_from_frame",
    "mean_total_tokens",
    "mean_lengths_tokens",
    "fixed_lengths_label",
]

REQUEST_COLUMNS = ("request_id", "arrival_at_s", "prompt_tokens", "output_tokens")
"""Columns of :func:`requests_to_frame` (the required columns of an input table)."""

PRIORITY_COLUMN = "priority"
"""The optional column of an input table holding ``Request.priority`` (0 when absent)."""

PREFIX_ID_COLUMN = "prefix_id"
"""The optional column of an input table holding ``Request.prefix_id`` (an int, a str, or
None / NaN for a request that shares nothing; None when the column is absent)."""

PREFIX_TOKENS_COLUMN = "prefix_tokens"
"""The optional column of an input table holding ``Request.prefix_tokens`` [tokens] (0 when
absent, and where the row's prefix id is None and the cell NaN)."""

_TOLERANCE = 1e-9  # relative: origin_s + offset_s may differ from arrival_at_s by float rounding


@dataclass(frozen=True, eq=False)
class RequestColumns(Sequence[Request]):
    """Requests as aligned columns: request ``i`` has ``request_id`` ``i`` and priority 0.

    A sequence of :class:`~budgetlab.specs.Request` (``len``, indexing, iteration and ``==``
    with a list of requests behave as on a list), but it holds arrays, so a million requests
    cost 24 bytes each instead of a Python object each; a ``Request`` is built only when one is
    indexed or iterated over (a slice is a list of them). :func:`trace_stats`,
    :func:`requests_to_frame` and :func:`mean_total_tokens` read the arrays directly.

    Attributes
    ----------
    arrival_at_s : numpy.ndarray of float64
        Arrival instants [s], finite and >= 0 (not necessarily sorted), read-only.
    prompt_tokens, output_tokens : numpy.ndarray of int64
        Lengths [tokens], >= 1, read-only.
    prefix_id : tuple or None
        Each request's ``Request.prefix_id`` (int, str or None), or None: none shares anything.
    prefix_tokens : numpy.ndarray of int64 or None
        Each request's ``Request.prefix_tokens`` [tokens]; given with ``prefix_id`` or not at all.
    origin_s : float
        The instant the offsets count from [s]; NaN (default): the first arrival (0 when
        there is none).
    offset_s : numpy.ndarray of float64
        Each arrival minus ``origin_s`` [s], read-only; empty (default): computed from
        ``arrival_at_s``.
        :func:`~budgetlab.workload.load_trace` computes them from the trace's text, so an
        arrival in epoch seconds (1.7e12 with microseconds) keeps its digits here although
        ``arrival_at_s``, a float64, rounds it to 0.25 ms (1.7e15: to 0.25 s).

    Raises
    ------
    ParameterError
        Columns of different lengths, or a value a ``Request`` would refuse (the message
        names the first such request).
    """

    arrival_at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: tuple[int | str | None, ...] | None = None
    prefix_tokens: np.ndarray | None = None
    origin_s: float = math.nan
    offset_s: np.ndarray = field(default_factory=lambda: np.empty(0))

    def __post_init__(self) -> None:
        arrivals = _column(self.arrival_at_s, float, "arrival_at_s")
        n = arrivals.size
        prompts = _column(self.prompt_tokens, float, "prompt_tokens")
        outputs = _column(self.output_tokens, float, "output_tokens")
        if prompts.size != n or outputs.size != n:
            raise ParameterError("arrival_at_s, prompt_tokens and output_tokens must be 1-D and equally long")
        bad = ~(np.isfinite(arrivals) & (arrivals >= 0) & _whole(prompts, low=1) & _whole(outputs, low=1))
        ids, shared = self.prefix_id, self.prefix_tokens
        if ids is None and shared is None:
            _refuse(bad, arrivals, prompts, outputs, None, None)
        elif ids is None or shared is None:
            raise ParameterError("give prefix_id and prefix_tokens together, or neither")
        else:
            ids = tuple(int(k) if isinstance(k, np.integer) else k for k in ids)
            shared = _column(shared, float, "prefix_tokens")
            if len(ids) != n or shared.size != n:
                raise ParameterError(f"prefix_id and prefix_tokens must hold {n} entries, one per request")
            none = np.array([k is None for k in ids], dtype=bool)
            kinds = none | np.array([isinstance(k, int | str) and not isinstance(k, bool) for k in ids], dtype=bool)
            bad |= ~kinds | ~_whole(shared, low=0) | (shared > prompts + outputs) | ((shared > 0) & none)
            _refuse(bad, arrivals, prompts, outputs, ids, shared)
            shared = self._read_only(shared.astype(np.int64))
        origin = (float(arrivals[0]) if n else 0.0) if math.isnan(self.origin_s) else float(self.origin_s)
        given = _column(self.offset_s, float, "offset_s")
        offsets = arrivals - origin if given.size == 0 else given
        if offsets.size != n or not np.isfinite(origin) or not np.isfinite(offsets).all():
            raise ParameterError("offset_s must hold arrival_at_s - origin_s [s], one finite number per request")
        if (np.abs(origin + offsets - arrivals) > _TOLERANCE * np.maximum(np.abs(arrivals), 1.0)).any():
            raise ParameterError("offset_s must hold arrival_at_s - origin_s [s]: origin_s + offset_s differs")
        if n and float(offsets.max()) > MAX_TIME_S.value:
            i = int(np.argmax(offsets))
            raise ParameterError(
                f"request {i}: arrives {float(offsets[i]):.6g} s after the first, more than {MAX_TIME_S.value:,.0f} s "
                f"({MAX_TIME_S.why}); are the arrival times in the right unit?"
            )
        for name, value in (
            ("arrival_at_s", arrivals),
            ("prompt_tokens", prompts.astype(np.int64)),
            ("output_tokens", outputs.astype(np.int64)),
            ("offset_s", offsets),
        ):
            self._set(name, value)
        object.__setattr__(self, "origin_s", origin)
        object.__setattr__(self, "prefix_id", ids)
        object.__setattr__(self, "prefix_tokens", shared)

    @staticmethod
    def _read_only(array: np.ndarray) -> np.ndarray:
        array.setflags(write=False)
        return array

    def _set(self, name: str, array: np.ndarray) -> None:
        object.__setattr__(self, name, self._read_only(array))

    def __len__(self) -> int:
        return int(self.arrival_at_s.size)

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> list[Request]: ...

    def __getitem__(self, index: int | slice) -> Request | list[Request]:
        """The request at ``index`` (a new ``Request``), or a list of those of a slice."""
        if isinstance(index, slice):
            return [self._request(i) for i in range(*index.indices(len(self)))]
        if not is_int(index):
            raise TypeError(f"RequestColumns indices must be integers or slices, not {type(index).__name__}")
        position = int(index) + len(self) if int(index) < 0 else int(index)
        if not 0 <= position < len(self):
            raise IndexError(f"request index {index} out of range for {len(self)} requests")
        return self._request(position)

    def _request(self, i: int) -> Request:
        arrival, prompt, output = float(self.arrival_at_s[i]), int(self.prompt_tokens[i]), int(self.output_tokens[i])
        if self.prefix_id is None or self.prefix_tokens is None:
            return Request(i, arrival, prompt, output)
        shared = int(self.prefix_tokens[i])
        return Request(i, arrival, prompt, output, prefix_id=self.prefix_id[i], prefix_tokens=shared)

    def __iter__(self) -> Iterator[Request]:
        columns = zip(self.arrival_at_s.tolist(), self.prompt_tokens.tolist(), self.output_tokens.tolist())
        if self.prefix_id is None or self.prefix_tokens is None:
            for i, (t, p, o) in enumerate(columns):
                yield Request(i, t, p, o)
            return
        prefixes = zip(self.prefix_id, self.prefix_tokens.tolist())
        for i, ((t, p, o), (k, s)) in enumerate(zip(columns, prefixes)):
            yield Request(i, t, p, o, prefix_id=k, prefix_tokens=s)

    def __eq__(self, other: object) -> bool:
        """Equal to another ``RequestColumns`` with the same columns, or to a list or tuple of
        the requests it holds (compared one by one)."""
        if isinstance(other, RequestColumns):
            return self.to_frame().equals(other.to_frame())
        if isinstance(other, list | tuple):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking like a list: not hashable

    def __repr__(self) -> str:
        prefixes = "" if self.prefix_id is None else ", with prefix ids"
        return f"RequestColumns({len(self)} requests{prefixes}, origin_s={self.origin_s!r})"

    def to_frame(self) -> pd.DataFrame:
        """:func:`requests_to_frame` of these requests, built from the arrays."""
        frame = pd.DataFrame(
            {
                "request_id": np.arange(len(self), dtype=np.int64),
                "arrival_at_s": self.arrival_at_s.copy(),
                "prompt_tokens": self.prompt_tokens.copy(),
                "output_tokens": self.output_tokens.copy(),
            }
        )
        if self.prefix_id is not None and self.prefix_tokens is not None and any(k is not None for k in self.prefix_id):
            frame[PREFIX_ID_COLUMN] = pd.Series(self.prefix_id, dtype=object)
            frame[PREFIX_TOKENS_COLUMN] = self.prefix_tokens.copy()
        return frame


def _column(values: object, dtype: type, name: str) -> np.ndarray:
    """``values`` as a fresh 1-D array of ``dtype``."""
    try:
        array: np.ndarray = np.array(values, dtype=dtype)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a 1-D array of numbers") from None
    if array.ndim != 1:
        raise ParameterError(f"{name} must be a 1-D array of numbers, got shape {array.shape}")
    return array


def _whole(values: np.ndarray, *, low: int) -> np.ndarray:
    """Where ``values`` are whole numbers >= ``low`` and at most
    :data:`~budgetlab._checks.MAX_TOKENS` (so exact as float64 and as int64)."""
    return np.isfinite(values) & (values == np.floor(values)) & (values >= low) & (values <= MAX_TOKENS.value)


def trace_stats(requests: Sequence[Request]) -> dict[str, float | int]:
    """Headline numbers of a workload, for notebooks and sanity checks.

    Parameters
    ----------
    requests : sequence of Request
        At least one; a :class:`RequestColumns` is read as arrays (its exact ``offset_s``
        give the duration and the gaps).

    Returns
    -------
    dict
        ``num_requests`` [count]; ``duration_s`` (last minus first arrival) [s];
        ``rate_per_s`` = ``(num_requests - 1) / duration_s`` [1/s] (NaN when the duration is
        0); ``interarrival_cv`` [-] (std over mean of the gaps, NaN with fewer than two gaps or
        a zero mean); ``prompt_p50_tokens``, ``prompt_p90_tokens``, ``prompt_mean_tokens``,
        ``output_p50_tokens``, ``output_p90_tokens``, ``output_mean_tokens`` [tokens]
        (percentiles with numpy's linear interpolation); ``shared_prefix_fraction`` [-], the
        share of all prompt tokens that an earlier request (by arrival, ties in input order)
        already declared as part of the same ``prefix_id`` stream, i.e.
        ``min(prompt_tokens, prefix_tokens, the largest earlier prefix_tokens of that id)``
        summed over requests: the prefix-cache hit rate of an unbounded cache, before block
        rounding (0 when no request declares a prefix).

    Examples
    --------
    Three requests of ``prefix_id="sys0"``, each with a 100-token system prompt and a 20-token
    message (prompt 120, ``prefix_tokens`` 100): the first shares with nobody earlier, the
    next two reuse 100 tokens each, so ``shared_prefix_fraction = 200 / 360 = 5/9``.
    """
    if len(requests) == 0:
        raise ValueError("trace_stats needs at least one request")
    columns = _as_columns(requests)
    order = np.argsort(columns.offset_s, kind="stable")
    offsets = columns.offset_s[order]  # exact even for arrivals in epoch seconds
    prompts = columns.prompt_tokens.astype(float)
    outputs = columns.output_tokens.astype(float)
    duration = float(offsets[-1] - offsets[0])
    gaps = np.diff(offsets)
    rate = (len(requests) - 1) / duration if duration > 0 else math.nan
    mean_gap = float(gaps.mean()) if gaps.size else 0.0
    cv = float(gaps.std() / mean_gap) if gaps.size >= 2 and mean_gap > 0 else math.nan
    stats: dict[str, float | int] = {
        "num_requests": len(requests),
        "duration_s": duration,
        "rate_per_s": rate,
        "interarrival_cv": cv,
    }
    for name, values in (("prompt", prompts), ("output", outputs)):
        p50, p90 = np.quantile(values, [0.5, 0.9])
        stats[f"{name}_p50_tokens"] = float(p50)
        stats[f"{name}_p90_tokens"] = float(p90)
        stats[f"{name}_mean_tokens"] = float(values.mean())
    stats["shared_prefix_fraction"] = _declared_shared_tokens(columns, order) / float(prompts.sum())
    return stats


def _as_columns(requests: Sequence[Request]) -> RequestColumns:
    """``requests`` as columns: itself when it is a :class:`RequestColumns`."""
    if isinstance(requests, RequestColumns):
        return requests
    prefix_ids = [r.prefix_id for r in requests]
    has_prefix = any(k is not None for k in prefix_ids)
    return RequestColumns(
        np.array([r.arrival_at_s for r in requests], dtype=float),
        np.array([r.prompt_tokens for r in requests], dtype=np.int64),
        np.array([r.output_tokens for r in requests], dtype=np.int64),
        prefix_id=tuple(prefix_ids) if has_prefix else None,
        prefix_tokens=np.array([r.prefix_tokens for r in requests], dtype=np.int64) if has_prefix else None,
        origin_s=0.0,  # offsets are the arrivals themselves, as trace_stats always took them
    )


def _declared_shared_tokens(columns: RequestColumns, order: np.ndarray) -> int:
    """Prompt tokens whose stream an earlier request of the same prefix id declared [tokens];
    ``order`` lists the requests by arrival (ties in input order)."""
    if columns.prefix_id is None or columns.prefix_tokens is None:
        return 0
    ids, prompts, streams = columns.prefix_id, columns.prompt_tokens.tolist(), columns.prefix_tokens.tolist()
    longest: dict[int | str, int] = {}  # per prefix id, the longest stream declared so far
    shared = 0
    for i in order.tolist():
        prefix_id = ids[i]
        if prefix_id is None:
            continue
        before = longest.get(prefix_id, 0)
        shared += min(prompts[i], streams[i], before)
        longest[prefix_id] = max(before, streams[i])
    return shared


WORKLOAD_STATS = (
    "prompt_p50_tokens",
    "prompt_p90_tokens",
    "prompt_mean_tokens",
    "output_p50_tokens",
    "output_p90_tokens",
    "output_mean_tokens",
    "sequence_mean_tokens",
    "num_requests",
)
"""The keys of :func:`workload_stats`, in the order tables list them."""


def workload_stats(workload: SweepWorkload, *, seed: int = 0) -> dict[str, float | int]:
    """Prompt and output lengths of a sweepable workload, and how many requests it simulates.

    The requests are drawn at 1 req/s: the lengths do not depend on the load.

    Parameters
    ----------
    workload : SweepWorkload
        A :class:`~budgetlab.workload.SyntheticWorkload`, a
        :class:`~budgetlab.workload.TraceWorkload` or any object with ``label`` and
        ``requests(rate_per_s=..., seed=...)``.
    seed : int
        Workload seed [-].

    Returns
    -------
    dict
        :data:`WORKLOAD_STATS`: the median, 90th percentile and mean of the prompt and of the
        output (as :func:`trace_stats`) [tokens], ``sequence_mean_tokens``, the mean prompt +
        output (:func:`~budgetlab.workload.mean_sequence_tokens`) [tokens], and
        ``num_requests``, the requests in one simulation [count].

    Examples
    --------
    Requests of 100 + 10 and 300 + 30 tokens: prompt median and mean 200, 90th percentile 280
    (linear interpolation), output 20 / 28 / 20, ``sequence_mean_tokens`` 220,
    ``num_requests`` 2.
    """
    from budgetlab.workload import mean_sequence_tokens, workload_requests  # the package imports this module

    requests = workload_requests(workload, rate_per_s=1.0, seed=seed)
    stats = trace_stats(requests)
    numbers: dict[str, float | int] = {key: stats[key] for key in WORKLOAD_STATS[:6]}
    numbers["sequence_mean_tokens"] = mean_sequence_tokens(workload, seed=seed)
    numbers["num_requests"] = len(requests)
    return numbers


def requests_to_frame(requests: Iterable[Request]) -> pd.DataFrame:
    """One row per request: ``request_id``, ``arrival_at_s`` [s], ``prompt_tokens``,
    ``output_tokens`` [tokens], in the given order, and ``priority`` (int64) when some request
    has a priority other than 0 (so a default-priority workload keeps the four columns), and
    ``prefix_id`` (object: int, str or None) and ``prefix_tokens`` (int64) [tokens] when some
    request has a ``prefix_id``."""
    if isinstance(requests, RequestColumns):
        return requests.to_frame()
    requests = list(requests)
    rows = [(r.request_id, r.arrival_at_s, r.prompt_tokens, r.output_tokens) for r in requests]
    frame = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS))
    frame = frame.astype({"arrival_at_s": float, "prompt_tokens": np.int64, "output_tokens": np.int64})
    if any(r.priority != 0 for r in requests):
        frame[PRIORITY_COLUMN] = np.array([r.priority for r in requests], dtype=np.int64)
    if any(r.prefix_id is not None for r in requests):
        frame[PREFIX_ID_COLUMN] = pd.Series([r.prefix_id for r in requests], dtype=object)
        frame[PREFIX_TOKENS_COLUMN] = np.array([r.prefix_tokens for r in requests], dtype=np.int64)
    return frame


def requests_from_frame(frame: pd.DataFrame) -> list[Request]:
    """Requests from a DataFrame with the columns of :func:`requests_to_frame`.

    ``request_id`` is optional (0, 1, ... when absent), and so are ``priority`` (0 when
    absent), ``prefix_id`` (None when absent; a None or NaN cell is None, a whole-valued float
    an int) and ``prefix_tokens`` (0 when absent, and a NaN cell of a row without a prefix id);
    extra columns are ignored. Token and priority columns may hold ints or whole-valued floats.

    Raises
    ------
    ValueError
        A missing column, or a row :class:`~budgetlab.specs.Request` refuses (the message
        names the row).
    """
    missing = [c for c in REQUEST_COLUMNS[1:] if c not in frame.columns]
    if missing:
        raise ValueError(
            f"frame lacks column(s) {', '.join(missing)}; requests need "
            f"{', '.join(REQUEST_COLUMNS)} (request_id optional)"
        )
    ids = frame["request_id"].tolist() if "request_id" in frame.columns else list(range(len(frame)))
    priorities = frame[PRIORITY_COLUMN].tolist() if PRIORITY_COLUMN in frame.columns else [0] * len(frame)
    prefix_ids = frame[PREFIX_ID_COLUMN].tolist() if PREFIX_ID_COLUMN in frame.columns else [None] * len(frame)
    shared = frame[PREFIX_TOKENS_COLUMN].tolist() if PREFIX_TOKENS_COLUMN in frame.columns else [0] * len(frame)
    requests = []
    columns = (frame[c].tolist() for c in REQUEST_COLUMNS[1:])
    for position, (rid, t, p, o, q, pid, pt) in enumerate(zip(ids, *columns, priorities, prefix_ids, shared)):
        prefix_id = _plain_prefix_id(pid)
        if prefix_id is None and _is_missing(pt):
            pt = 0
        try:
            requests.append(
                Request(
                    _plain_id(rid),
                    _plain_time(t),  # type: ignore[arg-type]
                    _plain_int(p),  # type: ignore[arg-type]
                    _plain_int(o),  # type: ignore[arg-type]
                    _plain_int(q),  # type: ignore[arg-type]
                    prefix_id,  # type: ignore[arg-type]  # Request names a bad one
                    _plain_int(pt),  # type: ignore[arg-type]
                )
            )
        except ValueError as exc:
            raise ValueError(f"frame row {position}: {exc}") from None
    return requests


def _plain_id(value: object) -> int | str:
    if is_int(value):
        return int(value)  # type: ignore[call-overload]  # is_int: an Integral
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value  # type: ignore[return-value]  # Request accepts str ids; others pass through


def _is_missing(value: object) -> bool:
    """None, NaN or pandas' NA / NaT: an empty cell."""
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value))


def _plain_prefix_id(value: object) -> object:
    """A prefix id cell as Request takes it: None for an empty cell, ints for whole numbers."""
    if _is_missing(value):
        return None
    return _plain_id(value)


def _plain_time(value: object) -> object:
    if is_int(value):
        return float(value)  # type: ignore[arg-type]  # is_int: an Integral
    return value


def _plain_int(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def mean_total_tokens(requests: Sequence[Request]) -> float:
    """Mean prompt + output length [tokens]."""
    if isinstance(requests, RequestColumns):
        return float(np.mean(requests.prompt_tokens + requests.output_tokens))
    return float(np.mean([r.prompt_tokens + r.output_tokens for r in requests]))


def mean_lengths_tokens(requests: Sequence[Request]) -> tuple[int, int]:
    """Mean prompt and mean output length, rounded to whole tokens, at least 1 [tokens]."""
    stats = trace_stats(requests)
    return max(1, round(stats["prompt_mean_tokens"])), max(1, round(stats["output_mean_tokens"]))


def fixed_lengths_label(prompt_tokens: int, output_tokens: int) -> str:
    """Table label of a fixed-length twin: ``"fixed lengths (1,234 + 345 tokens)"``."""
    return f"fixed lengths ({prompt_tokens:,} + {output_tokens:,} tokens)"


def _refuse(
    bad: np.ndarray,
    arrivals: np.ndarray,
    prompts: np.ndarray,
    outputs: np.ndarray,
    ids: tuple[int | str | None, ...] | None,
    shared: np.ndarray | None,
) -> None:
    """Raise, with the message ``Request`` gives, for the first request where ``bad`` holds."""
    if not bad.any():
        return
    i = int(np.argmax(bad))
    count = f" ({int(bad.sum())} request(s) in all)"
    row = (arrivals[i].item(), _plain_int(prompts[i].item()), _plain_int(outputs[i].item()))
    prefix = (
        {} if ids is None or shared is None else {"prefix_id": ids[i], "prefix_tokens": _plain_int(shared[i].item())}
    )
    try:  # Request names what is wrong, in the words of every other check
        Request(i, *row, **prefix)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ParameterError(f"{exc}{count}") from None
    raise ParameterError(
        f"request {i}: a token count must be at most {MAX_TOKENS.value:,} tokens ({MAX_TOKENS.why}){count}"
    )
