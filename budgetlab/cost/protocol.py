"""The cost-model contract: what every step-cost model promises and what callers may rely on.

A *cost model* prices one engine step (one forward pass) from the step's composition, a
:class:`~budgetlab.specs.Batch`. :func:`budgetlab.simulate`, the sweeps, the budget scenarios
and the fit all talk to a cost model through :class:`CostModel` and nothing else; the optional
extras below are declared here and read only through the helpers of this module.

This module is the bottom of :mod:`budgetlab.cost`: it imports no other cost module, so every
one of them (and every caller) can import it. Import the names from :mod:`budgetlab.cost`.

The contract
------------
``batch_time_s(batch: Batch) -> float``  (required)
    *Pre:* ``batch.num_tokens >= 1``; every count >= 0; one ``prefill_context_tokens`` entry
    per ``prefill_tokens`` chunk. Callers never price an empty step (a model may return 0 s
    for one, as :class:`~budgetlab.cost.IdealCost` does).

    *Post:* a finite float > 0 [s], a pure function of ``batch`` (the same batch gives the same
    bits, every time, in every process).

    Speculative decoding: ``batch.decode_draft_tokens`` counts the drafts the decodes verify
    (``batch.num_tokens`` includes them). Every budgetlab model prices them
    (:mod:`budgetlab.cost.step_terms`: the tokens through every linear layer and the LM head,
    the term ``draft_attention``) and, built for a speculating engine, adds the proposer's own
    passes (the term ``drafter``, :mod:`budgetlab.cost.speculative_terms`). With
    ``decode_draft_tokens == 0`` every model gives the bits it gave before the field existed
    (``tests/test_cost_speculative.py``). :class:`~budgetlab.cost.ConstantCost` prices steps,
    not tokens, and ignores it.

``decode_run_time_s(*, num_decodes: int, decode_context_tokens: numpy.ndarray) -> numpy.ndarray``
    (required by :class:`CostModel`; :func:`budgetlab.simulate` falls back to ``batch_time_s``
    step by step, more slowly, when a model lacks it)

    *Pre:* ``num_decodes >= 1``; ``decode_context_tokens`` is a 1-D array of whole numbers
    >= 0, the sum of the decodes' contexts in each step of a run of decode-only steps [tokens].

    *Post:* a float array of the same shape [s] whose element ``i`` equals
    ``batch_time_s(Batch(num_decodes=num_decodes, decode_context_tokens=int(c[i])))`` **to the
    last bit**, so the simulator can jump over such runs and still agree with its reference
    mode exactly. budgetlab's models also take ``decode_draft_tokens: int = 0`` (the drafts
    every step of the run verifies; then ``Batch(..., decode_draft_tokens=d)``); a hand-written
    model need not, so check the concrete type before passing it.

``step_time_s(num_tokens) -> float | numpy.ndarray``  (:class:`CostCurve`; optional)
    The time of a step that processes ``num_tokens`` tokens of one fresh prompt chunk [s],
    vectorized over ``num_tokens`` (a scalar in, a float out; an array in, an array out); 0 s
    for 0 tokens. Every budgetlab model has it; the notebooks' curves and the budget tables use
    it. It is a view for plotting and tables: the simulator never calls it.

``hardware: HardwareSpec`` and ``model: ModelSpec``  (optional attributes)
    The GPU and model the cost prices, when it prices a named pair (:class:`IdealCost` and
    :class:`CalibratedCost` do; :class:`ConstantCost` does not). Read them with
    :func:`hardware_of` and :func:`model_of`, which return ``None`` for a model without them,
    never with ``cost.hardware``.

What callers may rely on
------------------------
* Everything in the *Post* clauses above, for any cost model they are given.
* :func:`~budgetlab.cost.budget_for_step_time` and
  :func:`~budgetlab.budget.budget_for_longest_gap` also assume a step holding one fresh chunk
  of ``n`` tokens does not get faster as ``n`` grows (true of every budgetlab model; a model
  that breaks it gets a budget that is a local answer, not the largest).

What callers may not rely on: any other attribute (``weight_read_s``, ``per_token_s``,
``tile_tokens``, ...) unless they first check the concrete type; and ``step_time_s`` on a
model that is only a :class:`CostModel`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from budgetlab.specs import Batch, HardwareSpec, ModelSpec

__all__ = ["CostModel", "CostCurve", "hardware_of", "model_of"]


@runtime_checkable
class CostModel(Protocol):
    """What the simulator, sweeps and budget scenarios need from a step-cost model.

    See the module docstring of :mod:`budgetlab.cost.protocol` for the pre- and
    postconditions. ``isinstance(x, CostModel)`` checks only that both methods exist.
    """

    def batch_time_s(self, batch: Batch) -> float:
        """Seconds for one step of the given composition: finite and > 0 [s]."""
        ...

    def decode_run_time_s(self, *, num_decodes: int, decode_context_tokens: np.ndarray) -> np.ndarray:
        """Seconds for each step of a decode-only run, equal to ``batch_time_s`` bit for bit [s]."""
        ...


@runtime_checkable
class CostCurve(CostModel, Protocol):
    """A :class:`CostModel` that also gives the step time as a function of the token count.

    Every budgetlab model (:class:`~budgetlab.cost.IdealCost`,
    :class:`~budgetlab.cost.ConstantCost`, :class:`~budgetlab.cost.CalibratedCost`) is one.
    """

    def step_time_s(self, num_tokens: ArrayLike) -> np.ndarray | float:
        """Time of a step holding one fresh chunk of ``num_tokens`` tokens [s] (vectorized);
        0 s for 0 tokens."""
        ...


def hardware_of(cost: object) -> HardwareSpec | None:
    """The GPU a cost model prices, or ``None`` when it prices no particular GPU.

    Parameters
    ----------
    cost : object
        Any cost model.

    Returns
    -------
    HardwareSpec or None
        Its ``hardware`` attribute when that is a :class:`~budgetlab.specs.HardwareSpec`
        (:class:`~budgetlab.cost.IdealCost`, :class:`~budgetlab.cost.CalibratedCost`), else
        ``None`` (:class:`~budgetlab.cost.ConstantCost`, most hand-written models).
    """
    value = getattr(cost, "hardware", None)
    return value if isinstance(value, HardwareSpec) else None


def model_of(cost: object) -> ModelSpec | None:
    """The model a cost model prices, or ``None`` when it prices no particular model.

    The twin of :func:`hardware_of`: ``cost``'s ``model`` attribute when that is a
    :class:`~budgetlab.specs.ModelSpec` (any cost model may be passed), else ``None``.
    """
    value = getattr(cost, "model", None)
    return value if isinstance(value, ModelSpec) else None
