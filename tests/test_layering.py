"""The package's layers, read from the source (no module is imported): who may import whom.

From the bottom up: the specs, catalog, cost models, budget, memory, gates (:mod:`budgetlab.admission`),
workloads and metrics; the simulator on top of them; the experiments (sweeps, capacity, tuner) on
top of the simulator; and the presentation on top of everything: :mod:`budgetlab.charts` (draws
only: tidy frames in, Altair out), :mod:`budgetlab.notebook`, :mod:`budgetlab.reports`, the
facade ``budgetlab/__init__.py`` and ``python -m budgetlab``. Each test names the file and line
that breaks a rule and says how to mend it.

Imports under ``if TYPE_CHECKING:`` are for type hints only and never run, so every rule skips
them. A name imported from a package (``from budgetlab import simulate``) counts as an import
of the module that defines it, followed through the packages' re-exports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "budgetlab"

#: What ``budgetlab/charts/`` may not import: it draws what the model modules computed.
CHARTS_MAY_NOT_IMPORT = (
    "budgetlab.simulator",
    "budgetlab.experiments",
    "budgetlab.cost.fit",
    "budgetlab.notebook",
    "scipy",
)
#: What no module below the presentation layer may import when it is imported.
PRESENTATION_ONLY = ("budgetlab.charts", "budgetlab.notebook", "altair", "papermill")
#: The presentation layer: the only modules that may import :data:`PRESENTATION_ONLY`.
PRESENTATION = ("budgetlab", "budgetlab.charts", "budgetlab.notebook", "budgetlab.reports", "budgetlab.__main__")
#: The longest a module may grow [lines] (issue 9: one concept per module, 100-500 lines).
MAX_MODULE_LINES = 700


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def _within(module: str, prefixes: tuple[str, ...]) -> str | None:
    """The prefix ``module`` is, or lies under, or ``None``."""
    return next((p for p in prefixes if module == p or module.startswith(p + ".")), None)


@dataclass(frozen=True)
class Import:
    """One import statement's target: ``module`` (absolute), ``name`` (``None`` for ``import x``),
    and ``bound``, the name it binds (``m`` for ``import budgetlab.metrics as m``)."""

    module: str
    name: str | None
    line: int
    module_level: bool
    bound: str


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _walk(nodes: list[ast.stmt], *, module_level: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under ``nodes`` that runs, with whether it runs on import; skips the bodies of
    ``if TYPE_CHECKING:`` (never run)."""
    for node in nodes:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _walk(node.orelse, module_level=module_level)
            continue
        yield node, module_level
        inner = module_level and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt | ast.ExceptHandler | ast.match_case):
                continue  # their statements are visited below (for the TYPE_CHECKING check)
            yield from _walk_expr(child, module_level=inner)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                statements = [s for s in block if isinstance(s, ast.stmt)]
                for other in block:
                    if isinstance(other, ast.ExceptHandler | ast.match_case):
                        statements.extend(other.body)
                yield from _walk(statements, module_level=inner)


def _walk_expr(node: ast.AST, *, module_level: bool) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.walk(node):
        yield child, module_level


def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))


