"""Read (and write) the JSON ``vllm bench serve --save-result`` writes, and replay its workload.

The file (vLLM 0.19, ``vllm/benchmarks/serve.py``) always holds the run's summary: ``duration``
[s], ``completed``, ``failed``, ``num_prompts``, ``request_rate`` (a number or ``"inf"``),
``burstiness``, ``max_concurrency``, ``total_input_tokens``, ``total_output_tokens``,
``request_throughput``, ``output_throughput`` and, for each metric of
``--percentile-metrics`` (``ttft,tpot,itl`` by default), ``mean_<m>_ms``, ``median_<m>_ms``,
``std_<m>_ms`` and ``p<q>_<m>_ms``. With ``--save-detailed`` it also keeps one entry per request:
``input_lens``, ``output_lens`` [tokens], ``ttfts`` [s], ``itls`` (each request's gaps between
tokens [s]), ``start_times`` (the client's ``perf_counter`` when it sent the request [s]) and
``errors`` (empty for a success).

:func:`read_vllm_bench` checks every field it uses and names the one that is missing or wrong.
:meth:`BenchResult.workload` replays the workload: the recorded start times and lengths when
the file is detailed, else arrivals at ``request_rate`` (a gamma process of shape
``burstiness``, as the client draws them, with its seed unknown) and every request at the mean
input and output length. A closed-loop run (``--max-concurrency``) is replayed as
:class:`~budgetlab.ClosedLoopClients`: ``max_concurrency`` clients sending the requests in the
order they were sent, each when a client is free (after its paced arrival, for a finite
``request_rate``), so its send times come out of the simulated server's latency as they came out
of the real one's. :func:`bench_from_simulation` writes a simulated run in the same
format, labelled as simulated (the shipped example, ``data/bench/``, is one).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from budgetlab._checks import MAX_REQUESTS, MAX_TIME_S, MAX_TOKENS, Bound, is_int, is_number, number_in, random_seed
from budgetlab.errors import BenchFormatError
from budgetlab.serving.overhead import ServingOverhead, client_requests, next_step_s
from budgetlab.specs import Request
from budgetlab.workload.closed_loop import ClosedLoopClients

__all__ = [
    "BenchResult",
    "read_vllm_bench",
    "bench_from_simulation",
    "SIMULATED_LABEL",
    "EXAMPLE_RECIPE",
    "make_example_bench",
    "example_bench_path",
]

SIMULATED_LABEL = "simulated by budgetlab, not measured"
"""The ``label`` :func:`bench_from_simulation` writes, so a simulated file is never taken for a
measurement."""

_DETAILED = ("input_lens", "output_lens", "ttfts", "itls")


@dataclass(frozen=True, eq=False)
class BenchResult:
    """One ``vllm bench serve`` run, as read by :func:`read_vllm_bench`.

    Attributes
    ----------
    source : str
        The file (or ``"a dict"``) it was read from.
    label : str or None
        The file's ``label`` (:data:`SIMULATED_LABEL` for a simulated one).
    model_id : str or None
        The served model the client named.
    request_rate_per_s : float
        Offered rate [1/s]; ``inf`` when every request was sent at once.
    burstiness : float
        Shape of the gamma inter-arrival times (1: Poisson).
    max_concurrency : int or None
        The client's cap on requests in flight.
    completed, failed : int
        Requests that succeeded and failed [count].
    duration_s : float
        The benchmark's wall-clock duration [s].
    mean_input_tokens, mean_output_tokens : float
        Over the completed requests [tokens].
    summary_s : dict
        The published summary latencies converted to seconds: ``ttft_mean_s``,
        ``tpot_median_s``, ``e2e_p99_s``, ... (the ``p99`` and other percentiles as written).
    per_request : pandas.DataFrame or None
        For a detailed file, the completed requests: ``request_id`` (the file's index),
        ``start_s`` (from the first start), ``prompt_tokens``, ``output_tokens``, ``ttft_s``,
        ``tpot_s`` and ``e2e_s`` (``ttft`` plus the request's gaps) [s]; ``None`` otherwise.
    """

    source: str
    label: str | None
    model_id: str | None
    request_rate_per_s: float
    burstiness: float
    max_concurrency: int | None
    completed: int
    failed: int
    duration_s: float
    mean_input_tokens: float
    mean_output_tokens: float
    summary_s: Mapping[str, float] = field(repr=False)
    per_request: pd.DataFrame | None = field(repr=False)

    @property
    def detailed(self) -> bool:
        """Whether per-request data are present (``--save-detailed``)."""
        return self.per_request is not None

    @property
    def is_simulated(self) -> bool:
        """Whether budgetlab wrote this file (:data:`SIMULATED_LABEL`)."""
        return self.label == SIMULATED_LABEL

    @property
    def closed_loop(self) -> bool:
        """Whether the client capped its requests in flight (``--max-concurrency``)."""
        return self.max_concurrency is not None

    def requests(self, *, seed: int = 0) -> list[Request]:
        """The requests the client sent, with the arrivals an open-loop replay gives them.

        Open loop, detailed: every completed request at its recorded start (relative to the
        first) with its input and output lengths. Summary only: ``completed`` requests at the
        mean lengths, arriving at ``request_rate`` by a gamma process of shape ``burstiness``
        drawn with ``seed`` (all at 0 for an infinite rate).

        Closed loop (``max_concurrency`` set): the same requests in the order they were sent
        (by recorded start, when detailed), each arriving when the client's pacing let it
        queue for a slot: at ``request_rate`` as above (all at 0 for an infinite rate) — the
        recorded starts are when a slot freed, an outcome of the server's latency, not an input.
        Replay them with :meth:`workload`.
        """
        if self.per_request is not None and not self.closed_loop:
            frame = self.per_request
            return [
                Request(int(i), float(t), int(p), int(o))
                for i, t, p, o in zip(
                    frame.request_id, frame.start_s, frame.prompt_tokens, frame.output_tokens, strict=True
                )
            ]
        n = self.completed if self.per_request is None else len(self.per_request)
        if math.isinf(self.request_rate_per_s):
            times = np.zeros(n)
        else:
            rng = np.random.default_rng(seed)
            theta = 1.0 / (self.request_rate_per_s * self.burstiness)
            gaps = rng.gamma(shape=self.burstiness, scale=theta, size=n)
            times = np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else gaps
        if self.per_request is not None:  # a closed loop's requests, in the order they were sent
            frame = self.per_request.sort_values("start_s", kind="stable")
            return [
                Request(int(i), float(t), int(p), int(o))
                for i, t, p, o in zip(frame.request_id, times, frame.prompt_tokens, frame.output_tokens, strict=True)
            ]
        prompt = max(1, round(self.mean_input_tokens))
        output = max(1, round(self.mean_output_tokens))
        return [Request(i, float(t), prompt, output) for i, t in enumerate(times)]

    def workload(self, *, seed: int = 0, think_time_s: float = 0.0) -> list[Request] | ClosedLoopClients:
        """What to give :func:`budgetlab.simulate` to replay the benchmark: the open loop's
        :meth:`requests`, or for a closed loop :class:`~budgetlab.ClosedLoopClients` of
        ``max_concurrency`` clients sending them in order (paced at ``request_rate`` when it is
        finite, as ``vllm bench serve`` paces them before they wait for a slot), each
        ``think_time_s`` after its last request finished in the engine [s] (the client's time
        outside the engine's steps: 0 by default)."""
        requests = self.requests(seed=seed)
        if self.max_concurrency is None:
            return requests
        paced = not math.isinf(self.request_rate_per_s)
        return ClosedLoopClients(self.max_concurrency, requests, think_time_s=think_time_s, paced=paced)


def _where(source: str, key: str) -> str:
    return f"{source}, field {key!r}"


def _number(data: Mapping[str, Any], key: str, source: str, *, minimum: float = 0.0, allow_inf: bool = False) -> float:
    if key not in data:
        raise BenchFormatError(f"{_where(source, key)}: missing; is this a `vllm bench serve --save-result` file?")
    raw = data[key]
    if allow_inf and isinstance(raw, (str, float)) and raw in ("inf", math.inf):
        return math.inf
    if not is_number(raw) or not math.isfinite(raw) or raw < minimum:
        raise BenchFormatError(f"{_where(source, key)}: expected a finite number >= {minimum:g}, got {raw!r}")
    return float(raw)


def _count(data: Mapping[str, Any], key: str, source: str, *, minimum: int, bound: Bound) -> int:
    """The whole number ``data[key]`` (vLLM writes counts as JSON ints), in ``[minimum, bound]``."""
    if key not in data:
        raise BenchFormatError(f"{_where(source, key)}: missing; is this a `vllm bench serve --save-result` file?")
    raw = data[key]
    if not is_int(raw) or raw < minimum:
        raise BenchFormatError(f"{_where(source, key)}: expected a whole number >= {minimum}, got {raw!r}")
    if raw > bound.value:
        raise BenchFormatError(f"{_where(source, key)}: {raw!r} is above {bound.value:,} {bound.unit} ({bound.why})")
    return int(raw)


def _seconds(value: object) -> bool:
    """Whether ``value`` is a number of seconds in ``[0, MAX_TIME_S]`` (not a bool)."""
    return is_number(value) and 0 <= value <= MAX_TIME_S.value  # type: ignore[operator]


def _list(data: Mapping[str, Any], key: str, source: str, length: int | None) -> list[Any]:
    raw = data[key]
    if not isinstance(raw, list):
        raise BenchFormatError(
            f"{_where(source, key)}: expected a list (one entry per request), got {type(raw).__name__}"
        )
    if length is not None and len(raw) != length:
        raise BenchFormatError(f"{_where(source, key)}: {len(raw)} entries, but input_lens has {length}")
    return raw


def _summary_seconds(data: Mapping[str, Any], source: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in data.items():
        parts = key.split("_")
        if len(parts) != 3 or parts[2] != "ms" or parts[1] not in ("ttft", "tpot", "itl", "e2el"):
            continue
        if not is_number(value) or not math.isfinite(value) or value < 0:
            raise BenchFormatError(
                f"{_where(source, key)}: expected a finite number of milliseconds >= 0, got {value!r}"
            )
        metric = "e2e" if parts[1] == "e2el" else parts[1]
        out[f"{metric}_{parts[0]}_s"] = float(value) / 1e3
    if "ttft_mean_s" not in out or "tpot_mean_s" not in out:
        missing = "mean_ttft_ms" if "ttft_mean_s" not in out else "mean_tpot_ms"
        raise BenchFormatError(f"{_where(source, missing)}: missing; the run must report TTFT and TPOT")
    return out


def _per_request(data: Mapping[str, Any], source: str) -> pd.DataFrame:
    inputs = _list(data, "input_lens", source, None)
    n = len(inputs)
    outputs = _list(data, "output_lens", source, n)
    ttfts = _list(data, "ttfts", source, n)
    itls = _list(data, "itls", source, n)
    errors = _list(data, "errors", source, n) if "errors" in data else [""] * n
    starts = _list(data, "start_times", source, n) if "start_times" in data else None
    rows = []
    succeeded = [i for i in range(n) if not errors[i]]  # vLLM counts the others in "failed"
    for i in succeeded:
        for key, value, low in (("input_lens", inputs[i], 1), ("output_lens", outputs[i], 0)):
            if not is_int(value) or value < low:
                raise BenchFormatError(f"{_where(source, key)}[{i}]: expected an int >= {low}, got {value!r}")
            if value > MAX_TOKENS.value:
                raise BenchFormatError(
                    f"{_where(source, key)}[{i}]: {value!r} tokens is above {MAX_TOKENS.value:,} ({MAX_TOKENS.why})"
                )
    _check_totals(data, source, succeeded, inputs, outputs, num_errors=n - len(succeeded) if "errors" in data else None)
    for i in succeeded:
        if not outputs[i]:
            continue  # no token came back: nothing to time (vLLM leaves it out of TTFT and TPOT)
        gaps = itls[i]
        if not isinstance(gaps, list) or not all(_seconds(g) for g in gaps):
            raise BenchFormatError(
                f"{_where(source, 'itls')}[{i}]: expected a list of finite gaps >= 0 in seconds, got {gaps!r:.80}"
            )
        if len(gaps) != outputs[i] - 1:
            raise BenchFormatError(
                f"{_where(source, 'itls')}[{i}]: {len(gaps)} gaps for {outputs[i]} output tokens; one gap per "
                "token after the first is needed (a file whose streamed chunks held several tokens, as with "
                "speculative decoding, cannot be replayed token by token)"
            )
        ttft = ttfts[i]
        if not _seconds(ttft):
            raise BenchFormatError(f"{_where(source, 'ttfts')}[{i}]: expected finite seconds >= 0, got {ttft!r}")
        if starts is not None and not (is_number(starts[i]) and math.isfinite(starts[i])):
            raise BenchFormatError(f"{_where(source, 'start_times')}[{i}]: expected a finite number, got {starts[i]!r}")
        start = float(starts[i]) if starts is not None else math.nan
        e2e = float(ttft) + float(sum(gaps))
        out = int(outputs[i])
        rows.append(
            (i, start, int(inputs[i]), out, float(ttft), (e2e - ttft) / (out - 1) if out > 1 else math.nan, e2e)
        )
    frame = pd.DataFrame(
        rows, columns=["request_id", "start_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s"]
    )
    if frame.empty:
        raise BenchFormatError(f"{source}: no completed request in the per-request fields (every entry has an error)")
    if starts is None:
        rate = _number(data, "request_rate", source, allow_inf=True)
        frame["start_s"] = 0.0 if math.isinf(rate) else np.arange(len(frame)) / rate
    else:
        frame["start_s"] = frame.start_s - frame.start_s.min()
        if frame.start_s.max() > MAX_TIME_S.value:
            raise BenchFormatError(
                f"{_where(source, 'start_times')}: the requests span {frame.start_s.max():.6g} s, more than "
                f"{MAX_TIME_S.value:,.0f} s ({MAX_TIME_S.why})"
            )
    return frame


def _check_totals(
    data: Mapping[str, Any],
    source: str,
    succeeded: list[int],
    inputs: list[int],
    outputs: list[int],
    *,
    num_errors: int | None,
) -> None:
    """:class:`BenchFormatError` unless ``completed``, ``failed`` and the token totals are
    what the per-request lists add up to (vLLM computes both from the same requests)."""
    checks = [
        ("completed", len(succeeded), "requests without an error"),
        ("total_input_tokens", sum(inputs[i] for i in succeeded), "input_lens of the requests without an error"),
        ("total_output_tokens", sum(outputs[i] for i in succeeded), "output_lens of the requests without an error"),
    ]
    if num_errors is not None and data.get("failed") is not None:
        checks.append(("failed", num_errors, "requests with an error"))
    for key, expected, what in checks:
        if data[key] != expected:
            raise BenchFormatError(
                f"{_where(source, key)}: {data[key]!r}, but the per-request lists give {expected:,} "
                f"({what}); the file is inconsistent"
            )


def read_vllm_bench(source: str | os.PathLike[str] | Mapping[str, Any]) -> BenchResult:
    """Read a ``vllm bench serve --save-result`` JSON file (or its parsed dict).

    Raises
    ------
    BenchFormatError
        Not JSON, or a field missing or invalid; the message names the file and the field.
    FileNotFoundError
        No file at the path.
    """
    if isinstance(source, Mapping):
        data, where = source, "a dict"
    else:
        where = str(source)
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise BenchFormatError(f"{where}: not JSON ({error})") from None
        except UnicodeDecodeError as error:
            raise BenchFormatError(f"{where}: not UTF-8 text ({error.reason} at byte {error.start})") from None
        except RecursionError:
            raise BenchFormatError(f"{where}: JSON nested too deeply to be a vllm bench serve file") from None
        if not isinstance(data, dict):
            raise BenchFormatError(f"{where}: expected a JSON object, got {type(data).__name__}")
    values = {key: _number(data, key, where) for key in ("duration",)}
    if values["duration"] > MAX_TIME_S.value:
        raise BenchFormatError(
            f"{_where(where, 'duration')}: {values['duration']:.6g} s is more than {MAX_TIME_S.value:,.0f} s "
            f"({MAX_TIME_S.why})"
        )
    completed = _count(data, "completed", where, minimum=1, bound=MAX_REQUESTS)
    failed = _count(data, "failed", where, minimum=0, bound=MAX_REQUESTS) if data.get("failed") is not None else 0
    for key in ("total_input_tokens", "total_output_tokens"):
        tokens = Bound(
            completed * MAX_TOKENS.value, "tokens", f"{completed:,} requests of at most {MAX_TOKENS.value:,}"
        )
        values[key] = float(_count(data, key, where, minimum=0, bound=tokens))
    rate = _number(data, "request_rate", where, allow_inf=True) if "request_rate" in data else math.inf
    burstiness = _number(data, "burstiness", where, minimum=1e-9) if data.get("burstiness") is not None else 1.0
    concurrency = data.get("max_concurrency")
    if concurrency is not None and (not is_int(concurrency) or concurrency < 1):
        raise BenchFormatError(
            f"{_where(where, 'max_concurrency')}: expected a positive int or null, got {concurrency!r}"
        )
    if concurrency is not None and concurrency > MAX_REQUESTS.value:
        raise BenchFormatError(
            f"{_where(where, 'max_concurrency')}: {concurrency!r} is above {MAX_REQUESTS.value:,} "
            f"{MAX_REQUESTS.unit} ({MAX_REQUESTS.why})"
        )
    detailed = all(key in data for key in _DETAILED)
    partial = [key for key in _DETAILED if key in data]
    if partial and not detailed:
        missing = next(key for key in _DETAILED if key not in data)
        raise BenchFormatError(f"{_where(where, missing)}: missing, while {', '.join(partial)} are present")
    label = data.get("label")
    model_id = data.get("model_id")
    return BenchResult(
        source=where,
        label=label if isinstance(label, str) else None,
        model_id=model_id if isinstance(model_id, str) else None,
        request_rate_per_s=rate,
        burstiness=burstiness,
        max_concurrency=concurrency,
        completed=completed,
        failed=failed,
        duration_s=values["duration"],
        mean_input_tokens=values["total_input_tokens"] / completed,
        mean_output_tokens=values["total_output_tokens"] / completed,
        summary_s=_summary_seconds(data, where),
        per_request=_per_request(data, where) if detailed else None,
    )


def bench_from_simulation(
    result: object,
    *,
    overhead: ServingOverhead | None = None,
    request_rate_per_s: float,
    model_id: str,
    start_offset_s: float = 1000.0,
    jitter_fraction: float = 0.0,
    seed: int = 0,
    max_concurrency: int | None = None,
) -> dict[str, Any]:
    """A simulated run in ``vllm bench serve --save-result --save-detailed`` format.

    Every token's time comes from the simulation's steps (a token is out when the step that
    samples it ends); ``overhead`` is added to each request's first token, and so to its end.
    The file is labelled :data:`SIMULATED_LABEL`.

    Parameters
    ----------
    result : SimResult
    overhead : ServingOverhead, optional
    request_rate_per_s : float
        The rate to record as ``request_rate`` [1/s].
    model_id : str
    start_offset_s : float
        Added to every start time (the client's ``perf_counter`` is not 0 at the start) [s].
    jitter_fraction : float
        Measurement noise to add, in [0, 1): every TTFT and every gap is multiplied by
        ``exp(N(0, jitter_fraction))`` (seeded by ``seed``), so a fit to the file has a
        finite uncertainty as a real one does [-]. 0 writes the simulation exactly.
    seed : int
        Seed of the noise.
    max_concurrency : int, optional
        The client's cap to record (``--max-concurrency``): give it for a run of
        :class:`~budgetlab.ClosedLoopClients` (their ``concurrency``), so the file replays as
        their closed loop; ``None`` (default) records an open-loop run.
    """
    noise = number_in(
        "jitter_fraction", jitter_fraction, low=0.0, high=1.0, high_open=True, what="a fraction in [0, 1)"
    )
    rng = np.random.default_rng(random_seed("seed", seed))
    steps = result.steps  # type: ignore[attr-defined]
    ends = (steps.start_at_s + steps.duration_s).to_numpy()
    token_times: dict[Any, list[float]] = {}
    for index, step in enumerate(result.step_log()):  # type: ignore[attr-defined]
        first = set(step["first_token"])
        for request_id, _tokens, kind in step["scheduled"]:
            if kind == "decode" or request_id in first:
                token_times.setdefault(request_id, []).append(float(ends[index]))
    client = client_requests(result, overhead)
    serving = overhead or ServingOverhead()
    extra = serving.request_overhead_s
    itls = []
    ttfts = client.ttft_s.to_numpy(dtype=float).copy()
    for index, request_id in enumerate(client.request_id):
        times = token_times[request_id]
        seen = np.asarray(times, dtype=float)
        if serving.output_lag_steps:  # each token reaches the client when the next step ends
            seen = seen + next_step_s(steps, seen)
        gaps = np.diff(seen)
        if noise > 0:
            gaps = gaps * np.exp(rng.normal(0.0, noise, gaps.size))
            ttfts[index] *= float(np.exp(rng.normal(0.0, noise)))
        itls.append([round(float(g), 7) for g in gaps])
    ttfts = np.round(ttfts, 7)
    e2e = ttfts + np.array([sum(g) for g in itls])
    output = client.output_tokens.to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output > 1, (e2e - ttfts) / (output - 1), 0.0)
    client = client.assign(ttft_s=ttfts, e2e_s=e2e, tpot_s=tpot)
    frame = client
    metrics = {}
    for name, column in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2e_s")):
        values = frame[column].to_numpy() * 1e3
        metrics.update(
            {
                f"mean_{name}_ms": float(np.mean(values)),
                f"median_{name}_ms": float(np.median(values)),
                f"std_{name}_ms": float(np.std(values)),
                f"p99_{name}_ms": float(np.percentile(values, 99)),
            }
        )
    all_gaps = np.array([g for gaps in itls for g in gaps]) * 1e3
    if all_gaps.size:
        metrics.update({"mean_itl_ms": float(all_gaps.mean()), "median_itl_ms": float(np.median(all_gaps))})
    span = float((client.start_s + client.e2e_s).max() - client.start_s.min())
    return {
        "label": SIMULATED_LABEL,
        "backend": "budgetlab",
        "model_id": model_id,
        "num_prompts": len(client),
        "request_rate": request_rate_per_s,
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": span,
        "completed": len(client),
        "failed": 0,
        "total_input_tokens": int(client.prompt_tokens.sum()),
        "total_output_tokens": int(client.output_tokens.sum()),
        "request_throughput": len(client) / span,
        "output_throughput": float(client.output_tokens.sum()) / span,
        **metrics,
        "input_lens": [int(v) for v in client.prompt_tokens],
        "output_lens": [int(v) for v in client.output_tokens],
        "ttfts": [float(v) for v in client.ttft_s],
        "itls": itls,
        "start_times": [float(v) + start_offset_s for v in client.start_s],
        "errors": [""] * len(client),
        "budgetlab_request_overhead_s": extra,
    }


EXAMPLE_RECIPE: dict[str, Any] = {
    "hardware": "h100-sxm",
    "model": "llama-3.1-8b",
    "step_overhead_s": 1.5e-3,
    "request_overhead_s": 8e-3,
    "num_requests": 80,
    "rate_per_s": 6.0,
    "workload_seed": 7,
    "jitter_fraction": 0.03,
    "jitter_seed": 11,
}
"""How the shipped example was made (:func:`make_example_bench`): ``conversation_like``
requests on vLLM's H100 defaults, ``CalibratedCost.typical`` with a 1.5 ms per-step CPU time,
an 8 ms per-request overhead and 3 % measurement noise."""


def make_example_bench() -> dict[str, Any]:
    """Rebuild the shipped example file's content from :data:`EXAMPLE_RECIPE` (a test checks
    that the file is exactly this)."""
    from budgetlab.catalog import hardware, model
    from budgetlab.cost.calibrated import CalibratedCost
    from budgetlab.simulator import simulate
    from budgetlab.specs import EngineConfig
    from budgetlab.workload import conversation_like

    recipe = EXAMPLE_RECIPE
    gpu, llm = hardware(recipe["hardware"]), model(recipe["model"])
    engine = EngineConfig.vllm_defaults(gpu)
    cost = CalibratedCost.typical(gpu, llm, engine=engine).with_(step_overhead_s=recipe["step_overhead_s"])
    requests = conversation_like(
        num_requests=recipe["num_requests"], rate_per_s=recipe["rate_per_s"], seed=recipe["workload_seed"]
    )
    data = bench_from_simulation(
        simulate(requests, engine=engine, cost=cost),
        overhead=ServingOverhead(request_overhead_s=recipe["request_overhead_s"]),
        request_rate_per_s=recipe["rate_per_s"],
        model_id="meta-llama/Llama-3.1-8B-Instruct",
        jitter_fraction=recipe["jitter_fraction"],
        seed=recipe["jitter_seed"],
    )
    return {**data, "budgetlab_recipe": dict(recipe)}


def example_bench_path() -> Path:
    """The shipped example: a run simulated by budgetlab and written by
    :func:`bench_from_simulation` (``data/bench/``; its README says how it was made)."""
    from budgetlab.catalog import data_path

    return data_path("bench", "budgetlab-simulated-llama-3.1-8b-h100.json")
