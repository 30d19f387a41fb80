"""Hidden-state Parquet files: one row per (step, layer, sample, position), one row group per step.

Columns: ``step`` int32, ``layer`` int16 (0 = embeddings, ``l`` = after block ``l``), ``sample``
int32 (row of the probe set), ``position`` int16 (token position), ``label`` int32 (answer token
predicted there) and ``vector`` fixed-size list of float32.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.errors import PipelineError
from stages.io.tables import open_parquet


def schema(dim: int, metadata: dict[str, str] | None = None) -> pa.Schema:
    return pa.schema([("step", pa.int32()), ("layer", pa.int16()), ("sample", pa.int32()),
                      ("position", pa.int16()), ("label", pa.int32()),
                      ("vector", pa.list_(pa.float32(), dim))], metadata=metadata)


def step_table(step: int, states: np.ndarray, samples: np.ndarray, positions: np.ndarray, labels: np.ndarray,
               sch: pa.Schema) -> pa.Table:
    """``states`` is ``[n_layers, n_rows, dim]``; rows are aligned with samples/positions/labels."""
    n_layers, n_rows, dim = states.shape
    flat = pa.array(np.ascontiguousarray(states, dtype=np.float32).reshape(-1))
    return pa.table({
        "step": pa.array(np.full(n_layers * n_rows, step, np.int32)),
        "layer": pa.array(np.repeat(np.arange(n_layers, dtype=np.int16), n_rows)),
        "sample": pa.array(np.tile(samples.astype(np.int32), n_layers)),
        "position": pa.array(np.tile(positions.astype(np.int16), n_layers)),
        "label": pa.array(np.tile(labels.astype(np.int32), n_layers)),
        "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
    }, schema=sch)


def hidden_manifest(path: str | os.PathLike) -> dict:
    """The run manifest that ``extract`` stores in the file's schema metadata."""
    meta = open_parquet(path).schema_arrow.metadata or {}
    try:
        return json.loads(meta.get(b"manifest", b"{}"))
    except json.JSONDecodeError:
        raise PipelineError(f"corrupt Parquet file: {path} (bad manifest metadata)") from None


class LayerStates(NamedTuple):
    vectors: np.ndarray  # [n, d]
    labels: np.ndarray  # [n]
    samples: np.ndarray  # [n]


def iter_steps(path: str | os.PathLike) -> Iterator[tuple[int, dict[int, LayerStates]]]:
    """Yield ``(step, {layer: LayerStates})`` one checkpoint (row group) at a time."""
    path = Path(path)
    pf = open_parquet(path)
    try:
        for i in range(pf.num_row_groups):
            table = pf.read_row_group(i)
            steps = table.column("step").to_numpy()
            if len(steps) == 0:
                continue
            layers = table.column("layer").to_numpy()
            labels = table.column("label").to_numpy()
            samples = table.column("sample").to_numpy()
            vec = table.column("vector").combine_chunks()
            dim = vec.type.list_size
            matrix = vec.values.to_numpy(zero_copy_only=False).reshape(-1, dim)
            out = {int(l): LayerStates(matrix[layers == l], labels[layers == l], samples[layers == l])
                   for l in np.unique(layers)}
            yield int(steps[0]), out
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise PipelineError(f"corrupt Parquet file: {path} ({exc})") from None