def imports_of(module: str) -> list[Import]:
    """Every import ``module`` runs (``TYPE_CHECKING`` blocks excepted), with its line and
    whether it runs on import. ``importlib.import_module("x")`` with a literal counts too."""
    found = []
    for node, module_level in _walk(_tree(module).body, module_level=True):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [
                Import(alias.name, None, line, module_level, alias.asname or alias.name.partition(".")[0])
                for alias in node.names
            ]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            source = _absolute(module, node)
            found += [
                Import(source, alias.name, line, module_level, alias.asname or alias.name) for alias in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(Import(node.args[0].value, None, line, module_level, ""))
    return found


def _defining_module(module: str, name: str, seen: frozenset[str] = frozenset()) -> str:
    """The module behind ``from module import name``: the submodule ``module.name``, or the
    module ``name`` was re-exported from (followed through ``from x import name``), or
    ``module`` itself."""
    if f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    if module not in MODULES or module in seen:
        return module
    for statement in _tree(module).body:
        if isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(module, statement)
                    return _defining_module(source, alias.name, seen | {module})
    return module


def targets(found: Import) -> set[str]:
    """The modules one import reaches: the named module, and the one behind each imported name."""
    if found.name is None:
        return {found.module}
    return {found.module, _defining_module(found.module, found.name)}


def _where(module: str, found: Import) -> str:
    path = MODULES[module].relative_to(PACKAGE.parent)
    what = f"from {found.module} import {found.name}" if found.name else f"import {found.module}"
    return f"{path}:{found.line} ({what})"


def _presentation(module: str) -> bool:
    return module == "budgetlab" or _within(module, PRESENTATION[1:]) is not None


# --- the rules ----------------------------------------------------------------------------------------


def test_the_scan_sees_the_package():
    assert {"budgetlab", "budgetlab.charts", "budgetlab.simulator", "budgetlab.admission"} <= set(MODULES)
    assert any(f.name == "Gate" for f in imports_of("budgetlab.charts.runs"))
    # a name re-exported by a package is followed to the module that defines it
    assert _defining_module("budgetlab", "simulate") == "budgetlab.simulator"
    assert _defining_module("budgetlab.cost", "residual_summary") == "budgetlab.cost.fit"


def test_charts_only_draw():
    """(a) charts/ imports no simulator, experiments, fitting, notebook or scipy code."""
    broken = [
        f"{_where(module, found)} reaches {target}"
        for module in MODULES
        if _within(module, ("budgetlab.charts",))
        for found in imports_of(module)
        for target in targets(found)
        if _within(target, CHARTS_MAY_NOT_IMPORT)
    ]
    assert not broken, (
        "budgetlab.charts draws tidy frames that the model computed; it must not import "
        f"{', '.join(CHARTS_MAY_NOT_IMPORT)}. Move the computation next to the model (metrics, "
        "experiments, cost.fit) and let the notebook pass its result in; an import needed for "
        "a type hint only goes under `if TYPE_CHECKING:`.\n  " + "\n  ".join(broken)
    )


def test_no_model_module_imports_the_presentation():
    """(b) below the presentation layer nothing imports charts, notebook, altair or papermill."""
    broken = [
        f"{_where(module, found)} reaches {target}"
        for module in MODULES
        if not _presentation(module)
        for found in imports_of(module)
        if found.module_level
        for target in targets(found)
        if _within(target, PRESENTATION_ONLY)
    ]
    assert not broken, (
        "only the presentation layer (budgetlab/__init__.py, charts/, notebook/, reports.py, "
        f"__main__.py) may import {', '.join(PRESENTATION_ONLY)}: a model module returns numbers "
        "and frames, and the chart or notebook that shows them imports it, not the other way "
        "round. Move the drawing into budgetlab/charts/ (or the notebook helper into "
        "budgetlab/notebook/).\n  " + "\n  ".join(broken)
    )


def _gate_functions() -> set[str]:
    return {node.name for node in _tree("budgetlab.admission").body if isinstance(node, ast.FunctionDef)}


def test_the_simulator_asks_the_gates():
    """(c) the simulator admits requests through budgetlab.admission's gates, not copies of them."""
    simulator = [m for m in MODULES if _within(m, ("budgetlab.simulator",))]
    gates = _gate_functions()
    assert {"seq_slot_free", "budget_has_room", "kv_blocks_fit"} <= gates
    importers = [m for m in simulator if any("budgetlab.admission" in targets(f) for f in imports_of(m))]
    assert importers, (
        "no module of budgetlab/simulator/ imports budgetlab.admission: the simulator must admit "
        f"waiting requests through the gates defined there ({', '.join(sorted(gates))}), "
        "e.g. `from budgetlab.admission import seq_slot_free, budget_has_room, kv_blocks_fit`"
    )
    copies = [
        f"{MODULES[m].relative_to(PACKAGE.parent)}:{node.lineno} defines {node.name}"
        for m in simulator
        for node in ast.walk(_tree(m))
        if isinstance(node, ast.FunctionDef) and node.name in gates
    ]
    assert not copies, (
        "the simulator defines its own copy of a gate; delete it and import the one in "
        "budgetlab/admission.py:\n  " + "\n  ".join(copies)
    )
    called = {m: {n.id for n in ast.walk(_tree(m)) if isinstance(n, ast.Name) and n.id in gates} for m in simulator}
    from_admission = {
        m: {f.name for f in imports_of(m) if f.name and "budgetlab.admission" in targets(f)} for m in simulator
    }
    elsewhere = [
        f"{MODULES[m].relative_to(PACKAGE.parent)} uses {sorted(called[m] - from_admission[m])}"
        for m in simulator
        if called[m] - from_admission[m]
    ]
    assert not elsewhere, (
        "a simulator module uses a gate it did not import from budgetlab.admission; import it "
        "from there:\n  " + "\n  ".join(elsewhere)
    )


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_700_lines(module):
    """(d) one concept per module: none grows past :data:`MAX_MODULE_LINES` lines."""
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, (
        f"{MODULES[module].relative_to(PACKAGE.parent)} has {lines} lines, over {MAX_MODULE_LINES}: "
        "split it into modules of one concept each (aim for 100-500 lines) and re-export the "
        "public names from the package"
    )


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for the expression ``a.b.c``, or ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def test_the_tuner_uses_public_names_only():
    """(e) experiments/tune.py builds on the other modules' public names only."""
    tuner = "budgetlab.experiments.tune"
    where = MODULES[tuner].relative_to(PACKAGE.parent)
    modules: dict[str, str] = {}  # local name → the budgetlab module it is: `import budgetlab.x as m`
    private = []
    for found in imports_of(tuner):
        if not _within(found.module, ("budgetlab",)) or found.module == tuner:
            continue
        if found.name is None:
            modules[found.bound] = found.module if found.bound != "budgetlab" else "budgetlab"
        elif found.name.startswith("_"):
            private.append(_where(tuner, found))
        elif f"{found.module}.{found.name}" in MODULES:
            modules[found.bound] = f"{found.module}.{found.name}"
    for node in ast.walk(_tree(tuner)):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        owner = _dotted(node.value)
        root, _, rest = (owner or "").partition(".")
        if root in modules:
            module = modules[root] if not rest or modules[root] != "budgetlab" else f"budgetlab.{rest}"
            if module in MODULES and module != tuner:
                private.append(f"{where}:{node.lineno} ({owner}.{node.attr})")
    assert not private, (
        "experiments/tune.py imports a private (underscore) name of another module: make it public "
        "there (no underscore, a docstring, in __all__) or give tune.py its own, then import the "
        "public name:\n  " + "\n  ".join(private)
    )
