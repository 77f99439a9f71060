"""Packaging: pyproject.toml and environment.yml agree, and the wheel works outside the checkout."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
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


#: conda-forge's names of PyPI packages it packages under another name.
CONDA_NAMES = {"ray-core": "ray"}


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
        name = canonicalize_name(requirement.name)
        specs[CONDA_NAMES.get(name, name)] = str(requirement.specifier)
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
    for needed in (
        "numpy",
        "scipy",
        "altair",
        "vl-convert-python",
        "papermill",
        "nbconvert",
        "nbformat",
        "ipykernel",
        "pandas",
    ):
        assert needed in names
    altair = next(Requirement(t) for t in project["dependencies"] if Requirement(t).name == "altair")
    assert "<7" in str(altair.specifier)
    extras = project["optional-dependencies"]
    # JupyterLab, and nbstripout for the git filter `make lab` installs
    assert {canonicalize_name(Requirement(t).name) for t in extras["lab"]} == {"jupyterlab", "nbstripout"}
    assert {"pytest", "hypothesis", "nbstripout", "pyyaml", "packaging"} <= {
        canonicalize_name(Requirement(t).name) for t in extras["test"]
    }


# --------------------------------------------------------------------------------------------
# the wheel, installed outside the checkout, lists and renders the shipped notebooks


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory, built_wheel: Path) -> tuple[Path, dict[str, str]]:
    """A fresh venv holding only the built wheel; its dependencies come from this environment.

    The venv's ``.pth`` line adds this environment's site-packages as a plain path (its ``.pth``
    files are not run), so the checkout's editable install is invisible there: ``budgetlab`` can
    only come from the wheel. No network, no dependency install: a few seconds. Returns the
    venv's python and the environment to run it with (the venv's ``bin`` first on ``PATH``, as
    after ``activate``, so the ``python3`` kernel is the venv's interpreter).
    """
    root = tmp_path_factory.mktemp("wheel")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    here = [Path(p) for p in site.getsitepackages()]
    (_site_packages(venv) / "_outer_environment.pth").write_text("\n".join(map(str, here)) + "\n")
    # the dependencies' data files (nbconvert's templates, ipykernel's kernel spec), as an install puts them
    (venv / "share").mkdir()
    (venv / "share" / "jupyter").symlink_to(Path(sys.prefix) / "share" / "jupyter", target_is_directory=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--ignore-installed",  # under `make test-wheel` the outer environment has budgetlab too
            "--disable-pip-version-check",
            str(built_wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv / "bin" / "python", env


def _run(python: Path, env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.floors
@pytest.mark.wheel
def test_wheel_lists_every_notebook_from_any_folder(installed_wheel, tmp_path: Path) -> None:
    python, env = installed_wheel
    where = _run(python, env, tmp_path, "-c", "import budgetlab; print(budgetlab.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(python.parents[1])  # the wheel, not the checkout

    listed = _run(python, env, tmp_path, "-m", "budgetlab.reports", "--list")
    assert listed.returncode == 0, listed.stderr
    notebooks = sorted(p.stem for p in (REPO_ROOT / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 14
    for name in notebooks:
        assert f"\n  {name}\n" in listed.stdout, name  # each followed by its parameters, one a line
    assert "      hardware: str = " in listed.stdout and "GPUs (-p hardware NAME): " in listed.stdout
    assert "budgetlab/_data/notebooks" in listed.stdout and "h100-llama-3.1-8b" in listed.stdout
    script = _run(python.parent / "budgetlab-reports", env, tmp_path, "--list")  # the console script
    assert script.returncode == 0 and script.stdout == listed.stdout, script.stderr


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.wheel
def test_wheel_renders_a_report_into_the_working_directory(installed_wheel, tmp_path: Path) -> None:
    python, env = installed_wheel
    kernel = _run(
        python,
        env,
        tmp_path,
        "-c",
        "import shutil; from jupyter_client.kernelspec import KernelSpecManager as M; "
        "print(shutil.which(M().get_kernel_spec('python3').argv[0]))",
    )
    assert Path(kernel.stdout.strip()).parent == python.parent, kernel.stdout + kernel.stderr  # the venv's kernel

    done = _run(python, env, tmp_path, "-m", "budgetlab.reports", "02", "--scenario", "h100-llama-3.1-8b", "-j", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / "reports" / "h100-llama-3.1-8b"
    for name in ("02-filling-the-budget.ipynb", "02-filling-the-budget.html", "02-filling-the-budget-handout.html"):
        assert (folder / name).is_file(), name
    results = json.loads((folder / "02-filling-the-budget.results.json").read_text())
    assert results  # the notebook saved its numbers where the renderer told it
    assert (tmp_path / "reports" / "index.html").is_file()

    nothing = _run(python, env, tmp_path, "-m", "budgetlab.reports", "--notebooks-dir", str(tmp_path / "none"))
    assert nothing.returncode == 2 and nothing.stderr.startswith("error: nothing to render: no notebooks")
