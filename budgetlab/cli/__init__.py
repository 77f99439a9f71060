"""``python -m budgetlab``: the engine from the command line.

Five subcommands over a trace file or a synthetic workload, a GPU and a model::

    python -m budgetlab simulate --trace conv.csv --gpu h100-sxm --model meta-llama/Llama-3.1-8B-Instruct
    python -m budgetlab sweep --budgets 512,2048,8192 --rates 2,4,8
    python -m budgetlab capacity --ttft-p90-ms 800 --itl-p99-ms 40
    python -m budgetlab tune --itl-p99-ms 40
    python -m budgetlab calibrate --bench result.json --gpu h100-sxm

Each prints a short table on stdout, every number labelled with the cost model that produced it
(``--cost typical``, the default, or ``ideal``), progress on stderr while it works (on a
terminal, or with ``--progress``), and with ``--json PATH`` writes the results and their inputs
as JSON. A budgetlab error (an unknown GPU, a malformed trace, an SLO no load meets) ends the
command with one line ``error: ...`` on stderr and exit status 2, as a usage error does.

This is the presentation layer: it calls budgetlab's public functions and nothing in
budgetlab imports it (``budgetlab/__main__.py`` only calls :func:`main`).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from budgetlab._version import __version__
from budgetlab.cli.commands import COMMANDS
from budgetlab.cli.options import add_engine, add_output, add_setting, add_slo, add_workload, float_list, positive_int
from budgetlab.cli.output import one_line, shown, write_json
from budgetlab.errors import BudgetlabError

__all__ = ["main", "build_parser"]

EPILOG = """\
examples:
  python -m budgetlab simulate --trace conv.csv --gpu h100-sxm --model meta-llama/Llama-3.1-8B-Instruct --json out.json
  python -m budgetlab sweep --workload code --budgets 512,2048,8192 --rates 1,2,4
  python -m budgetlab capacity --gpu a100-80gb-sxm --max-num-batched-tokens 2048 --itl-p99-ms 40
  python -m budgetlab tune --ttft-p90-ms 800 --itl-p99-ms 40 --jobs 2
  python -m budgetlab calibrate --bench result.json --gpu h100-sxm --max-num-batched-tokens 2048

`python -m budgetlab COMMAND --help` documents each command's options.

the reports:
  python -m budgetlab.reports --list   the notebooks, their parameters and the scenarios
  python -m budgetlab.reports --help   render notebooks x scenarios into offline HTML reports

in Python: `import budgetlab as bl`, then `help(bl)`.
"""

_FORMATTER = argparse.RawDescriptionHelpFormatter


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``prog: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one escaped line and a pointer to ``--help``; exit with status 2."""
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def _jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs",
        "-j",
        type=positive_int,
        metavar="N",
        help="processes to simulate in: 1 runs in this process (default: one per CPU)",
    )


