"""KV bytes per token, the start-up profile's terms, and the KV pool left (vLLM 0.19's accounting)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from budgetlab import (
    DoesNotFitError,
    EngineConfig,
    ParameterError,
    activation_peak,
    blocks_for_tokens,
    kv_bytes_per_token,
    kv_capacity,
    weight_bytes_per_gpu,
    weights_fit,
)
from budgetlab.catalog import hardware, model
from budgetlab.memory import (
    GiB,
    embedding_params,
    is_tight,
    kv_by_budget,
    memory_levers,
    non_torch_bytes,
    num_kv_blocks,
    tight_memory_text,
    weight_bytes,
)

ENGINE = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
SERVE_H100 = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=1024, gpu_memory_utilization=0.95)


def test_llama_8b_kv_is_128_kib_per_token(llama8b):
    # 2 (K, V) × 32 layers × 8 KV heads × 128 head_dim × 2 B = 131,072 B; an fp8 cache halves it.
    assert kv_bytes_per_token(llama8b) == 131_072
    assert kv_bytes_per_token(llama8b, kv_cache_dtype="fp8") == 65_536
    assert kv_bytes_per_token(llama8b, dtype="float32") == 262_144


def test_weights_by_precision(llama8b):
    embed = 2 * 128_256 * 4096  # untied embedding + output projection stay 16-bit
    assert embedding_params(llama8b) == embed == 1_050_673_152
    assert embedding_params(model("gemma-2-2b")) == 256_000 * 2304  # tied
    assert weight_bytes(llama8b) == 8.03e9 * 2
    assert weight_bytes(llama8b, quantization="fp8") == pytest.approx(embed * 2 + (8.03e9 - embed) * 1)
    assert weight_bytes(llama8b, quantization="int8") == weight_bytes(llama8b, quantization="fp8")
    assert weight_bytes(llama8b, quantization="int4") == pytest.approx(embed * 2 + (8.03e9 - embed) * 0.515625)
    # vLLM 0.19 logged 14.99 / 8.49 / 5.38 GiB ("Model loading took"): within 0.07 GiB
    for quantization, logged in ((None, 14.99), ("fp8", 8.49), ("int4", 5.38)):
        assert abs(weight_bytes(llama8b, quantization=quantization) / GiB - logged) < 0.075


def test_activation_peak_by_hand(llama8b):
    peak = activation_peak(llama8b, ENGINE)
    # forward: 2048 tokens × 2 B × (3 × 14,336 + 4.24 × 4,096)
    assert peak.forward_bytes == pytest.approx(2048 * 2 * (3 * 14336 + 4.24 * 4096))
    # sampler: hidden states 2048 × 4096 × 2 B + 14.47 B × 256 × 128,256 + 0.058 GiB
    assert peak.sampler_bytes == pytest.approx(2048 * 4096 * 2 + 14.47 * 256 * 128256 + 0.058 * GiB)
    assert peak.binding_pass == "sampler" and peak.peak_bytes == peak.sampler_bytes
    assert peak.moe_workspace_bytes == 0
    # vLLM's serve defaults on H100 (8,192 tokens, 1,024 sequences): 1.89 GiB logged
    assert activation_peak(llama8b, SERVE_H100).peak_bytes / GiB == pytest.approx(1.89, abs=0.01)
    # Code Llama's 32k vocabulary: the forward pass binds (0.77 GiB logged)
    codellama = activation_peak(model("codellama-7b"), SERVE_H100)
    assert codellama.binding_pass == "forward" and codellama.peak_bytes / GiB == pytest.approx(0.77, abs=0.01)


def test_activation_peak_stage_must_be_a_stage_of_the_pipeline(llama8b):
    from budgetlab.errors import ParameterError

    two_stages = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, pipeline_parallel_size=2)
    # The first of two stages runs no sampler; the last (1, or None) does.
    assert activation_peak(llama8b, two_stages, stage=0).sampler_bytes == 0
    assert activation_peak(llama8b, two_stages, stage=1) == activation_peak(llama8b, two_stages)
    for bad in (2, -1, 0.5, True, "1"):
        with pytest.raises(ParameterError, match=r"^stage must be None or an int in \[0, pipeline_parallel_size = 2\)"):
            activation_peak(llama8b, two_stages, stage=bad)


def test_moe_workspace_and_tensor_parallel_peak():
    qwen = model("qwen3-30b-a3b")  # 8 of 128 experts, 768 wide, hidden 2048
    peak = activation_peak(qwen, SERVE_H100)
    assert peak.moe_workspace_bytes == pytest.approx(8192 * 8 * (max(2 * 768, 2048) + 768) * 2)
    llama70b = model("llama-3.3-70b")
    one = activation_peak(llama70b, SERVE_H100)
    four = activation_peak(llama70b, dataclasses.replace(SERVE_H100, tensor_parallel_size=4))
    assert four.forward_bytes < one.forward_bytes and four.sampler_bytes == one.sampler_bytes  # logits are whole


def test_non_torch_memory():
    assert non_torch_bytes(1) == 0.25 * GiB
    assert non_torch_bytes(2) == non_torch_bytes(8) == 2.1 * GiB


def test_kv_capacity_every_term_by_hand(h100, llama8b):
    cap = kv_capacity(h100, llama8b, ENGINE)
    assert h100.reported_memory_bytes == round(79.19 * GiB)  # what CUDA reports on an "80GB" H100
    usable = round(79.19 * GiB) * 0.9
    kv = usable - 16.06e9 - 0.25 * GiB - activation_peak(llama8b, ENGINE).peak_bytes
    assert cap.usable_bytes == pytest.approx(usable)
    assert cap.weight_bytes == 16.06e9 and cap.non_torch_bytes == 0.25 * GiB
    assert cap.kv_bytes == pytest.approx(kv)
    # 16 tokens × 128 KiB = 2 MiB per block; vLLM logs all of them, one is its null block.
    assert cap.num_gpu_blocks == int(kv // 2_097_152)
    assert cap.vllm_kv_cache_tokens == 16 * cap.num_gpu_blocks
    assert cap.num_blocks == cap.num_gpu_blocks - 1 and cap.num_tokens == cap.num_blocks * 16
    terms = cap.terms().set_index("term")
    parts = ["weights", "non-torch (CUDA context, NCCL)", "activation peak (sampler pass)", "KV cache"]
    assert terms.loc[parts, "bytes"].sum() == pytest.approx(cap.usable_bytes)
    assert terms.loc["reported by CUDA", "gib"] == pytest.approx(79.19)
    assert not is_tight(cap)


def test_vllm_logged_pool_for_llama_8b(h100, llama8b):
    # vllm_kv_logs.csv row 24 (vLLM 0.19, H100, util 0.95): "GPU KV cache size: 476,016 tokens"
    assert kv_capacity(h100, llama8b, SERVE_H100).vllm_kv_cache_tokens == pytest.approx(476_016, rel=0.002)


def test_bigger_budget_and_lower_utilization_leave_less_kv(h100, llama8b):
    small = kv_capacity(h100, llama8b, ENGINE)
    big = kv_capacity(h100, llama8b, EngineConfig(max_num_batched_tokens=16384, max_num_seqs=256))
    assert big.activation_bytes > small.activation_bytes and big.num_blocks < small.num_blocks
    lower = kv_capacity(h100, llama8b, dataclasses.replace(ENGINE, gpu_memory_utilization=0.5))
    assert lower.num_blocks < small.num_blocks


def test_fp8_kv_doubles_tokens_and_quantized_weights_leave_more(h100, llama8b):
    base = kv_capacity(h100, llama8b, ENGINE)
    fp8_kv = kv_capacity(h100, llama8b, dataclasses.replace(ENGINE, kv_cache_dtype="fp8"))
    assert fp8_kv.kv_bytes == base.kv_bytes  # same bytes, one byte per element: twice the blocks
    assert abs(fp8_kv.num_gpu_blocks - 2 * base.num_gpu_blocks) <= 1
    int4 = kv_capacity(h100, llama8b, dataclasses.replace(ENGINE, quantization="int4"))
    assert int4.kv_bytes - base.kv_bytes == pytest.approx(base.weight_bytes - int4.weight_bytes)


def test_weights_that_do_not_fit_say_what_would():
    h100 = hardware("h100-sxm")
    with pytest.raises(DoesNotFitError, match=r"does not fit.*by \d+\.\d\d GiB.*tensor_parallel_size=2") as info:
        kv_capacity(h100, model("llama-3.1-70b"), ENGINE)
    assert "fp8" in str(info.value)
    with pytest.raises(DoesNotFitError) as info:
        kv_capacity(h100, model("llama-3.1-405b"), dataclasses.replace(ENGINE, tensor_parallel_size=2))
    message = str(info.value)
    # 812 GB of weights: 8 GPUs hold 94.5 GiB each, too much; 16 is the next degree dividing 128 heads
    assert "per GPU" in message and "tensor_parallel_size=16" in message
    assert all(f"tensor_parallel_size={bad}" not in message for bad in (3, 5, 6, 7, 8, 9))


def test_blocks_for_tokens():
    assert [blocks_for_tokens(n, 16) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


def test_num_kv_blocks_prefers_the_explicit_value(h100, llama8b):
    assert num_kv_blocks(EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, num_kv_blocks=10)) == 10
    assert num_kv_blocks(ENGINE, h100, llama8b) == kv_capacity(h100, llama8b, ENGINE).num_blocks
    with pytest.raises(ValueError, match="pass both, or set num_kv_blocks"):
        num_kv_blocks(ENGINE)


def test_tensor_parallel_splits_weights_and_kv_heads(h100, llama8b):
    llama70b = model("llama-3.1-70b")  # 141 GB of BF16 weights, 8 KV heads, 64 attention heads
    assert weight_bytes_per_gpu(llama70b, tp=2) == pytest.approx(llama70b.weight_bytes / 2)
    assert [weights_fit(h100, llama70b, tp=tp) for tp in (1, 2, 8)] == [False, True, True]
    assert weights_fit(h100, llama8b)
    # KV heads split up to their number, then replicated: 8 KV heads over 16 GPUs hold one each
    full = kv_bytes_per_token(llama70b)
    assert [kv_bytes_per_token(llama70b, tp=tp) for tp in (1, 2, 8, 16)] == [full, full // 2, full // 8, full // 8]
    assert isinstance(kv_bytes_per_token(llama70b, tp=8), int)


def test_kv_capacity_takes_tensor_parallelism_from_the_engine(h100, llama8b):
    one = kv_capacity(h100, llama8b, ENGINE)
    two = kv_capacity(h100, llama8b, dataclasses.replace(ENGINE, tensor_parallel_size=2))
    assert one.tp == 1 and two.tp == 2
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2) and two.kv_bytes_per_token == 65_536
    assert two.non_torch_bytes == 2.1 * GiB  # NCCL
    assert two.num_tokens > 2 * one.num_tokens  # half the bytes per token, and more bytes left
    with pytest.raises(ParameterError, match="tp=3 does not divide"):
        kv_capacity(h100, llama8b, dataclasses.replace(ENGINE, tensor_parallel_size=3))


def test_tensor_parallel_degree_must_divide_the_heads(llama8b):
    with pytest.raises(ParameterError, match="tp=3 does not divide"):
        weight_bytes_per_gpu(llama8b, tp=3)
    with pytest.raises(ParameterError, match="tp must be an int >= 1"):
        kv_bytes_per_token(llama8b, tp=0)


def test_kv_by_budget(h100, llama8b):
    frame = kv_by_budget(h100, llama8b, [128, 2048, 256, 8192, 2048], ENGINE)
    assert frame.max_num_batched_tokens.tolist() == [256, 2048, 8192]  # 128 < max_num_seqs is refused by vLLM
    at_2048 = kv_capacity(h100, llama8b, ENGINE)
    row = frame.set_index("max_num_batched_tokens").loc[2048]
    assert row.kv_blocks == at_2048.num_blocks and row.kv_tokens == at_2048.num_tokens
    assert row.activation_bytes == at_2048.activation_bytes
    assert np.all(np.diff(frame.kv_tokens) <= 0) and np.all(np.diff(frame.activation_bytes) > 0)
    assert frame.kv_tokens_lost.tolist()[0] == 0
    lost = frame.kv_tokens_lost.iloc[-1]
    assert lost == frame.kv_tokens.iloc[0] - frame.kv_tokens.iloc[-1]
    assert frame.kv_tokens_lost_fraction.iloc[-1] == pytest.approx(lost / frame.kv_tokens.iloc[0])
    with pytest.raises(ValueError, match="below max_num_seqs"):
        kv_by_budget(h100, llama8b, [128], ENGINE)


def test_a_tight_pool_and_what_each_lever_buys(h100):
    llama70b = model("llama-3.1-70b")
    engine = dataclasses.replace(SERVE_H100, tensor_parallel_size=2, gpu_memory_utilization=0.9)
    cap = kv_capacity(h100, llama70b, engine)
    assert is_tight(cap)
    levers = memory_levers(h100, llama70b, engine).set_index("lever")
    assert levers.loc["as configured", "kv_tokens"] == cap.num_tokens
    tp4 = kv_capacity(h100, llama70b, dataclasses.replace(engine, tensor_parallel_size=4)).num_tokens
    assert levers.loc["tensor_parallel_size 2 → 4", "kv_tokens_gained"] == tp4 - cap.num_tokens
    fp8 = kv_capacity(h100, llama70b, dataclasses.replace(engine, kv_cache_dtype="fp8")).num_tokens
    assert levers.loc["fp8 KV cache", "kv_tokens"] == fp8
    assert levers.loc["budget 8,192 → 4,096 tokens", "is_knob"]
    assert levers.kv_tokens_gained.drop("as configured").gt(0).all()
    text = tight_memory_text(cap, memory_levers(h100, llama70b, engine))
    assert "the answer is memory, sharding or replicas, not a knob" in text and "fp8 KV cache +" in text


def test_catalog_gpus_carry_what_cuda_reports():
    from budgetlab.catalog import list_hardware

    for slug in list_hardware():
        gpu = hardware(slug)
        assert gpu.reported_memory_bytes <= gpu.memory_bytes
        assert gpu.cuda_memory_source  # a source, or why it is unknown
    assert hardware("h100-pcie").cuda_memory_bytes is None  # no published figure: the datasheet's
    assert hardware("a100-40gb").cuda_memory_bytes == 42_298_834_944  # deviceQuery, exact bytes


def test_vllm_serve_defaults_by_gpu():
    assert EngineConfig.vllm_defaults(hardware("h100-sxm")).max_num_batched_tokens == 8192
    assert EngineConfig.vllm_defaults(hardware("h200-sxm")).max_num_seqs == 1024
    a100 = EngineConfig.vllm_defaults(hardware("a100-80gb-sxm"))  # excluded by name (vLLM PR #17885)
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    l40s = EngineConfig.vllm_defaults(hardware("l40s"), gpu_memory_utilization=0.8)
    assert (l40s.max_num_batched_tokens, l40s.max_num_seqs, l40s.gpu_memory_utilization) == (2048, 256, 0.8)
    short = EngineConfig.vllm_defaults(hardware("h100-sxm"), max_model_len=4)
    assert (short.max_num_batched_tokens, short.max_num_seqs) == (4096, 1024)


def test_pipeline_stages_split_layers_like_vllm():
    from budgetlab.memory.sizes import stage_layers, stage_weight_bytes

    assert stage_layers(32, 4) == (8, 8, 8, 8)
    assert stage_layers(30, 4) == (7, 8, 8, 7)  # extra layers go to the stages before the last
    assert stage_layers(5, 2) == (3, 2)
    with pytest.raises(ParameterError, match="exceeds the model's 32 layers"):
        stage_layers(32, 33)
    llama8b = model("llama-3.1-8b")
    per_layer = (8.03e9 - 1_050_673_152) / 32
    table = 128_256 * 4096
    # first stage: 8 layers + the embedding; middle: 8 layers; last: 8 layers + the output projection
    assert stage_weight_bytes(llama8b, stage=0, pp=4) == pytest.approx((8 * per_layer + table) * 2)
    assert stage_weight_bytes(llama8b, stage=1, pp=4) == pytest.approx(8 * per_layer * 2)
    assert stage_weight_bytes(llama8b, stage=3, pp=4) == stage_weight_bytes(llama8b, stage=0, pp=4)
    # vLLM 0.19 logged 4.26 GiB on the first and last stage, 3.28 GiB on the middle ones
    assert stage_weight_bytes(llama8b, stage=0, pp=4) / GiB == pytest.approx(4.26, abs=0.04)
    assert stage_weight_bytes(llama8b, stage=1, pp=4) / GiB == pytest.approx(3.28, abs=0.04)


def test_pipeline_pool_is_the_smallest_stage(h100, llama8b):
    engine = dataclasses.replace(SERVE_H100, pipeline_parallel_size=4)
    cap = kv_capacity(h100, llama8b, engine)
    assert cap.pp == 4 and cap.stage == 3  # the last stage also runs the sampler
    assert cap.kv_bytes_per_token == 131_072 // 4  # 8 of 32 layers
    assert cap.non_torch_bytes == 0.07 * GiB
    middle = activation_peak(llama8b, engine, stage=1)
    assert middle.sampler_bytes == 0 and middle.pipeline_buffer_bytes == 2 * 8192 * 4096 * 2
    assert middle.peak_bytes / GiB == pytest.approx(1.05, abs=0.01)  # vLLM 0.19 logged 1.05 GiB
    assert activation_peak(llama8b, engine).peak_bytes / GiB == pytest.approx(2.01, abs=0.01)  # logged 2.01
    # vllm_kv_logs.csv row 26: "GPU KV cache size: 2,257,264 tokens"
    assert cap.vllm_kv_cache_tokens == pytest.approx(2_257_264, rel=0.001)
