"""One place for the deployment (issue 11, item 2): the cost model prices the engine's TP, dtypes
and quantization, and ``simulate`` refuses a cost that describes another deployment."""

from __future__ import annotations

import dataclasses

import pytest

from budgetlab import Batch, ConstantCost, IdealCost, Request, simulate
from budgetlab.catalog import hardware, model
from budgetlab.cost import make_cost
from budgetlab.cost.calibrated import TYPICAL, CalibratedCost
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.memory import kv_capacity, weight_bytes
from budgetlab.simulator.inputs import check_cost_matches_engine
from budgetlab.specs import EngineConfig

LLAMA8B_EMBEDDING_PARAMS = 1_050_673_152  # 2 × 128,256 vocabulary × 4,096 hidden (untied)
H100_BANDWIDTH = 3.35e12  # [B/s]


def engine(**deployment: object) -> EngineConfig:
    return EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, **deployment)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def llama70b():
    return model("llama-3.1-70b")


@pytest.fixture(scope="module")
def mixtral():
    return model("mixtral-8x7b")


# --------------------------------------------------------------------------------------------
# The weight read, the KV read and the all-reduce follow the deployment
# --------------------------------------------------------------------------------------------


def test_fp8_weights_of_llama_8b_on_h100(h100, llama8b):
    # The embedding and output projection stay in BF16 (2 B), every other weight is 1 B.
    expected_s = ((8.03e9 - LLAMA8B_EMBEDDING_PARAMS) * 1 + LLAMA8B_EMBEDDING_PARAMS * 2) / (
        H100_BANDWIDTH * TYPICAL["bandwidth_efficiency"]
    )
    assert expected_s == pytest.approx(3.012e-3, rel=1e-3)  # at the preset's 0.90 of 3.35 TB/s
    by_engine = CalibratedCost.typical(h100, llama8b, engine=engine(quantization="fp8"))
    assert by_engine.weight_read_s == pytest.approx(expected_s, rel=1e-12)
    unrecorded = by_engine.with_(cudagraph_sizes=None, cudagraph_full_sizes=())  # for_engine records graphs too
    assert CalibratedCost.typical(h100, llama8b).with_(quantization="fp8") == unrecorded
    # The step reads it: a one-token step is the weight read (plus overheads), not the BF16 one.
    bf16 = CalibratedCost.typical(h100, llama8b)
    assert bf16.weight_read_s == pytest.approx(
        8.03e9 * 2 / (H100_BANDWIDTH * TYPICAL["bandwidth_efficiency"]), rel=1e-12
    )
    assert by_engine.step_time_s(1) < bf16.step_time_s(1) - 0.8 * (bf16.weight_read_s - expected_s)
    # The math stays at the 16-bit rate.
    assert by_engine.per_token_s == bf16.per_token_s


def test_int4_and_int8_weight_bytes_match_the_memory_model(h100, llama8b):
    for quantization, per_weight in (("int8", 1.0), ("int4", 0.515625)):
        cost = CalibratedCost.ideal(h100, llama8b).with_(quantization=quantization)
        expected = (8.03e9 - LLAMA8B_EMBEDDING_PARAMS) * per_weight + LLAMA8B_EMBEDDING_PARAMS * 2
        assert cost.weight_bytes(100) == pytest.approx(expected, rel=1e-12)
        assert cost.weight_bytes(100) == weight_bytes(llama8b, quantization=quantization)
        assert cost.weight_read_s == pytest.approx(expected / H100_BANDWIDTH, rel=1e-12)


def test_fp8_kv_cache_halves_the_kv_read(h100, llama8b):
    # One decode over 100,000 cached tokens, ideal roofline + KV reads: the memory roof binds.
    batch = Batch(num_decodes=1, decode_context_tokens=100_000)
    auto = CalibratedCost.ideal(h100, llama8b).with_(kv_reads=True)
    fp8 = auto.with_(kv_cache_dtype="fp8")
    weights_s = 8.03e9 * 2 / H100_BANDWIDTH
    # 2 × 32 layers × 8 KV heads × 128 × 2 B = 131,072 B per token; 65,536 B in fp8.
    assert auto.batch_time_s(batch) == pytest.approx(weights_s + 100_000 * 131_072 / H100_BANDWIDTH, rel=1e-12)
    assert fp8.batch_time_s(batch) == pytest.approx(weights_s + 100_000 * 65_536 / H100_BANDWIDTH, rel=1e-12)
    kv_auto_s = auto.batch_time_s(batch) - auto.weight_read_s
    kv_fp8_s = fp8.batch_time_s(batch) - fp8.weight_read_s
    assert kv_fp8_s == pytest.approx(kv_auto_s / 2, rel=1e-9)
    # The weights are untouched by the KV cache's dtype.
    assert fp8.weight_read_s == auto.weight_read_s


