"""Render the notebooks × scenarios into offline HTML reports, handouts and results files.

Usage, from any folder (``make reports`` runs the first line with the default scenario)::

    python -m budgetlab.reports                          # every notebook × every scenario
    python -m budgetlab.reports 03 --scenario h200-llama-3.1-8b -p budgets "[512, 2048, 8192]"
    python -m budgetlab.reports --list                   # notebooks, their parameters, scenarios

The notebooks and scenarios are the ones shipped with budgetlab (``notebooks/`` in a checkout,
``budgetlab/_data/notebooks`` in an installed wheel; see
:func:`~budgetlab.notebook.plan.default_notebooks_dir`), or ``--notebooks-dir``. For each
scenario ``S`` (``params/S.yaml``) and notebook ``N`` (``N.ipynb``) this writes into
``reports/S/`` below the working directory (or ``--out``):

``N.ipynb``
    the notebook executed by papermill (kept, partial, when a cell fails);
``N.html``
    the report: code, outputs and narrative, every chart drawn offline;
``N-handout.html``
    the same without code cells' inputs or prompts;
``N.results.json``
    the report's key numbers, written by the notebook itself (its ``results_path`` parameter
    is set to this file's absolute path; see :mod:`budgetlab.notebook.results`),

and finally ``reports/index.html`` (links to every report rendered so far, with its status)
and ``reports/index.json`` (the same as data).

Scenarios are flat YAML mappings of parameter name → value, the union over all notebooks; each
notebook receives only the parameters its ``parameters`` cell declares. A key no notebook
declares is an error (a typo would otherwise be ignored silently). ``-p NAME VALUE`` overrides
a parameter in every selected notebook that declares it; VALUE is parsed as YAML, so
``-p budgets "[512, 2048]"`` is a list and ``-p budgets true`` a bool (which the notebook's
validation then rejects with a clear message).

This module is the command line. The work is done by :mod:`budgetlab.notebook.plan` (names and
parameters → jobs), :mod:`budgetlab.notebook.render` (papermill and nbconvert, several kernels
at a time with ``--jobs``) and :mod:`budgetlab.notebook.index` (the index pages); their public
names are re-exported here.

Progress: a line when each report starts, one when it is finished (with the time since the
command started), and every 30 s the reports still running with how long each has run. Every
name, path and message printed goes through :func:`terminal_safe` first, so a file or scenario
name cannot send escape sequences to the terminal.

Ctrl-C (SIGINT) and SIGTERM stop the running notebooks at their current cell and keep nothing
of them; every report and its index entry are then either as before or wholly new, and no
staging folder stays (exit status 130 or 143). A file that cannot be written part-way (a full
disk, a folder made read-only) stops the run with one ``error:`` line, publishing nothing
half-written.

Exit status: 0 when every report rendered, 1 when a notebook failed (the others still render),
2 for a command-line or scenario error, when there is nothing to render (no notebooks or no
scenarios found), or when reports could not be written; 128 + the signal's number when stopped
by SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from budgetlab.notebook.altair_setup import use_offline_renderer
from budgetlab.notebook.index import INDEX_HTML, write_index
from budgetlab.notebook.plan import (
    RESULTS_PARAMETER,
    Job,
    ReportError,
    default_notebooks_dir,
    find_notebooks,
    find_scenarios,
    load_scenario,
    notebook_parameters,
    parse_override,
    plan,
    resolve_folders,
    select_notebooks,
    select_scenarios,
)
from budgetlab.notebook.publish import RenderInterrupted
from budgetlab.notebook.render import ReportOutcome, make_exporters, render, vega_bundle
from budgetlab.text import terminal_safe

__all__ = [
    "DEFAULT_SCENARIO",
    "Job",
    "ReportError",
    "ReportOutcome",
    "default_notebooks_dir",
    "find_notebooks",
    "find_scenarios",
    "load_scenario",
    "cli_syntax",
    "main",
    "make_exporters",
    "notebook_parameters",
    "parse_override",
    "plan",
    "render",
    "select_notebooks",
    "select_scenarios",
    "terminal_safe",
    "use_offline_renderer",
    "vega_bundle",
    "write_index",
]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m budgetlab.reports",
        description="Render budgetlab notebooks × scenarios into offline HTML reports, "
        "handouts and results JSON under reports/.",
    )
    p.add_argument(
        "notebooks",
        nargs="*",
        metavar="NOTEBOOK",
        help="notebooks to render, with or without .ipynb, or a prefix such as 03 (default: all)",
    )
    p.add_argument(
        "-s",
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help=(
            "scenario from NOTEBOOKS_DIR/params/NAME.yaml; repeatable (default: all, or only "
            "h100-llama-3.1-8b when -p is given)"
        ),
    )
    p.add_argument(
        "-p",
        "--parameter",
        action="append",
        nargs=2,
        default=[],
        metavar=("NAME", "VALUE"),
        help="override a parameter in every selected notebook that declares it; "
        'VALUE is YAML: -p budgets "[512, 2048]"',
    )
    p.add_argument("--out", type=Path, default=Path("reports"), help="output folder (reports)")
    p.add_argument(
        "--notebooks-dir",
        type=Path,
        default=None,
        help="notebook folder (default: the notebooks shipped with budgetlab)",
    )
    p.add_argument("--params-dir", type=Path, default=None, help="scenario folder (NOTEBOOKS_DIR/params)")
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="notebooks executed at once (default: %(default)s)",
    )
    p.add_argument("--no-pdf", action="store_true", help="skip printing the handouts to PDF (faster)")
    p.add_argument("--list", action="store_true", help="list notebooks, their parameters and scenarios")
    return p


# C0 and C1 control characters (ESC, BEL, CSI, OSC ...), DEL, and the bidirectional overrides
# that reorder what a terminal shows
def _clock(seconds: float) -> str:
    """``m:ss`` (``1:05``)."""
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


DEFAULT_SCENARIO = "h100-llama-3.1-8b"
"""The seeds' scenario: what ``-p`` without ``-s`` renders (and ``make reports``)."""


