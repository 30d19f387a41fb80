"""Validated readers of the per-run tables that stage ``events`` reads: ``data/measures/<run>.csv``
(written by ``measure`` and ``pythia_measure``) and ``data/landscape/<run>.csv`` (written by
``landscape``). Every failure is one :class:`~stages.errors.PipelineError` line naming the file.

Both refuse a file that was cut (no newline at its end, or a row with fewer fields than the
header: pandas would read the missing cells as NaN), a missing column, and a non-numeric cell
in a numeric column (naming the column and line).
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from stages.errors import PipelineError
from stages.io.tables import numeric_column, read_csv

MEASURE_COLUMNS = ("step", "layer", "rankme", "test_acc", "n_params")
LANDSCAPE_COLUMNS = ("run", "step", "test_acc", "n_params")
_TEXT_COLUMNS = ("run",)
_BOOLEAN_TEXT = {"True", "False"}


def _require_columns(frame: pd.DataFrame, path: Path, columns) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise PipelineError(f"corrupt table: {path} (lacks column{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(missing)}; needs {', '.join(columns)})")
    if frame.empty:
        raise PipelineError(f"corrupt table: {path} (no rows)")


def _steps_text(steps) -> str:
    steps = list(steps)
    return ", ".join(map(str, steps)) if len(steps) <= 6 else f"{', '.join(map(str, steps[:6]))}, ... ({len(steps)})"


def read_measures(path: str | os.PathLike, expected_steps=None) -> pd.DataFrame:
    """One run's measures table, validated.

    Columns ``step``, ``layer``, ``rankme``, ``test_acc`` and ``n_params`` must exist and hold numbers:
    ``step``, ``layer`` and ``n_params`` in every row, whole and non-negative; ``rankme`` and
    ``test_acc`` finite where present (an empty cell is NaN: a layer whose states do not vary).
    Every step must have the same set of layers, each once. With ``expected_steps`` (e.g. the
    checkpoint manifest's steps) the table's steps must be exactly those. Returns the frame with
    those columns as numbers (``step``, ``layer``, ``n_params`` int64)."""
    path = Path(path)
    frame = read_csv(path, full_rows=True)
    _require_columns(frame, path, MEASURE_COLUMNS)
    for column in ("step", "layer", "n_params"):
        frame[column] = numeric_column(frame, column, path, required=True, finite=True, integer=True, minimum=0)
    for column in ("rankme", "test_acc"):
        frame[column] = numeric_column(frame, column, path, finite=True)

    duplicated = frame.duplicated(["step", "layer"])
    if duplicated.any():
        row = frame[duplicated].iloc[0]
        raise PipelineError(f"corrupt table: {path} (step {row['step']} layer {row['layer']} appears twice)")
    layers = frame.groupby("step", sort=True)["layer"].agg(lambda s: tuple(sorted(s)))
    first_step, first = layers.index[0], layers.iloc[0]
    for step, these in layers.items():
        if these != first:
            raise PipelineError(f"corrupt table: {path} (step {step} has layers {', '.join(map(str, these))}; "
                                f"step {first_step} has {', '.join(map(str, first))})")
    if expected_steps is not None:
        expected = sorted(int(s) for s in expected_steps)
        found = [int(s) for s in layers.index]
        if found != expected:
            missing = sorted(set(expected) - set(found))
            extra = sorted(set(found) - set(expected))
            why = "; ".join(part for part in (missing and f"lacks steps {_steps_text(missing)}",
                                              extra and f"has unexpected steps {_steps_text(extra)}") if part)
            raise PipelineError(f"corrupt table: {path} ({why}: expected the {len(expected)} steps "
                                f"{_steps_text(expected)})")
    return frame


def read_landscape(path: str | os.PathLike) -> pd.DataFrame:
    """One run's landscape table, validated: a header with ``run``, ``step``, ``test_acc`` and
    ``n_params``; no row cut short; ``step`` whole, non-negative and distinct in every row; every
    other column except ``run`` numeric (empty cells are NaN: a measure not taken or not converged)
    or True/False (flags such as ``gradcov_saturated``). Returns the frame with the numeric columns
    as numbers and the flag columns as booleans (NaN where empty)."""
    path = Path(path)
    frame = read_csv(path, full_rows=True)
    _require_columns(frame, path, LANDSCAPE_COLUMNS)
    frame["step"] = numeric_column(frame, "step", path, required=True, finite=True, integer=True, minimum=0)
    duplicated = frame["step"].duplicated()
    if duplicated.any():
        raise PipelineError(f"corrupt table: {path} (step {frame['step'][duplicated].iloc[0]} appears twice)")
    for column in frame.columns:
        if column in _TEXT_COLUMNS or column == "step" or frame[column].dtype == bool:
            continue
        cells = frame[column]
        present = cells.dropna()
        if cells.dtype == object and len(present) and present.astype(str).isin(_BOOLEAN_TEXT).all():
            frame[column] = cells.map(lambda v: v if pd.isna(v) else str(v) == "True")  # a flag with gaps
            continue
        frame[column] = numeric_column(frame, column, path)
    return frame

