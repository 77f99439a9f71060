"""Any model from its Hugging Face config.json: hand-worked counts, every default, every error, and
the catalog rows built from the public configs in tests/fixtures/hf_configs/."""

from __future__ import annotations

import csv
import dataclasses
import doctest
import json
import re
from pathlib import Path

import pytest

import budgetlab
from budgetlab import catalog, hf_config
from budgetlab.catalog import list_models, model
from budgetlab.errors import ParameterError
from budgetlab.hf_config import HFArchitecture, ParamCount, model_from_hf_config, read_hf_config

from conftest import SHARED_DATA

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf_configs"
FIXTURE_SLUGS = sorted(p.stem for p in FIXTURES.glob("*.json"))
GIB = 2**30

#: A made-up Llama-style model small enough to count by hand (see test_tiny_config_counted_by_hand).
TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 16,
    "vocab_size": 10,
    "tie_word_embeddings": False,
}

#: Rows that were in the catalog before model_from_hf_config: their num_params is the card's
#: three significant figures; the exact count is in their notes.
ROUNDED_ROWS = {
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-2-7b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
}

#: Published totals [count] (model card, else the Hugging Face page's safetensors figure) and,
#: for a mixture of experts, the published active count.
PUBLISHED = {
    "codellama-7b": 6.74e9,
    "codellama-34b": 33.7e9,
    "deepseek-r1-distill-qwen-14b": 14.8e9,
    "gemma-7b": 8.54e9,
    "gemma-2-2b": 2.61e9,
    "gemma-2-9b": 9.24e9,
    "gemma-2-27b": 27.2e9,
    "granite-3.1-2b": 2.53e9,
    "granite-3.1-8b": 8.17e9,
    "llama-2-7b": 6.74e9,
    "llama-2-70b": 69.0e9,
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.6e9,
    "llama-3.1-405b": 406e9,
    "llama-3.3-70b": 70.6e9,
    "mistral-7b": 7.25e9,
    "mistral-small-24b": 23.6e9,
    "mixtral-8x7b": 46.7e9,
    "mixtral-8x22b": 141e9,
    "phi-4": 14.7e9,
    "qwen2.5-7b": 7.61e9,
    "qwen2.5-32b": 32.8e9,
    "qwen2.5-72b": 72.7e9,
    "qwen3-0.6b": 0.6e9,
    "qwen3-8b": 8.19e9,
    "qwen3-14b": 14.8e9,
    "qwen3-32b": 32.8e9,
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-235b-a22b": 235e9,
    # issue 23. Multimodal rows count the language model only: Gemma 3's are the report's
    # non-embedding + embedding figures (its 417M SigLIP tower left out); Scout's 109B includes
    # Meta's vision encoder (about 0.87B by its vision_config), hence PUBLISHED_RTOL.
    "gemma-3-4b": 3.209e9 + 0.675e9,
    "gemma-3-12b": 10.759e9 + 1.012e9,
    "gemma-3-27b": 25.600e9 + 1.416e9,
    "gpt-oss-20b": 20.91e9,
    "gpt-oss-120b": 116.83e9,
    "llama-4-scout": 109e9,
    "deepseek-v2-lite": 15.7e9,
    "deepseek-v3": 671e9,
    "qwen3-next-80b-a3b": 80e9,
    "qwen3.5-397b-a17b": 397e9,
    "qwen3.5-35b-a3b": 35e9,
}
PUBLISHED_ACTIVE = {
    "mixtral-8x7b": 12.9e9,
    "mixtral-8x22b": 39e9,
    "qwen3-30b-a3b": 3.3e9,
    "qwen3-235b-a22b": 22e9,
    "llama-4-scout": 17e9,
}
#: Published active counts that leave out the input embedding (OpenAI's and DeepSeek's cards).
PUBLISHED_ACTIVE_WITHOUT_EMBEDDING = {
    "gpt-oss-20b": 3.61e9,
    "gpt-oss-120b": 5.13e9,
    "deepseek-v2-lite": 2.4e9,
    "deepseek-v3": 36.6e9,
}
#: Wider tolerances where the published total includes a part the row does not count.
PUBLISHED_RTOL = {"llama-4-scout": 0.015}


def tiny(**changes: object) -> dict[str, object]:
    config: dict[str, object] = dict(TINY)
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


@pytest.fixture(autouse=True)
def _fresh_cache():
    catalog.clear_cache()
    yield
    catalog.clear_cache()


# --------------------------------------------------------------------------------------------
# Hand-worked counts
# --------------------------------------------------------------------------------------------


