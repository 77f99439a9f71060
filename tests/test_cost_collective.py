"""budgetlab.cost.collective: vLLM 0.33's all-reduce dispatch and its fitted price.

The refit test reads the published rows in ../shared/data/real/allreduce.csv (skipped in a user's
clone) and checks that the shipped constants are what those rows give; run it with ``-s`` to see
each fit's median and largest relative error.
"""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from budgetlab.catalog import hardware
from budgetlab.cost import collective
from budgetlab.cost.collective import (
    ALGORITHMS,
    ALL_REDUCE_FITS,
    EAGER_EXTRA_S,
    MiB,
    all_reduce_algorithm,
    all_reduce_s,
)
from budgetlab.errors import ParameterError

from conftest import shared_real_file

H100 = hardware("h100-sxm")
A100 = hardware("a100-80gb-sxm")
PCIE = hardware("h100-pcie")
KiB = 1024


def _fit(kernel: str, tp: int, nbytes: float) -> float:
    fit = ALL_REDUCE_FITS[(kernel, tp)]
    return fit.latency_s + nbytes / fit.bandwidth_bytes_per_s


# --- the dispatch ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hw", "tp", "nbytes", "expected"),
    [
        (H100, 4, 2 * MiB, "flashinfer"),  # FlashInfer: B <= 2 MiB at TP4 on sm90
        (H100, 4, 2 * MiB + 16, "custom_two_shot"),
        (H100, 4, 8 * MiB - 16, "custom_two_shot"),  # custom: B < 8 MiB
        (H100, 4, 8 * MiB, "symm_mem_multimem"),
        (H100, 4, 32 * MiB, "symm_mem_multimem"),  # symmetric memory: B <= 32 MiB at TP4
        (H100, 4, 32 * MiB + 16, "nccl"),
        (H100, 6, 256 * KiB - 16, "custom_one_shot"),  # no FlashInfer at TP6
        (H100, 6, 256 * KiB, "custom_two_shot"),
        (H100, 6, 512 * KiB, "symm_mem_multimem"),  # custom limit 512 KiB at TP6
        (H100, 8, 512 * KiB, "flashinfer"),
        (H100, 8, 512 * KiB + 16, "symm_mem_multimem"),
        (H100, 2, 64 * MiB, "flashinfer"),
        (H100, 2, 64 * MiB + 16, "nccl"),
        (H100, 3, 1024, "nccl"),  # no custom kernel for 3 GPUs
        (A100, 4, 512 * KiB - 16, "custom_one_shot"),
        (A100, 4, 512 * KiB, "custom_two_shot"),
        (A100, 8, 256 * KiB, "custom_two_shot"),
        (A100, 4, 8 * MiB, "nccl"),  # no symmetric memory on sm80
        (PCIE, 2, 1024, "custom_one_shot"),
        (PCIE, 2, 8 * MiB, "nccl"),
        (PCIE, 4, 1024, "nccl"),  # custom AR needs NVLink beyond two GPUs
        (H100, 1, 1e6, "none"),
        (H100, 4, 0, "none"),
    ],
)
def test_algorithm_follows_vllm_rules(hw, tp, nbytes, expected):
    assert all_reduce_algorithm(hw, tp=tp, message_bytes=nbytes) == expected


def test_every_algorithm_name_is_listed():
    names = {
        all_reduce_algorithm(hw, tp=tp, message_bytes=b)
        for hw in (H100, A100, PCIE, hardware("b200"), hardware("mi300x"))
        for tp in (1, 2, 3, 4, 6, 8)
        for b in np.geomspace(16, 2**30, 40).round()
    }
    # Symmetric-memory two-shot (TP2 on sm90, TP2/TP4 on sm100) is reachable only without
    # FlashInfer, whose limits cover every size it would take.
    assert names == set(ALGORITHMS) - {"symm_mem_two_shot"}


# --- the price ------------------------------------------------------------------------------


