"""The five subcommands: each takes the parsed options and returns the JSON document it prints.

Every command builds its inputs with :mod:`budgetlab.cli.options`, runs one public budgetlab
function with explicit keyword arguments (``cost=`` always passed, so the printed label is the
cost that ran), prints a short table to ``out`` and returns ``{"command", "inputs", "results"}``
for ``--json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from budgetlab._version import __version__
from budgetlab.cli.options import (
    DEFAULT_MODEL,
    Setting,
    engine_from,
    setting_from,
    slo_from,
    synthetic_from,
    trace_from,
)
from budgetlab.cli.output import Progress, fmt_ms, fmt_number, one_line, print_table, shown
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cost.fit import calibrate
from budgetlab.cost.named import make_cost
from budgetlab.errors import ParameterError
from budgetlab.experiments.capacity import capacity
from budgetlab.experiments.executors import SerialExecutor, default_executor
from budgetlab.experiments.sweep import load_grid, service_rate_per_s, sweep
from budgetlab.experiments.tune import tune
from budgetlab.serving import calibrate_serving, read_vllm_bench
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig
from budgetlab.workload import SweepWorkload, TraceWorkload, load_trace

__all__ = ["COMMANDS", "simulate_command", "sweep_command", "capacity_command", "tune_command", "calibrate_command"]

Document = dict[str, Any]

COST_WORDS = {
    "typical": "typical (CalibratedCost.typical: fitted to published vLLM runs)",
    "ideal": "ideal (the seeds' idealized roofline: an upper bound on speed)",
}


def _inputs(args: argparse.Namespace, setting: Setting, engine: EngineConfig | None, workload: Any) -> Document:
    """What every JSON document records: version, GPU, model, engine, cost and workload."""
    return {
        "budgetlab_version": __version__,
        "gpu": setting.hardware.slug,
        "model": setting.model.slug,
        "model_arg": setting.model_arg,
        "model_from": setting.model_from,
        "cost": args.cost,
        "engine": None if engine is None else dataclasses.asdict(engine),
        "workload": workload,
    }


def _header(
    out: IO[str],
    title: str,
    args: argparse.Namespace,
    setting: Setting,
    lines: list[tuple[str, str]],
    *,
    cost_text: str | None = None,
) -> None:
    """The lines above a table: what ran, on what, priced by which cost model (``cost_text``,
    default the ``--cost`` flag's)."""
    model = setting.model.slug
    if setting.model_from != "catalog":
        model += f" (from {setting.model_from} {shown(setting.model_arg)})"
    print(f"budgetlab {__version__} {title}", file=out)
    rows = [
        ("setting", f"{setting.hardware.slug} + {model}"),
        ("cost model", cost_text or COST_WORDS[args.cost]),
        *lines,
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}", file=out)
    print(file=out)


def _engine_text(engine: EngineConfig) -> str:
    on = {True: "on", False: "off"}
    text = (
        f"budget {engine.max_num_batched_tokens:,} tokens, max_num_seqs {engine.max_num_seqs:,}, "
        f"prefix caching {on[engine.enable_prefix_caching]}, async scheduling {on[engine.async_scheduling]}"
    )
    if engine.tensor_parallel_size > 1:
        text += f", tensor parallel {engine.tensor_parallel_size}"
    if engine.num_speculative_tokens:
        text += f", {engine.speculative_method} drafting {engine.num_speculative_tokens} tokens"
    return text


@contextmanager
def _executor(args: argparse.Namespace) -> Iterator[cf.Executor | None]:
    """The pool ``--jobs`` asks for, shut down after the block: ``None`` (budgetlab's default,
    a process per CPU) without the option, this process for 1, else that many processes."""
    if args.jobs is None:
        yield None
        return
    pool: cf.Executor = SerialExecutor() if args.jobs == 1 else default_executor(args.jobs)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------

SIM_ROWS = (("TTFT", "ttft"), ("ITL (between tokens)", "itl"), ("end to end", "e2e"))
"""The latency rows of ``simulate``'s table: words, and the summary key's metric."""


def simulate_command(args: argparse.Namespace, out: IO[str]) -> Document:
    """Replay a trace or a synthetic workload through the simulator once."""
    setting = setting_from(args)
    engine = engine_from(args, setting.hardware)
    if args.trace:
        requests: Any = load_trace(args.trace, rate_per_s=args.rate, max_requests=args.num_requests)
        workload = {"trace": args.trace, "num_requests": len(requests), "rate_per_s": args.rate}
        described = f"trace {shown(args.trace)}: {len(requests):,} requests" + (
            f", replayed at {args.rate:g} req/s" if args.rate else ", at its own timing"
        )
    else:
        synthetic = synthetic_from(args, num_requests=1000)
        rate = args.rate or 10.0
        requests = synthetic.columns(rate_per_s=rate, seed=args.seed)
        workload = {
            "synthetic": args.workload,
            "num_requests": len(requests),
            "rate_per_s": rate,
            "seed": args.seed,
            "arrivals": "poisson",
        }
        described = f"synthetic {args.workload}: {len(requests):,} requests, Poisson at {rate:g} req/s"
    cost = make_cost(args.cost, setting.hardware, setting.model, engine=engine)
    progress = Progress(args.progress)
    progress.start(f"simulating {len(requests):,} requests on {setting.hardware.slug} + {setting.model.slug}")
    result = simulate(requests, engine=engine, cost=cost, hardware=setting.hardware, model=setting.model)
    progress.done("simulated")
    summary = result.summary()
    _header(out, "simulate", args, setting, [("engine", _engine_text(engine)), ("workload", described)])
    label = f"{args.cost} cost"
    rows: list[list[object]] = []
    for name, key in SIM_ROWS:
        rows.append([f"{name} [ms]", *(fmt_ms(summary.get(f"{key}_{p}_s")) for p in ("p50", "p90", "p99", "mean"))])
    print_table([f"latency ({label}, engine side)", "p50", "p90", "p99", "mean"], rows, stream=out)
    print(file=out)
    totals: list[list[object]] = [
        ["requests per second achieved", summary.get("requests_per_s")],
        ["output tokens per second", summary.get("throughput_tokens_per_s")],
        ["longest gap between tokens [ms]", fmt_ms(summary.get("max_itl_s"))],
        ["makespan [s]", summary.get("makespan_s")],
        ["steps", summary.get("num_steps")],
        ["preemptions", summary.get("num_preemptions")],
        ["KV pool [blocks]", summary.get("num_kv_blocks")],
        ["KV peak [share of pool]", summary.get("kv_peak_fraction")],
        ["prefix-cache hit rate", summary.get("prefix_hit_rate")],
    ]
    print_table([f"run ({label})", "value"], totals, stream=out)
    return {
        "command": "simulate",
        "inputs": _inputs(args, setting, engine, workload),
        "cost_model": repr(cost),
        "results": {"summary": summary},
    }


# --------------------------------------------------------------------------------------------
# sweep, capacity, tune
# --------------------------------------------------------------------------------------------


def _experiment_workload(args: argparse.Namespace) -> tuple[SweepWorkload, Document, str]:
    """The workload the experiments regenerate at each load, its JSON record and its words."""
    if args.trace:
        trace: TraceWorkload = trace_from(args, num_requests=args.num_requests or 1000)
        record = {"trace": args.trace, "num_requests": trace.num_requests, "native_rate_per_s": trace.native_rate_per_s}
        words = f"trace {shown(args.trace)}: first {trace.num_requests:,} requests, replayed at each load"
        return cast(SweepWorkload, trace), record, words  # a frozen dataclass: mypy sees read-only attributes
    synthetic = synthetic_from(args, num_requests=300)
    record = {"synthetic": args.workload, "num_requests": synthetic.num_requests, "seed": args.seed}
    words = f"synthetic {args.workload}: {synthetic.num_requests:,} requests per simulation, Poisson"
    return cast(SweepWorkload, synthetic), record, words


def grid_points(budgets: list[int], caps: list[int], rates: list[float]) -> list[tuple[int, int, float]]:
    """The sweep's grid points in its table's row order: budget, then cap (pairs with a budget
    below the cap left out, as the sweep leaves them out), then load."""
    return [(b, c, r) for b in budgets for c in caps if b >= c for r in rates]


def join_sweep_points(documents: list[Document], sources: list[str]) -> Document:
    """The sweep document of a whole grid from the documents of its points (``sweep --point``):
    every point once, rows in grid order.

    Raises
    ------
    ParameterError
        A document that is not a point of a sweep, points of different grids or inputs, or a
        point missing or given twice (the message names the files).
    """
    by_point: dict[int, tuple[Document, str]] = {}
    for document, source in zip(documents, sources, strict=True):
        point = document.get("inputs", {}).get("point") if isinstance(document, dict) else None
        if document.get("command") != "sweep" or not isinstance(point, int):
            raise ParameterError(f"{source} is not the JSON of a `sweep --point` run")
        if point in by_point:
            raise ParameterError(f"grid point {point} is in both {by_point[point][1]} and {source}")
        by_point[point] = (document, source)
    first, first_source = next(iter(by_point.values()))
    inputs = {k: v for k, v in first["inputs"].items() if k != "point"}
    for document, source in by_point.values():
        if {k: v for k, v in document["inputs"].items() if k != "point"} != inputs:
            raise ParameterError(f"{source} is a point of another grid or setting than {first_source}")
    total = first["results"]["num_points"]
    missing = sorted(set(range(total)) - set(by_point))
    if missing:
        raise ParameterError(f"grid points {missing[:10]} of {total} are missing: run `sweep --point I` for each")
    rows = [by_point[i][0]["results"]["rows"][0] for i in range(total)]
    return {"command": "sweep", "inputs": inputs, "results": {"rows": rows}}


def _joined_sweep(args: argparse.Namespace, out: IO[str]) -> Document:
    """``sweep --join FILE ...``: the points' JSON files as one sweep table."""
    documents = []
    for path in args.join:
        try:
            documents.append(json.loads(Path(path).expanduser().read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ParameterError(f"cannot read {shown(path)} as JSON: {one_line(exc)}") from None
    joined = join_sweep_points(documents, [shown(p) for p in args.join])
    _print_sweep_rows(joined["results"]["rows"], out)
    return joined


def sweep_command(args: argparse.Namespace, out: IO[str]) -> Document:
    """Simulate every budget x cap x load of a grid (or one point of it: ``--point``)."""
    if args.join:
        return _joined_sweep(args, out)
    setting = setting_from(args)
    template = engine_from(args, setting.hardware, knobs=False)
    workload, record, words = _experiment_workload(args)
    budgets = list(args.budgets)
    caps = list(args.max_num_seqs or [min(template.max_num_seqs, min(budgets))])
    rates = args.rates
    if rates is None:
        service = service_rate_per_s(
            workload, budgets=budgets, hardware=setting.hardware, model=setting.model, cost=args.cost, seed=args.seed
        )
        rates = [float(r) for r in load_grid(service, num_loads=args.num_loads)]
    grid = grid_points(budgets, caps, rates)
    inputs = _inputs(args, setting, template, record)
    inputs["grid"] = {"budgets": budgets, "max_num_seqs": caps, "rates_per_s": rates}
    if args.num_points:
        print(len(grid), file=out)
        return {"command": "sweep", "inputs": inputs, "results": {"num_points": len(grid)}}
    if args.point is not None:
        if not 0 <= args.point < len(grid):
            raise ParameterError(f"--point {args.point} is not a grid point: the grid has points 0 to {len(grid) - 1}")
        budget, cap, rate = grid[args.point]
        budgets, caps, rates = [budget], [cap], [rate]
    progress = Progress(args.progress)
    progress.start(f"sweeping {len(budgets) * len(caps) * len(rates)} grid points")
    with _executor(args) as executor:
        table = sweep(
            progress=args.progress,
            workload=workload,
            budgets=budgets,
            max_num_seqs=caps,
            rates_per_s=rates,
            hardware=setting.hardware,
            model=setting.model,
            cost=args.cost,
            seed=args.seed,
            engine=template,
            skip_invalid=True,
            executor=executor,
        )
    progress.done("swept")
    _header(
        out,
        "sweep",
        args,
        setting,
        [("engine", _engine_text(template) + " (budget and cap swept)"), ("workload", words)],
    )
    _print_sweep_rows(table.to_dict(orient="records"), out)
    results: Document = {"rows": table}
    if args.point is not None:
        inputs["point"] = args.point
        results["num_points"] = len(grid)
    return {"command": "sweep", "inputs": inputs, "results": results}


def _print_sweep_rows(rows: list[dict[str, Any]], out: IO[str]) -> None:
    """The sweep's table: a row per grid point."""
    header = [
        "budget",
        "max_num_seqs",
        "offered req/s",
        "achieved req/s",
        "TTFT p90 ms",
        "ITL p99 ms",
        "KV peak",
        "cost",
    ]
    table = [
        [
            row["max_num_batched_tokens"],
            row["max_num_seqs"],
            row["rate_per_s"],
            row["requests_per_s"],
            fmt_ms(row["ttft_p90_s"]),
            fmt_ms(row["itl_p99_s"]),
            row["kv_peak_fraction"],
            row["cost"],
        ]
        for row in rows
    ]
    print_table(header, table, stream=out, right=[True] * len(header))


def _slo_words(args: argparse.Namespace) -> tuple[Any, str]:
    slo, default = slo_from(args)
    return slo, str(slo) + (" (the default SLO: set any --...-ms limit to change it)" if default else "")


def capacity_command(args: argparse.Namespace, out: IO[str]) -> Document:
    """The highest load one replica carries under the SLO."""
    setting = setting_from(args)
    engine = engine_from(args, setting.hardware)
    workload, record, words = _experiment_workload(args)
    slo, slo_text = _slo_words(args)
    extra = {} if args.tolerance is None else {"tolerance_fraction": args.tolerance}
    progress = Progress(args.progress)
    progress.start("searching for the capacity")
    result = capacity(
        progress=args.progress,
        workload=workload,
        slo=slo,
        engine=engine,
        hardware=setting.hardware,
        model=setting.model,
        cost=args.cost,
        seed=args.seed,
        **extra,
    )
    progress.done(f"searched ({result.num_simulations} simulations)")
    numbers: dict[str, Any] = result.numbers()
    lines = [("engine", _engine_text(engine)), ("workload", words), ("SLO", slo_text)]
    _header(out, "capacity", args, setting, lines)
    at = numbers["at_capacity"]
    rows = [
        ["capacity per replica [req/s]", numbers["capacity_per_s"]],
        ["SLO breaks at [req/s]", numbers["upper_per_s"]],
        ["breaks on", shown(numbers["breaks_detail"])],
        ["TTFT p90 at capacity [ms]", fmt_ms(at.get("ttft_p90_s"))],
        ["ITL p99 at capacity [ms]", fmt_ms(at.get("itl_p99_s"))],
        ["simulations", numbers["num_simulations"]],
    ]
    print_table([f"capacity ({args.cost} cost)", "value"], rows, stream=out)
    return {
        "command": "capacity",
        "inputs": {**_inputs(args, setting, engine, record), "slo": slo.limits},
        "results": numbers,
    }


def tune_command(args: argparse.Namespace, out: IO[str]) -> Document:
    """The budget and cap with the most capacity under the SLO."""
    setting = setting_from(args)
    template = engine_from(args, setting.hardware)
    workload, record, words = _experiment_workload(args)
    slo, slo_text = _slo_words(args)
    extra = {} if args.tolerance is None else {"tolerance_fraction": args.tolerance}
    progress = Progress(args.progress)
    progress.start("tuning the budget and max_num_seqs")
    with _executor(args) as executor:
        result = tune(
            progress=args.progress,
            workload=workload,
            slo=slo,
            hardware=setting.hardware,
            model=setting.model,
            cost=args.cost,
            engine=template,
            seed=args.seed,
            executor=executor,
            **extra,
        )
    progress.done("tuned")
    numbers: dict[str, Any] = result.numbers()
    _header(out, "tune", args, setting, [("workload", words), ("SLO", slo_text)])
    rows = [
        ["max_num_batched_tokens", numbers["max_num_batched_tokens"]],
        ["max_num_seqs", numbers["max_num_seqs"]],
        ["capacity per replica [req/s]", numbers["capacity_per_s"]],
        ["SLO breaks at [req/s]", numbers.get("upper_per_s")],
        ["binding gate", shown(numbers.get("binding_gate_label", "-"))],
    ]
    if numbers.get("rate_per_s") is not None:
        rows.insert(3, ["load to run at, with margin [req/s]", numbers["rate_per_s"]])
    margin = numbers.get("margin")
    if isinstance(margin, dict) and margin.get("used_fraction") is not None:
        used = f"{fmt_number(margin['used_fraction'])} / {fmt_number(margin.get('neighbours_used_fraction'))}"
        rows.append(["share of latency limits used (it / neighbours)", used])
    print_table([f"recommendation ({args.cost} cost)", "value"], rows, stream=out)
    candidates = [
        [c["phase"], c["max_num_batched_tokens"], c["max_num_seqs"], c["capacity_per_s"], "*" if c["chosen"] else ""]
        for c in numbers.get("candidates", [])
    ]
    if candidates:
        print(file=out)
        header = ["searched", "budget", "max_num_seqs", f"capacity req/s ({args.cost})", "chosen"]
        print_table(header, candidates, stream=out)
    explanation = numbers.get("explanation") or []
    if explanation:
        print(file=out)
        for sentence in explanation:
            print(f"- {shown(sentence)}", file=out)
    return {
        "command": "tune",
        "inputs": {**_inputs(args, setting, template, record), "slo": slo.limits},
        "results": numbers,
    }


# --------------------------------------------------------------------------------------------
# calibrate
# --------------------------------------------------------------------------------------------


def calibrate_command(args: argparse.Namespace, out: IO[str]) -> Document:
    """Fit the step cost to a vllm bench serve result or to measured step times."""
    if args.bench:
        return _calibrate_bench(args, out)
    return _calibrate_steps(args, out)


def _calibrate_bench(args: argparse.Namespace, out: IO[str]) -> Document:
    bench = read_vllm_bench(args.bench)
    if args.model is None:  # the file's own model_id, a Hugging Face id
        args.model = bench.model_id or DEFAULT_MODEL
    setting = setting_from(args)
    engine = engine_from(args, setting.hardware)
    if args.cost == "typical":
        start = CalibratedCost.typical(setting.hardware, setting.model, engine=engine)
    else:
        start = CalibratedCost.ideal(setting.hardware, setting.model).for_engine(engine)
    progress = Progress(args.progress)
    progress.start(f"fitting to {bench.completed:,} benchmark requests")
    fit = calibrate_serving(bench, cost=start, engine=engine, seed=args.seed)
    progress.done("fitted")
    numbers = fit.numbers()
    simulated = " (simulated by budgetlab, not measured)" if bench.is_simulated else ""
    lines = [
        ("engine", _engine_text(engine)),
        (
            "benchmark",
            f"{shown(args.bench)}{simulated}: {bench.completed:,} requests at {bench.request_rate_per_s:g} req/s",
        ),
        ("fit", f"starts from the {args.cost} cost; fits the CPU time per step and the per-request overhead"),
    ]
    _header(out, "calibrate (vllm bench serve result)", args, setting, lines)
    params = [[name, p["value"] * 1e3, p["stderr"] * 1e3] for name, p in numbers["parameters"].items()]
    print_table(["fitted parameter", "value [ms]", "± stderr [ms]"], params, stream=out)
    print(file=out)
    comparison = [
        [f"{metric.removesuffix('_s')} [ms]", fmt_ms(v["measured_s"]), fmt_ms(v["simulated_s"])]
        if metric.endswith("_s") and not metric.endswith("_per_s")
        else [metric, v["measured_s"], v["simulated_s"]]
        for metric, v in numbers["comparison"].items()
    ]
    print_table(["client metric", "measured", f"simulated (fitted from {args.cost})"], comparison, stream=out)
    return {
        "command": "calibrate",
        "inputs": {
            **_inputs(args, setting, engine, {"bench": args.bench, "completed": bench.completed}),
            "kind": "bench",
        },
        "cost_model": repr(fit.cost),
        "results": numbers,
    }


def _calibrate_steps(args: argparse.Namespace, out: IO[str]) -> Document:
    args.model = args.model or DEFAULT_MODEL
    setting = setting_from(args)
    tp = args.tensor_parallel_size or 1
    progress = Progress(args.progress)
    progress.start("fitting the step cost")
    fit = calibrate(
        args.steps,
        hardware=setting.hardware,
        model=setting.model,
        tp=tp,
        attention=args.attention,
        holdout_fraction=args.holdout_fraction,
        seed=args.seed,
    )
    progress.done("fitted")
    numbers = fit.numbers()
    lines = [
        ("measurements", f"{shown(args.steps)}: {fit.num_train} rows fitted, {fit.num_holdout} held back"),
        ("fit", "CalibratedCost's terms from its defaults (the --cost flag does not apply here)"),
    ]
    cost_text = "calibrated: CalibratedCost fitted to these measurements"
    _header(out, "calibrate (measured step times)", args, setting, lines, cost_text=cost_text)
    rows = [
        [name, p["value"], p["stderr"], "yes" if p["at_bound"] else ""] for name, p in numbers["parameters"].items()
    ]
    print_table(["fitted parameter (SI units)", "value", "± stderr", "at bound"], rows, stream=out)
    print(file=out)
    errors = [
        [
            "fitted rows: mean / largest error",
            f"{fmt_number(numbers['train_mape'])} / {fmt_number(numbers['train_max_error'])}",
        ],
        [
            "held back: mean / largest error",
            f"{fmt_number(numbers['holdout_mape'])} / {fmt_number(numbers['holdout_max_error'])}",
        ],
    ]
    print_table(["error of the fitted cost [fraction]", "value"], errors, stream=out)
    inputs = _inputs(args, setting, None, {"steps": args.steps, "rows": fit.num_train + fit.num_holdout})
    inputs.update(kind="steps", cost="calibrated", tp=tp, attention=args.attention)
    return {"command": "calibrate", "inputs": inputs, "cost_model": repr(fit.cost), "results": numbers}


COMMANDS: dict[str, Callable[[argparse.Namespace, IO[str]], Document]] = {
    "simulate": simulate_command,
    "sweep": sweep_command,
    "capacity": capacity_command,
    "tune": tune_command,
    "calibrate": calibrate_command,
}
"""Each subcommand's function: ``(options, table stream) -> JSON document``."""