def test_all_reduce_travels_in_the_activation_dtype(h100, llama70b):
    cost = CalibratedCost.typical(h100, llama70b, tp=2).with_(all_reduce_kernels=False)  # the ring formula
    fixed_s = 2 * 80 * h100.interconnect_latency_s  # two per layer, no bytes at 0 tokens
    assert cost.all_reduce_s(0) == pytest.approx(fixed_s, rel=1e-12)
    # 2 × 80 layers × (2 (2 − 1) / 2) × 1,000 tokens × 8,192 hidden × 2 B / 450 GB/s.
    bf16_s = 2 * 80 * 1.0 * 1000 * 8192 * 2 / 450e9
    assert cost.all_reduce_s(1000) - fixed_s == pytest.approx(bf16_s, rel=1e-9)
    assert cost.with_(dtype="float32").all_reduce_s(1000) - fixed_s == pytest.approx(2 * bf16_s, rel=1e-9)
    # Quantized weights, 16-bit activations: the same all-reduce.
    assert cost.with_(quantization="fp8").all_reduce_s(1000) == cost.all_reduce_s(1000)


def test_all_reduce_kernels_price_the_message_vllm_sends(h100, llama70b):
    from budgetlab.cost.collective import all_reduce_s, fused_with_norm
    from budgetlab.cost.step_terms import FUSED_NORM_S

    cost = CalibratedCost.typical(h100, llama70b, tp=4)
    # Two per layer of 32 tokens x 8,192 hidden x 2 B = 512 KiB: FlashInfer's kernel on an H100 at
    # TP4, fused with the RMSNorm after it, so each call counts the norm kernel's 4 us less.
    assert fused_with_norm(h100, tp=4, message_bytes=32 * 8192 * 2)
    for graph in (True, False):
        one = all_reduce_s(h100, tp=4, message_bytes=32 * 8192 * 2, cuda_graph=graph)
        assert cost.all_reduce_s(32, cuda_graph=graph) == pytest.approx(2 * 80 * (one - FUSED_NORM_S), rel=1e-12)
    # 2,048 tokens (32 MiB) take symmetric memory, not fused: the kernel's time as fitted.
    assert not fused_with_norm(h100, tp=4, message_bytes=2048 * 8192 * 2)
    big = all_reduce_s(h100, tp=4, message_bytes=2048 * 8192 * 2)
    assert cost.all_reduce_s(2048) == pytest.approx(2 * 80 * big, rel=1e-12)
    assert cost.all_reduce_s(0) == 0.0


