"""One formatter per unit: the same number reads the same in prose, tables and messages."""

from __future__ import annotations

import math

import pytest

from budgetlab import charts, text


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        # the four values LAYOUT §3.4 found printed four ways: now one way
        (0.8, "800 ms"),
        (2.5, "2.5 s"),
        (0.00831, "8.31 ms"),
        (0.0332433, "33.2 ms"),
        (0.004794, "4.79 ms"),
        (0.04, "40 ms"),
        (0.036, "36 ms"),
        (15.06, "15.1 s"),
        (1234.5, "1,230 s"),
        (1.6232e-5, "16.2 µs"),
        (0.99996, "1 s"),  # the unit follows the rounded value
        (0.0009996, "1 ms"),
        (0.0, "0 ms"),
        (1.46e-21, "0 µs"),  # a fitted overhead at its bound of 0
        (2.5e-9, "0.0025 µs"),
        (-0.05, "-50 ms"),
        (math.nan, "n/a"),
        (math.inf, "n/a"),
    ],
)
def test_one_latency_rule(seconds, shown):
    assert text.fmt_latency(seconds) == shown
    # the older names print the same string, whatever digits an old call passes
    assert text.fmt_ms(seconds) == text.fmt_us(seconds) == text.fmt_duration(seconds, 2) == shown


def test_charts_reexports_the_same_formatters():
    for name in (
        # seconds
        "fmt_latency",
        "fmt_ms",
        "fmt_us",
        "fmt_duration",
        # per second
        "fmt_rate",
        "fmt_flops_rate",
        "fmt_bandwidth",
        # percent
        "fmt_percent",
        "fmt_percent_change",
        # counts
        "fmt_int",
        "fmt_count",
        "fmt_tokens",
        "fmt_budget",
        # sizes, work and the rest
        "fmt_gb",
        "fmt_gflop",
        "fmt_approx",
        "metric_label",
    ):
        assert getattr(charts, name) is getattr(text, name), name


def test_significant_digits():
    assert text.fmt_significant(1234.5) == "1,230"
    assert text.fmt_significant(8.314) == "8.31"
    assert text.fmt_significant(9.996) == "10"  # rounding carries into the next digit
    assert text.fmt_significant(0.0123, 2) == "0.012"
    assert text.fmt_significant(123456) == "123,000"
    assert text.fmt_significant(0) == "0" and text.fmt_significant(math.nan) == "n/a"
    with pytest.raises(ValueError, match="digits"):
        text.fmt_significant(1.0, 0)


@pytest.mark.parametrize(
    ("value", "shown"), [(2464, "2,500"), (295.34, "300"), (1024, "1,000"), (4.79, "4.8"), (0, "0")]
)
def test_fmt_approx(value, shown):
    assert text.fmt_approx(value) == shown


def test_rate_and_percent():
    assert text.fmt_rate(34.5566) == "34.6 req/s"
    assert text.fmt_rate(1234.5) == "1,230 req/s" and text.fmt_rate(math.nan) == "n/a"
    assert text.fmt_percent(0.456) == "45.6 %" and text.fmt_percent(0.456, 0) == "46 %"
    assert text.fmt_percent(math.inf) == "n/a"
    assert text.fmt_percent_change(37.2, 35.6) == "4.5 % more"
    assert text.fmt_percent_change(11.07, 15.64) == "29.2 % less"
    assert text.fmt_percent_change(1.0, 1.0) == "the same"
    assert text.fmt_percent_change(1.0, 0.0) == "n/a"


def test_tokens_counts_and_bytes():
    assert text.fmt_int(1948.4) == "1,948"
    assert text.fmt_tokens(2048) == "2,048 tokens" and text.fmt_tokens(1) == "1 token"
    assert text.fmt_count(1, "step") == "1 step" and text.fmt_count(3, "step") == "3 steps"
    assert text.fmt_count(2, "query", "queries") == "2 queries"
    assert text.fmt_budget(2048) == "budget 2,048" and text.fmt_budget(None) == "no budget"
    assert text.fmt_gb(16.06e9) == "16.1 GB" and text.fmt_gb(0.3712e9, 2) == "0.37 GB"
    assert text.fmt_gflop(16.06e9) == "16.1 GFLOP"
    assert text.fmt_bandwidth(3.35e12) == "3.35 TB/s"
    assert text.fmt_flops_rate(989.4e12) == "989.4 TFLOP/s"


def test_metric_label():
    assert text.metric_label("ttft_p90_s") == "TTFT p90"
    assert text.metric_label("itl_p99_s") == "ITL p99"
    assert text.metric_label("max_itl_s") == "longest gap"
