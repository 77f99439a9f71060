"""One-line reprs and compact HTML tables for specs, configurations, cost models and results."""

from __future__ import annotations

import dataclasses

import pytest

import budgetlab as bl
from budgetlab.display import html_table, one_line

MAX_REPR = 300
MAX_HTML = 3000


@pytest.fixture(scope="module")
def run(h100, llama8b):
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    return bl.simulate(
        bl.conversation_like(num_requests=40, rate_per_s=5.0, seed=0), engine=engine, cost=bl.IdealCost(h100, llama8b)
    )


def _shows(obj, *fragments):
    text, table = repr(obj), obj._repr_html_()
    assert "\n" not in text and len(text) <= MAX_REPR, text
    assert table.startswith("<table") and len(table) <= MAX_HTML
    for fragment in fragments:
        assert fragment in text or fragment in table, fragment
    return text, table


def test_specs(h100, llama8b):
    text, _ = _shows(h100, "h100-sxm", "3.35 TB/s", "79.19 GiB")
    assert text.startswith("HardwareSpec('h100-sxm'")
    text, table = _shows(bl.model("mixtral-8x7b"), "46.7B", "2 of 8 experts", "32 query, 8 KV")
    assert "Mixtral 8x7B" in table


def test_engine_config_repr_is_the_call_that_builds_it():
    engine = bl.EngineConfig(
        max_num_batched_tokens=2048, max_num_seqs=256, tensor_parallel_size=2, async_scheduling=False
    )
    text, table = _shows(engine, "tensor_parallel_size", "async_scheduling")
    assert (
        text
        == "EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, async_scheduling=False, tensor_parallel_size=2)"
    )
    assert eval(text, {"EngineConfig": bl.EngineConfig}) == engine
    assert "enable_prefix_caching" not in text  # at its default
    assert "2,048" in table


def test_cost_models(h100, llama8b):
    _shows(bl.IdealCost(h100, llama8b), "weight read 4.79 ms", "16.2 µs", "295 tokens")
    cost = bl.CalibratedCost.typical(
        h100, llama8b, engine=bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, kv_cache_dtype="fp8")
    )
    _text, table = _shows(cost, "kv_cache_dtype=fp8", "0.90 / 0.70", "2 ms")
    assert "attention, kv_reads" in table


def test_results(run, h100, llama8b):
    text, _table = _shows(run, "requests 40", "TTFT p50 / p90", "prefix hit rate", "KV pool")
    assert text.startswith("SimResult(mode 'fast'")
    fit = bl.calibrate(
        bl.data_path("measured", "vidur-h100-llama2-7b-linear.csv"), hardware="h100-sxm", model="llama-2-7b"
    )
    _shows(fit, "step_overhead_s", "train", "held back")


def test_capacity_and_tune(h100, llama8b):
    workload = bl.SyntheticWorkload.conversation_like(num_requests=150)
    slo = bl.SLO(ttft_p90_s=0.8, itl_p99_s=0.040)
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    result = bl.capacity(workload, slo=slo, engine=engine, hardware=h100, model=llama8b, tolerance_fraction=0.2)
    text, _ = _shows(result, "req/s", "budget 2,048", "simulations")
    assert text.startswith("CapacityResult(")


def test_html_is_escaped():
    table = html_table("<b>title</b>", [("<script>", "a & b")])
    assert "<script>" not in table and "&lt;script&gt;" in table and "a &amp; b" in table and "&lt;b&gt;" in table
    evil = dataclasses.replace(bl.model("llama-3.1-8b"), name="<img src=x onerror=alert(1)>")
    assert "<img" not in evil._repr_html_()
    assert one_line("K", "h", [("a", "1"), ("b", "2")], limit=1) == "K(h: a 1)"
