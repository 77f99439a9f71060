"""A user's string (a trace or measurements file name, a label) is text in every report, never
HTML that runs: the one escape where it meets Markdown (issues 14 and 21).

Rendered HTML is checked by parsing it (:func:`live_markup`), not by looking for the payload's
text: nbconvert and the browser rewrite markup, so a live ``<img onerror>`` need not read as
the string that made it.
"""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path

import mistune
import pandas as pd
import pytest
from nbconvert.filters.markdown import markdown2html

from budgetlab import charts
from budgetlab.catalog import data_path
from budgetlab.notebook.checkers import require_str
from budgetlab.notebook.parameters import validate_parameters
from budgetlab.text import md_cell, md_code, md_text

EVIL = "<img src=x onerror=alert(1)>"

#: Strings that would be markup, a link, a script or a broken table if they reached HTML raw.
HOSTILE = [
    EVIL,
    '"><script>alert(1)</script>',
    "</td></tr></table><svg onload=alert(1)>",
    "`x` ``y`` <b onmouseover=alert(1)>z</b>",
    "[x](javascript:alert(1))",
    "![x](javascript:alert(1)) [y]: javascript:alert(1)",
    "<javascript:alert(1)> <a href='javascript:alert(1)'>a</a>",
    "**bold** _em_ ~~del~~ # heading | pipe |",
    "{{ 7 * 7 }} {% raw %} $x$",
    "line\n\n<script>alert(1)</script>\r\n| a | b |\n|---|---|",
    "&lt;script&gt;alert(1)&lt;/script&gt; &#106;avascript:alert(1)",
    "\\<img src=x onerror=alert(1)>\\",
]

#: Attributes that carry a URL a browser may follow or load.
_URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "data", "srcdoc"}
_ACTIVE_ELEMENTS = {"iframe", "object", "embed", "svg", "math", "form", "base", "frame", "frameset"}
#: Script types a browser does not run (data blocks).
_DATA_SCRIPT_TYPES = {"application/json", "application/ld+json", "text/template"}


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], list[str]]] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        self.tags.append((tag, attributes))
        if tag == "script":
            self._in_script = True
            self.scripts.append((attributes, []))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1][1].append(data)


def live_markup(page: str, *, allowed_elements: frozenset[str] = frozenset()) -> list[str]:
    """What in ``page`` would run or load something a hostile string could have put there.

    An element with an ``on*`` attribute, a ``javascript:`` (or ``data:``/``vbscript:``) URL,
    an ``<img>``, an element that embeds or scripts (``<iframe>``, ``<svg>``, ...), a
    ``<meta http-equiv>``, and a ``<script>`` a browser runs (not a JSON data block) whose text
    is a payload's (``alert(1)``) or that loads a file (``src``).
    """
    parser = _Elements()
    parser.feed(page)
    parser.close()
    found = []
    for tag, attrs in parser.tags:
        for name, value in attrs.items():
            if name.startswith("on"):
                found.append(f"<{tag} {name}={value!r}>")
            squeezed = "".join(ch for ch in value if ch.isprintable() and not ch.isspace()).lower()
            if name in _URL_ATTRIBUTES and squeezed.startswith(("javascript:", "vbscript:", "data:text/html")):
                found.append(f"<{tag} {name}={value!r}>")
        if (tag == "img" or tag in _ACTIVE_ELEMENTS) and tag not in allowed_elements:
            found.append(f"<{tag} {attrs}>")
        if tag == "meta" and "http-equiv" in attrs:
            found.append(f"<meta {attrs}>")
    for attrs, chunks in parser.scripts:
        text = "".join(chunks)
        runs = attrs.get("type", "text/javascript").strip().lower() not in _DATA_SCRIPT_TYPES
        if runs and ("alert(1)" in text or "src" in attrs):
            found.append(f"<script {attrs}>{text[:80]}</script>")
    return found


def test_live_markup_finds_what_a_browser_would_run():
    assert live_markup(markdown2html(f"| a |\n|---|\n| {EVIL} |"))
    assert live_markup(markdown2html("[x](javascript:alert(1))"))
    assert live_markup(markdown2html('x"><script>alert(1)</script>'))
    assert live_markup("<div onclick='x'></div>") and not live_markup("<div class='on'>onclick</div>")


@pytest.mark.parametrize("text", HOSTILE)
def test_escapes_leave_no_live_markup_in_rendered_markdown(text: str):
    for escaped in (md_text(text), md_cell(text), md_code(text)):
        for renderer in (markdown2html, mistune.html):
            page = str(renderer(f"Using **{escaped}** here."))
            assert not live_markup(page), (escaped, page)
            page = str(renderer(f"| a | b |\n|---|---|\n| {escaped} | x |"))
            assert not live_markup(page), (escaped, page)
            assert page.count("<tr>") <= 2  # one row stays one row


def test_md_cell_keeps_the_text_readable():
    assert md_cell("Budget (512 tokens) - 1.5") == "Budget (512 tokens) - 1.5"
    assert md_cell("a|b\nc") == "a\\|b c"
    rendered = markdown2html(f"| h |\n|---|\n| {md_cell('[x](javascript:alert(1)) <b>')} |")
    assert "[x](javascript:alert(1)) &lt;b&gt;" in rendered


