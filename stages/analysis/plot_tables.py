"""Per-run plot table for ``dvc plots``: RankMe and accuracy curves plus the run's event steps.

:func:`run_plot_table` turns one run's trajectory (``plots/trajectories/<run>.csv``, see
:mod:`stages.analysis.trajectories`) and its events into the long table ``plots/runs/<run>.csv``
that the template ``.dvc/plots/run.json`` draws:

* curve rows: ``step``, ``series`` (one of :data:`SERIES`' labels), ``value``; ``event`` and
  ``event_step`` empty;
* event rows, one per event that happened: ``event`` (collapse, recovery, acquisition),
  ``event_step`` = ``step`` = the event's step; ``series`` and ``value`` empty.

The template draws one coloured line per ``series`` from the rows without an event and one
vertical rule per event row; its colour scale names the labels of :data:`SERIES` and
:data:`EVENTS` (tests/test_plot_specs.py keeps the two in step).
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd

# trajectory column -> series label (order = legend order). Relative RankMe (value / value at the
# first checkpoint) shares the [0, ~1] axis with accuracy.
SERIES = {
    "rankme_rel": "RankMe / initial",
    "rankme_centred_rel": "centred RankMe / initial",
    "test_acc": "test accuracy",
}
EVENTS = ("collapse", "recovery", "acquisition")
COLUMNS = ["step", "series", "value", "event", "event_step"]


def _event_step(name: str, value) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != int(value) or value < 0:
        raise ValueError(f"event '{name}' must be a non-negative whole step or None, got {value!r}")
    return int(value)


def run_plot_table(trajectory: pd.DataFrame, events: dict) -> pd.DataFrame:
    """Long table (columns :data:`COLUMNS`) of one run: a curve row per checkpoint and series of
    :data:`SERIES` present in ``trajectory`` (a column that is missing or all-NaN gives no series,
    NaN values give no row), then one row per event of ``events`` whose step is not None.

    ``events`` maps each of :data:`EVENTS` to a step or None (missing keys count as None; any other
    key is an error, so a misspelt event cannot vanish from the chart). Pure: reads nothing, writes
    nothing; ``step`` and ``event_step`` are integers (nullable ``Int64``)."""
    if "step" not in trajectory.columns:
        raise ValueError("trajectory has no 'step' column")
    unknown = sorted(set(events) - set(EVENTS))
    if unknown:
        raise ValueError(f"unknown event {unknown[0]!r} (expected: {', '.join(EVENTS)})")
    parts = []
    steps = pd.to_numeric(trajectory["step"])
    for column, label in SERIES.items():
        if column not in trajectory.columns:
            continue
        values = pd.to_numeric(trajectory[column]).astype(float)
        keep = values.notna()
        if keep.any():
            parts.append(pd.DataFrame({"step": steps[keep].to_numpy(), "series": label,
                                       "value": values[keep].to_numpy()}))
    curves = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["step", "series", "value"])
    rows = [{"step": step, "event": name, "event_step": step}
            for name in EVENTS if (step := _event_step(name, events.get(name))) is not None]
    marks = pd.DataFrame(rows, columns=["step", "event", "event_step"])
    table = pd.concat([curves, marks], ignore_index=True) if len(marks) else curves
    table = table.reindex(columns=COLUMNS)
    table["step"] = table["step"].astype("int64")
    table["event_step"] = table["event_step"].astype("Int64")
    table["value"] = table["value"].astype(float)
    table["series"] = table["series"].astype(object)
    table["event"] = table["event"].astype(object)
    return table.reset_index(drop=True)


# ---- the page's first charts: trajectories aligned at acquisition, and their per-level summary ----
ALIGNED_COLUMNS = ["run", "config", "task", "level", "seed", "measure", "step", "aligned_step", "relative_step",
                   "value"]
LEVEL_COLUMNS = ["level", "measure", "relative_step", "median", "low", "high", "runs"]
RELATIVE_GRID = tuple(round(0.05 * i, 2) for i in range(0, 61))  # step / acquisition step: 0 .. 3


def aligned_table(runs: list[dict]) -> pd.DataFrame:
    """Long table of every acquiring run's curves against ``aligned_step = step - acquisition step``
    (and ``relative_step = step / acquisition step``), for the paper-style figure.

    ``runs``: one dict per run with ``run``, ``task``, ``level``, ``seed`` (or None), ``trajectory``
    (a trajectory table: ``step`` and the columns of :data:`SERIES`) and ``acquisition`` (a step, or
    None: the run never acquires and is left out). ``measure`` holds :data:`SERIES`' labels. Pure."""
    parts = []
    for r in runs:
        acq = _event_step("acquisition", r.get("acquisition"))
        if acq is None:
            continue
        curves = run_plot_table(r["trajectory"], {})
        curves = curves[curves["series"].notna()]
        steps = curves["step"].astype(int)
        parts.append(pd.DataFrame({
            "run": r["run"], "config": f"{r['task']} {r['level']}", "task": r["task"], "level": r["level"],
            "seed": r.get("seed"), "measure": curves["series"].to_numpy(), "step": steps.to_numpy(),
            "aligned_step": (steps - acq).to_numpy(), "relative_step": (steps / acq if acq else steps * 0.0).to_numpy(),
            "value": curves["value"].to_numpy()}))
    if not parts:
        return pd.DataFrame(columns=ALIGNED_COLUMNS)
    table = pd.concat(parts, ignore_index=True).reindex(columns=ALIGNED_COLUMNS)
    table["seed"] = table["seed"].astype("Int64")
    return table


def level_summary(aligned: pd.DataFrame, grid=RELATIVE_GRID) -> pd.DataFrame:
    """Per difficulty level and measure, the median and the range (min, max) over runs of each run's
    curve interpolated at ``grid`` points of ``relative_step`` (step / acquisition step; 1 =
    acquisition), where the run has readings on both sides (no extrapolation). Pure."""
    rows = []
    for (level, measure), g in aligned.groupby(["level", "measure"], sort=True):
        curves = []
        for _, run in g.groupby("run"):
            run = run.sort_values("relative_step")
            x, y = run["relative_step"].to_numpy(float), run["value"].to_numpy(float)
            inside = [(t, float(np.interp(t, x, y))) for t in grid if x[0] <= t <= x[-1]]
            curves.append(dict(inside))
        for t in grid:
            values = [c[t] for c in curves if t in c]
            if values:
                rows.append({"level": level, "measure": measure, "relative_step": t,
                             "median": float(np.median(values)), "low": float(np.min(values)),
                             "high": float(np.max(values)), "runs": len(values)})
    return pd.DataFrame(rows, columns=LEVEL_COLUMNS)


# ---- DVCLive training curves, one table per metric across runs -------------------------------------
CURVE_COLUMNS = ["run", "step", "value"]


def curves_table(curves: dict[str, pd.DataFrame], metric: str) -> pd.DataFrame:
    """One metric's curve of every run, stacked (``run``, ``step``, ``value``): DVCLive's TSV of each
    run (``step`` and one value column), so the page draws one chart per metric with a line per run
    instead of one chart per run. Pure."""
    parts = []
    for run, frame in sorted(curves.items()):
        value = [c for c in frame.columns if c not in ("step", "timestamp")]
        if "step" not in frame.columns or len(value) != 1:
            raise ValueError(f"{run}: {metric} needs columns step and one value column, got {list(frame.columns)}")
        parts.append(pd.DataFrame({"run": run, "step": frame["step"].astype(int), "value": frame[value[0]].astype(float)}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CURVE_COLUMNS)
