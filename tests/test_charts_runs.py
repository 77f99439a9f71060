"""Charts of KV memory and simulated runs (notebook 05): memory split, timelines, gates, policies."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from budgetlab import charts

from chart_spec import num_rows, spec_of, titles, walk

# --- KV memory and simulated runs (05) -------------------------------------------------------------------


def test_kv_capacity_table_and_memory_split(h100, llama8b):
    from budgetlab import EngineConfig, kv_capacity

    cap = kv_capacity(h100, llama8b, EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256))
    table = charts.kv_capacity_table(cap)
    assert table.loc["KV cache in tokens", "Amount"] == f"{cap.num_tokens:,} tokens"
    assert table.loc["KV bytes per token", "Amount"] == "128 KiB"
    assert table.loc["Memory CUDA reports", "Amount"] == "79.19 GiB"
    assert table.loc["Non-torch memory (CUDA context)", "Amount"] == "0.25 GiB"
    assert "Activation peak (the sampler pass of the profile run)" in table.index
    split = charts.memory_split_frame(cap)
    assert split.part.tolist() == ["weights", "non_torch", "activations", "kv"]
    assert split.fraction.sum() == pytest.approx(1.0)
    assert "Usable GPU memory [GiB]" in titles(spec_of(charts.memory_split_chart(split)))


def test_kv_budget_chart_draws_the_models_frame(h100, llama8b):
    from budgetlab import EngineConfig, kv_by_budget

    frame = kv_by_budget(h100, llama8b, [256, 2048, 8192], EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256))
    spec = spec_of(charts.kv_budget_chart(frame, budget_tokens=2048))
    assert "KV cache [tokens]" in titles(spec) and num_rows(spec) < charts.MAX_ROWS
    rows = [row for values in spec["datasets"].values() for row in values]
    assert all("budget_tokens" not in row for row in rows)  # the budget is max_num_batched_tokens
    picked = [row for values in spec["datasets"].values() if len(values) == 1 for row in values]
    assert [row["max_num_batched_tokens"] for row in picked] == [2048]  # the highlighted budget
    assert picked[0]["kv_gib"] == pytest.approx(picked[0]["kv_bytes"] / 2**30)
    unmarked = spec_of(charts.kv_budget_chart(frame, budget_tokens=4096))  # not in the frame: no mark
    assert all(len(values) == 3 for values in unmarked["datasets"].values())


@pytest.fixture(scope="module")
def runs(h100, llama8b):
    import dataclasses

    from budgetlab import EngineConfig, IdealCost, conversation_like
    from budgetlab.simulator import simulate

    requests = conversation_like(num_requests=120, rate_per_s=4.0, seed=1)
    cost = IdealCost(h100, llama8b)
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    small = dataclasses.replace(engine, num_kv_blocks=1000)
    return {
        "baseline": simulate(requests, engine=engine, cost=cost),
        "cap 2": simulate(requests, engine=dataclasses.replace(engine, max_num_seqs=2), cost=cost),
        "small pool": simulate(requests, engine=small, cost=cost),
    }


def test_sim_timeline_frame_and_chart(runs):
    frame = charts.sim_timeline_frame(runs, num_bins=50)
    assert set(frame.case) == set(runs) and len(frame) <= 3 * 50
    capped = frame[frame.case == "cap 2"]
    assert capped.running_max.max() == 2 and capped.max_num_seqs.iloc[0] == 2
    assert frame.kv_used_fraction_max.between(0, 1).all() and frame.busy_fraction.between(0, 1).all()
    assert frame.num_preemptions.sum() == sum(r.summary()["num_preemptions"] for r in runs.values())
    spec = spec_of(charts.sim_timeline_chart(frame))
    assert {"Running requests (max)", "KV blocks in use", "Waiting requests", "Simulated time [s]"} <= titles(spec)
    assert "max_num_seqs = 2" in json.dumps(spec)
    assert num_rows(spec) < charts.MAX_ROWS
    quiet = spec_of(charts.sim_timeline_chart(charts.sim_timeline_frame({"baseline": runs["baseline"]}, num_bins=20)))
    assert "Preemptions" not in titles(quiet)  # no empty panel


def test_gate_share_frame(runs):
    gates = charts.gate_share_frame(runs)
    share = gates.pivot(index="case", columns="gate", values="fraction")
    assert np.allclose(share.sum(axis=1), 1.0)
    assert share.loc["cap 2", "slot"] > 0.5  # the sequence-slot gate binds
    assert share.loc["cap 2", "slot"] > share.loc["baseline", "slot"] == 0
    assert share.loc["small pool", "kv"] > share.loc["baseline", "kv"]
    assert "Share of the time the GPU was busy" in titles(spec_of(charts.gate_share_chart(gates)))
    from budgetlab import Gate, gate_shares

    colors = [node.get("color") for node in walk(spec_of(charts.gate_share_chart(gates)))]
    legend = [c for c in colors if isinstance(c, dict) and c.get("field") == "gate_label"]
    stack_order = [Gate.NONE.label, Gate.SLOT.label, Gate.BUDGET.label, Gate.KV.label]  # the gates' own words
    assert len(legend) == 1 and legend[0]["scale"]["domain"] == stack_order
    assert all(Gate(key).label == label for key, label in zip(gates.gate, gates.gate_label))
    assert share.loc["cap 2"].to_dict() == gate_shares(runs["cap 2"]).fraction.to_dict()  # the metric, side by side


def test_sim_cases_frame_table_and_numbers(runs):
    cases = charts.sim_cases_frame(runs).set_index("case")
    assert cases.loc["cap 2", "running_max"] == 2 and cases.loc["small pool", "kv_tokens"] == 16_000
    assert cases.loc["cap 2", "ttft_p50_s"] > cases.loc["baseline", "ttft_p50_s"]
    assert cases.loc["small pool", "kv_peak_fraction"] == 1.0
    assert (cases.busy_fraction <= 1).all() and (cases.tokens_per_step_mean > 0).all()
    table = charts.sim_cases_table(cases.reset_index())
    assert list(table.columns) == list(runs) and "Preemptions" in table.index
    from budgetlab import run_numbers

    assert cases.loc["small pool"].to_dict() == run_numbers(runs["small pool"])  # one row per run's numbers
    numbers = {case: run_numbers(result) for case, result in runs.items()}  # what a report saves
    assert numbers["baseline"]["num_requests"] == 120
    json.dumps(numbers)


def test_policy_comparison(runs):
    frame = charts.policy_comparison_frame({"a": runs["baseline"], "b": runs["small pool"]})
    assert len(frame) == 2 * 7 and set(frame.metric) >= {"TTFT p90", "ITL p99", "longest gap"}
    table = charts.policy_comparison_table(frame)
    assert list(table.columns) == ["a", "b"] and table.index[0] == "TTFT p50"
    spec = spec_of(charts.policy_comparison_chart(frame))
    assert "Latency [ms], log scale" in titles(spec)
    assert any(
        isinstance(node.get("encoding", {}).get("y2"), dict)
        for node in walk(spec)
        if isinstance(node.get("encoding"), dict)
    )


def test_cap_sweep_chart_draws_one_line_per_cap_grid():
    """issue 20: notebook 05's max_num_seqs sweep: TTFT p50/p90 and throughput against the cap
    (log axis, the caps as ticks), the low and baseline caps marked."""
    caps = [8, 16, 32, 64, 256]
    frame = pd.DataFrame(
        {
            "max_num_batched_tokens": 2048,
            "rate_per_s": 12.0,
            "max_num_seqs": caps,
            "ttft_p50_s": [21.7, 6.9, 0.61, 0.053, 0.052],
            "ttft_p90_s": [40.0, 14.7, 2.6, 0.18, 0.18],
            "throughput_tokens_per_s": [800.0, 1253.0, 1716.0, 1859.0, 1859.0],
            "kv_peak_fraction": [0.05, 0.09, 0.16, 0.27, 0.27],
        }
    )
    spec = spec_of(charts.cap_sweep_chart(frame, marks={"too low": 16, "baseline": 256}, title="caps"))
    assert len(spec["hconcat"]) == 2
    xs = [n["x"] for n in walk(spec) if isinstance(n.get("x"), dict) and n["x"].get("field") == "max_num_seqs"]
    assert xs and all(
        x["scale"] == {"type": "log", "base": 2} and x["axis"]["values"] == caps for x in xs if "scale" in x
    )
    assert {"Time to first token [ms], log scale", "Output throughput [tokens/s]"} <= titles(spec)
    labels = {row["label"] for values in spec["datasets"].values() for row in values if "label" in row}
    assert labels == {"too low: 16", "baseline: 256"}
    with pytest.raises(ValueError, match="draws one max_num_batched_tokens"):
        charts.cap_sweep_chart(pd.concat([frame, frame.assign(max_num_batched_tokens=512)]))
    with pytest.raises(ValueError, match="needs the columns kv_peak_fraction"):
        charts.cap_sweep_chart(frame.drop(columns="kv_peak_fraction"))
