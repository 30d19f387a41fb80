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
