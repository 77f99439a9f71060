"""Speculative decoding in the step cost (issue 24, item 3): a verification's drafts priced by every
cost model, the CUDA graphs of a speculating engine, the proposer's own terms per method, and the
wiring into costs built for an engine. Values are worked by hand in the comments.

The baseline (``tests/fixtures/cost_speculative/baseline_no_drafts.json``) holds, as float hex,
what eleven cost models gave for 120 batches, three decode runs, a step-time curve and 40 step
breakdowns before ``Batch.decode_draft_tokens`` existed; with no drafts every model must still
give those bits. ``python tests/test_cost_speculative.py OUT.json`` writes the table again (run it
on the code to compare against).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab.catalog import hardware, model
from budgetlab.cost import DRAFTER_TERM_NAMES, ConstantCost, Drafter, IdealCost, drafter_terms, drafter_time_s
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cost.named import make_cost
from budgetlab.cost.speculative_terms import NGRAM_CPU_S_PER_TOKEN_V1, SMALL_KERNEL_S
from budgetlab.cost.step_terms import STEP_TERM_NAMES
from budgetlab.cudagraph import (
    cudagraph_capture_sizes,
    cudagraph_dispatch,
    draft_decode_graph_sizes,
    full_graph_sizes,
    is_uniform_decode,
)
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.specs import Batch, EngineConfig

BASELINE = Path(__file__).parent / "fixtures" / "cost_speculative" / "baseline_no_drafts.json"
H100 = hardware("h100-sxm")
QWEN06 = model(
    "qwen3-0.6b"
)  # 596,049,920 params, 28 layers, H 1,024, 16 q / 8 KV heads of 128, I 3,072, V 151,936 tied
BW, FLOPS = 3.35e12, 989.4e12  # H100 SXM: bytes/s, dense BF16 FLOP/s
P06 = 596_049_920
KV06 = 2 * 28 * 8 * 128 * 2  # 114,688 B of KV per token
PAIR06 = 4 * 28 * 16 * 128  # 229,376 attention FLOPs per (query, key) pair


def spec_engine(k: int, method: str = "eagle3", **changes: object) -> EngineConfig:
    fields: dict[str, object] = {"max_num_batched_tokens": 2048, "max_num_seqs": 8}
    fields.update(changes)
    return EngineConfig(**fields, num_speculative_tokens=k, speculative_method=method)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# With no drafts, every model gives what it gave before the field existed
# ---------------------------------------------------------------------------------------------


def baseline_costs() -> dict[str, object]:
    """The eleven models of the baseline (a dense, MoE, MLA, sliding-window, chunked, Mamba model;
    TP 1-4; with and without CUDA graphs; eager; the ideal roofline; a constant)."""
    h100, b200 = hardware("h100-sxm"), hardware("b200")
    e = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    return {
        "ideal-llama-3.1-8b": IdealCost(h100, model("llama-3.1-8b")),
        "constant": ConstantCost(0.05),
        "typical-llama-3.1-8b": CalibratedCost.typical(h100, model("llama-3.1-8b"), engine=e),
        "gpu_profile-llama-2-7b": CalibratedCost.gpu_profile(h100, model("llama-2-7b")),
        "typical-mixtral-tp2": CalibratedCost.typical(
            h100,
            model("mixtral-8x7b"),
            engine=EngineConfig(max_num_batched_tokens=8192, max_num_seqs=128, tensor_parallel_size=2),
        ),
        "typical-deepseek-v2-lite": CalibratedCost.typical(h100, model("deepseek-v2-lite"), engine=e),
        "typical-gemma-3-12b": CalibratedCost.typical(h100, model("gemma-3-12b"), engine=e),
        "typical-llama-4-scout-tp4": CalibratedCost.typical(
            h100,
            model("llama-4-scout"),
            engine=EngineConfig(max_num_batched_tokens=4096, max_num_seqs=128, tensor_parallel_size=4),
        ),
        "typical-qwen3-next": CalibratedCost.typical(
            b200,
            model("qwen3-next-80b-a3b"),
            engine=EngineConfig(
                max_num_batched_tokens=8192, max_num_seqs=512, tensor_parallel_size=2, enable_expert_parallel=True
            ),
        ),
        "typical-eager-qwen3-0.6b": CalibratedCost.typical(
            h100,
            model("qwen3-0.6b"),
            engine=EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, enforce_eager=True),
        ),
        "ideal-engine-fp8-tp2": make_cost(
            "ideal",
            h100,
            model("llama-3.1-70b"),
            engine=EngineConfig(
                max_num_batched_tokens=4096, max_num_seqs=256, tensor_parallel_size=2, quantization="fp8"
            ),
        ),
    }


def baseline_batches(n: int = 120, seed: int = 24) -> list[Batch]:
    rng = random.Random(seed)
    out: list[Batch] = []
    while len(out) < n:
        decodes = rng.choice([0, 1, 2, 7, 33, 100, 255, 256, 300])
        ctx = decodes * rng.choice([0, 1, 17, 500, 3000]) if decodes else 0
        chunks = tuple(rng.choice([1, 2, 31, 256, 700, 2048]) for _ in range(rng.choice([0, 0, 1, 2, 3])))
        cctx = tuple(rng.choice([0, 0, 5, 4096, 20000]) for _ in chunks)
        b = Batch(num_decodes=decodes, decode_context_tokens=ctx, prefill_tokens=chunks, prefill_context_tokens=cctx)
        if b.num_tokens >= 1:
            out.append(b)
    return out


def baseline_table() -> dict[str, object]:
    """What the models give now, as :data:`BASELINE` stores it."""
    batches = baseline_batches()
    runs = [[1, [0, 5, 1000, 123457]], [64, [64, 6400, 640000]], [300, [300, 900000]]]
    curve = [0, 1, 7, 255, 256, 257, 1000, 2048, 8192]
    rows = [
        [b.num_decodes, b.decode_context_tokens, list(b.prefill_tokens), list(b.prefill_context_tokens)]
        for b in batches
    ]
    values: dict[str, dict[str, object]] = {}
    for name, cost in baseline_costs().items():
        row: dict[str, object] = {"batch": [float(cost.batch_time_s(b)).hex() for b in batches]}  # type: ignore[attr-defined]
        row["runs"] = [
            [float(x).hex() for x in cost.decode_run_time_s(num_decodes=n, decode_context_tokens=np.asarray(c))]  # type: ignore[attr-defined]
            for n, c in runs
        ]
        row["curve"] = [float(x).hex() for x in np.asarray(cost.step_time_s(np.asarray(curve)))]  # type: ignore[attr-defined]
        if hasattr(cost, "step_terms"):
            row["terms"] = [{k: float(v).hex() for k, v in cost.step_terms(b).terms.items()} for b in batches[:40]]
        values[name] = row
    return {"batches": rows, "runs": runs, "curve": curve, "values": values, "numpy": np.__version__}


@pytest.fixture(scope="module")
def baseline() -> dict:
    return json.loads(BASELINE.read_text())


def test_baseline_is_the_table_of_these_batches(baseline):
    rows = [
        [b.num_decodes, b.decode_context_tokens, list(b.prefill_tokens), list(b.prefill_context_tokens)]
        for b in baseline_batches()
    ]
    assert baseline["batches"] == rows
    assert set(baseline["values"]) == set(baseline_costs())


def _same(got: list[str], want: list[str], *, exact: bool) -> bool:
    """Floats as hex strings: identical where the baseline was written (its NumPy), within a few
    ulp elsewhere (another NumPy's ``pow`` and reductions may round the last bit differently)."""
    if exact:
        return got == want
    return len(got) == len(want) and all(
        math.isclose(float.fromhex(a), float.fromhex(b), rel_tol=1e-13, abs_tol=0.0) for a, b in zip(got, want)
    )


@pytest.mark.parametrize("name", sorted(baseline_costs()))
def test_no_drafts_gives_the_bits_of_before(baseline, name):
    """Every model, every batch: batch_time_s, decode runs, the curve and each named term, bit for
    bit with the NumPy the baseline was written with (``make test``); at the dependency floors
    (``make test-min``) to 1e-13."""
    cost = baseline_costs()[name]
    want = baseline["values"][name]
    exact = np.__version__ == baseline["numpy"]
    batches = [
        Batch(
            num_decodes=a,
            decode_context_tokens=b,
            prefill_tokens=tuple(c),
            prefill_context_tokens=tuple(d),
            decode_draft_tokens=0,
        )
        for a, b, c, d in baseline["batches"]
    ]
    assert _same([float(cost.batch_time_s(b)).hex() for b in batches], want["batch"], exact=exact)
    for (n, contexts), expected in zip(baseline["runs"], want["runs"], strict=True):
        got = cost.decode_run_time_s(num_decodes=n, decode_context_tokens=np.asarray(contexts))
        assert _same([float(x).hex() for x in got], expected, exact=exact)
    curve = [float(x).hex() for x in np.asarray(cost.step_time_s(np.asarray(baseline["curve"])))]
    assert _same(curve, want["curve"], exact=exact)
    if "terms" in want:
        for batch, expected in zip(batches[:40], want["terms"], strict=True):
            terms = cost.step_terms(batch)
            got_terms = [float(terms.terms[k]).hex() for k in expected]
            assert _same(got_terms, list(expected.values()), exact=exact), list(expected)
            assert terms.terms["draft_attention"] == 0.0 and terms.terms["drafter"] == 0.0 and not terms.drafter_terms


@settings(max_examples=60, deadline=None)
@given(
    decodes=st.integers(0, 300),
    context=st.integers(0, 4000),
    chunks=st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 30000)), max_size=3),
    name=st.sampled_from(
        ["typical-llama-3.1-8b", "typical-deepseek-v2-lite", "typical-gemma-3-12b", "typical-qwen3-next"]
    ),
)
def test_decode_runs_and_breakdowns_agree_with_the_step(decodes, context, chunks, name):
    """Any batch, no drafts: step_terms sums to batch_time_s, and a run of it equals its steps."""
    cost = _COSTS[name]
    batch = Batch(decodes, decodes * context, tuple(n for n, _ in chunks), tuple(c for _, c in chunks))
    if batch.num_tokens == 0:
        return
    assert cost.step_terms(batch).total_s == pytest.approx(cost.batch_time_s(batch), rel=1e-12)
    if decodes and not chunks:
        run = cost.decode_run_time_s(num_decodes=decodes, decode_context_tokens=np.array([decodes * context]))
        assert run[0] == cost.batch_time_s(batch)


