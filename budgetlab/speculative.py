"""Speculative decoding as vLLM 0.33's scheduler sees it: what each method reserves.

A speculating engine (``EngineConfig(num_speculative_tokens=k, speculative_method=...)``) proposes
``k`` draft tokens after each step for every request that is decoding, and the next step verifies
them with the target model: a decoding request asks for ``1 + k`` tokens instead of 1. Three
per-method numbers decide how that interacts with the budget and the KV pool; vLLM derives them
from its ``SpeculativeConfig`` and :func:`draft_rules` gives them here:

* ``lookahead_tokens`` — KV slots a request's allocation reserves past the tokens it is
  scheduled for, where a drafter with its own forward pass writes the drafts' KV
  (``VllmConfig.num_lookahead_tokens``, ``vllm/config/vllm.py``): ``k`` for EAGLE, EAGLE-3, MTP
  and draft models, 0 for n-gram (it runs on the CPU and writes no KV).
* ``new_slots_for_drafting`` — input slots of ``max_num_batched_tokens`` each scheduled request
  reserves for the drafter's extra query rows (``SpeculativeConfig.max_num_new_slots_for_drafting``,
  ``vllm/config/speculative.py``): 1 for a draft model (its autoregressive input keeps one
  unsliced token), 0 for n-gram, EAGLE, EAGLE-3 and MTP (none of them drafts in parallel here).
* ``prefill_lookahead_tokens`` — prefill tokens past the computed range the drafter reads
  (``VllmConfig.num_prefill_lookahead_tokens``): 1 for the EAGLE family and single-module MTP,
  0 otherwise. A chunk is never ended within this many tokens of the prefill's end; with 1 that
  never binds (``Scheduler._reserve_prefill_lookahead``).

:func:`check_speculative` refuses what vLLM refuses at start-up (``VllmConfig.
_set_max_num_scheduled_tokens``); :func:`start_up_warnings` says what it warns about. The
scheduling rules themselves are stated in :mod:`budgetlab.simulator.drafts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budgetlab._checks import Bound, int_at_least
from budgetlab.errors import ConfigError

__all__ = [
    "SPECULATIVE_METHODS",
    "MAX_SPECULATIVE_TOKENS",
    "SMALL_SCHEDULED_TOKENS",
    "DraftRules",
    "draft_rules",
    "check_speculative",
    "start_up_warnings",
]

#: The drafting methods budgetlab models, by vLLM's ``--speculative-config`` ``method`` names.
SPECULATIVE_METHODS = ("ngram", "draft_model", "eagle", "eagle3", "mtp")
#: The largest ``num_speculative_tokens`` accepted.
MAX_SPECULATIVE_TOKENS = Bound(
    64,
    "tokens",
    "8 times the most drafts per step of any published vLLM deployment (EAGLE-3 and MTP recipes use 1-8); "
    "acceptance falls geometrically with the draft's position",
)


#: vLLM 0.33 warns when a speculating engine's ``max_num_scheduled_tokens`` (its
#: ``max_num_batched_tokens``) is below this [tokens] (``VllmConfig._set_max_num_scheduled_tokens``).
SMALL_SCHEDULED_TOKENS = 8192


@dataclass(frozen=True)
class DraftRules:
    """What one speculating configuration reserves (vLLM 0.33's values, see the module docs).

    Attributes
    ----------
    method : str
        One of :data:`SPECULATIVE_METHODS`.
    num_speculative_tokens : int
        Drafts proposed per decoding request per step, ``k`` [tokens].
    lookahead_tokens : int
        KV slots reserved past a request's scheduled tokens [tokens].
    new_slots_for_drafting : int
        Input slots of the budget each scheduled request reserves for the drafter [tokens].
    prefill_lookahead_tokens : int
        Prefill tokens the drafter reads past the computed range [tokens].
    """

    method: str
    num_speculative_tokens: int
    lookahead_tokens: int
    new_slots_for_drafting: int
    prefill_lookahead_tokens: int

    @property
    def uniform_decode_query_len(self) -> int:
        """Query tokens of a decode that verifies all its drafts, ``1 + k`` [tokens]
        (``VllmConfig.uniform_decode_query_len``)."""
        return 1 + self.num_speculative_tokens


def draft_rules(method: str, num_speculative_tokens: int) -> DraftRules:
    """vLLM 0.33's reservations for ``method`` drafting ``num_speculative_tokens`` tokens.

    ``VllmConfig.num_lookahead_tokens``: ``k`` when ``use_eagle()`` (eagle, eagle3, mtp) or
    ``uses_draft_model()``, else 0. ``SpeculativeConfig.max_num_new_slots_for_drafting``: 1 for
    ``draft_model`` without parallel drafting, else 0. ``VllmConfig.num_prefill_lookahead_tokens``:
    1 for ``use_eagle()`` methods (MTP with one module, as DeepSeek-V3's and Qwen3's), else 0.
    """
    if method not in SPECULATIVE_METHODS:
        raise ConfigError(f"speculative_method must be one of {', '.join(SPECULATIVE_METHODS)}, got {method!r}")
    k = num_speculative_tokens
    eagle_family = method in ("eagle", "eagle3", "mtp")
    return DraftRules(
        method=method,
        num_speculative_tokens=k,
        lookahead_tokens=k if eagle_family or method == "draft_model" else 0,
        new_slots_for_drafting=1 if method == "draft_model" else 0,
        prefill_lookahead_tokens=1 if eagle_family else 0,
    )


def check_speculative(engine: Any) -> None:
    """Refuse the speculative settings of ``engine`` (an :class:`~budgetlab.EngineConfig`) that
    vLLM refuses, with the fix.

    vLLM needs a method with a positive ``num_speculative_tokens``, and refuses a budget that
    cannot hold one token past the lookahead slots: ``max_num_batched_tokens <=
    num_lookahead_tokens`` ("VllmConfig does not have enough slots to schedule a token and support
    the speculative decoding settings", ``VllmConfig._set_max_num_scheduled_tokens``).

    Raises
    ------
    ConfigError
    """
    k, method = engine.num_speculative_tokens, engine.speculative_method
    int_at_least(
        "num_speculative_tokens",
        k,
        0,
        what="an int >= 0 (0 turns speculative decoding off)",
        error=ConfigError,
        maximum=MAX_SPECULATIVE_TOKENS,
    )
    if method is None:
        if k:
            raise ConfigError(
                f"num_speculative_tokens={k} needs a speculative_method, one of {', '.join(SPECULATIVE_METHODS)} "
                "(vLLM's --speculative-config method)"
            )
        return
    if not k:
        raise ConfigError(
            f"speculative_method={method!r} needs num_speculative_tokens >= 1 (or set speculative_method=None "
            "to turn speculative decoding off)"
        )
    rules = draft_rules(method, k)
    if engine.max_num_batched_tokens <= rules.lookahead_tokens:
        raise ConfigError(
            f"max_num_batched_tokens ({engine.max_num_batched_tokens}) must exceed the {rules.lookahead_tokens} "
            f"lookahead slots of {method} drafting {k} tokens: vLLM refuses a budget with no room to schedule a "
            "token. Raise max_num_batched_tokens or lower num_speculative_tokens."
        )


def start_up_warnings(engine: Any) -> tuple[str, ...]:
    """What vLLM 0.33 warns about at start-up for ``engine``'s speculative settings (empty when it
    does not speculate).

    vLLM sets ``max_num_scheduled_tokens`` to ``max_num_batched_tokens`` and, below
    :data:`SMALL_SCHEDULED_TOKENS`, warns that the budget may be too small for the drafts
    (``VllmConfig._set_max_num_scheduled_tokens``): every decoding request takes ``1 + k`` of it.
    A ``long_prefill_token_threshold`` below ``1 + k`` is not refused at start-up, but it stops the
    engine when it cuts a padded admission (``Scheduler.schedule``'s assertion).
    """
    k = engine.num_speculative_tokens
    out = []
    if k and engine.max_num_batched_tokens < SMALL_SCHEDULED_TOKENS:
        out.append(
            f"vLLM warns: max_num_scheduled_tokens is {engine.max_num_batched_tokens:,} with {k} speculative tokens "
            f"(below {SMALL_SCHEDULED_TOKENS:,}); each decoding request takes {1 + k} of it, so performance may "
            "suffer. It suggests a larger max_num_batched_tokens or fewer speculative tokens."
        )
    threshold = engine.long_prefill_token_threshold
    if k and 0 < threshold < 1 + k:
        out.append(
            f"long_prefill_token_threshold ({threshold}) is below 1 + k = {1 + k}: when it cuts a single-token "
            "admission padded to 1 + k, vLLM 0.33's scheduler fails its own assertion and stops (budgetlab raises "
            f"ConfigError there). Set it to 0 or to at least {1 + k}."
        )
    return tuple(out)
