"""The README's package snippet runs as a plain script: no ``if __name__ == "__main__":`` guard,
though ``capacity`` and ``tune`` fan out to a process pool (issue 13)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _package_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Using the package") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's 'Using the package' section starts with a python block"
    return match.group(1)


@pytest.mark.slow
def test_the_readme_snippet_runs_as_a_plain_script(tmp_path: Path):
    script = tmp_path / "snippet.py"
    script.write_text(_package_snippet() + '\nprint("snippet done")\n', encoding="utf-8")
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "snippet done" in run.stdout


def test_a_sweep_in_a_plain_script_needs_no_main_guard(tmp_path: Path):
    script = tmp_path / "sweep.py"
    script.write_text(
        "import budgetlab as bl\n"
        "w = bl.SyntheticWorkload.conversation_like(num_requests=60)\n"
        "t = bl.sweep(w, budgets=[512, 2048], max_num_seqs=64, rates_per_s=[2.0, 4.0],\n"
        "             hardware='h100-sxm', model='llama-3.1-8b')\n"
        "print('rows', len(t))\n",
        encoding="utf-8",
    )
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rows 4" in run.stdout


@pytest.mark.notebook
@pytest.mark.floors  # the papermill command line at its floor
def test_papermill_with_a_scenario_file_from_the_repository_root(tmp_path: Path):
    root = README.parent
    text = README.read_text(encoding="utf-8")
    assert "-f notebooks/params/h200-llama-3.1-8b.yaml" in text  # as the README shows it
    papermill = Path(sys.executable).with_name("papermill")
    run = subprocess.run(
        [str(papermill), "notebooks/02-filling-the-budget.ipynb", str(tmp_path / "02.ipynb"),
         "-f", "notebooks/params/h200-llama-3.1-8b.yaml", "-y", "decoder_counts: [60, 400]"],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "h200-sxm" in (tmp_path / "02.ipynb").read_text(encoding="utf-8")