def test_tiny_config_counted_by_hand():
    # h = 8, 2 query heads and 1 KV head of d = 8 / 2 = 4, f = 16, vocab 10, 2 layers:
    # q 8×8 = 64, k 8×4 = 32, v 32, o 64 → 192; MLP 3×8×16 = 384; norms 2×8 = 16 → 592 a layer;
    # embedding 10×8 = 80, lm_head 80, final norm 8 → 2×592 + 168 = 1352.
    counts = read_hf_config(TINY).param_count()
    assert counts == ParamCount(
        embedding=80,
        lm_head=80,
        attention_per_layer=192,
        mlp_per_expert=384,
        router_per_layer=0,
        norms_per_layer=16,
        final_norm=8,
        num_layers=2,
        num_experts=1,
        num_experts_per_token=1,
    )
    assert (counts.total, counts.active, counts.non_embedding) == (1352, 1352, 1192)
    spec = model_from_hf_config(TINY, slug="tiny")
    assert spec == budgetlab.ModelSpec(
        slug="tiny",
        name="tiny",
        num_params=1352,
        num_active_params=1352,
        num_layers=2,
        hidden_size=8,
        num_attention_heads=2,
        num_kv_heads=1,
        head_dim=4,
        intermediate_size=16,
        vocab_size=10,
    )


def test_tied_embeddings_drop_the_output_projection():
    untied = model_from_hf_config(TINY, slug="tiny")
    tied = model_from_hf_config(tiny(tie_word_embeddings=True), slug="tiny")
    assert untied.num_params - tied.num_params == 10 * 8  # vocab × hidden
    assert read_hf_config(tiny(tie_word_embeddings=True)).param_count().lm_head == 0


def test_qwen2_biases_and_attention_bias_and_mlp_bias():
    # Qwen2: q, k and v biases, q width 8 and KV width 4 → 8 + 4 + 4 = 16 a layer.
    qwen2 = read_hf_config(tiny(model_type="qwen2")).param_count()
    assert qwen2.attention_per_layer == 192 + 16
    # attention_bias: q, k, v and o (o adds hidden = 8).
    biased = read_hf_config(tiny(attention_bias=True)).param_count()
    assert biased.attention_per_layer == 192 + 16 + 8
    # mlp_bias: gate and up 16 each, down 8.
    assert read_hf_config(tiny(mlp_bias=True)).param_count().mlp_per_expert == 384 + 40


def test_qwen3_qk_norm_and_explicit_head_dim():
    # Qwen3 sets head_dim explicitly; q/k RMSNorm add 2 × head_dim a layer.
    arch = read_hf_config(tiny(model_type="qwen3", head_dim=8))
    counts = arch.param_count()
    assert arch.head_dim == 8 and arch.qk_norm
    # q 8×16 = 128, k 8×8 = 64, v 64, o 16×8 = 128 → 384, + 2×8 norm weights
    assert counts.attention_per_layer == 384 + 16


def test_gemma_head_dim_tying_and_four_norms():
    # Gemma 2: explicit head_dim, tied embeddings by default, four norms per layer.
    arch = read_hf_config(tiny(model_type="gemma2", head_dim=16, tie_word_embeddings=None))
    assert arch.tie_word_embeddings and arch.head_dim == 16 and arch.norms_per_layer == 4
    counts = arch.param_count()
    # q 8×32 = 256, k 8×16 = 128, v 128, o 32×8 = 256 → 768; norms 4×8 = 32
    assert (counts.attention_per_layer, counts.norms_per_layer, counts.lm_head) == (768, 32, 0)
    gemma = model("gemma-7b")
    assert gemma.head_dim * gemma.num_attention_heads == 4096 != gemma.hidden_size
    assert model("gemma-2-27b").head_dim == 128  # 27B: 128, not 4608 / 32 = 144


def test_mixture_of_experts_counted_by_hand():
    moe = tiny(num_local_experts=4, num_experts_per_tok=2)
    counts = read_hf_config(moe).param_count()
    # router 8×4 = 32 a layer; total: 4 experts, active: 2 experts
    assert counts.router_per_layer == 32
    per_layer_total = 192 + 4 * 384 + 32 + 16
    per_layer_active = 192 + 2 * 384 + 32 + 16
    assert counts.total == 2 * per_layer_total + 168
    assert counts.active == 2 * per_layer_active + 168
    spec = model_from_hf_config(moe, slug="tiny-moe")
    assert (spec.num_experts, spec.num_experts_per_token, spec.is_moe) == (4, 2, True)


def test_qwen3_moe_reads_num_experts_and_the_per_expert_width():
    moe = tiny(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=1, moe_intermediate_size=4, head_dim=4)
    arch = read_hf_config(moe)
    assert (arch.num_experts, arch.num_experts_per_token, arch.intermediate_size) == (4, 1, 4)
    assert arch.param_count().mlp_per_expert == 3 * 8 * 4


# --------------------------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------------------------


