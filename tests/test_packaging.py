"""pyproject.toml and environment.yml name the same packages with the same bounds."""

from __future__ import annotations

import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import REPO_ROOT


def _pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements.extend(extra)
    specs: dict[str, str] = {"python": str(Requirement(f"python{project['requires-python']}").specifier)}
    for text in requirements:
        requirement = Requirement(text)
        specs[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return specs


def _conda_requirements() -> tuple[dict[str, str], list]:
    environment = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    specs: dict[str, str] = {}
    pip_entries: list = []
    for entry in environment["dependencies"]:
        if isinstance(entry, dict):
            pip_entries.extend(entry.get("pip", []))
            continue
        if entry == "pip":
            continue
        requirement = Requirement(entry)
        specs[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return specs, pip_entries


def test_environment_mirrors_pyproject():
    pyproject = _pyproject_requirements()
    conda, _ = _conda_requirements()
    missing = sorted(set(pyproject) - set(conda))
    extra = sorted(set(conda) - set(pyproject))
    assert not missing, f"in pyproject.toml but not environment.yml: {missing}"
    assert not extra, f"in environment.yml but not pyproject.toml: {extra}"
    differing = {name: (pyproject[name], conda[name]) for name in pyproject if pyproject[name] != conda[name]}
    assert not differing, f"bounds differ (pyproject, environment.yml): {differing}"


def test_environment_installs_the_package_itself():
    _, pip_entries = _conda_requirements()
    assert pip_entries == ["-e ."]


def test_required_runtime_dependencies_declared():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    names = {canonicalize_name(Requirement(text).name) for text in project["dependencies"]}
    for needed in ("numpy", "scipy", "altair", "vl-convert-python", "papermill", "nbconvert", "nbformat", "ipykernel", "pandas"):
        assert needed in names
    altair = next(Requirement(t) for t in project["dependencies"] if Requirement(t).name == "altair")
    assert "<7" in str(altair.specifier)
    extras = project["optional-dependencies"]
    assert {canonicalize_name(Requirement(t).name) for t in extras["lab"]} == {"jupyterlab"}
    assert {"pytest", "hypothesis", "nbstripout", "pyyaml", "packaging"} <= {
        canonicalize_name(Requirement(t).name) for t in extras["test"]
    }