def test_hand_worked_values():
    # H100 TP4, 32 tokens × 8192 × 2 B: FlashInfer, priced as the fastest kernel (one-shot here).
    b = 32 * 8192 * 2
    assert all_reduce_s(H100, tp=4, message_bytes=b) == pytest.approx(6.30997e-6 + b / 1.30607e11)
    assert all_reduce_s(H100, tp=4, message_bytes=b) == pytest.approx(10.324e-6, rel=1e-4)
    # 2048 tokens: multimem, 13.4339 us + 32 MiB / 215.625 GB/s = 169.05 us.
    assert all_reduce_s(H100, tp=4, message_bytes=32 * MiB) == pytest.approx(169.05e-6, rel=1e-4)
    # A100 at the 8 MiB boundary: NCCL, H100's fit with the byte term × 450/300.
    expected = 1.37325e-05 + 8 * MiB / 1.81163e11 * 1.5
    assert all_reduce_s(A100, tp=4, message_bytes=8 * MiB) == pytest.approx(expected)
    # Just below it: custom two-shot, same scaling.
    below = 8 * MiB - 16
    assert all_reduce_s(A100, tp=4, message_bytes=below) == pytest.approx(1.24171e-05 + below / 1.38067e11 * 1.5)


def test_derived_tp_scales_the_byte_term_by_traffic():
    # TP8 multimem: the TP6 fit unchanged (traffic 1 per byte); TP8 one-shot on A100: TP6 × 7/5.
    fit = ALL_REDUCE_FITS[("symm_mem_multimem", 6)]
    b = 4 * MiB
    assert all_reduce_s(H100, tp=8, message_bytes=b) == pytest.approx(fit.latency_s + b / fit.bandwidth_bytes_per_s)
    one = ALL_REDUCE_FITS[("custom_one_shot", 6)]
    b = 128 * KiB
    got = all_reduce_s(A100, tp=8, message_bytes=b)
    assert got == pytest.approx(one.latency_s + b * 7 / 5 / one.bandwidth_bytes_per_s * 1.5)


def test_pcie_scales_latency_and_bandwidth_from_the_catalog():
    b = 1 * MiB
    expected = (
        _fit("custom_one_shot", 2, 0) * 25 / 10
        + b / ALL_REDUCE_FITS[("custom_one_shot", 2)].bandwidth_bytes_per_s * 450 / 64
    )
    assert all_reduce_s(PCIE, tp=2, message_bytes=b) == pytest.approx(expected)


def test_h200_prices_as_h100():
    b = np.geomspace(16, 2**28, 30)
    for tp in (2, 4, 8):
        np.testing.assert_array_equal(
            all_reduce_s(hardware("h200-sxm"), tp=tp, message_bytes=b), all_reduce_s(H100, tp=tp, message_bytes=b)
        )


def test_zero_for_one_gpu_or_no_bytes():
    assert all_reduce_s(H100, tp=1, message_bytes=1e9) == 0.0
    assert all_reduce_s(H100, tp=1, message_bytes=1e9, cuda_graph=False) == 0.0
    assert all_reduce_s(H100, tp=8, message_bytes=0, cuda_graph=False) == 0.0
    assert isinstance(all_reduce_s(H100, tp=4, message_bytes=1024), float)


@pytest.mark.parametrize("hw", [H100, A100, PCIE, hardware("b200"), hardware("l40s")])
@pytest.mark.parametrize("tp", [2, 4, 6, 8])
def test_monotone_in_bytes_within_each_algorithm(hw, tp):
    b = np.geomspace(16, 2**31, 400).round()
    t = all_reduce_s(hw, tp=tp, message_bytes=b)
    names = np.array([all_reduce_algorithm(hw, tp=tp, message_bytes=x) for x in b])
    same = names[1:] == names[:-1]
    assert np.all(np.diff(t)[same] >= 0)
    assert np.all(t > 0)


def test_monotone_across_algorithms_where_vllm_limits_allow():
    # The documented drops: TP4's custom limit (8 MiB), where the two-shot kernel is slower than
    # what follows it (H100: 73 us to multimem's 52 us; A100: 104 us to NCCL's 83 us).
    b = np.geomspace(16, 2**31, 400).round()
    for hw, tp in [(H100, 2), (H100, 8), (A100, 2), (PCIE, 2), (PCIE, 4)]:
        assert np.all(np.diff(all_reduce_s(hw, tp=tp, message_bytes=b)) >= 0), (hw.slug, tp)
    for hw in (H100, A100):
        low, high = np.asarray(all_reduce_s(hw, tp=4, message_bytes=[8 * MiB - 16, 8 * MiB]))
        assert high < low