_COSTS = baseline_costs()


# ---------------------------------------------------------------------------------------------
# A verification step against a plain decode step
# ---------------------------------------------------------------------------------------------

ROOF06 = CalibratedCost(hardware=H100, model=QWEN06, attention=True, kv_reads=True)  # efficiencies 1, no overheads


def test_a_memory_bound_verification_costs_what_a_plain_decode_costs():
    """4 decodes of context 1,000 each, then the same verifying 3 drafts each (k = 3).

    Memory: (1,192,099,840 B of weights + 4,000 × 114,688 B of KV) / 3.35e12 = 492.79 µs, both.
    Compute, plain: 4 × 2P + (4,000 + 4) pairs × 229,376 = 5.687e9 FLOP = 5.75 µs.
    Compute, verifying: 16 × 2P + (4,004 + 12,036) × 229,376 = 2.275e10 FLOP = 23.0 µs, where
    the drafts add 12 × (1,000 + (4 + 2) / 2) = 12,036 pairs (query i of 4 attends 1,000 + i keys).
    Both under the weight read: the verification is free."""
    memory = (P06 * 2 + 4000 * KV06) / BW
    plain = Batch(num_decodes=4, decode_context_tokens=4000)
    verify = Batch(num_decodes=4, decode_context_tokens=4000, decode_draft_tokens=12)
    assert ROOF06.batch_time_s(plain) == pytest.approx(memory, rel=1e-12)
    assert ROOF06.batch_time_s(verify) == pytest.approx(memory, rel=1e-12)
    assert verify.num_tokens == 16
    compute_s = (16 * 2 * P06 + (4004 + 12036) * PAIR06) / FLOPS
    assert compute_s == pytest.approx(23.0e-6, rel=1e-3) and compute_s < memory


