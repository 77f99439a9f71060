"""Notebook machinery: what a budgetlab notebook imports, apart from the model itself.

A notebook's imports cell reads::

    from budgetlab.notebook import (
        save_results, slo_from_parameters, use_offline_renderer, validate_parameters,
        workload_from_parameters,
    )

(notebook 09 also imports ``conversations_from_parameters``).

* :mod:`~budgetlab.notebook.parameters` checks the ``parameters`` cell (one clear
  :class:`~budgetlab.errors.ParameterError` per bad value), with the per-field checkers in
  :mod:`~budgetlab.notebook.checkers`;
* :mod:`~budgetlab.notebook.scenario` holds the default scenario and turns validated parameters
  into the model's objects (an SLO, a sweep workload);
* :mod:`~budgetlab.notebook.results` saves a report's key numbers as JSON;
* :mod:`~budgetlab.notebook.altair_setup` registers the offline Altair renderer;
* :mod:`~budgetlab.notebook.reports` is the command line that renders notebooks × scenarios into
  offline HTML (``python -m budgetlab.reports``), over :mod:`~budgetlab.notebook.plan` (names
  and parameters → jobs), :mod:`~budgetlab.notebook.render` (papermill and nbconvert, with the
  template in ``templates/offline``) and :mod:`~budgetlab.notebook.index` (the index pages).
  None of these is imported here, so importing this package starts no papermill or nbconvert.
"""

from __future__ import annotations

from budgetlab.notebook.altair_setup import use_offline_renderer
from budgetlab.notebook.parameters import Parameters, validate_parameters
from budgetlab.notebook.results import load_results, save_results
from budgetlab.notebook.scenario import (
    SCENARIO_DEFAULTS,
    conversations_from_parameters,
    slo_from_parameters,
    workload_from_parameters,
)

__all__ = [
    "SCENARIO_DEFAULTS",
    "Parameters",
    "conversations_from_parameters",
    "load_results",
    "save_results",
    "slo_from_parameters",
    "use_offline_renderer",
    "validate_parameters",
    "workload_from_parameters",
]
