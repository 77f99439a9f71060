"""budgetlab.experiments.speculation: the budget arithmetic with drafts, speed-up by load, where
drafting stops paying, and the capacity per k.

The budget cases are worked by hand from rules S2, S3 and S5 of budgetlab.simulator.drafts; the
simulated ones use a constant step time or the idealized roofline on tiny workloads, so each runs
in well under a second.
"""

from __future__ import annotations

import pandas as pd
import pytest

from budgetlab import ConstantCost, EngineConfig
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.experiments.slo import SLO
from budgetlab.experiments.speculation import (
    best_k_by_load,
    prefill_room_by_k,
    prefill_room_tokens,
    speculation_by_load,
    stops_paying_per_s,
    tune_speculation,
)
from budgetlab.workload import AcceptanceRates, Fixed, MeanAcceptanceLength, SyntheticWorkload

BUDGET, SEQS = 2048, 256


def _engine(k: int = 0, method: str | None = None, **changes) -> EngineConfig:
    return EngineConfig(
        max_num_batched_tokens=BUDGET,
        max_num_seqs=SEQS,
        num_speculative_tokens=k,
        speculative_method=method,
        enable_prefix_caching=False,
        **changes,
    )


# --------------------------------------------------------------------------------------------
# The budget arithmetic
# --------------------------------------------------------------------------------------------


def test_the_issues_example_leaves_a_quarter_of_the_budget_for_prompts():
    # 256 decoding requests each verify 5 drafts: 256 x (1 + 5) = 1,536 of 2,048 tokens
    assert prefill_room_tokens(_engine(5, "eagle3")) == 2048 - 1536 == 512
    # without drafts: one token per decode (notebook 02's arithmetic)
    assert prefill_room_tokens(_engine()) == 2048 - 256 == 1792


def test_a_draft_model_also_reserves_an_input_slot_per_request():
    # s = 1: the decodes take 256 x (1 + 5 + 1) = 1,792 input slots, the chunk its own slot too
    assert prefill_room_tokens(_engine(5, "draft_model")) == 2048 - 256 * 7 - 1 == 255
    # n-gram, EAGLE and MTP reserve none (s = 0)
    assert prefill_room_tokens(_engine(5, "ngram")) == prefill_room_tokens(_engine(5, "mtp")) == 512


def test_room_counts_the_decoding_requests_given_and_never_goes_below_zero():
    assert prefill_room_tokens(_engine(5, "eagle3"), num_decoding=100) == 2048 - 600 == 1448
    assert prefill_room_tokens(_engine(5, "eagle3"), num_decoding=0) == 2048
    assert prefill_room_tokens(_engine(7, "eagle3")) == 0  # 256 x 8 = 2,048: the decodes fill it
    assert prefill_room_tokens(_engine(7, "draft_model")) == 0  # they would ask more than the budget
    with pytest.raises(ParameterError, match=r"num_decoding \(257\) cannot exceed max_num_seqs"):
        prefill_room_tokens(_engine(1, "eagle3"), num_decoding=SEQS + 1)
    with pytest.raises(ParameterError, match="num_decoding"):
        prefill_room_tokens(_engine(1, "eagle3"), num_decoding=-1)


def test_room_by_k_is_one_row_per_k_with_the_baseline():
    table = prefill_room_by_k(_engine(1, "eagle3"), num_speculative_tokens=[5, 1])
    assert list(table.num_speculative_tokens) == [0, 1, 5]
    assert list(table.prefill_room_tokens) == [1792, 1536, 512]
    assert list(table.decode_tokens) == [256, 512, 1536]
    assert list(table.drafting_slots) == [0, 0, 0]
    assert table.speculative_method.isna().tolist() == [True, False, False]
    assert table.speculative_method.iloc[1] == "eagle3"
    assert table.prefill_room_fraction.iloc[-1] == pytest.approx(0.25)
    drafted = prefill_room_by_k(
        _engine(), num_speculative_tokens=[5], speculative_method="draft_model", num_decoding=100
    )
    # k = 0: 2,048 - 100; k = 5: 2,048 - 100 x (1 + 5 + 1) - 1
    assert list(drafted.drafting_slots) == [0, 100] and list(drafted.prefill_room_tokens) == [1948, 1347]
    with pytest.raises(ParameterError, match="drafting method"):
        prefill_room_by_k(_engine(), num_speculative_tokens=[1])


def test_vllm_refuses_a_budget_the_lookahead_fills():
    with pytest.raises(ConfigError, match="lookahead"):
        prefill_room_by_k(
            EngineConfig(max_num_batched_tokens=4, max_num_seqs=4),
            num_speculative_tokens=[4],
            speculative_method="eagle3",
        )


# --------------------------------------------------------------------------------------------
# Speed-up by load and where it stops paying
# --------------------------------------------------------------------------------------------


def _tiny(num_requests: int = 24) -> SyntheticWorkload:
    return SyntheticWorkload(prompt=Fixed(200), output=Fixed(64), num_requests=num_requests, label="tiny")


def test_with_a_constant_step_every_accepted_draft_is_a_step_saved():
    table = speculation_by_load(
        _tiny(),
        engine=_engine(1, "ngram"),
        hardware="h100-sxm",
        model="llama-3.1-8b",
        rates_per_s=[0.5],
        num_speculative_tokens=[2],
        cost=ConstantCost(0.01),
        acceptance=AcceptanceRates(per_position=(1.0,)),
    )
    assert list(table.num_speculative_tokens) == [0, 2]
    base, drafted = table.set_index("num_speculative_tokens").tpot_mean_s
    assert base == pytest.approx(0.01)  # one token a step
    # every draft accepted: 3 tokens a step, one step of padding at the end of a 63-token decode
    assert drafted < base / 2.5 and table.speedup.iloc[1] == pytest.approx(base / drafted)
    assert table.speedup.iloc[0] == 1.0


