"""Frozen descriptions of the three things a what-if needs: a GPU, a model and an engine config.

``HardwareSpec`` and ``ModelSpec`` rows come from the catalog (:mod:`budgetlab.catalog`);
``EngineConfig`` holds vLLM's scheduling knobs and refuses, at construction, every combination
vLLM refuses at start-up (see ``shared/reference/vllm-v1-scheduling.md``). The two nouns the
engine passes around live here too: a ``Request`` (what arrives) and a ``Batch`` (what one step
processes, the argument of every cost model's ``batch_time_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from budgetlab import _checks as limits
from budgetlab._checks import finite_number, flag, int_at_least, number_in
from budgetlab._engine_checks import check_cudagraph_fields, check_formats
from budgetlab.attention import AttentionLayout, KVGroup, describe_kv_groups, normalize_kv_groups
from budgetlab.batch import Batch
from budgetlab.display import html_table, one_line
from budgetlab.errors import ConfigError
from budgetlab.formats import DTYPES, KV_CACHE_DTYPES, QUANTIZATIONS
from budgetlab.request import Request
from budgetlab.speculative import check_speculative
from budgetlab.text import fmt_bandwidth, fmt_flops_rate, fmt_gib, fmt_int
from budgetlab.vision import VisionEncoder

__all__ = [
    "HardwareSpec",
    "ModelSpec",
    "EngineConfig",
    "Request",
    "Batch",
    "POLICIES",
    "SCHEDULING_POLICIES",
    "DTYPES",
    "KV_CACHE_DTYPES",
    "QUANTIZATIONS",
]


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator as its datasheet describes it.

    Attributes
    ----------
    slug : str
        Catalog key, lower case (``"h100-sxm"``).
    name : str
        Human-readable name.
    dense_bf16_flops_per_s : float
        Peak dense (no sparsity) BF16 tensor throughput [FLOP/s].
    mem_bandwidth_bytes_per_s : float
        Peak HBM/GDDR bandwidth [B/s].
    memory_bytes : float
        Device memory [B] (GB = 1e9 B, GiB = 2**30 B as the datasheet states it).
    interconnect : str
        GPU-to-GPU link used for tensor parallelism (``"NVLink 4"``, ``"PCIe Gen5 x16"``).
    interconnect_bandwidth_bytes_per_s : float
        Per-GPU unidirectional link bandwidth available to an all-reduce [B/s].
    interconnect_latency_s : float
        Typical small-message all-reduce latency over that link [s].
    source : str
        Datasheet(s) the numbers come from.
    cuda_memory_bytes : float or None
        Memory the driver reports to CUDA as the device's total [B]
        (``torch.cuda.mem_get_info()[1]``, the figure vLLM's profiler multiplies by
        ``gpu_memory_utilization``): less than the datasheet capacity, because the driver
        keeps a reserve (an "80GB" H100 shows 79.19 GiB). ``None`` uses ``memory_bytes``,
        which makes the KV pool a little too large.
    cuda_memory_source : str
        Where ``cuda_memory_bytes`` was read (a log line, an issue), or why it is unknown.

    Raises
    ------
    ConfigError
        A rate, bandwidth or memory size that is not a finite number > 0, a latency that is not
        a finite number >= 0, ``cuda_memory_bytes`` outside ``(0, memory_bytes]``, or a number
        above its physical ceiling (:data:`budgetlab._checks.HARDWARE_BOUNDS`, e.g. 16 TiB).
    """

    slug: str
    name: str
    dense_bf16_flops_per_s: float
    mem_bandwidth_bytes_per_s: float
    memory_bytes: float
    interconnect: str
    interconnect_bandwidth_bytes_per_s: float
    interconnect_latency_s: float
    source: str = field(default="", compare=False)
    cuda_memory_bytes: float | None = None
    cuda_memory_source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for name, bound, positive in limits.HARDWARE_BOUNDS:
            finite_number(
                name, getattr(self, name), positive=positive, unit=bound.unit, error=ConfigError, maximum=bound
            )
        if self.cuda_memory_bytes is not None:
            number_in(
                "cuda_memory_bytes",
                self.cuda_memory_bytes,
                low=0.0,
                high=float(self.memory_bytes),
                low_open=True,
                what=f"bytes in (0, memory_bytes = {self.memory_bytes:g}], or None",
                error=ConfigError,
            )

    @property
    def reported_memory_bytes(self) -> float:
        """What CUDA reports as the device's total [B]: ``cuda_memory_bytes``, else ``memory_bytes``."""
        return float(self.memory_bytes if self.cuda_memory_bytes is None else self.cuda_memory_bytes)

    def _display_rows(self) -> list[tuple[str, str]]:
        return [
            ("BF16 dense", fmt_flops_rate(self.dense_bf16_flops_per_s)),
            ("memory bandwidth", fmt_bandwidth(self.mem_bandwidth_bytes_per_s)),
            ("memory", fmt_gib(self.memory_bytes, 0) + f" ({fmt_gib(self.reported_memory_bytes)} reported by CUDA)"),
            (
                "interconnect",
                f"{self.interconnect}, {fmt_bandwidth(self.interconnect_bandwidth_bytes_per_s)} per direction",
            ),
        ]

    def __repr__(self) -> str:
        return one_line("HardwareSpec", repr(self.slug), self._display_rows()[:3])

    def _repr_html_(self) -> str:
        return html_table(f"{self.name} ({self.slug})", self._display_rows())


