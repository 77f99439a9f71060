"""What-if tables of cost models: other GPUs, GEMM tiles, tensor parallelism, mixture of experts.

Each function prices the same steps under variants of one cost model and returns the numbers
as a tidy :class:`pandas.DataFrame` in SI units (seconds, bytes), one row per variant or per
token count. Notebook 01 draws and tabulates them with :mod:`budgetlab.charts`; the physics is
in the cost models themselves (:class:`~budgetlab.cost.IdealCost`,
:class:`~budgetlab.cost.CalibratedCost`) and in :mod:`budgetlab.memory`.

* :func:`hardware_comparison`: one model's idealized weight read, per-token time and knee on
  several accelerators.
* :func:`tile_cliffs`: the step time just at and just past each GEMM tile boundary.
* :func:`tensor_parallel_speedups`: weights per GPU, step times, all-reduce and speed-up for
  several tensor-parallel degrees.
* :func:`moe_step_costs`: the weights a mixture-of-experts step reads, and its time, against the
  step's tokens, beside the same step with every expert read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from budgetlab._checks import MAX_TOKENS, int_at_least, whole_array
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cost.roofline import IdealCost, knee_tokens
from budgetlab.memory import weight_bytes_per_gpu, weights_fit
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = ["hardware_comparison", "tile_cliffs", "tensor_parallel_speedups", "moe_step_costs"]


def hardware_comparison(
    model: ModelSpec, hardware_specs: Iterable[HardwareSpec], *, token_marks: Sequence[int] = ()
) -> pd.DataFrame:
    """One row per accelerator: this model's idealized weight read, per-token time and knee.

    Parameters
    ----------
    model : ModelSpec
        The model.
    hardware_specs : iterable of HardwareSpec
        The accelerators to compare.
    token_marks : sequence of int
        Step sizes to price as well [tokens].

    Returns
    -------
    pandas.DataFrame
        ``hardware_slug``, ``hardware``, ``weight_read_s``, ``per_token_s``, ``knee_tokens``,
        ``weights_fit`` (the weights fit in the GPU's memory: :func:`budgetlab.memory.weights_fit`),
        and ``step_<n>_s`` for each mark [s].
    """
    marks = _token_marks(token_marks)
    rows = []
    for hardware in hardware_specs:
        cost = IdealCost(hardware, model)
        row: dict[str, str | float | bool] = {
            "hardware_slug": hardware.slug,
            "hardware": hardware.name,
            "weight_read_s": cost.weight_read_s,
            "per_token_s": cost.per_token_s,
            "knee_tokens": knee_tokens(cost),
            "weights_fit": weights_fit(hardware, model),
        }
        for mark in marks:
            row[f"step_{mark}_s"] = float(cost.step_time_s(mark))
        rows.append(row)
    return pd.DataFrame(rows)


def _token_marks(token_marks: Sequence[int]) -> list[int]:
    """``token_marks`` as a list of ints >= 1; else :class:`~budgetlab.errors.ParameterError`."""
    if len(token_marks) == 0:
        return []
    return [
        int(mark)
        for mark in whole_array(
            "token_marks", list(token_marks), 1, what="a sequence of ints >= 1 [tokens]", maximum=MAX_TOKENS
        )
    ]


def tile_cliffs(cost: CalibratedCost, *, max_tokens: int) -> pd.DataFrame:
    """The step time at each GEMM tile boundary and one token past it: the tile cliffs.

    A GEMM pads its token dimension to whole tiles, so the step of ``k × tile + 1`` tokens
    costs what ``(k + 1) × tile`` tokens do.

    Parameters
    ----------
    cost : CalibratedCost
        A model with ``tile_tokens`` set.
    max_tokens : int
        Largest token count to consider [tokens].

    Returns
    -------
    pandas.DataFrame
        One row per boundary below ``max_tokens``: ``tokens`` (``k × tile``), ``past_tokens``
        (one more), ``step_time_s``, ``past_step_time_s``, ``jump_s`` [s], ``jump_fraction``
        (jump / step at the boundary) [-], ``tile_tokens``.

    Raises
    ------
    ValueError
        When ``cost`` has no GEMM tile (``tile_tokens`` unset).
    ParameterError
        When ``max_tokens`` is not an int >= 1.
    """
    int_at_least("max_tokens", max_tokens, 1, what="an int >= 1 [tokens]", maximum=MAX_TOKENS)
    tile = cost.tile_tokens
    if not tile:
        raise ValueError(
            "tile_cliffs needs a cost model with tile_tokens set, "
            "e.g. CalibratedCost.typical(...).with_(tile_tokens=128)"
        )
    edges = np.arange(tile, max_tokens, tile, dtype=np.int64)
    at = np.atleast_1d(np.asarray(cost.step_time_s(edges), dtype=float))
    past = np.atleast_1d(np.asarray(cost.step_time_s(edges + 1), dtype=float))
    return pd.DataFrame(
        {
            "tokens": edges,
            "past_tokens": edges + 1,
            "step_time_s": at,
            "past_step_time_s": past,
            "jump_s": past - at,
            "jump_fraction": (past - at) / at,
            "tile_tokens": int(tile),
        }
    )


def tensor_parallel_speedups(
    hardware: HardwareSpec,
    model: ModelSpec,
    tp_degrees: Sequence[int],
    *,
    token_marks: Sequence[int] = (),
) -> pd.DataFrame:
    """One row per tensor-parallel degree of :meth:`CalibratedCost.typical`.

    Parameters
    ----------
    hardware, model : HardwareSpec, ModelSpec
        The GPU (each of the replica's GPUs) and the model.
    tp_degrees : sequence of int
        GPUs per replica to compare [count]; each must divide the model's attention heads.
        The smallest is the baseline of the speed-ups.
    token_marks : sequence of int
        Step sizes to evaluate [tokens].

    Returns
    -------
    pandas.DataFrame
        ``tp``, ``weight_bytes_per_gpu`` [bytes], ``weights_fit`` (one GPU's share of the weights
        fits in its memory: :func:`budgetlab.memory.weights_fit`), ``weight_read_s`` (one GPU's
        share at the achieved bandwidth), ``per_token_s`` (at the achieved FLOP rate, split over
        the GPUs), and for each mark ``step_<n>_s``, ``all_reduce_<n>_s`` [s] and ``speedup_<n>``
        (the smallest degree's step time over this one's) [-].
    """
    degrees = [int_at_least(f"tp_degrees[{i}]", tp, 1, what="an int >= 1 [GPUs]") for i, tp in enumerate(tp_degrees)]
    marks = _token_marks(token_marks)
    rows = []
    for tp in degrees:
        cost = CalibratedCost.typical(hardware, model, tp=tp)
        row: dict[str, int | float | bool] = {
            "tp": tp,
            "weight_bytes_per_gpu": weight_bytes_per_gpu(model, tp=tp),
            "weights_fit": weights_fit(hardware, model, tp=tp),
            "weight_read_s": cost.weight_read_s,
            "per_token_s": cost.per_token_s,
        }
        for mark in marks:
            row[f"step_{mark}_s"] = float(cost.step_time_s(mark))
            row[f"all_reduce_{mark}_s"] = float(cost.all_reduce_s(mark))
        rows.append(row)
    frame = pd.DataFrame(rows)
    baseline = frame.tp.idxmin()
    for mark in marks:
        step = frame[f"step_{mark}_s"]
        frame[f"speedup_{int(mark)}"] = step[baseline] / step
    return frame


def moe_step_costs(cost: CalibratedCost, tokens: Sequence[int]) -> pd.DataFrame:
    """Weights read and step time of a mixture-of-experts model against the step's tokens.

    A step of a few tokens reads only the experts its tokens are routed to; a big step reads
    them all. Beside each step: the same step if every expert were read and computed (the
    idealized, dense view).

    Parameters
    ----------
    cost : CalibratedCost
        With ``moe=True`` (e.g. :meth:`CalibratedCost.typical` of Mixtral 8x7B).
    tokens : sequence of int
        Token counts [tokens].

    Returns
    -------
    pandas.DataFrame
        ``tokens``, ``expected_experts`` (distinct experts touched per layer), ``num_experts``,
        ``weight_bytes`` (all GPUs) and ``weight_bytes_per_gpu`` [bytes], ``step_time_s`` and
        ``dense_step_time_s`` [s], ``tp``.

    Raises
    ------
    ParameterError
        A token count that is not a whole number >= 0.
    """
    counts = whole_array("tokens", tokens, 0, what="whole numbers of tokens >= 0")
    dense = cost.with_(moe=False)
    return pd.DataFrame(
        {
            "tokens": counts,
            "expected_experts": np.asarray(cost.expected_experts(counts), dtype=float),
            "num_experts": cost.model.num_experts,
            "weight_bytes": np.asarray(cost.weight_bytes(counts), dtype=float),
            "weight_bytes_per_gpu": np.asarray(cost.weight_bytes_per_gpu(counts), dtype=float),
            "step_time_s": np.asarray(cost.step_time_s(counts), dtype=float),
            "dense_step_time_s": np.asarray(dense.step_time_s(counts), dtype=float),
            "tp": cost.tp,
        }
    )
