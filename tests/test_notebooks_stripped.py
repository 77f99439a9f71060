"""Notebooks as committed: outputs stripped, the skeleton of DESIGN.md, a clean parameters cell.

Static checks only (no kernel): every ``notebooks/*.ipynb`` is picked up automatically.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
ANNOTATIONS = {"int", "float", "str", "bool", "list", "dict"}


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _parameters_index(nb) -> int:
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"exactly one cell tagged 'parameters', found {len(tagged)}"
    assert nb.cells[tagged[0]].cell_type == "code"
    return tagged[0]


def _headings(nb) -> list[str]:
    return [
        line.strip()
        for c in nb.cells
        if c.cell_type == "markdown"
        for line in c.source.splitlines()
        if line.startswith("#")
    ]


def test_nbstripout_verify():
    pytest.importorskip("nbstripout")
    result = subprocess.run(
        [sys.executable, "-m", "nbstripout", "--verify", *map(str, NOTEBOOKS)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (
        "a notebook was committed with outputs. Strip them with `.venv/bin/nbstripout notebooks/*.ipynb` "
        "and commit again; `make lab` installs the git filter (.gitattributes) that strips them on every "
        f"commit, so it does not happen again:\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_stripped_and_kernel(path: Path):
    nb = _read(path)
    nbformat.validate(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {index} has outputs"
            assert cell.execution_count is None, f"cell {index} has an execution count"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["kernelspec"]["language"] == "python"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_name_is_numbered_kebab_case(path: Path):
    stem = path.stem
    assert stem[:2].isdigit() and stem[2] == "-" and stem == stem.lower() and " " not in stem


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_skeleton(path: Path):
    """Title → what you will learn → imports → parameters → validation → sections → summary → references."""
    nb = _read(path)
    cells = nb.cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# "), "H1 title first"
    headings = _headings(nb)
    assert sum(h.startswith("# ") for h in headings) == 1, "one H1 title"
    for required in ("## What you will learn", "## Summary", "## References"):
        assert required in headings, f"missing heading {required!r}"
    learn = headings.index("## What you will learn")
    summary, references = headings.index("## Summary"), headings.index("## References")
    assert learn < summary < references
    assert len([h for h in headings[learn + 1 : summary] if h.startswith("## ")]) >= 2, "at least two sections"

    p = _parameters_index(nb)
    imports = [i for i, c in enumerate(cells[:p]) if c.cell_type == "code"]
    assert len(imports) == 1, "one imports cell before the parameters cell"
    learn_cell = next(i for i, c in enumerate(cells) if "## What you will learn" in c.source)
    assert learn_cell < imports[0] < p
    tree = ast.parse(cells[imports[0]].source)
    assert any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body)
    assert "use_offline_renderer()" in cells[imports[0]].source, "charts must render in offline reports"

    validation = cells[p + 1]
    assert validation.cell_type == "code" and "validate_parameters(" in validation.source, (
        "the cell right after the parameters validates them"
    )
    last = cells[-1]
    assert last.cell_type == "code" and "save_results(" in last.source, "end with save_results(...)"


def _comments_by_line(source: str) -> dict[int, str]:
    comments = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string
    return comments


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_is_annotated_literals_with_comments(path: Path):
    nb = _read(path)
    p = _parameters_index(nb)
    source = nb.cells[p].source
    tree = ast.parse(source)
    comments = _comments_by_line(source)
    names = []
    for node in tree.body:
        assert isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name), (
            f"line {node.lineno}: only `name: type = literal  # unit` assignments"
        )
        assert isinstance(node.annotation, ast.Name) and node.annotation.id in ANNOTATIONS, (
            f"line {node.lineno}: annotate with one of {sorted(ANNOTATIONS)}"
        )
        value = ast.literal_eval(node.value)  # raises for anything but a literal
        expected = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict}[
            node.annotation.id
        ]
        assert isinstance(value, expected) and not (expected is int and isinstance(value, bool))
        assert node.end_lineno in comments, f"line {node.lineno}: add a trailing comment with the unit"
        assert len(comments[node.end_lineno].lstrip("# ").strip()) >= 10, f"line {node.lineno}: say what it is"
        names.append(node.target.id)
    assert "results_path" in names and "hardware" in names and "model" in names
    assert len(names) == len(set(names))

    # papermill must see the same parameters (an '=' in a comment hides a parameter from it).
    from papermill.translators import PythonTranslator

    inspected = [param.name for param in PythonTranslator.inspect(nb.cells[p])]
    assert inspected == names

    # ...and the validation cell checks each of them.
    call = ast.parse(nb.cells[p + 1].source)
    keywords = {
        kw.arg: kw.value.id
        for node in ast.walk(call)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "validate_parameters"
        for kw in node.keywords
        if isinstance(kw.value, ast.Name)
    }
    assert keywords == {name: name for name in names}, "validate every parameter as name=name"


_ARITHMETIC = (ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _arithmetic(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Add) and (
                _is_text(node.left) or _is_text(node.right) or isinstance(node.left, ast.BinOp)
            ):
                continue  # joining prose
            if isinstance(node.op, (*_ARITHMETIC, ast.Add)):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.AugAssign):
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_formulas_in_notebooks(path: Path):
    """All math lives in budgetlab; notebooks call it and format the results (charts.fmt_*)."""
    nb = _read(path)
    offenders = [
        f"cell {i}: {expr}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for expr in _arithmetic(cell.source)
    ]
    assert not offenders, "move these into budgetlab: " + "; ".join(offenders)


def test_arithmetic_detector():
    assert _arithmetic("x = a * 1e3") == ["a * 1000.0"]
    assert _arithmetic("y = 'a' + f'{b}' + c") == []
    assert _arithmetic("z = n + 1") == ["n + 1"]


def test_git_strips_notebook_outputs_through_the_filter():
    root = NOTEBOOKS_DIR.parent
    attributes = (root / ".gitattributes").read_text(encoding="utf-8").splitlines()
    assert "*.ipynb filter=nbstripout" in attributes, "keep the nbstripout filter in .gitattributes"
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    assert "nbstripout --install --attributes .gitattributes" in makefile, "make lab installs the filter"
    # JupyterLab on loopback, as root too (the options themselves: tests/test_lab.py)
    assert "-m budgetlab.notebook.lab notebooks" in makefile
    assert "id: nbstripout" in (root / ".pre-commit-config.yaml").read_text(encoding="utf-8")
