"""The toolchain a maintainer expects: one version, a LICENSE that matches the metadata,
``python -m budgetlab --version``, ``py.typed`` in the wheel, and floors declared once.

``BUDGETLAB_EXPECT_INSTALLED=1`` (set by ``make test-wheel``) says the suite runs against an
installed wheel: then ``import budgetlab`` must resolve to site-packages, not to the checkout.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

import budgetlab
from budgetlab._version import __version__

from conftest import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
PACKAGE_DIR = Path(budgetlab.__file__).resolve().parent
EXPECT_INSTALLED = os.environ.get("BUDGETLAB_EXPECT_INSTALLED") == "1"


def _run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "budgetlab", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path.home() if EXPECT_INSTALLED else REPO_ROOT,
    )


# --- the version, in one place ---------------------------------------------------------------


def test_version_is_declared_once_in_version_py():
    assert "version" not in PROJECT, "pyproject.toml must not repeat the version"
    assert PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "budgetlab/_version.py"
    assert budgetlab.__version__ == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", __version__), __version__


def test_hatchling_reads_the_same_version():
    from hatchling.metadata.core import ProjectMetadata
    from hatchling.plugin.manager import PluginManager

    assert ProjectMetadata(str(REPO_ROOT), PluginManager()).version == __version__


def test_installed_metadata_has_the_package_version():
    # an editable install records the version at install time: reinstall after bumping it
    assert importlib.metadata.version("budgetlab") == budgetlab.__version__


# --- the license -------------------------------------------------------------------------------


def test_license_file_matches_the_metadata():
    text = (REPO_ROOT / "LICENSE").read_text()
    assert PROJECT["license"] == {"text": "MIT"}
    assert text.splitlines()[0] == "MIT License"
    assert re.search(r"^Copyright \(c\) \d{4} the budgetlab authors$", text, re.MULTILINE)
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_installed_metadata_says_mit():
    metadata = importlib.metadata.metadata("budgetlab")
    assert "MIT" in (metadata.get("License-Expression") or metadata.get("License") or "")


# --- python -m budgetlab -----------------------------------------------------------------------


def test_module_prints_its_version():
    result = _run_module("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"budgetlab {budgetlab.__version__}\n"


def test_module_without_arguments_points_to_the_reports():
    result = _run_module()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m budgetlab")
    assert "python -m budgetlab.reports --list" in result.stdout


def test_module_rejects_unknown_arguments():
    result = _run_module("--frobnicate")
    assert result.returncode == 2
    assert "unrecognized arguments: --frobnicate" in result.stderr


# --- typing marker and the wheel ----------------------------------------------------------------


def test_py_typed_is_in_the_package():
    assert (PACKAGE_DIR / "py.typed").is_file()


@pytest.mark.slow
@pytest.mark.floors  # built by hatchling at its floor
@pytest.mark.wheel
def test_wheel_ships_py_typed_license_and_version(built_wheel: Path):
    wheel = built_wheel
    assert wheel.name.startswith(f"budgetlab-{__version__}-py3-none-any")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"budgetlab-{__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        licenses = [name for name in names if name.startswith(f"{info}/") and name.endswith("LICENSE")]
        assert len(licenses) == 1, sorted(names)
        assert archive.read(licenses[0]) == (REPO_ROOT / "LICENSE").read_bytes()
    assert "budgetlab/py.typed" in names
    assert "budgetlab/_version.py" in names
    assert "budgetlab/__main__.py" in names
    assert re.search(rf"^Version: {re.escape(__version__)}$", metadata, re.MULTILINE)


# --- the declared floors -----------------------------------------------------------------------


def test_every_dependency_declares_a_floor_that_min_constraints_pins():
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        import min_constraints
    finally:
        sys.path.remove(str(REPO_ROOT / "tools"))
    extras = sorted(PROJECT["optional-dependencies"])
    pins = min_constraints.floors()  # the runtime dependencies and every extra
    assert min_constraints.floors(extras) == pins
    declared = [*PROJECT["dependencies"], *(r for e in extras for r in PROJECT["optional-dependencies"][e])]
    for requirement in declared:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()
        floor = re.search(r">=\s*([0-9][^,;\s]*)", requirement)
        assert floor is not None, f"{requirement!r} declares no floor"
        assert pins[name] == floor.group(1)
    # floors that were once too low (issue 9): the first versions that work
    assert Version(pins["vl-convert-python"]) >= Version("1.7")  # get_vegalite_versions()
    assert Version(pins["nbstripout"]) >= Version("0.8")  # --verify


def test_min_constraints_refuses_a_dependency_without_a_floor(tmp_path: Path, monkeypatch):
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        import min_constraints
    finally:
        sys.path.remove(str(REPO_ROOT / "tools"))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["numpy>=1.26", "tqdm"]\n')
    monkeypatch.setattr(min_constraints, "PYPROJECT", pyproject)
    with pytest.raises(SystemExit, match="'tqdm' declares no '>=' floor"):
        min_constraints.floors([])


# --- running against an installed wheel ----------------------------------------------------------


@pytest.mark.skipif(not EXPECT_INSTALLED, reason="only under make test-wheel (BUDGETLAB_EXPECT_INSTALLED=1)")
def test_budgetlab_is_imported_from_the_installed_wheel():
    assert "site-packages" in PACKAGE_DIR.parts, PACKAGE_DIR
    assert (REPO_ROOT / "budgetlab").resolve() != PACKAGE_DIR, "the checkout shadows the wheel"
    direct_url = json.loads(importlib.metadata.distribution("budgetlab").read_text("direct_url.json") or "{}")
    assert not direct_url.get("dir_info", {}).get("editable", False), direct_url
