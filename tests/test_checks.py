"""The shared argument checks (budgetlab._checks) every module validates with."""

from __future__ import annotations

import math

import numpy as np
import pytest

from budgetlab import ConfigError, ParameterError
from budgetlab._checks import flag, int_at_least, is_int, is_number, number_in


def test_ints_and_numbers_exclude_bools_and_include_numpy_scalars():
    assert is_int(3) and is_int(np.int64(3)) and is_int(np.uint8(3))
    assert not is_int(True) and not is_int(3.0) and not is_int("3")
    assert is_number(2.5) and is_number(np.float32(2.5)) and is_number(np.int64(2)) and is_number(math.nan)
    assert not is_number(False) and not is_number("2.5") and not is_number(None)


def test_int_at_least_returns_a_plain_int_and_names_the_value():
    assert int_at_least("n", np.int64(4)) == 4 and type(int_at_least("n", np.int64(4))) is int
    assert int_at_least("seed", 0, 0) == 0
    with pytest.raises(ParameterError, match=r"^n must be an int >= 1, got 0$"):
        int_at_least("n", 0)
    with pytest.raises(ConfigError, match=r"^block_size must be a positive int, got True$"):
        int_at_least("block_size", True, what="a positive int", error=ConfigError)


@pytest.mark.parametrize(
    ("value", "bounds", "ok"),
    [
        (0.0, {"low": 0.0}, True),
        (0.0, {"low": 0.0, "low_open": True}, False),
        (1.0, {"high": 1.0}, True),
        (1.0, {"high": 1.0, "high_open": True}, False),
        (math.inf, {"low": 0.0}, False),  # finite always
        (math.nan, {}, False),
        ("0.5", {}, False),
        (True, {}, False),
        (np.float64(0.5), {"low": 0.0, "high": 1.0}, True),
    ],
)
def test_number_in_bounds(value, bounds, ok):
    if ok:
        assert number_in("x", value, what="w", **bounds) == float(value)
    else:
        with pytest.raises(ParameterError, match=r"^x must be w, got .*; hint$"):
            number_in("x", value, what="w", hint="; hint", **bounds)


def test_flag_accepts_numpy_bools_only():
    assert flag("on", np.True_) is True and flag("on", False) is False
    with pytest.raises(ParameterError, match="on must be True or False, got 1"):
        flag("on", 1)