def test_a_compute_bound_verification_pays_its_tokens_and_their_attention():
    """512 decodes of context 100, then verifying 7 drafts each (4,096 tokens).

    Plain: memory (1.192e9 + 51,200 × 114,688 B) / 3.35e12 = 2.1082 ms > compute 0.629 ms.
    Verifying: compute 4,096 × 2P = 4.8829e12 FLOP (linear) + (51,712 + 376,320) pairs ×
    229,376 = 9.818e10 FLOP (attention), 376,320 = 3,584 × (100 + (8 + 2) / 2) the drafts'
    pairs: (4.8829e12 + 9.818e10) / 989.4e12 = 5.0344 ms, compute-bound."""
    plain = Batch(num_decodes=512, decode_context_tokens=51_200)
    verify = Batch(num_decodes=512, decode_context_tokens=51_200, decode_draft_tokens=3584)
    assert ROOF06.batch_time_s(plain) == pytest.approx((P06 * 2 + 51_200 * KV06) / BW, rel=1e-12)
    linear_s = 4096 * 2 * P06 / FLOPS
    base_s, draft_s = (51_200 + 512) * PAIR06 / FLOPS, 376_320 * PAIR06 / FLOPS
    assert ROOF06.batch_time_s(verify) == pytest.approx(linear_s + base_s + draft_s, rel=1e-12)
    assert ROOF06.batch_time_s(verify) == pytest.approx(5.0344e-3, rel=1e-4)
    terms = ROOF06.step_terms(verify)
    assert terms.bound == "compute"
    assert terms.terms["linear_math"] == pytest.approx(linear_s, rel=1e-12)
    assert terms.terms["attention_math"] == pytest.approx(base_s, rel=1e-12)
    assert terms.terms["draft_attention"] == pytest.approx(draft_s, rel=1e-9)
    assert terms.total_s == pytest.approx(ROOF06.batch_time_s(verify), rel=1e-12)