def _tolerance(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tolerance",
        type=float,
        metavar="FRACTION",
        help="relative precision of each capacity search, in (0, 1) (default 0.02)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m budgetlab`` parser with its five subcommands."""
    parser = _Parser(
        prog="python -m budgetlab",
        description="budgetlab: how an LLM server's token budget and sequence cap shape latency. Simulate vLLM's "
        "V1 scheduler over a trace or a synthetic workload, sweep its knobs, find the capacity under a "
        "latency SLO, tune the knobs, or calibrate the step cost to your measurements.",
        epilog=EPILOG,
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"budgetlab {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    simulate = commands.add_parser(
        "simulate",
        help="replay a trace or a synthetic workload once; latency percentiles and throughput",
        description="Replay a trace (or a synthetic workload) through the simulator of vLLM's V1 scheduler "
        "once and print TTFT, inter-token and end-to-end latency percentiles (engine side: no HTTP or "
        "detokenizer time) and throughput.",
        formatter_class=_FORMATTER,
    )
    add_setting(simulate)
    add_engine(simulate)
    add_workload(
        simulate,
        num_requests_help="requests: a synthetic workload's size (default 1000), or the trace's first N (default all)",
        rate_help="offered load [requests/s]: a synthetic workload's Poisson rate (default 10), or the rate a "
        "trace is rescaled to (default: its own timing)",
    )
    add_output(simulate)

    sweep = commands.add_parser(
        "sweep",
        help="simulate a grid of budgets x max_num_seqs x offered loads",
        description="Simulate every budget x max_num_seqs x offered load of a grid; one row each with TTFT p90, "
        "ITL p99, achieved throughput and KV use.",
        formatter_class=_FORMATTER,
    )
    add_setting(sweep)
    add_engine(sweep, grid=True)
    add_workload(
        sweep,
        num_requests_help="requests per simulation: a synthetic workload's (default 300), or the trace's first N "
        "(default 1000)",
        rate_help="(not used by sweep: give --rates)",
    )
    loads = sweep.add_argument_group("offered loads")
    loads.add_argument(
        "--rates",
        type=float_list,
        metavar="R,R,...",
        help="offered loads [requests/s] (default: --num-loads loads up to 1.1 x the service rate of the "
        "fastest budget)",
    )
    loads.add_argument(
        "--num-loads", type=positive_int, default=5, metavar="N", help="loads when --rates is not given (5)"
    )
    array = sweep.add_argument_group("array jobs (one grid point a job, on a cluster scheduler)")
    points = array.add_mutually_exclusive_group()
    points.add_argument(
        "--point",
        type=int,
        metavar="I",
        help="simulate grid point I only (0-based, in the table's row order: budget, then max_num_seqs, then "
        "load) and write its row; join the points' JSON files with --join",
    )
    points.add_argument("--num-points", action="store_true", help="print how many grid points the grid has, and stop")
    points.add_argument(
        "--join",
        nargs="+",
        metavar="FILE",
        help="join the JSON files of every --point of one grid into the sweep's table (the grid options are "
        "then read from the files)",
    )
    _jobs(sweep)
    add_output(sweep)

    capacity = commands.add_parser(
        "capacity",
        help="the highest offered load one replica carries under a latency SLO",
        description="Find, by bisection on the offered load, the highest load at which one replica with this "
        "engine configuration meets the SLO, and what breaks just above it.",
        formatter_class=_FORMATTER,
    )
    add_setting(capacity)
    add_engine(capacity)
    add_workload(
        capacity,
        num_requests_help="requests per simulation: a synthetic workload's (default 300), or the trace's first N "
        "(default 1000)",
        rate_help="(not used: the search chooses the loads)",
    )
    add_slo(capacity)
    _tolerance(capacity)
    add_output(capacity)

    tune = commands.add_parser(
        "tune",
        help="the max_num_batched_tokens and max_num_seqs with the most capacity under a latency SLO",
        description="Search budgets, then caps, around a first guess from the step cost and the KV pool, and "
        "recommend the pair with the most capacity per replica under the SLO, with the reasons. The other "
        "engine options are kept (their budget and cap are the tuner's starting template).",
        formatter_class=_FORMATTER,
    )
    add_setting(tune)
    add_engine(tune)
    add_workload(
        tune,
        num_requests_help="requests per simulation: a synthetic workload's (default 300), or the trace's first N "
        "(default 1000)",
        rate_help="(not used: the capacity searches choose the loads)",
    )
    add_slo(tune)
    _tolerance(tune)
    _jobs(tune)
    add_output(tune)

    calibrate = commands.add_parser(
        "calibrate",
        help="fit the step cost to a `vllm bench serve` result or to measured step times",
        description="Fit budgetlab's step cost to your measurements. --bench: a `vllm bench serve --save-result` "
        "JSON (with --save-detailed, per request); the workload is replayed on the engine options given "
        "(set them as the server ran: --max-num-batched-tokens, --max-num-seqs, ...) and the CPU time per "
        "step and the per-request overhead are fitted. --steps: a CSV of measured step times "
        "(num_prefill_tokens, num_decode_tokens, context_tokens, step_time_ms; see data/measured/README.md), "
        "fitted term by term.",
        formatter_class=_FORMATTER,
    )
    source = calibrate.add_argument_group("measurements (one of)").add_mutually_exclusive_group(required=True)
    source.add_argument("--bench", metavar="JSON", help="a vllm bench serve --save-result file")
    source.add_argument("--steps", metavar="CSV", help="a CSV of measured step times")
    add_setting(calibrate)
    add_engine(calibrate)
    fit = calibrate.add_argument_group("fit")
    fit.add_argument(
        "--no-attention",
        dest="attention",
        action="store_false",
        help="--steps only: the measured steps leave out the attention kernel (linear layers only)",
    )
    fit.add_argument(
        "--holdout-fraction",
        type=float,
        default=0.25,
        metavar="F",
        help="--steps only: share of the rows held back to test the fit (0.25)",
    )
    fit.add_argument("--seed", type=int, default=0, help="seed of the train/holdout split (0)")
    add_output(calibrate)
    for action in calibrate._actions:  # the bench's model_id is used when --model is not given
        if action.dest == "model":
            action.help = (action.help or "") + "; with --bench, default: the file's model_id"
            action.default = None
    for each in (parser, *commands.choices.values()):
        each.description = textwrap.fill(each.description or "", width=88)
    return parser


def _check_json_target(target: str | None) -> None:
    """Refuse a ``--json`` file whose folder is missing or not writable before any work.

    Raises
    ------
    OSError
        Naming the folder.
    """
    if not target or target == "-":
        return
    folder = Path(target).expanduser().resolve().parent
    if not folder.is_dir():
        raise FileNotFoundError(errno.ENOENT, "the folder for --json does not exist", str(folder))
    if not os.access(folder, os.W_OK):
        raise PermissionError(errno.EACCES, "the folder for --json is not writable", str(folder))


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; print its table, write its JSON; return the exit status."""
    _check_json_target(args.json)
    table = sys.stderr if args.json == "-" else sys.stdout
    document = COMMANDS[args.command](args, table)
    if args.json:
        written = write_json(document, args.json)
        if written is not None:
            print(f"\nwrote {shown(written)}", file=table)
    return 0


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning as one line ``warning: ...`` on stderr (no source line)."""
    print(f"warning: {one_line(message)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m budgetlab`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Parameters
    ----------
    argv : sequence of str or None
        The arguments after the program name.

    Returns
    -------
    int
        0 on success; 2 for a usage error or a budgetlab error (one line ``error: ...`` on
        stderr, no traceback); 130 when interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on a usage error
    if args.command is None:
        parser.print_help()
        return 0
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return _run(args)
    except BudgetlabError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {one_line(exc.strerror or exc)}{one_line(where)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
