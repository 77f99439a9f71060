"""Cost models by name or factory: what a sweep point, a capacity search or the tuner simulates with.

An experiment runs many hardware × model pairs, so it takes a cost model as a *spec*
(:data:`CostSpec`) and builds one per point with :func:`make_cost`:

* ``"typical"`` -- :meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`, the
  real-engine cost, and the default of every experiment that recommends (``sweep``,
  ``capacity``, ``capacity_by_budget``, ``first_guess``, ``tune``; :func:`budgetlab.simulate`
  takes the names too, given ``hardware`` and ``model``);
* ``"ideal"`` -- :class:`~budgetlab.cost.IdealCost`, the seeds' roofline (for teaching the
  mechanics: it prices no overheads and no KV reads);
* a factory called as ``cost(hardware, model)`` (a class such as ``IdealCost`` or a
  module-level function; it must be importable to run in worker processes);
* a cost-model instance, used as is (if it prices a named pair, that must be the point's).

Given the engine (``make_cost(spec, hw, model, engine=engine)``), a name prices that engine's
deployment (``tensor_parallel_size``, ``dtype``, ``kv_cache_dtype``, ``quantization``), the
one its KV pool is sized for, so :func:`budgetlab.simulate` gets a cost that agrees with it.

:func:`cost_label` is the name a table's ``cost`` column shows; :func:`check_cost` validates a
spec before any work starts.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TypeAlias

from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cost.protocol import CostModel, hardware_of, model_of
from budgetlab.cost.roofline import IdealCost
from budgetlab.cost.speculative_terms import Drafter
from budgetlab.errors import ParameterError
from budgetlab.memory import activation_dtype_bytes, kv_dtype_bytes
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec

__all__ = ["COST_NAMES", "CostSpec", "CostFactory", "make_cost", "cost_label", "check_cost"]

COST_NAMES = ("ideal", "typical")
"""The cost models an experiment knows by name (see :func:`make_cost`)."""

CostFactory: TypeAlias = Callable[[HardwareSpec, ModelSpec], CostModel]
"""``(hardware, model) -> cost model``: a class such as ``IdealCost`` or a module-level function."""

CostSpec: TypeAlias = str | CostModel | CostFactory
"""``"ideal"``, ``"typical"``, a factory ``(hardware, model) -> cost model`` (a class such as
``IdealCost`` or a module-level function), or a cost-model instance for the grid's one
hardware and model."""

_ANY_COST = "cost must be 'ideal', 'typical', a factory (hardware, model) -> cost model, or a cost model"


def make_cost(
    cost: CostSpec,
    hardware: HardwareSpec,
    model: ModelSpec,
    *,
    engine: EngineConfig | None = None,
    draft_model: ModelSpec | str | None = None,
) -> CostModel:
    """The cost model a sweep point simulates with.

    Parameters
    ----------
    cost : str, callable or cost model
        ``"ideal"`` (:class:`~budgetlab.cost.IdealCost`, the seeds' roofline),
        ``"typical"`` (:meth:`budgetlab.cost.CalibratedCost.typical`), a factory called
        as ``cost(hardware, model)``, or an instance (used as is; if it carries ``hardware``
        and ``model`` they must be the point's).
    hardware, model : HardwareSpec, ModelSpec
    engine : EngineConfig or None
        The engine the cost will be simulated with. A name then prices its deployment:
        ``"typical"`` is ``CalibratedCost.typical(hardware, model, engine=engine)``;
        ``"ideal"`` stays :class:`~budgetlab.cost.IdealCost` for the seeds' deployment (one
        GPU, the model's dtype, no quantization, a KV cache in that dtype) and is otherwise
        ``CalibratedCost.ideal(hardware, model).for_engine(engine)`` (the same idealized
        roofline on that deployment: efficiencies 1, no overheads, the all-reduce once
        ``tensor_parallel_size > 1``). Factories and instances are not changed: the
        simulator refuses one that describes another deployment. ``None``: the seeds'
        deployment, as before. An engine that speculates (``num_speculative_tokens > 0``)
        gives a name its proposer too, priced every step (the term ``drafter``,
        :mod:`budgetlab.cost.speculative_terms`): ``"ideal"`` on the same roofline.
    draft_model : ModelSpec, str or None
        The draft model of an engine with ``speculative_method="draft_model"`` (a catalog slug
        works); required there for a name, ignored otherwise.

    Raises
    ------
    ParameterError
        An unknown name, a factory that returns no cost model, or an instance built for other
        hardware or another model.
    ConfigError
        A name for a draft-model engine without ``draft_model``.
    """
    if engine is not None and not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig or None, got {type(engine).__name__}")
    if isinstance(cost, str):
        key = cost.strip().lower()
        if key == "ideal":
            if engine is None:
                return IdealCost(hardware, model)
            if _is_seeds_deployment(model, engine):
                return IdealCost(hardware, model, drafter=Drafter.for_engine(engine, model, draft_model=draft_model))
            return CalibratedCost.ideal(hardware, model).for_engine(engine, draft_model=draft_model)
        if key == "typical":
            return CalibratedCost.typical(hardware, model, engine=engine, draft_model=draft_model)
        raise _unknown_cost(cost)
    if not isinstance(cost, type) and isinstance(cost, CostModel):
        for name, own, wanted in (("hardware", hardware_of(cost), hardware), ("model", model_of(cost), model)):
            if own is not None and own != wanted:
                raise ParameterError(
                    f"the cost model {type(cost).__name__} was built for {own.slug!r}, but this "
                    f"point simulates {name} {wanted.slug!r}. Pass a factory instead (a class "
                    "such as IdealCost, CalibratedCost.typical, or 'ideal'/'typical') so each "
                    "point gets its own"
                )
        return cost
    if callable(cost):
        made = cost(hardware, model)
        if not isinstance(made, CostModel):
            raise ParameterError(
                f"cost factory {cost_label(cost)} returned {type(made).__name__}, which has no "
                "batch_time_s/decode_run_time_s; it must return a cost model"
            )
        return made
    raise ParameterError(f"{_ANY_COST}, got {cost!r}")


def _is_seeds_deployment(model: ModelSpec, engine: EngineConfig) -> bool:
    """Whether ``engine`` deploys ``model`` as :class:`IdealCost` prices it: one GPU, weights,
    activations and KV in the model's ``dtype_bytes``, no quantization."""
    own = int(model.dtype_bytes)
    return (
        engine.tensor_parallel_size == 1
        and engine.quantization is None
        and activation_dtype_bytes(model, engine.dtype) == own
        and kv_dtype_bytes(model, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype) == own
    )


def _unknown_cost(cost: str) -> ParameterError:
    close = difflib.get_close_matches(cost.strip().lower(), COST_NAMES, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ParameterError(
        f"unknown cost model {cost!r}.{hint} Use 'ideal', 'typical', a factory "
        "(hardware, model) -> cost model, or a cost-model instance"
    )


def cost_label(cost: CostSpec) -> str:
    """The name a table's ``cost`` column shows for a spec.

    ``"ideal"`` / ``"typical"`` for a name, the class name for a class (``"IdealCost"``) or an
    instance, the qualified name of a function (``"CalibratedCost.typical"``).
    """
    if isinstance(cost, str):
        return cost.strip().lower()
    if isinstance(cost, type):
        return cost.__name__
    if callable(cost) and not isinstance(cost, CostModel):
        return getattr(cost, "__qualname__", None) or getattr(cost, "__name__", None) or type(cost).__name__
    return type(cost).__name__


def check_cost(cost: object) -> CostSpec:
    """``cost`` as a valid spec (a name normalized to lower case), before any work starts.

    Raises
    ------
    ParameterError
        An unknown name (with the closest one) or something that is neither a name, a cost
        model nor callable.
    """
    if isinstance(cost, str):
        key = cost.strip().lower()
        if key not in COST_NAMES:
            raise _unknown_cost(cost)
        return key
    if isinstance(cost, CostModel) or callable(cost):
        return cost  # a callable is taken for a factory
    raise ParameterError(f"{_ANY_COST}, got {cost!r}")
