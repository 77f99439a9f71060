"""Charts of load sweeps, capacity per replica and the tuner (notebooks 07 and 08)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from budgetlab import charts
from budgetlab.catalog import hardware
from budgetlab.cost.named import make_cost
from budgetlab.experiments.by_budget import capacity_by_budget
from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.slo import SLO
from budgetlab.experiments.sweep import load_grid, max_service_rate_per_s, percentiles_by_budget, service_rate_per_s
from budgetlab.experiments.sweep import (
    sweep as run_sweep,  # renamed: ``sweep`` reads as the fixture of the budget tests
)
from budgetlab.experiments.tune import budget_frontier
from budgetlab.workload import SyntheticWorkload

from chart_spec import has_tooltip, num_rows, spec_of, titles, walk

SWEEP_SLO = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)
SWEEP_KNOBS = {"hardware": "h100-sxm", "model": "llama-3.1-8b", "cost": "ideal", "seed": 0}


@pytest.fixture(scope="module")
def small_chat():
    return SyntheticWorkload.conversation_like(num_requests=150)


@pytest.fixture(scope="module")
def load_sweep(small_chat):
    service = service_rate_per_s(small_chat, budgets=[512, 2048], **SWEEP_KNOBS)
    rates = load_grid(service, num_loads=3, max_load_fraction=2.0)  # 150 requests queue up late
    table = run_sweep(
        small_chat,
        budgets=[512, 2048],
        max_num_seqs=256,
        rates_per_s=rates,
        hardware="h100-sxm",
        model="llama-3.1-8b",
        cost="ideal",
        executor=SerialExecutor(),
        progress=False,
    )
    found = capacity_by_budget(
        small_chat,
        slo=SWEEP_SLO,
        budgets=[512, 2048],
        max_num_seqs=256,
        sweep_table=table,
        executor=SerialExecutor(),
        **SWEEP_KNOBS,
    )
    return service, rates, table, charts.capacity_frame(found.capacities), found.evaluations


def test_sweep_prose_helpers():
    assert [charts.fmt_latency(s) for s in (0.0332, 0.00831, 0.8, 2.5, float("nan"))] == [
        "33.2 ms",
        "8.31 ms",
        "800 ms",
        "2.5 s",
        "n/a",
    ]
    assert charts.fmt_rate(34.5566) == "34.6 req/s"
    assert charts.fmt_percent_change(37.2, 35.6) == "4.5 % more"
    assert charts.fmt_percent_change(11.07, 15.64) == "29.2 % less"
    assert charts.fmt_percent_change(1.0, 0.0) == "n/a"
    assert charts.metric_label("ttft_p90_s") == "TTFT p90" and charts.metric_label("max_itl_s") == "longest gap"


def test_service_rate_and_load_grid(small_chat, ideal):
    service = service_rate_per_s(small_chat, budgets=[256, 8192], **SWEEP_KNOBS)
    mean = small_chat.mean_sequence_tokens()
    expected = max(
        max_service_rate_per_s(ideal, max_num_batched_tokens=b, mean_sequence_tokens=mean) for b in (256, 8192)
    )
    assert service == pytest.approx(expected)


def test_workload_stats_table(small_chat):
    table = charts.workload_stats_table({"chat": small_chat, "again": small_chat})
    assert list(table.columns) == ["chat", "again"]
    assert table.loc["Requests per simulation", "chat"] == "150"
    assert table.loc["Prompt, median [tokens]", "chat"] == table.loc["Prompt, median [tokens]", "again"]


def test_capacity_by_budget(load_sweep):
    _, _, table, capacities, searched = load_sweep
    assert capacities.max_num_batched_tokens.tolist() == [512, 2048]
    assert (capacities.status == "ok").all() and (capacities.max_num_seqs == 256).all()
    for row in capacities.itertuples():
        assert 0 < row.capacity_per_s < row.upper_per_s <= row.capacity_per_s * 1.05 + 1e-9
        assert row.breaks_on in {"ttft_p90_s", "itl_p99_s"} and row.label.endswith("req/s")
        assert row.ttft_p90_s <= 0.8 and row.itl_p99_s <= 0.040  # the SLO holds at capacity
    # the searches started from the sweep's bracket: the loads they simulated lie inside it
    for budget, rows in searched.groupby("max_num_batched_tokens"):
        swept = table[table.max_num_batched_tokens == budget].sort_values("rate_per_s")
        holds = [SWEEP_SLO.holds(r) for r in swept.to_dict("records")]
        first_fail = holds.index(False)
        assert rows.rate_per_s.min() >= swept.rate_per_s.iloc[first_fail - 1] - 1e-9
        assert rows.rate_per_s.max() <= swept.rate_per_s.iloc[first_fail] + 1e-9
    table_shown = charts.capacity_table(capacities)
    assert table_shown.index.name == "Budget [tokens]" and "Capacity per replica [requests/s]" in table_shown


def test_capacity_table_of_an_unattainable_slo(small_chat):
    # the search itself is tested in test_sweep.py; here only what the table shows
    found = capacity_by_budget(
        small_chat,
        slo=SLO(ttft_p90_s=0.001),
        budgets=[2048],
        max_num_seqs=256,
        executor=SerialExecutor(),
        **SWEEP_KNOBS,
    )
    assert charts.capacity_table(found.capacities)["Capacity per replica [requests/s]"].iloc[0] == "fails at every load"


def test_load_sweep_frame_and_chart(load_sweep):
    _, rates, table, capacities, searched = load_sweep
    frame = charts.load_sweep_frame(table, searched, slo=SWEEP_SLO)
    points = frame.drop_duplicates(["series", "rate_per_s"])
    assert len(frame) == len(points) * 6  # TTFT and ITL × p50, p90, p99
    assert set(frame.series) == {"budget 512", "budget 2,048"}
    assert set(frame.source) == {"sweep", "capacity search"}
    assert frame.rate_per_s.max() == pytest.approx(rates[-1])
    assert frame.holds.dtype == bool
    spec = spec_of(charts.load_sweep_chart(frame, capacities, slo=SWEEP_SLO))
    assert "Offered load [requests/s]" in titles(spec)
    # issue 20: the y-axis titles and panel titles name the percentile the dropdown shows ...
    text = json.dumps(spec, ensure_ascii=False)
    assert "'Time to first token ' + ttft_percentile + ' [ms], log scale'" in text
    assert "'Inter-token latency ' + itl_percentile + ' [ms]'" in text
    assert "'TTFT ' + ttft_percentile + ' against offered load'" in text
    # ... and an SLO line shows only with the percentile it limits
    slo_rows = [row for values in spec["datasets"].values() for row in values if "label" in row and "percentile" in row]
    assert {(r["label"], r["percentile"]) for r in slo_rows} == {
        ("SLO: TTFT p90 ≤ 800 ms", "p90"),
        ("SLO: ITL p99 ≤ 40 ms", "p99"),
    }
    slo_data = {
        name for name, rows in spec["datasets"].items() if rows and str(rows[0].get("label", "")).startswith("SLO")
    }
    slo_layers = [n for n in walk(spec) if isinstance(n.get("data"), dict) and n["data"].get("name") in slo_data]
    assert len(slo_layers) == 4  # a rule and its label in each panel
    for layer in slo_layers:
        assert [t["filter"] for t in layer["transform"]] in (
            ["datum.percentile == ttft_percentile"],
            ["datum.percentile == itl_percentile"],
        )
    selects = [p for p in spec["params"] if p.get("bind", {}).get("input") == "select"]
    assert {p["name"] for p in selects} == {"ttft_percentile", "itl_percentile"}
    assert {p["value"] for p in selects} == {"p90", "p99"}
    text = json.dumps(spec, ensure_ascii=False)
    assert "SLO: TTFT p90 ≤ 800 ms" in text and "SLO: ITL p99 ≤ 40 ms" in text
    assert has_tooltip(spec) and num_rows(spec) < charts.MAX_ROWS
    with pytest.raises(ValueError, match="percentile must be one of"):
        charts.load_sweep_chart(frame, slo=SWEEP_SLO, ttft_percentile="p95")
    results = percentiles_by_budget(table)
    assert sorted(results) == [512, 2048] and results[2048]["rate_per_s"] == sorted(rates.tolist())
    assert len(results[512]["itl_p99_s"]) == len(rates)


def _candidates() -> pd.DataFrame:
    rows = []
    for phase, budget, cap, capacity, chosen in [
        ("budget", 1024, 288, 34.1, False),
        ("budget", 2304, 288, 35.6, True),
        ("budget", 2560, 288, 8.9, False),
        ("max_num_seqs", 2304, 64, 26.3, False),
        ("max_num_seqs", 2304, 288, 35.6, True),
    ]:
        rows.append(
            {
                "phase": phase,
                "max_num_batched_tokens": budget,
                "max_num_seqs": cap,
                "capacity_per_s": capacity,
                "upper_per_s": capacity * 1.04,
                "status": "ok",
                "breaks_on": "itl_p99_s" if budget == 2560 else "ttft_p90_s",
                "ttft_p90_s": 0.7,
                "itl_p99_s": 0.037,
                "budget_full_fraction": 0.2,
                "cap_bound_fraction": 0.0,
                "kv_peak_fraction": 0.8,
                "is_first_guess": budget == 2304 and cap == 288,
                "chosen": chosen,
            }
        )
    return pd.DataFrame(rows)


def test_candidates_table_and_chart():
    candidates = _candidates()
    table = charts.candidates_table(candidates)
    assert table["Search step"].tolist()[:1] == ["1 · budget"] and table["Search step"].iloc[-1] == "2 · max_num_seqs"
    assert table[""].iloc[1] == "**recommended**, first guess"
    assert table["Just above, breaks on"].iloc[2] == "ITL p99"
    assert table["TTFT p90 at capacity"].iloc[0] == "700 ms"
    spec = spec_of(charts.candidates_chart(candidates))
    assert {
        "Token budget, max_num_batched_tokens [tokens]",
        "Sequence cap, max_num_seqs [requests]",
        "Capacity per replica [requests/s]",
    } <= titles(spec)
    assert has_tooltip(spec)


def test_slo_check_frame_and_table():
    table = pd.DataFrame(
        {
            "rate_per_s": [35.6, 37.2],
            "max_num_batched_tokens": [2304, 2304],
            "max_num_seqs": [288, 288],
            "ttft_p90_s": [0.73, 0.97],
            "itl_p99_s": [0.0374, 0.0374],
        }
    )
    frame = charts.slo_check_frame(table, SWEEP_SLO)
    assert len(frame) == 4 and frame.slo_met.tolist() == [True, True, False, False]
    assert frame.meets.tolist() == [True, True, False, True]
    assert frame.used_fraction.iloc[0] == pytest.approx(0.73 / 0.8)
    assert frame.metric_label.tolist() == ["TTFT p90", "ITL p99"] * 2
    pd.testing.assert_frame_equal(frame.drop(columns="metric_label"), SWEEP_SLO.check(table))
    shown = charts.slo_check_table(frame)
    assert shown["Met"].tolist() == ["yes", "yes", "**no**", "yes"] and shown["SLO"].iloc[0] == "800 ms"


def test_frontier_frame_and_chart(small_chat):
    table = run_sweep(
        small_chat,
        budgets=[512, 2048, 8192],
        max_num_seqs=256,
        rates_per_s=30.0,
        hardware="h100-sxm",
        model="llama-3.1-8b",
        cost="ideal",
        executor=SerialExecutor(),
        progress=False,
    )
    frame = charts.frontier_frame(budget_frontier(table, slo=SWEEP_SLO), chosen_budget=2048)
    assert frame.max_num_batched_tokens.tolist() == [512, 2048, 8192]
    assert frame.label.tolist() == ["512", "2,048 (recommended)", "8,192"]
    assert frame.chosen.tolist() == [False, True, False] and frame.label_above.tolist() == [True, False, True]
    assert frame.itl_metric.iloc[0] == "ITL p99" and frame.ttft_metric.iloc[0] == "TTFT p90"
    assert frame.itl_s.is_monotonic_increasing  # bigger budgets, longer steps
    assert not frame.meets.iloc[-1]  # a full 8,192-token step (133 ms) breaks a 40 ms ITL limit
    assert frame.itl_ms.iloc[1] == pytest.approx(frame.itl_s.iloc[1] * 1e3)
    spec = spec_of(charts.frontier_chart(frame, slo=SWEEP_SLO))
    assert {"ITL p99 inter-token latency [ms]", "TTFT p90 time to first token [ms], log scale"} <= titles(spec)
    text = json.dumps(spec, ensure_ascii=False)
    assert "SLO: ITL p99 ≤ 40 ms" in text and "SLO: TTFT p90 ≤ 800 ms" in text
    step = make_cost("ideal", hardware("h100-sxm"), __import__("budgetlab").model("llama-3.1-8b")).step_time_s(8192)
    assert frame.itl_s.iloc[-1] <= step + 1e-9


def test_load_sweep_chart_marks_only_the_capacities_found(load_sweep):
    _, _, table, capacities, searched = load_sweep
    frame = charts.load_sweep_frame(table, searched, slo=SWEEP_SLO)
    one_failed = capacities.assign(status=["fails at every load", "ok"], capacity_per_s=[np.nan, 30.0])
    spec = spec_of(charts.load_sweep_chart(frame, one_failed, slo=SWEEP_SLO))
    rules = [
        values
        for values in spec["datasets"].values()
        if values and "capacity_per_s" in values[0] and "series" in values[0]
    ]
    assert rules and all(row["series"] == "budget 2,048" and row["capacity_per_s"] == 30.0 for row in rules[0])
