"""budgetlab.experiments.multigpu: tensor-parallel degrees, the CUDA-graph ladder, MoE TTFT by budget.

Hand-worked values:

* Llama 3.1 70B has 70.6e9 parameters in BF16: 141.2 GB of weights, 70.6 GB per GPU at TP2,
  35.3 GB at TP4. One H100 holds 80 GiB = 85.9 GB, so TP1 does not fit and TP2 does.
* With the idealized roof and no all-reduce, a one-user decode step with no context reads one
  GPU's weights at 3.35 TB/s: 70.6e9 / 3.35e12 = 21.07 ms at TP2 and 10.54 ms at TP4.
* A decode of one user at TP2 sends 1 × 8,192 × 2 = 16,384 bytes per all-reduce, two per layer
  of 80: 160 all-reduces.
* vLLM 0.33's ladder (budgetlab.cudagraph's docstring): with max_num_seqs 1,024 and budget 8,192
  the H100 captures 51 sizes up to 512, all FULL for a decode; a decode of 300 runs FULL padded to
  304, one of 600 runs without graphs. max_num_seqs 8 captures 1, 2, 4, 8 and 16, FULL up to 8.
* A step that lasts 10 ms whatever it holds (``ConstantCost(0.01)``): one request of 10 prompt
  tokens and 3 output tokens gets its first token after one step and one more every step, so
  its time per output token is 10 ms.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from budgetlab import CalibratedCost, ConstantCost, EngineConfig, SyntheticWorkload, hardware, model
from budgetlab.errors import DataFormatError, ParameterError
from budgetlab.experiments import multigpu

from conftest import shared_real_file

H100 = hardware("h100-sxm")
LLAMA70 = model("llama-3.1-70b")


def _no_all_reduce(hw, llm, engine):
    """The idealized roof at the engine's TP, without all-reduces (the module's cost factory)."""
    return CalibratedCost(hardware=hw, model=llm, tp=engine.tensor_parallel_size, all_reduce=False)


def _constant(hw, llm, engine):
    return ConstantCost(0.01)


def test_deployments_mark_the_degrees_that_hold_the_weights():
    table = multigpu.tp_deployments(H100, LLAMA70, [8, 1, 2, 4]).set_index("tp")
    assert list(table.index) == [1, 2, 4, 8]
    assert table.weight_bytes_per_gpu[1] == pytest.approx(141.2e9)
    assert table.weight_bytes_per_gpu[2] == pytest.approx(70.6e9)
    assert table.weight_bytes_per_gpu[4] == pytest.approx(35.3e9)
    assert table.memory_bytes[1] == 80 * 2**30
    assert list(table.weights_fit) == [False, True, True, True]
    assert list(table.deployable) == [False, True, True, True]
    assert table.kv_tokens[1] == 0 and table.reason[1] == "weights exceed one GPU's memory"
    # more GPUs, less weight each, more room for KV
    assert 0 < table.kv_tokens[2] < table.kv_tokens[4] < table.kv_tokens[8]


def test_deployments_refuse_bad_degrees():
    with pytest.raises(ParameterError, match="divide"):
        multigpu.tp_deployments(H100, LLAMA70, [3])
    with pytest.raises(ParameterError, match="repeats"):
        multigpu.tp_deployments(H100, LLAMA70, [2, 2])
    with pytest.raises(ParameterError, match="non-empty"):
        multigpu.tp_deployments(H100, LLAMA70, [])


def test_decode_step_reads_one_gpus_share_of_the_weights():
    table = multigpu.decode_step_by_tp(
        H100, LLAMA70, [2, 4], num_decodes=1, context_tokens=0, cost=_no_all_reduce
    ).set_index("tp")
    assert table.decode_step_s[2] == pytest.approx(70.6e9 / 3.35e12)  # 21.07 ms
    assert table.decode_step_s[4] == pytest.approx(35.3e9 / 3.35e12)  # 10.54 ms
    assert (table.all_reduce_s == 0).all()  # switched off in this cost
    assert set(table.cost_model) == {"_no_all_reduce"}


def test_decode_step_prices_two_all_reduces_per_layer():
    from budgetlab.cost.collective import all_reduce_s

    table = multigpu.decode_step_by_tp(H100, LLAMA70, [1, 2], num_decodes=1, context_tokens=1000).set_index("tp")
    assert table.all_reduce_collective_s[1] == 0.0
    assert table.all_reduce_collective_s[2] == pytest.approx(160 * all_reduce_s(H100, tp=2, message_bytes=16_384))
    assert table.deployable.tolist() == [False, True] and set(table.cost_model) == {"typical"}
    assert table.all_reduce_s[2] > 0 and table.all_reduce_s[1] == 0


def test_tpot_by_tp_simulates_only_what_fits():
    workload = SyntheticWorkload(prompt=10, output=3, num_requests=1)
    table = multigpu.tpot_by_tp(H100, LLAMA70, [1, 2], workload=workload, rate_per_s=1.0, cost=_constant)
    one, two = table.set_index("tp").loc[1], table.set_index("tp").loc[2]
    assert not one.deployable and math.isnan(one.tpot_mean_s) and math.isnan(one.ttft_mean_s)
    assert two.deployable and two.tpot_mean_s == pytest.approx(0.01) and two.num_preemptions == 0
    assert two.rate_per_s == 1.0 and two.simulated and not one.simulated
    assert one.reason == "weights exceed one GPU's memory" and two.reason == ""


def test_tpot_by_tp_skips_a_pool_smaller_than_a_request():
    # TP2 leaves Llama 3.1 70B about 9,600 tokens of KV: a 12,000-token prompt could never finish
    workload = SyntheticWorkload(prompt=12_000, output=2, num_requests=1)
    table = multigpu.tpot_by_tp(H100, LLAMA70, [2, 4], workload=workload, rate_per_s=1.0, cost=_constant)
    two, four = table.set_index("tp").loc[2], table.set_index("tp").loc[4]
    assert two.deployable and not two.simulated and two.reason == "KV pool smaller than the longest request"
    assert (
        math.isnan(two.tpot_mean_s)
        and four.simulated
        and four.ttft_mean_s == pytest.approx(2 * 0.01)  # two chunks of the 8,192-token default budget
    )


def test_run_tpot_by_tp_puts_the_measurement_at_the_runs_degree():
    runs = shared_real_file("vllm_serving_h100_inference_sim.csv")
    frame = pd.read_csv(runs)
    table = multigpu.run_tpot_by_tp(runs, [1, 2], run_ids=[1, 7], max_duration_s=20.0)
    llama = table[table.run == 1].set_index("tp")
    row = frame.iloc[1]  # Llama 2 7B at TP1, 10 req/s
    expected = (row.e2e_mean_s - row.ttft_mean_s) / (row.output_len_mean - 1)
    assert llama.tpot_s_measured[1] == pytest.approx(expected) and math.isnan(llama.tpot_s_measured[2])
    assert llama.deployable.all() and (llama.tpot_s_predicted > 0).all()
    mixtral = table[table.run == 7].set_index("tp")  # Mixtral 8x7B ran at TP2; 93 GB do not fit one H100
    assert not mixtral.deployable[1] and math.isnan(mixtral.tpot_s_predicted[1])
    assert mixtral.run_tp.unique().tolist() == [2] and not math.isnan(mixtral.tpot_s_measured[2])
    with pytest.raises(ParameterError, match="run_ids"):
        multigpu.run_tpot_by_tp(runs, [1], run_ids=[99])


def test_steady_runs_at_rate_pick_one_stage_per_model():
    runs = shared_real_file("vllm_serving_h100_inference_sim.csv")
    assert multigpu.steady_runs_at_rate(runs, 10) == [1, 7]  # Llama 2 7B and Mixtral at 10 req/s
    assert multigpu.steady_runs_at_rate(runs, 4) == []  # both stages at 4 req/s were overloaded
    assert multigpu.steady_runs_at_rate(runs, 3) == []


def test_all_reduce_errors_name_the_kernel_vllm_picks():
    measured = pd.DataFrame(
        {
            "tp": [6, 6],
            "message_bytes": [524_288.0, 524_288.0],
            "implementation": ["symm_mem_multimem", "ca_1stage"],
            "cuda_graph": ["yes", "yes"],
            "latency_s": [16e-6, 13e-6],
        }
    )
    from budgetlab.cost.collective import all_reduce_s

    table = multigpu.all_reduce_errors(measured, H100)
    # at TP6 on H100, 512 KiB is past the custom kernels' 512 KiB limit: vLLM takes multimem
    assert table.vllm_kernel.tolist() == ["symm_mem_multimem"] * 2 and table.same_kernel.tolist() == [True, False]
    modelled = all_reduce_s(H100, tp=6, message_bytes=524_288.0)
    assert table.error.tolist() == pytest.approx([modelled / 16e-6 - 1, modelled / 13e-6 - 1])


def test_read_all_reduce_keeps_sized_rows(tmp_path):
    path = tmp_path / "allreduce.csv"
    path.write_text(
        "source_kind,gpu,tp,message_bytes,implementation,cuda_graph,latency_us\n"
        "pr,H100,4,524288,ca_1stage,yes (per benchmark script),10\n"
        "pr,H100,2,,sglang,no,9.5\n"
        "repo-file,H100-SXM,2,16384,custom,unknown,4.5\n"
    )
    table = multigpu.read_all_reduce(path)
    assert table.tp.tolist() == [4, 2] and table.message_bytes.tolist() == [524288.0, 16384.0]
    assert table.latency_s.tolist() == pytest.approx([10e-6, 4.5e-6])
    assert table.cuda_graph.tolist() == ["yes", "unknown"]
    path.write_text("source_kind,gpu,tp,message_bytes,implementation,cuda_graph,latency_us\npr,H100,4,1,x,no,-1\n")
    with pytest.raises(DataFormatError, match="latency_us"):
        multigpu.read_all_reduce(path)


def test_all_reduce_by_size_is_the_collective_model():
    from budgetlab.cost.collective import all_reduce_s

    table = multigpu.all_reduce_by_size(H100, [4, 2], [16_384, 4_194_304], cuda_graph=False)
    assert table.tp.tolist() == [2, 2, 4, 4]
    assert table.all_reduce_s.iloc[3] == pytest.approx(
        all_reduce_s(H100, tp=4, message_bytes=4_194_304, cuda_graph=False)
    )
    assert table.all_reduce_s.iloc[1] > table.all_reduce_s.iloc[0]  # a bigger message takes longer
    with pytest.raises(ParameterError, match="message_bytes"):
        multigpu.all_reduce_by_size(H100, [2], [0])


def _engines() -> dict[str, EngineConfig]:
    return {
        "default": EngineConfig.vllm_defaults(H100, tensor_parallel_size=4),
        "eight": EngineConfig.vllm_defaults(H100, tensor_parallel_size=4, max_num_seqs=8),
    }


def test_ladder_sizes_as_vllm_captures_them():
    sizes = multigpu.graph_ladder_sizes(H100, _engines())
    default, eight = sizes[sizes.engine == "default"], sizes[sizes.engine == "eight"]
    assert len(default) == 51 and default.size_tokens.max() == 512 and default.full.all()
    assert eight.size_tokens.tolist() == [1, 2, 4, 8, 16] and eight.full.tolist() == [True] * 4 + [False]


def test_ladder_dispatch_padding_and_the_end_of_the_graphs():
    ladder = multigpu.graph_ladder(H100, LLAMA70, _engines(), max_batch=1100, context_tokens=100, cost=_constant)
    default = ladder[ladder.engine == "default"].set_index("num_decodes")
    assert len(default) == 1024 and len(ladder[ladder.engine == "eight"]) == 8  # a decode holds max_num_seqs at most
    assert (default["mode"][300], default.padded_tokens[300], default.padding_tokens[300]) == ("FULL", 304, 4)
    assert (default["mode"][600], default.padded_tokens[600], default.padding_tokens[600]) == ("NONE", 600, 0)
    jumps = multigpu.ladder_jumps(ladder).set_index("engine")
    assert jumps.top_graph_tokens["default"] == 512 and jumps.mode_past_top["default"] == "NONE"
    assert jumps.jump_s["default"] == 0.0  # a constant cost: no jump
    assert jumps.top_graph_tokens["eight"] == 8 and not jumps.past_top["eight"] and math.isnan(jumps.jump_s["eight"])


def test_ladder_jumps_by_hand():
    ladder = pd.DataFrame(
        {
            "engine": ["a", "a", "a"],
            "max_num_seqs": [3, 3, 3],
            "num_decodes": [1, 2, 3],
            "mode": ["FULL", "FULL", "NONE"],
            "padding_tokens": [0, 2, 0],
            "step_time_s": [1.0, 2.0, 5.0],
        }
    )
    (row,) = multigpu.ladder_jumps(ladder).to_dict(orient="records")
    assert (row["top_graph_tokens"], row["step_at_top_s"], row["step_past_top_s"], row["jump_s"]) == (2, 2.0, 5.0, 3.0)
    assert (row["past_top_tokens"], row["padded_fraction"], row["max_padding_tokens"]) == (3, 1 / 3, 2)


def test_ladder_marks_hold_the_top_rung_and_the_batch_after_it():
    engines = _engines()
    marks = multigpu.ladder_marks(H100, engines["default"], max_batch=600)
    # 1, 9, ..., 593 (75 batches, 513 among them) and the top rung 512
    assert len(marks) == 76 and {1, 512, 513, 593} <= set(marks) and max(marks) == 593
    assert multigpu.ladder_marks(H100, engines["eight"], max_batch=600) == [1, 8]  # 9 > max_num_seqs


def test_ladder_step_terms_add_up_to_the_step():
    engine = _engines()["default"]
    terms = multigpu.ladder_step_terms(H100, LLAMA70, engine, batches=[1, 300, 600], context_tokens=500)
    cost = CalibratedCost.typical(H100, LLAMA70, engine=engine)
    from budgetlab import Batch

    for n, part in terms.groupby("num_decodes"):
        assert part.time_s.sum() == pytest.approx(cost.batch_time_s(Batch(int(n), int(n) * 500)), rel=1e-12)
    assert terms.set_index("num_decodes")["mode"].groupby(level=0).first().to_dict() == {
        1: "FULL",
        300: "FULL",
        600: "NONE",
    }
    assert (terms.groupby("term").time_s.apply(lambda t: (t != 0).any())).all()  # no all-zero term


def test_moe_ttft_falls_when_a_prompt_fits_one_step():
    workload = SyntheticWorkload(prompt=100, output=2, num_requests=4)
    table = multigpu.moe_ttft_by_budget(
        H100,
        model("mixtral-8x7b"),
        tp=2,
        budgets=[128, 64],
        workload=workload,
        load_fraction=0.001,
        max_num_seqs=256,
    ).set_index("max_num_batched_tokens")
    assert list(table.index) == [64, 128] and table.max_num_seqs.tolist() == [64, 128]  # the cap is clipped
    assert table.rate_per_s.nunique() == 1 and set(table.cost_model) == {"typical"} and set(table.tp) == {2}
    # a budget's service rate: full-budget steps back to back over the 102 tokens of each request
    typical = CalibratedCost.typical(
        H100, model("mixtral-8x7b"), engine=EngineConfig.vllm_defaults(H100, tensor_parallel_size=2)
    )
    for budget in (64, 128):
        assert table.service_rate_per_s[budget] == pytest.approx(budget / typical.step_time_s(budget) / 102)
    assert table.rate_per_s.iloc[0] == pytest.approx(0.001 * 8192 / typical.step_time_s(8192) / 102, rel=1e-3)
    # requests far apart: 100 tokens take two steps of 64 + 36 tokens, or one step of 100
    assert table.ttft_mean_s[64] > table.ttft_mean_s[128]
    engine = EngineConfig.vllm_defaults(H100, tensor_parallel_size=2, max_num_batched_tokens=128, max_num_seqs=128)
    one_step = CalibratedCost.typical(H100, model("mixtral-8x7b"), engine=engine).step_time_s(100)
    assert table.ttft_mean_s[128] == pytest.approx(one_step, rel=0.05)
    with pytest.raises(ParameterError, match="load_fraction"):
        multigpu.moe_ttft_by_budget(
            H100, model("mixtral-8x7b"), tp=2, budgets=[64], workload=workload, load_fraction=0, max_num_seqs=8
        )