def test_every_key_default():
    bare = {
        "num_hidden_layers": 2,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "intermediate_size": 16,
        "vocab_size": 10,
    }
    arch = read_hf_config(bare)
    assert arch == HFArchitecture(
        model_type="",
        num_layers=2,
        hidden_size=8,
        num_attention_heads=2,
        num_kv_heads=2,  # num_key_value_heads: the query heads
        head_dim=4,  # hidden_size / num_attention_heads
        intermediate_size=16,
        vocab_size=10,
        num_experts=1,
        num_experts_per_token=1,
        tie_word_embeddings=False,  # LlamaConfig's default
        qkv_bias=False,
        o_bias=False,
        mlp_bias=False,
        qk_norm=False,
        norms_per_layer=2,
        dtype_bytes=2,  # no torch_dtype: vLLM serves it in 16 bits
    )
    # null means "not set", as transformers writes it
    assert read_hf_config({**bare, "num_key_value_heads": None, "head_dim": None, "num_experts": None}) == arch


@pytest.mark.parametrize("model_type", sorted(hf_config.TIED_BY_DEFAULT))
def test_gemma_families_tie_by_default(model_type):
    assert read_hf_config(tiny(model_type=model_type, tie_word_embeddings=None)).tie_word_embeddings


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("torch_dtype", "bfloat16", 2),
        ("torch_dtype", "float16", 2),
        ("torch_dtype", "float32", 2),  # vLLM's --dtype auto serves float32 checkpoints in 16 bits
        ("dtype", "bfloat16", 2),  # transformers >= 4.56 writes "dtype"
    ],
)
def test_dtype_bytes_from_the_config(key, value, expected):
    assert model_from_hf_config(tiny(**{key: value}), slug="t").dtype_bytes == expected


def test_dtype_bytes_override():
    assert model_from_hf_config(tiny(torch_dtype="float32"), slug="t", dtype_bytes=4).dtype_bytes == 4
    assert model_from_hf_config(tiny(torch_dtype="int4-weird"), slug="t", dtype_bytes=1).dtype_bytes == 1


def test_text_config_of_a_multimodal_wrapper():
    wrapper = {"model_type": "mistral3", "torch_dtype": "bfloat16", "text_config": dict(TINY, model_type="mistral")}
    assert model_from_hf_config(wrapper, slug="t") == model_from_hf_config(TINY, slug="t")


# --------------------------------------------------------------------------------------------
# File or dict
# --------------------------------------------------------------------------------------------


def test_file_folder_and_dict_give_the_same_spec(tmp_path):
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    config = json.loads((FIXTURES / "qwen3-8b.json").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    from_file = model_from_hf_config(folder / "config.json")
    from_folder = model_from_hf_config(str(folder))
    from_dict = model_from_hf_config(config, slug="qwen3-8b")
    assert from_file == from_folder == from_dict  # slug "qwen3-8b" from the folder name
    assert (from_file.slug, from_file.name) == ("qwen3-8b", "Qwen3 8B")  # the catalog row's name
    assert from_file.source == str(folder / "config.json")
    assert from_dict.source == "Hugging Face config.json"


def test_slug_from_a_hugging_face_cache_snapshot(tmp_path):
    snapshot = tmp_path / "models--Acme--Tiny-Model-1B" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(TINY))
    spec = model_from_hf_config(snapshot / "config.json")
    assert (spec.slug, spec.name) == ("tiny-model-1b", "Tiny-Model-1B")
    assert model_from_hf_config(dict(TINY, _name_or_path="acme/Tiny_2")).slug == "tiny_2"
    assert model_from_hf_config(TINY).slug == "hf-model"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def test_missing_keys_are_all_named():
    with pytest.raises(ParameterError) as info:
        read_hf_config({"hidden_size": 8, "num_attention_heads": 2})
    message = str(info.value)
    for key in ("num_hidden_layers", "vocab_size", "intermediate_size"):
        assert repr(key) in message
    assert "'hidden_size'" not in message.split("(")[0]  # present keys are not called missing


def test_moe_needs_experts_per_token():
    with pytest.raises(ParameterError, match="'num_experts_per_tok'"):
        read_hf_config(tiny(num_local_experts=8))


def test_text_config_missing_keys_hint_at_class_defaults():
    with pytest.raises(ParameterError, match=r"text_config.*'vocab_size'.*class defaults"):
        read_hf_config({"text_config": tiny(vocab_size=None)})


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"num_key_value_heads": 3, "num_attention_heads": 4}, r"num_attention_heads \(4\) is not a multiple"),
        ({"hidden_size": 9}, r"no head_dim, and hidden_size \(9\).*add the model's head_dim"),
        ({"num_hidden_layers": "32"}, r"num_hidden_layers must be an int >= 1, got '32'"),
        ({"num_hidden_layers": 0}, r"num_hidden_layers must be an int >= 1, got 0"),
        ({"tie_word_embeddings": "yes"}, r"tie_word_embeddings must be True or False"),
        ({"num_local_experts": 2, "num_experts_per_tok": 3}, r"num_experts_per_tok \(3\) exceeds the 2 experts"),
        ({"torch_dtype": "float8_e4m3fn"}, r"torch_dtype 'float8_e4m3fn' is not one of .*dtype_bytes="),
        ({"model_type": "phi"}, r"model_type 'phi' has a two-matrix \(ungated\) MLP"),
        ({"kv_lora_rank": 512}, r"kv_lora_rank=512 means multi-head latent attention"),
        ({"shared_expert_intermediate_size": 5632}, r"a shared expert"),
        ({"decoder_sparse_step": 2}, r"decoder_sparse_step=2 mixes dense and MoE layers"),
        ({"layer_types": ["full_attention", "linear_attention"]}, r"layer_types holds linear_attention"),
        ({"text_config": [1, 2]}, r"text_config must be an object"),
    ],
)
def test_bad_configs_say_what_and_how(changes, match):
    with pytest.raises(ParameterError, match=match):
        model_from_hf_config(tiny(**changes), slug="t")


