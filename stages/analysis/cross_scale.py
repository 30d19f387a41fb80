"""Across model sizes: is the order of tasks (collapse floors, phase boundaries) kept from a small
proxy model to a large one?

Input: one row per run with ``task``, ``level`` (difficulty class), ``model``, ``n_params``, ``seed``
and the per-run events ``floor_ratio`` (collapse floor / peak of the RankMe dip), ``recovery_step``
and ``acquisition_step`` (each may be missing). A **cell** is one ``(task, level)``.

For every pair of model sizes (small, large), ordered by parameter count:

* each ``(cell, model)`` is first reduced to the median of its defined values over seeds;
* **rho**: Spearman's rho, across the cells present at both sizes, between the small-model and the
  large-model value of ``floor_ratio``, ``recovery_step`` and ``acquisition_step`` (cells where either
  size has no defined value are left out; ``n`` is the number of cells used; fewer than 3 cells, or
  no variation at one size, give ``value: None``);
* **concordance** of timing (``acquisition_step``, ``recovery_step``): over the pairs of cells with a
  defined value at both sizes, the share whose order is the same at both sizes. A pair ordered the
  same way scores 1, a pair whose order reverses scores 0, and **a pair tied at either size scores
  1/2**. Reported over all pairs, within each difficulty level (``by_level``: pairs of cells of the
  same ``level``) and within each of the paper's task classes (``by_class``: ``hard tasks`` = ADD,
  MOD, MUL at any level, ``easy tasks`` = the others); ``n`` is the number of pairs, and no pair gives
  ``value: None``;
* **reversal**: the paper's "when task ordering reverses across scales, prediction fails at 26%".
  Over the pairs of cells whose acquisition order reverses strictly between the two sizes, the
  share in which the small model's geometry (its recovery order) predicts the large model's
  acquisition order (1 same order, 0 opposite, 1/2 tied); ``n`` is the number of reversed pairs;
* **reversed_pairs**: per timing variable, the pairs of cells whose order reverses, each written
  ``[cell earlier at the small size, cell earlier at the large size]`` with cells labelled
  ``"<task>-<level>"``.

Every rho and concordance carries a 95% percentile bootstrap interval. The resampling keeps a
cell's pairing across the two sizes: each resample draws cells with replacement, then, within every
drawn cell and independently at each size, that cell's seeds with replacement, and takes the
medians again. Two draws of the same cell never form a concordance pair (they would only compare a
cell with itself). The generator is ``numpy.random.default_rng(seed)``, restarted for every pair of
sizes: the same table gives the same intervals. ``low``/``high`` are ``None`` when the value is,
or when fewer than half the resamples give a defined statistic.

``size_vs_floor`` keeps the earlier statistic: Spearman's rho of parameter count against the
(seed-median) collapse floor within each cell, and pooled after ranking both within cells so task
differences do not masquerade as scale effects; it needs at least 3 model sizes.
"""
from __future__ import annotations

import warnings
from itertools import combinations

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from stages.analysis.event_rules import spearman

VARIABLES = ("floor_ratio", "recovery_step", "acquisition_step")
TIMING = ("acquisition_step", "recovery_step")
LEVEL_ORDER = ("easy", "medium", "hard")
CONFIDENCE = 0.95
TABLE_COLUMNS = ["pair", "statistic", "variable", "level", "value", "low", "high", "n"]
HARD_TASKS = ("add", "mod", "mul")  # the paper's hard task class
CLASSES = ("easy tasks", "hard tasks")


def task_class(task: str) -> str:
    """The paper's difficulty class of a task: ``hard tasks`` (ADD, MOD, MUL) or ``easy tasks``."""
    return "hard tasks" if task in HARD_TASKS else "easy tasks"