def test_with_nothing_accepted_drafting_only_costs():
    table = speculation_by_load(
        _tiny(),
        engine=_engine(),
        speculative_method="eagle3",
        hardware="h100-sxm",
        model="llama-3.1-8b",
        rates_per_s=[0.5, 40.0],
        num_speculative_tokens=[3],
        cost="ideal",
        acceptance=AcceptanceRates(per_position=(0.0,)),
    )
    drafted = table[table.num_speculative_tokens == 3]
    assert (drafted.speedup <= 1.0).all()  # wider steps, the same tokens
    assert stops_paying_per_s(table) == {3: 0.5}


def test_stops_paying_is_the_lowest_load_where_k_is_not_faster():
    table = pd.DataFrame(
        {
            "num_speculative_tokens": [0, 0, 0, 1, 1, 1, 4, 4, 4],
            "rate_per_s": [1.0, 5.0, 10.0] * 3,
            "speedup": [1.0, 1.0, 1.0, 1.6, 1.3, 1.1, 2.0, 1.0, 0.8],
        }
    )
    assert stops_paying_per_s(table) == {1: None, 4: 5.0}
    table["tpot_mean_s"] = 0.01 / table.speedup
    best = best_k_by_load(table)
    assert list(best.best_k) == [4, 1, 1] and list(best.speedup) == [2.0, 1.3, 1.1]
    assert best_k_by_load(table[table.num_speculative_tokens != 1]).best_k.tolist() == [4, 0, 0]  # ties: fewest drafts
    with pytest.raises(ParameterError, match="speculation_by_load"):
        best_k_by_load(table.drop(columns="speedup"))


# --------------------------------------------------------------------------------------------
# The capacity per k
# --------------------------------------------------------------------------------------------


def test_tune_speculation_picks_the_k_that_carries_more_load_and_says_why():
    # idealized roofline: a TPOT limit just above the weight read binds without drafts; two drafts
    # at a mean acceptance length of 2.5 carry more load under it
    result = tune_speculation(
        _tiny(80),
        slo=SLO(ttft_p90_s=0.1, tpot_mean_s=0.006),
        engine=_engine(),
        speculative_method="eagle3",
        hardware="h100-sxm",
        model="llama-3.1-8b",
        num_speculative_tokens=[2],
        cost="ideal",
        acceptance=MeanAcceptanceLength(2.5, 2),
        tolerance_fraction=0.1,
    )
    table = result.table.set_index("num_speculative_tokens")
    assert list(table.index) == [0, 2] and set(table.status) == {"ok"}
    assert result.num_speculative_tokens == 2 and result.speculative_method == "eagle3"
    assert result.capacity_per_s == table.capacity_per_s[2] > table.capacity_per_s[0]
    assert table.gain[0] == 1.0 and table.gain[2] == pytest.approx(table.capacity_per_s[2] / table.capacity_per_s[0])
    assert "(ideal cost)" in result.explanation[0]
    assert result.explanation[1].startswith("Recommendation: num_speculative_tokens = 2")


def test_a_sweep_takes_k_and_the_method_as_knobs_and_each_seed_draws_its_own_acceptance():
    from budgetlab.experiments.executors import SerialExecutor
    from budgetlab.experiments.sweep import sweep

    table = sweep(
        _tiny(),
        budgets=512,
        max_num_seqs=16,
        rates_per_s=[1.0],
        num_speculative_tokens=[0, 3],
        speculative_method="eagle3",
        seed=[0, 1],
        hardware="h100-sxm",
        model="llama-3.1-8b",
        cost=ConstantCost(0.01),
        engine=_engine(),
        acceptance=MeanAcceptanceLength(2.0, 3),
        executor=SerialExecutor(),
    )
    assert list(zip(table.num_speculative_tokens, table.speculative_method, table.seed)) == [
        (0, "none", 0),
        (0, "none", 1),
        (3, "eagle3", 0),
        (3, "eagle3", 1),
    ]
    drafted = table[table.num_speculative_tokens == 3]
    assert drafted.tpot_mean_s.iloc[0] != drafted.tpot_mean_s.iloc[1]  # two seeds, two draws
    with pytest.raises(ParameterError, match="speculative_method"):
        sweep(
            _tiny(),
            budgets=512,
            max_num_seqs=16,
            rates_per_s=[1.0],
            num_speculative_tokens=[2],
            hardware="h100-sxm",
            model="llama-3.1-8b",
            cost=ConstantCost(0.01),
            engine=_engine(),
        )


def test_tune_checks_its_speculation_knob_before_it_simulates():
    from budgetlab.experiments.tune import tune

    slo = SLO(ttft_p90_s=1.0)
    with pytest.raises(ParameterError, match="drafting method"):
        tune(_tiny(), slo=slo, hardware="h100-sxm", model="llama-3.1-8b", num_speculative_tokens=[1, 2])
    with pytest.raises(ConfigError, match="speculative_method must be one of"):
        tune(
            _tiny(),
            slo=slo,
            hardware="h100-sxm",
            model="llama-3.1-8b",
            num_speculative_tokens=[1],
            speculative_method="medusa",
        )
