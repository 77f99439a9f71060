"""``python -m budgetlab``: the command line (:mod:`budgetlab.cli`).

``python -m budgetlab simulate|sweep|capacity|tune|calibrate ...`` runs the engine;
``--version`` prints ``budgetlab <version>``; with no arguments it prints the usage. The reports
have their own command, ``python -m budgetlab.reports``.
"""

from __future__ import annotations

import sys

from budgetlab.cli import main

if __name__ == "__main__":
    sys.exit(main())
