"""Validated readers of the per-run tables that stage ``events`` reads: ``data/measures/<run>.csv``
(written by ``measure`` and ``pythia_measure``) and ``data/landscape/<run>.csv`` (written by
``landscape``). Every failure is one :class:`~stages.errors.PipelineError` line naming the file.

Both refuse a file that was cut (no newline at its end, or a row with fewer fields than the
header: pandas would read the missing cells as NaN), a missing column, and a non-numeric cell
in a numeric column (naming the column and line); and a well-formed table whose values cannot be
right: steps out of order or repeated, fewer steps than the ``n_checkpoints`` its writer recorded
(a table cut at a row boundary), accuracies outside [0, 1], RankMe outside [1, dim], a missing
centred RankMe where a layer's states vary. docs/reliability.md lists the checks.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from stages.config import LEVELS, TASK_NAMES
from stages.errors import PipelineError
from stages.io.tables import (check_checkpoint_count, check_range, check_step_order, numeric_column, read_csv,
                               row_where)

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

    _check_measure_values(frame, path)
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
    check_step_order(frame, path)
    check_checkpoint_count(frame, path)
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


_SMALL_RUN = re.compile(rf"({'|'.join(TASK_NAMES)})-({'|'.join(LEVELS)})-[A-Za-z0-9._-]+-s\d+")


def _exact_match(frame: pd.DataFrame, path: Path) -> bool:
    """A small-model run of the grid (``<task>-<level>-<model>-s<seed>``), whose ``test_acc`` is an
    exact-match rate; other runs (Pythia, the monitor's) carry a chance-corrected accuracy."""
    runs = frame["run"].astype(str) if "run" in frame.columns else pd.Series([path.stem])
    return bool(runs.map(lambda r: bool(_SMALL_RUN.fullmatch(r))).all())


def _check_measure_values(frame: pd.DataFrame, path: Path) -> None:
    """Values a measures row cannot take. ``test_acc``: a grid run's exact match in [0, 1]; another
    run's (Pythia, the monitor's) is chance-corrected, in [-1, 1]. ``probe_acc`` in [0, 1]. ``rankme`` and ``rankme_centred`` in
    [1, dim] (``dim``: the hidden size, where the table has it); ``rankme_centred`` present wherever
    ``varies`` says the layer's states vary."""
    low = 0.0 if _exact_match(frame, path) else -1.0
    check_range(frame, "test_acc", path, low, 1.0, f"an accuracy in [{low:g}, 1]")
    for column in ("probe_acc",):
        if column in frame.columns:
            frame[column] = numeric_column(frame, column, path, finite=True)
            check_range(frame, column, path, 0.0, 1.0, "an accuracy in [0, 1]")
    high, bound = np.inf, "[1, dim]"
    if "dim" in frame.columns:
        frame["dim"] = numeric_column(frame, "dim", path, required=True, integer=True, minimum=1)
        high, bound = frame["dim"], "a RankMe in [1, dim] (dim: the hidden size in column 'dim')"
    check_range(frame, "rankme", path, 1.0, high, bound if "dim" in frame.columns else "a RankMe of at least 1")
    if "rankme_centred" in frame.columns:
        frame["rankme_centred"] = numeric_column(frame, "rankme_centred", path, finite=True)
        check_range(frame, "rankme_centred", path, 1.0, high,
                    bound if "dim" in frame.columns else "a RankMe of at least 1")
        if "varies" in frame.columns:
            varies = frame["varies"].astype(str).str.lower().isin(["true", "1", "1.0"])
            missing = varies & frame["rankme_centred"].isna()
            if missing.any():
                i = int(np.flatnonzero(missing.to_numpy())[0])
                raise PipelineError(f"corrupt table: {path} ({row_where(frame, i)}: 'rankme_centred' is empty, "
                                    "expected a number where the layer's states vary ('varies' True))")


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
    check_step_order(frame, path)
    check_checkpoint_count(frame, path)
    for column in frame.columns:
        if column in _TEXT_COLUMNS or column == "step" or frame[column].dtype == bool:
            continue
        cells = frame[column]
        present = cells.dropna()
        if cells.dtype == object and len(present) and present.astype(str).isin(_BOOLEAN_TEXT).all():
            frame[column] = cells.map(lambda v: v if pd.isna(v) else str(v) == "True")  # a flag with gaps
            continue
        frame[column] = numeric_column(frame, column, path)
    check_range(frame, "test_acc", path, 0.0, 1.0, "an accuracy in [0, 1]")
    return frame


ACCURACY_COLUMNS = ("eval_set", "step", "accuracy", "chance")


def read_accuracy(path: str | os.PathLike, expected_steps=None) -> pd.DataFrame:
    """A Pythia run's accuracy table (``data/pythia/accuracy/<run>.csv``: one row per evaluation set
    and revision), validated: columns eval_set, step, accuracy, chance; ``step`` whole and
    non-negative, ``accuracy`` in [0, 1], ``chance`` in (0, 1), ``n_items`` (if present) a positive
    integer; each (eval_set, step) once; every set with the same steps, in increasing order; and with
    ``expected_steps`` (the run's measures table) exactly those steps."""
    path = Path(path)
    frame = read_csv(path, full_rows=True)
    _require_columns(frame, path, ACCURACY_COLUMNS)
    frame["step"] = numeric_column(frame, "step", path, required=True, finite=True, integer=True, minimum=0)
    frame["accuracy"] = numeric_column(frame, "accuracy", path, required=True, finite=True)
    frame["chance"] = numeric_column(frame, "chance", path, required=True, finite=True)
    if "n_items" in frame.columns:
        frame["n_items"] = numeric_column(frame, "n_items", path, required=True, integer=True, minimum=1)
    check_range(frame, "accuracy", path, 0.0, 1.0, "an accuracy in [0, 1]")
    bad = (frame["chance"] <= 0) | (frame["chance"] >= 1)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise PipelineError(f"corrupt table: {path} ({row_where(frame, i)}: 'chance' = {float(frame['chance'].iloc[i])!r}, "
                            "expected a chance level in (0, 1))")
    duplicated = frame.duplicated(["eval_set", "step"])
    if duplicated.any():
        i = int(np.flatnonzero(duplicated.to_numpy())[0])
        raise PipelineError(f"corrupt table: {path} ({row_where(frame, i)} appears twice)")
    steps = {name: list(group["step"]) for name, group in frame.groupby("eval_set", sort=False)}
    first_set, first = next(iter(steps.items()))
    for name, these in steps.items():
        if these != sorted(these):
            raise PipelineError(f"corrupt table: {path} (evaluation set '{name}': steps out of order, expected "
                                "increasing steps)")
        if sorted(these) != sorted(first):
            raise PipelineError(f"corrupt table: {path} (evaluation set '{name}' has steps {_steps_text(these)}; "
                                f"'{first_set}' has {_steps_text(first)}: expected the same steps for every set)")
    if expected_steps is not None:
        expected = sorted(int(s) for s in expected_steps)
        if sorted(first) != expected:
            raise PipelineError(f"corrupt table: {path} (has steps {_steps_text(sorted(first))}; expected the "
                                f"{len(expected)} steps of the run's measures table: {_steps_text(expected)})")
    return frame

