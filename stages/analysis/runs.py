"""Events of one run from its measures table (one row per checkpoint and layer).

For each geometry measure (raw RankMe, the paper's; centred RankMe) the run gets a dip of the chosen
layer, the acquisition of the task, a precursor verdict and the order in which layers collapse.
Rules: :mod:`stages.analysis.event_rules`. Pure functions: the ``events`` stage does the reading and
writing.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stages.analysis.event_rules import Rules, acquisition, find_dip, layer_order, lead_fraction, precursor_verdict

from stages.params import GEOMETRY  # noqa: E402  the geometry measures, declared once


def varying_layers(frame: pd.DataFrame) -> list[int]:
    """Layers whose states vary across samples at some checkpoint (``varies`` column; every layer
    when the table has none)."""
    if "varies" not in frame.columns:
        return sorted(int(l) for l in frame["layer"].unique())
    flags = frame["varies"].astype(str).str.lower().isin(["true", "1"])
    return sorted(int(l) for l in frame.loc[flags, "layer"].unique())


def layer_series(frame: pd.DataFrame, measure: str, layer, layers: list[int]) -> pd.Series:
    """One measure against step: ``layer`` is ``"last"`` (deepest varying layer), ``"mean"`` (mean
    over varying layers) or a layer number."""
    wide = frame.pivot(index="step", columns="layer", values=measure).sort_index()
    if layer == "last":
        return wide[max(layers)]
    if layer == "mean":
        return wide[layers].mean(axis=1)
    return wide[layer]


def run_events(frame: pd.DataFrame, rules: Rules, layer="last") -> tuple[list[dict], list[dict]]:
    """``(measure_rows, layer_rows)`` of one run: one row per geometry measure present (dip,
    acquisition, lead, precursor, layer order) and one per (measure, varying layer)."""
    acc = frame.groupby("step")["test_acc"].first().sort_index()
    steps = acc.index.to_numpy()
    acq, acq_status = acquisition(steps, acc.to_numpy(), rules.threshold, rules.window)
    layers = varying_layers(frame)
    base = {"acquisition_step": acq, "acquisition_status": acq_status, "final_acc": float(acc.iloc[-1]),
            "total_steps": int(steps.max()), "n_checkpoints": int(len(steps)),
            "first_update_mean_dominance": first_update(frame, "mean_dominance", layer, layers)}
    rows, layer_rows = [], []
    for measure in GEOMETRY:
        if measure not in frame.columns or not layers:
            continue
        series = layer_series(frame, measure, layer, layers)
        dip = find_dip(series.index.to_numpy(), series.to_numpy(), rules, until=acq)
        collapse = {}
        for l in layers:
            g = frame[frame["layer"] == l].sort_values("step")
            d = find_dip(g["step"].to_numpy(), g[measure].to_numpy(), rules, until=acq)
            collapse[l] = d.collapse_step
            layer_rows.append({"measure": measure, "layer": l, **d.to_dict()})
        order = layer_order(collapse)
        rows.append({"measure": measure, "direction": "dip", **base, **dip_fields(dip, acq, steps, rules),
                     **at_floor(frame, dip.floor_step, layer, layers),
                     "order": order["order"], "order_spearman": order["spearman"], "top_down": order["top_down"],
                     "order_ties": order["ties"], "order_layers": len(order["layers"]),
                     "varying_layers": len(layers)})
    return rows, layer_rows


AT_FLOOR = ("mean_dominance", "rankme_centred", "rankme")


def first_update(frame: pd.DataFrame, column: str, layer, layers: list[int]) -> float | None:
    """The chosen layer's ``column`` at the first checkpoint after step 0 (step 1 when saved): how far
    the first update pushed every state along one shared direction (mean dominance near 1)."""
    if column not in frame.columns or not layers:
        return None
    series = layer_series(frame, column, layer, layers)
    later = series[series.index > series.index.min()]
    value = float(later.iloc[0]) if len(later) else None
    return value if value is not None and np.isfinite(value) else None


def at_floor(frame: pd.DataFrame, floor_step: int | None, layer, layers: list[int]) -> dict:
    """``floor_<column>`` for the columns of :data:`AT_FLOOR` present: the chosen layer's value at the
    dip's floor checkpoint (``None`` without a floor), e.g. how dominant the mean is at the raw floor
    and what centred RankMe reads there."""
    out = {}
    for column in AT_FLOOR:
        if column not in frame.columns:
            continue
        value = None
        if floor_step is not None:
            series = layer_series(frame, column, layer, layers)
            value = float(series.loc[floor_step]) if floor_step in series.index else None
            value = None if value is None or not np.isfinite(value) else value
        out[f"floor_{column}"] = value
    return out


def dip_fields(dip, acq: int | None, steps, rules: Rules) -> dict:
    """A dip's events with its lead on acquisition and its precursor verdict (end = recovery)."""
    end = dip.recovery_step
    floor_ratio = dip.floor / dip.peak if dip.floor is not None and dip.peak else None
    return {**dip.to_dict(), "floor_ratio": floor_ratio, "end_step": end,
            "gap_steps": None if acq is None or dip.collapse_step is None else acq - dip.collapse_step,
            "lead_steps": None if acq is None or end is None else acq - end,
            "lead_fraction": lead_fraction(end, acq),
            "precursor": precursor_verdict(end, acq, steps, rules)}


def subsample(steps, n: int) -> np.ndarray:
    """Indices of the checkpoints nearest to ``n`` evenly spaced steps from the first to the last
    (distinct, first and last kept): the run as a coarser, linear checkpoint schedule would see it."""
    steps = np.asarray(steps, dtype=float)
    if n >= len(steps):
        return np.arange(len(steps))
    targets = np.linspace(steps[0], steps[-1], n)
    return np.unique(np.abs(steps[None, :] - targets[:, None]).argmin(axis=1))
