"""Numbers into the short strings prose, tables and error messages print: one formatter per unit.

Every value comes in in SI units (seconds, bytes, requests per second, fractions) and goes out
as a string with its unit, so no notebook, table or message does unit arithmetic, and the same
number reads the same everywhere.

The rules
---------
* **Latency** (:func:`fmt_latency`): three significant digits, in the unit that reads best:
  µs below 1 ms, ms below 1 s, s from 1 s; trailing zeros dropped, thousands separated; nothing
  finer than 1 ns (a value below half a nanosecond reads ``"0 µs"``).
  ``0.8`` → ``"800 ms"``, ``2.5`` → ``"2.5 s"``, ``0.00831`` → ``"8.31 ms"``, ``0.0332`` →
  ``"33.2 ms"``, ``1.62e-5`` → ``"16.2 µs"``. ``fmt_duration`` (alias ``fmt_ms``, ``fmt_us``)
  is the older name: it prints the same string.
* **Rate** (:func:`fmt_rate`): three significant digits, ``"34.6 req/s"``.
* **Percent** (:func:`fmt_percent`): a fraction in, ``decimals`` decimals out (1 by default),
  a space before the sign: ``0.456`` → ``"45.6 %"``; :func:`fmt_percent_change` says how far one
  value is from another in the same style.
* **Tokens and counts** (:func:`fmt_int`, :func:`fmt_tokens`, :func:`fmt_count`): whole numbers
  with thousands separators and a singular/plural noun.
* **Bytes, FLOPs and their rates** (:func:`fmt_gb`, :func:`fmt_gflop`, :func:`fmt_bandwidth`,
  :func:`fmt_flops_rate`): a fixed decimal unit (GB = 1e9 bytes, TB/s = 1e12 bytes/s) and a fixed
  number of decimals, so a column of them lines up.
* A value that is not finite prints as ``"n/a"`` (latency, rate, percent).

The number-only helpers (:func:`fmt_significant`, :func:`fmt_approx`) give the figure without a
unit.
"""

from __future__ import annotations

import html
import math
import re

__all__ = [
    "fmt_significant",
    "fmt_approx",
    "fmt_latency",
    "fmt_ms",
    "fmt_us",
    "fmt_duration",
    "fmt_rate",
    "fmt_percent",
    "fmt_percent_change",
    "fmt_int",
    "fmt_tokens",
    "fmt_count",
    "fmt_budget",
    "fmt_gb",
    "md_cell",
    "md_code",
    "md_text",
    "terminal_safe",
    "fmt_gib",
    "fmt_gflop",
    "fmt_bandwidth",
    "fmt_flops_rate",
    "metric_label",
    "NOT_AVAILABLE",
]

#: What a formatter prints for a value that is not finite (NaN, ±∞).
NOT_AVAILABLE = "n/a"

#: Significant digits of a latency or a rate.
SIGNIFICANT_DIGITS = 3


def fmt_significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> str:
    """``value`` rounded to ``digits`` significant digits, without exponent or trailing zeros.

    Thousands are separated: ``1234.5`` → ``"1,230"``; ``8.314`` → ``"8.31"``; ``2.5`` →
    ``"2.5"``; ``0.0123`` (2 digits) → ``"0.012"``; ``0`` → ``"0"``.
    """
    value = float(value)
    if not math.isfinite(value):
        return NOT_AVAILABLE
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    if value == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(value))):
        decimals -= 1  # 9.996 → 10.0: one digit moved left of the point
        rounded = round(value, decimals)
    text = f"{rounded:,.{max(decimals, 0)}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def fmt_approx(value: float, significant: int = 2) -> str:
    """A round figure for prose: ``2464`` → ``"2,500"``, ``295.3`` → ``"300"`` (no unit)."""
    return fmt_significant(value, significant)


