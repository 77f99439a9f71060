"""Step-cost models: how long one engine step (one forward pass) takes, and how we know.

A *cost model* turns a step's composition (a :class:`~budgetlab.specs.Batch`: decodes, their
context, prefill chunks) into seconds. The simulator, the sweeps, the budget scenarios and the
notebooks all take one; they rely only on the :class:`CostModel` contract.

The family, and where each member lives
---------------------------------------
:mod:`budgetlab.cost.protocol`
    The contract: :class:`CostModel` (``batch_time_s``, ``decode_run_time_s``, with their
    pre- and postconditions and the bit-equality rule between them), :class:`CostCurve`
    (adds the vectorized ``step_time_s(num_tokens)`` every budgetlab model has), and
    :func:`hardware_of` / :func:`model_of`, the one way to read the optional ``hardware`` and
    ``model`` attributes. It sits at the bottom of the package, so every module can import it.
:mod:`budgetlab.cost.roofline`
    The seeds' idealized :class:`IdealCost` (``max(weight read, token math)``),
    :class:`ConstantCost` (every step the same: time counted in steps), and two landmarks,
    :func:`knee_tokens` and :func:`shortest_step_s`.
:mod:`budgetlab.cost.calibrated`
    :class:`CalibratedCost`: the roofline plus overheads, efficiencies, attention, KV reads,
    GEMM tiles, mixture of experts and tensor parallelism, each term documented and
    switchable; :data:`TYPICAL` is its preset. With every extra off it equals
    :class:`IdealCost` to the last bit.
:mod:`budgetlab.cost.step_terms`
    The one step formula behind :class:`CalibratedCost`, the CUDA-graph dispatch of a step and
    its terms, :class:`StepTerms` (``cost.step_terms(batch)``: every term named, summing to the
    step) and :func:`~budgetlab.cost.step_terms.knee_loss`.
:mod:`budgetlab.cost.speculative_terms`
    Speculative decoding's proposer (:class:`Drafter`: n-gram, draft model, EAGLE, EAGLE-3, MTP)
    priced per step (:func:`drafter_time_s`, :func:`drafter_terms`), the term ``drafter`` of a
    cost built for a speculating engine.
:mod:`budgetlab.cost.step_constants`
    The per-cost constants of the step formula, the all-reduce kernel table and the knee loss.
:mod:`budgetlab.cost.collective`
    :func:`all_reduce_s` and :func:`all_reduce_algorithm`: a tensor-parallel all-reduce as the
    kernel vLLM 0.33 runs for its size and TP, priced from published H100 measurements.
:mod:`budgetlab.cost.moe`
    The fused-MoE kernel's shape: vLLM's tile choice, padded rows per expert, touched experts
    per GPU under tensor and expert parallelism, expert bytes and FLOPs.
:mod:`budgetlab.cost.moe_step`
    Those in the step cost: the ``moe_block_padding`` term and the expert-parallel weight read.
:mod:`budgetlab.cost.gemm`
    Per-GPU GEMM shapes at a TP degree and the replicated (norm and add) work per token.
:mod:`budgetlab.cost.inverse`
    :func:`budget_for_step_time`, the largest token budget whose step meets a time target, and
    the bisection it uses (:func:`bisect_largest`).
:mod:`budgetlab.cost.variants`
    What-if tables across cost models: :func:`hardware_comparison`, :func:`tile_cliffs`,
    :func:`tensor_parallel_speedups`, :func:`moe_step_costs`.
:mod:`budgetlab.cost.named`
    Cost models by name for experiments: :func:`make_cost` turns ``"ideal"``, ``"typical"``, a
    factory or an instance into a cost model for a GPU and model (:data:`COST_NAMES`).
:mod:`budgetlab.cost.measurements`
    :func:`read_measurements`: the measured-step table (CSV or DataFrame) read and checked;
    :func:`measured_batches` turns its rows into batches.
:mod:`budgetlab.cost.fit`
    :func:`calibrate` fits a :class:`CalibratedCost` to measured steps
    (:class:`CalibrationResult`, with ``.summary()`` and ``.numbers()``);
    :func:`predict_step_ms`, :func:`residuals` and :func:`residual_summary` score any cost
    model on them. scipy loads only when a fit runs.

Which model to use
------------------
:class:`ConstantCost` for hand-worked scheduling examples, :class:`IdealCost` for the seeds'
numbers and the shape of every trade-off, ``CalibratedCost.typical`` for realistic magnitudes,
and ``calibrate(...).cost`` once you have measured your own steps. Your own class works
anywhere too, if it keeps the contract in :mod:`budgetlab.cost.protocol`.
"""

from __future__ import annotations

from budgetlab.cost.calibrated import GPU_PROFILE, TYPICAL, CalibratedCost
from budgetlab.cost.collective import all_reduce_algorithm, all_reduce_s
from budgetlab.cost.fit import (
    DEFAULT_FIT,
    FITTABLE,
    TILE_CANDIDATES,
    CalibrationError,
    CalibrationResult,
    Fittable,
    calibrate,
    predict_step_ms,
    residual_summary,
    residuals,
)
from budgetlab.cost.inverse import MAX_SEARCH_TOKENS, bisect_largest, budget_for_step_time
from budgetlab.cost.measurements import REQUIRED_COLUMNS, TOKEN_COLUMNS, measured_batches, read_measurements
from budgetlab.cost.named import COST_NAMES, CostFactory, CostSpec, check_cost, cost_label, make_cost
from budgetlab.cost.protocol import CostCurve, CostModel, hardware_of, model_of
from budgetlab.cost.roofline import ConstantCost, IdealCost, knee_tokens, shortest_step_s
from budgetlab.cost.speculative_terms import DRAFTER_TERM_NAMES, Drafter, drafter_terms, drafter_time_s
from budgetlab.cost.step_terms import StepTerms
from budgetlab.cost.variants import hardware_comparison, moe_step_costs, tensor_parallel_speedups, tile_cliffs

__all__ = [
    # the contract
    "CostModel",
    "CostCurve",
    "hardware_of",
    "model_of",
    # the models
    "IdealCost",
    "ConstantCost",
    "CalibratedCost",
    "TYPICAL",
    "GPU_PROFILE",
    "knee_tokens",
    "shortest_step_s",
    "StepTerms",
    # speculative decoding's proposer
    "Drafter",
    "DRAFTER_TERM_NAMES",
    "drafter_time_s",
    "drafter_terms",
    # tensor parallelism
    "all_reduce_s",
    "all_reduce_algorithm",
    # by name, for experiments
    "COST_NAMES",
    "CostSpec",
    "CostFactory",
    "make_cost",
    "cost_label",
    "check_cost",
    # what-if tables
    "hardware_comparison",
    "tile_cliffs",
    "tensor_parallel_speedups",
    "moe_step_costs",
    # the inverse
    "budget_for_step_time",
    "bisect_largest",
    "MAX_SEARCH_TOKENS",
    # measurements
    "read_measurements",
    "measured_batches",
    "REQUIRED_COLUMNS",
    "TOKEN_COLUMNS",
    # the fit, and what it may fit
    "calibrate",
    "CalibrationResult",
    "CalibrationError",
    "Fittable",
    "FITTABLE",
    "DEFAULT_FIT",
    "TILE_CANDIDATES",
    # scoring any cost model on measured steps
    "predict_step_ms",
    "residuals",
    "residual_summary",
]
