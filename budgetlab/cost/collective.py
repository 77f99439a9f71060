"""Tensor-parallel all-reduce time as vLLM 0.33 runs it: which kernel a message takes, and its price.

A tensor-parallel layer ends in an all-reduce of the layer's output activations, ``n × hidden ×
b`` bytes on every GPU. vLLM does not run one algorithm for every size: it tries a chain of
implementations and takes the first that accepts the tensor. :func:`all_reduce_algorithm` names
the one it takes, and :func:`all_reduce_s` prices it with ``latency + bytes / bandwidth``, fitted
per (kernel, tp) to published H100 measurements.

The dispatch (vLLM 0.33.0, default settings)
--------------------------------------------
``CudaCommunicator.all_reduce`` (``vllm/distributed/device_communicators/cuda_communicator.py``)
tries, in order: FlashInfer, NCCL symmetric memory, quick reduce (ROCm), AITER (ROCm), vLLM's
custom all-reduce, PyTorch symmetric memory, and last PyNCCL. With default environment variables
(``vllm/envs.py``) this leaves, for a message of ``B`` bytes at TP ``t`` on one node:

1. **FlashInfer** (``"flashinfer"``): ``VLLM_ALLREDUCE_USE_FLASHINFER`` defaults to 1
   (``envs.py``); ``FlashInferAllReduce.should_use_fi_ar`` (``flashinfer_all_reduce.py``) takes
   ``B <= max_workspace_size``, whose default is ``FI_ALLREDUCE_FUSION_MAX_SIZE_MB[capability][t]``
   (``vllm/compilation/passes/fusion/allreduce_rms_fusion.py``): sm90 (H100/H200) 64 MiB at TP2,
   2 MiB at TP4, 0.5 MiB at TP8; sm100 (B200) 64, 32 and 1 MiB; no other TP and no other GPU
   (A100 is sm80: absent, so off). The single-node backend is "mnnvl", falling back to "trtllm"
   (``_resolve_fi_ar_backend``); both need NVSwitch/NVLink peers (vLLM's own warning: expected to
   fail "on GPUs without NVSwitch (e.g., NVLink bridge-only or PCIe topologies)"), so PCIe is off.
   At the default ``-O2`` the compile pass ``fuse_allreduce_rms`` (``vllm/config/vllm.py``,
   ``enable_allreduce_rms_fusion``: TP > 1, sm90 or sm100, FlashInfer installed) fuses the same
   kernel with the following residual add and RMSNorm under the same size limits.
   FlashInfer is assumed installed (a dependency of vLLM's CUDA wheels; not verified in the
   extracted source read here); without it these sizes fall through to the next steps.
2. NCCL symmetric memory: off (``VLLM_USE_NCCL_SYMM_MEM`` defaults to 0;
   ``should_nccl_symm_mem_allreduce`` in ``all_reduce_utils.py``).
3. **Custom all-reduce** (``CustomAllreduce.should_custom_ar``, ``custom_all_reduce.py``): world
   sizes 2, 4, 6, 8; on one node only when ``t == 2`` (PCIe peer-to-peer allowed) or the GPUs are
   fully connected (NVLink/NVSwitch; ``__init__`` disables it on more than two PCIe GPUs); and
   ``B < max_size``. ``max_size`` is 8 MiB, lowered when PyTorch symmetric memory is usable to
   ``CUSTOM_ALL_REDUCE_MAX_SIZES`` (``all_reduce_utils.py``): sm90 8 MiB at TP2 and TP4, 512 KiB at
   TP6, 256 KiB at TP8; sm100 2, 2, 1, 1 MiB. The kernel (``CustomAllreduce::allreduce`` in
   ``csrc/custom_all_reduce.cuh``, compiled, read from public copies) is one-shot
   (``"custom_one_shot"``: each GPU reads every peer's whole buffer) at ``t == 2`` and, fully
   connected, when ``t <= 4 and B < 512 KiB`` or ``t <= 8 and B < 256 KiB``; otherwise two-shot
   (``"custom_two_shot"``: reduce-scatter then all-gather).
4. **PyTorch symmetric memory** (``SymmMemCommunicator``, ``symm_mem.py``;
   ``VLLM_ALLREDUCE_USE_SYMM_MEM`` defaults to 1): needs multicast (NVSwitch) and a capability in
   ``SYMM_MEM_ALL_REDUCE_MAX_SIZES``; takes bf16 tensors with ``B <= max`` (sm90: 64, 32, 64,
   64 MiB at TP 2, 4, 6, 8; sm100: 8, 32, 128, 128 MiB). It runs ``multimem_all_reduce_``
   (``"symm_mem_multimem"``) at the world sizes of ``_WORLD_SIZES_MULTIMEM`` (sm90: 4, 6, 8;
   sm100: 6, 8) and ``two_shot_all_reduce_`` (``"symm_mem_two_shot"``) otherwise.
5. **NCCL** (``"nccl"``, ``PyNcclCommunicator.all_reduce``, ``pynccl.py``): everything else,
   including every TP other than 2, 4, 6, 8.

So on H100/H200 SXM: TP2 FlashInfer to 64 MiB (covering the custom and symmetric-memory
limits), then NCCL; TP4 FlashInfer to 2 MiB, custom two-shot below 8 MiB, multimem to 32 MiB,
NCCL; TP6 custom one-shot below 256 KiB, two-shot below 512 KiB, multimem to 64 MiB, NCCL; TP8
FlashInfer to 0.5 MiB, multimem to 64 MiB, NCCL. On A100 (no FlashInfer, no symmetric memory): custom
all-reduce below 8 MiB at TP 2/4/6/8, then NCCL. On PCIe: custom one-shot below 8 MiB at TP2
only (peer-to-peer assumed; vLLM tests it at start-up), NCCL otherwise. The GPU generation is
read from the hardware's slug and name (``h100``/``h200`` sm90, ``b200``/``b300`` sm100,
``a100`` sm80, ``mi300`` ROCm); a GPU is fully connected when its ``interconnect`` names
NVSwitch, NVLink, Infinity Fabric or XGMI. ROCm (MI300X) follows the custom-then-NCCL rule of an
unknown GPU: quick reduce is off (``VLLM_ROCM_QUICK_REDUCE_QUANTIZATION`` "NONE") and AITER's
all-reduce is not modelled apart. Not modelled: the 16-byte-multiple and dtype gates (an fp16
model skips symmetric memory, whose buffer is bf16, and goes to NCCL), FlashInfer's
per-workspace token limit, multi-node groups.

The price
---------
Each kernel costs ``latency_s + B / bandwidth_bytes_per_s`` per call, with ``cuda_graph=True``
(replayed inside a CUDA graph, as vLLM runs decode and piecewise steps). Where the numbers come
from:

* **Measured** (``../shared/data/real/allreduce.csv``, not shipped): vLLM PR #24111's H100 tables
  (CUDA-graph replays of ``benchmark_device_communicators.py``, one-shot, two-shot, multimem,
  symmetric two-shot and PyNCCL at TP4 and TP6, 0.5-4 MiB, 1 µs resolution); NVIDIA
  aiconfigurator's H100 custom all-reduce look-ups as exported by inference-sim at TP2 (hidden
  5120 and 7168, 10 KiB-56 MiB); SGLang PR #2904's vLLM custom all-reduce without CUDA graphs
  (TP 2/4/8, 2 KiB-4 MiB of float32).
* **Fitted** (:data:`ALL_REDUCE_FITS`): per (kernel, tp), least squares on relative error
  (weights ``1 / latency``) of ``latency = a + B / bw`` over the PR #24111 rows of that
  implementation and TP; for one-shot at TP2, the aiconfigurator TP2 rows below 8 MiB (TP2's
  custom-AR limit) and PR #24111's single TP2 row. :data:`EAGER_EXTRA_S` is the median, over
  SGLang's vLLM rows at TP2 and TP4 of at most 128 KiB (where the kernel cannot hide the launch),
  of measured minus fitted graph time: the per-call launch and input copy of an eager
  all-reduce. ``cuda_graph=False`` adds it to every kernel (measured for custom all-reduce only;
  SGLang's larger messages, timed back to back, hide it, so it is an upper bound there).
* **Derived**: (a) a (kernel, tp) without a fit takes the fit of the nearest fitted TP (the
  larger on a tie) with the byte term scaled by the kernel's traffic per GPU: ``tp − 1`` for
  one-shot, ``2 (tp − 1) / tp`` for two-shot, symmetric two-shot and NCCL's ring, 1 for
  multimem (its fitted TP4 and TP6 slopes agree within 3 %). (b) Other hardware scales the H100
  fits by the catalog's link figures: latency × ``interconnect_latency_s / 10 µs`` and byte term
  × ``450 GB/s / interconnect_bandwidth_bytes_per_s`` (H100 SXM's catalog figures, so H100 and
  H200 SXM get the fits unchanged; A100 a 1.5× byte term; PCIe 2.5× latency and 7× byte term).
  (c) FlashInfer has no measurement in the data: it is priced as the fastest of the five fitted
  kernels at that TP and size, since vLLM's size limits were tuned to pick it where it wins (its
  fused residual-add + RMSNorm saves a further kernel, left to the caller).

The time is not monotone in ``B`` everywhere: at TP4 the custom limit (8 MiB) hands a two-shot
call (H100: 73 µs) to a faster kernel (multimem, 52 µs; on A100 NCCL), as vLLM's limits do;
PR #24111's 4 MiB rows already show two-shot slower than both.

Against the catalog ring formula ``2 (tp − 1) / tp × B / 450 GB/s + 10 µs`` on H100 TP4: 10.3 µs
instead of 11.7 µs at 512 KiB (32 tokens of a 8192-wide bf16 model), 169 µs instead of 122 µs at
32 MiB (2048 tokens, multimem); aiconfigurator's look-up gives 11.4 and 173 µs.

Sources: vLLM 0.33.0 source as cited above; vLLM PR #24111 and SGLang PR #2904 descriptions;
inference-sim ``training/kernel_profiles`` at commit 0ba6f03 (aiconfigurator look-ups).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from budgetlab._checks import MAX_MEMORY_BYTES, finite_array, flag, int_at_least
from budgetlab.cudagraph import is_data_center_blackwell
from budgetlab.errors import ParameterError
from budgetlab.specs import HardwareSpec

__all__ = [
    "ALGORITHMS",
    "ALL_REDUCE_FITS",
    "EAGER_EXTRA_S",
    "AllReduceFit",
    "all_reduce_algorithm",
    "all_reduce_s",
    "fused_with_norm",
]

KiB: Final = 1024
MiB: Final = 1024 * 1024

#: Every name :func:`all_reduce_algorithm` returns.
ALGORITHMS: Final = (
    "none",
    "flashinfer",
    "custom_one_shot",
    "custom_two_shot",
    "symm_mem_multimem",
    "symm_mem_two_shot",
    "nccl",
)
#: The kernels with a fitted price (FlashInfer is priced as the fastest of them).
_KERNELS: Final = ("custom_one_shot", "custom_two_shot", "symm_mem_multimem", "symm_mem_two_shot", "nccl")


class AllReduceFit(NamedTuple):
    """One fitted all-reduce price: ``latency_s + message_bytes / bandwidth_bytes_per_s`` [s]."""

    latency_s: float
    """Fixed time per call [s] (the fit's intercept)."""
    bandwidth_bytes_per_s: float
    """Message bytes per second of the call beyond the fixed time [B/s] (the inverse slope)."""
    source: str
    """The rows fitted."""


_PR24111 = "vLLM PR #24111 H100 tables, CUDA-graph replay, 6 sizes 0.5-4 MiB"
_AICONF_TP2 = (
    "aiconfigurator H100 custom all-reduce look-ups (inference-sim kernel_profiles 62 and 65, TP2) "
    "below 8 MiB, 20 rows, and vLLM PR #24111's TP2 one-shot row"
)

#: H100 SXM, NVLink 4 through NVSwitch, bf16, cuda_graph=True; refitted from the published rows
#: by tests/test_cost_collective.py.
ALL_REDUCE_FITS: Final[Mapping[tuple[str, int], AllReduceFit]] = MappingProxyType(
    {
        ("custom_one_shot", 2): AllReduceFit(4.26953e-06, 2.40030e11, _AICONF_TP2),
        ("custom_one_shot", 4): AllReduceFit(6.30997e-06, 1.30607e11, f"{_PR24111}, ca_1stage TP4"),
        ("custom_one_shot", 6): AllReduceFit(4.86327e-06, 6.41743e10, f"{_PR24111}, ca_1stage TP6"),
        ("custom_two_shot", 4): AllReduceFit(1.24171e-05, 1.38067e11, f"{_PR24111}, ca_2stage TP4"),
        ("custom_two_shot", 6): AllReduceFit(1.14479e-05, 1.68570e11, f"{_PR24111}, ca_2stage TP6"),
        ("symm_mem_multimem", 4): AllReduceFit(1.34339e-05, 2.15625e11, f"{_PR24111}, symm_mem_multimem TP4"),
        ("symm_mem_multimem", 6): AllReduceFit(1.06604e-05, 2.09801e11, f"{_PR24111}, symm_mem_multimem TP6"),
        ("symm_mem_two_shot", 4): AllReduceFit(1.57832e-05, 3.32490e11, f"{_PR24111}, symm_mem_two_shot TP4"),
        ("symm_mem_two_shot", 6): AllReduceFit(1.37188e-05, 1.48528e11, f"{_PR24111}, symm_mem_two_shot TP6"),
        ("nccl", 4): AllReduceFit(1.37325e-05, 1.81163e11, f"{_PR24111}, pynccl TP4"),
        ("nccl", 6): AllReduceFit(1.76136e-05, 1.09094e11, f"{_PR24111}, pynccl TP6"),
    }
)

#: Extra time of an all-reduce launched outside a CUDA graph [s]: SGLang PR #2904's vLLM custom
#: all-reduce rows (TP2, TP4, <= 128 KiB) minus the fitted graph-replay time, median of 6.
EAGER_EXTRA_S: Final = 3.32938e-06

#: The catalog's H100 SXM link figures the fits are scaled against (data/catalog/hardware.csv).
_REFERENCE_LATENCY_S: Final = 10e-6
_REFERENCE_BANDWIDTH_BYTES_PER_S: Final = 450e9


def _traffic(kernel: str, tp: int) -> float:
    """Bytes each GPU moves per message byte, up to a constant, for ``kernel`` at ``tp`` [-]."""
    if kernel == "custom_one_shot":
        return float(tp - 1)
    if kernel == "symm_mem_multimem":
        return 1.0
    return 2.0 * (tp - 1) / tp


class _Rules(NamedTuple):
    """vLLM 0.33's size limits for one GPU generation and link [B], keyed by TP."""

    flashinfer_max: Mapping[int, int]
    """FlashInfer all-reduce: taken when ``B <=`` this."""
    custom_max: Mapping[int, int]
    """Custom all-reduce: taken when ``B <`` this."""
    symm_mem_max: Mapping[int, int]
    """PyTorch symmetric memory: taken when ``B <=`` this."""
    multimem_tps: frozenset[int]
    """TPs at which symmetric memory runs multimem (two-shot at the others)."""
    fully_connected: bool
    """NVLink/NVSwitch (or Infinity Fabric) between every pair of GPUs."""


def _sizes(mib_by_tp: Mapping[int, float]) -> Mapping[int, int]:
    """``{tp: MiB}`` as a read-only ``{tp: bytes}`` [B]."""
    return MappingProxyType({tp: int(mib * MiB) for tp, mib in mib_by_tp.items()})


_NONE: Final[Mapping[int, int]] = MappingProxyType({})
_CUSTOM_DEFAULT: Final = _sizes({2: 8, 4: 8, 6: 8, 8: 8})
_RULES: Final = {
    "sm90": _Rules(
        flashinfer_max=_sizes({2: 64, 4: 2, 8: 0.5}),
        custom_max=_sizes({2: 8, 4: 8, 6: 0.5, 8: 0.25}),
        symm_mem_max=_sizes({2: 64, 4: 32, 6: 64, 8: 64}),
        multimem_tps=frozenset({4, 6, 8}),
        fully_connected=True,
    ),
    "sm100": _Rules(
        flashinfer_max=_sizes({2: 64, 4: 32, 8: 1}),
        custom_max=_sizes({2: 2, 4: 2, 6: 1, 8: 1}),
        symm_mem_max=_sizes({2: 8, 4: 32, 6: 128, 8: 128}),
        multimem_tps=frozenset({6, 8}),
        fully_connected=True,
    ),
    "nvlink": _Rules(_NONE, _CUSTOM_DEFAULT, _NONE, frozenset(), fully_connected=True),
    "pcie": _Rules(_NONE, _sizes({2: 8}), _NONE, frozenset(), fully_connected=False),
}


def _rules(hardware: HardwareSpec) -> _Rules:
    """The dispatch limits vLLM 0.33 applies on ``hardware`` (see the module docstring)."""
    link = hardware.interconnect.lower()
    if not any(word in link for word in ("nvswitch", "nvlink", "infinity fabric", "xgmi")):
        return _RULES["pcie"]
    if is_data_center_blackwell(hardware):  # B300 (10.3) has larger limits in vLLM: not modelled
        return _RULES["sm100"]
    label = f"{hardware.slug} {hardware.name}".lower()
    if any(gpu in label for gpu in ("h100", "h200")):
        return _RULES["sm90"]
    return _RULES["nvlink"]


def _check_hardware(hardware: object) -> HardwareSpec:
    if not isinstance(hardware, HardwareSpec):
        raise ParameterError(
            f"hardware must be a HardwareSpec (budgetlab.catalog.hardware('h100-sxm')), got {hardware!r}"
        )
    return hardware


def _check_bytes(message_bytes: object) -> np.ndarray:
    values = finite_array(
        "message_bytes", message_bytes, what="finite numbers of bytes >= 0 (tokens × hidden × dtype bytes)", low=0.0
    )
    if np.any(values > MAX_MEMORY_BYTES.value):
        bound = MAX_MEMORY_BYTES
        raise ParameterError(f"message_bytes must be at most {bound.value:g} B ({bound.why}), got {message_bytes!r}")
    return values


def _algorithms(rules: _Rules, tp: int, nbytes: np.ndarray) -> np.ndarray:
    """The name of the implementation each message takes, vectorized over ``nbytes`` [B]."""
    out = np.full(nbytes.shape, "nccl", dtype=object)
    if tp == 1:
        out[...] = "none"
        return out
    # Assign from the last resort up, so the first implementation in vLLM's chain wins.
    if tp in rules.symm_mem_max:
        symm = "symm_mem_multimem" if tp in rules.multimem_tps else "symm_mem_two_shot"
        out[nbytes <= rules.symm_mem_max[tp]] = symm
    if tp in rules.custom_max:
        one_shot = (
            (tp == 2)
            | (rules.fully_connected & (tp <= 4) & (nbytes < 512 * KiB))
            | (rules.fully_connected & (tp <= 8) & (nbytes < 256 * KiB))
        )
        custom = nbytes < rules.custom_max[tp]
        out[custom & one_shot] = "custom_one_shot"
        out[custom & ~one_shot] = "custom_two_shot"
    if tp in rules.flashinfer_max:
        out[nbytes <= rules.flashinfer_max[tp]] = "flashinfer"
    out[nbytes == 0] = "none"
    return out


def _fit_for(kernel: str, tp: int) -> tuple[float, float]:
    """``(latency_s, seconds per byte)`` of ``kernel`` at ``tp`` on H100 SXM: fitted, or derived
    from the nearest fitted TP (the larger on a tie) by the kernel's traffic per GPU."""
    fitted = sorted(t for k, t in ALL_REDUCE_FITS if k == kernel)
    nearest = min(fitted, key=lambda t: (abs(t - tp), -t))
    fit = ALL_REDUCE_FITS[(kernel, nearest)]
    return fit.latency_s, _traffic(kernel, tp) / _traffic(kernel, nearest) / fit.bandwidth_bytes_per_s


def _kernel_s(hardware: HardwareSpec, kernel: str, tp: int, nbytes: np.ndarray) -> np.ndarray:
    """Graph-replay time of ``kernel`` at ``tp`` on ``hardware`` [s], scaled from H100 SXM by
    the catalog's link latency and bandwidth."""
    latency_s, s_per_byte = _fit_for(kernel, tp)
    latency_scale = hardware.interconnect_latency_s / _REFERENCE_LATENCY_S
    byte_scale = _REFERENCE_BANDWIDTH_BYTES_PER_S / hardware.interconnect_bandwidth_bytes_per_s
    return latency_s * latency_scale + nbytes * (s_per_byte * byte_scale)


def all_reduce_algorithm(hardware: HardwareSpec, *, tp: int, message_bytes: float) -> str:
    """The implementation vLLM 0.33 runs one tensor-parallel all-reduce with.

    Parameters
    ----------
    hardware : HardwareSpec
        The GPU; its slug/name give the generation and its ``interconnect`` the link.
    tp : int
        Tensor-parallel degree (GPUs in the all-reduce) [count], >= 1.
    message_bytes : float
        Bytes of the tensor each GPU contributes (``tokens × hidden × dtype bytes``) [B], >= 0.

    Returns
    -------
    str
        One of :data:`ALGORITHMS`: ``"none"`` for ``tp == 1`` or 0 bytes, else ``"flashinfer"``,
        ``"custom_one_shot"``, ``"custom_two_shot"``, ``"symm_mem_multimem"``,
        ``"symm_mem_two_shot"`` or ``"nccl"`` (the rules are in the module docstring).

    Raises
    ------
    ParameterError
        ``hardware`` not a :class:`~budgetlab.specs.HardwareSpec`, ``tp`` not an int >= 1,
        ``message_bytes`` not one finite number in [0, 16 TiB].

    Examples
    --------
    >>> from budgetlab.catalog import hardware
    >>> all_reduce_algorithm(hardware("h100-sxm"), tp=4, message_bytes=32 * 8192 * 2)
    'flashinfer'
    >>> all_reduce_algorithm(hardware("h100-sxm"), tp=4, message_bytes=2048 * 8192 * 2)
    'symm_mem_multimem'
    >>> all_reduce_algorithm(hardware("a100-80gb-sxm"), tp=4, message_bytes=2048 * 8192 * 2)
    'nccl'
    """
    spec = _check_hardware(hardware)
    degree = int_at_least("tp", tp, 1, what="an int >= 1 (GPUs per replica)")
    nbytes = _check_bytes(message_bytes)
    if nbytes.ndim:
        raise ParameterError(f"message_bytes must be one number of bytes here, got {message_bytes!r}")
    return str(_algorithms(_rules(spec), degree, nbytes)[()])


def fused_with_norm(hardware: HardwareSpec, *, tp: int, message_bytes: ArrayLike) -> bool | np.ndarray:
    """Whether vLLM 0.33 fuses the all-reduce of a message with the residual add and RMSNorm
    after it (vectorized over ``message_bytes``).

    At the default ``-O2`` the ``fuse_allreduce_rms`` pass is on when TP > 1 on a Hopper or
    Blackwell GPU with FlashInfer installed (``config/vllm.py``, ``enable_allreduce_rms_fusion``;
    ``compilation/passes/fusion/allreduce_rms_fusion.py``), for messages within FlashInfer's
    limits: exactly the messages :func:`all_reduce_algorithm` sends to ``"flashinfer"``. The
    fused kernel replaces the all-reduce and the separate ``fused_add_rms_norm`` kernel.

    Examples
    --------
    >>> from budgetlab.catalog import hardware
    >>> fused_with_norm(hardware("h100-sxm"), tp=4, message_bytes=32 * 8192 * 2)
    True
    >>> fused_with_norm(hardware("a100-80gb-sxm"), tp=4, message_bytes=32 * 8192 * 2)
    False
    """
    spec = _check_hardware(hardware)
    degree = int_at_least("tp", tp, 1, what="an int >= 1 (GPUs per replica)")
    nbytes = _check_bytes(message_bytes)
    fused = _algorithms(_rules(spec), degree, nbytes) == "flashinfer"
    return bool(fused) if fused.ndim == 0 else fused.astype(bool)


def all_reduce_s(
    hardware: HardwareSpec, *, tp: int, message_bytes: ArrayLike, cuda_graph: bool = True
) -> float | np.ndarray:
    """Time of one tensor-parallel all-reduce as vLLM 0.33 runs it [s].

    The message takes the implementation :func:`all_reduce_algorithm` names, priced
    ``latency_s + message_bytes / bandwidth_bytes_per_s`` from :data:`ALL_REDUCE_FITS` (measured
    on H100 SXM; derived for other TPs and hardware as the module docstring says); FlashInfer
    takes the fastest fitted kernel's time.

    Parameters
    ----------
    hardware : HardwareSpec
        The GPU and its link.
    tp : int
        Tensor-parallel degree [count], >= 1.
    message_bytes : float or array_like of float
        Bytes each GPU contributes [B], each >= 0: ``tokens × hidden_size × activation bytes``.
    cuda_graph : bool
        ``True`` (default) for an all-reduce replayed inside a CUDA graph (vLLM's full and
        piecewise graphs both hold the all-reduces); ``False`` adds :data:`EAGER_EXTRA_S`, the
        launch and input copy of an eager call.

    Returns
    -------
    float or numpy.ndarray
        Seconds per all-reduce [s]: a float for a scalar ``message_bytes``, else an array of its
        shape. 0 for ``tp == 1`` and for 0 bytes.

    Raises
    ------
    ParameterError
        As :func:`all_reduce_algorithm`, or ``cuda_graph`` not a bool.

    Examples
    --------
    >>> from budgetlab.catalog import hardware
    >>> round(all_reduce_s(hardware("h100-sxm"), tp=4, message_bytes=32 * 8192 * 2) * 1e6, 1)
    10.3
    >>> all_reduce_s(hardware("h100-sxm"), tp=1, message_bytes=1e6)
    0.0
    """
    spec = _check_hardware(hardware)
    degree = int_at_least("tp", tp, 1, what="an int >= 1 (GPUs per replica)")
    nbytes = _check_bytes(message_bytes)
    graph = flag("cuda_graph", cuda_graph)
    names = _algorithms(_rules(spec), degree, nbytes)
    seconds = np.zeros(nbytes.shape)
    for name in set(names.ravel().tolist()) - {"none"}:
        where = names == name
        if name == "flashinfer":
            chosen = np.min([_kernel_s(spec, kernel, degree, nbytes[where]) for kernel in _KERNELS], axis=0)
        else:
            chosen = _kernel_s(spec, name, degree, nbytes[where])
        seconds[where] = chosen if graph else chosen + EAGER_EXTRA_S
    return float(seconds) if seconds.ndim == 0 else seconds
