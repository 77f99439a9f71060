"""The shared argument checks (budgetlab._checks) every module validates with."""

from __future__ import annotations

import math

import numpy as np
import pytest

from budgetlab import ConfigError, ParameterError
from budgetlab._checks import (
    FAST_INT_TYPES,
    PLAIN_ERRORS,
    finite_number,
    flag,
    fraction_in,
    grid_axis,
    int_at_least,
    is_int,
    is_number,
    number_array,
    number_in,
    positive_factors,
    positive_rate,
    random_seed,
    whole_array,
)


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


def test_type_error_separates_the_wrong_type_from_a_bad_value():
    with pytest.raises(TypeError, match=r"^n must be an int >= 1, got 2.5$"):
        int_at_least("n", 2.5, **PLAIN_ERRORS)
    with pytest.raises(ValueError, match=r"^n must be an int >= 1, got 0$") as info:
        int_at_least("n", 0, **PLAIN_ERRORS)
    assert type(info.value) is ValueError
    with pytest.raises(TypeError, match="x must be w"):
        number_in("x", "1", what="w", type_error=TypeError)
    with pytest.raises(ParameterError):  # without type_error the one class for both
        number_in("x", "1", what="w")


def test_seed_rate_and_finite_number():
    assert random_seed("seed", 0) == 0 and random_seed("seed", np.int64(7)) == 7
    with pytest.raises(ParameterError, match=r"^seed must be an int >= 0, got -1$"):
        random_seed("seed", -1)
    assert positive_rate("rate_per_s", 2) == 2.0
    with pytest.raises(ParameterError, match=r"^rate_per_s must be a finite number of requests per second > 0, got 0$"):
        positive_rate("rate_per_s", 0)
    assert finite_number("cv", 0, positive=False) == 0.0
    with pytest.raises(ValueError, match=r"^rate must be a finite number > 0 \[1/s\], got 0.0$"):
        finite_number("rate", 0.0, positive=True, unit="1/s", **PLAIN_ERRORS)
    with pytest.raises(TypeError, match=r"^cv must be a finite number >= 0, got None$"):
        finite_number("cv", None, positive=False, **PLAIN_ERRORS)


def test_fraction_in_is_an_open_interval():
    assert fraction_in("tol", 0.02) == 0.02
    for bad in (0.0, 1.0, math.nan, "0.1"):
        with pytest.raises(ParameterError, match=r"^tol must be a number in \(0, 1\)"):
            fraction_in("tol", bad)
    assert fraction_in("x", 1.5, low=1.0, high=2.0) == 1.5


def test_positive_factors():
    assert positive_factors("f", [0.5, 1]) == (0.5, 1.0)
    for bad in ((), "12", 3.0, None):
        with pytest.raises(ParameterError, match="f must be a non-empty sequence"):
            positive_factors("f", bad)
    with pytest.raises(ParameterError, match=r"^f\[1\] must be a finite number > 0, got -1.0$"):
        positive_factors("f", (1.0, -1.0))


def test_grid_axis_scalars_repeats_and_checks():
    assert grid_axis("budgets", 512, int_at_least) == (512,)
    assert grid_axis("hardware", "h100-sxm", lambda name, v: v) == ("h100-sxm",)  # a string is one value
    assert grid_axis("budgets", [512, np.int64(1024)], int_at_least) == (512, 1024)
    with pytest.raises(ParameterError, match=r"^budgets is empty"):
        grid_axis("budgets", [], int_at_least)
    with pytest.raises(ParameterError, match="budgets repeats 512; each grid value once"):
        grid_axis("budgets", [512, 1024, 512], int_at_least)
    with pytest.raises(ParameterError, match=r"^budgets\[1\] must be an int >= 1, got 0$"):
        grid_axis("budgets", [512, 0], int_at_least)


def test_fast_int_types_are_ints_and_exclude_bool():
    assert all(is_int(t(3)) for t in FAST_INT_TYPES)
    assert bool not in FAST_INT_TYPES and float not in FAST_INT_TYPES and np.bool_ not in FAST_INT_TYPES


def test_number_array_checks_types_only():
    np.testing.assert_array_equal(number_array("t", [1, 2.5, np.int64(3)], what="w"), [1.0, 2.5, 3.0])
    assert np.isnan(number_array("t", math.nan, what="w"))  # bounds are the caller's
    for bad in (True, "3", None, [0.1, None], [0.1, "x"], np.array([True, False]), [[1], [2, 3]], [2.5, True]):
        with pytest.raises(ParameterError, match=r"^t must be w, got "):
            number_array("t", bad, what="w")
    with pytest.raises(TypeError, match=r"^t must be w, got '3'$"):
        number_array("t", "3", what="w", **PLAIN_ERRORS)


def test_whole_array_gives_int64_and_refuses_fractions_and_non_numbers():
    out = whole_array("b", [512, 2048.0, np.uint8(7)], 1, what="whole numbers >= 1")
    assert out.dtype == np.int64 and out.tolist() == [512, 2048, 7]
    assert whole_array("b", 0, 0, what="w").ndim == 0
    assert whole_array("b", 2**62, 1, what="w") == 2**62  # exact, not through a float
    np.testing.assert_array_equal(whole_array("b", [[1, 2], [3, 4]], 1, what="w"), [[1, 2], [3, 4]])
    # NumPy alone reads [True, 3] as the ints [1, 3]; a bool is not a count.
    for bad in (0, [1, 0], 2.5, math.nan, math.inf, -math.inf, True, "3", None, [1, None], 1e30, [True, 3]):
        with pytest.raises(ParameterError, match=r"^b must be whole numbers >= 1, got "):
            whole_array("b", bad, 1, what="whole numbers >= 1")
    with pytest.raises(TypeError, match="got None"):
        whole_array("b", None, 1, what="w", **PLAIN_ERRORS)
    with pytest.raises(ValueError, match=r"got 2\.5") as info:
        whole_array("b", 2.5, 1, what="w", **PLAIN_ERRORS)
    assert type(info.value) is ValueError
