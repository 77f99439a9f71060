"""Execute every notebook through papermill and check the key numbers it saves.

One parametrized test covers ``notebooks/*.ipynb`` (a new notebook is picked up automatically);
give it small parameters in ``SMALL`` and its checks in ``CHECKS``. A second test feeds bad
parameters and expects the validation cell to stop the notebook with one clear message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

papermill = pytest.importorskip("papermill")
from papermill.exceptions import PapermillExecutionError  # noqa: E402

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))

pytestmark = pytest.mark.notebook

#: Per-notebook parameter overrides that keep a run short (missing: the notebook's defaults).
SMALL: dict[str, dict[str, Any]] = {
    "01-step-cost": {
        "max_tokens": 4000,
        "zoom_tokens": 600,
        "tile_zoom_tokens": 512,
        "tp_degrees": [1, 8],
        "moe_token_marks": [1, 4096],
    },
    "03-ttft-vs-budget": {"budgets": [512, 2048, 8192]},
    "04-longest-gap": {"budgets": [512, 2048, 8192]},
    "07-load-sweep": {
        "num_requests_per_load": 200,
        "num_loads": 3,
        "sweep_budgets": [512, 2048],
        "budget_tokens": 2048,
    },
    "08-tune-for-slo": {"num_requests_per_load": 200, "budgets": [512, 2048, 8192], "capacity_tolerance_fraction": 0.1},
    "09-prefix-caching-and-async": {
        "num_conversations": 40,
        "caching_budgets": [256, 2048, 8192],
        "pressure_kv_tokens": [16000, 64000],
    },
    "10-validation-against-real-runs": {"search_preset": False, "budgets": [2048]},
    "11-multi-gpu": {
        "num_requests": 100,
        "max_duration_s": 20.0,
        "ladder_max_batch": 600,
        "moe_budgets": [512, 2048, 8192],
    },
    "12-attention-kinds": {
        "models": ["gemma-3-27b", "gpt-oss-20b", "qwen3-next-80b-a3b"],  # beside model qwen3-32b
        "context_lengths": [4096, 32768],
        "gate_num_requests": 100,
        "tune_num_requests": 40,
        "tune_budget_factors": [1.0],
        "tune_cap_factors": [1.0],
    },
    "13-speculative-decoding": {
        "speculative_tokens": [1, 5],
        "rates_per_s": [2.0, 16.0],
        "load_num_requests": 60,
        "tune_num_requests": 60,
        "tune_tolerance_fraction": 0.1,
        "published_num_requests_batch_one": 4,
        "published_num_requests_per_load": 40,
    },
    "14-fleet": {
        "num_requests_per_load": 200,
        "plan_rate_per_s": 20.0,
        "fleet_rates_per_s": [10.0, 30.0],
        "routers": ["round_robin", "prefix_aware"],
        "frontier_budgets": [512, 2048],
        "frontier_max_num_seqs": [64],
        "frontier_concurrency": [1, 16],
        "router_replicas": 3,
        "compared_routers": ["round_robin", "prefix_aware"],
        "num_conversations": 40,
        "closed_loop_seeds": 1,
    },
}


def _check_01(r: dict) -> None:
    assert r["weight_read_s"] == pytest.approx(4.79e-3, abs=0.005e-3)
    assert r["per_token_s"] == pytest.approx(16.2e-6, abs=0.05e-6)
    assert r["knee_tokens"] == pytest.approx(295, abs=1)
    assert r["flops_per_token"] == pytest.approx(16.06e9)
    assert r["step_time_s"]["512"] == pytest.approx(8.3e-3, abs=0.05e-3)
    assert r["step_time_s"]["2048"] == pytest.approx(33.2e-3, abs=0.05e-3)
    assert r["step_time_s"]["8192"] == pytest.approx(133e-3, abs=0.5e-3)
    # the calibrated preset: slower than the idealized curve at every mark
    assert all(r["calibrated_step_time_s"][n] > r["step_time_s"][n] for n in ("512", "2048", "8192"))
    # one token past a 128-token tile boundary costs a whole tile
    assert r["tile_tokens"] == 128 and r["tile_cliff_jump_s"]["128"] > 1e-3
    # Llama 3.1 70B: 141 GB of weights fit an 80 GB H100 only when split; 8 GPUs are faster
    assert r["tp_weights_fit"] == {"1": False, "8": True}
    assert r["tp_step_time_s"]["8"]["2048"] < r["tp_step_time_s"]["1"]["2048"]
    # Mixtral 8x7B: one token reads 2 of 8 experts per layer, 4,096 tokens read them all
    assert r["moe_expected_experts"]["1"] == pytest.approx(2.0)
    assert r["moe_weight_bytes"]["1"] == pytest.approx(25.8e9, rel=0.01)
    assert r["moe_weight_bytes"]["4096"] == pytest.approx(93.4e9, rel=0.01)


def _check_02(r: dict) -> None:
    assert r["chunks"] == [1948, 1948, 1104]
    assert r["prefill_tokens_left"] == {"100": 1948, "60": 1988, "400": 1648}
    assert r["tradeoff"]["small"]["num_prompt_steps"] > r["tradeoff"]["big"]["num_prompt_steps"]
    assert r["tradeoff"]["small"]["prompt_step_s"] < r["tradeoff"]["big"]["prompt_step_s"]
    assert r["ttft_s"] == pytest.approx(sum(r["step_time_s"]))


def _check_03(r: dict) -> None:
    assert r["budgets"] == [512, 2048, 8192]
    assert len(r["ttft_s"]) == len(r["step_time_s"]) == 3
    assert r["ttft_s"] == sorted(r["ttft_s"], reverse=True)  # bigger budgets, earlier first token
    assert r["ttft_s"][-1] == pytest.approx(r["ttft_without_budget_s"])
    assert r["step_time_s"][1] == pytest.approx(33.2e-3, abs=0.05e-3)
    assert r["budget_for_step_target_ideal"] == 2464
    assert r["cost_model_of"]["budget_for_step_target_ideal"] == "ideal"
    # the calibrated curve: slower everywhere, still falling, and bigger budgets keep paying
    assert len(r["ttft_calibrated_s"]) == 3
    assert all(c > i for c, i in zip(r["ttft_calibrated_s"], r["ttft_s"]))
    assert r["ttft_calibrated_s"] == sorted(r["ttft_calibrated_s"], reverse=True)
    assert r["payoff"]["calibrated"]["saved_fraction"] > r["payoff"]["idealized"]["saved_fraction"]
    assert r["budget_for_step_target_typical"] < r["budget_for_step_target_ideal"]
    assert r["cost_model_of"]["budget_for_step_target_typical"] == "typical"


def _check_04(r: dict) -> None:
    assert r["longest_gap_with_budget_s"] == pytest.approx(33.2e-3, abs=0.05e-3)
    assert r["longest_gap_without_budget_s"] == pytest.approx(82.8e-3, abs=0.05e-3)
    assert r["budgets"] == [512, 2048, 8192]
    assert r["longest_gap_s"][1] == pytest.approx(r["longest_gap_with_budget_s"])
    assert r["longest_gap_s"][-1] == pytest.approx(r["longest_gap_without_budget_s"])
    assert r["longest_gap_calibrated_with_budget_s"] > r["longest_gap_with_budget_s"]
    assert r["longest_gap_calibrated_without_budget_s"] > r["longest_gap_without_budget_s"]
    assert r["longest_gap_calibrated_s"][1] == pytest.approx(r["longest_gap_calibrated_with_budget_s"])
    assert r["longest_gap_calibrated_s"][-1] == pytest.approx(r["longest_gap_calibrated_without_budget_s"])
    # the gap target counts the decoders' and the chunk's own KV reads: below 03's step target
    assert r["budget_for_gap_target_ideal"] == 2464 > r["budget_for_gap_target_typical"]
    assert r["cost_model_of"]["budget_for_gap_target_typical"] == "typical"


def _check_05(r: dict) -> None:
    # KV capacity of Llama 3.1 8B on an H100, budget 2,048, 256 sequences, 0.9 utilization:
    # (79.19 GiB × 0.9 − 16.06 GB − 0.25 GiB − 0.554 GB sampler peak) / 2 MiB = 28,440 blocks, one null
    assert r["kv_bytes_per_token"] == 131_072
    assert r["kv_capacity_blocks"] == 28_439 and r["kv_capacity_tokens"] == 28_439 * 16
    assert r["reported_memory_bytes"] == round(79.19 * 2**30) and r["non_torch_bytes"] == 0.25 * 2**30
    assert r["memory_tight"] is False and r["memory_levers"][0]["lever"] == "as configured"
    by_budget = [r["kv_tokens_by_budget"][b] for b in sorted(r["kv_tokens_by_budget"], key=int)]
    assert by_budget == sorted(by_budget, reverse=True), "a bigger budget leaves less KV"
    cases = r["cases"]
    base, low, high = cases["baseline"], cases["cap too low"], cases["cap too high for the pool"]
    assert base["num_preemptions"] == 0 and base["running_max"] < base["max_num_seqs"]
    # cap too low: pinned at the cap, KV comfortable, requests queue
    assert low["running_max"] == low["max_num_seqs"] == 16
    assert low["kv_peak_fraction"] < 0.2 and low["ttft_p50_s"] > 10 * base["ttft_p50_s"]
    assert r["gate_share"]["cap too low"]["slot"] > 0.5
    # cap too high for a small pool: KV full, preemptions, the cap never reached
    assert high["kv_tokens"] == 16_000 and high["kv_peak_fraction"] == 1.0
    assert high["num_preemptions"] > 0 and high["running_max"] < high["max_num_seqs"]
    assert high["max_itl_s"] > base["max_itl_s"]
    # the two scheduling orders: identical on a comfortable pool, different under pressure
    assert r["policies_identical_on_baseline"] is True
    assert set(r["policies"]) == {"vllm-v1", "decode-first"}
    assert r["policies"]["vllm-v1"]["num_requests"] == r["workload"]["num_requests"] == 300


def _check_06(r: dict) -> None:
    assert r["measurements"] == "example" and r["num_rows"] == 8
    assert set(r["parameters"]) == {"step_overhead_s", "bandwidth_efficiency", "flop_efficiency", "knee_overlap_loss"}
    assert 0.5 < r["parameters"]["flop_efficiency"]["value"] < 0.9
    assert r["num_train"] + r["num_holdout"] == 8 and r["num_holdout"] == 2
    assert r["train_mape"] < 0.03 and r["holdout_max_error"] < 0.1
    assert r["mape_by_model"]["idealized"] > 0.25 > 0.05 > r["mape_by_model"]["fitted"]
    scenario = r["scenario_step_time_s"]
    assert scenario["idealized"]["2048"] == pytest.approx(33.2e-3, abs=0.05e-3)
    assert scenario["this fit, carried over"]["2048"] > scenario["idealized"]["2048"]


def _check_07(r: dict) -> None:
    assert r["budgets"] == [512, 2048] and r["max_num_seqs"] == 256
    assert r["slo"] == {"ttft_p90_s": 0.8, "itl_p99_s": 0.04}
    assert len(r["rates_per_s"]) == 3 and r["rates_per_s"] == sorted(r["rates_per_s"])
    assert r["rates_per_s"][-1] == pytest.approx(1.1 * r["service_rate_per_s"], rel=0.01)
    assert set(r["capacity_per_s"]) == {"512", "2048"}
    for budget, cap in r["capacity_per_s"].items():
        assert r["capacity_status"][budget] == "ok" and 0 < cap < 1.5 * r["service_rate_per_s"]
        assert r["capacity_breaks_on"][budget] in {"ttft_p90_s", "itl_p99_s"}
    table = r["percentiles"]["2048"]
    assert table["rate_per_s"] == r["rates_per_s"]
    assert {"ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "itl_p50_s", "itl_p90_s", "itl_p99_s"} <= set(table)
    # the real-engine cost by default, and the results say so
    assert r["cost_model"] == r["cost"] == "typical"
    assert max(table["itl_p99_s"]) > 33.3e-3  # a typical 2,048-token step is slower than the idealized 33.2 ms
    assert r["capacity_at_budget_tokens_per_s"] == r["capacity_per_s"]["2048"]
    assert r["fixed_lengths_capacity_per_s"] > 0


def _check_08(r: dict) -> None:
    assert r["slo"] == {"ttft_p90_s": 0.8, "itl_p99_s": 0.04}
    # the real-engine cost by default: a 40 ms step holds fewer tokens than the idealized 2,464
    assert r["cost_model"] == r["cost"] == "typical"
    assert r["first_guess"]["step_budget_tokens"] < 2464
    assert r["first_guess"]["max_num_batched_tokens"] % 256 == 0  # rounded down to a 256-token tile
    assert 256 <= r["max_num_batched_tokens"] <= r["first_guess"]["step_budget_tokens"]
    # the margin: the recommended load holds for the neighbours one step away too
    assert 0 < r["rate_per_s"] <= r["capacity_per_s"] and r["margin"]["rate_per_s"] == r["rate_per_s"]
    assert all(m["holds"] for m in r["margin"]["members"]) and len(r["margin"]["members"]) >= 3
    assert 1 <= r["max_num_seqs"] <= r["max_num_batched_tokens"]
    assert r["capacity_per_s"] > 0 and r["upper_per_s"] > r["capacity_per_s"]
    assert r["confirm_meets_slo"] is True and r["confirm_above_meets_slo"] is False
    chosen = [c for c in r["candidates"] if c["chosen"]]
    assert chosen and all(
        (c["max_num_batched_tokens"], c["max_num_seqs"]) == (r["max_num_batched_tokens"], r["max_num_seqs"])
        for c in chosen
    )
    assert r["frontier_rate_per_s"] == r["capacity_per_s"]
    assert {"512", "8192", str(r["max_num_batched_tokens"])} <= set(r["frontier"])
    assert r["frontier"]["8192"]["itl_s"] > 0.04 and r["frontier"]["8192"]["meets"] is False


def _check_10(r: dict) -> None:
    # the simulated example (1.5 ms per step, 8 ms per request) is fitted back
    fit = r["bench_fit"]["parameters"]
    assert r["bench_is_simulated"] is True
    assert fit["step_overhead_s"]["value"] == pytest.approx(1.5e-3, rel=0.05)
    assert fit["request_overhead_s"]["value"] == pytest.approx(8e-3, rel=0.05)
    assert r["preset_grid"] is None  # switched off for the test
    if r["serving_runs"] is not None:  # the shared data is present (developers, CI)
        steady = [run for run in r["serving_runs"] if not run["overloaded_measured"]]
        assert len(steady) == 10
        assert max(abs(run["ttft_mean_s_error"]) for run in steady) <= 0.25
        assert max(abs(run["tpot_s_error"]) for run in steady) <= 0.15
        assert all(run["overloaded_measured"] == run["overloaded_predicted"] for run in r["serving_runs"])
    if r["kv_logs"] is not None:
        assert len(r["kv_logs"]) >= 28


def _check_11(r: dict) -> None:
    # Llama 3.1 70B: 141 GB of weights do not fit one 80 GB H100; more GPUs, shorter decode steps
    assert r["tp_deployable"] == {"1": False, "2": True, "4": True, "8": True}
    steps = r["decode_step_s"]
    assert steps["8"] < steps["4"] < steps["2"] and r["decode_all_reduce_s"]["1"] == 0 < r["decode_all_reduce_s"]["8"]
    assert r["tpot_mean_s"]["1"] is None and r["tpot_mean_s"]["8"] < r["tpot_mean_s"]["4"]  # NaN -> null
    # vLLM 0.33's ladder on H100: 51 sizes up to 512 for max_num_seqs 256 and 1,024 alike
    assert {engine: (len(sizes), max(sizes)) for engine, sizes in r["ladder_sizes"].items()} == {
        "max_num_seqs 1,024": (51, 512),
        "max_num_seqs 256": (51, 512),
    }
    jumps = {j["engine"]: j for j in r["ladder_jumps"]}
    default = jumps["max_num_seqs 1,024"]
    assert default["top_graph_tokens"] == 512 and default["mode_past_top"] == "NONE"
    assert jumps["max_num_seqs 256"]["past_top"] is False
    assert r["ladder_modes"]["max_num_seqs 1,024"] == {"FULL": 512, "NONE": 88}  # batches 1..600
    assert r["ladder_modes"]["max_num_seqs 256"] == {"FULL": 256}
    # Mixtral: one token touches 2 of 8 experts per layer, 4,096 tokens all of them
    experts = r["moe_expected_experts"]
    assert experts["1"] == pytest.approx(2.0) and experts["4096"] == pytest.approx(8.0)
    ttft = {row["max_num_batched_tokens"]: row for row in r["moe_ttft"]}
    assert sorted(ttft) == [512, 2048, 8192] and {row["cost_model"] for row in r["moe_ttft"]} == {"typical"}
    assert ttft[8192]["ttft_mean_s"] < ttft[512]["ttft_mean_s"]
    if r["runs"] is not None:  # the shared data is present (developers, CI)
        measured = [run for run in r["runs"] if run["tpot_s_measured"] is not None]
        assert {run["model"] for run in measured} == {"llama-2-7b", "mixtral-8x7b"}
        assert all(abs(run["tpot_s_predicted"] / run["tpot_s_measured"] - 1) <= 0.15 for run in measured)
    if r["all_reduce_errors"] is not None:
        assert len(r["all_reduce_errors"]) == 100


def _check_12(r: dict) -> None:
    assert r["families"] == {
        "qwen3-32b": "full attention",
        "gemma-3-27b": "sliding window",
        "gpt-oss-20b": "sliding window",
        "qwen3-next-80b-a3b": "hybrid (Mamba / linear)",
    }
    assert r["kv_groups"]["gemma-3-27b"] == "6 × sliding window 1,024 tokens + 1 × full"
    # each on the fewest H100s holding 8 requests of 32,768 tokens (vLLM 0.19's accounting)
    tp = {d["model"]: d["tp"] for d in r["deployments"]}
    assert tp == {"qwen3-32b": 2, "gemma-3-27b": 2, "gpt-oss-20b": 1, "qwen3-next-80b-a3b": 4}
    assert all(c >= 8 for c in r["max_concurrency"].values())
    full_only = r["max_concurrency_full_only"]
    assert full_only["qwen3-32b"] is None and full_only["qwen3-next-80b-a3b"] is None  # NaN -> null
    assert r["max_concurrency"]["gemma-3-27b"] > 2 * full_only["gemma-3-27b"]  # the 1,024-token windows
    # the same load: with every layer full Gemma 3's pool has fewer blocks and the KV gate binds more
    runs = {(g["model"], g["manager"].startswith("hybrid")): g for g in r["gate_runs"]}
    hybrid, full = runs[("gemma-3-27b", True)], runs[("gemma-3-27b", False)]
    assert full["num_kv_blocks"] < hybrid["num_kv_blocks"] and full["gate_kv"] > hybrid["gate_kv"]
    assert ("qwen3-next-80b-a3b", False) not in runs  # vLLM runs no Mamba hybrid with every layer full
    assert {g["cost_model"] for g in r["gate_runs"]} == {"typical"} and r["memory_model"].startswith("vLLM 0.19")
    assert r["model"] == "qwen3-32b" and r["models"][0] == "qwen3-32b"  # the reference first
    for knob in r["knobs"]:
        assert knob["tuned"] or knob["reason"]
        if knob["tuned"]:
            assert 1 <= knob["max_num_seqs"] <= knob["max_num_batched_tokens"] and knob["capacity_per_s"] > 0
    if r["kv_logs"] is not None:  # the shared data is present (developers, CI)
        compared = [row for row in r["kv_logs"] if row["status"] == "compared"]
        assert len(compared) >= 31 and {"sliding window", "MLA"} <= {row["family"] for row in compared}


def _check_13(r: dict) -> None:
    # the example: budget 2,048, 256 decoding requests, k = 5 -> 2,048 - 256 x 6 tokens for prompts
    room = {row["num_speculative_tokens"]: row["prefill_room_tokens"] for row in r["prefill_room"]}
    assert room == {0: 1792, 1: 1536, 5: 512}
    draft_model = {row["num_speculative_tokens"]: row["prefill_room_tokens"] for row in r["prefill_room_draft_model"]}
    assert draft_model[5] == 2048 - 256 * 7 - 1  # a draft model's input slot per request, and the chunk's own
    assert r["acceptance_rate"] == pytest.approx(0.75, abs=0.01)  # 1 + p + ... + p**4 = 3.08
    assert {row["cost"] for row in r["by_load"]} == {"typical"} and r["cost_model"] == "typical"
    speedup = {(row["rate_per_s"], row["num_speculative_tokens"]): row["speedup"] for row in r["by_load"]}
    assert speedup[(2.0, 0)] == 1.0 and speedup[(2.0, 5)] > 1.5  # a good drafter at low load
    assert set(r["stops_paying_per_s"]) == {"1", "5"}
    assert r["tuned_k"] in (0, 1, 5) and r["tuned_capacity_per_s"] > 0
    published = {row["key"]: row for row in r["published"]}
    done = [row for row in published.values() if row["reproduced"]]
    assert len(done) == 18 and all(row["direction_agrees"] for row in done)
    assert all(row["predicted_speedup"] > 1.0 for row in done if row["load"].startswith("batch size 1"))
    assert all(row["cost_model"] == "typical" for row in done)
    assert not published["blog-high-qps"]["reproduced"] and published["blog-high-qps"]["not_reproduced_because"]
    assert published["12755-mtp-qps1"]["source_url"] == "https://github.com/vllm-project/vllm/pull/12755"


def _check_14(r: dict) -> None:
    plan = r["plan"]
    assert plan["num_replicas"] >= 1 and plan["rate_per_s"] == 20.0 and plan["cost"] == "typical"
    checked = {row["num_replicas"]: row["meets"] for row in r["plan_checked"]}
    assert checked[plan["num_replicas"]] and checked.get(plan["num_replicas"] - 1, False) is False
    assert plan["fewer_violations"] or plan["num_replicas"] == 1
    assert plan["max_num_queued_tokens"] > 0 and plan["max_num_queued_reqs"] > plan["max_num_seqs"]
    by_load = {(row["rate_per_s"], row["router"]): row["num_replicas"] for row in r["replicas_by_load"]}
    for router in ("round_robin", "prefix_aware"):
        assert by_load[(30.0, router)] >= by_load[(10.0, router)] >= 1
    frontier = r["frontier"]
    assert len(frontier) == 4 and any(row["on_front"] for row in frontier)
    assert all(row["meets_slo"] for row in frontier if row["on_front"])
    one = [row for row in frontier if row["concurrency"] == 1]
    many = [row for row in frontier if row["concurrency"] == 16]
    assert min(row["tokens_per_s_per_gpu"] for row in many) > max(row["tokens_per_s_per_gpu"] for row in one)
    hits = {row["router"]: row["prefix_hit_rate"] for row in r["routers"]}
    assert hits["prefix_aware"] > hits["round_robin"]
    runs = {row["run"]: row for row in r["closed_loop_runs"]}
    assert len(runs) == 14 and runs["1k1k-tp8-c4"]["tpot_ms_measured"] == 3.72
    assert all(0 < row["tpot_ms_predicted"] < 20 for row in runs.values())
    tpot = {row["metric"]: row for row in r["closed_loop_accuracy"]}["tpot_ms"]
    assert tpot["runs"] == 14 and tpot["median_abs_error"] < 0.15
    assert 0.5 < r["closed_loop_fit"]["bandwidth_efficiency"] < 0.8
    held = {row["metric"]: row for row in r["closed_loop_held_out_accuracy"]}["tpot_ms"]
    assert held["runs"] == 9 and held["median_abs_error"] < tpot["median_abs_error"]


def _check_09(r: dict) -> None:
    assert r["max_num_seqs"] == 256 and r["slot_bound_max_num_seqs"] == 8
    shared = r["workload"]["shared_prefix_fraction"]
    assert 0.5 < shared < 1  # later turns re-send their history
    off, on = r["caching"]["caching off"], r["caching"]["caching on"]
    assert off["enable_prefix_caching"] is False and on["enable_prefix_caching"] is True
    assert off["prefix_hit_rate"] is None and off["prefill_tokens"] == off["num_prompt_tokens"]  # NaN -> null
    # hits are full blocks of what earlier turns declared: at most the declared share
    assert 0.5 < on["prefix_hit_rate"] <= shared
    assert on["prefill_tokens"] + on["prefix_hit_tokens"] == on["num_prompt_tokens"]  # no preemption here
    assert on["ttft_p50_s"] < off["ttft_p50_s"] and on["ttft_p90_s"] < off["ttft_p90_s"]
    turns = {(t["case"], t["turn"]): t for t in r["ttft_by_turn"]}
    assert turns[("caching on", 1)]["prefix_hit_mean_tokens"] == 0  # a first turn shares nothing
    for run in r["async"].values():
        assert run["num_steps"] == run["num_forward_passes"] + run["num_empty_steps"]
        assert run["num_empty_steps"] == 0 or run["async_scheduling"] is True
    assert r["async"]["async"]["num_empty_steps"] > 0 and r["async"]["sync"]["num_empty_steps"] == 0
    assert len(r["by_budget"]) == 2 * len(r["caching_budgets"]) == 6
    effect = {row["enable_prefix_caching"]: row for row in r["budget_effect"]}
    assert effect[True]["saved_s"] < effect[False]["saved_s"]  # the budget matters less with caching
    pools = {(p["enable_prefix_caching"], p["kv_tokens"]): p for p in r["kv_pressure"]}
    assert len(pools) == 6  # 16,000 and 64,000 tokens and the pool from memory, caching off and on
    full = next(p for p in r["kv_pressure"] if p["from_memory"] and p["enable_prefix_caching"])
    assert full["kv_tokens"] == 28_439 * 16  # the pool of notebook 05 (vLLM 0.19's accounting)
    assert pools[(True, 16_000)]["prefix_hit_rate"] < full["prefix_hit_rate"]  # evicted by LRU


#: Checks on each notebook's results (the keys the reports promise, and the seeds' numbers).
CHECKS: dict[str, tuple[set[str], Callable[[dict], None]]] = {
    "01-step-cost": ({"weight_read_s", "per_token_s", "knee_tokens", "step_time_s", "flops_per_token"}, _check_01),
    "02-filling-the-budget": ({"chunks", "prefill_tokens_left", "tradeoff"}, _check_02),
    "03-ttft-vs-budget": (
        {"budgets", "ttft_s", "step_time_s", "budget_for_step_target_ideal", "ttft_without_budget_s"},
        _check_03,
    ),
    "04-longest-gap": (
        {"longest_gap_with_budget_s", "longest_gap_without_budget_s", "budgets", "longest_gap_s"},
        _check_04,
    ),
    "05-max-num-seqs-and-kv": (
        {"kv_capacity_tokens", "kv_capacity_blocks", "kv_tokens_by_budget", "cases", "policies"},
        _check_05,
    ),
    "06-calibrate": (
        {"parameters", "train_mape", "holdout_mape", "train_max_error", "holdout_max_error"},
        _check_06,
    ),
    "07-load-sweep": ({"budgets", "rates_per_s", "capacity_per_s", "percentiles", "slo"}, _check_07),
    "08-tune-for-slo": (
        {"max_num_batched_tokens", "max_num_seqs", "capacity_per_s", "first_guess", "slo"},
        _check_08,
    ),
    "09-prefix-caching-and-async": (
        {"workload", "caching", "ttft_by_turn", "async", "by_budget", "kv_pressure"},
        _check_09,
    ),
    "10-validation-against-real-runs": (
        {"kv_logs", "serving_runs", "preset_grid", "bench_fit", "bench_is_simulated", "predictions"},
        _check_10,
    ),
    "11-multi-gpu": (
        {"tp_deployable", "decode_step_s", "tpot_mean_s", "ladder_sizes", "ladder_jumps", "moe_ttft", "runs"},
        _check_11,
    ),
    "12-attention-kinds": (
        {"families", "deployments", "max_concurrency", "concurrency_by_length", "gate_runs", "knobs", "kv_logs"},
        _check_12,
    ),
    "13-speculative-decoding": (
        {"prefill_room", "by_load", "stops_paying_per_s", "tuned_k", "capacity_by_k", "published", "load_trends"},
        _check_13,
    ),
    "14-fleet": (
        {
            "plan",
            "plan_checked",
            "replicas_by_load",
            "frontier",
            "routers",
            "closed_loop_runs",
            "closed_loop_accuracy",
            "closed_loop_fit",
            "closed_loop_held_out_accuracy",
        },
        _check_14,
    ),
}


def _run(notebook: Path, tmp_path: Path, parameters: dict[str, Any]) -> None:
    papermill.execute_notebook(
        str(notebook),
        str(tmp_path / notebook.name),
        parameters=parameters,
        kernel_name="python3",
        cwd=str(NOTEBOOKS_DIR),
        progress_bar=False,
        log_output=False,
    )


#: The notebook ``make test-wheel`` runs too (every one runs in make test and make test-min): it
#: reads the most data the wheel ships (data/bench, data/measured) and the start-up logs.
WHEEL_NOTEBOOK = "10-validation-against-real-runs"


@pytest.mark.floors
@pytest.mark.wheel
def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 4
    assert WHEEL_NOTEBOOK in {p.stem for p in NOTEBOOKS}, "make test-wheel would run no notebook"


@pytest.mark.floors  # every notebook's own pandas, altair and papermill calls, at the floors
@pytest.mark.parametrize(
    "notebook",
    [pytest.param(p, marks=pytest.mark.wheel) if p.stem == WHEEL_NOTEBOOK else p for p in NOTEBOOKS],
    ids=lambda p: p.stem,
)
def test_notebook_runs_and_saves_its_results(notebook: Path, tmp_path: Path):
    results_path = tmp_path / f"{notebook.stem}.results.json"
    _run(notebook, tmp_path, {**SMALL.get(notebook.stem, {}), "results_path": str(results_path)})
    results = json.loads(results_path.read_text())
    assert isinstance(results, dict) and results
    keys, check = CHECKS.get(notebook.stem, (set(), lambda r: None))
    missing = keys - set(results)
    assert not missing, f"{notebook.name} results lack {sorted(missing)}"
    check(results)
    _check_charts_draw_in_jupyterlab(tmp_path / notebook.name)


def _check_charts_draw_in_jupyterlab(executed: Path) -> None:
    """Every chart output carries the Vega 5 spec JupyterLab draws offline, and no HTML (which
    JupyterLab would prefer, and which loads Vega from a CDN); no cell warned while drawing."""
    from budgetlab.notebook.altair_setup import VEGA5_MIMETYPE, vegalite_mimetype

    outputs = [output for cell in nbformat.read(executed, as_version=4).cells for output in cell.get("outputs", [])]
    charts = [output["data"] for output in outputs if vegalite_mimetype() in output.get("data", {})]
    for chart in charts:
        assert VEGA5_MIMETYPE in chart and "text/html" not in chart, sorted(chart)
        assert chart[VEGA5_MIMETYPE]["$schema"].endswith("/vega/v5.json")
    stderr = [output["text"] for output in outputs if output.get("name") == "stderr"]
    assert not [text for text in stderr if "Warning" in text], stderr


#: The first also runs in make test-min: the error as papermill at its floor reports it (one
#: cell, no traceback); the others check budgetlab's messages, the same at any version.
BAD_PARAMETERS = [
    pytest.param(
        {"budgets": True},
        "parameter `budgets` must be a non-empty list of whole numbers of tokens",
        marks=pytest.mark.floors,
    ),
    (
        {"prompt_tokens": -5},
        "parameter `prompt_tokens` must be a whole number of tokens >= 1 and <= 134,217,728, but got -5 (int)",
    ),
    ({"hardware": "h100"}, "parameter `hardware` must be a hardware slug from budgetlab's catalog, but got 'h100'"),
]


NEW_NOTEBOOK_BAD_PARAMETERS = [
    (
        "05-max-num-seqs-and-kv",
        {"low_max_num_seqs": 512},
        "parameter `low_max_num_seqs` must be below max_num_seqs (256)",
    ),
    (
        "06-calibrate",
        {"measured_hardware": "a100-80gb-sxm"},
        "parameter `measured_hardware` must be h100-sxm while measurements_path is empty",
    ),
    (
        "09-prefix-caching-and-async",
        {"slot_bound_max_num_seqs": 512},
        "parameter `slot_bound_max_num_seqs` must be below max_num_seqs (256)",
    ),
    ("11-multi-gpu", {"moe_model": "llama-3.1-70b"}, "parameter `moe_model` must be a mixture-of-experts model"),
    ("12-attention-kinds", {"models": ["gpt-oss-20b", "gpt-oss-20b"]}, "parameter `models` must be a list of distinct"),
    (
        "13-speculative-decoding",
        {"speculative_method": "draft_model"},
        "parameter `speculative_method` must be one of eagle3, eagle, mtp, ngram",
    ),
    ("14-fleet", {"routers": ["round_robin", "nearest"]}, "parameter `routers` must be one of round_robin"),
]


@pytest.mark.parametrize(
    ("notebook", "parameters", "message"),
    NEW_NOTEBOOK_BAD_PARAMETERS,
    ids=[
        "05-low-cap",
        "06-example-hardware",
        "09-slot-cap",
        "11-dense-moe-model",
        "12-repeated-model",
        "13-draft-model-method",
        "14-unknown-router",
    ],
)
def test_bad_parameter_stops_the_new_notebooks_at_validation(notebook, parameters, message, tmp_path: Path):
    with pytest.raises(PapermillExecutionError) as info:
        _run(NOTEBOOKS_DIR / f"{notebook}.ipynb", tmp_path, parameters)
    assert info.value.ename == "ParameterError"
    assert "validate_parameters(" in info.value.source
    assert message in str(info.value) and "Fix:" in str(info.value)


@pytest.mark.parametrize(
    ("parameters", "message"), BAD_PARAMETERS, ids=["budgets-true", "negative-prompt", "unknown-hardware"]
)
def test_bad_parameter_stops_at_validation(parameters, message, tmp_path: Path):
    notebook = NOTEBOOKS_DIR / "03-ttft-vs-budget.ipynb"
    with pytest.raises(PapermillExecutionError) as info:
        _run(notebook, tmp_path, parameters)
    error = info.value
    assert error.ename == "ParameterError"
    assert "validate_parameters(" in error.source, "the validation cell is the one that failed"
    assert message in str(error)
    assert "Fix:" in str(error)
    assert len(error.traceback) == 1, "one message, not a traceback"
    assert "Traceback" not in str(error) and "File " not in str(error)
