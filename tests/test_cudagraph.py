"""CUDA graphs as vLLM 0.33 captures and dispatches them (budgetlab/cudagraph.py, issue 22 item 3).

Hand-worked cases per rule of the module docstring (C1-C6, D1-D4, G1-G3), then the table that
vLLM 0.33.0's own functions computed (``tests/fixtures/cudagraph/``, see its generator for how).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import budgetlab as bl
from budgetlab.cudagraph import full_graph_sizes, is_data_center_blackwell, uniform_decode_query_len
from budgetlab.errors import ConfigError, ParameterError

H100 = bl.hardware("h100-sxm")
B200 = bl.hardware("b200")
TABLE = Path(__file__).parent / "fixtures" / "cudagraph" / "vllm_0_33_cudagraphs.json"

LADDER_512 = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]


def engine(max_num_seqs: int, budget: int, spec: int = 0, **changes: object) -> bl.EngineConfig:
    """An engine; ``spec`` sets ``num_speculative_tokens``, which EngineConfig does not have yet."""
    config = bl.EngineConfig(max_num_batched_tokens=budget, max_num_seqs=max_num_seqs, **changes)  # type: ignore[arg-type]
    if spec:
        object.__setattr__(config, "num_speculative_tokens", spec)
    return config


# --- capture sizes ---------------------------------------------------------------------------------


def test_default_h100_engine_captures_up_to_512_without_max_num_seqs():
    """C2/C4/C5: S 1,024 and B 8,192 give min(2·1024, 512) = 512; S > 512 is not added."""
    config = bl.EngineConfig.vllm_defaults(H100)
    assert (config.max_num_seqs, config.max_num_batched_tokens) == (1024, 8192)
    sizes = bl.cudagraph_capture_sizes(config, H100)
    assert sizes == LADDER_512
    assert len(sizes) == 51 and 1024 not in sizes


def test_small_max_num_seqs_lowers_the_ceiling_to_twice_it():
    """C2: S 8 gives a ceiling of 16; C5 adds S itself (already on the ladder)."""
    assert bl.cudagraph_capture_sizes(engine(8, 2048), H100) == [1, 2, 4, 8, 16]
    # S 100: ceiling 200; 100 is off the stride of 8 below 256 and is added (C5)
    sizes = bl.cudagraph_capture_sizes(engine(100, 8192), H100)
    assert sizes == sorted([1, 2, 4, *range(8, 201, 8), 100])
    # S 1: ceiling 2
    assert bl.cudagraph_capture_sizes(engine(1, 8192), H100) == [1, 2]


def test_a_budget_below_the_ceiling_clips_the_ladder_and_is_captured():
    """C2/C4: B 300 under a ceiling of 512: ladder to 288, then 300 itself."""
    assert bl.cudagraph_capture_sizes(engine(256, 300), H100)[-4:] == [256, 272, 288, 300]
    # B 100, S 64: ceiling min(128, 512) = 128, clipped to 100: ladder to 96, plus 100 and S 64
    assert bl.cudagraph_capture_sizes(engine(64, 100), H100) == [1, 2, 4, *range(8, 97, 8), 100]


def test_user_sizes_are_deduplicated_sorted_and_cut_at_the_budget_only():
    """C3: not cut at the default ceiling (600 stays), cut at the budget (9,000 goes)."""
    config = engine(64, 8192, cudagraph_capture_sizes=[600, 1, 64, 64, 96, 8, 9000])
    assert bl.cudagraph_capture_sizes(config, H100) == [1, 8, 64, 96, 600]
    assert config.cudagraph_capture_sizes == (600, 1, 64, 64, 96, 8, 9000)  # stored as given, as a tuple
    assert hash(config)
    # every size above the budget: nothing is captured (C6)
    assert bl.cudagraph_capture_sizes(engine(64, 100, cudagraph_capture_sizes=(200, 300)), H100) == []


def test_a_user_maximum_replaces_the_ceiling_and_drops_the_decode_sizes():
    """C2/C5: the ladder to the user's maximum; neither S nor an off-stride maximum is added."""
    assert bl.cudagraph_capture_sizes(engine(1024, 8192, max_cudagraph_capture_size=600), H100)[-2:] == [576, 592]
    assert bl.cudagraph_capture_sizes(engine(1024, 8192, max_cudagraph_capture_size=1024), H100)[-1] == 1024
    assert bl.cudagraph_capture_sizes(engine(100, 8192, max_cudagraph_capture_size=120), H100)[-1] == 120
    assert 100 not in bl.cudagraph_capture_sizes(engine(100, 8192, max_cudagraph_capture_size=120), H100)
    # clipped to the budget, which is then captured (B <= ceiling)
    assert bl.cudagraph_capture_sizes(engine(256, 300, max_cudagraph_capture_size=1024), H100)[-2:] == [288, 300]


