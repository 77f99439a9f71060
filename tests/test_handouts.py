"""Print-ready handouts: screen-only sentences, code and local paths gone; a PDF from headless
Chromium with every chart on the page (issue 13). The PDF test skips without Chromium, except
under CI (``CI`` set), where it fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from budgetlab.notebook import reports
from budgetlab.notebook.handout import strip_local_paths, strip_screen_only

SCREEN_WORDS = re.compile(r"\b(drag|hover|slider|papermill|tagged|jupyterlab)\b", re.IGNORECASE)


def test_screen_only_sentences_are_dropped():
    text = (
        "## Parameters\n\nThe next cell is tagged `parameters`: papermill replaces its values. "
        "The defaults are the seeds' scenario.\n\n"
        "- **Kept.** A point about tokens.\n- **Dropped.** Hover over the chart.\n\n"
        "Drag the slider to move it. The curve is flat."
    )
    out = strip_screen_only(text)
    assert "## Parameters" in out and "The defaults are the seeds' scenario." in out
    assert "**Kept.**" in out and "Hover" not in out and "papermill" not in out
    assert out.endswith("The curve is flat.")
    assert (
        strip_local_paths("see /work/main/reports/a.json or https://x.org/a/b") == "see …/a.json or https://x.org/a/b"
    )


@pytest.mark.notebook
@pytest.mark.browser
def test_a_handout_prints_to_a_clean_pdf(chromium: str, tmp_path: Path):
    pypdf = pytest.importorskip("pypdf")
    (outcome,) = reports.render(["02"], ["h100-llama-3.1-8b"], out_dir=tmp_path)
    assert outcome.ok, outcome.error
    assert outcome.pdf_path == tmp_path / "h100-llama-3.1-8b" / "02-filling-the-budget-handout.pdf"
    pages = pypdf.PdfReader(str(outcome.pdf_path)).pages
    texts = [page.extract_text() or "" for page in pages]
    print(f"\nhandout PDF: {len(pages)} pages")
    assert 2 <= len(pages) <= 8
    assert all(t.strip() for t in texts), "no blank page"
    text = "\n".join(texts)
    assert "Filling the token budget" in text and "1,948" in text  # prose and a chart's labels
    assert not SCREEN_WORDS.search(text), SCREEN_WORDS.search(text)
    assert "import budgetlab" not in text and "validate_parameters" not in text  # no code
    assert str(tmp_path) not in text and "/work/" not in text  # no local path
    handout = (tmp_path / "h100-llama-3.1-8b" / "02-filling-the-budget-handout.html").read_text(encoding="utf-8")
    assert "next cell is tagged" not in handout
    report = (tmp_path / "h100-llama-3.1-8b" / "02-filling-the-budget.html").read_text(encoding="utf-8")
    assert "next cell is tagged" in report  # the full report keeps it
