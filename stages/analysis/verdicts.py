"""One verdict rule for every claim of the paper, and the intervals it reads (docs/verdicts.md).

An **estimate** is ``{"value", "low", "high", "n", "k", "configs", "needs"}``: the statistic, its 95%
interval, the number of runs (or pairs of cells) it rests on, the count of successes for a share,
the number of configurations (task, level, model) and, when it cannot be computed, ``needs``: what
is missing ("not measurable (needs ...)"), with ``value`` ``None``.

Intervals:

* a **share** (precursor rate, top-down rate, a concordance): the exact Clopper-Pearson interval of
  ``k`` successes in ``n`` decided runs (``scipy.stats.binomtest``), widened to contain the
  hierarchical bootstrap interval over configurations and seeds (:mod:`stages.analysis.bootstrap`)
  when more than one configuration contributes, so it carries the spread between tasks as well as
  the binomial noise. It never collapses to a point: 3/3 gives [29%, 100%];
* a **magnitude** (a collapse floor) or a **median lead**: the hierarchical bootstrap percentile
  interval of the median over runs.

Verdicts (one of :data:`VERDICTS`):

* a **point claim** (the paper reports a value ``p``): ``consistent`` when ``p`` lies inside the
  interval and the interval is narrow enough (width at most :data:`SHARE_WIDTH` for a share, at most
  :data:`MAGNITUDE_WIDTH` x ``|p|`` for a magnitude); ``not reproduced`` when ``p`` lies outside;
  ``inconclusive`` when ``p`` lies inside an interval too wide;
* a **one-sided claim** (the paper reports ``> b`` or ``< b``: a lag, a rho above 0.92):
  ``consistent`` when the whole interval lies on the claimed side of ``b``; ``not reproduced`` when
  the whole interval lies on the other side (``b`` included); ``inconclusive`` when it straddles ``b``.
  The lower bound decides a ``> b`` claim, the upper bound a ``< b`` claim;
* ``not measurable``: the inputs are missing or too few (``needs`` says which), never a number.

Rows the paper gives no value for (the first update's mean shift, overall concordance) carry
:data:`NO_CLAIM` instead of a verdict and are not counted.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pandas as pd

from stages.analysis import bootstrap

CONSISTENT, NOT_REPRODUCED, INCONCLUSIVE, NOT_MEASURABLE = ("consistent", "not reproduced", "inconclusive",
                                                            "not measurable")
VERDICTS = (CONSISTENT, NOT_REPRODUCED, INCONCLUSIVE, NOT_MEASURABLE)
NO_CLAIM = "no paper value"  # a row reported beside the claims (e.g. overall concordance): not a verdict
CONFIDENCE = 0.95
SHARE_WIDTH = 0.5       # a share's interval wider than half of [0, 1] cannot confirm a value
MAGNITUDE_WIDTH = 0.5   # a magnitude's interval wider than half the paper's value cannot confirm it
_EPS = 1e-12


def missing(needs: str, n: int = 0, configs: int | None = None) -> dict:
    """The estimate of a claim whose inputs are missing or too few."""
    return {"value": None, "low": None, "high": None, "n": int(n), "k": None, "configs": configs, "needs": needs}


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of ``k`` successes in ``n`` trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson: need 0 <= k <= n and n > 0 (k={k}, n={n})")
    from scipy.stats import binomtest  # here: scipy.stats costs 0.5 s to import per stage

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def share(frame: pd.DataFrame, column: str, cells: list[str], resamples: int = 1000, seed: int = 0,
          needs: str = "runs with a decided verdict") -> dict:
    """Share of ``True`` among the defined values of ``frame[column]`` (module docstring: its interval).
    ``n`` counts the defined values, ``configs`` the configurations (``cells`` columns) among them."""
    known = frame[frame[column].notna()].reset_index(drop=True)
    n = int(len(known))
    configs = int(known.groupby(cells).ngroups) if n else 0
    if n == 0:
        return missing(needs, 0, 0)
    k = int(known[column].astype(bool).sum())
    low, high = clopper_pearson(k, n)
    if configs > 1 and resamples > 0:
        boot = bootstrap.interval(known, bootstrap.rate(column), cells, resamples, seed)
        if boot["low"] is not None:
            low, high = min(low, boot["low"]), max(high, boot["high"])
    return {"value": k / n, "low": low, "high": high, "n": n, "k": k, "configs": configs, "needs": None}


def share_of_counts(k: int, n: int, needs: str) -> dict:
    """A share of ``k`` in ``n`` with its Clopper-Pearson interval alone (one group, e.g. pairs of cells)."""
    if n <= 0:
        return missing(needs)
    low, high = clopper_pearson(k, n)
    return {"value": k / n, "low": low, "high": high, "n": int(n), "k": int(k), "configs": None, "needs": None}


def median(frame: pd.DataFrame, column: str, cells: list[str], resamples: int = 1000, seed: int = 0,
           needs: str = "runs with a defined value") -> dict:
    """Median of the defined values of ``frame[column]`` with its hierarchical bootstrap interval."""
    known = frame[pd.to_numeric(frame[column], errors="coerce").notna()].reset_index(drop=True)
    if len(known) == 0:
        return missing(needs)
    ci = bootstrap.interval(known, bootstrap.median(column), cells, resamples, seed)
    if ci["low"] is None:  # fewer than half the resamples defined: no interval, so no verdict
        return missing(f"{needs} (an interval needs more runs)", len(known), int(known.groupby(cells).ngroups))
    return {**ci, "k": None, "configs": int(known.groupby(cells).ngroups), "needs": None}


def from_interval(ci: dict, needs: str) -> dict:
    """An estimate from a ``{value, low, high, n}`` interval computed elsewhere (e.g. cross-scale rho):
    not measurable when the value or the interval is missing."""
    if ci.get("value") is None or ci.get("low") is None:
        return missing(needs, ci.get("n", 0))
    return {"value": ci["value"], "low": ci["low"], "high": ci["high"], "n": int(ci["n"]), "k": ci.get("k"),
            "configs": ci.get("configs"), "needs": None}


def point_verdict(est: dict, paper: float, max_width: float) -> str:
    """Verdict of a point claim (module docstring): ``max_width`` is the widest interval that can confirm."""
    if est["value"] is None or est["low"] is None:
        return NOT_MEASURABLE
    if not est["low"] - _EPS <= paper <= est["high"] + _EPS:
        return NOT_REPRODUCED
    return INCONCLUSIVE if est["high"] - est["low"] > max_width + _EPS else CONSISTENT


def share_verdict(est: dict, paper: float) -> str:
    return point_verdict(est, paper, SHARE_WIDTH)


def magnitude_verdict(est: dict, paper: float) -> str:
    return point_verdict(est, paper, MAGNITUDE_WIDTH * abs(paper))


def one_sided_verdict(est: dict, bound: float, side: str) -> str:
    """Verdict of the claim "the value is ``side`` (``"above"`` | ``"below"``) ``bound``"."""
    if side not in ("above", "below"):
        raise ValueError(f"one_sided_verdict: side must be 'above' or 'below', not {side!r}")
    if est["value"] is None or est["low"] is None:
        return NOT_MEASURABLE
    low, high = est["low"], est["high"]
    if side == "above":
        return CONSISTENT if low > bound else (NOT_REPRODUCED if high <= bound else INCONCLUSIVE)
    return CONSISTENT if high < bound else (NOT_REPRODUCED if low >= bound else INCONCLUSIVE)


@lru_cache(maxsize=None)
def pairs_to_tell(a: float, b: float, limit: int = 10_000) -> int:
    """The fewest independent pairs ``n`` for which the exact interval of a share observed at ``a``
    excludes ``b`` and one observed at ``b`` excludes ``a`` (e.g. 52% against 69%): below it, a
    concordance cannot tell the paper's two values apart."""
    for n in range(2, limit):
        lo_a, hi_a = clopper_pearson(round(a * n), n)
        lo_b, hi_b = clopper_pearson(round(b * n), n)
        if not lo_a <= b <= hi_a and not lo_b <= a <= hi_b:
            return n
    raise ValueError(f"pairs_to_tell: {a} and {b} need more than {limit} pairs")


