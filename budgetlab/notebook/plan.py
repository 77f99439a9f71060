"""What to render: find the notebooks and scenarios, check names and parameters, list the runs.

A *scenario* is a flat YAML file of parameter name → value (``notebooks/params/S.yaml``); a
*job* is one notebook × one scenario with the parameters that notebook declares.
:func:`plan` turns the names given on the command line into jobs without starting a kernel, so
a typo stops the run before anything executes (:class:`ReportError` lists what exists).

The notebooks and scenarios ship with budgetlab: a source checkout has them at
``<repo>/notebooks`` and an installed wheel carries them as ``budgetlab/_data/notebooks``
(like the catalog, see :func:`budgetlab.catalog.data_path`), so :func:`default_notebooks_dir`
finds them from any working directory.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import yaml

from budgetlab.errors import BudgetlabError, ParameterError
from budgetlab.notebook.untrusted import (
    LIMITS,
    admit_parameters,
    admit_value,
    load_untrusted_mapping,
    load_untrusted_yaml,
)

__all__ = [
    "RESULTS_PARAMETER",
    "Folders",
    "Job",
    "ReportError",
    "default_notebooks_dir",
    "find_notebooks",
    "find_scenarios",
    "load_scenario",
    "notebook_parameters",
    "notebook_title",
    "parse_override",
    "plan",
    "resolve_folders",
    "select_notebooks",
    "select_scenarios",
]

#: The parameter the renderer sets itself: where a notebook saves its key numbers.
RESULTS_PARAMETER = "results_path"


class ReportError(BudgetlabError, ValueError):
    """A notebook, scenario or parameter named on the command line or in a scenario file
    does not exist (the message lists what does)."""


class Folders(TypedDict, total=False):
    """Where the notebooks, their scenarios and the reports live (each key optional).

    Attributes
    ----------
    notebooks_dir : Path or None
        The ``*.ipynb`` files, also the kernels' working directory; ``None`` or absent:
        :func:`default_notebooks_dir`.
    params_dir : Path or None
        Scenario files; ``None`` or absent: ``notebooks_dir / "params"``.
    out_dir : Path
        Output root; absent: ``reports`` in the working directory.
    """

    notebooks_dir: Path | None
    params_dir: Path | None
    out_dir: Path


@dataclasses.dataclass(frozen=True)
class Job:
    """One notebook × one scenario to execute and render.

    Attributes
    ----------
    notebook, scenario : str
        Names without suffix.
    input_path : Path
        The notebook file.
    out_dir : Path
        ``<out>/<scenario>``, where the four outputs go.
    parameters : dict
        What papermill passes: the scenario's values the notebook declares, the overrides, and
        ``results_path`` when the notebook declares it.
    results_path : Path
        Where the notebook is told to save its results JSON.
    """

    notebook: str
    scenario: str
    input_path: Path
    out_dir: Path
    parameters: dict[str, Any]
    results_path: Path


# --------------------------------------------------------------------------------------------
# where the notebooks are


def default_notebooks_dir() -> Path:
    """The notebooks shipped with budgetlab, wherever the working directory is.

    An installed wheel carries them as ``budgetlab/_data/notebooks``; a source checkout (or an
    editable install) has them at ``<repo>/notebooks``. The installed location is tried first.

    Raises
    ------
    ReportError
        When neither location exists; the message names both and the fix.
    """
    installed = Path(str(importlib.resources.files("budgetlab"))) / "_data" / "notebooks"
    checkout = Path(__file__).resolve().parents[2] / "notebooks"
    for candidate in (installed, checkout):
        if candidate.is_dir():
            return candidate
    raise ReportError(
        f"budgetlab's notebooks not found, neither installed at {installed} nor in a checkout at "
        f"{checkout}; pass --notebooks-dir DIR (reinstall the package if the wheel lacks them)"
    )


def resolve_folders(**folders: Unpack[Folders]) -> tuple[Path, Path, Path]:
    """``(notebooks_dir, params_dir, out_dir)`` as absolute paths, defaults filled in (see
    :class:`Folders`)."""
    given = folders.get("notebooks_dir")
    notebooks_dir = (default_notebooks_dir() if given is None else Path(given)).resolve()
    params = folders.get("params_dir")
    params_dir = notebooks_dir / "params" if params is None else Path(params).resolve()
    out_dir = Path(folders.get("out_dir", Path("reports"))).resolve()
    return notebooks_dir, params_dir, out_dir


# --------------------------------------------------------------------------------------------
# discovery


def find_notebooks(notebooks_dir: Path) -> dict[str, Path]:
    """Notebooks in ``notebooks_dir`` by name (file stem), sorted; ``{}`` if there are none.

    Files starting with ``.`` or ``_`` are skipped.
    """
    notebooks_dir = Path(notebooks_dir)
    if not notebooks_dir.is_dir():
        return {}
    paths = sorted(p for p in notebooks_dir.glob("*.ipynb") if not p.name.startswith((".", "_")))
    return {p.stem: p for p in paths}


def find_scenarios(params_dir: Path) -> dict[str, Path]:
    """Scenario files (``*.yaml``, ``*.yml``) in ``params_dir`` by name, sorted."""
    params_dir = Path(params_dir)
    if not params_dir.is_dir():
        return {}
    paths = sorted(p for p in params_dir.iterdir() if p.suffix in {".yaml", ".yml"} and p.is_file())
    return {p.stem: p for p in paths if not p.name.startswith((".", "_"))}


def select_notebooks(names: Sequence[str], available: Mapping[str, Path]) -> list[str]:
    """Resolve notebook names given with or without ``.ipynb``, as paths, or as prefixes.

    A prefix selects every notebook starting with it (``03`` → ``03-ttft-vs-budget``).

    Raises
    ------
    ReportError
        A name matches no notebook (the message lists the notebooks).
    """
    chosen: list[str] = []
    for raw in names:
        name = Path(raw).name.removesuffix(".ipynb")
        matches = [name] if name in available else [n for n in available if n.startswith(name)]
        if not name or not matches:
            listing = ", ".join(available) or "none"
            raise ReportError(f"no notebook named {raw!r}; the notebooks are: {listing}")
        chosen.extend(m for m in matches if m not in chosen)
    return [n for n in available if n in chosen]


def select_scenarios(names: Sequence[str], available: Mapping[str, Path]) -> list[str]:
    """Resolve scenario names (file stems, ``.yaml`` optional); unknown → :class:`ReportError`."""
    chosen: list[str] = []
    for raw in names:
        name = Path(raw).name.removesuffix(".yaml").removesuffix(".yml")
        if name not in available:
            listing = ", ".join(available) or "none"
            raise ReportError(f"no scenario named {raw!r}; the scenarios are: {listing}")
        if name not in chosen:
            chosen.append(name)
    return chosen


def load_scenario(path: Path) -> dict[str, Any]:
    """Read a scenario file: a flat YAML mapping of parameter name → value (empty → ``{}``).

    The file is untrusted: it is read through :func:`~budgetlab.notebook.untrusted.load_untrusted_mapping`
    (no YAML tags, bounded size, values, depth and aliases; plain types only).

    Raises
    ------
    ReportError
        The file is unreadable, not UTF-8, not YAML, not a mapping, or holds a value the
        admission refuses (the message names the parameter and the rule).
    """
    path = Path(path)
    origin = f"scenario {path}"
    try:
        size_bytes = path.stat().st_size
        if size_bytes > LIMITS.max_text_bytes:
            raise ReportError(
                f"{origin} is refused: it has {size_bytes:,} bytes, more than {LIMITS.max_text_bytes:,}; "
                "a scenario holds only its parameters (a few KB)"
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{origin} cannot be read: {exc}") from None
    try:
        return load_untrusted_mapping(text, origin=origin)
    except yaml.YAMLError as exc:
        raise ReportError(f"{origin} is not valid YAML: {exc}") from None
    except ParameterError as exc:
        raise ReportError(str(exc)) from None


def notebook_parameters(path: Path) -> dict[str, dict[str, Any]]:
    """The parameters a notebook's ``parameters`` cell declares (``papermill.inspect_notebook``).

    Returns name → ``{"name", "inferred_type_name", "default", "help"}``; no kernel is started.
    """
    import papermill

    return dict(papermill.inspect_notebook(str(path)))


def parse_override(value: str, *, name: str = "") -> Any:
    """Parse a ``-p`` value as YAML, admitting only plain values.

    ``"[512, 2048]"`` → list, ``"true"`` → bool, ``"5000"`` → int, ``"h100-sxm"`` → str.

    Text that is not valid YAML is kept as the string itself. The value goes through
    :func:`~budgetlab.notebook.untrusted.load_untrusted_yaml`: a YAML tag (``!!set``,
    ``!!binary``, ``!!python/object``), aliases that expand past the limits, deep nesting or
    oversized text are refused.

    Parameters
    ----------
    value : str
        The text after ``-p NAME``.
    name : str
        The parameter, named in a refusal.

    Raises
    ------
    ReportError
        The value breaks a rule of :mod:`~budgetlab.notebook.untrusted` (the message names it).
    """
    try:
        try:
            return load_untrusted_yaml(value, name=name, origin="-p")
        except yaml.YAMLError:
            return admit_value(name, value, origin="-p")
    except ParameterError as exc:
        raise ReportError(str(exc)) from None


def notebook_title(path: Path) -> str:
    """The notebook's first level-1 Markdown heading (``# Title``), or ``""``."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else source
            for line in text.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


