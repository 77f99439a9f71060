"""The three gates and which one refuses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from budgetlab import Gate, admit, budget_has_room, kv_blocks_fit, seq_slot_free


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
