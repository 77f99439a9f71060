"""The table of published speed-ups of speculative decoding in vLLM (:data:`PUBLISHED_SPEEDUPS`).

Each :class:`PublishedSpeedup` row holds its source (title and URL), the setting as the source
states it (model, GPU, tensor parallelism, method, ``k``, load), the acceptance it publishes, and
the speed-up exactly as measured: the ratio the source states (``published_speedup``, never
rounded) and the two measurements it comes from (``published_baseline`` and
``published_with_drafts``: time per output token in seconds, or output tokens per second). A
ratio computed here from those two is a separate, derived value
(:attr:`PublishedSpeedup.speedup_from_published_values`). Each reproduced row also says how
budgetlab reruns its setting (catalog GPU and model, engine, requests) and what it assumes where
the source is silent (``assumptions``); :mod:`budgetlab.experiments.spec_published` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budgetlab.errors import ParameterError
from budgetlab.specs import EngineConfig, Request
from budgetlab.workload import AcceptanceRates, MeanAcceptanceLength, SyntheticWorkload

__all__ = [
    "PublishedSpeedup",
    "PUBLISHED_SPEEDUPS",
    "MT_BENCH_PROMPT_TOKENS",
    "MT_BENCH_OUTPUT_TOKENS",
    "METRICS",
]

#: The two measurements a published speed-up can be a ratio of: time per output token [s], and
#: output tokens per second [1/s].
METRICS = ("tpot_mean_s", "throughput_tokens_per_s")

# --------------------------------------------------------------------------------------------
# MT-Bench request lengths (the batch-size-1 rows)
# --------------------------------------------------------------------------------------------

#: vLLM PR #16035's run without drafting on MT-Bench at ``--max_num_seqs 1`` (80 prompts, Llama 3
#: 8B Instruct, vLLM's examples/offline_inference/eagle.py, which takes each question's first turn
#: under the chat template and samples at most 256 tokens at temperature 0):
#: ``[02:08<00:00, 1.61s/it, est. speed input: 47.09 toks/s, output: 128.64 toks/s]``
#: (https://github.com/vllm-project/vllm/pull/16035). tqdm's speeds are totals over the elapsed time.
_PR_16035_ELAPSED_S = 128.0  # "02:08"
_PR_16035_INPUT_TOKENS_PER_S = 47.09
_PR_16035_OUTPUT_TOKENS_PER_S = 128.64
_PR_16035_NUM_PROMPTS = 80

#: The mean MT-Bench prompt of those runs, 47.09 tokens/s × 128 s / 80 prompts ≈ 75 [tokens].
MT_BENCH_PROMPT_TOKENS = round(_PR_16035_INPUT_TOKENS_PER_S * _PR_16035_ELAPSED_S / _PR_16035_NUM_PROMPTS)
#: The mean MT-Bench answer of those runs, 128.64 tokens/s × 128 s / 80 prompts ≈ 206 [tokens]
#: (eagle.py caps an answer at 256).
MT_BENCH_OUTPUT_TOKENS = round(_PR_16035_OUTPUT_TOKENS_PER_S * _PR_16035_ELAPSED_S / _PR_16035_NUM_PROMPTS)
_MT_BENCH_LENGTHS = (
    f"every request {MT_BENCH_PROMPT_TOKENS} prompt and {MT_BENCH_OUTPUT_TOKENS} output tokens: the means of "
    "vLLM PR #16035's MT-Bench run at --max_num_seqs 1 (80 prompts in 128 s at 47.09 input and 128.64 output "
    "tokens/s, eagle.py's first turns under the chat template, at most 256 output tokens)"
)


@dataclass(frozen=True)
class PublishedSpeedup:
    """One published speed-up of speculative decoding in vLLM, and how budgetlab reruns its setting.

    Attributes
    ----------
    key : str
        A short unique name, e.g. ``"20780-eagle3-k4"``.
    source_title, source_url : str
        Where the numbers are.
    model : str
        The target and the drafter, as the source names them.
    gpu : str
        The GPU as the source states it, or ``"not stated"``.
    tensor_parallel_size : int
        GPUs the target is split over [GPUs].
    method : str
        vLLM's ``--speculative-config`` method.
    num_speculative_tokens : int or None
        ``k`` [drafts per step]; None where the source's text does not give it.
    load : str
        The load as the source describes it.
    published_speedup : float or None
        The speed-up the source states, exactly as printed [-]; None where it states none.
    published_speedup_text : str
        The source's words for it (``"1.63x"``, ``"up to 2.8x"``, ``"1.4x slowdown"``).
    metric : str or None
        What the two measurements are: ``"tpot_mean_s"`` (time per output token [s]) or
        ``"throughput_tokens_per_s"`` (output tokens per second [1/s]).
    published_baseline, published_with_drafts : float or None
        That measurement without and with drafting, as published (times converted to seconds).
    published_mean_acceptance_length : float or None
        vLLM's mean acceptance length, bonus token included [tokens per verification].
    published_acceptance_rates : tuple of float
        Acceptance rates as given [-] (a range gives its two ends); empty if none.
    acceptance_source : str
        Where the acceptance comes from, when not from the speed-up's own source.
    catalog_hardware, catalog_model : str or None
        The catalog slugs budgetlab runs (None: not reproduced).
    engine_settings : tuple of (str, object)
        The :class:`~budgetlab.specs.EngineConfig` fields of the run without drafts.
    rate_per_s : float or None
        Poisson arrivals at this rate [1/s]; None: every request waits from the start (batch
        size 1 with ``max_num_seqs = 1``).
    prompt_tokens, output_tokens : int or None
        Every request's lengths [tokens]; None: budgetlab's conversation-like workload.
    assumptions : str
        What budgetlab assumes where the source is silent, and where the run differs from it.
    note : str
        Caveats about the published numbers themselves.
    not_reproduced_because : str
        Empty for a reproduced row; else why budgetlab cannot rerun it honestly.
    """

    key: str
    source_title: str
    source_url: str
    model: str
    gpu: str
    tensor_parallel_size: int
    method: str
    num_speculative_tokens: int | None
    load: str
    published_speedup: float | None
    published_speedup_text: str
    metric: str | None = None
    published_baseline: float | None = None
    published_with_drafts: float | None = None
    published_mean_acceptance_length: float | None = None
    published_acceptance_rates: tuple[float, ...] = ()
    acceptance_source: str = ""
    catalog_hardware: str | None = None
    catalog_model: str | None = None
    engine_settings: tuple[tuple[str, Any], ...] = ()
    rate_per_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    assumptions: str = ""
    note: str = ""
    not_reproduced_because: str = ""

    def __post_init__(self) -> None:
        if self.metric is not None and self.metric not in METRICS:
            raise ParameterError(f"{self.key}: metric must be one of {', '.join(METRICS)} or None, got {self.metric!r}")
        if self.reproduced and (self.catalog_hardware is None or self.catalog_model is None or self.metric is None):
            raise ParameterError(
                f"{self.key}: a reproduced row needs catalog_hardware, catalog_model and metric; "
                "or say why it is not reproduced (not_reproduced_because)"
            )

    @property
    def source(self) -> str:
        """The source in a few words: ``"vLLM issue #20780"``, ``"vLLM PR #12755"``, ``"vLLM blog"``."""
        number = self.source_url.rstrip("/").rsplit("/", 1)[-1]
        if "/issues/" in self.source_url:
            return f"vLLM issue #{number}"
        if "/pull/" in self.source_url:
            return f"vLLM PR #{number}"
        return "vLLM blog" if "blog.vllm.ai" in self.source_url else self.source_title

    @property
    def reproduced(self) -> bool:
        """Whether :func:`predict_published` reruns this row."""
        return not self.not_reproduced_because

    @property
    def speedup_from_published_values(self) -> float | None:
        """The speed-up computed here from the two published measurements [-] (derived, not
        published): baseline / with drafts for a time, with drafts / baseline for a throughput."""
        if self.published_baseline is None or self.published_with_drafts is None:
            return None
        if self.metric == "tpot_mean_s":
            return self.published_baseline / self.published_with_drafts
        return self.published_with_drafts / self.published_baseline

    @property
    def reference_speedup(self) -> float | None:
        """What a prediction is compared with [-]: the ratio of the two published measurements
        where both are given (the measured quantity at the precision printed), else the stated
        speed-up."""
        derived = self.speedup_from_published_values
        return derived if derived is not None else self.published_speedup

    def acceptance(self) -> MeanAcceptanceLength | AcceptanceRates:
        """The acceptance model of the published figure: :class:`MeanAcceptanceLength` of the
        mean acceptance length at this ``k``, else :meth:`AcceptanceRates.from_vllm` of the lowest
        published rate (the low end of a range).

        Raises
        ------
        ParameterError
            The row publishes no acceptance, or no ``k``.
        """
        k = self.num_speculative_tokens
        if k is None:
            raise ParameterError(f"{self.key}: the source gives no num_speculative_tokens")
        if self.published_mean_acceptance_length is not None:
            return MeanAcceptanceLength(self.published_mean_acceptance_length, k)
        if self.published_acceptance_rates:
            return AcceptanceRates.from_vllm((min(self.published_acceptance_rates),))
        raise ParameterError(f"{self.key}: no published acceptance to simulate with")

    def engine(self, num_speculative_tokens: int) -> EngineConfig:
        """The engine of this row's run with ``num_speculative_tokens`` drafts (0: without)."""
        k = num_speculative_tokens
        return EngineConfig(
            **dict(self.engine_settings), num_speculative_tokens=k, speculative_method=self.method if k else None
        )

    def requests(self, *, num_requests: int, seed: int) -> list[Request]:
        """The requests both runs replay: ``num_requests`` of the row's lengths all waiting at 0
        (batch size 1), or the conversation-like workload at ``rate_per_s``."""
        if self.rate_per_s is None:
            if self.prompt_tokens is None or self.output_tokens is None:
                raise ParameterError(f"{self.key}: a batch-size-1 row needs prompt_tokens and output_tokens")
            return [
                Request(
                    request_id=str(i),
                    arrival_at_s=0.0,
                    prompt_tokens=self.prompt_tokens,
                    output_tokens=self.output_tokens,
                )
                for i in range(num_requests)
            ]
        return SyntheticWorkload.conversation_like(num_requests=num_requests).requests(
            rate_per_s=self.rate_per_s, seed=seed
        )


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------