def fmt_latency(seconds: float) -> str:
    """A latency or duration [s] as text: three significant digits in µs, ms or s.

    The one latency rule of the package (see the module docstring): µs below 1 ms, ms below
    1 s, s from 1 s, the unit chosen after rounding. ``0.8`` → ``"800 ms"``, ``2.5`` →
    ``"2.5 s"``, ``0.00831`` → ``"8.31 ms"``, ``0.04`` → ``"40 ms"``, ``15.06`` → ``"15.1 s"``,
    ``1.623e-5`` → ``"16.2 µs"``; not finite → ``"n/a"``.
    """
    seconds = float(seconds)
    if not math.isfinite(seconds):
        return NOT_AVAILABLE
    size = abs(seconds)
    if size < 0.5e-9:  # below the finest resolution shown, 1 ns (0.001 µs): a fitted 0 reads as 0
        return "0 ms" if size == 0 else "0 µs"
    # the unit is chosen on the rounded value, so 0.99996 s reads "1 s", not "1,000 ms"
    if _rounded(size) >= 1.0:
        return f"{fmt_significant(seconds)} s"
    if _rounded(size * 1e3) < 1.0:
        return f"{fmt_significant(seconds * 1e6)} µs"
    return f"{fmt_significant(seconds * 1e3)} ms"


def _rounded(value: float) -> float:
    return float(fmt_significant(value).replace(",", ""))


def fmt_duration(seconds: float, digits: int | None = None) -> str:
    """Older name of :func:`fmt_latency` (also ``fmt_ms`` and ``fmt_us``): the same string.

    ``digits`` is accepted so old calls such as ``fmt_ms(x, 2)`` keep working, and ignored:
    every latency prints with the one rule.
    """
    return fmt_latency(seconds)


fmt_ms = fmt_duration
fmt_us = fmt_duration


def fmt_rate(rate_per_s: float) -> str:
    """A request rate [1/s]: ``34.556`` → ``"34.6 req/s"`` (three significant digits)."""
    text = fmt_significant(rate_per_s, SIGNIFICANT_DIGITS)
    return text if text == NOT_AVAILABLE else f"{text} req/s"


def fmt_percent(fraction: float, decimals: int = 1) -> str:
    """A fraction [-] as a percentage: ``0.456`` → ``"45.6 %"``; ``decimals=0`` → ``"46 %"``."""
    fraction = float(fraction)
    if not math.isfinite(fraction):
        return NOT_AVAILABLE
    return f"{fraction * 100:,.{decimals}f} %"


def fmt_percent_change(value: float, reference: float) -> str:
    """How far ``value`` is above or below ``reference``: ``(37.2, 35.6)`` → ``"4.5 % more"``."""
    value, reference = float(value), float(reference)
    if not (math.isfinite(value) and math.isfinite(reference)) or reference == 0:
        return NOT_AVAILABLE
    change = value / reference - 1.0
    if abs(change) < 0.0005:
        return "the same"
    return fmt_percent(abs(change)) + (" more" if change > 0 else " less")


def fmt_int(value: float) -> str:
    """``2048`` → ``"2,048"`` (rounded to the nearest whole number)."""
    return f"{round(float(value)):,d}"


def fmt_tokens(value: float) -> str:
    """``2048`` → ``"2,048 tokens"``; ``1`` → ``"1 token"``."""
    text = fmt_int(value)
    return f"{text} {'token' if text == '1' else 'tokens'}"


def fmt_count(count: int, noun: str, plural: str | None = None) -> str:
    """``(3, "step")`` → ``"3 steps"``; ``(1, "step")`` → ``"1 step"``."""
    count = int(count)
    return f"{count:,d} {noun if count == 1 else (plural or noun + 's')}"


def fmt_budget(budget_tokens: int | None) -> str:
    """``2048`` → ``"budget 2,048"``; ``None`` → ``"no budget"`` (labels for scenarios)."""
    return "no budget" if budget_tokens is None else f"budget {fmt_int(budget_tokens)}"


def fmt_gb(num_bytes: float, digits: int = 1) -> str:
    """``16.06e9`` → ``"16.1 GB"`` (GB = 1e9 bytes; ``digits`` decimals)."""
    return f"{float(num_bytes) / 1e9:,.{digits}f} GB"


def fmt_gib(num_bytes: float, digits: int = 2) -> str:
    """``16.06e9`` → ``"14.96 GiB"`` (GiB = 2**30 bytes, the unit vLLM logs memory in)."""
    return f"{float(num_bytes) / 2**30:,.{digits}f} GiB"