def test_both_user_fields_must_agree_as_vllm_requires():
    """C6: sizes' largest within the budget must equal the maximum."""
    agreed = engine(256, 2048, cudagraph_capture_sizes=(4, 16, 48, 4096), max_cudagraph_capture_size=48)
    assert bl.cudagraph_capture_sizes(agreed, H100) == [4, 16, 48]
    with pytest.raises(ConfigError, match=r"max_cudagraph_capture_size \(64\).*\(48\)"):
        engine(256, 2048, cudagraph_capture_sizes=(4, 16, 48), max_cudagraph_capture_size=64)
    # enforce_eager skips vLLM's check
    assert engine(256, 2048, cudagraph_capture_sizes=(4,), max_cudagraph_capture_size=64, enforce_eager=True)


def test_enforce_eager_captures_nothing_and_runs_every_step_eagerly():
    """C1/G1/D4."""
    config = engine(1024, 8192, enforce_eager=True, cudagraph_capture_sizes=(1, 2))
    assert bl.cudagraph_capture_sizes(config, H100) == []
    assert full_graph_sizes(config, H100) == []
    for tokens, uniform in ((1, True), (1, False), (512, True), (8192, False)):
        assert bl.cudagraph_dispatch(config, H100, tokens, uniform) == ("NONE", tokens)


def test_blackwell_raises_the_ceiling_to_1024():
    """G3: the catalog's B200 is compute capability 10.0; the H200 and the GH200 are Hopper."""
    config = bl.EngineConfig.vllm_defaults(B200)
    sizes = bl.cudagraph_capture_sizes(config, B200)
    assert sizes == [1, 2, 4, *range(8, 256, 8), *range(256, 1025, 16)] and len(sizes) == 83
    assert bl.cudagraph_dispatch(config, B200, 1000, True) == ("FULL", 1008)
    assert bl.cudagraph_dispatch(config, H100, 1000, True) == ("NONE", 1000)  # the same engine on an H100
    assert [is_data_center_blackwell(h) for h in (B200, H100, bl.hardware("h200-sxm"))] == [True, False, False]
    names = {"NVIDIA GB200 NVL72": True, "NVIDIA B300": True, "NVIDIA GH200 480GB": False}
    names |= {"NVIDIA RTX PRO 6000 Blackwell": False, "NVIDIA B2000": False}
    for name, expected in names.items():
        assert is_data_center_blackwell(dataclasses.replace(H100, slug="custom", name=name)) is expected, name


# --- dispatch --------------------------------------------------------------------------------------


def test_decode_batches_over_512_run_without_graphs_on_the_default_h100_engine():
    """D2/D4, the issue's example: S 1,024 lets decode batches grow past the ladder's 512."""
    config = bl.EngineConfig.vllm_defaults(H100)
    assert bl.cudagraph_dispatch(config, H100, 300, True) == ("FULL", 304)
    assert bl.cudagraph_dispatch(config, H100, 512, True) == ("FULL", 512)
    assert bl.cudagraph_dispatch(config, H100, 513, True) == ("NONE", 513)
    assert bl.cudagraph_dispatch(config, H100, 1024, True) == ("NONE", 1024)
    assert bl.cudagraph_dispatch(config, H100, 4096, False) == ("NONE", 4096)


