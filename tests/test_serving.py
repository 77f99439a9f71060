"""Serving: client latencies, ``vllm bench serve`` files, and calibrating to them (issue 12)."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import pytest

import budgetlab as bl
from budgetlab import ClosedLoopClients
from budgetlab.errors import BenchFormatError, CalibrationError, ParameterError
from budgetlab.serving import (
    SIMULATED_LABEL,
    ServingOverhead,
    bench_from_simulation,
    calibrate_serving,
    client_metrics,
    client_requests,
    example_bench_path,
    read_vllm_bench,
)
from budgetlab.serving.bench import EXAMPLE_RECIPE, make_example_bench

TINY = bl.EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, num_kv_blocks=100)


def _tiny_run():
    requests = [bl.Request(0, 0.0, 10, 3), bl.Request(1, 0.001, 10, 2)]
    return bl.simulate(requests, engine=TINY, cost=bl.ConstantCost(0.01))


def test_client_latencies_add_the_overhead_once():
    run = _tiny_run()
    # steps of 10 ms: request 0's first token at 10 ms, last at 30 ms; request 1's at 20 and 30 ms
    client = client_requests(run, ServingOverhead(request_overhead_s=0.005)).set_index("request_id")
    # request 1 arrives at 1 ms: engine TTFT 19 ms, end-to-end 29 ms; + 5 ms each
    assert client.ttft_s.tolist() == pytest.approx([0.015, 0.024])
    assert client.e2e_s.tolist() == pytest.approx([0.035, 0.034])
    assert client.tpot_s.tolist() == pytest.approx([0.010, 0.010])  # (e2e − ttft) / (output − 1): unchanged
    metrics = client_metrics(client.reset_index())
    assert metrics["ttft_mean_s"] == pytest.approx((0.015 + 0.024) / 2)
    assert metrics["output_throughput_tokens_per_s"] == pytest.approx(5 / 0.035)
    with pytest.raises(ParameterError, match="request_overhead_s"):
        ServingOverhead(request_overhead_s=-1.0)


def test_simulated_file_round_trips_through_the_reader():
    run = _tiny_run()
    data = bench_from_simulation(run, overhead=ServingOverhead(0.005), request_rate_per_s=2.0, model_id="m")
    assert data["label"] == SIMULATED_LABEL and data["itls"] == [pytest.approx([0.01, 0.01]), pytest.approx([0.01])]
    bench = read_vllm_bench(json.loads(json.dumps(data)))
    assert bench.detailed and bench.is_simulated and bench.completed == 2
    frame = bench.per_request
    assert frame.start_s.tolist() == pytest.approx([0.0, 0.001])
    assert frame.e2e_s.tolist() == pytest.approx(client_requests(run, ServingOverhead(0.005)).e2e_s.tolist())
    replay = bench.requests()
    assert [(r.request_id, r.arrival_at_s, r.prompt_tokens, r.output_tokens) for r in replay] == [
        (0, 0.0, 10, 3),
        (1, pytest.approx(0.001), 10, 2),
    ]
    assert bench.summary_s["ttft_mean_s"] == pytest.approx(0.0195)


def test_the_shipped_example_is_simulated_and_reproducible():
    path = example_bench_path()
    bench = read_vllm_bench(path)
    assert bench.is_simulated and bench.detailed and bench.completed == EXAMPLE_RECIPE["num_requests"]
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(json.dumps(make_example_bench()))


def test_summary_only_files_replay_at_the_rate():
    data = {
        k: v
        for k, v in make_example_bench().items()
        if k not in ("input_lens", "output_lens", "ttfts", "itls", "start_times", "errors")
    }
    bench = read_vllm_bench(data)
    assert not bench.detailed and bench.per_request is None
    replay = bench.requests(seed=1)
    assert len(replay) == bench.completed
    assert {r.prompt_tokens for r in replay} == {round(bench.mean_input_tokens)}
    gaps = np.diff([r.arrival_at_s for r in replay])
    assert gaps.mean() == pytest.approx(1 / 6.0, rel=0.3)
    closed = read_vllm_bench({**data, "max_concurrency": 8})
    clients = closed.workload(seed=1)
    assert closed.closed_loop and isinstance(clients, ClosedLoopClients)
    assert clients.concurrency == 8 and clients.paced  # at request_rate, then a free slot
    assert [r.arrival_at_s for r in clients.requests] == [r.arrival_at_s for r in replay]
    with pytest.raises(BenchFormatError, match=r"field 'max_concurrency': 100000000 is above"):
        read_vllm_bench({**data, "max_concurrency": 10**8})
    instant = read_vllm_bench({**data, "request_rate": "inf"}).requests()
    assert {r.arrival_at_s for r in instant} == {0.0}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d.pop("completed"), r"field 'completed': missing"),
        (lambda d: d.update(duration="long"), r"field 'duration': expected a finite number"),
        (lambda d: d.pop("mean_tpot_ms"), r"field 'mean_tpot_ms': missing"),
        (lambda d: d.pop("itls"), r"field 'itls': missing, while input_lens, output_lens, ttfts are present"),
        (lambda d: d.update(ttfts=d["ttfts"][:-1]), r"field 'ttfts': 79 entries, but input_lens has 80"),
        (lambda d: d["output_lens"].__setitem__(3, 2.5), r"field 'output_lens'\[3\]: expected an int >= 0"),
        (lambda d: d["itls"].__setitem__(0, "x"), r"field 'itls'\[0\]: expected a list of finite gaps"),
        (lambda d: d.update(max_concurrency=0), r"field 'max_concurrency': expected a positive int or null"),
        (lambda d: d.update(request_rate=-1), r"field 'request_rate': expected a finite number >= 0"),
    ],
)
def test_bad_files_name_the_field(change, match):
    data = make_example_bench()
    change(data)
    with pytest.raises(BenchFormatError, match=match):
        read_vllm_bench(data)


def test_bad_paths(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(BenchFormatError, match="not JSON"):
        read_vllm_bench(path)
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(BenchFormatError, match="expected a JSON object"):
        read_vllm_bench(path)
    with pytest.raises(FileNotFoundError):
        read_vllm_bench(tmp_path / "missing.json")


def test_failed_requests_are_left_out_as_vllm_does():
    data = make_example_bench()
    data["errors"][0] = "Connection reset"
    data["output_lens"][1] = 0
    data["itls"][1] = []
    # vLLM's counts: the failed request is out of completed and of both totals; the empty one is in
    data.update(
        completed=79,
        failed=1,
        total_input_tokens=sum(data["input_lens"][1:]),
        total_output_tokens=sum(data["output_lens"][1:]),
    )
    bench = read_vllm_bench(data)
    assert len(bench.per_request) == 78 and 0 not in set(bench.per_request.request_id)
    assert bench.failed == 1 and bench.completed == 79


@pytest.fixture(scope="module")
def example_fit():
    gpu, llm = bl.hardware("h100-sxm"), bl.model("llama-3.1-8b")
    engine = bl.EngineConfig.vllm_defaults(gpu)
    return calibrate_serving(
        example_bench_path(), cost=bl.CalibratedCost.typical(gpu, llm, engine=engine), engine=engine
    )


def test_calibration_recovers_the_overheads_the_file_was_made_with(example_fit):
    params = example_fit.parameters.set_index("name")
    step, request = params.loc["step_overhead_s"], params.loc["request_overhead_s"]
    # made with 1.5 ms per step and 8 ms per request, plus 3 % noise on every latency
    assert step.value == pytest.approx(1.5e-3, rel=0.05) and request.value == pytest.approx(8e-3, rel=0.05)
    assert 0 < step.stderr < 1e-3 and 0 < request.stderr < 2e-3
    assert not params.at_bound.any()
    for errors in (example_fit.train_errors, example_fit.holdout_errors):
        assert all(abs(v) < 0.03 for v in errors.values())
    assert "step_overhead_s = " in example_fit.summary() and "held back:" in example_fit.summary()
    numbers = example_fit.numbers()
    assert set(numbers["parameters"]) == {"step_overhead_s", "request_overhead_s"}
    assert numbers["comparison"]["tpot_mean_s"]["measured_s"] > 0


def test_the_fit_predicts_another_budget(example_fit):
    gpu, llm = bl.hardware("h100-sxm"), bl.model("llama-3.1-8b")
    other = dataclasses.replace(example_fit.engine, max_num_batched_tokens=1024)
    truth_cost = bl.CalibratedCost.typical(gpu, llm, engine=other).with_(step_overhead_s=1.5e-3)
    truth = client_metrics(
        client_requests(bl.simulate(list(example_fit.requests), engine=other, cost=truth_cost), ServingOverhead(8e-3))
    )
    predicted = example_fit.predict(engine=other)
    assert predicted.ttft_mean_s == pytest.approx(truth["ttft_mean_s"], rel=0.10)
    assert predicted.tpot_mean_s == pytest.approx(truth["tpot_mean_s"], rel=0.10)
    assert predicted.to_dict().keys() == truth.keys() and predicted.max_num_batched_tokens == 1024
    assert "TTFT mean" in str(predicted) and "budget 1,024" in repr(predicted)
    with pytest.raises(dataclasses.FrozenInstanceError):
        predicted.ttft_mean_s = 0.0  # type: ignore[misc]


def test_round_trip_within_the_reported_uncertainty():
    gpu, llm = bl.hardware("h100-sxm"), bl.model("llama-3.1-8b")
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
    truth = bl.CalibratedCost.typical(gpu, llm).with_(step_overhead_s=2e-3)
    requests = bl.conversation_like(num_requests=200, rate_per_s=8.0, seed=5)
    run = bl.simulate(requests, engine=engine, cost=truth)
    data = bench_from_simulation(
        run, overhead=ServingOverhead(0.012), request_rate_per_s=8.0, model_id="m", jitter_fraction=0.05, seed=2
    )
    fit = calibrate_serving(data, cost=bl.CalibratedCost.typical(gpu, llm), engine=engine, seed=1)
    params = fit.parameters.set_index("name")
    for name, true in (("step_overhead_s", 2e-3), ("request_overhead_s", 0.012)):
        value, stderr = params.loc[name, "value"], params.loc[name, "stderr"]
        print(f"{name}: {value:.5g} ± {stderr:.2g} (true {true})")
        assert abs(value - true) <= max(3 * stderr, 0.03 * true)


def test_a_closed_loop_file_replays_as_its_clients_and_calibrates():
    gpu, llm = bl.hardware("h100-sxm"), bl.model("llama-3.1-8b")
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
    truth = bl.CalibratedCost.typical(gpu, llm).with_(step_overhead_s=2e-3)
    requests = bl.conversation_like(num_requests=160, rate_per_s=8.0, seed=5)
    # 8 clients; each sends again 12 ms (the per-request overhead) after its response ended
    run = bl.simulate(ClosedLoopClients(8, requests, think_time_s=0.012), engine=engine, cost=truth)
    exact = bench_from_simulation(
        run, overhead=ServingOverhead(0.012), request_rate_per_s=math.inf, model_id="m", max_concurrency=8
    )
    bench = read_vllm_bench(json.loads(json.dumps(exact)))
    clients = bench.workload(think_time_s=0.012)
    assert isinstance(clients, ClosedLoopClients) and clients.concurrency == 8 and not clients.paced
    assert [r.arrival_at_s for r in clients.requests] == [0.0] * 160  # sent as slots free up
    replay = bl.simulate(clients, engine=engine, cost=truth)
    # the replay sends every request when the run did (to the file's rounding of the latencies)
    sent = replay.requests.set_index("request_id").arrival_at_s
    assert sent.loc[run.requests.request_id].to_numpy() == pytest.approx(run.requests.arrival_at_s.to_numpy())
    noisy = bench_from_simulation(
        run,
        overhead=ServingOverhead(0.012),
        request_rate_per_s=math.inf,
        model_id="m",
        max_concurrency=8,
        jitter_fraction=0.05,
        seed=2,
    )
    fit = calibrate_serving(noisy, cost=bl.CalibratedCost.typical(gpu, llm), engine=engine, seed=1)
    assert isinstance(fit.workload, ClosedLoopClients) and len(fit.requests) == 160
    params = fit.parameters.set_index("name")
    for name, true in (("step_overhead_s", 2e-3), ("request_overhead_s", 0.012)):
        value, stderr = params.loc[name, "value"], params.loc[name, "stderr"]
        print(f"closed loop, {name}: {value:.5g} ± {stderr:.2g} (true {true})")
        assert abs(value - true) <= max(3 * stderr, 0.03 * true)


def test_calibration_refuses_bad_requests():
    gpu, llm = bl.hardware("h100-sxm"), bl.model("llama-3.1-8b")
    engine = bl.EngineConfig.vllm_defaults(gpu)
    cost = bl.CalibratedCost.typical(gpu, llm, engine=engine)
    with pytest.raises(CalibrationError, match="fit must name distinct parameters"):
        calibrate_serving(example_bench_path(), cost=cost, engine=engine, fit=("warp_factor",))
    with pytest.raises(CalibrationError, match="distinct"):
        calibrate_serving(example_bench_path(), cost=cost, engine=engine, fit=("step_overhead_s", "step_overhead_s"))
    assert math.isfinite(read_vllm_bench(example_bench_path()).duration_s)


def test_calibration_keeps_the_output_lag_it_starts_with():
    gpu, llm = bl.hardware("h100-sxm"), bl.model("llama-3.1-8b")
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
    truth = bl.CalibratedCost.typical(gpu, llm)
    run = bl.simulate(bl.conversation_like(num_requests=120, rate_per_s=6.0, seed=3), engine=engine, cost=truth)
    lagged = ServingOverhead(request_overhead_s=0.005, output_lag_steps=1)
    data = bench_from_simulation(run, overhead=lagged, request_rate_per_s=6.0, model_id="m")
    fit = calibrate_serving(
        data, cost=truth, engine=engine, fit=("request_overhead_s",), overhead=ServingOverhead.vllm()
    )
    assert fit.overhead.output_lag_steps == 1
    # the lag is in the simulated latencies, so only the 5 ms constant is left to fit
    assert fit.parameters.set_index("name").loc["request_overhead_s", "value"] == pytest.approx(0.005, abs=5e-4)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d.update(failed=-5), r"field 'failed': expected a whole number >= 0, got -5"),
        (lambda d: d.update(completed=2.7), r"field 'completed': expected a whole number >= 1, got 2.7"),
        (lambda d: d.update(completed=10**15), r"field 'completed': 1000000000000000 is above 10,000,000 requests"),
        (lambda d: d.update(completed=79), r"field 'completed': 79, but the per-request lists give 80"),
        (lambda d: d.update(failed=3), r"field 'failed': 3, but the per-request lists give 0"),
        (lambda d: d.update(total_input_tokens=7), r"field 'total_input_tokens': 7, but the per-request lists"),
        (lambda d: d.update(total_output_tokens=7), r"field 'total_output_tokens': 7, but the per-request lists"),
        (lambda d: d["itls"][0].__setitem__(0, math.inf), r"field 'itls'\[0\]: expected a list of finite gaps"),
        (lambda d: d["itls"][0].__setitem__(0, True), r"field 'itls'\[0\]: expected a list of finite gaps"),
        (lambda d: d["itls"].__setitem__(0, d["itls"][0][:3]), r"field 'itls'\[0\]: 3 gaps for 134 output tokens"),
        (lambda d: d["start_times"].__setitem__(0, "soon"), r"field 'start_times'\[0\]: expected a finite number"),
        (lambda d: d["start_times"].__setitem__(1, 2.0**46), r"field 'start_times': the requests span"),
        (lambda d: d["input_lens"].__setitem__(0, 10**12), r"field 'input_lens'\[0\]: 1000000000000 tokens is above"),
        (lambda d: d.update(mean_ttft_ms=-1.0), r"field 'mean_ttft_ms': expected a finite number of milliseconds >= 0"),
        (lambda d: d.update(duration=1e308), r"field 'duration': 1e\+308 s is more than 4,294,967,296 s"),
        (lambda d: d.update(max_concurrency=10**30), r"field .max_concurrency.: 10+ is above 10,000,000"),
    ],
)
def test_inconsistent_or_impossible_files_are_refused_naming_the_field(change, match):
    """Issue 21 item 9 and issue 20 item 9: nothing inconsistent is read silently."""
    data = _example()
    change(data)
    started = time.perf_counter()
    with pytest.raises(BenchFormatError, match=match):
        read_vllm_bench(data)
    assert time.perf_counter() - started < 1.0


def test_a_closed_loop_summary_file_replays_as_clients_at_the_mean_lengths():
    data = {k: v for k, v in _example().items() if k not in ("input_lens", "output_lens", "ttfts", "itls")}
    bench = read_vllm_bench({**data, "max_concurrency": 4, "request_rate": "inf"})
    clients = bench.workload()
    assert isinstance(clients, ClosedLoopClients) and clients.concurrency == 4 and not clients.paced
    assert len(clients.requests) == bench.completed
    assert {(r.arrival_at_s, r.prompt_tokens) for r in clients.requests} == {(0.0, round(bench.mean_input_tokens))}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"a": ' * 10_000 + "1" + "}" * 10_000, "nested too deeply"),
        (b'{"label": "\xff"}', "not UTF-8 text"),
    ],
)
def test_unreadable_json_is_refused_naming_the_file(tmp_path, content, match):
    path = tmp_path / "bench.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(BenchFormatError, match=f"{path}: .*{match}"):
        read_vllm_bench(path)


def test_a_fit_far_off_the_measurement_warns(monkeypatch):
    """calibrate_serving never returns a fit far off its measurement silently."""
    from budgetlab.serving import calibrate as calibration

    with pytest.warns(calibration.CalibrationWarning, match=r"\+7450% off the measured ttft_mean"):
        calibration._warn_if_far_off("bench.json", {"ttft_mean": 74.5, "tpot_mean": 0.01}, {"ttft_mean": math.nan})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calibration._warn_if_far_off("bench.json", {"ttft_mean": 0.02}, {"ttft_mean": -0.03})


def _example() -> dict:
    """The shipped example file's content, fresh (a test checks it is what make_example_bench writes)."""
    return json.loads(example_bench_path().read_text(encoding="utf-8"))
