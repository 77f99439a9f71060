"""The headline rows of one scenario (budgetlab.notebook.results.headline), from results files."""

from __future__ import annotations

from budgetlab.notebook.results import HEADLINE_COLUMNS, headline

RESULTS = {
    "01-step-cost": {"hardware": "h100-sxm", "model": "llama-3.1-8b", "knee_tokens": 295},
    "03-ttft-vs-budget": {
        "hardware": "h100-sxm",
        "target_step_s": 0.04,
        "budget_for_step_target_ideal": 2464,
        "budget_for_step_target_typical": 1548,
    },
    "04-longest-gap": {
        "target_step_s": 0.04,
        "budget_for_gap_target_ideal": 2464,
        "budget_for_gap_target_typical": 1347,
    },
    "07-load-sweep": {
        "cost_model": "typical",
        "best_budget_tokens": 2048,
        "capacity_per_s": {"512": 9.1, "2048": 17.2},
    },
    "08-tune-for-slo": {
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "cost": "typical",
        "workload": "conversation-like",
        "slo": {"ttft_p90_s": 0.8, "itl_p99_s": 0.04},
        "max_num_batched_tokens": 1024,
        "max_num_seqs": 272,
        "capacity_per_s": 17.6,
        "margin": {"rate_per_s": 16.8, "used_fraction": 0.84},
    },
}


def test_every_headline_number_names_its_cost_model():
    rows = headline(RESULTS)
    assert all(tuple(row) == HEADLINE_COLUMNS for row in rows)
    by = {(row["quantity"], row["cost_model"]): row for row in rows}
    assert by[("GPU", "")]["value"] == "NVIDIA H100 SXM5 80GB" and by[("SLO", "")]["value"].startswith("TTFT p90")
    assert by[("knee of the step cost", "ideal")]["value"] == "295 tokens"
    step = "largest budget whose full prompt step meets the 40 ms target"
    assert by[(step, "ideal")]["value"] == "2,464 tokens" and by[(step, "typical")]["value"] == "1,548 tokens"
    gap = "largest budget that keeps the longest gap within 40 ms"
    assert by[(gap, "typical")]["value"] == "1,347 tokens" and by[(gap, "typical")]["notebook"] == "04-longest-gap"
    recommended = by[("recommended max_num_batched_tokens / max_num_seqs", "typical")]
    assert recommended["value"] == "1,024 / 272" and recommended["notebook"] == "08-tune-for-slo"
    load = next(row for row in rows if row["quantity"].startswith("recommended load"))
    assert load["value"].startswith("16.8 req/s") and "84 %" in load["value"] and load["cost_model"] == "typical"
    sweep = next(row for row in rows if row["notebook"] == "07-load-sweep")
    assert sweep["value"] == "17.2 req/s" and "2,048 tokens" in sweep["quantity"] and sweep["cost_model"] == "typical"
    numbers = [row for row in rows if row["quantity"] not in ("GPU", "model", "workload", "SLO")]
    assert numbers and all(row["cost_model"] in ("ideal", "typical") for row in numbers)


def test_missing_notebooks_leave_their_rows_out():
    assert headline({}) == []
    only = headline({"01-step-cost": {"hardware": "no-such-gpu", "knee_tokens": 295}})
    assert [row["quantity"] for row in only] == ["GPU", "knee of the step cost"]
    assert only[0]["value"] == "no-such-gpu"  # an unknown slug is shown as is
    old = headline({"08-tune-for-slo": {"max_num_batched_tokens": 2304, "max_num_seqs": 272}})
    assert old[0]["cost_model"] == "ideal"  # results written before the cost was recorded


def _outcome(out, scenario, notebook):
    from budgetlab.notebook.render import ReportOutcome

    base = out / scenario / notebook
    return ReportOutcome(
        notebook=notebook,
        scenario=scenario,
        ok=True,
        seconds=1.0,
        ipynb_path=base.with_suffix(".ipynb"),
        html_path=base.with_suffix(".html"),
        handout_path=out / scenario / f"{notebook}-handout.html",
        results_path=out / scenario / f"{notebook}.results.json",
        parameters={},
    )


def test_the_index_shows_each_scenarios_headline_with_its_cost_models(tmp_path):
    import html.parser
    import json

    from budgetlab.notebook.index import write_index

    scenario = "h100-<b>x"
    folder = tmp_path / scenario
    folder.mkdir()
    outcomes = []
    for notebook, results in RESULTS.items():
        (folder / f"{notebook}.ipynb").write_text("{}")
        (folder / f"{notebook}.results.json").write_text(json.dumps(results))
        outcomes.append(_outcome(tmp_path, scenario, notebook))
    (folder / "99-broken.ipynb").write_text("{}")
    (folder / "99-broken.results.json").write_text("{not json")
    outcomes.append(_outcome(tmp_path, scenario, "99-broken"))
    page = write_index(tmp_path, outcomes).read_text()

    class Cells(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.table, self.rows, self.inside = None, [], False

        def handle_starttag(self, tag, attrs):
            if tag == "table" and ("class", "headline") in attrs:
                self.inside = True
            elif tag == "tr" and self.inside:
                self.rows.append([])

        def handle_endtag(self, tag):
            if tag == "table":
                self.inside = False

        def handle_data(self, data):
            if self.inside and self.rows:
                self.rows[-1].append(data)

    cells = Cells()
    cells.feed(page)
    rows = [" ".join(r) for r in cells.rows[1:]]
    assert len(rows) == len(headline(RESULTS))
    assert any("1,024 / 272" in r and "typical" in r for r in rows)
    assert any("2,464 tokens" in r and "ideal" in r for r in rows)
    assert "<b>x" not in page  # the scenario name is text
