"""Transitions of the landscape measures and whether each precedes acquisition.

Each measure has a direction, set in ``params.yaml: landscape_events.directions``:

* **dip** measures (gradient effective rank, gradient covariance rank, like RankMe) collapse and
  recover. Their transition is the **collapse** step of :func:`stages.analysis.events.find_dip`
  (same ``events.collapse_drop`` and ``events.recovery_fraction`` as RankMe).
* **rise** measures (top Hessian eigenvalue, LLC) grow. Their transition is the **half-rise**
  step: the first checkpoint at which the measure has covered ``rise_fraction`` of its rise from
  its first value ``v0`` to its maximum ``vmax``, i.e. ``v >= v0 + rise_fraction * (vmax - v0)``.
  There is no transition when the rise is small: ``vmax - v0 < min_rise * max(|v0|, |vmax|)``.

A measure is a **precursor** in a run that acquires the task when its transition comes at least
``events.precursor_min_gap`` training steps before acquisition (RankMe's criterion); a dip measure
must also have recovered no later than acquisition (RankMe's rule). In a run without
acquisition the flag is ``None`` and the run is left out of the precursor rate, as for RankMe.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stages.analysis.events import find_dip

DIRECTIONS = ("dip", "rise")


def rise_step(steps, values, rise_fraction: float = 0.5, min_rise: float = 0.2) -> int | None:
    """Half-rise transition step (see the module docstring); ``None`` without a clear rise."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    v0, top = float(values[0]), float(values.max())
    rise = top - v0
    if rise <= 0 or rise < min_rise * max(abs(v0), abs(top)):
        return None
    hit = np.nonzero(values >= v0 + rise_fraction * rise)[0]
    return int(steps[hit[0]])


def measure_transition(steps, values, direction: str, p: dict) -> dict:
    """``{"transition_step", "recovery_step"}`` of one measure's trajectory (NaNs dropped)."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if len(values) < 2:
        return {"transition_step": None, "recovery_step": None}
    if direction == "dip":
        dip = find_dip(steps, values, p["collapse_drop"], p["recovery_fraction"])
        return {"transition_step": dip.collapse_step, "recovery_step": dip.recovery_step}
    return {"transition_step": rise_step(steps, values, p["rise_fraction"], p["min_rise"]), "recovery_step": None}


def is_precursor(transition: dict, direction: str, acquisition: int | None, min_gap: int) -> bool | None:
    if acquisition is None:
        return None
    t = transition["transition_step"]
    if t is None or acquisition - t < min_gap:
        return False
    if direction == "dip":
        rec = transition["recovery_step"]
        return rec is not None and rec <= acquisition
    return True


def run_measures(frame: pd.DataFrame, directions: dict[str, str], acquisition: int | None,
                 p: dict) -> dict[str, dict]:
    """Per measure present in ``frame`` (a ``data/landscape/<run>.csv`` table): transition, lead and flag."""
    frame = frame.sort_values("step")
    out = {}
    for measure, direction in directions.items():
        if measure not in frame.columns:
            continue
        tr = measure_transition(frame["step"].to_numpy(), frame[measure].to_numpy(), direction, p)
        t = tr["transition_step"]
        out[measure] = {**tr, "direction": direction,
                        "lead": None if t is None or acquisition is None else acquisition - t,
                        "precursor": is_precursor(tr, direction, acquisition, p["precursor_min_gap"])}
    return out


def precursor_rates(rows: pd.DataFrame) -> dict[str, dict]:
    """``{level: {measure: {runs, acquired, precursors, precursor_rate, median_lead}}}`` from
    long-format rows (level, measure, precursor, lead)."""
    result: dict[str, dict] = {}
    for (level, measure), g in rows.groupby(["level", "measure"]):
        flags = g["precursor"].dropna().astype(bool)
        leads = pd.to_numeric(g["lead"], errors="coerce").dropna()
        result.setdefault(level, {})[measure] = {
            "runs": int(len(g)), "acquired": int(len(flags)), "precursors": int(flags.sum()),
            "precursor_rate": float(flags.mean()) if len(flags) else None,
            "median_lead": float(leads.median()) if len(leads) else None,
        }
    return result


def landscape_event_params(params: dict, event_p: dict) -> dict:
    """``landscape_events`` params merged with the events thresholds they share; errors name the key."""
    from stages.config import fraction, get
    from stages.errors import PipelineError

    directions = get(params, "landscape_events.directions")
    if not isinstance(directions, dict) or not directions:
        raise PipelineError("'landscape_events.directions' must map measure names to dip or rise")
    for measure, direction in directions.items():
        if direction not in DIRECTIONS:
            raise PipelineError(f"'landscape_events.directions.{measure}' must be dip or rise, got {direction!r}")
    return {**event_p, "directions": dict(directions),
            "rise_fraction": fraction(get(params, "landscape_events.rise_fraction"), "landscape_events.rise_fraction"),
            "min_rise": fraction(get(params, "landscape_events.min_rise"), "landscape_events.min_rise")}


def add_landscape(metrics: dict, run_rows: list[dict], params: dict, event_p: dict, out_file) -> pd.DataFrame:
    """Add per-run ``measures`` (RankMe and every landscape measure) and per-level
    ``measures.<measure>.precursor_rate`` to ``metrics``; write the long table to ``out_file``.

    Runs without a ``data/landscape/<run>.csv`` (landscape stage not run) report RankMe only.
    """
    from stages import paths
    from stages.errors import PipelineError
    from stages.io.tables import read_csv, write_csv

    p = landscape_event_params(params, event_p)
    long_rows = []
    for r in run_rows:
        acq = r["acquisition_step"]
        measures = {"rankme": {"transition_step": r["collapse_step"], "recovery_step": r["recovery_step"],
                               "direction": "dip", "lead": r["precursor_gap"],
                               "precursor": None if acq is None else bool(r["precursor"])}}
        path = paths.landscape_file(r["run"])
        if path.is_file():
            frame = read_csv(path)
            if "step" not in frame.columns or frame.empty:
                raise PipelineError(f"corrupt table: {path} (needs a step column and rows)")
            measures.update(run_measures(frame, p["directions"], acq, p))
        metrics["runs"][r["run"]]["measures"] = measures
        long_rows.extend({"run": r["run"], "task": r["task"], "level": r["level"], "model": r["model"],
                          "measure": m, "acquisition_step": acq, **v} for m, v in measures.items())
    table = pd.DataFrame(long_rows)
    for level, rates in precursor_rates(table).items():
        metrics["by_level"].setdefault(level, {})["measures"] = rates
    metrics["params"]["landscape"] = {k: v for k, v in p.items() if k in ("directions", "rise_fraction", "min_rise")}
    write_csv(table, out_file)
    return table
