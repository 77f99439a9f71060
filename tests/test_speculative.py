"""What each drafting method reserves (``budgetlab/speculative.py``), against vLLM 0.33's config
code: ``VllmConfig.num_lookahead_tokens`` / ``num_prefill_lookahead_tokens`` and
``SpeculativeConfig.max_num_new_slots_for_drafting``, and what vLLM refuses or warns about.
``tests/test_simulator_vs_vllm_spec.py`` also checks the first two on every scenario, as vLLM's
config code computed them."""

from __future__ import annotations

import pytest

from budgetlab import EngineConfig
from budgetlab.errors import ConfigError
from budgetlab.speculative import SPECULATIVE_METHODS, draft_rules, start_up_warnings


@pytest.mark.parametrize(
    ("method", "lookahead", "slots", "prefill_lookahead"),
    [
        ("ngram", 0, 0, 0),  # on the CPU or in Triton kernels: no KV of its own
        ("draft_model", 5, 1, 0),  # its autoregressive input keeps one unsliced token
        ("eagle", 5, 0, 1),
        ("eagle3", 5, 0, 1),
        ("mtp", 5, 0, 1),  # one MTP module (DeepSeek-V3's), use_eagle()
    ],
)
def test_each_methods_reservations_are_vllms(method, lookahead, slots, prefill_lookahead):
    rules = draft_rules(method, 5)
    assert (rules.lookahead_tokens, rules.new_slots_for_drafting, rules.prefill_lookahead_tokens) == (
        lookahead,
        slots,
        prefill_lookahead,
    )
    assert rules.uniform_decode_query_len == 6


def test_the_methods_are_vllms_names():
    assert SPECULATIVE_METHODS == ("ngram", "draft_model", "eagle", "eagle3", "mtp")


@pytest.mark.parametrize(
    ("knobs", "needle"),
    [
        (dict(num_speculative_tokens=3), "needs a speculative_method"),
        (dict(speculative_method="eagle3"), "needs num_speculative_tokens >= 1"),
        (dict(num_speculative_tokens=3, speculative_method="medusa"), "must be one of"),
        (dict(num_speculative_tokens=-1, speculative_method="ngram"), "num_speculative_tokens"),
        (dict(num_speculative_tokens=65, speculative_method="ngram"), "at most 64"),
        (dict(num_speculative_tokens=3.0, speculative_method="ngram"), "num_speculative_tokens"),
        # vLLM: max_num_batched_tokens <= num_lookahead_tokens leaves no room to schedule a token
        (
            dict(max_num_batched_tokens=4, max_num_seqs=4, num_speculative_tokens=4, speculative_method="draft_model"),
            "must exceed the 4",
        ),
    ],
)
def test_what_vllm_refuses_is_refused_with_the_fix(knobs, needle):
    with pytest.raises(ConfigError, match=needle):
        EngineConfig(**knobs)


def test_a_budget_one_above_the_lookahead_is_accepted_and_ngram_needs_no_room():
    EngineConfig(max_num_batched_tokens=5, max_num_seqs=4, num_speculative_tokens=4, speculative_method="draft_model")
    EngineConfig(max_num_batched_tokens=4, max_num_seqs=4, num_speculative_tokens=4, speculative_method="ngram")


def test_vllm_warns_below_8192_tokens_when_speculating():
    assert start_up_warnings(EngineConfig(num_speculative_tokens=5, speculative_method="eagle3")) != ()
    assert "2,048" in start_up_warnings(EngineConfig(num_speculative_tokens=5, speculative_method="eagle3"))[0]
    assert (
        start_up_warnings(
            EngineConfig(max_num_batched_tokens=8192, num_speculative_tokens=5, speculative_method="eagle3")
        )
        == ()
    )
    assert start_up_warnings(EngineConfig()) == ()