_ISSUE_20780 = "https://github.com/vllm-project/vllm/issues/20780"
_TITLE_20780 = "vLLM issue #20780 (EAGLE-1 vs EAGLE-3 on Llama 3.1 8B): tables 'AL' and 'TPOT ms', BS 1"
_PR_16937 = "https://github.com/vllm-project/vllm/pull/16937"
_TITLE_16937 = "vLLM PR #16937 '[V1][Spec Decode] EAGLE-3 Support': 'Output tokens/s on H100 BS1'"
_PR_12755 = "https://github.com/vllm-project/vllm/pull/12755"
_TITLE_12755 = "vLLM PR #12755 '[Model][Speculative Decoding] DeepSeek MTP spec decode': 'Results on various QPS'"
_BLOG = "https://blog.vllm.ai/2024/10/17/spec-decode.html"
_TITLE_BLOG = "vLLM blog, 'How Speculative Decoding Boosts vLLM Performance by up to 2.8x' (2024-10-17)"

_LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
_EAGLE3_8B = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
_EAGLE1_8B = "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"

#: vLLM's examples/offline_inference/eagle.py at the time of PR #16937 (the command both Llama rows
#: quote): budget 2,048, max_model_len 2,048, gpu_memory_utilization 0.8, --max_num_seqs 1.
_EAGLE_PY_ENGINE: tuple[tuple[str, Any], ...] = (
    ("max_num_batched_tokens", 2048),
    ("max_num_seqs", 1),
    ("max_model_len", 2048),
    ("gpu_memory_utilization", 0.8),
    ("enable_prefix_caching", False),
)
_BATCH_ONE = (
    "one request at a time (max_num_seqs 1, every request waiting from the start), "
    + _MT_BENCH_LENGTHS
    + "; engine as vLLM's eagle.py sets it (budget 2,048, max_model_len 2,048, gpu_memory_utilization 0.8), "
    "prefix caching off (budgetlab does not simulate EAGLE with it; MT-Bench prompts share none)"
)
_H100_ASSUMED = "GPU not stated in the issue: H100 SXM assumed (the same author's PR #16937 ran on H100). "