def cross_scale(runs: pd.DataFrame, resamples: int = 1000, seed: int = 0) -> dict:
    """Cross-scale statistics of ``runs`` (one row per run; see the module docstring).

    Returns ``{"pairs": {"<small>__<large>": {...}}, "size_vs_floor": {...}}``, plus ``"note"``
    (a string) only when fewer than 2 model sizes are present, in which case ``pairs`` is empty.
    Each pair holds ``small``, ``large`` (model names), ``small_params``, ``large_params``,
    ``cells`` (cells present at both sizes), ``rho[variable]``,
    ``concordance[variable] = {"all": stat, "by_level": {level: stat}, "by_class": {class: stat}}``,
    ``reversal`` (a stat), ``reversed_pairs[variable]`` and ``absent`` (``{model: [cells with no
    acquisition at that size]}``: left out of the acquisition statistics), where every ``stat`` is
    ``{"value", "low", "high", "n"}``.
    JSON-serialisable: no NaN anywhere.
    """
    runs = _prepare(runs)
    models = _model_sizes(runs)
    out: dict = {"pairs": {}, "size_vs_floor": _size_vs_floor(runs, len(models))}
    if len(models) < 2:
        out["note"] = (f"{len(models)} model size(s) in the runs: cross-scale statistics need at least 2 "
                       "(add sizes to grid.models)")
        return out
    for (small, small_params), (large, large_params) in combinations(models, 2):
        pair = _pair(runs, small, large, resamples, seed)
        out["pairs"][f"{small}__{large}"] = {"small": small, "large": large, "small_params": small_params,
                                             "large_params": large_params, **pair}
    return out


def cross_scale_table(result: dict) -> pd.DataFrame:
    """The pairs of a :func:`cross_scale` result as a flat table, one row per statistic:
    ``pair, statistic ("rho" | "concordance"), variable, level ("all" or a difficulty class),
    value, low, high, n``."""
    rows = []
    for name, pair in result.get("pairs", {}).items():
        for variable, stat in pair["rho"].items():
            rows.append({"pair": name, "statistic": "rho", "variable": variable, "level": "all", **stat})
        for variable, conc in pair["concordance"].items():
            rows.append({"pair": name, "statistic": "concordance", "variable": variable, "level": "all",
                         **conc["all"]})
            for group in ("by_level", "by_class"):
                for level, stat in conc.get(group, {}).items():
                    rows.append({"pair": name, "statistic": "concordance", "variable": variable, "level": level,
                                 **stat})
        if "reversal" in pair:
            rows.append({"pair": name, "statistic": "reversal", "variable": "acquisition_step", "level": "all",
                         **pair["reversal"]})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


# ---------------------------------------------------------------------------------------------

def _prepare(runs: pd.DataFrame) -> pd.DataFrame:
    missing = {"task", "level", "model", "n_params"} - set(runs.columns)
    if missing:
        raise ValueError(f"cross_scale: runs table lacks columns {', '.join(sorted(missing))}")
    runs = runs.copy()
    for column in VARIABLES:
        runs[column] = pd.to_numeric(runs[column], errors="coerce") if column in runs else np.nan
    runs["n_params"] = pd.to_numeric(runs["n_params"], errors="coerce")
    for column in ("task", "level", "model"):
        runs[column] = runs[column].astype(str)
    return runs.reset_index(drop=True)


def _model_sizes(runs: pd.DataFrame) -> list[tuple[str, int | None]]:
    """Models ordered by parameter count (median over their runs: it may differ slightly by task),
    then by name."""
    sizes = runs.groupby("model")["n_params"].median()
    ordered = sorted(sizes.items(), key=lambda kv: (np.inf if pd.isna(kv[1]) else kv[1], kv[0]))
    return [(str(m), None if pd.isna(p) else int(round(p))) for m, p in ordered]


def _level_key(level: str):
    return (LEVEL_ORDER.index(level), "") if level in LEVEL_ORDER else (len(LEVEL_ORDER), level)