def test_unused_features_with_empty_values_are_fine():
    arch = read_hf_config(tiny(mlp_only_layers=[], decoder_sparse_step=1, kv_lora_rank=None, n_shared_experts=0))
    assert arch.num_experts == 1


def test_file_errors(tmp_path):
    with pytest.raises(ParameterError, match="does not exist"):
        model_from_hf_config(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ParameterError, match="not valid JSON"):
        model_from_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ParameterError, match="holds a JSON list"):
        model_from_hf_config(bad)
    with pytest.raises(ParameterError, match="path_or_dict must be a dict"):
        model_from_hf_config(42)  # type: ignore[arg-type]


def test_bad_arguments():
    with pytest.raises(ParameterError, match="slug must be lower-case"):
        model_from_hf_config(TINY, slug="Not A Slug!")
    with pytest.raises(ParameterError, match=r"params_rtol must be a number in \(0, 1\)"):
        model_from_hf_config(TINY, slug="t", params_rtol=0)
    with pytest.raises(ParameterError, match="expected_params must be a count > 0"):
        model_from_hf_config(TINY, slug="t", expected_params=-1)
    with pytest.raises(ParameterError, match="dtype_bytes must be a whole number of bytes"):
        model_from_hf_config(TINY, slug="t", dtype_bytes=0)


def test_expected_params_cross_check():
    assert model_from_hf_config(TINY, slug="t", expected_params=1352 * 1.009).num_params == 1352
    with pytest.raises(ParameterError) as info:
        model_from_hf_config(TINY, slug="t", expected_params=1500)
    message = str(info.value)
    assert "1,352 parameters" in message and "expected_params is 1,500" in message
    assert "-9.87%" in message and "±1.0%" in message and "head_dim" in message
    assert model_from_hf_config(TINY, slug="t", expected_params=1500, params_rtol=0.2).num_params == 1352
    with pytest.raises(ParameterError, match="active parameters"):
        model_from_hf_config(tiny(num_local_experts=4, num_experts_per_tok=2), slug="t", expected_active_params=10)


def test_a_catalog_slug_is_checked_against_its_row():
    with pytest.raises(ParameterError, match=r"the catalog row 'qwen3-8b'"):
        model_from_hf_config(TINY, slug="qwen3-8b")
    # an explicit expected count replaces the catalog check (a fine-tune with another vocabulary)
    assert model_from_hf_config(TINY, slug="qwen3-8b", expected_params=1352).name == "Qwen3 8B"


# --------------------------------------------------------------------------------------------
# The catalog rows, from their configs
# --------------------------------------------------------------------------------------------


def test_every_fixture_is_a_catalog_row_and_every_new_row_has_a_fixture():
    assert set(FIXTURE_SLUGS) <= set(list_models())
    # every row except the rounded originals was added through model_from_hf_config
    assert set(list_models()) - ROUNDED_ROWS <= set(FIXTURE_SLUGS)


@pytest.mark.parametrize("slug", sorted(set(FIXTURE_SLUGS) - ROUNDED_ROWS))
def test_catalog_row_equals_its_config(slug):
    row = model(slug)
    assert model_from_hf_config(FIXTURES / f"{slug}.json", slug=slug) == row
    assert row.source.startswith("huggingface.co/") and "/blob/main/config.json" in row.source


@pytest.mark.parametrize("slug", sorted(ROUNDED_ROWS))
def test_rounded_rows_agree_with_their_config(slug):
    row = model(slug)
    derived = model_from_hf_config(FIXTURES / f"{slug}.json", slug=slug)
    rounded = dataclasses.replace(derived, num_params=row.num_params, num_active_params=row.num_active_params)
    assert rounded == row  # every architecture field
    assert derived.num_params == pytest.approx(row.num_params, rel=0.005)  # 3 significant figures
    # and the exact count the row's notes quote (Mixtral's notes also give the active count)
    assert f"{int(derived.num_params):,}" in catalog.model_table().loc[slug, "notes"]
    if row.is_moe:
        assert f"{int(derived.num_active_params):,}" in catalog.model_table().loc[slug, "notes"]


