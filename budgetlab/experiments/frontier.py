"""The TTFT-versus-ITL trade-off across budgets at one load, with the SLO's verdict per budget."""

from __future__ import annotations

import pandas as pd

from budgetlab.experiments.slo import SLO, check_slo

__all__ = ["budget_frontier"]


def budget_frontier(
    table: pd.DataFrame,
    *,
    slo: SLO,
    ttft_metric: str | None = None,
    itl_metric: str | None = None,
) -> pd.DataFrame:
    """The TTFT-versus-ITL trade-off across budgets at one load: one row per budget.

    Smaller budgets give shorter steps (lower ITL) but spread each prompt over more steps
    (higher TTFT); the SLO picks the budgets that meet both.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`~budgetlab.experiments.sweep.sweep` over budgets at a single offered load (one
        row per budget).
    slo : SLO
        ``meets`` says whether each budget meets all of it (:meth:`SLO.holds`).
    ttft_metric, itl_metric : str, optional
        Summary keys reported as ``ttft_s`` and ``itl_s``; default the SLO's first TTFT limit
        (else ``"ttft_p90_s"``) and its tightest ITL limit (:attr:`SLO.itl_target_metric`,
        else ``"itl_p99_s"``).

    Returns
    -------
    pandas.DataFrame
        Budgets increasing: ``max_num_batched_tokens`` [tokens], ``rate_per_s`` [1/s],
        ``max_num_seqs`` [count], ``ttft_s`` and ``itl_s`` (the two metrics [s]),
        ``ttft_metric`` and ``itl_metric`` (their summary keys) and ``meets``.

    Examples
    --------
    With ``SLO(ttft_p90_s=0.8, itl_p99_s=0.040)``, budgets 2,048 (TTFT p90 0.3 s, ITL p99
    33 ms) and 512 (1.2 s, 9 ms) give two rows, 512 first: it breaks the TTFT limit
    (``meets`` False), 2,048 meets both.
    """
    check_slo(slo)
    if ttft_metric is None:
        ttft_metric = next((m for m in slo.limits if m.startswith("ttft_")), "ttft_p90_s")
    if itl_metric is None:
        itl_metric = slo.itl_target_metric if slo.itl_target_metric is not None else "itl_p99_s"
    ordered = table.sort_values("max_num_batched_tokens", kind="stable")
    return pd.DataFrame(
        {
            "max_num_batched_tokens": ordered["max_num_batched_tokens"].astype(int).to_numpy(),
            "rate_per_s": ordered["rate_per_s"].to_numpy(dtype=float),
            "max_num_seqs": ordered["max_num_seqs"].astype(int).to_numpy(),
            "ttft_s": ordered[ttft_metric].to_numpy(dtype=float),
            "itl_s": ordered[itl_metric].to_numpy(dtype=float),
            "ttft_metric": ttft_metric,
            "itl_metric": itl_metric,
            "meets": [slo.holds(row) for row in ordered.to_dict("records")],
        }
    )