def test_ideal_and_constant_costs_price_a_verification():
    """IdealCost: drafts are tokens, max(weight read, (n + d) × per token); ConstantCost: a step."""
    ideal = IdealCost(H100, QWEN06)
    verify = Batch(num_decodes=512, decode_context_tokens=0, decode_draft_tokens=3584)
    assert ideal.batch_time_s(verify) == max(ideal.weight_read_s, 4096 * ideal.per_token_s)
    assert ideal.batch_time_s(verify) == pytest.approx(4096 * 2 * P06 / FLOPS, rel=1e-12)
    assert ConstantCost(0.05).batch_time_s(verify) == 0.05
    runs = ideal.decode_run_time_s(num_decodes=512, decode_context_tokens=np.array([0, 9]), decode_draft_tokens=3584)
    assert list(runs) == [ideal.batch_time_s(verify)] * 2


@pytest.mark.parametrize("slug", ["deepseek-v2-lite", "gemma-3-12b", "llama-4-scout", "qwen3-next-80b-a3b"])
def test_layouts_price_the_drafts_queries(slug):
    """MLA, sliding-window, chunked-local and Mamba layers: drafts add attention (or recurrent) math;
    the terms still add up and a decode run still equals its steps."""
    cost = CalibratedCost.gpu_profile(H100, model(slug)).with_(tp=4 if slug == "llama-4-scout" else 1)
    plain = Batch(num_decodes=256, decode_context_tokens=256 * 300)
    verify = dataclasses.replace(plain, decode_draft_tokens=256 * 7)
    assert cost.batch_time_s(verify) > cost.batch_time_s(plain)
    terms = cost.step_terms(verify)
    assert terms.bound == "memory" or terms.terms["draft_attention"] > 0  # Qwen3-Next's experts: memory-bound
    assert terms.total_s == pytest.approx(cost.batch_time_s(verify), rel=1e-12)
    run = cost.decode_run_time_s(
        num_decodes=256, decode_context_tokens=np.array([256 * 300]), decode_draft_tokens=256 * 7
    )
    assert run[0] == cost.batch_time_s(verify)


# ---------------------------------------------------------------------------------------------
# CUDA graphs of a speculating engine (cudagraph.py C5, D1-D2, P1-P3)
# ---------------------------------------------------------------------------------------------


def test_capture_and_full_sizes_with_three_drafts():
    """S = 8, B = 2,048, k = 3 (q = 4): ceiling min(2 × 8 × 4, 512) = 64; ladder 1, 2, 4, 8, ..., 64;
    decode sizes 4 × {1, 2, 4, 8} (all in it). FULL: those rounded up to multiples of 4, at most
    4 × 8 = 32. The drafter's single-token passes: FULL at the sizes up to S = 8."""
    engine = spec_engine(3)
    assert cudagraph_capture_sizes(engine, H100) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert full_graph_sizes(engine, H100) == [4, 8, 16, 24, 32]
    assert draft_decode_graph_sizes(engine, H100) == [1, 2, 4, 8]


def test_dispatch_of_verification_steps():
    """5 decodes × 4 tokens = 20: FULL at 24 (6 requests' graph); one draft trimmed (19 tokens):
    PIECEWISE at 24; 8 × 4 = 32: FULL at 32; 64 tokens with a prompt chunk: PIECEWISE at 64; 65:
    none."""
    engine = spec_engine(3)
    assert is_uniform_decode(4, 5, 15, (), ())
    assert not is_uniform_decode(4, 5, 14, (), ())
    assert not is_uniform_decode(4, 5, 15, (1,), (100,))  # a one-token prompt continuation: 1, not 4
    assert not is_uniform_decode(1, 5, 5, (), ())  # drafts on an engine that does not speculate
    assert is_uniform_decode(1, 5, 0, (1,), (100,))
    assert cudagraph_dispatch(engine, H100, 20, True) == ("FULL", 24)
    assert cudagraph_dispatch(engine, H100, 19, False) == ("PIECEWISE", 24)
    assert cudagraph_dispatch(engine, H100, 32, True) == ("FULL", 32)
    assert cudagraph_dispatch(engine, H100, 64, False) == ("PIECEWISE", 64)
    assert cudagraph_dispatch(engine, H100, 65, False) == ("NONE", 65)
    with pytest.raises(ParameterError, match="multiple of 4"):
        cudagraph_dispatch(engine, H100, 19, True)