def test_eager_adds_the_launch_to_every_call():
    b = np.geomspace(16, 2**30, 50)
    for tp in (2, 4, 6, 8):
        graph = all_reduce_s(H100, tp=tp, message_bytes=b)
        eager = all_reduce_s(H100, tp=tp, message_bytes=b, cuda_graph=False)
        assert np.all(eager >= graph)
        np.testing.assert_allclose(eager - graph, EAGER_EXTRA_S, rtol=1e-9, atol=1e-15)


def test_vectorized_equals_scalar():
    b = np.array([[0, 16, 4096, 300_000], [2 * MiB, 8 * MiB, 33 * MiB, 1e9]])
    for hw in (H100, A100, PCIE):
        for tp in (1, 2, 4, 6, 8):
            for graph in (True, False):
                got = all_reduce_s(hw, tp=tp, message_bytes=b, cuda_graph=graph)
                assert isinstance(got, np.ndarray) and got.shape == b.shape
                one = [all_reduce_s(hw, tp=tp, message_bytes=float(x), cuda_graph=graph) for x in b.ravel()]
                np.testing.assert_array_equal(got.ravel(), one)
    assert np.shape(all_reduce_s(H100, tp=4, message_bytes=[1024.0])) == (1,)


def test_reference_link_is_the_catalog_h100():
    assert H100.interconnect_latency_s == collective._REFERENCE_LATENCY_S
    assert H100.interconnect_bandwidth_bytes_per_s == collective._REFERENCE_BANDWIDTH_BYTES_PER_S


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tp": 0}, "tp must be an int >= 1"),
        ({"tp": 2.5}, "tp must be"),
        ({"tp": True}, "tp must be"),
        ({"message_bytes": -1}, "message_bytes must be finite numbers of bytes >= 0"),
        ({"message_bytes": float("nan")}, "message_bytes must be"),
        ({"message_bytes": "1 MiB"}, "message_bytes must be"),
        ({"message_bytes": [1, None]}, "message_bytes must be"),
        ({"message_bytes": 1e20}, "at most"),
        ({"hardware": "h100-sxm"}, "HardwareSpec"),
        ({"cuda_graph": 1}, "cuda_graph must be True or False"),
    ],
)
def test_bad_input_raises(kwargs, match):
    args = {"hardware": H100, "tp": 4, "message_bytes": 1024, **kwargs}
    with pytest.raises(ParameterError, match=match):
        all_reduce_s(args.pop("hardware"), **args)
    if "cuda_graph" not in kwargs:
        args = {"hardware": H100, "tp": 4, "message_bytes": 1024, **kwargs}
        with pytest.raises(ParameterError, match=match):
            all_reduce_algorithm(args.pop("hardware"), **args)


def test_algorithm_takes_one_message():
    with pytest.raises(ParameterError, match="one number of bytes"):
        all_reduce_algorithm(H100, tp=4, message_bytes=[1024, 2048])  # type: ignore[arg-type]


# --- the refit from the published rows ------------------------------------------------------

_PR_IMPLEMENTATION = {
    "ca_1stage": "custom_one_shot",
    "ca_2stage": "custom_two_shot",
    "symm_mem_multimem": "symm_mem_multimem",
    "symm_mem_two_shot": "symm_mem_two_shot",
    "pynccl": "nccl",
}


