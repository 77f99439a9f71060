"""``python -m budgetlab``: the version, and a pointer to the report renderer.

``python -m budgetlab --version`` prints ``budgetlab <version>``; with no arguments it prints a
short usage. The reports have their own command, ``python -m budgetlab.reports``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from budgetlab._version import __version__

EPILOG = """\
the reports:
  python -m budgetlab.reports --list   the notebooks, their parameters and the scenarios
  python -m budgetlab.reports --help   render notebooks x scenarios into offline HTML reports

in Python: `import budgetlab as bl`, then `help(bl)`.
"""


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m budgetlab",
        description="budgetlab: how an LLM server's token budget and sequence cap shape latency.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print ``budgetlab <version>`` for ``--version``, else the usage; return the exit status."""
    parser = _parser()
    parser.add_argument("--version", action="version", version=f"budgetlab {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