def test_the_cost_dispatches_verifications_as_vllm():
    """The same engine priced: the step's mode and padding follow the rules above."""
    cost = CalibratedCost.typical(H100, QWEN06, engine=spec_engine(3))
    assert cost.cudagraph_decode_query_len == 4 and cost.cudagraph_full_sizes == (4, 8, 16, 24, 32)
    cases = {
        Batch(num_decodes=5, decode_context_tokens=500, decode_draft_tokens=15): ("FULL", 24),
        Batch(num_decodes=5, decode_context_tokens=500, decode_draft_tokens=14): ("PIECEWISE", 24),
        Batch(num_decodes=5, decode_context_tokens=500): ("PIECEWISE", 8),  # 1 token a decode, not 4
        Batch(num_decodes=8, decode_context_tokens=800, decode_draft_tokens=24): ("FULL", 32),
        Batch(3, 300, (40,), (0,), decode_draft_tokens=9): ("PIECEWISE", 56),
        Batch(3, 300, (60,), (0,), decode_draft_tokens=9): ("NONE", 72),
    }
    for batch, (mode, padded) in cases.items():
        terms = cost.step_terms(batch)
        assert (terms.mode, terms.padded_tokens) == (mode, padded), batch
    plain = CalibratedCost.typical(H100, QWEN06, engine=EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8))
    # q = 1 (ladder 1, 2, 4, 8, 16): 5 decodes with 2 drafts each, 15 tokens, are not a one-token decode
    verifying = plain.step_terms(Batch(num_decodes=5, decode_context_tokens=500, decode_draft_tokens=10))
    assert (verifying.mode, verifying.padded_tokens) == ("PIECEWISE", 16)


def test_default_engine_with_drafts_keeps_its_ladder():
    """H100 defaults (S = 1,024, B = 8,192) with k = 3: ceiling min(2 × 1,024 × 4, 512) = 512; the
    decode sizes 4n (n <= 128) are all on the ladder, so the 51 sizes stay; FULL: each rounded up to a
    multiple of 4, 49 sizes (1, 2 and 4 all give 4). 100 decodes verifying 3 drafts (400 tokens) run FULL
    at 400; 150 (600 tokens) run without a graph."""
    engine = dataclasses.replace(EngineConfig.vllm_defaults(H100), num_speculative_tokens=3, speculative_method="mtp")
    sizes, full = cudagraph_capture_sizes(engine, H100), full_graph_sizes(engine, H100)
    assert len(sizes) == 51 and sizes[-1] == 512
    assert len(full) == 49 and full[:3] == [4, 8, 16] and all(s % 4 == 0 for s in full)
    assert cudagraph_dispatch(engine, H100, 400, True) == ("FULL", 400)
    assert cudagraph_dispatch(engine, H100, 600, True) == ("NONE", 600)


# ---------------------------------------------------------------------------------------------
# The proposer's terms, per method, on the ideal roofline (Qwen3-0.6B, H100)
# ---------------------------------------------------------------------------------------------

STEP = Batch(num_decodes=4, decode_context_tokens=4000, decode_draft_tokens=12)  # T = 16, R = 4


def test_eagle_terms_by_hand():
    """EAGLE head of Qwen3-0.6B: layer 1,024 × (16 + 16) × 128 + 16 × 128 × 1,024 + 3 × 1,024 ×
    3,072 = 15,728,640 weights; fc 2 × 1,024² = 2,097,152 (replicated); LM head 151,936 × 1,024 =
    155,582,464. Every part memory-bound at these sizes (bytes / 3.35e12):
    draft_prefill = layer 9.3902 µs + fc 1.2520 µs; draft_decode = 2 × the same;
    draft_lm_head = 3 × 92.885 µs."""
    eagle = Drafter("eagle", 3, QWEN06)
    assert (eagle.layer_params, eagle.fc_params, eagle.lm_head_params) == (15_728_640, 2_097_152, 155_582_464)
    layer_s, fc_s, lm_s = 15_728_640 * 2 / BW, 2_097_152 * 2 / BW, 155_582_464 * 2 / BW
    terms = drafter_terms(STEP, eagle, H100)
    assert tuple(terms) == DRAFTER_TERM_NAMES
    assert terms["draft_prefill"] == pytest.approx(layer_s + fc_s, rel=1e-12)
    assert terms["draft_decode"] == pytest.approx(2 * (layer_s + fc_s), rel=1e-12)
    assert terms["draft_lm_head"] == pytest.approx(3 * lm_s, rel=1e-12)
    assert terms["draft_lm_head"] == pytest.approx(278.65e-6, rel=1e-4)
    assert drafter_time_s(STEP, eagle, H100) == pytest.approx(sum(terms.values()), rel=1e-15)