#: Issue #20780: k, EAGLE-3 mean acceptance length, EAGLE-3 TPOT [ms], EAGLE-1 mean acceptance
#: length, EAGLE-1 TPOT [ms], the issue's 'E1 over vanilla' column (as printed).
_ROWS_20780 = (
    (2, 2.36, 4.32, 2.1, 4.37, 1.61784897),
    (3, 2.79, 4.09, 2.29, 4.29, 1.648018648),
    (4, 3.08, 4.05, 2.39, 4.48, 1.567627494),
    (5, 3.32, 4.13, 2.43, 4.71, 1.61047836),
    (6, 3.46, 4.2, 2.45, 4.94, 1.543668122),
    (7, 3.54, 4.29, 2.47, 5.2, 1.359615385),
)
_VANILLA_TPOT_20780_MS = 7.07


def _ms(value_ms: float) -> float:
    return value_ms / 1e3


def _rows_20780() -> tuple[PublishedSpeedup, ...]:
    rows = []
    for k, al3, tpot3, al1, tpot1, e1_over_vanilla in _ROWS_20780:
        common: dict[str, Any] = {
            "source_title": _TITLE_20780,
            "source_url": _ISSUE_20780,
            "gpu": "not stated",
            "tensor_parallel_size": 1,
            "num_speculative_tokens": k,
            "load": "batch size 1, MT-Bench",
            "metric": "tpot_mean_s",
            "published_baseline": _ms(_VANILLA_TPOT_20780_MS),
            "catalog_hardware": "h100-sxm",
            "catalog_model": "llama-3.1-8b",
            "engine_settings": _EAGLE_PY_ENGINE,
            "prompt_tokens": MT_BENCH_PROMPT_TOKENS,
            "output_tokens": MT_BENCH_OUTPUT_TOKENS,
            "assumptions": _H100_ASSUMED + _BATCH_ONE,
        }
        rows.append(
            PublishedSpeedup(
                key=f"20780-eagle3-k{k}",
                model=f"{_LLAMA_8B} + {_EAGLE3_8B}",
                method="eagle3",
                published_speedup=None,
                published_speedup_text=f"TPOT {_VANILLA_TPOT_20780_MS} ms (vanilla) -> {tpot3} ms",
                published_with_drafts=_ms(tpot3),
                published_mean_acceptance_length=al3,
                note="The issue states no EAGLE-3-over-vanilla ratio (only 'E3 over E1'); the speed-up is the ratio of "
                "its TPOTs.",
                **common,
            )
        )
        rows.append(
            PublishedSpeedup(
                key=f"20780-eagle-k{k}",
                model=f"{_LLAMA_8B} + {_EAGLE1_8B}",
                method="eagle",
                published_speedup=e1_over_vanilla,
                published_speedup_text=(
                    f"'E1 over vanilla' {e1_over_vanilla}; TPOT {_VANILLA_TPOT_20780_MS} -> {tpot1} ms"
                ),
                published_with_drafts=_ms(tpot1),
                published_mean_acceptance_length=al1,
                note=(
                    "The issue's 'E1 over vanilla' column disagrees with its own TPOTs at K = 4, 5, 6 "
                    f"(7.07 / {tpot1} = {_VANILLA_TPOT_20780_MS / tpot1:.4f}); predictions are compared with the "
                    "TPOT ratio."
                    if abs(_VANILLA_TPOT_20780_MS / tpot1 - e1_over_vanilla) > 0.005
                    else ""
                ),
                **common,
            )
        )
    return tuple(rows)