def test_published_counts_within_one_percent(capsys):
    lines = [f"{'model':30s} {'derived':>17s} {'published':>10s} {'off':>7s}"]
    for slug in FIXTURE_SLUGS:
        rtol = PUBLISHED_RTOL.get(slug, 0.01)
        spec = model_from_hf_config(
            FIXTURES / f"{slug}.json", slug=slug, expected_params=PUBLISHED[slug], params_rtol=rtol
        )
        off = spec.num_params / PUBLISHED[slug] - 1
        lines.append(f"{slug:30s} {spec.num_params:>17,.0f} {PUBLISHED[slug] / 1e9:>9.3g}B {off:>+7.2%}")
        assert abs(off) <= rtol, slug
        if slug in PUBLISHED_ACTIVE:  # quoted to two figures: "3.3B", "22B"
            assert spec.num_active_params == pytest.approx(PUBLISHED_ACTIVE[slug], rel=0.02), slug
        if slug in PUBLISHED_ACTIVE_WITHOUT_EMBEDDING:
            active = spec.num_active_params - spec.vocab_size * spec.hidden_size
            assert active == pytest.approx(PUBLISHED_ACTIVE_WITHOUT_EMBEDDING[slug], rel=0.025), slug
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert set(PUBLISHED) == set(FIXTURE_SLUGS)


#: vLLM start-up logs' model names → catalog rows of the same checkpoint architecture.
LOG_MODELS = {
    "codellama/CodeLlama-7b-hf": "codellama-7b",
    "google/gemma-7b": "gemma-7b",
    "google/gemma-2-2b-it": "gemma-2-2b",
    "google/gemma-2-9b-it": "gemma-2-9b",
    "google/gemma-2-27b-it": "gemma-2-27b",
    "ibm-granite/granite-3.1-2b-instruct": "granite-3.1-2b",
    "ibm-granite/granite-3.1-8b-instruct": "granite-3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "microsoft/phi-4": "phi-4",
    "Qwen/Qwen3-0.6B": "qwen3-0.6b",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-14B": "qwen3-14b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
}


def test_derived_weights_match_what_vllm_loaded(capsys):
    """The derived count × 2 B against "Model loading took X GiB" in real vLLM start-up logs
    (one GPU, no quantization, no pipeline split). vLLM's figure is the derived weights plus
    small buffers (the rotary cos/sin cache: 32 MiB for Llama 3.1's 131,072 positions) and is
    printed to 0.01 GiB: it may exceed the derived bytes by up to 0.1 GiB, never fall short.
    A dropped output projection or a wrong width would be off by 0.19 GiB or more."""
    path = SHARED_DATA / "real" / "vllm_kv_logs.csv"
    if not path.exists():
        pytest.skip(f"{path} is not here (the shared real data lives next to the project)")
    with path.open(newline="", encoding="utf-8") as handle:
        rows = [
            r
            for r in csv.DictReader(handle)
            if r["model"] in LOG_MODELS
            and r["tp"] == "1"
            and r["pp"] in ("", "1")
            and not r["quantization"]
            and r["weights_gib"]
        ]
    assert len(rows) >= 14
    lines = []
    for r in rows:
        spec = model_from_hf_config(FIXTURES / f"{LOG_MODELS[r['model']]}.json")
        derived_gib = spec.weight_bytes / GIB
        logged_gib = float(r["weights_gib"])
        lines.append(
            f"row {r['row_id']:>3s} {r['model']:40s} derived {derived_gib:7.3f} GiB, logged {logged_gib:7.3f} "
            f"({logged_gib - derived_gib:+.3f})"
        )
        assert -0.005 <= logged_gib - derived_gib <= 0.1, lines[-1]
    with capsys.disabled():
        print("\n" + "\n".join(lines))


# --------------------------------------------------------------------------------------------
# Public name and doctests
# --------------------------------------------------------------------------------------------


def test_public_name_and_doctests():
    assert budgetlab.model_from_hf_config is model_from_hf_config
    assert "model_from_hf_config" in budgetlab.__all__
    result = doctest.testmod(hf_config, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0
    assert re.search(r"Hugging Face config docs", hf_config.__doc__ or "")


def test_tied_embeddings_reach_the_spec():
    from pathlib import Path

    from budgetlab import model_from_hf_config
    from budgetlab.catalog import model

    fixtures = Path(__file__).parent / "fixtures" / "hf_configs"
    for slug, tied in (("gemma-2-2b", True), ("granite-3.1-2b", True), ("qwen3-0.6b", True), ("llama-3.1-8b", False)):
        spec = model_from_hf_config(fixtures / f"{slug}.json")
        assert spec.tie_word_embeddings is tied and model(slug).tie_word_embeddings is tied


# --- issue 21 item 8: every bad config names the file and the key -------------------------------


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"model_type": ["llama"]}, r"the config dict: model_type must be a string .*got \['llama'\]"),
        ({"hidden_size": 10**30}, r"the config dict: hidden_size must be at most 16,777,216 \(no layer count"),
        ({"vocab_size": 2**63}, r"the config dict: vocab_size must be at most 16,777,216"),
        ({"num_local_experts": 10**30}, r"the config dict: num_local_experts must be at most 16,777,216"),
        ({"attention_bias": []}, r"the config dict: attention_bias must be True or False"),
        ({"layer_types": "full_attention"}, r"the config dict: layer_types must be a list"),
        ({"decoder_sparse_step": "2"}, r"the config dict: decoder_sparse_step must be an int"),
    ],
)
def test_wrongly_typed_or_huge_keys_are_refused_naming_the_key(change, match):
    with pytest.raises(ParameterError, match=match):
        model_from_hf_config({**TINY, **change}, slug="tiny")


