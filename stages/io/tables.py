"""Parquet, CSV and JSON tables with errors that name the file."""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from stages.errors import PipelineError
from stages.io.atomic import atomic_path, write_text


def read_parquet(path: str | os.PathLike, columns=None) -> pa.Table:
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"missing Parquet file: {path}")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise PipelineError(f"corrupt Parquet file: {path} ({exc})") from None


def open_parquet(path: str | os.PathLike) -> pq.ParquetFile:
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"missing Parquet file: {path}")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise PipelineError(f"corrupt Parquet file: {path} ({exc})") from None


def write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_csv(path: str | os.PathLike, full_rows: bool = False) -> pd.DataFrame:
    """A CSV table written by :func:`write_csv`. A file that does not end with a newline was cut
    (an interrupted copy or write) and is refused, as is one pandas cannot parse. With
    ``full_rows``, every row must also have as many fields as the header (pandas fills a short
    row with NaN without a word). Errors are one line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"missing table: {path}")
    if not _ends_with_newline(path):
        raise PipelineError(f"corrupt table: {path} (truncated: it does not end with a newline)")
    if full_rows:
        _check_row_widths(path)
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise PipelineError(f"corrupt table: {path} ({_one_line(exc)})") from None


def _ends_with_newline(path: Path) -> bool:
    """True for a file whose last byte is a newline, and for an empty file (pandas reports that one)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return True
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def _check_row_widths(path: Path) -> None:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            for row in reader:
                if row and len(row) != len(header):  # blank lines: pandas skips them too
                    raise PipelineError(f"corrupt table: {path} (line {reader.line_num} has {len(row)} fields, "
                                        f"the header {len(header)})")
    except (csv.Error, UnicodeDecodeError) as exc:
        raise PipelineError(f"corrupt table: {path} ({_one_line(exc)})") from None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def numeric_column(frame: pd.DataFrame, column: str, path: str | os.PathLike, *, required: bool = False,
                   finite: bool = False, integer: bool = False, minimum: float | None = None) -> pd.Series:
    """Column ``column`` of the table read from ``path`` as numbers, checked: every non-empty cell must
    be a number; with ``required`` no cell may be empty, with ``finite`` no number may be +-inf, with
    ``integer`` every number must be whole (the result is then int64 when ``required``), with
    ``minimum`` none may lie below it. The one-line error names the file, the column and the line."""
    cells = frame[column]
    if cells.dtype == bool:
        raise PipelineError(f"corrupt table: {path} (column '{column}' holds True/False, not numbers)")
    values = pd.to_numeric(cells, errors="coerce")

    def fail(mask, what: str):
        i = int(np.flatnonzero(np.asarray(mask))[0])
        raise PipelineError(f"corrupt table: {path} (column '{column}' {what} in line {i + 2}: {cells.iloc[i]!r})")

    if (bad := values.isna() & cells.notna()).any():
        fail(bad, "holds a non-numeric value")
    if required and (bad := values.isna()).any():
        fail(bad, "has an empty cell")
    if finite and (bad := np.isinf(values.to_numpy(dtype=float))).any():
        fail(bad, "holds an infinite value")
    if integer and (bad := values.notna() & (values % 1 != 0)).any():
        fail(bad, "holds a non-integer value")
    if minimum is not None and (bad := values < minimum).any():
        fail(bad, f"holds a value below {minimum:g}")
    return values.astype("int64") if integer and required else values


def check_range(frame: pd.DataFrame, column: str, path: str | os.PathLike, low: float, high,
                expectation: str, rows=None) -> None:
    """Every number of ``column`` (already numeric; NaN cells skipped) must lie in ``[low, high]``
    (``high`` a number or a per-row Series), checked on ``rows`` (a boolean mask) or all rows. The
    one-line error names the file, the line, the row's step (and layer) and ``expectation``."""
    values = frame[column].astype(float)
    tol = 1e-6 * np.maximum(1.0, np.abs(values))
    bad = (values < low - tol) | (values > high + tol)
    if rows is not None:
        bad &= rows
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise PipelineError(f"corrupt table: {path} ({row_where(frame, i)}: '{column}' = {float(values.iloc[i])!r}, "
                            f"expected {expectation})")


def row_where(frame: pd.DataFrame, i: int) -> str:
    """``line N, step S[, layer L]`` of row ``i`` (0-based) of a table read from CSV."""
    parts = [f"line {i + 2}"]
    for key in ("step", "layer", "eval_set"):
        if key in frame.columns:
            parts.append(f"{key} {frame[key].iloc[i]}")
    return ", ".join(parts)


def check_step_order(frame: pd.DataFrame, path: str | os.PathLike) -> None:
    """Rows grouped by step in increasing order (how the stages write them): a step never comes back
    after a later one."""
    steps = frame["step"].to_numpy()
    change = np.flatnonzero(steps[1:] != steps[:-1]) + 1
    starts = steps[np.concatenate([[0], change])] if len(steps) else steps
    if len(starts) and ((np.diff(starts) <= 0).any()):
        k = int(np.flatnonzero(np.diff(starts) <= 0)[0]) + 1
        i = int(np.concatenate([[0], change])[k])
        raise PipelineError(f"corrupt table: {path} (line {i + 2}: step {steps[i]} after step {starts[k - 1]}; "
                            "expected each step once, in increasing order)")


def check_checkpoint_count(frame: pd.DataFrame, path: str | os.PathLike, column: str = "n_checkpoints") -> None:
    """With an ``n_checkpoints`` column (what the writing stage measured; the same in every row), the
    table must hold exactly that many distinct steps: a table cut at a row boundary, or one with rows
    removed, is refused."""
    if column not in frame.columns:
        return
    counts = numeric_column(frame, column, path, required=True, integer=True, minimum=1)
    if counts.nunique() != 1:
        i = int(np.flatnonzero((counts != counts.iloc[0]).to_numpy())[0])
        raise PipelineError(f"corrupt table: {path} ({row_where(frame, i)}: '{column}' = {counts.iloc[i]}, "
                            f"expected {counts.iloc[0]} as in line 2)")
    found = frame["step"].nunique()
    if found != counts.iloc[0]:
        raise PipelineError(f"corrupt table: {path} (holds {found} steps, up to step {frame['step'].max()}; "
                            f"expected the {counts.iloc[0]} of '{column}': cut, or rows removed)")


def write_csv(frame: pd.DataFrame, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def _clean(value):
    """JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(data, path: str | os.PathLike) -> None:
    write_text(path, json.dumps(_clean(data), indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike):
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"missing file: {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PipelineError(f"corrupt JSON file: {path} ({exc})") from None