def _list(notebooks_dir: Path, params_dir: Path) -> None:
    """Every notebook with each parameter's type, default and help; the scenarios; the names."""
    from budgetlab.catalog import list_hardware, list_models

    notebooks = find_notebooks(notebooks_dir)
    scenarios = find_scenarios(params_dir)
    safe = terminal_safe
    print(f"Notebooks in {safe(notebooks_dir)}/:" if notebooks else f"No notebooks in {safe(notebooks_dir)}/.")
    for name, path in notebooks.items():
        params = {k: v for k, v in notebook_parameters(path).items() if k != RESULTS_PARAMETER}
        print(f"  {safe(name)}" + ("" if params else "  (no parameters)"))
        for key, info in params.items():
            help_text = f"  # {info['help']}" if info.get("help") else ""
            print(safe(f"      {key}: {info.get('inferred_type_name') or '?'} = {info.get('default')}{help_text}"))
    print(f"Scenarios in {safe(params_dir)}/:" if scenarios else f"No scenarios in {safe(params_dir)}/.")
    for name in scenarios:
        print(f"  {safe(name)}" + ("  (the default with -p and no -s)" if name == DEFAULT_SCENARIO else ""))
    print(f"GPUs (-p hardware NAME): {', '.join(list_hardware())}")
    print(f"Models (-p model NAME): {', '.join(list_models())}")


_PAPERMILL_LIST = re.compile(r'papermill -y "(\w+): ([^"]*)"')
_PAPERMILL_VALUE = re.compile(r"papermill -p (\w+) (\S+)")


def cli_syntax(message: str) -> str:
    """A notebook's error message with its papermill advice in this command's syntax
    (``-p NAME VALUE``)."""
    message = _PAPERMILL_LIST.sub(lambda m: f'python -m budgetlab.reports -p {m.group(1)} "{m.group(2)}"', message)
    return _PAPERMILL_VALUE.sub(lambda m: f"python -m budgetlab.reports -p {m.group(1)} {m.group(2)}", message)


def _check_override(name: str, text: str) -> None:
    """Refuse a ``-p`` value that starts like a YAML list or mapping but does not parse."""
    stripped = text.strip()
    if stripped[:1] in "[{" and isinstance(parse_override(text, name=name), str):
        raise ReportError(
            f'-p {name} {text!r} is not valid YAML; write a list like -p {name} "[512, 2048]" '
            "(quote the whole value in the shell)"
        )


def _print_summary(outcomes: Sequence[ReportOutcome], elapsed_s: float, index: Path) -> None:
    rows = [(terminal_safe(o.scenario), terminal_safe(o.notebook), o) for o in outcomes]
    w_s = max([len("scenario")] + [len(scenario) for scenario, _, _ in rows])
    w_n = max([len("notebook")] + [len(notebook) for _, notebook, _ in rows])
    print()
    print(f"{'scenario':<{w_s}}  {'notebook':<{w_n}}  {'seconds':>7}  status")
    print(f"{'-' * w_s}  {'-' * w_n}  {'-' * 7}  ------")
    for scenario, notebook, o in rows:
        print(f"{scenario:<{w_s}}  {notebook:<{w_n}}  {o.seconds:7.1f}  {o.status}")
    failed = [o for o in outcomes if not o.ok]
    print(
        f"\n{len(outcomes)} report{'s' * (len(outcomes) != 1)}: {len(outcomes) - len(failed)} ok, "
        f"{len(failed)} failed, in {elapsed_s:.1f} s. Index: {terminal_safe(index)}"
    )