def test_a_zero_expert_count_is_a_dense_model_as_some_configs_write_it():
    dense = model_from_hf_config(TINY, slug="tiny")
    assert model_from_hf_config({**TINY, "num_local_experts": 0}, slug="tiny") == dense
    assert model_from_hf_config({**TINY, "num_experts": None}, slug="tiny") == dense


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (('{"a": ' * 10_000 + "1" + "}" * 10_000).encode(), "JSON nested too deeply"),
        (b'{"model_type": "\xff\xfe"}', r"is not UTF-8 text \(invalid start byte at byte 16\)"),
    ],
)
def test_unreadable_files_are_refused_naming_the_file(tmp_path, content, match):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ParameterError, match=f"{re.escape(str(path))}:? .*{match}"):
        model_from_hf_config(path)
    with pytest.raises(ParameterError, match=match):
        read_hf_config(tmp_path)


# --- issue 23: sliding-window, chunked, MLA and linear-attention layouts; families; formats --------

from budgetlab.hf_config import hf_quantization  # noqa: E402


def test_gemma_layouts_from_the_pattern_and_from_layer_types():
    # Gemma 3's old form: every 3rd layer full (layers 2 and 5), the rest sliding.
    g3 = model_from_hf_config(
        tiny(model_type="gemma3_text", num_hidden_layers=6, sliding_window=16, sliding_window_pattern=3), slug="t"
    )
    assert g3.attention.layer_kinds == ("sliding_window", "sliding_window", "full") * 2
    assert g3.attention.to_text() == "sliding_window*2 full; sliding_window=16"
    # Gemma 3's default pattern is 6; Gemma 2 alternates from a sliding layer 0
    assert (
        read_hf_config(tiny(model_type="gemma3_text", num_hidden_layers=6, sliding_window=8)).attention.count("full")
        == 1
    )
    g2 = read_hf_config(tiny(model_type="gemma2", num_hidden_layers=4, sliding_window=8)).attention
    assert g2.layer_kinds == ("sliding_window", "full") * 2
    # layer_types wins over the pattern
    explicit = ["full_attention", "sliding_attention", "sliding_attention"]
    arch = read_hf_config(tiny(model_type="gemma3_text", num_hidden_layers=3, sliding_window=8, layer_types=explicit))
    assert arch.attention.layer_kinds == ("full", "sliding_window", "sliding_window")
    # the window does not change the count
    assert (
        arch.param_count().total
        == read_hf_config(tiny(model_type="gemma3_text", num_hidden_layers=3)).param_count().total
    )


def test_a_window_without_layer_types_applies_to_every_layer_unless_switched_off():
    assert (
        read_hf_config(tiny(model_type="mistral", sliding_window=4096)).attention.layer_kinds == ("sliding_window",) * 2
    )
    assert read_hf_config(tiny(model_type="qwen2", sliding_window=4096, use_sliding_window=False)).attention is None
    assert read_hf_config(tiny(model_type="mistral", sliding_window=None)).attention is None


def test_gemma_2_rows_carry_the_sliding_layout_vllm_runs():
    for slug in ("gemma-2-2b", "gemma-2-9b", "gemma-2-27b"):
        layout = model(slug).attention
        assert layout.sliding_window == 4096 and layout.layer_kinds[:2] == ("sliding_window", "full")


#: A tiny Llama 4: 4 layers, MoE every 2nd layer (4 experts of width 2, top-1, one shared expert),
#: dense layers of width 6, 8,192-token chunks (here 16).
TINY_LLAMA4 = tiny(
    model_type="llama4_text",
    num_hidden_layers=4,
    head_dim=4,
    num_local_experts=4,
    num_experts_per_tok=1,
    intermediate_size=2,
    intermediate_size_mlp=6,
    interleave_moe_layer_step=2,
    attention_chunk_size=16,
)


def test_llama4_chunked_layers_and_interleaved_experts_counted_by_hand():
    arch = read_hf_config(TINY_LLAMA4)
    # no_rope_layer_interval 4: layer 3 has no RoPE and is global; layers 0-2 are chunked
    assert arch.attention.to_text() == "chunked_local*3 full; attention_chunk_size=16"
    # attention 192 + norms 16 = 208; dense: + 3×8×6 = 144 → 352
    # MoE: + shared 3×8×2 = 48 + router 8×4 = 32, + 4 experts × 48 = 192 → 480 (active: 1 expert → 336)
    counts = arch.param_count()
    assert counts.per_layer == ((352, 352), (480, 336), (352, 352), (480, 336))
    assert (counts.total, counts.active) == (2 * 352 + 2 * 480 + 168, 2 * 352 + 2 * 336 + 168)
    spec = model_from_hf_config({"model_type": "llama4", "text_config": TINY_LLAMA4}, slug="t")
    assert (spec.num_params, spec.num_experts, spec.intermediate_size) == (1832, 4, 2)
    assert read_hf_config({**TINY_LLAMA4, "attention_chunk_size": None}).attention is None