def test_eagle3_terms_by_hand():
    """EAGLE-3: the layer's QKV reads 2H: 2,048 × 32 × 128 + 2,097,152 + 9,437,184 = 19,922,944;
    fc 3H² = 3,145,728 once per step (combine_hidden_states); its own LM head of 32,000 × 1,024."""
    eagle3 = Drafter("eagle3", 3, QWEN06, draft_vocab_size=32_000)
    assert (eagle3.layer_params, eagle3.fc_params, eagle3.lm_head_params) == (19_922_944, 3_145_728, 32_768_000)
    layer_s = 19_922_944 * 2 / BW
    terms = drafter_terms(STEP, eagle3, H100)
    assert terms["draft_prefill"] == pytest.approx(layer_s + 3_145_728 * 2 / BW, rel=1e-12)
    assert terms["draft_decode"] == pytest.approx(2 * layer_s, rel=1e-12)
    assert terms["draft_lm_head"] == pytest.approx(3 * 32_768_000 * 2 / BW, rel=1e-12)


def test_mtp_terms_by_hand():
    """MTP: the target's average layer, (596,049,920 − 151,936 × 1,024 tied embedding) / 28 =
    15,730,980.57 weights, eh_proj 2H² (replicated), the shared LM head V × H."""
    mtp = Drafter("mtp", 2, QWEN06)
    assert mtp.layer_params == pytest.approx((P06 - 155_582_464) / 28, rel=1e-15)
    layer_s, fc_s = mtp.layer_params * 2 / BW, 2_097_152 * 2 / BW
    terms = drafter_terms(STEP, mtp, H100)
    assert terms["draft_prefill"] == pytest.approx(layer_s + fc_s, rel=1e-12)
    assert terms["draft_decode"] == pytest.approx(layer_s + fc_s, rel=1e-12)  # k − 1 = 1 pass
    assert terms["draft_lm_head"] == pytest.approx(2 * 155_582_464 * 2 / BW, rel=1e-12)


def test_draft_model_terms_by_hand():
    """Qwen3-0.6B drafting for Qwen3-8B, k = 3: three memory-bound passes of the whole draft model
    (1,192,099,840 B / 3.35e12 = 355.85 µs each; the first over 16 + 4 = 20 tokens); its LM head
    is in its 2 × params per token, so draft_lm_head is 0."""
    draft = Drafter("draft_model", 3, "qwen3-8b", draft_model="qwen3-0.6b")
    terms = drafter_terms(STEP, draft, H100)
    assert terms["draft_prefill"] == pytest.approx(P06 * 2 / BW, rel=1e-12)
    assert terms["draft_decode"] == pytest.approx(2 * P06 * 2 / BW, rel=1e-12)
    assert terms["draft_lm_head"] == 0.0 and terms["draft_prefill"] == pytest.approx(355.85e-6, rel=1e-4)


def test_ngram_terms_by_hand():
    """The GPU scan reads (4,000 + 16) token ids of 4 B: 16,064 B / 3.35e12 = 4.795 ns on the
    roofline; a typical cost floors each of its two kernels at 4 µs (8 µs); V1's CPU lookup at
    1.06 ns a token adds 4,016 × 1.06 ns = 4.26 µs."""
    ngram = Drafter("ngram", 5, QWEN06)
    assert drafter_terms(STEP, ngram, H100)["ngram_scan"] == pytest.approx(16_064 / BW, rel=1e-12)
    typical = CalibratedCost.typical(H100, QWEN06)
    assert drafter_terms(STEP, ngram, H100, cost=typical)["ngram_scan"] == pytest.approx(2 * SMALL_KERNEL_S, rel=1e-12)
    assert round(NGRAM_CPU_S_PER_TOKEN_V1 * 1e9, 2) == 1.06
    cpu = Drafter("ngram", 5, QWEN06, ngram_cpu_s_per_token=NGRAM_CPU_S_PER_TOKEN_V1)
    assert drafter_terms(STEP, cpu, H100)["ngram_cpu"] == pytest.approx(4016 * NGRAM_CPU_S_PER_TOKEN_V1, rel=1e-12)