def _pair(runs: pd.DataFrame, small: str, large: str, resamples: int, seed: int) -> dict:
    by_size = [runs[runs["model"] == m] for m in (small, large)]
    groups = [g.groupby(["task", "level"], sort=False).indices for g in by_size]
    cells = sorted(set(groups[0]) & set(groups[1]), key=lambda c: (c[0], _level_key(c[1])))
    labels = np.array([f"{t}-{l}" for t, l in cells], dtype=object)
    groups_of = {"by_level": np.array([l for _, l in cells], dtype=object),
                 "by_class": np.array([task_class(t) for t, _ in cells], dtype=object)}
    names = {"by_level": sorted(set(groups_of["by_level"]), key=_level_key),
             "by_class": [c for c in CLASSES if c in set(groups_of["by_class"])]}

    # values[c, s, k, v]: seed k of cell c at size s (NaN-padded); counts[c, s]: its number of seeds
    counts = np.array([[len(groups[s][c]) for s in range(2)] for c in cells], dtype=int).reshape(len(cells), 2)
    depth = int(counts.max()) if len(cells) else 0
    values = np.full((len(cells), 2, depth, len(VARIABLES)), np.nan)
    for i, c in enumerate(cells):
        for s in range(2):
            rows = by_size[s].iloc[groups[s][c]][list(VARIABLES)].to_numpy(dtype=float)
            values[i, s, :len(rows)] = rows

    origin = np.arange(len(cells))
    medians = _nanmedian(values)
    point = _statistics(medians, groups_of, origin, names)
    boot = _bootstrap(values, counts, groups_of, names, resamples, seed) if len(cells) else {}

    def stat(key):
        value, n = point[key]
        low = high = None
        draws = boot.get(key, [])
        if value is not None and resamples > 0 and 2 * len(draws) >= resamples:
            low, high = (float(q) for q in np.quantile(draws, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2]))
        return {"value": value, "low": low, "high": high, "n": n}

    return {
        "cells": len(cells),
        "rho": {v: stat(("rho", v)) for v in VARIABLES},
        "concordance": {v: {"all": stat(("conc", v, None)),
                            **{g: {l: stat(("conc", v, g, l)) for l in names[g]} for g in names}}
                        for v in TIMING},
        "reversal": stat(("reversal",)),
        "reversed_pairs": {v: _reversed(medians[:, :, VARIABLES.index(v)], labels) for v in TIMING},
        "absent": {size: [str(labels[i]) for i in np.nonzero(~np.isfinite(medians[:, s, VARIABLES.index(
            "acquisition_step")]))[0]] for s, size in enumerate((small, large))},
    }


