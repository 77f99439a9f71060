"""Charts of prefix caching and async scheduling (notebook 09): turns, prompt work, budgets, KV."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from budgetlab import ConstantCost, EngineConfig, Request, charts
from budgetlab.experiments import caching

from chart_spec import has_tooltip, num_rows, spec_of, titles, walk


def _shared_prompt() -> list[Request]:
    """a (64 tokens of stream g) at 0 s, b (70 tokens, 64 of g) at 10 s: b hits a's 4 blocks."""
    return [
        Request("a", 0.0, 64, 2, prefix_id="g", prefix_tokens=64),
        Request("b", 10.0, 70, 2, prefix_id="g", prefix_tokens=64),
    ]


ENGINE = EngineConfig(max_num_batched_tokens=16, max_num_seqs=4, num_kv_blocks=20, async_scheduling=False)


@pytest.fixture(scope="module")
def runs():
    return caching.simulate_variants(
        _shared_prompt(),
        engine=ENGINE,
        cost=ConstantCost(1.0),
        variants={"caching off": {"enable_prefix_caching": False}, "caching on": {}},
    )


def test_prompt_work_frame_splits_computed_and_cached(runs):
    frame = charts.prompt_work_frame(caching.variants_table(runs))
    tokens = frame.set_index(["variant", "part"]).tokens.to_dict()
    assert tokens == {
        ("caching off", "computed"): 134,
        ("caching off", "cached"): 0,
        ("caching on", "computed"): 70,  # a's 64 and b's 6
        ("caching on", "cached"): 64,
    }
    spec = spec_of(charts.prompt_work_chart(frame, title="work"))
    assert "Prompt tokens [tokens]" in titles(spec) and has_tooltip(spec)
    legend = [n for n in walk(spec) if isinstance(n, dict) and n.get("field") == "part_label" and "scale" in n]
    assert legend and legend[0]["scale"]["domain"][0].startswith("prompt tokens computed")


def test_ttft_by_turn_chart(runs):
    frame = caching.ttft_by_turn(runs, _shared_prompt())
    spec = spec_of(charts.ttft_by_turn_chart(frame, title="turns"))
    assert {"Turn of the conversation", "Time to first token [ms]"} <= titles(spec)
    assert num_rows(spec) == 2 * len(frame)  # p50 and p90 of each case x turn, drawn once (two marks, one dataset)
    rows = [row for values in spec["datasets"].values() for row in values]
    on_turn_2 = [r for r in rows if r["case"] == "caching on" and r["turn"] == 2 and r["percentile"] == "p50"]
    assert on_turn_2[0]["ttft_ms"] == pytest.approx(1000.0)  # b's one step of 1 s
    assert "strokeDash" in json.dumps(spec)


def test_budget_caching_chart_marks_the_budget():
    frame = caching.budget_by_caching(_shared_prompt(), engine=ENGINE, cost=ConstantCost(1.0), budgets=[16, 64])
    spec = spec_of(charts.budget_caching_chart(frame, budget_tokens=16))
    assert "Token budget, max_num_batched_tokens [tokens], log scale" in titles(spec)
    assert "Time to first token [ms], log scale" in titles(spec)
    marked = [v for v in spec["datasets"].values() if len(v) == 1]
    assert marked == [[{"max_num_batched_tokens": 16}]]
    unmarked = spec_of(charts.budget_caching_chart(frame))
    assert all(len(v) == 2 * len(frame) for v in unmarked["datasets"].values())


def test_kv_pressure_chart_two_panels():
    requests = [
        Request("a", 0.0, 64, 1, prefix_id="g", prefix_tokens=64),
        Request("x", 2.0, 144, 1),
        Request("y", 4.0, 80, 1, prefix_id="g", prefix_tokens=64),
    ]
    engine = EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, async_scheduling=False)
    frame = caching.kv_pressure(requests, engine=engine, cost=ConstantCost(1.0), kv_tokens=[192, 1600])
    spec = spec_of(charts.kv_pressure_chart(frame, title="pressure"))
    assert len(spec["hconcat"]) == 2
    assert {"Prefix-cache hit rate", "TTFT p90 [ms], log scale", "KV pool [tokens], log scale"} <= titles(spec)
    assert num_rows(spec) <= 2 * len(frame) and has_tooltip(spec)
    # issue 20: the hit rate (caching on only) is drawn in the "caching on" colour of the legend
    hits, ttft = spec["hconcat"]
    scales = {
        json.dumps(node["scale"])
        for panel in (hits, ttft)
        for node in walk(panel)
        if node.get("field") == "caching" and "scale" in node
    }
    (scale,) = (json.loads(s) for s in scales)  # one mapping in both panels
    assert len(scale["domain"]) == 2 and scale["domain"][1].endswith("caching on")
    assert len(set(scale["range"])) == 2  # "caching on" has its own colour
    hit_marks = [layer for layer in hits["layer"] if "color" not in layer.get("mark", {})]
    assert len(hit_marks) == 2 and all(layer["encoding"]["color"]["field"] == "caching" for layer in hit_marks)


def test_caching_variants_table(runs):
    table = charts.caching_variants_table(caching.variants_table(runs))
    assert list(table.columns) == ["caching off", "caching on"]
    assert table.loc["prefix caching", "caching on"] == "on" and table.loc["scheduling", "caching off"] == "sync"
    assert table.loc["Prefix-cache hit rate", "caching on"] == "47.8 %"  # 64 / 134
    assert table.loc["Prefix-cache hit rate", "caching off"] == "n/a"
    assert table.loc["Prompt tokens computed", "caching on"] == "70"
    assert table.loc["TTFT p50", "caching on"] == "2.5 s"  # a 4 s, b 1 s


def test_charts_name_the_missing_columns():
    with pytest.raises(ValueError, match="needs the columns ttft_p90_s"):
        charts.ttft_by_turn_chart(pd.DataFrame({"case": ["a"], "turn": [1], "ttft_p50_s": [0.1]}))
    with pytest.raises(ValueError, match="prompt_work_frame needs"):
        charts.prompt_work_frame(pd.DataFrame({"variant": ["a"]}))
