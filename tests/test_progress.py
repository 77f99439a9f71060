"""Progress on long work (budgetlab.experiments.progress): callbacks, the terminal line, Jupyter."""

from __future__ import annotations

import io
import sys

import pytest

import budgetlab as bl
from budgetlab.errors import ParameterError
from budgetlab.experiments.executors import SerialExecutor, run_tasks
from budgetlab.experiments.progress import ProgressReporter, progress_reporter, progress_text

HW, MODEL = "h100-sxm", "llama-3.1-8b"
SMALL = bl.SyntheticWorkload.conversation_like(num_requests=80)
ENGINE = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
SLO = bl.SLO(ttft_p90_s=0.8, itl_p99_s=0.040)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_callback_gets_done_total_and_label():
    calls = []
    with progress_reporter(lambda *call: calls.append(call), "work") as reporter:
        reporter.update(0, 3)
        reporter.advance()
        reporter.advance(2, label="more work")
    assert calls == [(0, 3, "work"), (1, 3, "work"), (3, 3, "more work")]
    reporter.advance()  # after close: ignored
    assert len(calls) == 3


def test_false_reports_nothing_and_bad_values_are_refused(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Tty())
    reporter = progress_reporter(False, "work")
    reporter.update(1, 2)
    reporter.close()
    assert sys.stderr.getvalue() == "" and not reporter.active
    for bad in ("yes", 1, 0.5):
        with pytest.raises(ParameterError, match="progress must be True, False, None"):
            progress_reporter(bad, "work")


def test_automatic_draws_one_line_on_a_terminal_and_erases_it(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Tty())
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    with progress_reporter(None, "budgetlab sweep: points", total=4) as reporter:
        reporter.update(0, 4)
        reporter.update(4, 4)  # the last update always draws
    text = sys.stderr.getvalue()
    assert "\r" in text and "\n" not in text and "4/4 (100 %)" in text
    assert text.endswith("\r") and text.rstrip("\r").split("\r")[-1].strip() == ""  # erased at the end


def test_automatic_draws_nothing_off_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    with progress_reporter(None, "work", total=100) as reporter:
        reporter.update(50, 100)
    assert sys.stderr.getvalue() == "" and not reporter.active
    assert progress_reporter(True, "work").active  # True draws on stderr even then


def test_in_a_kernel_one_display_is_updated_then_blanked(monkeypatch):
    shown = []

    class Handle:
        def update(self, data, raw=False):
            shown.append(("update", data["text/plain"]))

    def display(data, raw=False, display_id=False):
        shown.append(("display", data["text/plain"]))
        return Handle()

    import IPython.display

    monkeypatch.setattr(IPython.display, "display", display)
    reporter = ProgressReporter("budgetlab tune", draw="jupyter")
    reporter.update(0, 2)
    reporter.update(2, 2)
    reporter.close()
    assert [kind for kind, _ in shown] == ["display", "update", "update"]
    assert shown[1][1].startswith("budgetlab tune 2/2 (100 %)") and shown[-1][1] == ""


def test_progress_text():
    assert (
        progress_text(3, 5, "budgetlab tune: budget search", 12.3) == "budgetlab tune: budget search 3/5 (60 %), 12 s"
    )
    assert progress_text(0, 0, "x", 0.0) == "x 0/0, 0 s"


def test_run_tasks_and_sweep_report_each_point():
    calls = []
    assert run_tasks(abs, [-1, -2], executor=SerialExecutor(), progress=lambda *c: calls.append(c), describe=str) == [
        1,
        2,
    ]
    assert [c[:2] for c in calls] == [(0, 2), (1, 2), (2, 2)]
    calls.clear()
    table = bl.sweep(
        SMALL,
        budgets=[1024, 2048],
        max_num_seqs=128,
        rates_per_s=[2.0],
        hardware=HW,
        model=MODEL,
        executor=SerialExecutor(),
        progress=lambda *c: calls.append(c),
    )
    assert len(table) == 2 and calls[-1][:2] == (2, 2) and calls[-1][2] == "budgetlab sweep: points"
    assert set(table.cost) == {"typical"}  # the real-engine cost by default


def test_capacity_reports_each_simulation():
    calls = []
    result = bl.capacity(SMALL, slo=SLO, engine=ENGINE, hardware=HW, model=MODEL, progress=lambda *c: calls.append(c))
    assert calls[-1][0] == calls[-1][1] == result.num_simulations
    assert all(label == "budgetlab capacity (typical cost): simulations" for _, _, label in calls)
    assert result.cost == "typical" and "typical cost" in repr(result) and "typical cost" in str(result)