def counts(verdicts) -> dict[str, int]:
    """How many claims got each verdict (every verdict listed, 0 included)."""
    verdicts = [v for v in verdicts]
    return {v: sum(x == v for x in verdicts) for v in VERDICTS}


def fmt(est: dict, percent: bool = False) -> str:
    """``"1/3 = 33% [0.8%, 91%]"`` for a share, ``"3.29 [2.45, 4.26]"`` otherwise;
    ``"-"`` when not measurable."""
    if est["value"] is None:
        return "-"
    if percent:
        def f(v):
            return f"{100 * v:.1f}%" if 0 < 100 * v < 9.95 or 90.05 < 100 * v < 100 else f"{100 * v:.0f}%"
    else:
        def f(v):
            return f"{v:.3g}"
    head = f"{est['k']}/{est['n']} = " if percent and est.get("k") is not None else ""
    interval = "" if est["low"] is None else f" [{f(est['low'])}, {f(est['high'])}]"
    return f"{head}{f(est['value'])}{interval}"


def size(est: dict) -> str:
    """``"2 configs, 6 runs"`` (or ``"6 pairs"`` for pairs of cells, ``"8 cells"`` with ``unit: cells``)."""
    if est.get("configs") is None:
        return f"{est['n']} {est.get('unit', 'pairs')}" if est["n"] else "-"
    return f"{est['configs']} config{'s' if est['configs'] != 1 else ''}, {est['n']} run{'s' if est['n'] != 1 else ''}"


def finite_or_none(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) and not np.isnan(value) else None
