"""Dataset directories: ``train.parquet``, ``test.parquet`` (token-id lists) and ``meta.json``."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.errors import PipelineError
from stages.io.atomic import atomic_path
from stages.io.tables import read_json, read_parquet, write_json


def _table(prompt: np.ndarray, answer: np.ndarray) -> pa.Table:
    return pa.table({"prompt": pa.array(prompt.tolist(), pa.list_(pa.int32())),
                     "answer": pa.array(answer.tolist(), pa.list_(pa.int32()))})


def write_dataset(ds, out: str | os.PathLike) -> None:
    """Write a :class:`stages.tasks.dataset.Dataset` as one directory, atomically."""
    with atomic_path(out, directory=True) as tmp:
        pq.write_table(_table(ds.train_prompt, ds.train_answer), tmp / "train.parquet")
        pq.write_table(_table(ds.test_prompt, ds.test_answer), tmp / "test.parquet")
        write_json(ds.meta(), tmp / "meta.json")


def read_meta(directory: str | os.PathLike) -> dict:
    directory = Path(directory)
    if not directory.is_dir():
        raise PipelineError(f"missing dataset directory: {directory}")
    meta = read_json(directory / "meta.json")
    for key in ("prompt_len", "answer_len", "vocab_size", "task", "level"):
        if key not in meta:
            raise PipelineError(f"corrupt dataset meta: {directory / 'meta.json'} lacks '{key}'")
    return meta


def load_split(directory: str | os.PathLike, split: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """(prompt, answer, meta) of one split as int64 arrays ``[n, prompt_len]`` and ``[n, answer_len]``."""
    directory = Path(directory)
    meta = read_meta(directory)
    path = directory / f"{split}.parquet"
    table = read_parquet(path)
    try:
        prompt = np.array(table.column("prompt").to_pylist(), dtype=np.int64)
        answer = np.array(table.column("answer").to_pylist(), dtype=np.int64)
    except (KeyError, ValueError) as exc:
        raise PipelineError(f"corrupt Parquet file: {path} ({exc})") from None
    if (prompt.ndim != 2 or answer.ndim != 2 or len(prompt) == 0 or prompt.shape[1] != meta["prompt_len"]
            or answer.shape[1] != meta["answer_len"]):
        raise PipelineError(f"corrupt Parquet file: {path} (shapes do not match meta.json)")
    return prompt, answer, meta
