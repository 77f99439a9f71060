"""Latency SLOs: the limits a replica must meet, and which of them a simulation broke.

An :class:`SLO` states "this summary key at most" for any of :data:`SLO_METRICS` (TTFT, ITL,
TPOT and end-to-end percentiles, the longest gap), in seconds; :meth:`SLO.violations` lists the
:class:`Violation` s of a :meth:`~budgetlab.simulator.SimResult.summary` dict or a sweep row,
worst first, and :meth:`SLO.check` checks every row of a sweep table against every limit.
``str(slo)`` is the SLO in words (``"TTFT p90 ≤ 800 ms and ITL p99 ≤ 40 ms"``), the one way
reports print it. :func:`budgetlab.capacity` searches for the highest load at which an SLO holds.
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from budgetlab._checks import number_in
from budgetlab.errors import ParameterError
from budgetlab.text import fmt_latency, metric_label

__all__ = ["SLO", "Violation", "SLO_METRICS", "ITL_METRICS", "PLAUSIBLE_LIMIT_S", "SLOUnitWarning", "check_slo"]

SLO_METRICS: tuple[str, ...] = (
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p90_s",
    "itl_p99_s",
    "max_itl_s",
    "tpot_mean_s",
    "tpot_p90_s",
    "e2e_p50_s",
    "e2e_p99_s",
)
"""Summary keys an :class:`SLO` can limit (each a latency in seconds, "at most")."""

ITL_METRICS = ("itl_p50_s", "itl_p90_s", "itl_p99_s", "max_itl_s")
"""The inter-token limits among :data:`SLO_METRICS`: the ones a step time must respect."""

_IMPLAUSIBLE_S = 1000.0  # a limit this large was meant in milliseconds: refused

PLAUSIBLE_LIMIT_S: dict[str, float] = {"ttft": 60.0, "itl": 10.0, "max_itl": 10.0, "tpot": 10.0, "e2e": 600.0}
"""Above these limits [s] (by metric family: ``ttft_*``, ``itl_*``, ``max_itl_s``, ``tpot_*``,
``e2e_*``) no SLO means what it says: :class:`SLO` warns (:class:`SLOUnitWarning`) that the
value was probably typed in milliseconds."""


class SLOUnitWarning(UserWarning):
    """An SLO limit so large it was probably meant in milliseconds (``ttft_p90_s=800``)."""


def _family(metric: str) -> str:
    return "max_itl" if metric == "max_itl_s" else metric.split("_", 1)[0]


@dataclass(frozen=True)
class Violation:
    """One SLO limit a simulation broke.

    Attributes
    ----------
    metric : str
        Summary key (``"itl_p99_s"``).
    value_s : float
        What the simulation measured [s].
    limit_s : float
        The SLO's limit [s].
    """

    metric: str
    value_s: float
    limit_s: float

    @property
    def ratio(self) -> float:
        """``value_s / limit_s`` [-]: how far over the limit (1.3 = 30 % over)."""
        return self.value_s / self.limit_s

    def __str__(self) -> str:
        return f"{self.metric} = {fmt_latency(self.value_s)} > {fmt_latency(self.limit_s)}"


@dataclass(frozen=True, kw_only=True)
class SLO:
    """Latency limits a replica must meet: each set field is "this summary key at most".

    Parameters
    ----------
    ttft_p50_s, ttft_p90_s, ttft_p99_s : float or None
        Time-to-first-token percentiles [s].
    itl_p50_s, itl_p90_s, itl_p99_s : float or None
        Inter-token latency percentiles, per token as users see it [s].
    max_itl_s : float or None
        Longest gap between two tokens of any request [s].
    tpot_mean_s, tpot_p90_s : float or None
        Time per output token, per request as ``vllm bench serve`` reports it (the request's
        mean gap; mean and 90th percentile over the requests) [s].
    e2e_p50_s, e2e_p99_s : float or None
        End-to-end latency percentiles [s].

    A metric left ``None`` is not limited; at least one must be set. Limits are seconds
    (40 ms is ``0.040``). A summary value that is NaN (no inter-token gap exists when every
    request generates one token) meets its limit.

    Raises
    ------
    ParameterError
        No limit set, or a limit that is not a finite number of seconds > 0 (a value of
        1,000 or more is taken for milliseconds by mistake).

    Warns
    -----
    SLOUnitWarning
        A limit above :data:`PLAUSIBLE_LIMIT_S` for its metric (a TTFT over 60 s, an ITL or
        TPOT over 10 s, an end-to-end latency over 10 minutes): probably milliseconds typed as
        seconds; the message gives the value in seconds.

    Examples
    --------
    >>> slo = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)
    >>> slo.holds({"ttft_p90_s": 0.5, "itl_p99_s": 0.045})
    False
    >>> [str(v) for v in slo.violations({"ttft_p90_s": 0.5, "itl_p99_s": 0.045})]
    ['itl_p99_s = 45 ms > 40 ms']
    >>> str(slo)
    'TTFT p90 ≤ 800 ms and ITL p99 ≤ 40 ms'
    """

    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    itl_p99_s: float | None = None
    max_itl_s: float | None = None
    tpot_mean_s: float | None = None
    tpot_p90_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None

    def __post_init__(self) -> None:
        for metric in SLO_METRICS:
            value = getattr(self, metric)
            if value is None:
                continue
            number = number_in(f"SLO {metric}", value, low=0.0, low_open=True, what="a finite number of seconds > 0")
            if number >= _IMPLAUSIBLE_S:
                raise ParameterError(
                    f"SLO {metric} = {value!r} s is over {_IMPLAUSIBLE_S:g} s; limits are in "
                    f"seconds, so for {value!r} ms write {number / 1e3:g}"
                )
            plausible = PLAUSIBLE_LIMIT_S[_family(metric)]
            if number > plausible:
                warnings.warn(
                    f"SLO {metric} = {value!r} s is over {plausible:g} s, which no {metric_label(metric)} "
                    f"limit means; limits are in seconds: if you meant {value!r} ms, write {metric}={number / 1e3:g}",
                    SLOUnitWarning,
                    stacklevel=3,
                )
            object.__setattr__(self, metric, number)
        if not self.limits:
            raise ParameterError(
                "an SLO needs at least one limit, e.g. SLO(ttft_p90_s=0.8, itl_p99_s=0.040); "
                f"the metrics are {', '.join(SLO_METRICS)}"
            )

    @classmethod
    def from_dict(cls, limits: Mapping[str, object]) -> SLO:
        """An SLO from a mapping such as a notebook's YAML parameters.

        Keys are :data:`SLO_METRICS`; a key spelled in milliseconds (``itl_p99_ms``) or
        misspelt is refused with the right name.

        Raises
        ------
        ParameterError
            An unknown key (with the closest metric), a non-mapping, or a bad value.
        """
        if not isinstance(limits, Mapping):
            raise ParameterError(f"SLO.from_dict needs a mapping of metric -> seconds, got {type(limits).__name__}")
        for key in limits:
            if key in SLO_METRICS:
                continue
            if isinstance(key, str) and key.endswith("_ms") and key[:-3] + "_s" in SLO_METRICS:
                raise ParameterError(
                    f"SLO limits are in seconds: write {key[:-3] + '_s'!r}: {limits[key]!r} / 1000 instead of {key!r}"
                )
            close = difflib.get_close_matches(str(key), SLO_METRICS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ParameterError(f"unknown SLO metric {key!r}.{hint} The metrics are {', '.join(SLO_METRICS)}")
        return cls(**{str(key): value for key, value in limits.items()})  # type: ignore[arg-type]

    @property
    def limits(self) -> dict[str, float]:
        """The limits that are set, metric -> seconds, in :data:`SLO_METRICS` order."""
        return {m: getattr(self, m) for m in SLO_METRICS if getattr(self, m) is not None}

    @property
    def itl_target_s(self) -> float | None:
        """The tightest inter-token limit (ITL percentiles and ``max_itl_s``) [s], if any:
        the step time the token budget must respect."""
        values = [getattr(self, m) for m in ITL_METRICS if getattr(self, m) is not None]
        return min(values) if values else None

    @property
    def itl_target_metric(self) -> str | None:
        """Which metric :attr:`itl_target_s` comes from."""
        target = self.itl_target_s
        if target is None:
            return None
        return next(m for m in ITL_METRICS if getattr(self, m) == target)

    def violations(self, summary: Mapping[str, object]) -> list[Violation]:
        """The limits ``summary`` breaks, worst (largest value/limit) first.

        Raises
        ------
        KeyError
            When the summary lacks a limited metric.
        """
        found = []
        for metric, limit in self.limits.items():
            if metric not in summary:
                raise KeyError(f"summary has no {metric!r} to check against the SLO (keys: {', '.join(summary)})")
            value = float(summary[metric])  # type: ignore[arg-type]
            if math.isnan(value):
                continue
            if value > limit:
                found.append(Violation(metric, value, limit))
        return sorted(found, key=lambda v: -v.ratio)

    def holds(self, summary: Mapping[str, object]) -> bool:
        """Whether every limit is met by ``summary`` (a :meth:`SimResult.summary` dict or a
        sweep row)."""
        return not self.violations(summary)

    def check(self, table: pd.DataFrame) -> pd.DataFrame:
        """Every row of a sweep table against every limit: one row per table row × limit.

        Parameters
        ----------
        table : pandas.DataFrame
            :func:`~budgetlab.experiments.sweep.sweep` rows: ``rate_per_s``,
            ``max_num_batched_tokens``, ``max_num_seqs`` and every limited metric.

        Returns
        -------
        pandas.DataFrame
            In table order, limits in :attr:`limits` order: ``rate_per_s`` [1/s],
            ``max_num_batched_tokens`` [tokens], ``max_num_seqs`` [count], ``metric`` (the
            summary key), ``value_s`` (simulated) and ``limit_s`` [s], ``used_fraction``
            (value over limit [-]), ``meets`` (this limit met; a NaN value meets it) and
            ``slo_met`` (every limit of the row met).

        Examples
        --------
        With ``SLO(ttft_p90_s=0.8, itl_p99_s=0.040)`` a row with TTFT p90 0.97 s and ITL p99
        37.4 ms gives two rows: ``ttft_p90_s`` used 121 % and not met, ``itl_p99_s`` used
        93.5 % and met; ``slo_met`` is False on both.
        """
        rows = []
        for record in table.to_dict("records"):
            broken = {v.metric for v in self.violations(record)}
            for metric, limit in self.limits.items():
                value = float(record[metric])
                rows.append(
                    {
                        "rate_per_s": float(record["rate_per_s"]),
                        "max_num_batched_tokens": int(record["max_num_batched_tokens"]),
                        "max_num_seqs": int(record["max_num_seqs"]),
                        "metric": metric,
                        "value_s": value,
                        "limit_s": float(limit),
                        "used_fraction": value / float(limit),
                        "meets": metric not in broken,
                        "slo_met": not broken,
                    }
                )
        columns = [
            "rate_per_s",
            "max_num_batched_tokens",
            "max_num_seqs",
            "metric",
            "value_s",
            "limit_s",
            "used_fraction",
            "meets",
            "slo_met",
        ]
        return pd.DataFrame(rows, columns=columns)

    def __str__(self) -> str:
        """The limits in words, joined by "and": ``"TTFT p90 ≤ 800 ms and ITL p99 ≤ 40 ms"``."""
        return " and ".join(f"{metric_label(m)} ≤ {fmt_latency(v)}" for m, v in self.limits.items())


def check_slo(slo: object) -> SLO:
    """``slo`` if it is an :class:`SLO`; else :class:`~budgetlab.errors.ParameterError`."""
    if not isinstance(slo, SLO):
        raise ParameterError(f"slo must be an SLO, e.g. SLO(ttft_p90_s=0.8, itl_p99_s=0.040), got {slo!r}")
    return slo
