"""Exceptions budgetlab raises, each naming what went wrong and how to fix it.

Every exception derives from :class:`BudgetlabError`; the ones about bad values also derive
from :class:`ValueError` (and lookups from :class:`LookupError`) so callers that already catch
the built-in types keep working.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # errors.py sits below every module; the SLO types only annotate
    from budgetlab.experiments.slo import Violation


class BudgetlabError(Exception):
    """Base class of every error budgetlab raises on purpose."""


class UnknownNameError(BudgetlabError, LookupError):
    """A hardware or model slug that is not in the catalog (the message lists close matches)."""

    def __str__(self) -> str:  # LookupError would otherwise quote the message like a key
        return str(self.args[0]) if self.args else ""


class CatalogError(BudgetlabError, ValueError):
    """A catalog file is missing, malformed, or holds an impossible number."""


class ConfigError(BudgetlabError, ValueError):
    """An :class:`~budgetlab.specs.EngineConfig` combination vLLM would refuse to start with."""


class DoesNotFitError(BudgetlabError, ValueError):
    """The model's weights (plus activations) leave no room for a KV cache on this GPU."""


class RequestTooLargeError(BudgetlabError, ValueError):
    """A request can never be served: longer than ``max_model_len`` or than the whole KV pool."""


class SchedulerStallError(BudgetlabError, RuntimeError):
    """The engine's requests preempt each other in a cycle and none samples a token again.

    vLLM's rules allow this livelock when admission checks only the first chunk
    (``scheduler_reserve_full_isl=False``): requests are admitted that the pool cannot hold
    together, and each evicts another before finishing its prompt.
    """


class NoBudgetMeetsTargetError(BudgetlabError, ValueError):
    """A step-time target below the weight read, so no token budget can meet it."""


class TraceFormatError(BudgetlabError, ValueError):
    """A workload trace file that cannot be read faithfully (names file, row and column)."""


class CalibrationError(BudgetlabError, ValueError):
    """A measurement table or fit request that cannot give a meaningful calibration."""


class CapacitySearchError(BudgetlabError, ValueError):
    """A capacity search that ended at an end of the offered-load range it searched.

    The base of :class:`SLOUnattainableError` (the SLO fails even at the lowest load) and
    :class:`CapacityAboveBoundsError` (it still holds at the highest); catch it to handle both.

    Parameters
    ----------
    message : str
        What happened and what to change.
    rate_per_s : float
        The load at that end [1/s]; NaN when unknown.
    violations : tuple of Violation
        The limits broken at ``rate_per_s``, worst first; empty when none or unknown.

    Attributes
    ----------
    rate_per_s : float
    violations : tuple of Violation
    """

    def __init__(self, message: str, *, rate_per_s: float = math.nan, violations: tuple[Violation, ...] = ()) -> None:
        super().__init__(message)
        self.rate_per_s = float(rate_per_s)
        self.violations = tuple(violations)


class SLOUnattainableError(CapacitySearchError):
    """The SLO fails even at the lowest offered load searched: no load meets it.

    ``rate_per_s`` is the lowest load tried [1/s]; NaN when the error is not about one load (the
    tuner's "no budget meets the SLO"). ``violations`` are the limits broken there, worst first.
    """


class CapacityAboveBoundsError(CapacitySearchError):
    """The SLO still holds at the highest offered load searched: capacity is above it.

    ``rate_per_s`` is the highest load at which the SLO held [1/s]; ``violations`` is always
    empty (nothing broke).
    """


class ParameterError(BudgetlabError, ValueError):
    """An argument of the wrong type or out of range: a notebook or report parameter, or an
    argument of a cost model, sweep, capacity search or tuner.

    In IPython (Jupyter, papermill) it shows as its one message, not as a traceback: the
    message already names the parameter, the value, what is expected and the fix.
    """

    def _render_traceback_(self) -> list[str]:
        """The lines IPython shows instead of a traceback (``ename: message``)."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class BenchFormatError(BudgetlabError, ValueError):
    """A ``vllm bench serve --save-result`` file that is missing a field or holds a bad value;
    the message names the file and the field."""


class DataFormatError(BudgetlabError, ValueError):
    """A published data file (real-engine logs or runs) lacks a column a comparison needs, or
    ``BUDGETLAB_REAL_DATA`` names no folder (:func:`budgetlab.experiments.published.real_data_dir`)."""
