"""The evaluation sets: seven diagnostic sets and logical deduction, generated deterministically.

Each item is ``(eval_set, item, context, choices, answer)``; a model answers by the choice with the
highest summed log-likelihood given the context (see :mod:`stages.pythia.scoring`). The same
``seed`` always gives the same items, in the same order, on every platform (string-seeded
``random.Random``).
"""
from __future__ import annotations

import os
import random

import pandas as pd
import pyarrow as pa

from stages.errors import PipelineError
from stages.io.tables import read_parquet, write_parquet
from stages.pythia.grammar import GENERATORS

SCHEMA = pa.schema([("eval_set", pa.string()), ("item", pa.int32()), ("context", pa.string()),
                    ("choices", pa.list_(pa.string())), ("answer", pa.int32())])


def generate(n_per_set: int, seed: int, sets=None) -> pd.DataFrame:
    """``n_per_set`` distinct items of each set (all of :data:`GENERATORS` by default)."""
    rows = []
    for name in sets or GENERATORS:
        if name not in GENERATORS:
            raise PipelineError(f"unknown evaluation set '{name}' (choose from: {', '.join(GENERATORS)})")
        rng = random.Random(f"{seed}:{name}")
        seen, tries = set(), 0
        while len(seen) < n_per_set:
            context, choices, answer = GENERATORS[name](rng)
            tries += 1
            key = (context, tuple(choices))
            if key in seen:
                if tries > 50 * n_per_set:
                    raise PipelineError(f"'pythia.evals.n_per_set' = {n_per_set} exceeds the distinct items of '{name}'")
                continue
            seen.add(key)
            rows.append({"eval_set": name, "item": len(seen) - 1, "context": context, "choices": list(choices),
                         "answer": int(answer)})
    return pd.DataFrame(rows)


def write(frame: pd.DataFrame, path: str | os.PathLike) -> None:
    write_parquet(pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False), path)


def read(path: str | os.PathLike) -> pd.DataFrame:
    table = read_parquet(path)
    if not set(SCHEMA.names) <= set(table.column_names):
        raise PipelineError(f"corrupt Parquet file: {path} (needs columns {', '.join(SCHEMA.names)})")
    frame = table.to_pandas()
    frame["choices"] = frame["choices"].map(list)
    return frame