def _weighted_fit(nbytes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """``(latency_s, bandwidth)`` minimizing the relative error of ``a + B / bw``."""
    weights = 1.0 / seconds
    design = np.stack([np.ones_like(nbytes), nbytes], axis=1) * weights[:, None]
    intercept, slope = np.linalg.lstsq(design, seconds * weights, rcond=None)[0]
    return float(intercept), float(1.0 / slope)


def _published_rows() -> list[dict[str, str]]:
    with shared_real_file("allreduce.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_shipped_constants_equal_the_refit(capsys):
    rows = _published_rows()
    groups: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for row in rows:
        point = (float(row["message_bytes"] or "nan"), float(row["latency_us"]) * 1e-6)
        if "PR #24111" in row["source"]:
            groups.setdefault((_PR_IMPLEMENTATION[row["implementation"]], int(row["tp"])), []).append(point)
        elif row["source_kind"].startswith("repo-file") and row["tp"] == "2" and point[0] < 8 * MiB:
            groups.setdefault(("custom_one_shot", 2), []).append(point)
    assert set(groups) == set(ALL_REDUCE_FITS)
    lines = ["kernel             tp  rows  latency_us  bandwidth_GB/s  median_rel_err  max_rel_err"]
    for key, points in sorted(groups.items()):
        nbytes, seconds = (np.array(column) for column in zip(*points, strict=True))
        latency_s, bandwidth = _weighted_fit(nbytes, seconds)
        shipped = ALL_REDUCE_FITS[key]
        assert shipped.latency_s == pytest.approx(latency_s, rel=1e-5), key
        assert shipped.bandwidth_bytes_per_s == pytest.approx(bandwidth, rel=1e-5), key
        error = np.abs(latency_s + nbytes / bandwidth - seconds) / seconds
        lines.append(
            f"{key[0]:<18} {key[1]:>2} {len(points):>5} {latency_s * 1e6:>11.2f} {bandwidth / 1e9:>15.1f}"
            f" {np.median(error):>15.3f} {error.max():>12.3f}"
        )
        assert np.median(error) < 0.05 and error.max() < 0.2, key

    # Eager: SGLang PR #2904's vLLM custom all-reduce (float32 element counts) minus graph time.
    extra = []
    for row in rows:
        if "sglang" not in row["source"] or not row["implementation"].startswith("vllm") or row["tp"] not in ("2", "4"):
            continue
        size = 4 * int(re.search(r"\d+", row["message_desc"]).group())  # type: ignore[union-attr]
        if size <= 128 * KiB:
            tp = int(row["tp"])
            kernel = "custom_one_shot" if tp == 2 or size < 512 * KiB else "custom_two_shot"
            extra.append(float(row["latency_us"]) * 1e-6 - _fit(kernel, tp, size))
    assert len(extra) == 6
    assert pytest.approx(float(np.median(extra)), rel=1e-5) == EAGER_EXTRA_S
    lines.append(f"eager extra: median {np.median(extra) * 1e6:.2f} us of {sorted(round(e * 1e6, 2) for e in extra)}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_dispatch_against_the_held_aside_rows(capsys):
    """The whole model (dispatch + fits + derived TP8) against rows it was not fitted to:
    aiconfigurator's TP4 look-ups (graph-like) and SGLang's TP8 vLLM rows (eager)."""
    rows = _published_rows()
    lines = []
    aiconf = [r for r in rows if r["source_kind"].startswith("repo-file") and r["tp"] == "4"]
    b = np.array([float(r["message_bytes"]) for r in aiconf])
    measured = np.array([float(r["latency_us"]) * 1e-6 for r in aiconf])
    error = np.abs(all_reduce_s(H100, tp=4, message_bytes=b) - measured) / measured
    lines.append(f"aiconfigurator TP4 ({len(b)} rows): median rel err {np.median(error):.3f}, max {error.max():.3f}")
    assert np.median(error) < 0.3
    sglang = [r for r in rows if "sglang" in r["source"] and r["implementation"].startswith("vllm") and r["tp"] == "8"]
    b = np.array([4.0 * int(re.search(r"\d+", r["message_desc"]).group()) for r in sglang])  # type: ignore[union-attr]
    measured = np.array([float(r["latency_us"]) * 1e-6 for r in sglang])
    # What the custom kernel costs at TP8 (derived from TP6), launched eagerly.
    kernel = np.where(b < 256 * KiB, "custom_one_shot", "custom_two_shot")
    graph = [float(collective._kernel_s(H100, k, 8, np.array(x))) for k, x in zip(kernel, b, strict=True)]
    predicted = np.array(graph) + EAGER_EXTRA_S
    error = np.abs(predicted - measured) / measured
    lines.append(
        f"SGLang TP8 eager ({len(b)} rows, derived TP8): median rel err {np.median(error):.3f}, max {error.max():.3f}"
    )
    assert np.median(error) < 0.3
    with capsys.disabled():
        print("\n" + "\n".join(lines))
