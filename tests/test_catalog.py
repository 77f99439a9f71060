"""The catalog: cited datasheet and model-card numbers, strict CSV validation, wheel packaging."""

from __future__ import annotations

import csv
import dataclasses
import os
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from budgetlab import catalog
from budgetlab.catalog import (
    data_path,
    hardware,
    hardware_table,
    list_hardware,
    list_models,
    model,
    model_table,
    resolve_hardware,
    resolve_model,
)
from budgetlab.errors import CatalogError, ParameterError, UnknownNameError
from budgetlab.specs import HardwareSpec, ModelSpec

from conftest import run_ok

REPO_ROOT = Path(__file__).resolve().parents[1]
CATALOG_DIR = REPO_ROOT / "data" / "catalog"
GIB = 2**30

REQUIRED_HARDWARE = [
    "h100-sxm",
    "h100-pcie",
    "h200-sxm",
    "a100-80gb-sxm",
    "a100-40gb",
    "l40s",
    "b200",
    "mi300x",
]
REQUIRED_MODELS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-2-7b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
]
# Rows added through budgetlab.model_from_hf_config (issue 11); tests/test_hf_config.py checks
# each one against its config.json in tests/fixtures/hf_configs/.
HF_CONFIG_MODELS = [
    "codellama-7b",
    "codellama-34b",
    "deepseek-r1-distill-qwen-14b",
    "gemma-7b",
    "gemma-2-2b",
    "gemma-2-9b",
    "gemma-2-27b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "gemma-3-4b",
    "gemma-3-12b",
    "gemma-3-27b",
    "llama-4-scout",
    "deepseek-v2-lite",
    "deepseek-v3",
    "qwen3-next-80b-a3b",
    "qwen3.5-397b-a17b",
    "qwen3.5-35b-a3b",
    "granite-3.1-2b",
    "granite-3.1-8b",
    "llama-2-70b",
    "llama-3.3-70b",
    "mistral-small-24b",
    "mixtral-8x22b",
    "phi-4",
    "qwen2.5-32b",
    "qwen3-0.6b",
    "qwen3-8b",
    "qwen3-14b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
]


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts and ends with an empty catalog cache (tmp catalogs stay out of it)."""
    catalog.clear_cache()
    yield
    catalog.clear_cache()


# --------------------------------------------------------------------------------------------
# Hand-worked reference values
# --------------------------------------------------------------------------------------------


def test_h100_sxm_matches_the_design_reference_numbers():
    h100 = hardware("h100-sxm")
    assert isinstance(h100, HardwareSpec)
    assert h100.dense_bf16_flops_per_s == 989.4e12  # whitepaper: 1,978.9 sparse / 2
    assert h100.mem_bandwidth_bytes_per_s == 3.35e12
    assert h100.memory_bytes == 80 * GIB  # "80GB" read as GiB (see data/catalog/README.md)
    assert h100.interconnect_bandwidth_bytes_per_s == 450e9  # NVLink 4: 900 GB/s bidirectional
    assert 1e-6 <= h100.interconnect_latency_s <= 50e-6


def test_llama_31_8b_matches_its_config():
    llama = model("llama-3.1-8b")
    assert isinstance(llama, ModelSpec)
    assert llama.num_params == 8.03e9
    assert llama.num_active_params == llama.num_params
    assert (llama.num_layers, llama.num_kv_heads, llama.head_dim) == (32, 8, 128)
    assert (llama.hidden_size, llama.num_attention_heads) == (4096, 32)
    assert (llama.intermediate_size, llama.vocab_size) == (14336, 128256)
    assert not llama.is_moe
    assert llama.weight_bytes == pytest.approx(16.06e9)  # 8.03e9 × 2 B


def test_design_seed_numbers_follow_from_the_rows():
    # DESIGN.md: weight read 4.79 ms, 16.2 µs per token, knee ≈ 295, 128 KiB of KV per token.
    h100, llama = hardware("h100-sxm"), model("llama-3.1-8b")
    weight_read_s = llama.weight_bytes / h100.mem_bandwidth_bytes_per_s
    per_token_s = 2 * llama.num_params / h100.dense_bf16_flops_per_s
    assert weight_read_s == pytest.approx(4.79e-3, rel=1e-3)
    assert per_token_s == pytest.approx(16.2e-6, rel=2e-3)
    assert weight_read_s / per_token_s == pytest.approx(295, abs=1)
    kv_bytes_per_token = 2 * llama.num_layers * llama.num_kv_heads * llama.head_dim * 2
    assert kv_bytes_per_token == 128 * 1024


def test_mixtral_is_a_top2_of_8_moe():
    mixtral = model("mixtral-8x7b")
    assert (mixtral.num_params, mixtral.num_active_params) == (46.7e9, 12.9e9)
    assert (mixtral.num_experts, mixtral.num_experts_per_token) == (8, 2)
    assert mixtral.is_moe


#: The checkpoints issue 22's held-out vLLM serving runs name, and the row each must find.
SERVED_CHECKPOINTS = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Llama-2-70b-chat-hf": "llama-2-70b",
    "codellama/CodeLlama-34b-hf": "codellama-34b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "codellama/CodeLlama-34b-Python-hf": "codellama-34b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x22B-v0.1": "mixtral-8x22b",
    "mistralai/Mixtral-8x22B-Instruct-v0.1": "mixtral-8x22b",
}


@pytest.mark.parametrize("repo_id", sorted(SERVED_CHECKPOINTS))
def test_served_checkpoints_resolve_in_any_case(repo_id):
    assert model(repo_id).slug == SERVED_CHECKPOINTS[repo_id]
    assert model(repo_id.lower()).slug == model(repo_id.upper()).slug == SERVED_CHECKPOINTS[repo_id]
    assert catalog.hf_ids()[repo_id] == SERVED_CHECKPOINTS[repo_id]  # listed as written


def test_mixtral_8x22b_counts_from_its_config():
    # per layer: attention 2·6144² + 2·6144·1024 = 88,080,384; each expert 3·6144·16384 =
    # 301,989,888; router 6144·8; two norms 2·6144. Untied embeddings 2·32768·6144, final norm.
    attention, expert, router, norms = 88_080_384, 301_989_888, 6144 * 8, 2 * 6144
    outside = 2 * 32768 * 6144 + 6144
    row = model("mixtral-8x22b")
    assert row.num_params == 56 * (attention + 8 * expert + router + norms) + outside == 140_630_071_296
    assert row.num_active_params == 56 * (attention + 2 * expert + router + norms) + outside == 39_161_468_928
    assert (row.num_experts, row.num_experts_per_token, row.vocab_size) == (8, 2, 32768)


def test_other_reference_rows():
    assert model("qwen2.5-7b").num_params == 7.61e9
    assert model("qwen2.5-7b").num_kv_heads == 4
    assert model("llama-2-7b").num_kv_heads == model("llama-2-7b").num_attention_heads == 32
    assert hardware("h200-sxm").memory_bytes == 141 * GIB
    h100, h200 = hardware("h100-sxm"), hardware("h200-sxm")
    assert h200.dense_bf16_flops_per_s == h100.dense_bf16_flops_per_s
    assert hardware("a100-80gb-sxm").dense_bf16_flops_per_s == 312e12
    assert hardware("mi300x").memory_bytes == 192 * GIB


@pytest.mark.parametrize("slug", REQUIRED_MODELS)
def test_param_count_follows_from_the_architecture(slug):
    """The stated totals agree with a count from the config fields (catches a mistyped width)."""
    m = model(slug)
    h, kv_width = m.hidden_size, m.num_kv_heads * m.head_dim
    attention = 2 * h * m.num_attention_heads * m.head_dim + 2 * h * kv_width
    mlp_per_expert = 3 * h * m.intermediate_size
    router = h * m.num_experts if m.is_moe else 0
    embeddings = 2 * m.vocab_size * h  # none of these models ties input and output embeddings
    total = m.num_layers * (attention + m.num_experts * mlp_per_expert + router) + embeddings
    active = m.num_layers * (attention + m.num_experts_per_token * mlp_per_expert + router)
    assert m.num_params == pytest.approx(total, rel=0.015)
    assert m.num_active_params == pytest.approx(active + embeddings, rel=0.015)


def test_every_number_is_in_si_units():
    """Guard against a row typed in TB/s or GB: every device sits in a plausible SI range."""
    for slug in list_hardware():
        h = hardware(slug)
        assert 1e14 < h.dense_bf16_flops_per_s < 1e16, slug
        assert 1e11 < h.mem_bandwidth_bytes_per_s < 1e14, slug
        assert 16 * GIB <= h.memory_bytes <= 512 * GIB, slug
        assert h.memory_bytes % GIB == 0, f"{slug}: memory is not a whole number of GiB"
        assert 1e10 <= h.interconnect_bandwidth_bytes_per_s <= 2e12, slug
        assert 1e-6 <= h.interconnect_latency_s <= 1e-4, slug
    for slug in list_models():
        assert model(slug).dtype_bytes == 2, slug


# --------------------------------------------------------------------------------------------
# Lookup behaviour
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", REQUIRED_HARDWARE)
def test_required_hardware_present(slug):
    assert slug in list_hardware()
    assert hardware(slug).slug == slug


@pytest.mark.parametrize("slug", REQUIRED_MODELS)
def test_required_models_present(slug):
    assert slug in list_models()
    assert model(slug).slug == slug


def test_lists_are_sorted_slugs():
    assert list_hardware() == sorted(REQUIRED_HARDWARE)
    assert list_models() == sorted(REQUIRED_MODELS + HF_CONFIG_MODELS)


@pytest.mark.parametrize("spelling", ["H100-SXM", "  h100-sxm\n", "H100-sxm "])
def test_hardware_lookup_ignores_case_and_whitespace(spelling):
    assert hardware(spelling) == hardware("h100-sxm")


def test_model_lookup_ignores_case_and_whitespace():
    assert model(" Llama-3.1-8B ") == model("llama-3.1-8b")


def test_unknown_hardware_lists_close_matches():
    with pytest.raises(UnknownNameError) as info:
        hardware("h100")
    message = str(info.value)
    assert "'h100'" in message
    assert "h100-sxm" in message and "h100-pcie" in message
    assert "budgetlab.list_hardware()" in message
    assert not message.startswith('"')  # not quoted like a KeyError
    assert isinstance(info.value, LookupError)


def test_unknown_model_lists_close_matches():
    with pytest.raises(UnknownNameError, match=r"llama-3\.1-8b") as info:
        model("llama-3-8b")
    assert "budgetlab.list_models()" in str(info.value)


def test_unknown_name_without_close_match_still_says_how_to_list():
    with pytest.raises(UnknownNameError) as info:
        hardware("tpu-v5e")
    assert "did you mean" not in str(info.value).lower()
    assert "budgetlab.list_hardware()" in str(info.value)


def test_non_string_slug_is_a_type_error():
    with pytest.raises(TypeError, match="str"):
        hardware(None)  # type: ignore[arg-type]


def test_resolvers_pass_specs_through_and_look_up_slugs():
    h100, llama = hardware("h100-sxm"), model("llama-3.1-8b")
    custom = dataclasses.replace(h100, slug="my-gpu", name="My GPU")
    assert resolve_hardware(custom) is custom  # a spec need not be in the catalog
    assert resolve_hardware(" H100-SXM ") is h100
    assert resolve_model("llama-3.1-8b") is llama
    assert resolve_model(llama) is llama


def test_resolvers_reject_other_types_naming_the_argument():
    with pytest.raises(ParameterError) as info:
        resolve_hardware(3.0, name="baseline")  # type: ignore[arg-type]
    assert str(info.value) == ("baseline must be a hardware slug such as 'h100-sxm' or a HardwareSpec, got 3.0")
    with pytest.raises(ParameterError) as info:
        resolve_model(None)  # type: ignore[arg-type]
    assert str(info.value) == "model must be a model slug such as 'llama-3.1-8b' or a ModelSpec, got None"
    with pytest.raises(ParameterError, match="a ModelSpec"):
        resolve_model(hardware("h100-sxm"))  # type: ignore[arg-type]


def test_resolvers_keep_the_close_match_errors():
    with pytest.raises(UnknownNameError, match="h100-sxm"):
        resolve_hardware("h100-sx")
    with pytest.raises(UnknownNameError, match=r"budgetlab\.list_models\(\)"):
        resolve_model("llama-9")


def test_catalog_is_loaded_once_and_cached():
    assert hardware("h100-sxm") is hardware("H100-SXM")
    first = model("mistral-7b")
    catalog.clear_cache()
    second = model("mistral-7b")
    assert first == second and first is not second


# --------------------------------------------------------------------------------------------
# Tables and sources
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "spec_type", "expected"),
    [(hardware_table, HardwareSpec, REQUIRED_HARDWARE), (model_table, ModelSpec, REQUIRED_MODELS + HF_CONFIG_MODELS)],
)
def test_tables_hold_every_field_indexed_by_slug(table, spec_type, expected):
    frame = table()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.index) == sorted(expected)
    assert frame.index.name == "slug"
    fields = [f.name for f in dataclasses.fields(spec_type) if f.name != "slug"]
    assert list(frame.columns) == [*fields, "notes"]
    frame.loc[frame.index[0], "name"] = "changed"
    assert table().loc[frame.index[0], "name"] != "changed"  # a copy, not the catalog


def test_table_values_are_numeric():
    frame = hardware_table()
    assert frame.loc["h100-sxm", "dense_bf16_flops_per_s"] == 989.4e12
    assert pd.api.types.is_float_dtype(frame["mem_bandwidth_bytes_per_s"])
    assert pd.api.types.is_integer_dtype(model_table()["num_layers"])


@pytest.mark.parametrize("table", [hardware_table, model_table])
def test_every_row_cites_a_source(table):
    sources = table()["source"]
    assert sources.map(lambda s: isinstance(s, str) and len(s.strip()) > 10).all()


# --------------------------------------------------------------------------------------------
# Malformed catalogs, read from a temporary directory
# --------------------------------------------------------------------------------------------


def _read_rows(name: str) -> tuple[list[str], list[dict[str, str]]]:
    with (CATALOG_DIR / name).open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def _write_rows(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture
def tmp_catalog(tmp_path, monkeypatch):
    """A copy of the real catalog in tmp_path that the loader reads instead."""
    for name in ("hardware.csv", "models.csv"):
        (tmp_path / name).write_bytes((CATALOG_DIR / name).read_bytes())
    monkeypatch.setattr(catalog, "_catalog_dir", lambda: tmp_path)
    return tmp_path


def _mutate(directory: Path, name: str, change) -> None:
    header, rows = _read_rows(name)
    header, rows = change(header, rows)
    _write_rows(directory / name, header, rows)


def _set(slug: str, column: str, value: str):
    def change(header, rows):
        for row in rows:
            if row["slug"] == slug:
                row[column] = value
        return header, rows

    return change


def test_tmp_catalog_copy_loads(tmp_catalog):
    _mutate(tmp_catalog, "hardware.csv", _set("l40s", "name", "Renamed L40S"))
    assert hardware("l40s").name == "Renamed L40S"


# Each case: file, mutation, then fragments the message must contain (file, line, column, why).
# Line numbers count the header as line 1; h100-sxm is on line 2, llama-3.1-8b on line 2.
_BAD_HARDWARE = {
    "text in a number": (
        _set("h100-sxm", "mem_bandwidth_bytes_per_s", "3.35 TB/s"),
        ["line 2", "'mem_bandwidth_bytes_per_s'", "3.35 TB/s"],
    ),
    "nan": (
        _set("h100-sxm", "dense_bf16_flops_per_s", "nan"),
        ["line 2", "'dense_bf16_flops_per_s'", "finite number > 0"],
    ),
    "inf": (_set("b200", "memory_bytes", "inf"), ["'b200'", "'memory_bytes'", "finite"]),
    "zero": (
        _set("h100-sxm", "interconnect_latency_s", "0"),
        ["line 2", "'interconnect_latency_s'", "> 0"],
    ),
    "negative": (_set("h100-sxm", "memory_bytes", "-80e9"), ["'memory_bytes'", "> 0"]),
    "empty cell": (_set("h100-sxm", "interconnect", ""), ["line 2", "'interconnect'", "empty"]),
    "empty source": (_set("h100-pcie", "source", "  "), ["line 3", "'source'", "empty"]),
    "bad slug": (_set("h100-sxm", "slug", "H100 SXM"), ["line 2", "'slug'", "not a slug"]),
    "duplicate slug": (
        _set("h100-pcie", "slug", "h100-sxm"),
        ["line 3", "'slug'", "duplicate slug 'h100-sxm'", "line 2"],
    ),
    "missing column": (
        lambda h, r: ([c for c in h if c != "source"], r),
        ["line 1", "missing required column", "source"],
    ),
    "unknown column": (
        lambda h, r: (
            [c if c != "memory_bytes" else "memory_gb" for c in h],
            [{**row, "memory_gb": row["memory_bytes"]} for row in r],
        ),
        ["line 1", "unknown column", "'memory_gb'", "did you mean 'memory_bytes'"],
    ),
    "no rows": (lambda h, r: (h, []), ["has a header but no rows"]),
}

_BAD_MODELS = {
    "fractional layers": (
        _set("llama-3.1-8b", "num_layers", "32.5"),
        ["line 2", "'num_layers'", "whole number"],
    ),
    "text in an int": (_set("llama-3.1-8b", "num_kv_heads", "eight"), ["line 2", "'num_kv_heads'"]),
    "zero heads": (_set("llama-3.1-8b", "num_kv_heads", "0"), ["'num_kv_heads'", "> 0"]),
    "active above total": (
        _set("mixtral-8x7b", "num_active_params", "50e9"),
        ["'mixtral-8x7b'", "'num_active_params'", "exceed"],
    ),
    "dense with fewer active": (
        _set("llama-3.1-8b", "num_active_params", "7e9"),
        ["line 2", "'num_active_params'", "dense"],
    ),
    "heads not divisible": (
        _set("llama-3.1-8b", "num_kv_heads", "5"),
        ["line 2", "'num_kv_heads'", "not a multiple"],
    ),
    "more experts per token than experts": (
        _set("mixtral-8x7b", "num_experts_per_token", "9"),
        ["'num_experts_per_token'"],
    ),
    "duplicate column": (lambda h, r: ([*h, "name"], r), ["line 1", "name", "twice"]),
    "typo in column": (
        lambda h, r: (
            [c if c != "num_kv_heads" else "num_kv_head" for c in h],
            [{**row, "num_kv_head": row["num_kv_heads"]} for row in r],
        ),
        ["line 1", "unknown column", "'num_kv_head'", "did you mean 'num_kv_heads'"],
    ),
}


def _expect_catalog_error(lookup, file: Path, fragments: list[str]) -> None:
    with pytest.raises(CatalogError) as info:
        lookup()
    message = str(info.value)
    assert str(file) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize("case", sorted(_BAD_HARDWARE))
def test_malformed_hardware_csv_names_file_line_and_column(tmp_catalog, case):
    change, fragments = _BAD_HARDWARE[case]
    _mutate(tmp_catalog, "hardware.csv", change)
    _expect_catalog_error(lambda: hardware("a100-40gb"), tmp_catalog / "hardware.csv", fragments)


@pytest.mark.parametrize("case", sorted(_BAD_MODELS))
def test_malformed_models_csv_names_file_line_and_column(tmp_catalog, case):
    change, fragments = _BAD_MODELS[case]
    _mutate(tmp_catalog, "models.csv", change)
    _expect_catalog_error(lambda: model("qwen2.5-72b"), tmp_catalog / "models.csv", fragments)


def test_ragged_row_is_reported(tmp_catalog):
    path = tmp_catalog / "hardware.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.append("tpu,Unquoted, comma,1e15,1e12,1e10,ICI,1e11,1e-5,src,,,")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _expect_catalog_error(list_hardware, path, [f"line {len(lines)}", "13 cells", "12 columns"])


def test_empty_and_missing_files(tmp_catalog):
    (tmp_catalog / "hardware.csv").write_text("", encoding="utf-8")
    _expect_catalog_error(list_hardware, tmp_catalog / "hardware.csv", ["empty"])
    (tmp_catalog / "models.csv").unlink()
    _expect_catalog_error(list_models, tmp_catalog / "models.csv", ["does not exist"])


def test_blank_lines_are_skipped_and_line_numbers_still_count_them(tmp_catalog):
    path = tmp_catalog / "models.csv"
    text = path.read_text(encoding="utf-8").replace("\n", "\n\n", 1)  # blank line after header
    path.write_text(text, encoding="utf-8")
    assert model("llama-3.1-8b").num_layers == 32
    _mutate(tmp_catalog, "models.csv", _set("llama-3.1-8b", "num_layers", "x"))
    path.write_text(path.read_text(encoding="utf-8").replace("\n", "\n\n", 1), encoding="utf-8")
    catalog.clear_cache()
    _expect_catalog_error(lambda: model("llama-3.1-8b"), path, ["line 3", "'num_layers'"])


def test_optional_model_columns_take_their_defaults(tmp_catalog):
    def dense_only_without_moe_columns(header, rows):
        dropped = {"num_experts", "num_experts_per_token", "dtype_bytes"}
        return [c for c in header if c not in dropped], [r for r in rows if r["num_experts"] == "1"]

    _mutate(tmp_catalog, "models.csv", dense_only_without_moe_columns)
    llama = model("llama-3.1-8b")
    assert (llama.num_experts, llama.num_experts_per_token, llama.dtype_bytes) == (1, 1, 2)
    assert "mixtral-8x7b" not in list_models()


def test_integers_written_as_floats_are_accepted(tmp_catalog):
    _mutate(tmp_catalog, "models.csv", _set("llama-3.1-8b", "num_layers", "32.0"))
    assert model("llama-3.1-8b").num_layers == 32
    assert isinstance(model("llama-3.1-8b").num_layers, int)


# --------------------------------------------------------------------------------------------
# Where the data is found
# --------------------------------------------------------------------------------------------


def test_data_path_finds_the_checkout_catalog():
    directory = data_path("catalog")
    assert (directory / "hardware.csv").is_file()
    assert (directory / "models.csv").is_file()
    assert data_path("catalog", "models.csv").is_file()


def test_data_path_prefers_the_installed_copy(tmp_path, monkeypatch):
    installed, checkout = tmp_path / "installed", tmp_path / "checkout"
    for root in (installed, checkout):
        (root / "measured").mkdir(parents=True)
    monkeypatch.setattr(catalog, "_data_roots", lambda: (installed, checkout))
    assert data_path("measured") == installed / "measured"
    (installed / "measured").rmdir()
    assert data_path("measured") == checkout / "measured"


def test_data_path_names_both_places_when_missing():
    with pytest.raises(CatalogError) as info:
        data_path("no-such-folder")
    installed, checkout = catalog._data_roots()
    assert str(installed / "no-such-folder") in str(info.value)
    assert str(checkout / "no-such-folder") in str(info.value)


@pytest.mark.slow
@pytest.mark.floors
@pytest.mark.wheel
def test_installed_wheel_reads_its_own_catalog(tmp_path, built_wheel):
    target, elsewhere = tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    names = set(zipfile.ZipFile(built_wheel).namelist())
    for name in ("hardware.csv", "models.csv", "README.md"):
        assert f"budgetlab/_data/catalog/{name}" in names

    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    run_ok(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(built_wheel)],
        cwd=elsewhere,
        timeout_s=300,
    )

    probe = (
        "import budgetlab, budgetlab.catalog as c\n"
        "print(budgetlab.__file__)\n"
        "print(c.data_path('catalog'))\n"
        "print(repr(c.hardware('h100-sxm').dense_bf16_flops_per_s))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = run_ok([sys.executable, "-c", probe], cwd=elsewhere, env=env, timeout_s=120)
    package_file, catalog_dir, flops = result.stdout.splitlines()
    assert Path(package_file).is_relative_to(target)
    assert Path(catalog_dir) == target / "budgetlab" / "_data" / "catalog"
    assert float(flops) == 989.4e12


# --- issue 23: the attention column ---------------------------------------------------------------


def test_attention_column_round_trips_and_sliding_rows_match_vllm():
    # gpt-oss-20b: sliding (128) on even layers, full on odd; Gemma 2: 4,096 on even layers
    oss = model("gpt-oss-20b")
    assert oss.attention.to_text() == "sliding_window full; sliding_window=128"
    assert (oss.attention.count("sliding_window"), oss.attention.count("full")) == (12, 12)
    assert model("gemma-2-27b").attention.count("sliding_window") == 23
    assert model("llama-3.1-8b").attention is None  # an empty cell: every layer full attention
    table = catalog.model_table()
    assert "attention" in table.columns


def test_a_malformed_attention_cell_names_line_and_column(tmp_catalog):
    _mutate(tmp_catalog, "models.csv", _set("llama-3.1-8b", "attention", "sliding_window*x full"))
    with pytest.raises(CatalogError, match=r"line 2.*attention.*kind\*n"):
        model("llama-3.1-8b")
    _mutate(tmp_catalog, "models.csv", _set("llama-3.1-8b", "attention", "sliding_window full"))
    with pytest.raises(CatalogError, match=r"line 2.*needs sliding_window"):
        model("llama-3.1-8b")


def test_todays_models_carry_the_layouts_vllm_runs():
    # Gemma 3 27B: five sliding (1,024) then one full over 62 layers → full at 5, 11, ..., 59
    gemma = model("gemma-3-27b").attention
    assert (gemma.count("full"), gemma.count("sliding_window"), gemma.layer_kinds[5]) == (10, 52, "full")
    # Llama 4 Scout: every 4th layer (no RoPE) global, the rest 8,192-token chunks
    scout = model("llama-4-scout").attention
    assert scout.layer_kinds[:4] == ("chunked_local",) * 3 + ("full",) and scout.attention_chunk_size == 8192
    # MLA: one latent of 512 + 64 per token and layer
    assert model("deepseek-v3").attention.mla_latent_dim == model("deepseek-v2-lite").attention.mla_latent_dim == 576
    assert (
        model("deepseek-v3").attention.q_lora_rank == 1536 and model("deepseek-v2-lite").attention.q_lora_rank is None
    )
    # Gated DeltaNet state per request and layer: conv (2·16·128 + n_v·128) × 3 in BF16 + n_v × 128 × 128
    assert model("qwen3-next-80b-a3b").attention.mamba_state_bytes == 8192 * 3 * 2 + 32 * 128 * 128 * 2
    assert model("qwen3.5-397b-a17b").attention.mamba_state_bytes == 12288 * 3 * 2 + 64 * 128 * 128 * 4
    assert model("qwen3.5-35b-a3b").attention.count("mamba") == 30