def test_mixtral_int4_reads_shared_bytes_plus_the_experts_it_touches(h100, mixtral):
    cost = CalibratedCost.ideal(h100, mixtral).with_(moe=True, quantization="int4", tp=2)
    expert = (46.7e9 - 12.9e9) / (8 - 2)  # one expert over the 32 layers: 5.633e9
    shared = 46.7e9 - 8 * expert  # 1.633e9: attention, embeddings, norms, router
    embedding = 2 * 32_000 * 4096  # untied: 262,144,000, kept in BF16
    shared_bytes = embedding * 2 + (shared - embedding) * 0.515625
    expert_bytes = expert * 0.515625
    # One token touches k = 2 experts per layer; 2 tokens 8 (1 − 0.75²) = 3.5.
    assert cost.weight_bytes(1) == pytest.approx(shared_bytes + 2 * expert_bytes, rel=1e-12)
    assert cost.weight_bytes(2) == pytest.approx(shared_bytes + 3.5 * expert_bytes, rel=1e-12)
    assert cost.weight_bytes_per_gpu(1) == pytest.approx((shared_bytes + 2 * expert_bytes) / 2, rel=1e-12)
    one_token_s = cost.with_(all_reduce=False).batch_time_s(Batch(num_decodes=1))  # the memory roof binds
    assert one_token_s == pytest.approx((shared_bytes + 2 * expert_bytes) / 2 / H100_BANDWIDTH, rel=1e-12)
    # Many tokens touch every expert: the whole int4 replica, as the memory model sizes it.
    assert cost.weight_bytes(10**6) == pytest.approx(weight_bytes(mixtral, quantization="int4"), rel=1e-12)
    assert cost.weight_read_s == pytest.approx(weight_bytes(mixtral, quantization="int4") / 2 / H100_BANDWIDTH)
    # Unquantized, the split is the old one: (shared + D × expert) × 2 B.
    bf16 = cost.with_(quantization=None)
    assert bf16.weight_bytes(1) == pytest.approx((shared + 2 * expert) * 2, rel=1e-12)


def test_defaults_and_an_explicit_16_bit_dtype_equal_ideal_cost_bitwise(h100, llama8b):
    ideal = IdealCost(h100, llama8b)
    batch = Batch(num_decodes=7, decode_context_tokens=9000, prefill_tokens=(300,), prefill_context_tokens=(0,))
    for cost in (CalibratedCost.ideal(h100, llama8b), CalibratedCost.ideal(h100, llama8b).with_(dtype="bfloat16")):
        assert cost.weight_read_s == ideal.weight_read_s
        assert cost.per_token_s == ideal.per_token_s
        assert cost.batch_time_s(batch) == ideal.batch_time_s(batch)


# --------------------------------------------------------------------------------------------
# for_engine and typical(engine=...)
# --------------------------------------------------------------------------------------------


def test_for_engine_copies_the_deployment_and_keeps_the_rest(h100, llama70b):
    deployment = engine(tensor_parallel_size=4, kv_cache_dtype="fp8", quantization="fp8", dtype="bfloat16")
    base = CalibratedCost.typical(h100, llama70b).with_(step_overhead_s=1e-4, tile_tokens=128)
    moved = base.for_engine(deployment)
    assert (moved.tp, moved.dtype, moved.kv_cache_dtype, moved.quantization) == (4, "bfloat16", "fp8", "fp8")
    assert (moved.step_overhead_s, moved.tile_tokens) == (1e-4, 128)
    assert moved.for_engine(engine()).with_(cudagraph_sizes=None, cudagraph_full_sizes=()) == base.with_(dtype="auto")
    with pytest.raises(ParameterError, match="EngineConfig"):
        base.for_engine("tp=2")  # type: ignore[arg-type]


def test_typical_takes_the_deployment_from_the_engine(h100, llama70b):
    deployment = engine(tensor_parallel_size=2, kv_cache_dtype="fp8")
    cost = CalibratedCost.typical(h100, llama70b, engine=deployment)
    assert (cost.tp, cost.kv_cache_dtype, cost.quantization) == (2, "fp8", None)
    unrecorded = cost.with_(cudagraph_sizes=None, cudagraph_full_sizes=())  # for_engine records graphs too
    assert unrecorded == CalibratedCost(hardware=h100, model=llama70b, tp=2, kv_cache_dtype="fp8", **TYPICAL)
    assert CalibratedCost.typical(h100, llama70b, tp=2, engine=deployment) == cost  # agreeing is fine
    assert CalibratedCost.typical(h100, llama70b).tp == 1
    with pytest.raises(ConfigError, match=r"tp=4.*tensor_parallel_size=2"):
        CalibratedCost.typical(h100, llama70b, tp=4, engine=deployment)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dtype": "fp16"}, "dtype must be one of"),
        ({"dtype": 2}, "dtype must be one of"),
        ({"kv_cache_dtype": "int8"}, "kv_cache_dtype must be one of"),
        ({"quantization": "awq"}, "quantization must be one of"),
        ({"quantization": ["fp8"]}, "quantization must be one of"),
    ],
)
def test_bad_deployment_fields_are_config_errors(h100, llama8b, change, message):
    with pytest.raises(ConfigError, match=message):
        CalibratedCost.typical(h100, llama8b).with_(**change)