def _rows_16937() -> tuple[PublishedSpeedup, ...]:
    """EAGLE-3 k = 2 and EAGLE-1 k = 2, 4, 7; the PR gives no acceptance, issue #20780 (same
    author, drafters and prompts) does."""
    al_20780 = {("eagle3", k): al3 for k, al3, _, _, _, _ in _ROWS_20780} | {
        ("eagle", k): al1 for k, _, _, al1, _, _ in _ROWS_20780
    }
    measured = (  # method, k, output tokens/s, stated speed-up, its text
        ("eagle3", 2, 220.21, 1.65, "K=2: 220.21, speedup: 1.65x"),
        ("eagle", 2, 201.69, 1.51, "K=2: 201.69, speedup:  1.51x"),
        ("eagle", 4, 198.0, 1.48, "K=4: 198, speedup: 1.48x"),
        ("eagle", 7, 169.92, 1.27, "K=7: 169.92, speedup: 1.27x"),
    )
    return tuple(
        PublishedSpeedup(
            key=f"16937-{method}-k{k}",
            source_title=_TITLE_16937,
            source_url=_PR_16937,
            model=f"{_LLAMA_8B} + {_EAGLE3_8B if method == 'eagle3' else _EAGLE1_8B}",
            gpu="H100",
            tensor_parallel_size=1,
            method=method,
            num_speculative_tokens=k,
            load="batch size 1 (--max_num_seqs 1), MT-Bench, 80 prompts, offline",
            published_speedup=speedup,
            published_speedup_text=text + " (vanilla: 133)",
            metric="throughput_tokens_per_s",
            published_baseline=133.0,
            published_with_drafts=tokens_per_s,
            published_mean_acceptance_length=al_20780[(method, k)],
            acceptance_source=f"{_ISSUE_20780} (the PR gives none; same author, drafter and MT-Bench, table 'AL')",
            catalog_hardware="h100-sxm",
            catalog_model="llama-3.1-8b",
            engine_settings=_EAGLE_PY_ENGINE,
            prompt_tokens=MT_BENCH_PROMPT_TOKENS,
            output_tokens=MT_BENCH_OUTPUT_TOKENS,
            assumptions=_BATCH_ONE + "; output tokens per second over the whole run, prefills included",
            note="Offline output tokens/s, prefill time included. The stated speed-ups are the throughput ratios cut "
            "to two decimals (201.69 / 133 = 1.5165 is stated 1.51x).",
        )
        for method, k, tokens_per_s, speedup, text in measured
    )


