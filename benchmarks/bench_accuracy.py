"""Accuracy against real engines: the memory model on vLLM start-up logs, the shipped preset on
published vLLM serving runs (both in the developers' real-engine data, ``../shared/data/real/``
or ``$BUDGETLAB_REAL_DATA``; skipped when absent) with its median and P90 error stated as BLIS states it
(:mod:`budgetlab.experiments.accuracy`), the closed loop on published closed-loop runs (shipped:
``data/measured/closed-loop-runs.csv``), preset and fitted to one sweep, and the calibration round
trip on the shipped simulated benchmark file."""

from __future__ import annotations

import time

from budgetlab import CalibratedCost, EngineConfig, hardware, model
from budgetlab.experiments import accuracy, closed_loop_runs, kv_logs, serving_runs
from budgetlab.serving import calibrate_serving, example_bench_path


def main(argv: list[str] | None = None) -> None:
    logs = kv_logs.default_logs_path()
    if logs is None:
        print("  KV pool  : vllm_kv_logs.csv not found (developers' shared data, or set BUDGETLAB_REAL_DATA); skipped")
    else:
        compared = kv_logs.check_kv_logs(logs).compared
        roomy, tight = compared[~compared.tight], compared[compared.tight]
        print(
            f"  KV pool  : {len(compared)} real vLLM 0.19 start-ups: predicted KV tokens within "
            f"{roomy.kv_tokens_error_fraction.abs().max():.1%} (pools >= 10 GiB, {len(roomy)}) and "
            f"{tight.kv_tokens_error_fraction.abs().max():.1%} (tight, {len(tight)})"
        )
    runs = serving_runs.default_runs_path()
    if runs is None:
        print("  serving  : vllm_serving_h100_inference_sim.csv not found; skipped")
    else:
        start = time.perf_counter()
        check = serving_runs.check_serving_runs(runs, max_duration_s=60.0)
        steady, table = check.steady, check.table
        right = int((table.overloaded_measured == table.overloaded_predicted).sum())
        gpus = ", ".join(sorted(set(table.hardware)))
        print(
            f"  serving  : {len(steady)} steady published vLLM runs ({gpus}), shipped preset, no per-run fit: "
            f"largest error TTFT {steady.ttft_mean_s_error.abs().max():.1%}, TPOT "
            f"{steady.tpot_s_error.abs().max():.1%}, E2E {steady.e2e_mean_s_error.abs().max():.1%}; "
            f"overload right on {right}/{len(table)} runs ({time.perf_counter() - start:.1f} s)"
        )
        print("  accuracy : absolute relative error as BLIS states it (median, P90)")
        for line in accuracy.format_accuracy(check.accuracy).splitlines():
            print(f"             {line}")
    start = time.perf_counter()
    closed = closed_loop_runs.check_closed_loop_runs(progress=False)
    tpot, output = closed.accuracy.loc["tpot_ms"], closed.accuracy.loc["output_tokens_per_s"]
    print(
        f"  closed   : {len(closed.table)} published InferenceX closed-loop runs (gpt-oss-120b, H100, vLLM v0.15.1), "
        f"shipped preset: TPOT median {tpot.median_abs_error:.1%}, {int(tpot.within)}/{int(tpot.runs)} within "
        f"{tpot.bound:.0%}; output throughput median {output.median_abs_error:.1%} "
        f"({time.perf_counter() - start:.1f} s)"
    )
    published = closed_loop_runs.read_closed_loop_runs()
    sweep = published[(published.tp == 8) & (published.input_len == 1024) & (published.output_len == 1024)]
    fitted = closed_loop_runs.fit_closed_loop_runs(sweep)
    held = closed_loop_runs.check_closed_loop_runs(published.drop(index=sweep.index), cost=fitted.cost, progress=False)
    held_tpot = held.accuracy.loc["tpot_ms"]
    print(
        f"             fitted to the {len(sweep)} 1k/1k TP 8 runs (bandwidth "
        f"{fitted.parameters['bandwidth_efficiency']:.2f}, {fitted.parameters['step_overhead_s'] * 1e3:.2f} ms/step): "
        f"{int(held_tpot.runs)} held-out runs, TPOT median {held_tpot.median_abs_error:.1%}, "
        f"{int(held_tpot.within)}/{int(held_tpot.runs)} within {held_tpot.bound:.0%}"
    )
    gpu, llm = hardware("h100-sxm"), model("llama-3.1-8b")
    engine = EngineConfig.vllm_defaults(gpu)
    start = time.perf_counter()
    fit = calibrate_serving(example_bench_path(), cost=CalibratedCost.typical(gpu, llm, engine=engine), engine=engine)
    params = fit.parameters.set_index("name")
    step_ms = params.loc["step_overhead_s", ["value", "stderr"]] * 1e3
    request_ms = params.loc["request_overhead_s", ["value", "stderr"]] * 1e3
    print(
        f"  calibrate: simulated example (1.5 ms/step, 8 ms/request): fitted {step_ms.value:.2f} ± "
        f"{step_ms.stderr:.2f} ms/step, {request_ms.value:.2f} ± {request_ms.stderr:.2f} ms/request "
        f"in {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
