"""Parquet, CSV and JSON tables with errors that name the file."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

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


def read_csv(path: str | os.PathLike) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"missing table: {path}")
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise PipelineError(f"corrupt table: {path} ({exc})") from None


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
