"""Exceptions budgetlab raises, each naming what went wrong and how to fix it.

Every exception derives from :class:`BudgetlabError`; the ones about bad values also derive
from :class:`ValueError` (and lookups from :class:`LookupError`) so callers that already catch
the built-in types keep working.
"""

from __future__ import annotations


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


class NoBudgetMeetsTargetError(BudgetlabError, ValueError):
    """A step-time target below the weight read, so no token budget can meet it."""


class TraceFormatError(BudgetlabError, ValueError):
    """A workload trace file that cannot be read faithfully (names file, row and column)."""


class CalibrationError(BudgetlabError, ValueError):
    """A measurement table or fit request that cannot give a meaningful calibration."""


class SLOUnattainableError(BudgetlabError, ValueError):
    """The SLO fails even at the lowest offered load searched: no load meets it.

    Attributes (when raised by :func:`budgetlab.sweep.capacity`): ``rate_per_s``, the lowest
    load tried [1/s], and ``violations``, the limits broken there (worst first).
    """


class CapacityAboveBoundsError(BudgetlabError, ValueError):
    """The SLO still holds at the highest offered load searched: capacity is above it.

    Attribute ``rate_per_s``: the highest load at which it held [1/s].
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