def _nanmedian(values: np.ndarray) -> np.ndarray:
    """Median over seeds (axis 2) of the defined values; NaN where a cell has none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: the cell has no defined value
        return np.nanmedian(values, axis=2)


def _statistics(medians: np.ndarray, groups_of: dict, origin: np.ndarray, names: dict) -> dict:
    """``{key: (value or None, n)}`` for every rho, concordance and the reversal statistic, on
    ``medians[cell, size, var]``; ``groups_of[grouping]`` labels each cell (its level, its task class)."""
    out = {}
    for j, v in enumerate(VARIABLES):
        out[("rho", v)] = _rho(medians[:, 0, j], medians[:, 1, j])
    for v in TIMING:
        j = VARIABLES.index(v)
        score, keep = _pair_scores(medians[:, 0, j], medians[:, 1, j], origin)
        out[("conc", v, None)] = _share(score, keep)
        for grouping, labels in groups_of.items():
            same = labels[:, None] == labels[None, :]
            for name in names[grouping]:
                out[("conc", v, grouping, name)] = _share(score, keep & same & (labels[:, None] == name))
    out[("reversal",)] = _reversal(medians, origin)
    return out


def _reversal(medians: np.ndarray, origin: np.ndarray) -> tuple:
    """Over pairs of cells whose acquisition order reverses strictly between the sizes: the share in
    which the small size's recovery order matches the large size's acquisition order (ties 1/2)."""
    acq, rec = VARIABLES.index("acquisition_step"), VARIABLES.index("recovery_step")
    small_acq, large_acq, small_rec = medians[:, 0, acq], medians[:, 1, acq], medians[:, 0, rec]
    with np.errstate(invalid="ignore"):
        d_large = np.sign(large_acq[:, None] - large_acq[None, :])
        reversed_ = np.sign(small_acq[:, None] - small_acq[None, :]) * d_large < 0
        product = np.sign(small_rec[:, None] - small_rec[None, :]) * d_large
    defined = np.isfinite(small_rec)
    keep = np.triu(reversed_, k=1) & defined[:, None] & defined[None, :] & (origin[:, None] != origin[None, :])
    score = np.where(product > 0, 1.0, np.where(product < 0, 0.0, 0.5))
    return _share(score, keep)


def _rho(a: np.ndarray, b: np.ndarray) -> tuple:
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = int(keep.sum())
    if n < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None, n
    rho = float(spearmanr(a, b).statistic)
    return (rho if np.isfinite(rho) else None), n


def _pair_scores(a: np.ndarray, b: np.ndarray, origin: np.ndarray):
    """Per pair of cells (i < j): 1 same order at both sizes, 0 reversed, 1/2 tied at either size;
    ``keep`` marks pairs of distinct cells with defined values at both sizes."""
    defined = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore"):
        product = np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])
    score = np.where(product > 0, 1.0, np.where(product < 0, 0.0, 0.5))
    keep = np.triu(np.ones((len(a), len(a)), dtype=bool), k=1)
    keep &= defined[:, None] & defined[None, :] & (origin[:, None] != origin[None, :])
    return score, keep


def _share(score: np.ndarray, keep: np.ndarray) -> tuple:
    n = int(keep.sum())
    return (float(score[keep].mean()) if n else None), n


def _reversed(medians: np.ndarray, labels: np.ndarray) -> list[list[str]]:
    a, b = medians[:, 0], medians[:, 1]
    out = []
    for i, j in combinations(range(len(a)), 2):
        if np.isfinite([a[i], a[j], b[i], b[j]]).all() and (a[i] - a[j]) * (b[i] - b[j]) < 0:
            out.append([labels[i], labels[j]] if a[i] < a[j] else [labels[j], labels[i]])
    return [[str(x), str(y)] for x, y in sorted(out)]


def _bootstrap(values: np.ndarray, counts: np.ndarray, groups_of: dict, names: dict,
               resamples: int, seed: int) -> dict:
    """``{key: [defined statistic of each resample]}``: cells drawn with replacement, then seeds
    drawn with replacement within each drawn cell, independently at each size."""
    rng = np.random.default_rng(seed)
    n_cells, _, depth, _ = values.shape
    slot = np.arange(depth)
    out: dict = {}
    for _ in range(max(resamples, 0)):
        picked = rng.integers(n_cells, size=n_cells)
        m = counts[picked]                                                 # (cells, 2)
        seeds = (rng.random((n_cells, 2, depth)) * m[:, :, None]).astype(int)
        drawn = values[picked[:, None, None], np.arange(2)[None, :, None], seeds]  # (cells, 2, depth, vars)
        drawn[slot[None, None, :] >= m[:, :, None]] = np.nan               # padding: draw only m seeds
        stats = _statistics(_nanmedian(drawn), {g: labels[picked] for g, labels in groups_of.items()}, picked, names)
        for key, (value, _) in stats.items():
            if value is not None:
                out.setdefault(key, []).append(value)
    return out


def _size_vs_floor(runs: pd.DataFrame, n_sizes: int) -> dict:
    """Spearman's rho of parameter count against the seed-median collapse floor, within each cell
    and pooled after ranking within cells; ``rho: None`` with fewer than 3 model sizes."""
    agg = runs.groupby(["task", "level", "model"], sort=True)[["n_params", "floor_ratio"]].median().reset_index()
    by_cell = {}
    for (task, level), g in agg.groupby(["task", "level"], sort=True):
        g = g.sort_values(["n_params", "model"])
        by_cell[f"{task}-{level}"] = {"models": [str(m) for m in g["model"]],
                                      **spearman(g["n_params"], g["floor_ratio"])}
    within = agg.groupby(["task", "level"])[["n_params", "floor_ratio"]].rank()
    pooled = spearman(within["n_params"], within["floor_ratio"])
    if n_sizes < 3:
        pooled = {"rho": None, "p": None, "n": pooled["n"]}
    return {"n_model_sizes": int(n_sizes), "pooled": pooled, "by_cell": by_cell}