_MODEL_INT_FIELDS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "intermediate_size",
    "vocab_size", "num_experts", "num_experts_per_token", "dtype_bytes",
)  # fmt: skip
"""The :class:`ModelSpec` fields that are whole numbers >= 1 (layers, widths, heads, experts, bytes)."""


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer as its model card and config describe it.

    Attributes
    ----------
    slug : str
        Catalog key, lower case (``"llama-3.1-8b"``).
    name : str
        Human-readable name.
    num_params : float
        Total parameters [count] (all experts for a mixture-of-experts model).
    num_active_params : float
        Parameters used per token [count]; equals ``num_params`` for a dense model.
    num_layers : int
        Transformer blocks.
    hidden_size : int
        Model width [elements].
    num_attention_heads : int
        Query heads.
    num_kv_heads : int
        Key/value heads (grouped-query attention when fewer than the query heads).
    head_dim : int
        Elements per head.
    intermediate_size : int
        MLP (per expert) inner width [elements].
    vocab_size : int
        Vocabulary [tokens].
    num_experts : int
        Routed experts per MoE layer; 1 for a dense model.
    num_experts_per_token : int
        Experts each token is routed to; 1 for a dense model.
    dtype_bytes : int
        Bytes per weight and per KV element (2 for BF16/FP16).
    source : str
        Model card / config the numbers come from.
    tie_word_embeddings : bool
        Whether the output projection reuses the token embedding (``config.json``'s
        ``tie_word_embeddings``); it sets how many parameters stay in 16 bits when the other
        weights are quantized (:func:`budgetlab.memory.embedding_params`).
    attention : AttentionLayout or None
        The attention kind of every layer (sliding window, chunked local, MLA, Mamba/linear;
        :mod:`budgetlab.attention`); ``None`` (default): every layer full attention with
        ``num_kv_heads`` grouped-query heads.
    vision : VisionEncoder or None
        A multimodal checkpoint's vision encoder, which vLLM loads and profiles beside the text
        model (:mod:`budgetlab.vision`; not in ``num_params``); ``None``: text only.
    rope_table_rows : int or None
        Positions of the rotary cos/sin tables vLLM precomputes, summed over the model's distinct
        rotary embeddings (:func:`budgetlab.memory.rope_table_bytes`); ``None``: not counted.

    Raises
    ------
    ConfigError
        A field of the wrong type or range: parameter counts finite in (0, 1e15], widths, counts
        and bytes ints in [1, 2**24] (bytes <= 8). Relations between fields are checked where
        rows are read (:mod:`budgetlab.catalog`, :func:`budgetlab.model_from_hf_config`).
    """

    slug: str
    name: str
    num_params: float
    num_active_params: float
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_experts: int = 1
    num_experts_per_token: int = 1
    dtype_bytes: int = 2
    source: str = field(default="", compare=False)
    tie_word_embeddings: bool = False
    attention: AttentionLayout | None = None
    vision: VisionEncoder | None = None
    rope_table_rows: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_params", "num_active_params"):
            bound = limits.MAX_PARAMS
            finite_number(name, getattr(self, name), positive=True, unit="parameters", error=ConfigError, maximum=bound)
        for name in _MODEL_INT_FIELDS:
            bound = limits.MAX_DTYPE_BYTES if name == "dtype_bytes" else limits.MAX_MODEL_DIMENSION
            int_at_least(name, getattr(self, name), 1, what="an int >= 1", error=ConfigError, maximum=bound)
        flag("tie_word_embeddings", self.tie_word_embeddings, error=ConfigError)
        layout = self.attention
        if layout is not None and (not isinstance(layout, AttentionLayout) or layout.num_layers != self.num_layers):
            raise ConfigError(
                f"attention must be an AttentionLayout with one kind per layer ({self.num_layers}), got {layout!r}"
            )
        if self.vision is not None and not isinstance(self.vision, VisionEncoder):
            raise ConfigError(f"vision must be a budgetlab.vision.VisionEncoder or None, got {self.vision!r}")
        if self.rope_table_rows is not None:
            int_at_least("rope_table_rows", self.rope_table_rows, 1, what="an int >= 1 or None", error=ConfigError)

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights [B]: every parameter, read once per step."""
        return self.num_params * self.dtype_bytes

    @property
    def is_moe(self) -> bool:
        """Whether tokens are routed to a subset of experts."""
        return self.num_experts > 1

    def _display_rows(self) -> list[tuple[str, str]]:
        params = f"{self.num_params / 1e9:.3g}B"
        if self.is_moe:
            routed = f"{self.num_experts_per_token} of {self.num_experts} experts"
            params += f" ({self.num_active_params / 1e9:.3g}B active, {routed})"
        return [
            ("parameters", params),
            ("layers", fmt_int(self.num_layers)),
            ("heads", f"{self.num_attention_heads} query, {self.num_kv_heads} KV, head_dim {self.head_dim}"),
            ("hidden / intermediate", f"{fmt_int(self.hidden_size)} / {fmt_int(self.intermediate_size)}"),
            ("vocabulary", fmt_int(self.vocab_size)),
            ("bytes per weight", str(self.dtype_bytes)),
            ("attention", self.attention.describe() if self.attention else "every layer full"),
        ]

    def __repr__(self) -> str:
        return one_line("ModelSpec", repr(self.slug), self._display_rows()[:3])

    def _repr_html_(self) -> str:
        return html_table(f"{self.name} ({self.slug})", self._display_rows())