#: A tiny DeepSeek-V2-Lite: MLA (latent 4 + rope 2, no query compression), layer 0 dense, then
#: 4 routed experts (top-2) and one shared expert of width 2.
TINY_DEEPSEEK = tiny(
    model_type="deepseek_v2",
    num_hidden_layers=3,
    num_key_value_heads=2,
    kv_lora_rank=4,
    qk_rope_head_dim=2,
    qk_nope_head_dim=2,
    v_head_dim=2,
    q_lora_rank=None,
    intermediate_size=6,
    moe_intermediate_size=2,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    first_k_dense_replace=1,
)


def test_deepseek_mla_and_shared_experts_counted_by_hand():
    arch = read_hf_config(TINY_DEEPSEEK)
    layout = arch.attention
    assert layout.layer_kinds == ("mla",) * 3 and layout.mla_latent_dim == 6 and layout.q_lora_rank is None
    # q 8×2×4 = 64, kv_a 8×6 = 48, kv norm 4, kv_b 4×2×4 = 32, o 2×2×8 = 32 → 180; + norms 16 = 196
    # layer 0 dense 3×8×6 = 144 → 340; MoE: shared 48 + router 32 + 4 × 48 → 468 (top-2: 372)
    counts = arch.param_count()
    assert counts.per_layer == ((340, 340), (468, 372), (468, 372))
    assert (counts.total, counts.active) == (1444, 1252)
    assert (arch.head_dim, arch.num_experts, arch.intermediate_size) == (4, 4, 2)  # nope + rope; per expert
    # query compression (q_a 8×4, its norm 4, q_b 4×2×4) and V3's correction bias (one per expert)
    v3 = read_hf_config({**TINY_DEEPSEEK, "model_type": "deepseek_v3", "q_lora_rank": 4, "topk_method": "noaux_tc"})
    assert v3.param_count().total == 1444 + 3 * 4 + 2 * 4 and v3.attention.q_lora_rank == 4


#: A tiny Qwen3-Next: one full layer in four, Gated DeltaNet elsewhere (1 key head of 2, 2 value
#: heads of 2, kernel 4), 4 experts of width 2 (top-1) and a shared expert of width 2.
TINY_QWEN_NEXT = tiny(
    model_type="qwen3_next",
    num_hidden_layers=4,
    head_dim=4,
    linear_num_key_heads=1,
    linear_key_head_dim=2,
    linear_num_value_heads=2,
    linear_value_head_dim=2,
    linear_conv_kernel_dim=4,
    num_experts=4,
    num_experts_per_tok=1,
    moe_intermediate_size=2,
    shared_expert_intermediate_size=2,
    intermediate_size=6,
)


def test_qwen3_next_linear_layers_state_and_count_by_hand():
    arch = read_hf_config(TINY_QWEN_NEXT)
    layout = arch.attention
    assert layout.to_text() == "mamba*3 full; mamba_state_bytes=64"
    # state: conv (2×1×2 + 2×2) × (4 - 1) = 24 elements, recurrent 2×2×2 = 8; × 2 B = 64 B
    # linear layer: in_proj 8×12 = 96, b/a 8×4 = 32, conv 8×4 = 32, dt/A 4, norm 2, out 4×8 = 32 → 198
    # full layer: gated q 8×16 = 128, k/v 2×32, o 64, q/k norms 8 → 264
    # MLP: shared 48 + its gate 8 + router 32 = 88, + 4 experts × 48 (active: 1)
    counts = arch.param_count()
    assert counts.per_layer == ((494, 350),) * 3 + ((560, 416),)
    assert (counts.total, counts.active) == (2210, 1634)
    # Qwen3.5 keeps the recurrent state in float32: 24 × 2 + 8 × 4 = 80 B
    fp32 = read_hf_config({**TINY_QWEN_NEXT, "mamba_ssm_dtype": "float32"}).attention
    assert fp32.mamba_state_bytes == 80