def _nothing_to_render(notebooks_dir: Path, params_dir: Path) -> str:
    """Why :func:`plan` found no work, in one line."""
    if not find_notebooks(notebooks_dir):
        return f"no notebooks (*.ipynb) in {terminal_safe(notebooks_dir)}/"
    if not find_scenarios(params_dir):
        return f"no scenarios (*.yaml) in {terminal_safe(params_dir)}/"
    return "no notebook × scenario selected"


def _announce(work: Sequence[Job], out: Path, jobs: int) -> None:
    """What is about to render, before the first kernel starts."""
    total = len(work)
    print(
        f"Rendering {total} report{'s' * (total != 1)} "
        f"({len({j.notebook for j in work})} notebooks × {len({j.scenario for j in work})} "
        f"scenarios) into {terminal_safe(out)}/ with {min(jobs, total)} kernel(s) at a time",
        flush=True,
    )
    silent = sorted({j.notebook for j in work if RESULTS_PARAMETER not in j.parameters})
    if silent:
        print(
            f"note: {terminal_safe(', '.join(silent))} declare{'s' * (len(silent) == 1)} no {RESULTS_PARAMETER} "
            f"parameter, so no results JSON will be written for "
            f"{'it' if len(silent) == 1 else 'them'}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 a report failed, 2 usage or
    nothing to render)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.jobs < 1 and not args.list:
        parser.error("--jobs must be at least 1")
    try:
        for name, value in args.parameter:
            _check_override(name, value)
        overrides = {name: parse_override(value, name=name) for name, value in args.parameter}
    except ReportError as exc:
        print(f"error: {terminal_safe(exc)}", file=sys.stderr)
        return 2
    total = done = 0

    def announce(work: Sequence[Job]) -> None:
        nonlocal total
        total = len(work)
        _announce(work, args.out, args.jobs)

    start = time.perf_counter()

    def progress(o: ReportOutcome) -> None:
        nonlocal done
        done += 1
        tail = f"  {terminal_safe(cli_syntax(o.error))}" if o.error else ""
        counter = f"[{done:>{len(str(total))}}/{total}]"
        elapsed = _clock(time.perf_counter() - start)
        print(
            f"{counter} {terminal_safe(o.name):<48} {o.seconds:6.1f} s  {o.status:<6}  ({elapsed} elapsed){tail}",
            flush=True,
        )

    def started(job: Job) -> None:
        name = terminal_safe(f"{job.scenario}/{job.notebook}")
        elapsed = _clock(time.perf_counter() - start)
        print(f"{' ' * (2 * len(str(total)) + 3)} {name:<48} started  ({elapsed} elapsed)", flush=True)

    def still_running(busy: Mapping[str, float]) -> None:
        what = ", ".join(f"{terminal_safe(name)} {seconds:.0f} s" for name, seconds in busy.items())
        print(f"... {_clock(time.perf_counter() - start)} elapsed, running: {what}", flush=True)

    try:
        notebooks_dir, params_dir, _ = resolve_folders(
            notebooks_dir=args.notebooks_dir, params_dir=args.params_dir, out_dir=args.out
        )
        if args.list:
            _list(notebooks_dir, params_dir)
            return 0
        scenarios = args.scenario
        if overrides and not scenarios and DEFAULT_SCENARIO in find_scenarios(params_dir):
            scenarios = [DEFAULT_SCENARIO]
            print(f"note: -p without -s renders the default scenario {DEFAULT_SCENARIO} only; add -s NAME for others")
        outcomes = render(
            args.notebooks,
            scenarios,
            overrides,
            notebooks_dir=notebooks_dir,
            params_dir=params_dir,
            out_dir=args.out,
            jobs=args.jobs,
            on_plan=announce,
            on_start=started,
            on_report=progress,
            on_running=still_running,
            pdf=not args.no_pdf,
        )
    except ReportError as exc:
        print(f"error: {terminal_safe(exc)}", file=sys.stderr)
        return 2
    except RenderInterrupted as exc:
        print("interrupted" if exc.signum == signal.SIGINT else "terminated", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:  # before or after the render (its own stop is above)
        print("interrupted", file=sys.stderr)
        return 130
    if not outcomes:
        print(f"error: nothing to render: {_nothing_to_render(notebooks_dir, params_dir)}", file=sys.stderr)
        return 2
    _print_summary(outcomes, time.perf_counter() - start, args.out / INDEX_HTML)
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        print(
            terminal_safe(f"FAILED {o.name}: {cli_syntax(o.error or '')} (partial notebook: {o.ipynb_path})"),
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
