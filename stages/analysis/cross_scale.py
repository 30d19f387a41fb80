"""Across model sizes: do collapse floors and layer orders move with scale?"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stages.analysis.events import spearman


def cross_scale(runs: pd.DataFrame) -> dict:
    """Spearman correlations of model size with the collapse floor (relative to the initial
    RankMe) and with the layer-order statistic, within each (task, level) and pooled.

    Pooled correlations rank both variables within each (task, level) group first, so task
    differences do not masquerade as scale effects. Each entry carries its ``n``; fewer than 3 runs of
    distinct sizes give ``rho: null``.
    """
    runs = runs.copy()
    runs["floor_ratio"] = runs["floor"] / runs["initial"]
    groups = {}
    for (task, level), g in runs.groupby(["task", "level"]):
        groups[f"{task}-{level}"] = {
            "models": list(g.sort_values("n_params")["model"]),
            "size_vs_floor": spearman(g["n_params"], g["floor_ratio"]),
            "size_vs_order": spearman(g["n_params"], g["order_spearman"]),
        }
    within = runs.groupby(["task", "level"])[["n_params", "floor_ratio", "order_spearman"]].rank()
    n_sizes = int(runs["model"].nunique())
    pooled = {
        "n_model_sizes": n_sizes,
        "size_vs_floor": spearman(within["n_params"], within["floor_ratio"]),
        "size_vs_order": spearman(within["n_params"], within["order_spearman"]),
        "floor_vs_order": spearman(within["floor_ratio"], within["order_spearman"]),
        "top_down_rate": _rate(runs["top_down"]),
    }
    note = None if n_sizes >= 3 else "fewer than 3 model sizes in the grid: add sizes to grid.models for correlations"
    return {"pooled": pooled, "by_task_level": groups, "note": note}


def _rate(flags: pd.Series):
    known = flags.dropna()
    return float(np.mean(known.astype(bool))) if len(known) else None
