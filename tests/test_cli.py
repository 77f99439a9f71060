"""``python -m budgetlab``: the five subcommands end to end, their JSON, their errors.

Most tests call :func:`budgetlab.cli.main` in this process with small workloads (tens of
requests, one process: ``--jobs 1``) and compare what it printed and wrote with the library
functions called directly on the same inputs; two run the real command in a subprocess from a
folder outside the checkout, as an installed wheel runs it.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_layering import MODULES, imports_of, targets

import budgetlab as bl
from budgetlab import catalog
from budgetlab.cli import build_parser, main
from budgetlab.cli.output import json_safe, shown, write_json
from budgetlab.cost.named import make_cost
from budgetlab.errors import CatalogError, UnknownNameError
from budgetlab.serving import example_bench_path

from conftest import REPO_ROOT

HF_ID = "meta-llama/Llama-3.1-8B-Instruct"
SMALL = ["--num-requests", "40"]


def _strict_json(text: str) -> dict:
    """Parse JSON, refusing NaN and infinities as a strict reader does."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON")

    return json.loads(text, parse_constant=refuse)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _run_json(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[str, dict]:
    target = tmp_path / "out.json"
    code, out, err = _run(capsys, *argv, "--json", str(target))
    assert code == 0, err
    assert "Traceback" not in err
    return out, _strict_json(target.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------
# help and the bare command
# --------------------------------------------------------------------------------------------


def test_help_lists_every_command_and_examples(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("simulate", "sweep", "capacity", "tune", "calibrate"):
        assert f"python -m budgetlab {command}" in out
    assert "python -m budgetlab.reports --list" in out


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("simulate", ["--trace", "--workload", "--gpu", "--model", "--cost", "--no-prefix-caching", "--json"]),
        ("sweep", ["--budgets", "--max-num-seqs", "--rates", "--num-loads", "--jobs", "--progress"]),
        ("capacity", ["--ttft-p90-ms", "--itl-p99-ms", "--tolerance", "--max-num-batched-tokens"]),
        ("tune", ["--ttft-p90-ms", "--itl-p99-ms", "--tensor-parallel-size", "--no-async-scheduling"]),
        ("calibrate", ["--bench", "--steps", "--no-attention", "--holdout-fraction"]),
    ],
)
def test_each_command_documents_its_options(capsys, command, flags):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in flags:
        assert flag in out, flag
    assert "Hugging Face" in out and "typical" in out


def test_no_command_prints_the_usage(capsys):
    code, out, _ = _run(capsys)
    assert code == 0
    assert out.startswith("usage: python -m budgetlab")


def test_the_readme_examples_parse():
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Command line") :]
    section = section[: section.index("\n## ")]
    examples = re.findall(r"^python -m budgetlab (.+?)(?:\s+#.*)?$", section, re.M)
    assert len(examples) >= 3
    parser = build_parser()
    for example in examples:
        args = parser.parse_args(shlex.split(example))
        assert args.command in ("simulate", "sweep", "capacity", "tune", "calibrate")


# --------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------


def test_simulate_matches_the_library_and_labels_the_cost(capsys, tmp_path):
    out, document = _run_json(capsys, tmp_path, "simulate", *SMALL, "--rate", "4", "--seed", "3")
    hw, model = bl.hardware("h100-sxm"), bl.model("llama-3.1-8b")
    engine = bl.EngineConfig.vllm_defaults(hw)
    requests = bl.SyntheticWorkload.conversation_like(num_requests=40).requests(rate_per_s=4.0, seed=3)
    expected = bl.simulate(requests, engine=engine, cost=make_cost("typical", hw, model, engine=engine))
    assert document["results"]["summary"] == pytest.approx(json_safe(expected.summary()))
    inputs = document["inputs"]
    assert (inputs["gpu"], inputs["model"], inputs["cost"]) == ("h100-sxm", "llama-3.1-8b", "typical")
    assert inputs["engine"]["max_num_batched_tokens"] == engine.max_num_batched_tokens
    assert inputs["budgetlab_version"] == bl.__version__
    assert inputs["workload"] == {
        "synthetic": "conversation",
        "num_requests": 40,
        "rate_per_s": 4.0,
        "seed": 3,
        "arrivals": "poisson",
    }
    assert "typical cost" in out and "CalibratedCost.typical" in out
    p90_ms = expected.summary()["ttft_p90_s"] * 1e3
    assert f"{p90_ms:.3g}" in out


def test_simulate_engine_flags_reach_the_engine(capsys, tmp_path):
    _, document = _run_json(
        capsys,
        tmp_path,
        "simulate",
        *SMALL,
        "--gpu",
        "a100-80gb-sxm",
        "--cost",
        "ideal",
        "--max-num-batched-tokens",
        "1024",
        "--max-num-seqs",
        "64",
        "--no-prefix-caching",
        "--no-async-scheduling",
        "--workload",
        "code",
    )
    engine = document["inputs"]["engine"]
    assert (engine["max_num_batched_tokens"], engine["max_num_seqs"]) == (1024, 64)
    assert engine["enable_prefix_caching"] is False and engine["async_scheduling"] is False
    assert document["inputs"]["cost"] == "ideal" and document["inputs"]["gpu"] == "a100-80gb-sxm"
    assert document["inputs"]["workload"]["synthetic"] == "code"
    assert document["cost_model"].startswith("IdealCost")


def test_speculative_decoding_flags_reach_the_engine(capsys, tmp_path):
    out, document = _run_json(
        capsys,
        tmp_path,
        "simulate",
        *SMALL,
        "--num-speculative-tokens",
        "3",
        "--speculative-method",
        "eagle3",
        "--no-prefix-caching",
    )
    engine = document["inputs"]["engine"]
    assert (engine["num_speculative_tokens"], engine["speculative_method"]) == (3, "eagle3")
    assert "eagle3 drafting 3 tokens" in out


@pytest.mark.parametrize("spelling", [HF_ID, HF_ID.upper(), "  meta-llama/llama-3.1-8b-instruct "])
def test_a_hugging_face_id_is_the_catalog_row(capsys, tmp_path, spelling):
    out, document = _run_json(capsys, tmp_path, "simulate", "--num-requests", "10", "--model", spelling)
    assert document["inputs"]["model"] == "llama-3.1-8b"
    assert document["inputs"]["model_from"] == "hugging face id"
    assert "llama-3.1-8b (from hugging face id" in out


def test_a_config_json_path_is_read(capsys, tmp_path):
    config = REPO_ROOT / "tests" / "fixtures" / "hf_configs" / "qwen3-0.6b.json"
    _, document = _run_json(capsys, tmp_path, "simulate", "--num-requests", "10", "--model", str(config))
    assert document["inputs"]["model_from"] == "config.json"
    derived = bl.model_from_hf_config(config)
    assert document["inputs"]["model"] == derived.slug


def test_simulate_a_trace_file(capsys, tmp_path):
    trace = tmp_path / "tiny.csv"
    trace.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n"
        + "".join(f"{i * 0.25},{200 + 37 * i},{20 + i}\n" for i in range(30)),
        encoding="utf-8",
    )
    _, document = _run_json(capsys, tmp_path, "simulate", "--trace", str(trace), "--num-requests", "25")
    assert document["results"]["summary"]["num_requests"] == 25
    assert document["inputs"]["workload"]["trace"] == str(trace)