# --------------------------------------------------------------------------------------------
# planning


def plan(
    notebooks: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    **folders: Unpack[Folders],
) -> list[Job]:
    """Check names and parameters and list the runs :func:`~budgetlab.notebook.render.render`
    would do (no kernel starts).

    Parameters
    ----------
    notebooks, scenarios : sequence of str, optional
        Names to render (see :func:`select_notebooks`, :func:`select_scenarios`); all when
        omitted or empty.
    overrides : mapping, optional
        Parameter values applied to every selected notebook that declares them; admitted by
        :func:`~budgetlab.notebook.untrusted.admit_parameters` (plain types, bounded sizes; a
        path becomes its string).
    **folders
        ``notebooks_dir``, ``params_dir``, ``out_dir`` (see :class:`Folders`).

    Returns
    -------
    list of Job
        Notebook within scenario order; empty when there are no notebooks or no scenarios.

    Raises
    ------
    ReportError
        Unknown notebook or scenario, a scenario key or ``-p`` name that no notebook declares,
        an attempt to set ``results_path``, or a value the admission refuses.
    """
    notebooks_dir, params_dir, out_dir = resolve_folders(**folders)
    try:
        overrides = admit_parameters(overrides or {}, origin="overrides")
    except ParameterError as exc:
        raise ReportError(str(exc)) from None

    available = find_notebooks(notebooks_dir)
    scenario_files = find_scenarios(params_dir)
    chosen_notebooks = select_notebooks(notebooks, available) if notebooks else list(available)
    chosen_scenarios = select_scenarios(scenarios, scenario_files) if scenarios else list(scenario_files)
    if not available or not scenario_files:
        return []

    declared = {name: notebook_parameters(path) for name, path in available.items()}
    all_declared = set().union(*declared.values())
    selected_declared = set().union(*(declared[n] for n in chosen_notebooks))

    if RESULTS_PARAMETER in overrides:
        raise ReportError(f"{RESULTS_PARAMETER} is set by budgetlab.reports; do not pass it with -p")
    unknown = sorted(set(overrides) - selected_declared)
    if unknown:
        raise ReportError(
            f"-p {', '.join(unknown)}: no selected notebook declares "
            f"{'this parameter' if len(unknown) == 1 else 'these parameters'}; "
            f"they declare: {', '.join(sorted(selected_declared - {RESULTS_PARAMETER})) or 'none'}"
        )

    jobs: list[Job] = []
    for scenario in chosen_scenarios:
        values = load_scenario(scenario_files[scenario])
        if RESULTS_PARAMETER in values:
            raise ReportError(
                f"scenario {scenario_files[scenario]} sets {RESULTS_PARAMETER}, which "
                f"budgetlab.reports sets itself; remove it"
            )
        stray = sorted(set(values) - all_declared)
        if stray:
            raise ReportError(
                f"scenario {scenario_files[scenario]} sets {', '.join(stray)}, which no notebook "
                f"declares; the notebooks' parameters are: "
                f"{', '.join(sorted(all_declared - {RESULTS_PARAMETER})) or 'none'}"
            )
        values.update(overrides)
        for notebook in chosen_notebooks:
            names = declared[notebook]
            parameters = {k: v for k, v in values.items() if k in names}
            results_path = out_dir / scenario / f"{notebook}.results.json"
            if RESULTS_PARAMETER in names:
                parameters[RESULTS_PARAMETER] = str(results_path)
            jobs.append(
                Job(
                    notebook=notebook,
                    scenario=scenario,
                    input_path=available[notebook],
                    out_dir=out_dir / scenario,
                    parameters=parameters,
                    results_path=results_path,
                )
            )
    return jobs
