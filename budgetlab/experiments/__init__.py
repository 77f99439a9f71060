"""Experiments over the simulator: load sweeps, capacity under a latency SLO, and the tuner.

Reading guide, in the order an experiment runs:

* :mod:`~budgetlab.experiments.executors` -- where the simulations run (any
  :class:`concurrent.futures.Executor`; :class:`SerialExecutor`, a local process pool, Dask);
* :mod:`~budgetlab.experiments.slo` -- :class:`SLO`, the latency limits, and their
  :class:`Violation` s;
* :mod:`~budgetlab.experiments.sweep` -- :func:`sweep`, one simulation per grid point, one tidy
  table; service rates;
* :mod:`~budgetlab.experiments.search` and :mod:`~budgetlab.experiments.capacity` --
  :func:`capacity`, the highest load at which an SLO holds, by bracketing and bisection;
  :func:`run_capacity_task` for many configurations;
* :mod:`~budgetlab.experiments.by_budget` -- :func:`capacity_by_budget`, one search per budget;
* :mod:`~budgetlab.experiments.guess` and :mod:`~budgetlab.experiments.tune` -- :func:`tune`,
  from an SLO to ``max_num_batched_tokens`` and ``max_num_seqs``, with its reasons;
  :mod:`~budgetlab.experiments.margin` -- no cliff edges: candidates ranked with their
  neighbours, and the load at which the recommendation's neighbours hold the SLO too;
  :mod:`~budgetlab.experiments.frontier` -- the TTFT-versus-ITL trade-off across budgets;
* :mod:`~budgetlab.experiments.progress` -- the ``progress=`` every long experiment takes (a
  line in Jupyter or on a terminal, or a callback);
* :mod:`~budgetlab.experiments.caching` -- one workload under engine variants (prefix caching
  and async scheduling on or off, budgets, KV pools): the tables of notebook 09.

Every recommendation simulates with the real-engine step cost by default (``cost="typical"``,
:meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`) and names it in its
result; ``cost="ideal"`` is the seeds' idealized roofline.

The names are importable from their modules and from :mod:`budgetlab` (``bl.sweep``,
``bl.capacity``, ``bl.tune``, ...). This package module re-exports nothing, so that
``budgetlab.experiments.sweep`` and ``budgetlab.experiments.tune`` stay the modules.
"""

from __future__ import annotations

__all__: list[str] = []
