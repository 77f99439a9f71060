"""Helpers for the chart tests: walk a Vega-Lite spec for its titles, rows and tooltips."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import altair as alt

#: The seeds' scripted scenario: 100 decoders while a 5,000-token prompt arrives.
SEED = {"num_decodes": 100, "prompt_tokens": 5000}
#: The notebooks' listed budgets [tokens].
BUDGETS = [256, 512, 1024, 2048, 4096, 8192]


def spec_of(chart: alt.TopLevelMixin) -> dict[str, Any]:
    return chart.to_dict()


def walk(node: object) -> Iterator[dict[str, Any]]:
    """Every dict in a Vega-Lite spec."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def titles(spec: dict[str, Any]) -> set[str]:
    found = set()
    for node in walk(spec):
        for channel in ("x", "y"):
            enc = node.get("encoding", {}).get(channel) if isinstance(node.get("encoding"), dict) else None
            if isinstance(enc, dict) and isinstance(enc.get("title"), str):
                found.add(enc["title"])
    return found


def num_rows(spec: dict[str, Any]) -> int:
    return sum(len(values) for values in spec.get("datasets", {}).values())


def has_tooltip(spec: dict[str, Any]) -> bool:
    return any("tooltip" in node.get("encoding", {}) for node in walk(spec) if isinstance(node.get("encoding"), dict))