_MTP_ENGINE: tuple[tuple[str, Any], ...] = (
    ("tensor_parallel_size", 8),
    ("quantization", "fp8"),
    ("max_num_batched_tokens", 8192),
    ("max_num_seqs", 128),
    ("max_model_len", 65536),
    ("gpu_memory_utilization", 0.8),
    ("enable_prefix_caching", False),
)
_MTP_ASSUMPTIONS = (
    "GPU not stated in the PR: 8 × H200 assumed (the FP8 checkpoint's weights, 78 GiB per GPU at TP 8, do not fit "
    "an 80 GB H100 at the PR's --gpu-memory-utilization 0.8: budgetlab.kv_capacity refuses it). DeepSeek-R1 is "
    "DeepSeek-V3's architecture: the catalog's deepseek-v3, FP8. The PR's server flags (--max-num-seqs 128, "
    "--max-model-len 65536, --gpu-memory-utilization 0.8), budget 8,192 (vLLM's default on a GPU of 70 GiB or more); "
    "prefix caching off (budgetlab does not simulate MTP with it). The dataset is not stated: budgetlab's "
    "conversation-like workload (Splitwise chat lengths, prompt median 1,020 and output median 129 tokens), "
    "Poisson arrivals. The PR ran the MTP module at draft TP 1 on vLLM's V0 engine; budgetlab splits it like the "
    "target and schedules like vLLM 0.33. Acceptance: the low end of the published 81 % - 82.3 %."
)