def test_json_to_stdout_leaves_stdout_pure_json(capsys):
    code, out, err = _run(capsys, "simulate", "--num-requests", "10", "--json", "-")
    assert code == 0
    assert _strict_json(out)["command"] == "simulate"
    assert "typical cost" in err  # the table went to stderr


def test_progress_goes_to_stderr_only_when_asked(capsys):
    _, out, err = _run(capsys, "simulate", "--num-requests", "10", "--progress")
    assert "budgetlab: simulating 10 requests" in err and "budgetlab:" not in out
    _, _, err = _run(capsys, "simulate", "--num-requests", "10", "--no-progress")
    assert "budgetlab:" not in err


# --------------------------------------------------------------------------------------------
# sweep, capacity, tune
# --------------------------------------------------------------------------------------------


def test_sweep_runs_the_grid(capsys, tmp_path):
    argv = ["sweep", *SMALL, "--budgets", "512,2048", "--max-num-seqs", "64", "--rates", "2,6", "--jobs", "1"]
    out, document = _run_json(capsys, tmp_path, *argv)
    rows = document["results"]["rows"]
    assert [(r["max_num_batched_tokens"], r["rate_per_s"]) for r in rows] == [(512, 2), (512, 6), (2048, 2), (2048, 6)]
    assert {r["cost"] for r in rows} == {"typical"}
    assert document["inputs"]["grid"] == {"budgets": [512, 2048], "max_num_seqs": [64], "rates_per_s": [2.0, 6.0]}
    table = bl.sweep(
        bl.SyntheticWorkload.conversation_like(num_requests=40),
        budgets=[512, 2048],
        max_num_seqs=[64],
        rates_per_s=[2.0, 6.0],
        hardware="h100-sxm",
        model="llama-3.1-8b",
        cost="typical",
        executor=bl.SerialExecutor(),
    )
    assert [r["ttft_p90_s"] for r in rows] == pytest.approx(table["ttft_p90_s"].tolist())
    assert out.count("typical") >= 4


