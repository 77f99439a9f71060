"""EngineConfig refuses what vLLM refuses; Request refuses what cannot be served."""

from __future__ import annotations

import numpy as np
import pytest

from budgetlab import ConfigError, EngineConfig, Request


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
    ],
)
def test_invalid_combinations(kwargs, message):
    base = {"max_num_batched_tokens": 2048, "max_num_seqs": 256}
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**{**base, **kwargs})


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