def _rows_12755() -> tuple[PublishedSpeedup, ...]:
    measured = ((1.0, 55.47, 33.99, 1.63), (2.0, 57.58, 48.8, 1.18))  # QPS, baseline and k=1 TPOT [ms], stated
    return tuple(
        PublishedSpeedup(
            key=f"12755-mtp-qps{qps:g}",
            source_title=_TITLE_12755,
            source_url=_PR_12755,
            model="deepseek-ai/DeepSeek-R1 (its MTP module), TP 8, draft TP 1",
            gpu="not stated",
            tensor_parallel_size=8,
            method="mtp",
            num_speculative_tokens=1,
            load=f"QPS {qps:g} (online serving, --max-num-seqs 128)",
            published_speedup=speedup,
            published_speedup_text=f"{speedup}x (TPOT {base_ms} -> {k1_ms} ms)",
            metric="tpot_mean_s",
            published_baseline=_ms(base_ms),
            published_with_drafts=_ms(k1_ms),
            published_acceptance_rates=(0.81, 0.823),
            catalog_hardware="h200-sxm",
            catalog_model="deepseek-v3",
            engine_settings=_MTP_ENGINE,
            rate_per_s=qps,
            assumptions=_MTP_ASSUMPTIONS,
            note="'The acceptance rate is 81% ~ 82.3% on R1 k=1.' The stored copy of the table stops at the QPS 4 row.",
        )
        for qps, base_ms, k1_ms, speedup in measured
    )


_BLOG_WHY = (
    "k is only in the blog's figures, not its text; no acceptance is published for {what}; {drafter}the runs "
    "used vLLM's V0 engine. Any k, acceptance{load} chosen here would be invented."
)
_QWAMA = "the draft model turboderp/Qwama-0.5B-Instruct is not in budgetlab's catalog; "


def _rows_blog() -> tuple[PublishedSpeedup, ...]:
    common: dict[str, Any] = {
        "source_title": _TITLE_BLOG,
        "source_url": _BLOG,
        "gpu": "4 x H100",
        "tensor_parallel_size": 4,
        "num_speculative_tokens": None,
    }
    return (
        PublishedSpeedup(
            key="blog-draft-model-qps1",
            model="Llama3-70B + turboderp/Qwama-0.5B-Instruct",
            method="draft_model",
            load="QPS 1, ShareGPT",
            published_speedup=1.5,
            published_speedup_text="up to 1.5x Speedup at QPS=1",
            not_reproduced_because=_BLOG_WHY.format(what="this drafter pair", drafter=_QWAMA, load=""),
            **common,
        ),
        PublishedSpeedup(
            key="blog-ngram-qps1",
            model="Llama3-70B",
            method="ngram",
            load="QPS 1, CNN/DailyMail",
            published_speedup=2.8,
            published_speedup_text="up to 2.8x Speedup at QPS=1",
            not_reproduced_because=_BLOG_WHY.format(what="n-gram on CNN/DailyMail", drafter="", load=""),
            **common,
        ),
        PublishedSpeedup(
            key="blog-high-qps",
            model="Llama3-70B (+ turboderp/Qwama-0.5B-Instruct on ShareGPT; n-grams on CNN/DailyMail)",
            method="draft_model",
            load="'high QPS' (not given as a number)",
            published_speedup=None,
            published_speedup_text="1.4x slowdown (ShareGPT), 1.8x slowdown (CNN Dailymail)",
            not_reproduced_because=_BLOG_WHY.format(
                what="either drafter", drafter=_QWAMA + "'high QPS' is not given as a number; ", load=" or load"
            ),
            note="Direction: drafting slower than not drafting at high load.",
            **common,
        ),
    )


PUBLISHED_SPEEDUPS: tuple[PublishedSpeedup, ...] = (*_rows_20780(), *_rows_16937(), *_rows_12755(), *_rows_blog())
"""Published vLLM speed-ups of speculative decoding (see the module docs); sources: vLLM issue
#20780, PRs #16937 and #12755, and the vLLM blog of 2024-10-17 (listed, not reproduced)."""