def test_sweep_default_loads_reach_past_the_service_rate(capsys, tmp_path):
    argv = ["sweep", "--num-requests", "20", "--budgets", "1024", "--num-loads", "3", "--jobs", "1"]
    _, document = _run_json(capsys, tmp_path, *argv)
    rates = document["inputs"]["grid"]["rates_per_s"]
    assert len(rates) == 3 and rates == sorted(rates)
    assert document["inputs"]["grid"]["max_num_seqs"] == [1024]  # vLLM's 1024, at most the budget


def test_capacity_matches_the_library(capsys, tmp_path):
    argv = ["capacity", "--num-requests", "60", "--itl-p99-ms", "60", "--max-num-seqs", "512", "--tolerance", "0.1"]
    out, document = _run_json(capsys, tmp_path, *argv)
    hw = bl.hardware("h100-sxm")
    expected = bl.capacity(
        bl.SyntheticWorkload.conversation_like(num_requests=60),
        slo=bl.SLO(itl_p99_s=0.060),
        engine=bl.EngineConfig.vllm_defaults(hw, max_num_seqs=512),
        hardware=hw,
        model="llama-3.1-8b",
        cost="typical",
        tolerance_fraction=0.1,
    )
    assert document["results"]["capacity_per_s"] == pytest.approx(expected.capacity_per_s)
    assert document["inputs"]["slo"] == {"itl_p99_s": 0.060}
    assert "capacity (typical cost)" in out


def test_capacity_without_limits_uses_the_default_slo(capsys, tmp_path):
    out, document = _run_json(capsys, tmp_path, "capacity", "--num-requests", "100", "--tolerance", "0.2")
    assert document["inputs"]["slo"] == {"ttft_p90_s": 0.8, "itl_p99_s": 0.040}
    assert "the default SLO" in out


def test_tune_recommends_a_configuration(capsys, tmp_path):
    argv = ["tune", "--num-requests", "100", "--tolerance", "0.2", "--jobs", "1"]
    out, document = _run_json(capsys, tmp_path, *argv)
    results = document["results"]
    assert results["max_num_batched_tokens"] >= results["max_num_seqs"] >= 1
    assert results["capacity_per_s"] > 0
    assert any(c["chosen"] for c in results["candidates"])
    assert document["inputs"]["cost"] == "typical"
    assert "recommendation (typical cost)" in out


# --------------------------------------------------------------------------------------------
# calibrate
# --------------------------------------------------------------------------------------------


def test_calibrate_a_bench_file_takes_its_model_id(capsys, tmp_path):
    argv = ["calibrate", "--bench", str(example_bench_path()), "--max-num-batched-tokens", "2048"]
    out, document = _run_json(capsys, tmp_path, *argv)
    assert document["inputs"]["model"] == "llama-3.1-8b"  # from the file's model_id, a Hugging Face id
    assert document["inputs"]["model_arg"] == HF_ID
    assert set(document["results"]["parameters"]) == {"step_overhead_s", "request_overhead_s"}
    assert "simulated by budgetlab, not measured" in out


def test_calibrate_measured_steps(capsys, tmp_path):
    steps = bl.data_path("measured", "vidur-h100-llama2-7b-linear.csv")
    argv = ["calibrate", "--steps", str(steps), "--model", "llama-2-7b", "--no-attention"]
    out, document = _run_json(capsys, tmp_path, *argv)
    expected = bl.calibrate(steps, hardware="h100-sxm", model="llama-2-7b", attention=False)
    fitted = document["results"]["parameters"]
    for row in expected.parameters.itertuples(index=False):
        assert fitted[row.name]["value"] == pytest.approx(row.value)
    assert document["inputs"]["cost"] == "calibrated"
    assert "calibrated: CalibratedCost fitted to these measurements" in out


