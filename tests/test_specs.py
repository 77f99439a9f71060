"""EngineConfig refuses what vLLM refuses; Request refuses what cannot be served."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from budgetlab import Batch, ConfigError, EngineConfig, HardwareSpec, ModelSpec, Request, hardware, model


def test_defaults_match_vllm():
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    assert engine.block_size == 16
    assert engine.num_kv_blocks is None
    assert engine.long_prefill_token_threshold == 0
    assert engine.max_model_len is None
    assert engine.gpu_memory_utilization == 0.9
    assert engine.policy == "vllm-v1"
    with pytest.raises(AttributeError):
        engine.max_num_seqs = 3  # type: ignore[misc]


def test_budget_below_seq_cap_is_refused_with_the_fix():
    with pytest.raises(
        ConfigError, match=r"max_num_batched_tokens \(128\) is smaller than max_num_seqs \(256\).*Raise"
    ):
        EngineConfig(max_num_batched_tokens=128, max_num_seqs=256)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"long_prefill_token_threshold": 5000, "max_model_len": 4096}, "exceeds max_model_len.*Lower the threshold"),
        ({"enable_chunked_prefill": False, "max_model_len": 8192}, "chunked prefill off.*at least max_model_len"),
        ({"enable_chunked_prefill": False}, "set max_model_len"),
        ({"max_num_seqs": 0}, "max_num_seqs must be a positive int"),
        ({"max_num_batched_tokens": 2048.0}, "max_num_batched_tokens must be a positive int"),
        ({"block_size": True}, "block_size must be a positive int"),
        ({"num_kv_blocks": -1}, "num_kv_blocks must be a positive int"),
        ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold must be an int >= 0"),
        ({"gpu_memory_utilization": 1.5}, r"fraction in \(0, 1\]"),
        ({"gpu_memory_utilization": 0}, r"fraction in \(0, 1\]"),
        ({"policy": "fcfs"}, "policy must be one of vllm-v1, decode-first"),
        # Strings and None used to slip through float() (or fail with a bare TypeError) and
        # only break later, in the KV sizing; papermill hands parameters over as strings.
        ({"gpu_memory_utilization": "0.9"}, r"fraction in \(0, 1\]"),
        ({"gpu_memory_utilization": None}, r"fraction in \(0, 1\]"),
        ({"enable_chunked_prefill": "false"}, "enable_chunked_prefill must be True or False"),
        ({"enable_expert_parallel": 1}, "enable_expert_parallel must be True or False"),
    ],
)
def test_invalid_combinations(kwargs, message):
    base = {"max_num_batched_tokens": 2048, "max_num_seqs": 256}
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**{**base, **kwargs})


def test_expert_parallel_is_vllms_flag_off_by_default():
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    assert engine.enable_expert_parallel is False and "expert" not in repr(engine)
    switched = dataclasses.replace(engine, enable_expert_parallel=True, tensor_parallel_size=4)
    assert "enable_expert_parallel=True" in repr(switched)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_numpy_integers_are_accepted():
    engine = EngineConfig(max_num_batched_tokens=np.int64(2048), max_num_seqs=np.int32(8))
    assert engine.max_num_batched_tokens == 2048


def test_chunking_off_with_budget_covering_max_model_len_is_fine():
    EngineConfig(max_num_batched_tokens=8192, max_num_seqs=8, enable_chunked_prefill=False, max_model_len=8192)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((1, -0.5, 10, 5), "arrival_at_s"),
        ((1, float("nan"), 10, 5), "arrival_at_s"),
        ((1, 0.0, 0, 5), "prompt_tokens must be an int >= 1"),
        ((1, 0.0, 10, 2.5), "output_tokens must be an int >= 1"),
    ],
)
def test_request_validation(fields, message):
    with pytest.raises(ValueError, match=message):
        Request(*fields)


def test_request_accepts_numpy_numbers():
    # An arrival read from a NumPy array of whole seconds is an np.int64: a valid time.
    request = Request(1, np.int64(3), np.int64(10), np.int32(5))
    assert request.arrival_at_s == 3
    with pytest.raises(ValueError, match="arrival_at_s"):
        Request(1, np.float64("inf"), 10, 5)
    with pytest.raises(ValueError, match="arrival_at_s"):
        Request(1, "3", 10, 5)


def test_request_total_tokens():
    assert Request("a", 0.0, 10, 5).total_tokens == 15


def test_hardware_spec_refuses_impossible_numbers():
    h100 = hardware("h100-sxm")
    assert dataclasses.replace(h100, interconnect_latency_s=0.0).interconnect_latency_s == 0.0  # an ideal link
    assert dataclasses.replace(h100, memory_bytes=80e9, cuda_memory_bytes=None).reported_memory_bytes == 80e9
    refused = [
        ({"dense_bf16_flops_per_s": 0.0}, r"^dense_bf16_flops_per_s must be a finite number > 0 \[FLOP/s\], got 0.0$"),
        ({"mem_bandwidth_bytes_per_s": float("inf")}, r"mem_bandwidth_bytes_per_s must be .* got inf"),
        ({"memory_bytes": "80e9"}, r"memory_bytes must be a finite number > 0 \[B\], got '80e9'"),
        ({"interconnect_bandwidth_bytes_per_s": True}, r"interconnect_bandwidth_bytes_per_s .* got True"),
        ({"interconnect_latency_s": -1e-6}, r"interconnect_latency_s must be a finite number >= 0 \[s\]"),
        ({"cuda_memory_bytes": 2 * h100.memory_bytes}, r"cuda_memory_bytes must be bytes in \(0, memory_bytes"),
    ]
    for changes, message in refused:
        with pytest.raises(ConfigError, match=message):
            dataclasses.replace(h100, **changes)
    assert isinstance(h100, HardwareSpec)


def test_model_spec_refuses_impossible_numbers():
    llama = model("llama-3.1-8b")
    # A parameter count is a real number (the catalog stores 8.03e9), NumPy ints are ints.
    assert dataclasses.replace(llama, num_params=8.5e9, num_active_params=8.5e9).weight_bytes == 17e9
    assert dataclasses.replace(llama, num_layers=np.int64(16)).num_layers == 16
    refused = [
        ({"num_params": float("nan")}, r"^num_params must be a finite number > 0 \[parameters\], got nan$"),
        ({"num_active_params": -1}, r"num_active_params must be a finite number > 0"),
        ({"num_layers": 32.0}, r"^num_layers must be an int >= 1, got 32.0$"),
        ({"hidden_size": "4096"}, r"hidden_size must be an int >= 1, got '4096'"),
        ({"num_kv_heads": 0}, r"num_kv_heads must be an int >= 1, got 0"),
        ({"head_dim": True}, r"head_dim must be an int >= 1, got True"),
        ({"num_experts": None}, r"num_experts must be an int >= 1, got None"),
        ({"dtype_bytes": 2.5}, r"dtype_bytes must be an int >= 1, got 2.5"),
        ({"tie_word_embeddings": "false"}, r"tie_word_embeddings must be True or False"),
    ]
    for changes, message in refused:
        with pytest.raises(ConfigError, match=message):
            dataclasses.replace(llama, **changes)
    assert isinstance(llama, ModelSpec)


def test_batch_refuses_counts_that_are_not_ints():
    # 8 decodes + chunks of 100 and 50 tokens: 158 tokens; NumPy ints are counts too.
    assert Batch(8, 800, (100, 50), (0, 100)).num_tokens == 158
    assert Batch(np.int64(8), np.int64(800), (np.int64(100),), (np.int64(0),)).num_tokens == 108
    refused = [
        ({"num_decodes": float("nan")}, r"^num_decodes must be an int >= 0, got nan$"),
        ({"num_decodes": -1}, r"^num_decodes must be an int >= 0, got -1$"),
        ({"decode_context_tokens": 2.5}, r"^decode_context_tokens must be an int >= 0, got 2.5$"),
        ({"decode_context_tokens": True}, r"decode_context_tokens .* got True"),
        ({"prefill_tokens": [10], "prefill_context_tokens": (0,)}, r"^prefill_tokens must be a tuple of ints"),
        ({"prefill_tokens": (10, "3"), "prefill_context_tokens": (0, 0)}, r"^prefill_tokens\[1\] must be an int >= 0"),
        ({"prefill_tokens": (10,), "prefill_context_tokens": (None,)}, r"^prefill_context_tokens\[0\] must be"),
        ({"prefill_tokens": (10, 20), "prefill_context_tokens": (0,)}, "one prefill_context_tokens entry per chunk"),
    ]
    for changes, message in refused:
        with pytest.raises(ValueError, match=message):
            Batch(**changes)
