"""A user's string (a trace or measurements file name, a label) is text in every report, never
HTML that runs: the one escape where it meets Markdown (issue 14)."""

from __future__ import annotations

import shutil
from pathlib import Path

import mistune
import pytest

from budgetlab.catalog import data_path
from budgetlab.text import md_code, md_text

EVIL = "<img src=x onerror=alert(1)>"


def test_md_text_is_text_in_rendered_markdown():
    rendered = mistune.html(f"The **{md_text('runs/' + EVIL + '_a*b`c.csv')}** workload.")
    assert "<img" not in rendered and "&lt;img src=x onerror=alert(1)&gt;" in rendered
    assert "_a*b`c.csv" in rendered  # Markdown punctuation shown as itself
    assert md_text("plain-name.csv") == "plain\\-name.csv"


def test_md_code_cannot_be_closed_from_inside():
    rendered = mistune.html(f"Using {md_code('/data/`' + EVIL + '`.csv')}.")
    assert "<img" not in rendered and rendered.count("<code>") == 1
    assert md_code("a``b") == "``` a``b ```"


@pytest.mark.notebook
def test_a_hostile_measurements_file_name_stays_text_in_the_report(tmp_path: Path):
    from budgetlab.notebook import reports

    hostile = tmp_path / f"{EVIL}.csv"
    shutil.copyfile(data_path("measured", "vidur-h100-llama2-7b-linear.csv"), hostile)
    (outcome,) = reports.render(
        ["06"], ["h100-llama-3.1-8b"], {"measurements_path": str(hostile)}, out_dir=tmp_path / "out", pdf=False
    )
    assert outcome.ok, outcome.error
    for page in (outcome.html_path, outcome.handout_path):
        text = page.read_text(encoding="utf-8")
        assert EVIL not in text, page.name  # escaped everywhere: Markdown, banner, tables
