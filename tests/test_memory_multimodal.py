"""What vLLM 0.19 loads and profiles beside the text weights (issue 23): a multimodal model's
vision encoder (weights, and the dummy images its profile run keeps), the rotary tables, and
the MXFP4 experts' Hopper kernel layout. Hand-worked figures; the log rows are checked against
``../shared/data/real/vllm_kv_logs.csv`` (skipped in a user's clone)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from budgetlab.catalog import model
from budgetlab.errors import ConfigError
from budgetlab.experiments.kv_logs import check_kv_logs, read_kv_logs
from budgetlab.hf_families import vision_encoder, vision_tower_params
from budgetlab.memory import (
    GiB,
    activation_peak,
    encoder_cache_bytes,
    encoder_profile_items,
    engine_weight_bytes_per_gpu,
    mxfp4_loaded_expert_bytes_per_gpu,
    rope_table_bytes,
    vision_weight_bytes,
    weight_bytes,
)
from budgetlab.specs import EngineConfig
from budgetlab.vision import VisionEncoder

from conftest import shared_real_file

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
GEMMA3_IMAGE = VisionEncoder(params=423_060_336, tokens_per_item=256, pixels_per_item=3 * 896 * 896)
SCOUT_VISION = {
    "model_type": "llama4_vision_model", "hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34,
    "patch_size": 14, "image_size": 336, "num_channels": 3, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
    "projector_output_dim": 4096, "vision_output_dim": 4096, "multi_modal_projector_bias": False,
}  # fmt: skip


def _engine(**changes):
    return EngineConfig(max_num_batched_tokens=8192, max_num_seqs=1024, **changes)


# --------------------------------------------------------------------------------------------
# The vision encoder
# --------------------------------------------------------------------------------------------


def test_vision_encoder_text_round_trip_and_refusals():
    text = GEMMA3_IMAGE.to_text()
    assert text == "params=423060336; tokens_per_item=256; pixels_per_item=2408448"
    assert VisionEncoder.parse(text) == GEMMA3_IMAGE
    for bad in ("params=1; tokens_per_item=2", "params=1; tokens_per_item=2; pixels=3", "params=x; a=1"):
        with pytest.raises(ConfigError, match="vision"):
            VisionEncoder.parse(bad)
    with pytest.raises(ConfigError, match="tokens_per_item"):
        VisionEncoder(params=1, tokens_per_item=0, pixels_per_item=1)
    gemma = model("gemma-3-27b")
    with pytest.raises(ConfigError, match="VisionEncoder"):
        dataclasses.replace(gemma, vision="params=1")
    with pytest.raises(ConfigError, match="rope_table_rows"):
        dataclasses.replace(gemma, rope_table_rows=0)


def test_llama4_vision_params_equal_the_checkpoint_module_table():
    # Llama 4 Scout's published module table: class and position embeddings, the patch
    # projection, two LayerNorms, 34 layers (q/k/v/o with biases, fc1/fc2 with biases, two
    # LayerNorms), the adapter's fc1/fc2 and the projector
    layer = 4 * (1_982_464 + 1408) + 7_929_856 + 5632 + 7_929_856 + 1408 + 4 * 1408
    table = 1408 + 812_416 + 827_904 + 4 * 1408 + 34 * layer + 23_068_672 + 16_777_216 + 20_971_520
    config = {"vision_config": SCOUT_VISION, "text_config": {"hidden_size": 5120}}
    assert vision_tower_params(config) == table == 871_932_416
    scout = vision_encoder(config)
    assert scout == VisionEncoder(params=table, tokens_per_item=17 * 144, pixels_per_item=17 * 3 * 336 * 336)


def test_gemma3_vision_encoder_from_its_config():
    config = json.loads((FIXTURES / "gemma-3-27b.json").read_text())
    assert vision_encoder(config) == GEMMA3_IMAGE  # SigLIP 416,866,032 + projector 1,152 × 5,376 + 1,152
    assert vision_encoder({"text_config": {"hidden_size": 8}}) is None  # text only


# --------------------------------------------------------------------------------------------
# Weights as loaded
# --------------------------------------------------------------------------------------------


def test_vision_weights_and_rope_tables_are_loaded_but_not_read_by_a_step():
    text = model("gemma-3-4b")
    served = dataclasses.replace(
        text,
        vision=VisionEncoder(params=419_816_304, tokens_per_item=256, pixels_per_item=2_408_448),
        rope_table_rows=131_072 * 9,
    )
    assert vision_weight_bytes(served) == 419_816_304 * 2
    assert rope_table_bytes(served) == 131_072 * 9 * 256 * 2 == 0.5625 * GiB
    assert weight_bytes(served) == weight_bytes(text)  # what a step reads
    engine = _engine()
    assert engine_weight_bytes_per_gpu(served, engine) == weight_bytes(text) + 419_816_304 * 2 + 0.5625 * GiB
    assert engine_weight_bytes_per_gpu(text, engine) == weight_bytes(text)  # a text-only row, unchanged
    # with tensor parallelism the encoder is split, the rotary table is on every GPU
    scout = dataclasses.replace(model("llama-4-scout"), vision=vision_encoder(
        {"vision_config": SCOUT_VISION, "text_config": {"hidden_size": 5120}}), rope_table_rows=10_485_760)  # fmt: skip
    tp4 = _engine(tensor_parallel_size=4)
    extra = engine_weight_bytes_per_gpu(scout, tp4) - weight_bytes(scout) / 4
    assert extra == pytest.approx(871_932_416 * 2 / 4 + 10_485_760 * 128 * 2)


def test_mxfp4_experts_take_the_hopper_kernel_layout():
    oss = model("gpt-oss-20b")
    # tp=1: values 32 × (1,472 × 5,760 + 1,472 × 2,880); scales 32 × 8,640 × 90 as loaded, and
    # swizzled with rows padded to 256 (5,888 and 3,072); FP32 biases 32 × 8,640 × 4
    tp1 = 32 * (1472 * 5760 + 1472 * 2880) + 32 * 8640 * 90 + 32 * (5888 + 3072) * 90 + 32 * 8640 * 4
    assert mxfp4_loaded_expert_bytes_per_gpu(oss, tp=1) == tp1 == 458_772_480
    # tp=2: the per-GPU width 1,440 is rounded to 1,472 first
    tp2 = 32 * (1472 * 2944 + 768 * 2880) + 32 * (2944 * 90 + 2880 * 46) + 32 * 3072 * (90 + 46) + 32 * 5824 * 4
    assert mxfp4_loaded_expert_bytes_per_gpu(oss, tp=2) == tp2
    counted = 32 * 3 * 2880 * 2880 * 0.53125 + 32 * (2 * 2880 + 2880) * 2
    engine = _engine(quantization="mxfp4")
    loaded = engine_weight_bytes_per_gpu(oss, engine)
    assert loaded == pytest.approx(weight_bytes(oss, quantization="mxfp4") + 24 * (tp1 - counted))
    assert loaded / GiB == pytest.approx(13.60, abs=0.005)  # vLLM 0.19 logged 13.64 on an H100
    assert engine_weight_bytes_per_gpu(oss, _engine()) == weight_bytes(oss)  # BF16 experts: no layout


# --------------------------------------------------------------------------------------------
# The profile run
# --------------------------------------------------------------------------------------------


def test_encoder_profile_items_follow_vllms_budget():
    gemma = dataclasses.replace(model("gemma-3-27b"), vision=GEMMA3_IMAGE)
    assert encoder_profile_items(gemma, _engine()) == 8192 // 256 == 32
    assert encoder_profile_items(gemma, _engine().__class__(max_num_batched_tokens=16384, max_num_seqs=256)) == 64
    # the decoder bound: one sequence of 512 tokens holds 2 images
    assert (
        encoder_profile_items(gemma, EngineConfig(max_num_batched_tokens=8192, max_num_seqs=1, max_model_len=512)) == 2
    )
    # at least one image even when the budget is smaller than an image
    assert (
        encoder_profile_items(gemma, EngineConfig(max_num_batched_tokens=128, max_num_seqs=1, max_model_len=1024)) == 1
    )
    assert encoder_profile_items(model("gemma-3-27b"), _engine()) == 0  # text only


def test_encoder_outputs_and_pixels_stay_through_the_text_passes():
    text = model("gemma-3-27b")
    gemma = dataclasses.replace(text, vision=GEMMA3_IMAGE)
    engine = _engine()
    held = 32 * (256 * 5376 + 3 * 896 * 896) * 2
    assert encoder_cache_bytes(gemma, engine) == held
    assert held / GiB == pytest.approx(0.226, abs=0.001)
    with_images, without = activation_peak(gemma, engine), activation_peak(text, engine)
    assert with_images.encoder_cache_bytes == held and without.encoder_cache_bytes == 0
    assert with_images.peak_bytes == without.peak_bytes + held
    assert with_images.sampler_bytes == without.sampler_bytes  # the fitted passes are unchanged


# --------------------------------------------------------------------------------------------
# The real start-ups
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compared():
    return check_kv_logs(read_kv_logs(shared_real_file("vllm_kv_logs.csv"))).compared.set_index("row_id")


def test_multimodal_startups_match_their_weights_activation_and_pool(compared):
    rows = compared.loc[[9, 10, 11, 31]]  # Gemma 3 12B, 27B, 4B; Llama 4 Scout Instruct at TP4
    assert list(rows.model) == ["gemma-3-12b", "gemma-3-27b", "gemma-3-4b", "llama-4-scout"]
    assert rows.within.all()
    assert (rows.weights_gib_predicted - rows.weights_gib_logged).abs().max() < 0.08
    assert (rows.activation_peak_gib_predicted - rows.activation_peak_gib_logged).abs().max() < 0.06
    assert rows.kv_tokens_error_fraction.abs().max() < 0.01


def test_mxfp4_startups_match_their_weights(compared):
    oss = compared.loc[[40, 41, 42]]
    assert (oss.weights_gib_predicted - oss.weights_gib_logged).abs().max() < 0.06
    assert oss.kv_tokens_error_fraction.abs().max() < 0.002