def test_qwen3_next_80b_state_bytes_as_vllm_shapes_them():
    # MambaStateShapeCalculator.gated_delta_net_state_shape at TP 1, BF16: conv (8,192, 3), state (32, 128, 128)
    from budgetlab.hf_families import gated_delta_net_state_bytes

    keys = {"linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32}
    keys |= {"linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
    assert gated_delta_net_state_bytes(keys, "t") == 8192 * 3 * 2 + 32 * 128 * 128 * 2 == 1_097_728


def test_gpt_oss_20b_from_its_config():
    spec = model_from_hf_config(FIXTURES / "gpt-oss-20b.json", slug="gpt-oss-20b")
    # per layer: attention 2880×4096 + 4096 + 2×(2880×512 + 512) + 4096×2880 + 2880 + 64 sinks,
    # 32 experts × (3×2880×2880 + 5760 + 2880), router 2880×32 + 32, norms 2×2880
    attention = 2880 * 4096 + 4096 + 2 * (2880 * 512 + 512) + 4096 * 2880 + 2880 + 64
    expert = 3 * 2880 * 2880 + 5760 + 2880
    layer = attention + 32 * expert + 2880 * 32 + 32 + 2 * 2880
    assert spec.num_params == 24 * layer + 2 * 201088 * 2880 + 2880 == 20_914_757_184
    assert spec.attention.to_text() == "sliding_window full; sliding_window=128"
    # the card's 3.6B active leaves out the input embedding
    assert spec.num_active_params - 201088 * 2880 == pytest.approx(3.6e9, rel=0.01)
    # the fixture's copy drops quantization_config; the checkpoint's names mxfp4 for the experts
    shipped = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
    config = {**json.loads((FIXTURES / "gpt-oss-20b.json").read_text()), "quantization_config": shipped}
    assert hf_quantization(config) == "mxfp4"
    assert spec.num_active_params - 201088 * 2880 == 3_608_307_264


@pytest.mark.parametrize(
    ("qc", "expected"),
    [
        (None, None),
        ({"quant_method": "mxfp4"}, "mxfp4"),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
        ({"quant_method": "awq", "bits": 4}, "int4"),
        ({"quant_method": "gptq", "bits": 8}, "int8"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "fp8",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
            },
            "nvfp4",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}},
            "int4",
        ),
    ],
)
def test_quantization_config_to_an_engine_value(qc, expected):
    config = dict(TINY) if qc is None else {**TINY, "quantization_config": qc}
    assert hf_quantization(config) == expected
    if expected is not None:
        assert budgetlab.EngineConfig(quantization=expected).quantization == expected


@pytest.mark.parametrize(
    ("qc", "match"),
    [
        ({"quant_method": "gptq", "bits": 3}, r"'gptq' with bits=3.*4- and 8-bit"),
        ({"quant_method": "hqq"}, r"quant_method 'hqq' is not modelled.*EngineConfig\(quantization=...\)"),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, r"modelopt quant_algo 'W4A8_AWQ'"),
    ],
)
def test_unmodelled_quantization_is_refused_by_name(qc, match):
    with pytest.raises(ParameterError, match=match):
        hf_quantization({**TINY, "quantization_config": qc})


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"model_type": "jamba"}, r"model_type 'jamba' has Mamba layers"),
        ({"model_type": "granitemoehybrid"}, r"'granitemoehybrid' has Mamba2 layers"),
        ({"model_type": "qwen3_next", "layer_types": ["mamba", "full_attention"]}, r"layer_types holds mamba"),
        ({"model_type": "qwen3_next", "layer_types": ["full_attention"]}, r"lists 1 layers but num_hidden_layers is 2"),
        ({"model_type": "qwen3_next", "head_dim": 4}, r"lacks 'linear_num_key_heads'"),
        ({"model_type": "deepseek_v2", "kv_lora_rank": 4}, r"lacks 'qk_nope_head_dim', 'qk_rope_head_dim'"),
    ],
)
def test_still_out_of_reach_is_refused_naming_it(changes, match):
    with pytest.raises(ParameterError, match=match):
        model_from_hf_config(tiny(**changes), slug="t")


def test_gemma_3_vision_tower_counted_apart_by_hand():
    from budgetlab.hf_families import vision_tower_params

    config = json.loads((FIXTURES / "gemma-3-27b.json").read_text())
    # SigLIP, H = 1152, I = 4304, 27 layers, 14-pixel patches of 896-pixel images:
    # conv 3·14²·1152 + 1152, positions 64²·1152, per layer 4·(1152² + 1152) + 2·1152·4304 + 4304 + 1152
    # + 4·1152, final norm 2·1152 → 416,866,032 (the Gemma 3 report's 417M); projector 1152·5376 + 1152
    layer = 4 * (1152**2 + 1152) + 2 * 1152 * 4304 + 4304 + 1152 + 4 * 1152
    tower = 3 * 14 * 14 * 1152 + 1152 + 64 * 64 * 1152 + 27 * layer + 2 * 1152
    assert tower == 416_866_032
    assert vision_tower_params(config) == tower + 1152 * 5376 + 1152
    # not part of the text row's count, and towers not described give None
    assert model_from_hf_config(config, slug="gemma-3-27b").num_params == model("gemma-3-27b").num_params
    assert vision_tower_params(json.loads((FIXTURES / "qwen3.5-35b-a3b.json").read_text())) is None
    assert vision_tower_params(TINY) is None