# --------------------------------------------------------------------------------------------
# simulate refuses a cost for another deployment (the regression issue 11 asks for)
# --------------------------------------------------------------------------------------------


def requests() -> list[Request]:
    return [Request(i, 0.01 * i, 500, 20) for i in range(6)]


def test_simulate_refuses_a_tp1_cost_for_a_tp2_engine_and_runs_with_the_engines(h100, llama70b):
    tp2 = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=2, num_kv_blocks=None)
    with pytest.raises(ConfigError, match=r"cost tp=1, engine tensor_parallel_size=2") as refused:
        simulate(requests(), engine=tp2, cost=CalibratedCost.typical(h100, llama70b))
    assert "CalibratedCost.typical(hw, model, engine=engine) or cost.for_engine(engine)" in str(refused.value)
    result = simulate(requests(), engine=tp2, cost=CalibratedCost.typical(h100, llama70b, engine=tp2))
    assert result.num_kv_blocks == kv_capacity(h100, llama70b, tp2).num_blocks
    assert result.requests["finished_at_s"].notna().all()


def test_ideal_cost_is_the_single_gpu_16_bit_deployment(h100, llama8b):
    check_cost_matches_engine(IdealCost(h100, llama8b), engine(dtype="bfloat16"))  # same bytes: agrees
    for deployment, words in (
        (engine(tensor_parallel_size=2), "tensor_parallel_size=2"),
        (engine(kv_cache_dtype="fp8"), "kv_cache_dtype='fp8' (1 B)"),
        (engine(quantization="int4"), "engine quantization='int4'"),
        (engine(dtype="float32"), "engine dtype='float32' (4 B)"),
    ):
        with pytest.raises(ConfigError, match=r"IdealCost") as refused:
            simulate(
                requests(), engine=dataclasses.replace(deployment, num_kv_blocks=500), cost=IdealCost(h100, llama8b)
            )
        assert words in str(refused.value)
        assert "make_cost('ideal', hw, model, engine=engine)" in str(refused.value)


def test_costs_without_a_model_or_a_deployment_are_not_checked(h100, llama8b):
    tp2 = engine(tensor_parallel_size=2, num_kv_blocks=500)
    check_cost_matches_engine(ConstantCost(0.01), tp2)

    @dataclasses.dataclass(frozen=True)
    class TableCost:  # a user's model that knows its model but says nothing of a deployment
        model: object

        def batch_time_s(self, batch: Batch) -> float:
            return 0.01

    check_cost_matches_engine(TableCost(llama8b), tp2)
    assert simulate(requests(), engine=tp2, cost=ConstantCost(0.01)).num_kv_blocks == 500


def test_make_cost_follows_the_engine(h100, llama70b, llama8b):
    tp2 = engine(tensor_parallel_size=2)
    typical = make_cost("typical", h100, llama70b, engine=tp2)
    assert typical == CalibratedCost.typical(h100, llama70b, engine=tp2)
    ideal = make_cost("ideal", h100, llama70b, engine=tp2)
    assert ideal == CalibratedCost.ideal(h100, llama70b).for_engine(tp2)
    check_cost_matches_engine(typical, tp2)
    check_cost_matches_engine(ideal, tp2)
    # The seeds' deployment (or no engine) keeps the seeds' IdealCost.
    assert make_cost("ideal", h100, llama8b, engine=engine()) == IdealCost(h100, llama8b)
    assert make_cost("ideal", h100, llama8b) == IdealCost(h100, llama8b)
    assert make_cost("typical", h100, llama8b) == CalibratedCost.typical(h100, llama8b)
    with pytest.raises(ParameterError, match="EngineConfig"):
        make_cost("typical", h100, llama8b, engine="tp2")  # type: ignore[arg-type]
    # A cost built for another GPU count than its engine is refused, whatever its GPU.
    other = CalibratedCost.typical(hardware("h200-sxm"), llama70b, tp=4)
    with pytest.raises(ConfigError, match=r"cost tp=4, engine tensor_parallel_size=2"):
        check_cost_matches_engine(other, tp2)
