"""Hierarchical bootstrap over runs and seeds: 95% intervals for per-level statistics.

A statistic is computed on a table with one row per (cell, seed), a cell being one
(task, level, model) configuration. Each resample draws cells with replacement and then, within
every drawn cell, its seeds with replacement, so the interval carries both the spread between
tasks and the seed-to-seed noise. The generator is seeded: the same table gives the same interval.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd


def interval(frame: pd.DataFrame, statistic: Callable[[pd.DataFrame], float | None],
             cells: list[str], resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict:
    """``{"value", "low", "high", "n"}``: ``statistic(frame)`` and its percentile interval.

    ``statistic`` returns a float or ``None`` (undefined on that sample; such resamples are left out).
    ``low``/``high`` are ``None`` when the value is, or when fewer than half the resamples are defined.
    ``n`` is the number of rows.
    """
    value = statistic(frame)
    out = {"value": _clean(value), "low": None, "high": None, "n": int(len(frame))}
    if value is None or len(frame) == 0 or resamples <= 0:
        return out
    groups = [np.asarray(ix) for ix in frame.groupby(cells, sort=True).indices.values()]
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(resamples):
        picked = rng.integers(len(groups), size=len(groups))
        rows = np.concatenate([groups[g][rng.integers(len(groups[g]), size=len(groups[g]))] for g in picked])
        v = statistic(frame.iloc[rows])
        if v is not None and np.isfinite(v):
            stats.append(v)
    if len(stats) * 2 < resamples:
        return out
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    out.update(low=float(low), high=float(high))
    return out


def _clean(value):
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def rate(column: str) -> Callable[[pd.DataFrame], float | None]:
    """Share of ``True`` among the defined (non-null) values of a boolean column."""
    def statistic(frame: pd.DataFrame) -> float | None:
        known = frame[column].dropna()
        return float(known.astype(bool).mean()) if len(known) else None
    return statistic


def median(column: str) -> Callable[[pd.DataFrame], float | None]:
    """Median of the defined values of a numeric column."""
    def statistic(frame: pd.DataFrame) -> float | None:
        values = pd.to_numeric(frame[column], errors="coerce").dropna()
        return float(values.median()) if len(values) else None
    return statistic