PATH_PARAMETERS = ("trace_path", "measurements_path", "bench_path", "runs_path")


@pytest.mark.parametrize("text", HOSTILE)
def test_the_parameters_table_is_text_whatever_a_path_holds(text: str):
    params = validate_parameters(
        rules=dict.fromkeys(PATH_PARAMETERS, require_str),
        hardware="h100-sxm",
        workload="conversation-like",
        **dict.fromkeys(PATH_PARAMETERS, f"/data/{text}.csv"),
    )
    page = markdown2html(params._repr_markdown_())
    assert not live_markup(page), page
    assert page.count("<tr>") == 1 + 2 + len(PATH_PARAMETERS)  # header, hardware, workload, the paths


def test_the_parameters_table_renders_names_and_values():
    page = markdown2html(
        validate_parameters(hardware="h100-sxm", budgets=[512, 2048], results_path="")._repr_markdown_()
    )
    assert "<td><code>hardware</code></td>" in page and "h100-sxm (NVIDIA H100 SXM5 80GB)" in page
    assert "[512, 2048]" in page and "results_path" not in page


@pytest.mark.parametrize("text", HOSTILE)
def test_table_markdown_is_not_an_html_sink(text: str):
    frame = pd.DataFrame({text: [text, f"**recommended**, {text}"]}, index=pd.Index([text, "b"], name=text))
    for index in (True, False):
        page = markdown2html(charts.table_markdown(frame, index=index))
        assert not live_markup(page), page
        assert page.count("<tr>") == 3  # the header and two rows, whatever the cells hold


def test_table_markdown_keeps_bold_and_shows_the_rest_as_typed():
    frame = pd.DataFrame({"Note": ["**recommended**, first guess", "a_b*c [d](e)"]})
    page = markdown2html(charts.table_markdown(frame, index=False))
    assert "<strong>recommended</strong>, first guess" in page
    assert "a_b*c [d](e)" in page and "<a " not in page


def test_md_text_is_text_in_rendered_markdown():
    rendered = mistune.html(f"The **{md_text('runs/' + EVIL + '_a*b`c.csv')}** workload.")
    assert "<img" not in rendered and "&lt;img src=x onerror=alert(1)&gt;" in rendered
    assert "_a*b`c.csv" in rendered  # Markdown punctuation shown as itself
    assert md_text("plain-name.csv") == "plain\\-name.csv"


def test_md_code_cannot_be_closed_from_inside():
    rendered = str(mistune.html(f"Using {md_code('/data/`' + EVIL + '`.csv')}."))
    assert "<img" not in rendered and rendered.count("<code>") == 1
    assert md_code("a``b") == "``` a``b ```"


#: A file name (no "/") holding markup, a link, a template, backticks and a line break.
HOSTILE_FILE_NAME = f'{EVIL}`[x](javascript:alert(1))`{{{{7*7}}}}\n"><svg onload=alert(1)>'


def _render_with_file(tmp_path: Path, notebook: str, overrides: dict[str, object]) -> None:
    """Render one notebook with the overrides; both pages must hold no live markup."""
    from budgetlab.notebook import reports

    (outcome,) = reports.render([notebook], ["h100-llama-3.1-8b"], overrides, out_dir=tmp_path / "out", pdf=False)
    assert outcome.ok, outcome.error
    for page in (outcome.html_path, outcome.handout_path):
        text = page.read_text(encoding="utf-8")
        assert not live_markup(text), (page.name, live_markup(text)[:5])
        assert "onerror=alert(1)" in text.replace("&#x3D;", "=").replace("\\u003d", "=")  # shown, as text


@pytest.mark.notebook
@pytest.mark.floors  # one whole report through nbconvert at its floor
def test_a_hostile_measurements_file_name_stays_text_in_the_report(tmp_path: Path):
    hostile = tmp_path / f"{HOSTILE_FILE_NAME}.csv"
    shutil.copyfile(data_path("measured", "vidur-h100-llama2-7b-linear.csv"), hostile)
    _render_with_file(tmp_path, "06", {"measurements_path": str(hostile)})


@pytest.mark.notebook
def test_a_hostile_trace_file_name_stays_text_in_the_report(tmp_path: Path):
    hostile = tmp_path / f"{HOSTILE_FILE_NAME}.csv"
    rows = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    rows += [f"{0.25 * i:.2f},{300 + (97 * i) % 1700},{20 + (31 * i) % 200}" for i in range(200)]
    hostile.write_text("\n".join(rows) + "\n", encoding="utf-8")
    small = {"num_requests_per_load": 100, "budgets": [512, 2048], "budget_factors": [1.0], "cap_factors": [1.0]}
    _render_with_file(tmp_path, "08", {"trace_path": str(hostile), "capacity_tolerance_fraction": 0.2, **small})


@pytest.mark.notebook
@pytest.mark.slow
def test_a_hostile_bench_file_name_stays_text_in_the_report(tmp_path: Path):
    from budgetlab.serving import example_bench_path

    hostile = tmp_path / f"{HOSTILE_FILE_NAME}.json"
    shutil.copyfile(example_bench_path(), hostile)
    overrides = {"bench_path": str(hostile), "search_preset": False, "budgets": [2048], "max_duration_s": 30.0}
    _render_with_file(tmp_path, "10", overrides)
