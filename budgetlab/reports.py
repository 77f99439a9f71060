"""``python -m budgetlab.reports``: the report renderer, kept at its old name.

The renderer lives in :mod:`budgetlab.notebook.reports` (command line) and the modules beside it;
this name stays so ``python -m budgetlab.reports`` and ``from budgetlab import reports`` keep
working.
"""

from __future__ import annotations

from budgetlab.notebook.reports import *  # noqa: F403
from budgetlab.notebook.reports import __all__, main  # noqa: F401

if __name__ == "__main__":
    raise SystemExit(main())
