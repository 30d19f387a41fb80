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


def hidden_steps(path: str | os.PathLike) -> list[int] | None:
    """The steps the file must hold, from the manifest ``extract`` (``steps``) or ``pythia_measure``
    (``steps``, or its revisions' steps) stored in it; None when it records none."""
    manifest = hidden_manifest(path)
    steps = manifest.get("steps")
    if steps is None and isinstance(manifest.get("revisions"), list):
        steps = [r.get("step") for r in manifest["revisions"] if isinstance(r, dict)]
    if steps is None:
        return None
    if not isinstance(steps, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
        raise PipelineError(f"corrupt Parquet file: {path} (its manifest's 'steps' is not a list of integers)")
    return [int(s) for s in steps]


def iter_steps(path: str | os.PathLike) -> Iterator[tuple[int, dict[int, LayerStates]]]:
    """Yield ``(step, {layer: LayerStates})`` one checkpoint at a time, in increasing step order.

    The ``step`` column is trusted, not the row-group layout: a row group holding several steps (a
    plain read/write round trip merges them) is split by it. Refused, in one line naming the file
    and the step: a step that comes back after a later one or twice; steps other than the ones
    the file's manifest lists (a removed row group); a step whose layers differ from the first
    step's, or whose layers hold different numbers of rows (ragged); a duplicated (layer, sample,
    position) row."""
    path = Path(path)
    pf = open_parquet(path)
    expected = hidden_steps(path)
    seen: list[int] = []
    shape = None
    try:
        for i in range(pf.num_row_groups):
            table = pf.read_row_group(i)
            if table.num_rows == 0:
                continue
            all_steps = table.column("step").to_numpy()
            change = np.flatnonzero(all_steps[1:] != all_steps[:-1]) + 1
            bounds = np.concatenate([[0], change, [len(all_steps)]])
            for a, b in zip(bounds[:-1], bounds[1:]):
                step = int(all_steps[a])
                if seen and step <= seen[-1]:
                    raise PipelineError(f"corrupt Parquet file: {path} (step {step} comes after step {seen[-1]}; "
                                        "expected each step once, in increasing order)")
                seen.append(step)
                part = table.slice(a, b - a)
                layers = part.column("layer").to_numpy()
                labels = part.column("label").to_numpy()
                samples = part.column("sample").to_numpy()
                positions = part.column("position").to_numpy()
                vec = part.column("vector").combine_chunks()
                dim = vec.type.list_size
                matrix = vec.values.to_numpy(zero_copy_only=False).reshape(-1, dim)
                if len(matrix) != len(layers):
                    raise PipelineError(f"corrupt Parquet file: {path} (step {step}: {len(matrix)} vectors for "
                                        f"{len(layers)} rows)")
                keys = np.unique(layers)
                counts = tuple(int((layers == l).sum()) for l in keys)
                this = (tuple(int(l) for l in keys), counts)
                if shape is None:
                    shape = this
                elif this != shape:
                    raise PipelineError(f"corrupt Parquet file: {path} (step {step} has layers/rows "
                                        f"{_shape_text(this)}; step {seen[0]} has {_shape_text(shape)}: "
                                        "expected the same layers and rows at every step)")
                if len(set(counts)) != 1:
                    raise PipelineError(f"corrupt Parquet file: {path} (step {step}: layers hold different numbers "
                                        f"of rows {_shape_text(this)}; expected the same probe rows in every layer)")
                ident = np.stack([layers.astype(np.int64), samples.astype(np.int64), positions.astype(np.int64)], 1)
                if len(np.unique(ident, axis=0)) != len(ident):
                    raise PipelineError(f"corrupt Parquet file: {path} (step {step}: a (layer, sample, position) "
                                        "row appears twice; expected each once)")
                if expected is not None and step not in expected:
                    raise PipelineError(f"corrupt Parquet file: {path} (holds step {step}, which its manifest does "
                                        f"not list; expected its {len(expected)} steps)")
                out = {int(l): LayerStates(matrix[layers == l], labels[layers == l], samples[layers == l])
                       for l in keys}
                yield step, out
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        raise PipelineError(f"corrupt Parquet file: {path} ({' '.join(str(exc).split())})") from None
    if expected is not None and seen != sorted(expected):
        missing = sorted(set(expected) - set(seen))
        raise PipelineError(f"corrupt Parquet file: {path} (lacks step{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(str, missing[:6]))}{' ...' if len(missing) > 6 else ''}: expected the "
                            f"{len(expected)} steps its manifest lists)")


def _shape_text(shape) -> str:
    layers, counts = shape
    return ", ".join(f"{l}:{c}" for l, c in zip(layers, counts))
