"""The hardware and model catalog: datasheet and model-card numbers, one CSV row per item.

The rows live in ``data/catalog/hardware.csv`` and ``data/catalog/models.csv`` (see
``data/catalog/README.md`` for units and how to add a row). Their columns are exactly the fields
of :class:`~budgetlab.specs.HardwareSpec` and :class:`~budgetlab.specs.ModelSpec`, plus an
optional free-text ``notes`` column. Every row is validated when the file is first read and the
result is cached for the life of the process.

Examples
--------
>>> from budgetlab.catalog import hardware, model
>>> hardware("H100-SXM").mem_bandwidth_bytes_per_s
3350000000000.0
>>> model("llama-3.1-8b").num_kv_heads
8

:func:`resolve_hardware` and :func:`resolve_model` turn "a slug or a spec" arguments into a
spec: the one resolver every function that accepts either uses.

A model is also found by the Hugging Face repository it was read from: ``models.csv``'s
optional ``hf_ids`` column lists, per row, the repository ids that row stands for (the base and
instruct checkpoints of one architecture), so ``model("meta-llama/Llama-3.1-8B-Instruct")`` is
the ``llama-3.1-8b`` row. :func:`hf_ids` lists them. Nothing is downloaded: an id not listed is
refused with the closest listed ones; pass its ``config.json`` to
:func:`budgetlab.model_from_hf_config` instead.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import functools
import importlib.resources
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pandas as pd

from budgetlab.attention import AttentionLayout
from budgetlab.errors import CatalogError, ConfigError, ParameterError, UnknownNameError
from budgetlab.specs import HardwareSpec, ModelSpec
from budgetlab.vision import VisionEncoder

__all__ = [
    "data_path",
    "hardware",
    "model",
    "resolve_hardware",
    "resolve_model",
    "list_hardware",
    "list_models",
    "hf_ids",
    "hardware_table",
    "model_table",
    "clear_cache",
]

HARDWARE_FILE = "hardware.csv"
MODELS_FILE = "models.csv"
NOTES_COLUMN = "notes"
HF_IDS_COLUMN = "hf_ids"
"""``models.csv``'s optional column: the Hugging Face repository ids a row stands for,
separated by ``;`` (``meta-llama/Llama-3.1-8B;meta-llama/Llama-3.1-8B-Instruct``)."""

_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_HF_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_MAX_SUGGESTIONS = 5

Spec = TypeVar("Spec", HardwareSpec, ModelSpec)


# --------------------------------------------------------------------------------------------
# Where the data lives
# --------------------------------------------------------------------------------------------


def _data_roots() -> tuple[Path, Path]:
    """The two places data can live: inside an installed wheel, then in a source checkout."""
    installed = Path(str(importlib.resources.files("budgetlab"))) / "_data"
    checkout = Path(__file__).resolve().parents[1] / "data"
    return installed, checkout


def data_path(*parts: str) -> Path:
    """Locate a file or folder of budgetlab's packaged data.

    The wheel carries ``data/<sub>`` as ``budgetlab/_data/<sub>``; a source checkout has it at
    ``<repo>/data/<sub>``. The installed location is tried first.

    Parameters
    ----------
    *parts : str
        Path components below the data root, e.g. ``("catalog", "hardware.csv")`` or
        ``("measured",)``.

    Returns
    -------
    pathlib.Path
        The first existing ``<root>/<parts...>``.

    Raises
    ------
    CatalogError
        When neither location holds the path; the message names both places.
    """
    candidates = [root.joinpath(*parts) for root in _data_roots()]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise CatalogError(
        f"budgetlab data {'/'.join(parts) or '(root)'!r} not found, neither installed at "
        f"{candidates[0]} nor in a checkout at {candidates[1]}. "
        "In a source checkout keep the data/ folder next to budgetlab/; an installed wheel "
        "carries it as budgetlab/_data (reinstall the package if it is missing)."
    )


def _catalog_dir() -> Path:
    """Folder holding ``hardware.csv`` and ``models.csv`` (tests monkeypatch this)."""
    return data_path("catalog")


# --------------------------------------------------------------------------------------------
# Reading and validating one CSV
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table(Generic[Spec]):
    """One validated catalog file: specs by slug (file order), each row's notes, and the
    Hugging Face ids of each row (``aliases``: lower-case id -> slug; ``hf_ids``: id as written
    -> slug), empty for a file without the :data:`HF_IDS_COLUMN`."""

    path: Path
    specs: dict[str, Spec]
    notes: dict[str, str]
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)
    hf_ids: dict[str, str] = dataclasses.field(default_factory=dict)


class _Row:
    """Typed access to one CSV row that reports file, line and column on every bad cell."""

    def __init__(self, path: Path, line: int, cells: dict[str, str]) -> None:
        self.path = path
        self.line = line
        self.cells = cells
        slug = cells.get("slug", "")
        self.where = f"{path}, line {line}" + (f" (slug {slug!r})" if slug else "")

    def error(self, column: str | None, problem: str) -> CatalogError:
        col = f", column {column!r}" if column else ""
        return CatalogError(f"{self.where}{col}: {problem}")

    def text(self, column: str) -> str:
        value = self.cells[column]
        if not value:
            raise self.error(column, "is empty; every row needs a value here")
        return value

    def positive_float(self, column: str) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"expected a plain number in SI units (e.g. 989.4e12), got {raw!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise self.error(column, f"expected a finite number > 0, got {raw!r}")
        return value

    def positive_int(self, column: str) -> int:
        raw = self.text(column)
        try:
            value = int(raw)
        except ValueError:
            number = self.positive_float(column)  # raises on text, nan, inf, <= 0
            if not number.is_integer():
                raise self.error(column, f"expected a whole number, got {raw!r}") from None
            value = int(number)
        if value <= 0:
            raise self.error(column, f"expected a whole number > 0, got {raw!r}")
        return value

    def optional_positive_float(self, column: str) -> float | None:
        """A positive number, or ``None`` for an empty cell."""
        return self.positive_float(column) if self.cells[column] else None

    def attention_layout(self, column: str) -> AttentionLayout | None:
        """An :class:`~budgetlab.attention.AttentionLayout` as :meth:`AttentionLayout.parse
        <budgetlab.attention.AttentionLayout.parse>` reads it over the row's ``num_layers``, or
        ``None`` (every layer full attention) for an empty cell."""
        if not self.cells[column]:
            return None
        try:
            return AttentionLayout.parse(self.cells[column], self.positive_int("num_layers"))
        except ConfigError as exc:
            raise self.error(column, str(exc)) from None

    def optional_positive_int(self, column: str) -> int | None:
        """A whole number > 0, or ``None`` for an empty cell."""
        return self.positive_int(column) if self.cells[column] else None

    def vision_encoder(self, column: str) -> VisionEncoder | None:
        """A :class:`~budgetlab.vision.VisionEncoder` as :meth:`VisionEncoder.parse
        <budgetlab.vision.VisionEncoder.parse>` reads it, or ``None`` (text only) for an empty cell."""
        if not self.cells[column]:
            return None
        try:
            return VisionEncoder.parse(self.cells[column])
        except ConfigError as exc:
            raise self.error(column, str(exc)) from None

    def boolean(self, column: str) -> bool:
        """``true``/``false`` (any case); an empty cell is ``false``."""
        raw = self.cells[column].lower()
        if raw in ("", "false"):
            return False
        if raw == "true":
            return True
        raise self.error(column, f"expected true or false, got {self.cells[column]!r}")


def _field_kinds(spec_type: type) -> dict[str, Callable[[_Row, str], Any]]:
    """Map each dataclass field to the cell parser its annotation calls for."""
    parsers: dict[str, Callable[[_Row, str], Any]] = {
        "str": _Row.text,
        "float": _Row.positive_float,
        "int": _Row.positive_int,
        "float | None": _Row.optional_positive_float,
        "bool": _Row.boolean,
        "AttentionLayout | None": _Row.attention_layout,
        "VisionEncoder | None": _Row.vision_encoder,
        "int | None": _Row.optional_positive_int,
    }
    kinds = {}
    for f in dataclasses.fields(spec_type):
        annotation = f.type if isinstance(f.type, str) else f.type.__name__
        kinds[f.name] = parsers[annotation]
    return kinds


def _optional_columns(spec_type: type) -> frozenset[str]:
    """Fields with a default that a CSV may leave out (``source`` is always required)."""
    return frozenset(
        f.name for f in dataclasses.fields(spec_type) if f.default is not dataclasses.MISSING and f.name != "source"
    )


def _read_table(
    path: Path, spec_type: type[Spec], check: Callable[[_Row, Spec], None], *, alias_column: str | None = None
) -> _Table:
    """Read, validate and convert one catalog CSV.

    Parameters
    ----------
    path : pathlib.Path
        The CSV file.
    spec_type : type
        :class:`HardwareSpec` or :class:`ModelSpec`; its fields are the columns.
    check : callable
        Cross-field checks on a built spec; raises through ``row.error``.
    alias_column : str or None
        An optional column of ``;``-separated Hugging Face ids per row (:data:`HF_IDS_COLUMN`);
        each must look like ``owner/name`` and name one row only.

    Raises
    ------
    CatalogError
        Naming the file, line and column of the first problem found.
    """
    kinds = _field_kinds(spec_type)
    optional = _optional_columns(spec_type)
    required = [name for name in kinds if name not in optional]
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"catalog file {path} does not exist") from None
    except OSError as exc:
        raise CatalogError(f"catalog file {path} cannot be read: {exc}") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise CatalogError(f"{path} is empty; line 1 must be the header row") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise CatalogError(f"{path}, line 1: not a readable UTF-8 CSV header ({exc})") from None
        header = [name.strip() for name in header]
        extra = {NOTES_COLUMN} | ({alias_column} if alias_column else set())
        _check_header(path, header, required, set(kinds) | extra)

        specs: dict[str, Spec] = {}
        notes: dict[str, str] = {}
        first_line: dict[str, int] = {}
        aliases: dict[str, str] = {}
        hf_ids: dict[str, str] = {}
        try:
            for cells in reader:
                line = reader.line_num
                if not any(cell.strip() for cell in cells):
                    continue  # blank line
                if len(cells) != len(header):
                    raise CatalogError(
                        f"{path}, line {line}: {len(cells)} cells but the header has "
                        f"{len(header)} columns (quote any cell that contains a comma)"
                    )
                row = _Row(path, line, {k: v.strip() for k, v in zip(header, cells, strict=True)})
                values = {name: parse(row, name) for name, parse in kinds.items() if name in header}
                slug = values["slug"]
                if not _SLUG_RE.match(slug):
                    raise row.error(
                        "slug",
                        f"{slug!r} is not a slug: use lower-case letters, digits, '.', '-' and '_' (e.g. 'h100-sxm')",
                    )
                if slug in first_line:
                    raise row.error("slug", f"duplicate slug {slug!r}, first defined on line {first_line[slug]}")
                spec = spec_type(**values)
                check(row, spec)
                first_line[slug] = line
                specs[slug] = spec
                notes[slug] = row.cells.get(NOTES_COLUMN, "")
                if alias_column and alias_column in header:
                    for repo_id in _row_aliases(row, alias_column, aliases):
                        aliases[repo_id.lower()] = slug
                        hf_ids[repo_id] = slug
        except (csv.Error, UnicodeDecodeError) as exc:
            raise CatalogError(f"{path}, line {reader.line_num}: not a readable UTF-8 CSV ({exc})") from None
    if not specs:
        raise CatalogError(f"{path} has a header but no rows")
    return _Table(path=path, specs=specs, notes=notes, aliases=aliases, hf_ids=dict(sorted(hf_ids.items())))


def _row_aliases(row: _Row, column: str, taken: dict[str, str]) -> list[str]:
    """The ``;``-separated Hugging Face ids in ``row``'s ``column``, checked: each
    ``owner/name`` and not listed by an earlier row (``taken``: lower-case id -> slug)."""
    found = [part.strip() for part in row.cells[column].split(";") if part.strip()]
    for repo_id in found:
        if not _HF_ID_RE.match(repo_id):
            raise row.error(
                column,
                f"{repo_id!r} is not a Hugging Face repository id: write owner/name such as "
                "'meta-llama/Llama-3.1-8B-Instruct', several separated by ';'",
            )
        if repo_id.lower() in taken:
            raise row.error(column, f"{repo_id!r} is already listed by the row {taken[repo_id.lower()]!r}")
    return found


def _check_header(path: Path, header: list[str], required: list[str], allowed: set[str]) -> None:
    duplicated = sorted({name for name in header if header.count(name) > 1})
    if duplicated:
        raise CatalogError(f"{path}, line 1: column(s) {', '.join(duplicated)} appear twice")
    # Unknown before missing: a misspelt column is both, and "did you mean" is the better hint.
    unknown = [name for name in header if name not in allowed]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(allowed), n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise CatalogError(
            f"{path}, line 1: unknown column(s) {', '.join(hints)}; allowed columns are {', '.join(sorted(allowed))}"
        )
    missing = [name for name in required if name not in header]
    if missing:
        raise CatalogError(
            f"{path}, line 1: missing required column(s) {', '.join(missing)}; "
            f"the columns are {', '.join(required)} (and optionally "
            f"{', '.join(sorted(allowed - set(required)))})"
        )


def _check_hardware(row: _Row, spec: HardwareSpec) -> None:
    """Hardware rows have no cross-field rules beyond positive, finite numbers."""


def _check_model(row: _Row, spec: ModelSpec) -> None:
    if spec.num_active_params > spec.num_params:
        raise row.error(
            "num_active_params",
            f"{spec.num_active_params:g} active parameters exceed the total num_params {spec.num_params:g}",
        )
    if spec.num_attention_heads % spec.num_kv_heads:
        raise row.error(
            "num_kv_heads",
            f"num_attention_heads ({spec.num_attention_heads}) is not a multiple of "
            f"num_kv_heads ({spec.num_kv_heads}); grouped-query attention shares each KV head "
            "among a whole number of query heads",
        )
    if spec.num_experts_per_token > spec.num_experts:
        raise row.error(
            "num_experts_per_token",
            f"{spec.num_experts_per_token} experts per token but only {spec.num_experts} experts",
        )
    if spec.num_experts == 1 and spec.num_active_params != spec.num_params:
        raise row.error(
            "num_active_params",
            f"a dense model (num_experts = 1) uses every parameter, so num_active_params "
            f"({spec.num_active_params:g}) must equal num_params ({spec.num_params:g})",
        )


@functools.cache
def _hardware_table(directory: Path) -> _Table[HardwareSpec]:
    return _read_table(directory / HARDWARE_FILE, HardwareSpec, _check_hardware)


@functools.cache
def _model_table(directory: Path) -> _Table[ModelSpec]:
    return _read_table(directory / MODELS_FILE, ModelSpec, _check_model, alias_column=HF_IDS_COLUMN)


def clear_cache() -> None:
    """Forget the loaded catalog so the next lookup re-reads the CSV files (after editing them)."""
    _hardware_table.cache_clear()
    _model_table.cache_clear()


# --------------------------------------------------------------------------------------------
# Public lookups
# --------------------------------------------------------------------------------------------


def _lookup(table: _Table[Spec], slug: str, kind: str, lister: str) -> Spec:
    if not isinstance(slug, str):
        example = next(iter(table.specs))
        raise TypeError(f"{kind} slug must be a str such as {example!r}, got {slug!r}")
    key = slug.strip().lower()
    try:
        return table.specs[key]
    except KeyError:
        pass
    if key in table.aliases:
        return table.specs[table.aliases[key]]
    if "/" in key and table.hf_ids:
        raise _unknown_hf_id(table, slug.strip())
    known = sorted(table.specs)
    close = [repo_id for repo_id in table.hf_ids if repo_id.lower().rpartition("/")[2] == key]  # owner left out
    close += [name for name in known if key and key in name]
    close += [
        name for name in difflib.get_close_matches(key, known, n=_MAX_SUGGESTIONS, cutoff=0.6) if name not in close
    ]
    hint = f"Did you mean {', '.join(close[:_MAX_SUGGESTIONS])}? " if close else ""
    raise UnknownNameError(
        f"unknown {kind} {slug!r}. {hint}See every slug with budgetlab.{lister}() (rows come from {table.path})."
    )


def _unknown_hf_id(table: _Table, repo_id: str) -> UnknownNameError:
    """The error for a Hugging Face id no row lists, with the closest listed ids."""
    key = repo_id.lower()
    by_key = {name.lower(): name for name in table.hf_ids}
    close = [by_key[k] for k in sorted(by_key) if k in key or key in k]
    close += [
        by_key[k]
        for k in difflib.get_close_matches(key, sorted(by_key), n=_MAX_SUGGESTIONS, cutoff=0.6)
        if by_key[k] not in close
    ]
    hint = f"Did you mean {', '.join(close[:_MAX_SUGGESTIONS])}? " if close else ""
    return UnknownNameError(
        f"unknown Hugging Face model id {repo_id!r}: no catalog row lists it (budgetlab never "
        f"downloads anything). {hint}See every listed id with budgetlab.catalog.hf_ids() (the "
        f"{HF_IDS_COLUMN} column of {table.path}); for another model, pass the path of its "
        "config.json (budgetlab.model_from_hf_config)."
    )


def hardware(slug: str) -> HardwareSpec:
    """Look up one accelerator by slug.

    Parameters
    ----------
    slug : str
        Catalog key such as ``"h100-sxm"``; case and surrounding whitespace are ignored.

    Returns
    -------
    HardwareSpec
        Datasheet numbers: dense BF16 peak [FLOP/s], memory bandwidth [B/s], memory [B],
        interconnect bandwidth per direction [B/s] and latency [s].

    Raises
    ------
    UnknownNameError
        For a slug not in the catalog; the message lists close matches.
    CatalogError
        When ``hardware.csv`` is missing or malformed.
    """
    return _lookup(_hardware_table(_catalog_dir()), slug, "hardware", "list_hardware")


def model(slug: str) -> ModelSpec:
    """Look up one model by slug, or by a Hugging Face id its row lists.

    Parameters
    ----------
    slug : str
        Catalog key such as ``"llama-3.1-8b"``, or a Hugging Face repository id in the row's
        ``hf_ids`` (``"meta-llama/Llama-3.1-8B-Instruct"``, see :func:`hf_ids`); case and
        surrounding whitespace are ignored.

    Returns
    -------
    ModelSpec
        Model-card and ``config.json`` numbers: parameters [count], layers, widths [elements],
        heads, vocabulary [tokens], experts and bytes per weight [B].

    Raises
    ------
    UnknownNameError
        For a slug or Hugging Face id not in the catalog; the message lists close matches.
    CatalogError
        When ``models.csv`` is missing or malformed.

    Examples
    --------
    >>> model("meta-llama/Llama-3.1-8B-Instruct").slug
    'llama-3.1-8b'
    """
    return _lookup(_model_table(_catalog_dir()), slug, "model", "list_models")


def _resolve(
    value: Spec | str, spec_type: type[Spec], lookup: Callable[[str], Spec], *, name: str, kind: str, example: str
) -> Spec:
    """``value`` as it is when a ``spec_type``, looked up with ``lookup`` when a slug."""
    if isinstance(value, spec_type):
        return value
    if isinstance(value, str):
        return lookup(value)
    raise ParameterError(f"{name} must be a {kind} slug such as {example!r} or a {spec_type.__name__}, got {value!r}")


def resolve_hardware(value: HardwareSpec | str, *, name: str = "hardware") -> HardwareSpec:
    """A hardware argument as a spec: a :class:`HardwareSpec` as it is, a slug looked up.

    Parameters
    ----------
    value : HardwareSpec or str
        The spec, or a catalog slug such as ``"h100-sxm"`` (see :func:`hardware`).
    name : str
        The argument's name, for the error message.

    Returns
    -------
    HardwareSpec

    Raises
    ------
    ParameterError
        When ``value`` is neither a :class:`HardwareSpec` nor a str.
    UnknownNameError
        For a slug not in the catalog; the message lists close matches.

    Examples
    --------
    >>> resolve_hardware("h100-sxm") is resolve_hardware(hardware("h100-sxm"))
    True
    """
    return _resolve(value, HardwareSpec, hardware, name=name, kind="hardware", example="h100-sxm")


def resolve_model(value: ModelSpec | str, *, name: str = "model") -> ModelSpec:
    """A model argument as a spec: a :class:`ModelSpec` as it is, a slug looked up.

    The model twin of :func:`resolve_hardware`: ``value`` is a :class:`ModelSpec` or a catalog
    slug such as ``"llama-3.1-8b"`` (see :func:`model`); ``name`` is the argument's name in the
    :class:`ParameterError` raised for anything else. A slug not in the catalog raises
    :class:`UnknownNameError`, listing close matches.
    """
    return _resolve(value, ModelSpec, model, name=name, kind="model", example="llama-3.1-8b")


def list_hardware() -> list[str]:
    """Every hardware slug in the catalog, sorted.

    Returns
    -------
    list of str
        Slugs accepted by :func:`hardware`.
    """
    return sorted(_hardware_table(_catalog_dir()).specs)


def list_models() -> list[str]:
    """Every model slug in the catalog, sorted.

    Returns
    -------
    list of str
        Slugs accepted by :func:`model`.
    """
    return sorted(_model_table(_catalog_dir()).specs)


def hf_ids() -> dict[str, str]:
    """Every Hugging Face repository id the model catalog knows, and the row it stands for.

    Returns
    -------
    dict of str to str
        ``{"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", ...}``, sorted by id, as written
        in ``models.csv``'s ``hf_ids`` column; :func:`model` accepts each id in any case.
    """
    return dict(_model_table(_catalog_dir()).hf_ids)


def _to_frame(table: _Table) -> pd.DataFrame:
    records = []
    for slug in sorted(table.specs):
        record = dataclasses.asdict(table.specs[slug])
        record[NOTES_COLUMN] = table.notes[slug]
        records.append(record)
    return pd.DataFrame.from_records(records).set_index("slug")


def hardware_table() -> pd.DataFrame:
    """The whole hardware catalog as a table, for browsing in a notebook.

    Returns
    -------
    pandas.DataFrame
        One row per accelerator, indexed by slug (sorted); columns are the
        :class:`~budgetlab.specs.HardwareSpec` fields in SI units ([FLOP/s], [B/s], [B], [s])
        plus ``notes``. A fresh copy: editing it does not change the catalog.
    """
    return _to_frame(_hardware_table(_catalog_dir()))


def model_table() -> pd.DataFrame:
    """The whole model catalog as a table, for browsing in a notebook.

    Returns
    -------
    pandas.DataFrame
        One row per model, indexed by slug (sorted); columns are the
        :class:`~budgetlab.specs.ModelSpec` fields (parameters [count], widths [elements],
        ``dtype_bytes`` [B]) plus ``notes``. A fresh copy: editing it does not change the catalog.
    """
    return _to_frame(_model_table(_catalog_dir()))
