"""Shared fixtures: the seeds' hardware and model, and hypothesis profiles."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI gets reproducible examples; nobody gets flaky deadlines on a loaded 2-core machine.
settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def run_ok(
    args: Sequence[str], *, cwd: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command, its output captured as text; fail the test with that output unless it exits 0."""
    result = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout built once as a wheel (hatchling, no network), shared by the wheel tests."""
    dist = tmp_path_factory.mktemp("dist")
    run_ok(
        [sys.executable, "-m", "hatchling", "build", "--target", "wheel", "--directory", str(dist)],
        cwd=REPO_ROOT,
        timeout_s=300,
    )
    (wheel,) = dist.glob("budgetlab-*.whl")
    return wheel


@pytest.fixture(scope="session")
def h100():
    from budgetlab.catalog import hardware

    return hardware("h100-sxm")


@pytest.fixture(scope="session")
def llama8b():
    from budgetlab.catalog import model

    return model("llama-3.1-8b")


@pytest.fixture(scope="session")
def ideal(h100, llama8b):
    from budgetlab import IdealCost

    return IdealCost(h100, llama8b)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The shared Splitwise traces; skipped in a user's clone, where ../shared/data is absent."""
    traces = SHARED_DATA / "traces"
    if not traces.is_dir():
        pytest.skip(f"shared traces not found at {traces} (present for developers and in CI only)")
    return traces


def shared_real_file(name: str) -> Path:
    """``../shared/data/real/<name>``; the calling test skips in a user's clone, where it is absent."""
    path = SHARED_DATA / "real" / name
    if not path.is_file():
        pytest.skip(f"published data {path} not found (present for developers and in CI only)")
    return path


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's headless Chromium (:func:`budgetlab.notebook.handout.find_chromium`) for the
    browser and handout tests; they skip without it, except under CI (``CI`` set), where they fail."""
    from budgetlab.notebook.handout import find_chromium

    path = find_chromium()
    if path is None:
        message = "headless Chromium is needed for the browser and handout tests: sudo apt-get install chromium"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but Chromium is missing; {message}")
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def browser(chromium: str, tmp_path_factory: pytest.TempPathFactory):
    """One headless Chromium for every browser test (``tests/devtools.py``), closed at the end."""
    from devtools import DevTools

    tools = DevTools(chromium, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield tools
    finally:
        tools.close()


#: the fuzz tier's tallies, printed at the end of the run: name -> (tried, unhandled, silent)
FUZZ_COUNTS: dict[str, tuple[int, int, int]] = {}


def record_fuzz_counts(name: str, *, tried: int, unhandled: int, silent: int) -> None:
    """Keep one fuzz test's tally for the summary pytest prints at the end."""
    FUZZ_COUNTS[name] = (tried, unhandled, silent)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not FUZZ_COUNTS:
        return
    tried = sum(c[0] for c in FUZZ_COUNTS.values())
    unhandled = sum(c[1] for c in FUZZ_COUNTS.values())
    silent = sum(c[2] for c in FUZZ_COUNTS.values())
    terminalreporter.section("fuzz tier")
    for name, (n, u, s) in sorted(FUZZ_COUNTS.items()):
        terminalreporter.write_line(f"{name:<48} {n:6d} inputs tried, {u} unhandled, {s} silent wrong answers")
    terminalreporter.write_line(
        f"{'total':<48} {tried:6d} inputs tried, {unhandled} unhandled, {silent} silent wrong answers"
    )