# --------------------------------------------------------------------------------------------
# errors: one line, exit status 2
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["simulate", "--gpu", "h100"], "did you mean h100-pcie, h100-sxm"),
        (["simulate", "--model", "meta-llama/Llama-3.1-8B-Instruct-FP8"], HF_ID),
        (["simulate", "--model", "Llama-3.1-8B-Instruct"], HF_ID),
        (["simulate", "--trace", "/nonexistent/trace.csv"], "does not exist"),
        (["simulate", "--max-num-batched-tokens", "100", "--max-num-seqs", "200"], "max_num_seqs"),
        (["simulate", "--rate", "-3"], "--rate"),
        (["simulate", "--rate", "nan"], "--rate"),
        (["simulate", "--num-requests", "0"], "--num-requests"),
        (["sweep", "--budgets", "512,x"], "--budgets"),
        (["calibrate", "--gpu", "h100-sxm"], "--bench --steps is required"),
        (["calibrate", "--bench", "/nonexistent/result.json"], "nonexistent"),
        (["simulate", "--json", "/nonexistent/folder/out.json"], "folder for --json does not exist"),
        (["capacity", "--num-requests", "20", "--ttft-p90-ms", "5"], "fails even at"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_status_2(capsys, argv, fragment):
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "error: " in lines[0]
    assert fragment.lower() in lines[0].lower()


@pytest.mark.filterwarnings("always::UserWarning")  # the suite turns warnings into errors; a user's shell does not
def test_a_warning_is_one_line(capsys):
    code, _, err = _run(capsys, "capacity", "--num-requests", "20", "--itl-p99-ms", "20000", "--tolerance", "0.5")
    assert code == 2  # 20 s holds at every load: the search's error follows the warning
    warning = [line for line in err.splitlines() if "SLO" in line and "warning" in line.lower()]
    assert warning and warning[0].startswith("warning: "), err
    assert "warnings.warn" not in err and "Traceback" not in err


def test_terminal_escapes_in_a_file_name_are_escaped(capsys, tmp_path):
    bad = tmp_path / "bad\x1b[2Jname.csv"
    bad.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,x\n", encoding="utf-8")
    code, _, err = _run(capsys, "simulate", "--trace", str(bad))
    assert code == 2
    assert "\x1b" not in err and "\\x1b[2Jname.csv" in err
    assert shown("a\rb\u202ec") == "a\\rb\\u202ec"


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------


def test_json_has_no_nan_or_infinity(tmp_path, capsys):
    target = tmp_path / "x.json"
    write_json({"nan": math.nan, "inf": [math.inf, 1.5], "ok": 2}, str(target))
    assert _strict_json(target.read_text(encoding="utf-8")) == {"nan": None, "inf": [None, 1.5], "ok": 2}
    assert not list(tmp_path.glob(".*partial"))  # written whole, no temporary left


# --------------------------------------------------------------------------------------------
# the real command, in a subprocess, outside the checkout
# --------------------------------------------------------------------------------------------


def _module(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "budgetlab", *argv], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_the_module_runs_in_a_subprocess(tmp_path):
    done = _module(tmp_path, "simulate", "--model", HF_ID, "--num-requests", "20", "--json", "out.json")
    assert done.returncode == 0, done.stderr
    document = _strict_json((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert document["inputs"]["model"] == "llama-3.1-8b"
    assert "wrote out.json" in done.stdout
    failed = _module(tmp_path, "simulate", "--gpu", "nope")
    assert failed.returncode == 2
    assert failed.stderr.startswith("error: unknown hardware 'nope'") and "Traceback" not in failed.stderr


def test_the_conversation_trace_from_the_command_line(shared_traces, tmp_path):
    trace = shared_traces / "splitwise_conv.csv"
    argv = ["simulate", "--trace", str(trace), "--gpu", "h100-sxm", "--model", HF_ID, "--num-requests", "2000"]
    done = _module(tmp_path, *argv, "--json", "out.json")
    assert done.returncode == 0, done.stderr
    document = _strict_json((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert document["results"]["summary"]["num_requests"] == 2000
    assert document["inputs"]["gpu"] == "h100-sxm" and document["inputs"]["cost"] == "typical"


# --------------------------------------------------------------------------------------------
# the catalog's Hugging Face ids, and the layering
# --------------------------------------------------------------------------------------------


def test_every_row_lists_the_repository_it_cites():
    ids = catalog.hf_ids()
    assert ids[HF_ID] == "llama-3.1-8b"
    assert set(ids.values()) == set(bl.list_models())
    for slug in bl.list_models():
        source = bl.model_table().loc[slug, "source"]
        cited = source.removeprefix("huggingface.co/").split()[0].split("/blob/")[0]
        assert cited in ids and ids[cited] == slug, (slug, cited)


def _catalog_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change) -> None:
    folder = catalog.data_path("catalog")
    (tmp_path / "hardware.csv").write_bytes((folder / "hardware.csv").read_bytes())
    with (folder / "models.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0])
    change(rows)
    with (tmp_path / "models.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    monkeypatch.setattr(catalog, "_catalog_dir", lambda: tmp_path)
    catalog.clear_cache()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("meta-llama/Llama-3.1-8B", "already listed by the row 'llama-3.1-8b'"), ("no-owner", "not a Hugging Face")],
)
def test_a_bad_hf_id_cell_is_refused(tmp_path, monkeypatch, value, fragment):
    def change(rows):
        next(r for r in rows if r["slug"] == "llama-2-7b")["hf_ids"] = value

    _catalog_copy(tmp_path, monkeypatch, change)
    try:
        with pytest.raises(CatalogError, match="'hf_ids'") as info:
            bl.model("llama-2-7b")
        assert fragment in str(info.value) and "models.csv" in str(info.value)
    finally:
        monkeypatch.undo()
        catalog.clear_cache()


def test_an_unknown_hf_id_says_what_to_do():
    with pytest.raises(UnknownNameError, match=r"config\.json") as info:
        bl.model("someone/unknown-model")
    assert "never downloads" in str(info.value)


def test_nothing_in_the_package_imports_the_cli():
    mentions = [m for m in MODULES if re.search(r"\bcli\b", MODULES[m].read_text(encoding="utf-8"))]
    importers = sorted(
        module
        for module in mentions
        if not module.startswith("budgetlab.cli") and module != "budgetlab.__main__"
        for found in imports_of(module)
        for target in targets(found)
        if target == "budgetlab.cli" or target.startswith("budgetlab.cli.")
    )
    assert not importers, f"the command line is the top layer; these import it: {importers}"
    cli_modules = [m for m in MODULES if m.startswith("budgetlab.cli")]
    assert len(cli_modules) >= 2
    reached = {t for m in cli_modules for f in imports_of(m) for t in targets(f)}
    assert not {t for t in reached if t.startswith(("budgetlab.charts", "budgetlab.notebook"))}


def test_the_docstring_examples_hold():
    import doctest

    import budgetlab.text

    for module in (budgetlab.text, catalog):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0, module.__name__


def test_sweep_points_as_array_jobs_join_into_the_whole_sweep(capsys, tmp_path):
    grid = ["sweep", *SMALL, "--budgets", "64,512,2048", "--max-num-seqs", "128", "--rates", "2,6", "--jobs", "1"]
    code, out, _ = _run(capsys, *grid, "--num-points")
    assert code == 0 and out.strip() == "4"  # budget 64 < max_num_seqs 128 is left out, as the sweep does
    _, whole = _run_json(capsys, tmp_path, *grid)
    files = []
    for point in (3, 1, 0, 2):  # in any order
        target = tmp_path / f"point-{point}.json"
        code, _, err = _run(capsys, *grid, "--point", str(point), "--json", str(target))
        assert code == 0, err
        files.append(str(target))
    _, joined = _run_json(capsys, tmp_path, "sweep", "--join", *files)
    assert joined["results"]["rows"] == whole["results"]["rows"]
    assert joined["inputs"] == whole["inputs"]
    code, _, err = _run(capsys, "sweep", "--join", *files[:3])
    assert code == 2 and "grid points [2] of 4 are missing" in err
    code, _, err = _run(capsys, *grid, "--point", "4")
    assert code == 2 and "--point 4 is not a grid point: the grid has points 0 to 3" in err
