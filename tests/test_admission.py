"""The three gates and which one refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgetlab import Gate, admit, budget_has_room, kv_blocks_fit, seq_slot_free
from budgetlab.errors import ParameterError


def test_each_gate_alone():
    assert seq_slot_free(num_running=255, max_num_seqs=256)
    assert not seq_slot_free(num_running=256, max_num_seqs=256)
    assert budget_has_room(budget_left_tokens=1)
    assert not budget_has_room(budget_left_tokens=0)
    # 5,000 tokens need ceil(5000 / 16) = 313 blocks; an exact fit is admitted.
    assert kv_blocks_fit(known_tokens=5000, free_blocks=313, block_size=16)
    assert not kv_blocks_fit(known_tokens=5000, free_blocks=312, block_size=16)


def test_admit_names_the_refusing_gate():
    base = {
        "num_running": 10,
        "max_num_seqs": 256,
        "budget_left_tokens": 1948,
        "known_tokens": 5000,
        "free_blocks": 1000,
    }
    assert admit(**base).admitted
    assert admit(**base).refused_by is None
    full = admit(**{**base, "num_running": 256})
    assert full.refused_by is Gate.SLOT and "256 sequence slots" in full.reason
    spent = admit(**{**base, "budget_left_tokens": 0})
    assert spent.refused_by is Gate.BUDGET
    short = admit(**{**base, "free_blocks": 100})
    assert short.refused_by is Gate.KV and "need 313 KV blocks but only 100 are free" in short.reason


@given(
    num_running=st.integers(0, 300),
    max_num_seqs=st.integers(1, 300),
    budget_left=st.integers(0, 4096),
    known=st.integers(1, 100_000),
    free=st.integers(0, 10_000),
)
def test_admitted_exactly_when_all_three_gates_pass(num_running, max_num_seqs, budget_left, known, free):
    decision = admit(
        num_running=num_running,
        max_num_seqs=max_num_seqs,
        budget_left_tokens=budget_left,
        known_tokens=known,
        free_blocks=free,
    )
    all_pass = (
        seq_slot_free(num_running=num_running, max_num_seqs=max_num_seqs)
        and budget_has_room(budget_left_tokens=budget_left)
        and kv_blocks_fit(known_tokens=known, free_blocks=free, block_size=16)
    )
    assert decision.admitted == all_pass
    assert (decision.refused_by is None) == all_pass


def test_gate_vocabulary_keys_and_labels():
    # The keys are the strings tables store (metrics.step_gates' ``gate`` column), in report order.
    assert [g.value for g in Gate] == ["slot", "budget", "kv", "none"]
    assert Gate("kv") is Gate.KV and Gate.KV.key == "kv"
    assert Gate.SLOT.label == "sequence slot (max_num_seqs)"
    assert Gate.BUDGET.label == "token budget"
    assert Gate.KV.label == "KV memory"
    assert Gate.NONE.label == "nobody waiting"


def test_gates_refuse_counts_that_are_not_ints_in_range_and_name_them():
    # NumPy ints are counts too, and give the same answers as Python ints.
    assert seq_slot_free(num_running=np.int64(255), max_num_seqs=np.int32(256))
    assert kv_blocks_fit(known_tokens=np.int64(5000), free_blocks=np.int64(313), block_size=16)
    assert not budget_has_room(budget_left_tokens=np.int64(0))
    refused = [
        (
            lambda: seq_slot_free(num_running=-1, max_num_seqs=8),
            r"^num_running must be an int >= 0 \[requests\], got -1$",
        ),
        (lambda: seq_slot_free(num_running=1, max_num_seqs=0), "max_num_seqs must be an int >= 1"),
        (lambda: seq_slot_free(num_running=1.0, max_num_seqs=8), "num_running must be an int >= 0"),
        (lambda: budget_has_room(budget_left_tokens=-1), "budget_left_tokens must be an int >= 0"),
        (lambda: budget_has_room(budget_left_tokens=True), "budget_left_tokens .* got True"),
        (lambda: kv_blocks_fit(known_tokens="3", free_blocks=1, block_size=16), "known_tokens .* got '3'"),
        (lambda: kv_blocks_fit(known_tokens=3, free_blocks=None, block_size=16), "free_blocks .* got None"),
        (lambda: kv_blocks_fit(known_tokens=3, free_blocks=1, block_size=0), "block_size must be an int >= 1"),
        (lambda: kv_blocks_fit(known_tokens=3, free_blocks=1, block_size=16, held_hit_blocks=-1), "held_hit_blocks"),
        (lambda: kv_blocks_fit(known_tokens=3, free_blocks=1, block_size=16, reserve_blocks=float("nan")), "reserve"),
    ]
    for call, message in refused:
        with pytest.raises(ParameterError, match=message):
            call()


def test_admit_checks_every_count_before_any_gate():
    # The budget gate would refuse first (0 tokens left), but a negative block count is an
    # error, not a refusal: admit checks all six counts first.
    with pytest.raises(ParameterError, match=r"^free_blocks must be an int >= 0 \[blocks\], got -5$"):
        admit(num_running=1, max_num_seqs=8, budget_left_tokens=0, known_tokens=50, free_blocks=-5)
    # 50 tokens in blocks of 16 need ceil(50 / 16) = 4 blocks: 4 of 4 free fit exactly.
    assert admit(num_running=1, max_num_seqs=8, budget_left_tokens=100, known_tokens=50, free_blocks=4).admitted
    assert (
        admit(num_running=1, max_num_seqs=8, budget_left_tokens=100, known_tokens=50, free_blocks=3).refused_by
        is Gate.KV
    )
