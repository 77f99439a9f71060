"""Print pyproject.toml's dependencies pinned to their declared floors, one ``name==floor`` a line.

``make test-min`` installs these pins into ``.venv-min`` and runs the suite there, so that every
``>=`` floor in pyproject.toml is proved, not just declared. The floors are written once, in
pyproject.toml; this script only reads them.

Usage: ``python tools/min_constraints.py [EXTRA ...]`` — the runtime dependencies plus the named
optional-dependency groups (default: every group). A dependency without a ``>=`` floor is an error.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$")
_FLOOR = re.compile(r">=\s*([0-9][A-Za-z0-9.+!-]*)")


def floors(extras: list[str] | None = None) -> dict[str, str]:
    """Map each canonical package name to its declared floor: runtime deps and ``extras`` (all if None)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    extras = sorted(optional) if extras is None else extras
    unknown = sorted(set(extras) - set(optional))
    if unknown:
        raise SystemExit(f"unknown extras {unknown}; pyproject.toml has {sorted(optional)}")
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements.extend(optional[extra])
    pins: dict[str, str] = {}
    for text in requirements:
        match = _NAME.match(text.split(";")[0])
        if match is None:
            raise SystemExit(f"cannot parse requirement {text!r}")
        name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
        floor = _FLOOR.search(match.group(2))
        if floor is None:
            raise SystemExit(f"{text!r} declares no '>=' floor; every dependency needs one")
        if pins.get(name, floor.group(1)) != floor.group(1):
            raise SystemExit(f"{name} has two floors: {pins[name]} and {floor.group(1)}")
        pins[name] = floor.group(1)
    return pins


def main(argv: list[str]) -> int:
    for name, floor in floors(argv or None).items():
        print(f"{name}=={floor}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
