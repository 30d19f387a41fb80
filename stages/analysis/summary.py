"""Per-level statistics with bootstrap intervals, seed agreement per configuration, and the
sensitivity of the precursor rate to the rule's threshold and to checkpoint resolution.

Every function takes the long per-run table (one row per run and measure, columns ``task``,
``level``, ``model``, ``seed``, ``measure``, ``precursor`` ...) and returns plain data.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stages.analysis import bootstrap, verdicts
from stages.analysis.event_rules import Rules, precursor_verdict
from stages.analysis.runs import run_events, subsample

CELL = ["task", "level", "model"]


def level_summary(rows: pd.DataFrame, primary: str, resamples: int = 1000, seed: int = 0) -> dict:
    """``{level: {...}}``: counts, and for the ``primary`` measure precursor rate, median lead
    (share of the acquisition step and steps), median floor and floor/peak ratio, top-down rate;
    and every measure's precursor rate and median lead; each as ``{value, low, high, n}`` (rates also
    ``k``, ``configs`` and ``needs``: :func:`stages.analysis.verdicts.share`, an exact interval)."""
    out = {}
    for level, g in rows.groupby("level", sort=True):
        p = g[g["measure"] == primary].reset_index(drop=True)
        acquired = p[p["acquisition_step"].notna()].reset_index(drop=True)

        def ci(frame, stat):
            return bootstrap.interval(frame, stat, CELL, resamples, seed)

        def share(frame, column):  # exact interval (never a point from identical outcomes), k, configs
            return verdicts.share(frame, column, CELL, resamples, seed)

        entry = {
            "runs": int(len(p)), "acquired": int(len(acquired)),
            "precursor_undetermined": int(acquired["precursor"].isna().sum()),
            "precursor_rate": share(acquired, "precursor"),
            "median_lead_fraction": ci(acquired, bootstrap.median("lead_fraction")),
            "median_lead_steps": ci(acquired, bootstrap.median("lead_steps")),
            "median_floor": ci(p, bootstrap.median("floor")),
            "median_floor_ratio": ci(p, bootstrap.median("floor_ratio")),
            "top_down_rate": share(p, "top_down"),
            "measures": {},
        }
        for measure, m in g.groupby("measure", sort=True):
            m = m[m["acquisition_step"].notna()].reset_index(drop=True)
            entry["measures"][measure] = {"precursor_rate": share(m, "precursor"),
                                          "median_lead_fraction": ci(m, bootstrap.median("lead_fraction"))}
        out[str(level)] = entry
    return out


def seed_agreement(rows: pd.DataFrame, measure: str) -> pd.DataFrame:
    """One row per configuration (task, level, model): seeds, precursor verdicts per seed, the
    majority verdict, the share of decided seeds that agree with it, and the median acquisition and
    recovery steps over seeds."""
    out = []
    for (task, level, model), g in rows[rows["measure"] == measure].groupby(CELL, sort=True):
        g = g.sort_values("seed")
        decided = g["precursor"].dropna().astype(bool)
        yes = int(decided.sum())
        no = int(len(decided) - yes)
        verdict = "undetermined" if yes == no else ("precursor" if yes > no else "together")
        out.append({"task": task, "level": level, "model": model, "seeds": len(g), "decided": len(decided),
                    "precursor_seeds": yes, "verdict": verdict,
                    "agreement": max(yes, no) / len(decided) if len(decided) else None,
                    "acquisition": bootstrap.median("acquisition_step")(g),
                    "recovery": bootstrap.median("recovery_step")(g),
                    "verdicts": " ".join("?" if pd.isna(v) else ("P" if v else "-") for v in g["precursor"])})
    return pd.DataFrame(out)


def threshold_sensitivity(rows: pd.DataFrame, steps: dict[str, np.ndarray], rules: Rules,
                          thresholds, resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Precursor rate per level (acquired runs of ``rows``, one measure) against ``min_lead``."""
    out = []
    acquired = rows[rows["acquisition_step"].notna()].reset_index(drop=True)
    for t in thresholds:
        verdicts = [precursor_verdict(_int(r.end_step), _int(r.acquisition_step), steps[r.run], rules, min_lead=t)
                    for r in acquired.itertuples()]
        frame = acquired.assign(precursor=pd.Series(verdicts, dtype=object))
        out.extend(_rates(frame, {"min_lead": float(t)}, resamples, seed))
    return pd.DataFrame(out)


def resolution_sensitivity(frames: dict[str, pd.DataFrame], ident: pd.DataFrame, rules: Rules, layer,
                           measure: str, counts, resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Precursor rate per level when every run is seen only at ``n`` evenly spaced checkpoints
    (for each ``n`` of ``counts``; ``0`` = all checkpoints as trained)."""
    out = []
    for n in counts:
        rows = []
        for r in ident.itertuples():
            frame = frames[r.run]
            steps = np.sort(frame["step"].unique())
            keep = steps if not n else steps[subsample(steps, n)]
            measures, _ = run_events(frame[frame["step"].isin(keep)], rules, layer)
            row = next((m for m in measures if m["measure"] == measure), None)
            if row is not None and row["acquisition_step"] is not None:
                rows.append({"task": r.task, "level": r.level, "model": r.model, "seed": r.seed,
                             "precursor": row["precursor"]})
        frame = pd.DataFrame(rows, columns=["task", "level", "model", "seed", "precursor"])
        out.extend(_rates(frame, {"n_checkpoints": int(n)}, resamples, seed))
    return pd.DataFrame(out)


def _rates(frame: pd.DataFrame, key: dict, resamples: int, seed: int) -> list[dict]:
    rows = []
    for level, g in frame.groupby("level", sort=True):
        g = g.reset_index(drop=True)
        ci = verdicts.share(g, "precursor", CELL, resamples, seed)
        rows.append({**key, "level": level, "precursor_rate": ci["value"], "low": ci["low"], "high": ci["high"],
                     "runs": int(g["precursor"].notna().sum())})
    return rows


def _int(value):
    return None if value is None or pd.isna(value) else int(value)