#: Markdown's punctuation, less ``>``: :func:`md_text` HTML-escapes it to ``&gt;`` after this
#: escape, and an entity never starts a block quote (``\\&gt;`` would show as ``&gt;``).
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+!|~-])")
#: Everything Markdown (or a browser) may read as the end of a line.
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x85\u2028\u2029]")


def md_text(text: object) -> str:
    """``text`` shown verbatim inside Markdown prose: Markdown punctuation backslash-escaped,
    then HTML-escaped, so a file name such as ``<img src=x onerror=...>.csv`` is text, not HTML.

    The one place a user's string (a trace or measurements path, a workload label) meets a
    notebook's Markdown prose (:func:`md_cell` is its twin for table cells). Line breaks become
    spaces: a paragraph cannot be ended from inside. The Markdown escape comes first so that the
    ``#`` of an entity the HTML escape writes (``'`` → ``&#x27;``) is not escaped, which would
    show the entity's text instead of the apostrophe.
    """
    escaped = _MARKDOWN_PUNCTUATION.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(text)))
    return html.escape(escaped, quote=True)


_MARKDOWN_CELL_ACTIVE = re.compile(r"([\\`*_\[\]|~])")


def md_cell(text: object) -> str:
    """``text`` as one cell of a Markdown table, shown as typed and never HTML or a link.

    HTML-escaped (``<img onerror=...>`` is text), line breaks made spaces (a row stays one
    row), and backslash-escaped where Markdown would act: ``[`` ``]`` (links and images),
    backticks (code), ``*`` ``_`` ``~`` (emphasis), ``|`` (a new cell) and ``\\`` itself.
    Parentheses, dashes and dots stay as they are, so ``"Budget (512 tokens)"`` reads the same
    in the Markdown source. ``md_cell("[x](javascript:alert(1))")`` →
    ``"\\[x\\](javascript:alert(1))"``, which renders as that text.
    """
    flat = _LINE_BREAKS.sub(" ", str(text))
    return _MARKDOWN_CELL_ACTIVE.sub(r"\\\1", html.escape(flat, quote=True))


def md_code(text: object) -> str:
    """``text`` as a Markdown code span that no backtick inside it can close (and no HTML in
    it can escape from: code spans are shown as text)."""
    raw = _LINE_BREAKS.sub(" ", str(text))
    longest = max((len(run) for run in re.findall(r"`+", raw)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {raw} {fence}"


def fmt_gflop(flops: float, digits: int = 1) -> str:
    """``16.06e9`` → ``"16.1 GFLOP"`` (``digits`` decimals)."""
    return f"{float(flops) / 1e9:,.{digits}f} GFLOP"


def fmt_bandwidth(bytes_per_s: float, digits: int = 2) -> str:
    """``3.35e12`` → ``"3.35 TB/s"`` (TB = 1e12 bytes; ``digits`` decimals)."""
    return f"{float(bytes_per_s) / 1e12:,.{digits}f} TB/s"


def fmt_flops_rate(flops_per_s: float, digits: int = 1) -> str:
    """``989.4e12`` → ``"989.4 TFLOP/s"`` (``digits`` decimals)."""
    return f"{float(flops_per_s) / 1e12:,.{digits}f} TFLOP/s"


def metric_label(metric: str) -> str:
    """A summary key as people say it: ``"ttft_p90_s"`` → ``"TTFT p90"``; ``"max_itl_s"`` →
    ``"longest gap"``."""
    if metric == "max_itl_s":
        return "longest gap"
    parts = metric.removesuffix("_s").split("_")
    return " ".join([parts[0].upper(), *parts[1:]])


def terminal_safe(text: object) -> str:
    """``text`` safe to print on a terminal: every non-printable character escaped.

    The command lines (``python -m budgetlab``, ``python -m budgetlab.reports``) print every
    name, path and message through here, so a file named ``"\\x1b]0;owned\\x07.yaml"`` prints
    as its escapes and sends no sequence to the terminal.

    Parameters
    ----------
    text : object
        Anything; its ``str`` is escaped.

    Returns
    -------
    str
        The text with each control or format character (``\\x1b``, ``\\r``, ``\\n``,
        ``\\u202e`` ...) written as its Python escape, everything printable unchanged.

    Examples
    --------
    >>> terminal_safe("trace\\x1b[2J.csv")
    'trace\\\\x1b[2J.csv'
    """
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))