def test_uniform_decodes_run_full_and_mixed_batches_piecewise():
    """D2/D3 on the A100-sized defaults (S 256, B 2,048)."""
    config = engine(256, 2048)
    assert bl.cudagraph_dispatch(config, H100, 200, True) == ("FULL", 200)
    assert bl.cudagraph_dispatch(config, H100, 200, False) == ("PIECEWISE", 200)
    assert bl.cudagraph_dispatch(config, H100, 201, True) == ("FULL", 208)
    assert bl.cudagraph_dispatch(config, H100, 257, False) == ("PIECEWISE", 272)
    # a decode of more than S tokens cannot happen; were it asked, no FULL graph holds it
    assert bl.cudagraph_dispatch(config, H100, 257, True) == ("PIECEWISE", 272)


def test_a_decode_above_the_largest_full_graph_falls_back_to_piecewise():
    """D1/D2/D3: user sizes jump from 64 to 128 and S is 100: a decode of 90 has no FULL graph
    (128 > S), so it runs the PIECEWISE graph of 128."""
    config = engine(100, 2048, cudagraph_capture_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256))
    assert full_graph_sizes(config, H100) == [1, 2, 4, 8, 16, 32, 64]
    assert bl.cudagraph_dispatch(config, H100, 64, True) == ("FULL", 64)
    assert bl.cudagraph_dispatch(config, H100, 90, True) == ("PIECEWISE", 128)
    assert bl.cudagraph_dispatch(config, H100, 257, False) == ("NONE", 257)


def test_padding_is_to_the_smallest_captured_size_that_holds_the_batch():
    """D2/D3/D4 over every batch size of a small engine."""
    config = engine(100, 8192)
    sizes = bl.cudagraph_capture_sizes(config, H100)
    full = full_graph_sizes(config, H100)
    assert full == [s for s in sizes if s <= 100]
    for tokens in range(1, sizes[-1] + 40):
        mode, padded = bl.cudagraph_dispatch(config, H100, tokens, False)
        holding = [s for s in sizes if s >= tokens]
        assert (mode, padded) == (("PIECEWISE", holding[0]) if holding else ("NONE", tokens))
        if tokens <= 100:
            assert bl.cudagraph_dispatch(config, H100, tokens, True) == ("FULL", min(s for s in full if s >= tokens))
    assert bl.cudagraph_dispatch(config, H100, 97, True) == ("FULL", 100)  # S, off the stride
    assert bl.cudagraph_dispatch(config, H100, 150, False) == ("PIECEWISE", 152)
    assert bl.cudagraph_dispatch(config, H100, 201, False) == ("NONE", 201)


def test_speculative_tokens_widen_decodes_to_q_tokens_a_request():
    """G2/C2/C5/D1 with num_speculative_tokens (read when the engine has it)."""
    config = engine(8, 2048, spec=1)  # q = 2: ceiling min(2·8·2, 512) = 32
    assert uniform_decode_query_len(config) == 2
    assert bl.cudagraph_capture_sizes(config, H100) == [1, 2, 4, 8, 16, 24, 32]
    assert full_graph_sizes(config, H100) == [2, 4, 8, 16]  # at most q·S = 16 tokens
    assert bl.cudagraph_dispatch(config, H100, 6, True) == ("FULL", 8)
    assert bl.cudagraph_dispatch(config, H100, 6, False) == ("PIECEWISE", 8)
    config = engine(8, 2048, spec=3)  # q = 4: ceiling 64; decode sizes 4, 8, 16, 32
    assert full_graph_sizes(config, H100) == [4, 8, 16, 24, 32]  # 24 = round_up(24, 4)
    assert bl.cudagraph_dispatch(config, H100, 12, True) == ("FULL", 16)
    with pytest.raises(ParameterError, match="multiple of 4"):
        bl.cudagraph_dispatch(config, H100, 10, True)
    assert uniform_decode_query_len(engine(8, 2048)) == 1


