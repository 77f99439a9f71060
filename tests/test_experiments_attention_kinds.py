"""budgetlab.experiments.attention_kinds: layouts, pools, concurrency, the KV gate, the knobs, the logs.

Hand-worked values:

* Qwen3 32B: 64 full-attention layers of 8 KV heads × 128 dims in BF16: 2 × 8 × 128 × 2 = 4,096
  bytes per token and layer, 262,144 for the 64 layers.
* GPT-OSS 20B: 24 layers of 8 KV heads × 64 dims, alternating sliding (128 tokens) and full:
  2 × 8 × 64 × 2 = 2,048 bytes per token and layer, 24,576 for each kind's 12 layers.
* Gemma 3 27B: 62 layers, five sliding (1,024 tokens) for every full one: 52 sliding, 10 full;
  vLLM groups them as 6 sliding groups of 10 layers (the last padded) and 1 full group.
* A full-attention pool holds ``num_gpu_blocks / ceil(L / 16)`` requests of L tokens: from 4,096
  to 32,768 tokens, exactly 8 times fewer (256 and 2,048 blocks per request).
* On one H100, Qwen3 32B (65.5 GB of weights) leaves under one 32,768-token request of KV
  (0.97, vLLM 0.19's accounting); two GPUs hold more than eight.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from budgetlab import SLO, SyntheticWorkload, hardware, kv_capacity, model
from budgetlab.errors import ParameterError
from budgetlab.experiments import attention_kinds as ak
from budgetlab.workload import LogNormal

H100 = hardware("h100-sxm")


@pytest.fixture(scope="module")
def deployed() -> pd.DataFrame:
    return ak.deployments(
        H100, ["qwen3-32b", "gemma-3-27b", "gpt-oss-20b", "deepseek-v2-lite", "qwen3-next-80b-a3b"], max_model_len=32768
    )


def test_attention_family_names_each_kind():
    families = {slug: ak.attention_family(model(slug)) for slug in ("qwen3-32b", "gemma-3-27b", "deepseek-v2-lite")}
    assert families == {"qwen3-32b": "full attention", "gemma-3-27b": "sliding window", "deepseek-v2-lite": "MLA"}
    assert ak.attention_family(model("qwen3-next-80b-a3b")) == "hybrid (Mamba / linear)"
    assert ak.attention_family(model("llama-4-scout")) == "chunked local"


def test_model_layouts_count_layers_and_bytes_by_hand():
    table = ak.model_layouts(["qwen3-32b", "gpt-oss-20b", "gemma-3-27b"]).set_index("model")
    qwen, oss, gemma = table.loc["qwen3-32b"], table.loc["gpt-oss-20b"], table.loc["gemma-3-27b"]
    assert qwen.full_layers == 64 and qwen.sliding_window_layers == 0
    assert qwen.kv_bytes_per_token_every_token == 262_144 and qwen.kv_bytes_per_token_windowed == 0
    assert oss.kv_bytes_per_token_every_token == oss.kv_bytes_per_token_windowed == 24_576
    assert oss.sliding_window == 128 and oss.state_bytes_per_request == 0
    assert (gemma.sliding_window_layers, gemma.full_layers, gemma.sliding_window) == (52, 10, 1024)
    assert gemma.kv_groups == "6 × sliding window 1,024 tokens + 1 × full"


def test_model_layouts_state_of_a_linear_attention_hybrid():
    row = ak.model_layouts(["qwen3-next-80b-a3b"]).iloc[0]
    llm = model("qwen3-next-80b-a3b")
    assert row.mamba_layers == llm.attention.count("mamba") > 0
    assert row.state_bytes_per_request == row.mamba_layers * llm.attention.mamba_state_bytes


def test_models_must_be_a_list_of_distinct_slugs():
    with pytest.raises(ParameterError, match="non-empty list"):
        ak.model_layouts("qwen3-32b")
    with pytest.raises(ParameterError, match="repeats"):
        ak.model_layouts(["qwen3-32b", "qwen3-32b"])


def test_deployments_take_the_fewest_gpus_that_hold_min_concurrency():
    one = ak.deployments(H100, ["qwen3-32b"], max_model_len=32768).iloc[0]
    assert one.tp == 2  # TP 1 holds 0.97 requests of 32,768 tokens: not even one
    eight = ak.deployments(H100, ["qwen3-32b"], max_model_len=32768, min_concurrency=8).iloc[0]
    assert eight.tp == 2 and eight.max_concurrency >= 8
    none = ak.deployments(H100, ["qwen3-32b"], max_model_len=32768, min_concurrency=4000, tp_degrees=[1, 2])
    assert bool(none.deployable.iloc[0]) is False and "holds 4000 requests" in none.reason.iloc[0]


def test_deployments_report_vllm_numbers_of_kv_capacity(deployed):
    for row in deployed.itertuples():
        llm = model(row.model)
        cap = kv_capacity(H100, llm, ak.engine_for(H100, llm, tp=row.tp, max_model_len=32768))
        assert row.max_concurrency == pytest.approx(cap.max_concurrency)
        assert row.vllm_kv_cache_tokens == cap.vllm_kv_cache_tokens and row.num_blocks == cap.num_blocks
    by_model = deployed.set_index("model")
    # the hybrid manager holds more requests where sliding layers free their old blocks
    assert by_model.hybrid_gain["gemma-3-27b"] > 2 and by_model.hybrid_gain["gpt-oss-20b"] > 1.2
    # nothing to compare for full attention, MLA or a Mamba hybrid
    assert by_model[["hybrid_gain"]].loc[["qwen3-32b", "deepseek-v2-lite", "qwen3-next-80b-a3b"]].isna().all().all()
    assert by_model.block_size["qwen3-next-80b-a3b"] > 16  # vLLM enlarges the attention block for the state
    assert set(deployed.memory_model) == {ak.MEMORY_MODEL}


def test_deployments_refuse_bad_arguments():
    with pytest.raises(ParameterError):
        ak.deployments(H100, ["qwen3-32b"], max_model_len=0)
    with pytest.raises(ParameterError):
        ak.deployments(H100, ["qwen3-32b"], max_model_len=4096, min_concurrency=0.5)
    with pytest.raises(ParameterError):
        ak.deployments(H100, ["qwen3-32b"], max_model_len=4096, tp_degrees=[])


def test_concurrency_by_length_full_attention_falls_with_the_length(deployed):
    curve = ak.concurrency_by_length(H100, deployed, [4096, 32768])
    qwen = curve[curve.model == "qwen3-32b"].set_index("max_model_len").max_concurrency
    assert qwen[4096] / qwen[32768] == pytest.approx(8, rel=1e-9)  # same pool, 8× the blocks per request
    gemma = curve[(curve.model == "gemma-3-27b") & (curve.manager == ak.HYBRID_MANAGER)]
    at = gemma.set_index("max_model_len").max_concurrency
    assert at[4096] / at[32768] < 4  # the sliding groups stop growing at their window
    # every layer full only where it differs and vLLM runs it
    assert set(curve[curve.manager == ak.FULL_ONLY_MANAGER].model) == {"gemma-3-27b", "gpt-oss-20b"}


def test_concurrency_by_length_needs_the_deployments_table():
    with pytest.raises(ParameterError, match="deployments"):
        ak.concurrency_by_length(H100, pd.DataFrame({"model": ["qwen3-32b"]}), [4096])


def _long_docs(num_requests: int) -> SyntheticWorkload:
    return SyntheticWorkload(
        prompt=LogNormal(median_tokens=4000, sigma=0.6, max_tokens=30000),
        output=LogNormal(median_tokens=300, sigma=0.7, max_tokens=4000),
        num_requests=num_requests,
    )


def test_kv_gate_runs_a_sliding_model_keeps_fewer_blocks_than_with_every_layer_full():
    gemma = ak.deployments(H100, ["gemma-3-27b"], max_model_len=32768)
    runs = ak.kv_gate_runs(H100, gemma, workload=_long_docs(150), rate_per_s=2.0, max_points=50)
    table = runs.table.set_index("manager")
    hybrid, full = table.loc[ak.HYBRID_MANAGER], table.loc[ak.FULL_ONLY_MANAGER]
    assert hybrid.kv_groups == "6 × sliding window 1,024 tokens + 1 × full" and full.kv_groups == "1 × full"
    assert full.num_kv_blocks < hybrid.num_kv_blocks  # every group's page in one block
    assert full.num_preemptions > hybrid.num_preemptions and bool(full.kv_bound)
    shares = table[["gate_slot", "gate_budget", "gate_kv", "gate_none"]].sum(axis=1)
    assert shares.to_numpy() == pytest.approx([1.0, 1.0])
    assert runs.timeline.groupby("manager").size().max() <= 50
    assert runs.timeline.kv_used_fraction.between(0, 1).all() and set(runs.table.cost_model) == {"typical"}


def test_kv_gate_runs_refuse_a_bad_rate(deployed):
    with pytest.raises(ParameterError):
        ak.kv_gate_runs(H100, deployed, workload=_long_docs(10), rate_per_s=0)


def test_recommended_knobs_counts_what_the_pool_holds_group_by_group():
    placed = ak.deployments(H100, ["qwen3-32b", "gpt-oss-20b"], max_model_len=32768, min_concurrency=8)
    workload = _long_docs(40)
    knobs = ak.recommended_knobs(
        H100,
        placed,
        workload=workload,
        slo=SLO(ttft_p90_s=3.0, itl_p99_s=0.08),
        budget_factors=[1.0],
        cap_factors=[1.0],
        tolerance_fraction=0.2,
    ).set_index("model")
    mean = knobs.mean_sequence_tokens["qwen3-32b"]
    qwen_cap = kv_capacity(H100, model("qwen3-32b"), ak.engine_for(H100, model("qwen3-32b"), tp=2, max_model_len=32768))
    # full attention: every layer keeps every token, ceil(mean / 16) blocks
    assert knobs.requests_pool_holds["qwen3-32b"] == pytest.approx(qwen_cap.num_blocks / math.ceil(round(mean) / 16))
    # GPT-OSS: its sliding group keeps 9 or 10 blocks of a request, its full group ceil(mean / 16), so
    # the pool holds nearly twice the requests its tokens per group hold at the mean length
    oss = placed.set_index("model").loc["gpt-oss-20b"]
    assert knobs.requests_pool_holds["gpt-oss-20b"] > 1.8 * oss.kv_tokens / mean
    assert bool(knobs.tuned["qwen3-32b"]), knobs.reason.to_dict()
    # 40 requests are too few for GPT-OSS's queues to build: the tuner says so and the row keeps why
    assert all(bool(r.tuned) or "too few requests" in r.reason for r in knobs.itertuples())
    for row in knobs[knobs.tuned].itertuples():
        assert 1 <= row.max_num_seqs <= row.max_num_batched_tokens and row.capacity_per_s > 0
    assert set(knobs.cost_model) == {"typical"}


def test_the_tuners_first_cap_counts_what_a_request_holds_in_every_group():
    # GPT-OSS 20B on a fixed pool of 20,000 blocks: its first cap is the pool over what a
    # request of the mean length holds at its last step in both groups (peak_blocks: its sliding
    # group only cdiv(127 + 1, 16) or so blocks), not the pool's tokens over the mean length
    from budgetlab import EngineConfig
    from budgetlab.experiments.guess import first_guess, requests_pool_holds, round_cap
    from budgetlab.simulator.kv_groups import peak_blocks

    eng = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=1024, num_kv_blocks=20_000, quantization="mxfp4")
    guess = first_guess(
        _long_docs(40), slo=SLO(ttft_p90_s=3.0, itl_p99_s=0.08), hardware=H100, model="gpt-oss-20b", engine=eng
    )
    groups = (("sliding_window", 128), "full")
    mean = round(guess.mean_sequence_tokens)
    holds = requests_pool_holds(groups, 20_000, 16, guess.mean_sequence_tokens)
    assert holds == 20_000 / peak_blocks(groups, mean, 16)
    assert peak_blocks(groups, mean, 16) <= math.ceil(mean / 16) + 10  # the window's blocks, not the request's
    assert guess.max_num_seqs == min(round_cap(int(holds)), guess.max_num_batched_tokens)
    assert int(holds) > 1.8 * (20_000 * 16 // 2) / guess.mean_sequence_tokens


def test_kv_log_rows_merge_compared_and_skipped_by_row():
    compared = pd.DataFrame(
        {
            "row_id": [7, 2],
            "checkpoint": ["openai/gpt-oss-20b", "Qwen/Qwen3-32B"],
            "model": ["gpt-oss-20b", "qwen3-32b"],
            "tp": [1, 2],
            "kv_groups": [2, 1],
            "kv_tokens_logged": [100.0, 200.0],
            "kv_tokens_predicted": [101.0, 198.0],
            "kv_tokens_error_fraction": [0.01, -0.01],
            "max_concurrency_logged": [1.0, 2.0],
            "max_concurrency_predicted": [1.01, 1.98],
            "max_concurrency_error_fraction": [0.01, -0.01],
            "tight": [False, False],
            "within": [True, True],
        }
    )
    skipped = pd.DataFrame({"row_id": [5], "checkpoint": ["x/vision"], "reason": ["multimodal"]})
    rows = ak.kv_log_rows(compared, skipped)
    assert rows.row_id.tolist() == [2, 5, 7]
    assert rows.status.tolist() == ["compared", "skipped", "compared"]
    assert rows.family.tolist() == ["full attention", "", "sliding window"]
    assert rows.reason.tolist() == ["", "multimodal", ""]
    with pytest.raises(ParameterError, match="check_kv_logs"):
        ak.kv_log_rows(compared.drop(columns="within"), skipped)


def test_a_model_that_fits_nowhere_leaves_empty_tables_with_their_columns():
    placed = ak.deployments(H100, ["llama-3.1-405b"], max_model_len=4096, tp_degrees=[1])
    assert placed.deployable.tolist() == [False] and math.isnan(placed.max_concurrency.iloc[0])
    assert ak.concurrency_by_length(H100, placed, [4096]).empty
    runs = ak.kv_gate_runs(H100, placed, workload=_long_docs(10), rate_per_s=1.0)
    assert runs.table.empty and {"simulated", "gate_kv", "kv_bound"} <= set(runs.table.columns)
    assert runs.table[runs.table.simulated].empty and runs.timeline.empty
    knobs = ak.recommended_knobs(
        H100, placed, workload=_long_docs(10), slo=SLO(ttft_p90_s=1.0), budget_factors=[1.0], cap_factors=[1.0]
    )
    assert knobs.empty and knobs[knobs.tuned].empty and "max_num_seqs" in knobs