def test_the_first_pass_covers_the_prompt_chunks():
    """A prefill-heavy step: the head's first pass runs over all 2,048 chunk tokens (compute, with
    its attention to the chunk's context), the LM head only over the R = 2 requests' rows."""
    eagle = Drafter("eagle", 3, QWEN06)
    small = Batch(1, 100, (16,), (0,))
    big = Batch(1, 100, (2048,), (0,))
    t_small, t_big = drafter_terms(small, eagle, H100), drafter_terms(big, eagle, H100)
    assert t_big["draft_prefill"] > t_small["draft_prefill"]
    assert t_big["draft_lm_head"] == t_small["draft_lm_head"]  # R = 2 either way
    layer_flops = 2049 * 2 * 15_728_640 / FLOPS  # the ideal roofline: the layer's math over 2,049 tokens
    assert t_big["draft_prefill"] == pytest.approx(layer_flops + 2049 * 2 * 2_097_152 / FLOPS, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Wiring: a cost built for a speculating engine adds the proposer, named "drafter"
# ---------------------------------------------------------------------------------------------


def test_a_cost_for_a_speculating_engine_adds_the_drafter():
    engine = spec_engine(3, "eagle")
    cost = CalibratedCost.typical(H100, QWEN06, engine=engine)
    bare = cost.with_(drafter=None)
    assert cost.drafter == Drafter("eagle", 3, QWEN06)
    batch = Batch(num_decodes=5, decode_context_tokens=5000, decode_draft_tokens=15)
    drafter_s = drafter_time_s(batch, cost.drafter, H100, cost=cost)
    assert cost.batch_time_s(batch) == pytest.approx(bare.batch_time_s(batch) + drafter_s, rel=1e-12)
    terms = cost.step_terms(batch)
    assert tuple(terms.terms) == STEP_TERM_NAMES and terms.terms["drafter"] == pytest.approx(drafter_s, rel=1e-12)
    assert set(terms.drafter_terms) == set(DRAFTER_TERM_NAMES)
    assert terms.total_s == pytest.approx(cost.batch_time_s(batch), rel=1e-12)
    run = cost.decode_run_time_s(
        num_decodes=5, decode_context_tokens=np.array([5000, 5000, 6000]), decode_draft_tokens=15
    )
    assert run[0] == run[1] == cost.batch_time_s(batch)
    chunk = Batch(prefill_tokens=(300,), prefill_context_tokens=(0,))
    assert cost.step_time_s(300) == pytest.approx(cost.batch_time_s(chunk), rel=1e-12)
    assert "drafter" in repr(cost.step_terms(batch)) or terms.terms["drafter"] > 0
    assert cost.with_(drafter=None).drafter is None and CalibratedCost.typical(H100, QWEN06).drafter is None


def test_the_drafters_passes_run_in_their_own_graphs():
    """EAGLE's first pass runs as the target's step (FULL at 24); its two single-token passes run
    FULL at 8 (5 requests; sizes up to S = 8), so no launch term; a draft model runs no graph and
    pays the host launch of each of its 28 layers where its GPU work is shorter."""
    cost = CalibratedCost.typical(H100, QWEN06, engine=spec_engine(3, "eagle"))
    dc = cost._constants.drafter
    batch = Batch(num_decodes=5, decode_context_tokens=5000, decode_draft_tokens=15)
    assert dc.first.step_terms(batch).mode == "FULL" and dc.first.step_terms(batch).padded_tokens == 24
    step = Batch(num_decodes=5, decode_context_tokens=5000 + 20)
    assert (dc.rest.step_terms(step).mode, dc.rest.step_terms(step).padded_tokens) == ("FULL", 8)
    draft = CalibratedCost.typical(
        H100, model("qwen3-8b"), engine=spec_engine(3, "draft_model"), draft_model="qwen3-0.6b"
    )
    passes = draft._constants.drafter.first.step_terms(batch)
    assert passes.mode == "NONE" and passes.terms["eager_launch"] > 0  # 28 × 100 µs > its GPU work


def test_make_cost_and_the_draft_model():
    engine = spec_engine(2, "draft_model")
    with pytest.raises(ConfigError, match="draft_model="):
        make_cost("typical", H100, model("qwen3-8b"), engine=engine)
    with pytest.raises(ConfigError, match="draft_model="):
        CalibratedCost.typical(H100, model("qwen3-8b"), engine=engine)
    cost = make_cost("typical", H100, model("qwen3-8b"), engine=engine, draft_model="qwen3-0.6b")
    assert cost.drafter.draft_model == QWEN06  # type: ignore[attr-defined]
    ideal = make_cost("ideal", H100, model("qwen3-8b"), engine=engine, draft_model=QWEN06)
    assert isinstance(ideal, IdealCost) and ideal.drafter is not None
    batch = Batch(num_decodes=4, decode_context_tokens=4000, decode_draft_tokens=8)
    plain = IdealCost(H100, model("qwen3-8b"))
    assert ideal.batch_time_s(batch) == pytest.approx(
        plain.batch_time_s(batch) + drafter_time_s(batch, ideal.drafter, H100), rel=1e-12
    )
    # ignored for another method, so a sweep may pass it everywhere
    eagle = make_cost("typical", H100, QWEN06, engine=spec_engine(2, "eagle"), draft_model="qwen3-0.6b")
    assert eagle.drafter.draft_model is None  # type: ignore[attr-defined]
    plain_engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8)
    assert make_cost("typical", H100, QWEN06, engine=plain_engine).drafter is None  # type: ignore[attr-defined]