POLICIES = ("vllm-v1", "decode-first")
"""Values of :attr:`EngineConfig.policy`: the order the running pass walks (budgetlab's option)."""
Policy = Literal["vllm-v1", "decode-first"]
SCHEDULING_POLICIES = ("fcfs", "priority")
"""Values of :attr:`EngineConfig.scheduling_policy`: vLLM's ``--scheduling-policy`` (how the
waiting queue is ordered and who is preempted)."""
SchedulingPolicy = Literal["fcfs", "priority"]


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """vLLM's scheduling knobs, validated the way vLLM validates them at start-up.

    ``EngineConfig()`` is ``vllm serve`` on a GPU it cannot name: ``EngineArgs.get_batch_defaults``
    (``vllm/engine/arg_utils.py``) then takes the non-H100 API-server values, 2,048 tokens and 256
    sequences. :meth:`vllm_defaults` gives a named GPU's (8,192 and 1,024 on an H100).

    Parameters
    ----------
    max_num_batched_tokens : int
        Token budget of one step [tokens] (vLLM ``max_num_batched_tokens``); default 2,048, at
        most 2**27 (:data:`budgetlab._checks.MAX_TOKENS`).
    max_num_seqs : int
        Cap on running sequences [count] (vLLM ``max_num_seqs``); default 256.
    block_size : int
        Tokens per KV-cache block [tokens].
    num_kv_blocks : int or None
        Usable KV blocks (vLLM's ``num_gpu_blocks`` minus its null block), at most 2**24
        (:data:`budgetlab._checks.MAX_KV_BLOCKS`). ``None`` derives them from the hardware and
        model with :func:`budgetlab.memory.kv_capacity`.
    long_prefill_token_threshold : int
        Largest prefill chunk a request may take in one step when others are present [tokens];
        0 disables the cap.
    max_model_len : int or None
        Longest prompt + output a request may have [tokens]; ``None`` means unlimited.
    gpu_memory_utilization : float
        Fraction of device memory vLLM may use (weights, activations, KV cache).
    enable_chunked_prefill : bool
        Whether prompts may be split across steps (vLLM V1 default: on).
    policy : {"vllm-v1", "decode-first"}
        Order the simulator fills a step in: vLLM V1's (running list, then waiting FCFS) or
        Sarathi-Serve's stall-free order (all decodes, then partial prefills, then new prompts).
    scheduling_policy : {"fcfs", "priority"}
        vLLM's ``--scheduling-policy`` (default ``"fcfs"``, as vLLM). ``"priority"``: the
        waiting queue is ordered by (``Request.priority``, arrival), a smaller value first, a
        preempted request re-enters it at its own place, and the preemption victim is the
        running request with the largest (priority, arrival) (``vllm-v1-prefix-async-priority.md``
        rules 32–37). It combines with either ``policy``: ``policy`` orders the running pass,
        ``scheduling_policy`` the waiting queue and the victim.
    enable_prefix_caching : bool
        vLLM's automatic prefix caching (default on, as ``vllm serve`` for ordinary models):
        full KV blocks are cached by content and shared; a request leaving the waiting queue
        first takes the longest run of cached leading blocks (``Request.prefix_id`` and
        ``prefix_tokens`` say what it shares); freed blocks stay cached in an LRU free queue
        (``vllm-v1-prefix-async-priority.md`` section 1). Requests that share nothing are
        scheduled exactly as with it off until a preemption (a recompute hits its own blocks).
    async_scheduling : bool
        vLLM's pipelined engine loop (default on, as vLLM 0.33 for ordinary models): step k is
        planned before step k−1's outputs are processed, so a finished request's slot and
        blocks are free one step later, and an iteration with only last tokens in flight
        schedules nothing but is still a step (section 2). Off: the synchronous loop.
    scheduler_reserve_full_isl : bool
        vLLM's admission check for the whole known sequence (default on): a waiting request
        is admitted only if the blocks of all its known tokens fit; off, only its first
        chunk's blocks must fit (rule 10).
    watermark : float
        Fraction of ``num_gpu_blocks`` (the usable blocks plus vLLM's null block) a waiting
        request must leave free while others run, in [0, 1) (vLLM's default 0.0, rule 13).
    pipeline_parallel_size : int
        Pipeline stages of one replica (vLLM's ``--pipeline-parallel-size``, default 1), each on
        its own ``tensor_parallel_size`` GPUs: the layers are split between them as vLLM splits
        them, the first stage also holds the embedding and the last the output projection and
        the sampler, and the pool is the smallest stage's (:func:`budgetlab.memory.kv_capacity`).
        A step still runs every stage in turn, so the cost models price it as without pipeline
        parallelism (vLLM's throughput gain from several batches in flight is not simulated).
    tensor_parallel_size : int
        GPUs one replica is sharded over (vLLM's ``--tensor-parallel-size``, default 1). It
        sets each GPU's share of the weights and of every token's KV, the non-torch memory
        (NCCL) in :func:`budgetlab.memory.kv_capacity`, and it must equal the cost model's
        ``tp`` (:func:`budgetlab.simulate` refuses a mismatch). It must divide the model's
        attention heads (checked where the model is known).
    dtype : str
        vLLM's ``--dtype`` for weights and activations, one of :data:`DTYPES`; ``"auto"``
        (default) keeps the model's ``dtype_bytes``; ``"float32"``/``"float"`` is 4 bytes, the
        others 2.
    kv_cache_dtype : str
        vLLM's ``--kv-cache-dtype``, one of :data:`KV_CACHE_DTYPES`: ``"auto"`` (default)
        stores keys and values in ``dtype``; an fp8 cache stores one byte per element, so the
        same memory holds twice the tokens (of a 16-bit model).
    quantization : {None, "fp8", "int8", "int4"}
        How the linear layers' weights are stored (:data:`QUANTIZATIONS`): it shrinks the
        weights in memory (more KV) and the weight read of every step.
    cudagraph_capture_sizes, max_cudagraph_capture_size : tuple of int, int or None
        vLLM's ``compilation_config`` fields [tokens]; ``None`` (default): vLLM's ladder up to 512
        (1,024 on Blackwell), see :mod:`budgetlab.cudagraph`. With both set, vLLM requires them to agree.
    enforce_eager : bool
        vLLM's ``--enforce-eager`` (default off): no CUDA graphs, every step runs eagerly.
    enable_expert_parallel : bool
        vLLM's ``--enable-expert-parallel`` (default off): a mixture of experts' MoE layers are
        split by whole experts over the ``tensor_parallel_size`` GPUs (``ep = tp``; one
        data-parallel rank) instead of by each expert's width; attention stays tensor-parallel.
        Each GPU holds ``E/ep`` whole experts, the same bytes as before, so the KV pool is
        unchanged; a step reads the slowest GPU's touched experts
        (:mod:`budgetlab.cost.moe_step`). No effect at ``tensor_parallel_size`` 1; refused
        with a model without experts, as vLLM does (checked where the model is known,
        :meth:`CalibratedCost.for_engine <budgetlab.cost.CalibratedCost.for_engine>`).
    kv_groups : tuple or None
        The KV-cache groups the scheduler allocates for, one entry per group, each ``"full"``,
        ``("sliding_window", W)``, ``("chunked_local", C)`` or ``("mamba", state_bytes)``, all
        drawing ``block_size``-token blocks from one pool (:mod:`budgetlab.attention`).
        ``None`` (default) derives them from the model as vLLM does
        (:func:`budgetlab.memory.scheduler_kv_groups`: one ``"full"`` group for an all
        full-attention model or when vLLM turns its hybrid manager off, as for Llama 4's chunked
        layers; a Mamba hybrid's larger block); set it for what-ifs. Only ``("full",)``
        (vLLM's ``--disable-hybrid-kv-cache-manager``) changes the pool's size.
    num_speculative_tokens : int
        Speculative decoding: draft tokens proposed per decoding request per step, ``k`` (vLLM's
        ``--speculative-config`` ``num_speculative_tokens``); 0 (default) turns it off. A
        decoding request then asks the scheduler for ``1 + k`` tokens, and the drafts' KV slots and
        input slots are reserved as :mod:`budgetlab.speculative` says.
    speculative_method : {None, "ngram", "draft_model", "eagle", "eagle3", "mtp"}
        The drafter (vLLM's ``method``); required with ``num_speculative_tokens`` > 0.

    Raises
    ------
    ConfigError
        For every combination vLLM refuses; the message names the fix.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    num_kv_blocks: int | None = None
    long_prefill_token_threshold: int = 0
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_chunked_prefill: bool = True
    policy: Policy = "vllm-v1"
    scheduling_policy: SchedulingPolicy = "fcfs"
    enable_prefix_caching: bool = True
    async_scheduling: bool = True
    scheduler_reserve_full_isl: bool = True
    watermark: float = 0.0
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_cudagraph_capture_size: int | None = None
    enforce_eager: bool = False
    enable_expert_parallel: bool = False
    kv_groups: tuple[KVGroup, ...] | None = None
    num_speculative_tokens: int = 0
    speculative_method: str | None = None

    def _display_rows(self) -> list[tuple[str, str]]:
        """The budget and the cap, then every field that differs from its default."""
        rows = [
            ("max_num_batched_tokens", fmt_int(self.max_num_batched_tokens)),
            ("max_num_seqs", fmt_int(self.max_num_seqs)),
        ]
        for f in fields(self):
            if f.name in ("max_num_batched_tokens", "max_num_seqs"):
                continue
            value = getattr(self, f.name)
            if value != f.default:
                text = fmt_int(value) if isinstance(value, int) and not isinstance(value, bool) else str(value)
                rows.append((f.name, describe_kv_groups(value) if f.name == "kv_groups" else text))
        return rows

    def __repr__(self) -> str:
        """The constructor call that builds this configuration: the fields off their defaults."""
        shown = {label for label, _ in self._display_rows()}
        changed = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name in shown)
        return f"EngineConfig({changed})"

    def _repr_html_(self) -> str:
        return html_table("EngineConfig (fields at vLLM's defaults not shown)", self._display_rows())

    @classmethod
    def vllm_defaults(cls, hardware: HardwareSpec, **changes: object) -> EngineConfig:
        """The configuration ``vllm serve`` (0.19) starts with on ``hardware``, with ``changes``.

        vLLM picks its batch defaults by GPU (``engine/arg_utils.py``, ``get_batch_defaults``):
        a GPU with at least 70 GiB (NVML's total) that is not an A100 gets
        ``max_num_batched_tokens`` 8,192 and ``max_num_seqs`` 1,024; every other GPU 2,048 and
        256 (the A100 is excluded because the large budget cost it throughput, vLLM PR #17885).
        With ``max_model_len`` set, the budget is capped at ``max_num_seqs × max_model_len`` and
        the cap at the budget, as vLLM does. Every other field keeps its vLLM default
        (``gpu_memory_utilization`` 0.9, ``block_size`` 16, prefix caching and async on).

        Parameters
        ----------
        hardware : HardwareSpec
        **changes
            Any :class:`EngineConfig` field; an explicit ``max_num_batched_tokens`` or
            ``max_num_seqs`` replaces the default.
        """
        large = hardware.memory_bytes >= 70 * 2**30 and "a100" not in f"{hardware.slug} {hardware.name}".lower()
        budget, seqs = (8192, 1024) if large else (2048, 256)
        max_model_len = changes.get("max_model_len")
        if "max_num_batched_tokens" not in changes and isinstance(max_model_len, int) and max_model_len > 0:
            budget = min(budget, int(changes.get("max_num_seqs", seqs)) * max_model_len)  # type: ignore[call-overload]
        values: dict[str, object] = {"max_num_batched_tokens": budget, "max_num_seqs": seqs, **changes}
        if "max_num_seqs" not in changes:
            values["max_num_seqs"] = min(seqs, int(values["max_num_batched_tokens"]))  # type: ignore[call-overload]
        return cls(**values)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size"):
            int_at_least(name, getattr(self, name), what="a positive int", error=ConfigError, maximum=limits.MAX_TOKENS)
        for name, bound in (("num_kv_blocks", limits.MAX_KV_BLOCKS), ("max_model_len", limits.MAX_TOKENS)):
            if getattr(self, name) is not None:  # None: derived from memory / unlimited
                int_at_least(name, getattr(self, name), what="a positive int", error=ConfigError, maximum=bound)
        threshold, what = self.long_prefill_token_threshold, "an int >= 0 (0 disables it)"
        int_at_least(
            "long_prefill_token_threshold", threshold, 0, what=what, error=ConfigError, maximum=limits.MAX_TOKENS
        )
        number_in(
            "gpu_memory_utilization",
            self.gpu_memory_utilization,
            low=0.0,
            high=1.0,
            low_open=True,
            what="a fraction in (0, 1]",
            hint="; vLLM's default is 0.9",
            error=ConfigError,
        )
        for name in (
            "enable_chunked_prefill",
            "enable_prefix_caching",
            "async_scheduling",
            "scheduler_reserve_full_isl",
            "enforce_eager",
            "enable_expert_parallel",
        ):
            flag(name, getattr(self, name), error=ConfigError)
        number_in(
            "watermark",
            self.watermark,
            low=0.0,
            high=1.0,
            high_open=True,
            what="a fraction in [0, 1)",
            hint="; vLLM's default is 0.0",
            error=ConfigError,
        )
        int_at_least(
            "tensor_parallel_size",
            self.tensor_parallel_size,
            1,
            what="an int >= 1 (GPUs per replica)",
            error=ConfigError,
        )
        int_at_least(
            "pipeline_parallel_size",
            self.pipeline_parallel_size,
            1,
            what="an int >= 1 (pipeline stages per replica)",
            error=ConfigError,
        )
        check_formats(self, dtypes=DTYPES, kv_cache_dtypes=KV_CACHE_DTYPES, quantizations=QUANTIZATIONS)
        if self.kv_groups is not None:
            object.__setattr__(self, "kv_groups", normalize_kv_groups(self.kv_groups))
        if self.policy not in POLICIES:
            raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(
                f"scheduling_policy must be one of {', '.join(SCHEDULING_POLICIES)} (vLLM's --scheduling-policy), "
                f"got {self.scheduling_policy!r}"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_num_seqs ({self.max_num_seqs}): {self.max_num_seqs} decoding sequences "
                "need one token each per step and would overflow the budget. Raise "
                f"max_num_batched_tokens to at least {self.max_num_seqs} or lower max_num_seqs."
            )
        if self.max_model_len is not None:
            if threshold > self.max_model_len:
                raise ConfigError(
                    f"long_prefill_token_threshold ({threshold}) exceeds max_model_len "
                    f"({self.max_model_len}): no chunk can be that long. Lower the threshold "
                    "or raise max_model_len."
                )
            if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
                raise ConfigError(
                    f"with chunked prefill off, max_num_batched_tokens "
                    f"({self.max_num_batched_tokens}) must be at least max_model_len "
                    f"({self.max_model_len}) so the longest prompt fits in one step. Enable "
                    "chunked prefill, raise the budget, or lower max_model_len."
                )
        elif not self.enable_chunked_prefill:
            raise ConfigError(
                "with chunked prefill off, set max_model_len so vLLM can check that the longest "
                "prompt fits in one step's budget (or enable chunked prefill)."
            )
        check_speculative(self)  # vLLM's SpeculativeConfig and VllmConfig checks (budgetlab/speculative.py)
        check_cudagraph_fields(self)  # vLLM's checks in VllmConfig._set_cudagraph_sizes (budgetlab/cudagraph.py)