# --- arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [0, -1, 1.5, True, "8", None])
def test_bad_num_tokens_are_refused(tokens):
    with pytest.raises(ParameterError, match="num_tokens"):
        bl.cudagraph_dispatch(engine(8, 2048), H100, tokens, False)


def test_bad_arguments_are_refused():
    with pytest.raises(ParameterError, match="uniform_decode"):
        bl.cudagraph_dispatch(engine(8, 2048), H100, 8, "yes")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="engine must be an EngineConfig"):
        bl.cudagraph_capture_sizes({"max_num_seqs": 8}, H100)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="hardware must be a HardwareSpec"):
        bl.cudagraph_capture_sizes(engine(8, 2048), "h100-sxm")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="num_speculative_tokens"):
        uniform_decode_query_len(engine(8, 2048, spec=-1))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"cudagraph_capture_sizes": ()}, "non-empty tuple"),
        ({"cudagraph_capture_sizes": 8}, "non-empty tuple"),
        ({"cudagraph_capture_sizes": "8"}, "non-empty tuple"),
        ({"cudagraph_capture_sizes": (8, 0)}, "cudagraph_capture_sizes entry"),
        ({"cudagraph_capture_sizes": (8, 2.5)}, "cudagraph_capture_sizes entry"),
        ({"max_cudagraph_capture_size": 0}, "max_cudagraph_capture_size"),
        ({"max_cudagraph_capture_size": 16.0}, "max_cudagraph_capture_size"),
        ({"enforce_eager": 1}, "enforce_eager"),
    ],
)
def test_engine_config_refuses_what_vllm_refuses(changes, match):
    with pytest.raises(ConfigError, match=match):
        engine(8, 2048, **changes)


def test_the_new_fields_default_to_vllm_and_show_only_when_set():
    assert (bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8).enforce_eager) is False
    assert "enforce_eager" not in repr(engine(8, 2048))
    assert "enforce_eager=True" in repr(engine(8, 2048, enforce_eager=True))
    assert engine(8, 2048, cudagraph_capture_sizes=(1, 2), enforce_eager=True).cudagraph_capture_sizes == (1, 2)
    assert engine(8, 2048, cudagraph_capture_sizes=(), enforce_eager=True).cudagraph_capture_sizes == ()


# --- against vLLM 0.33.0's own code ----------------------------------------------------------------


def _table() -> list[dict]:
    return json.loads(TABLE.read_text(encoding="utf-8"))["cases"]


def test_the_vllm_table_covers_the_grid():
    cases = _table()
    plain = {
        (c["max_num_seqs"], c["budget"])
        for c in cases
        if set(c) == {"max_num_seqs", "budget", "capture_sizes", "dispatch"}
    }
    assert len(plain) >= 100
    assert {"blackwell", "spec", "sizes", "max_size", "eager"} <= {k for c in cases for k in c}
    modes = {row[2] for c in cases for row in c["dispatch"]}
    assert modes == {"FULL", "PIECEWISE", "NONE"}


@pytest.mark.parametrize(
    "case", _table(), ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items() if k not in ("capture_sizes", "dispatch"))
)
def test_capture_sizes_and_dispatch_equal_vllms_own(case):
    config = engine(
        case["max_num_seqs"],
        case["budget"],
        spec=case.get("spec", 0),
        cudagraph_capture_sizes=case.get("sizes"),
        max_cudagraph_capture_size=case.get("max_size"),
        enforce_eager=case.get("eager", False),
    )
    hardware = B200 if case.get("blackwell") else H100
    assert bl.cudagraph_capture_sizes(config, hardware) == case["capture_sizes"]
    got = [[t, u, *bl.cudagraph_dispatch(config, hardware, t, bool(u))] for t, u, _, _ in case["dispatch"]]
    assert got == case["dispatch"]