def test_graphs_for_follows_the_simulated_engine():
    """simulate() calls graphs_for: the drafter follows the engine's k and method, a draft model
    carries over, and an engine without speculation drops it."""
    cost = CalibratedCost.typical(H100, model("qwen3-8b"), engine=spec_engine(3, "draft_model"), draft_model=QWEN06)
    five = cost.graphs_for(spec_engine(5, "draft_model"))
    assert five.drafter.num_speculative_tokens == 5 and five.drafter.draft_model == QWEN06  # type: ignore[union-attr]
    assert five.cudagraph_decode_query_len == 6
    assert cost.graphs_for(spec_engine(3, "draft_model")) is cost
    assert cost.graphs_for(EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8)).drafter is None
    assert cost.graphs_for(spec_engine(2, "mtp")).drafter == Drafter("mtp", 2, model("qwen3-8b"))
    unrecorded = CalibratedCost.typical(H100, QWEN06)
    assert unrecorded.graphs_for(spec_engine(3)) is unrecorded  # no engine recorded: nothing to follow


def test_drafter_refusals():
    with pytest.raises(ConfigError, match="one of"):
        Drafter("medusa", 3, QWEN06)
    with pytest.raises(ConfigError, match="num_speculative_tokens"):
        Drafter("eagle", 0, QWEN06)
    with pytest.raises(ConfigError, match="draft_model="):
        Drafter("draft_model", 3, QWEN06)
    with pytest.raises(ConfigError, match="only with speculative_method='draft_model'"):
        Drafter("eagle", 3, QWEN06, draft_model=QWEN06)
    with pytest.raises(ConfigError, match="EAGLE-3"):
        Drafter("eagle", 3, QWEN06, draft_vocab_size=32_000)
    with pytest.raises(ConfigError, match="n-gram"):
        Drafter("mtp", 3, QWEN06, ngram_cpu_s_per_token=1e-9)
    with pytest.raises(ConfigError, match=r"prices 'qwen3-0\.6b'"):
        CalibratedCost(hardware=H100, model=QWEN06, drafter=Drafter("eagle", 3, "qwen3-8b"))
    cost = CalibratedCost.typical(H100, QWEN06, engine=spec_engine(3))
    with pytest.raises(ConfigError, match="1 \\+ k"):
        cost.with_(drafter=Drafter("eagle3", 2, QWEN06))
    with pytest.raises(ParameterError, match="multiples of 4"):
        cost.with_(cudagraph_full_sizes=(4, 6))
    with pytest.raises(ParameterError, match="CalibratedCost"):
        drafter_time_s(STEP, Drafter("eagle", 3, QWEN06), H100, cost=IdealCost(H100, QWEN06))


@settings(max_examples=40, deadline=None)
@given(
    decodes=st.integers(1, 256),
    context=st.integers(0, 3000),
    drafted=st.integers(0, 7),
    chunk=st.integers(0, 1500),
    method=st.sampled_from(["ngram", "eagle", "eagle3", "mtp"]),
)
def test_drafts_never_make_a_step_cheaper_and_the_terms_add_up(decodes, context, drafted, chunk, method):
    cost = _SPEC_COSTS[method]
    k = cost.drafter.num_speculative_tokens  # type: ignore[union-attr]
    drafts = decodes * min(drafted, k)
    chunks = ((chunk,), (context,)) if chunk else ((), ())
    fewer = Batch(decodes, decodes * context, *chunks, decode_draft_tokens=max(0, drafts - decodes))
    batch = Batch(decodes, decodes * context, *chunks, decode_draft_tokens=drafts)
    assert cost.batch_time_s(batch) >= cost.batch_time_s(fewer)
    terms = cost.step_terms(batch)
    assert terms.total_s == pytest.approx(cost.batch_time_s(batch), rel=1e-12)
    assert all(v >= 0 for v in terms.terms.values()) and terms.terms["drafter"] > 0


_SPEC_COSTS = {
    method: CalibratedCost.typical(
        H100, model("llama-3.1-8b"), engine=spec_engine(7 if method == "ngram" else 3, method, max_num_seqs=256)
    )
    for method in ("ngram", "eagle", "eagle3", "mtp")
}


if __name__ == "__main__":  # write the baseline table of the code at hand
    Path(sys.argv[1]).write_text(json.dumps(baseline_table(), separators=(",", ":")))
