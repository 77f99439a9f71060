"""The package version, in one place: hatchling reads it for the metadata, ``budgetlab.__version__`` re-exports it."""

from __future__ import annotations

__version__ = "0.1.0"
