"""What a client sees: the engine's latencies plus the serving time outside the engine's steps.

:func:`budgetlab.simulate` times the engine: a request's TTFT runs from its arrival at the
scheduler to the end of the step that samples its first token, its end-to-end latency to the
end of the step of its last token. A client of ``vllm serve`` also waits for what happens
outside those steps, once per request: the HTTP request is parsed, the prompt tokenized and
handed to the engine core, and every token is detokenized and written to the stream (the last
before the response closes). :class:`ServingOverhead` names that time, and
:func:`client_requests` adds it the way a benchmark client (``vllm bench serve``,
inference-perf) measures:

* TTFT = engine TTFT + ``request_overhead_s`` + the output lag of the first token;
* end-to-end = engine end-to-end + ``request_overhead_s`` + the output lag of the last token;
* time per output token is ``(e2e − TTFT) / (output − 1)`` of those.

The output lag (``output_lag_steps``, 0 or 1): a token reaches the client that many engine
steps after the step that sampled it, i.e. when the step that follows ends (no lag when the
engine then idles). Measured, not derived: on the ten steady published vLLM runs on H100
(``vllm_serving_h100_inference_sim.csv``), the client's TTFT exceeds the engine's by about one
step (9–20 ms for Llama 2 7B at TP1, 18–21 ms for Mixtral at TP2), as when each step's tokens
are detokenized and streamed while the next step runs; one step of lag and no constant
per-request time fit them within 13 % (:mod:`budgetlab.experiments.serving_runs`).

The per-step CPU time (scheduling, input preparation, sampling) is the cost model's
``step_overhead_s`` (:class:`~budgetlab.cost.CalibratedCost`), because it lengthens every step.
``request_overhead_s`` is not a datasheet figure: measure it with
:func:`budgetlab.serving.calibrate_serving` on your own benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from budgetlab._checks import MAX_TIME_S, number_in
from budgetlab.errors import ParameterError

__all__ = ["ServingOverhead", "CLIENT_COLUMNS", "client_requests", "client_metrics", "next_step_s"]

CLIENT_COLUMNS = ("request_id", "start_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s")
"""Columns of :func:`client_requests`: one row per request, latencies as a client measures them."""


@dataclass(frozen=True)
class ServingOverhead:
    """Serving time outside the engine's steps, per request.

    Parameters
    ----------
    request_overhead_s : float
        Added once to every request's TTFT and end-to-end latency [s], >= 0: HTTP handling,
        tokenization, the hand-off to the engine core, and detokenizing and streaming the
        first and last chunks. Default 0 (the engine's own latencies).
    output_lag_steps : int
        Engine steps between the step that samples a token and the client receiving it, 0 or 1
        (module docstring). Default 0.
    """

    request_overhead_s: float = 0.0
    output_lag_steps: int = 0

    def __post_init__(self) -> None:
        number_in("request_overhead_s", self.request_overhead_s, low=0.0, what="seconds >= 0", maximum=MAX_TIME_S)
        if self.output_lag_steps not in (0, 1) or isinstance(self.output_lag_steps, bool):
            raise ParameterError(f"output_lag_steps must be 0 or 1, got {self.output_lag_steps!r}")

    @classmethod
    def vllm(cls) -> ServingOverhead:
        """What the published vLLM runs support (module docstring): one step of output lag, no
        constant per-request time."""
        return cls(request_overhead_s=0.0, output_lag_steps=1)


def client_requests(result: object, overhead: ServingOverhead | None = None) -> pd.DataFrame:
    """The requests of a :class:`~budgetlab.simulator.SimResult` as a client measures them.

    Parameters
    ----------
    result : SimResult
        A finished simulation.
    overhead : ServingOverhead, optional
        ``None`` is no overhead.

    Returns
    -------
    pandas.DataFrame
        :data:`CLIENT_COLUMNS`, in the simulation's request order: ``start_s`` is the arrival
        [s]; ``tpot_s`` is ``(e2e − ttft) / (output − 1)`` [s], NaN for one-token answers (as
        ``vllm bench serve`` leaves them out of its TPOT).
    """
    requests = result.requests  # type: ignore[attr-defined]
    serving = overhead or ServingOverhead()
    extra = serving.request_overhead_s
    output = requests.output_tokens.to_numpy()
    ttft = requests.ttft_s.to_numpy() + extra
    e2e = requests.e2e_s.to_numpy() + extra
    if serving.output_lag_steps:
        steps = result.steps  # type: ignore[attr-defined]
        ttft = ttft + next_step_s(steps, requests.first_token_at_s.to_numpy())
        e2e = e2e + next_step_s(steps, requests.finished_at_s.to_numpy())
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output > 1, (e2e - ttft) / (output - 1), np.nan)
    return pd.DataFrame(
        {
            "request_id": requests.request_id.to_numpy(),
            "start_s": requests.arrival_at_s.to_numpy(),
            "prompt_tokens": requests.prompt_tokens.to_numpy(),
            "output_tokens": output,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
        }
    )


def next_step_s(steps: pd.DataFrame, times_s: np.ndarray) -> np.ndarray:
    """The duration of the step that starts at each of ``times_s`` (a step's end), 0 where the
    engine idles then [s] (vectorized over a :attr:`SimResult.steps` table)."""
    starts = steps.start_at_s.to_numpy(dtype=float)
    durations = steps.duration_s.to_numpy(dtype=float)
    times = np.asarray(times_s, dtype=float)
    index = np.clip(np.searchsorted(starts, times, side="left"), 0, max(len(starts) - 1, 0))
    if not len(starts):
        return np.zeros_like(times)
    found = np.abs(starts[index] - times) <= 1e-9 * np.maximum(1.0, np.abs(times))
    return np.where(found, durations[index], 0.0)


def client_metrics(frame: pd.DataFrame) -> dict[str, float]:
    """The summary ``vllm bench serve`` prints, from :func:`client_requests` or a benchmark's
    per-request table: mean, median and p99 of ``ttft_s``, ``tpot_s`` and ``e2e_s`` [s] (keys
    ``ttft_mean_s``, ``tpot_p99_s``, ...), and ``output_throughput_tokens_per_s`` (output
    tokens over the span from the first start to the last finish) [tokens/s]."""
    out: dict[str, float] = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        values = frame[metric].to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        name = metric[:-2]
        for label, value in (
            ("mean", float(np.mean(values)) if values.size else float("nan")),
            ("median", float(np.median(values)) if values.size else float("nan")),
            ("p99", float(np.percentile(values, 99)) if values.size else float("nan")),
        ):
            out[f"{name}_{label}_s"] = value
    span = float((frame.start_s + frame.e2e_s).max() - frame.start_s.min())
    out["output_throughput_tokens_per_s"] = float(frame.output_tokens.sum()) / span if span > 0 else float("nan")
    return out
