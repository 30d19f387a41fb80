"""Training curves through DVCLive: one DVCLive step per checkpoint, written so that a rerun
reproduces the files byte for byte.

``dvclive/<run>/`` holds only ``plots/metrics/<name>.tsv`` (columns ``step`` and the metric), drawn
by ``dvc plots show`` through the top-level ``plots`` of dvc.yaml (directory ``dvclive``: every file
under it is a chart, so DVCLive's ``metrics.json`` summary, which is not a table, is not written:
``make_summary``/``next_step`` are not called). Deterministic by construction: no ``timestamp``
column (``log_metric(..., timestamp=False)``), no DVC experiment (``save_dvc_exp=False``), no
dvc.yaml of DVCLive's own (``dvcyaml=None``: the project's dvc.yaml declares the plots), no report,
no system monitor. ``Live.end()`` is never called either: all it would add is the summary, the
experiment bookkeeping switched off here, a Studio "done" event and, inside ``dvc exp run``, a
``git add`` of the log directory.

The log is written into a temporary sibling that replaces ``dvclive/<run>`` only when training
finishes (:func:`stages.io.atomic.atomic_path`), like every other output of the pipeline.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import os
from pathlib import Path
from typing import Callable, Iterator

from stages.io.atomic import atomic_path

# history column of stages/training/loop.py -> DVCLive metric name (a "/" nests it in plots/metrics/)
TRAIN_METRICS = {"train_loss": "train/loss", "test_loss": "test/loss", "batch_loss": "train/batch_loss",
                 "train_acc": "train/acc", "test_acc": "test/acc", "lr": "lr"}


@contextlib.contextmanager
def curve_log(directory: str | os.PathLike) -> Iterator[Callable[[int, dict], None]]:
    """Yield ``log(step, values)``: one DVCLive step per call, ``values`` maps metric names to numbers
    (non-finite ones, e.g. the batch loss before the first update, are left out). ``directory``
    appears, complete, only when the block succeeds."""
    from dvclive import Live

    class FilesOnly(Live):
        """DVCLive without its DVC integration, which nothing here uses (no experiment, no dvc.yaml,
        no report). Its repository probe calls ``scm.get_rev()``, which raises in a git repository
        without commits, and runs ``dvc init`` in a git repository that is not a DVC one."""

        def _init_dvc(self):
            pass

    with atomic_path(Path(directory), directory=True) as tmp:
        live = FilesOnly(dir=str(tmp), resume=False, report=None, save_dvc_exp=False, dvcyaml=None,
                         monitor_system=False)
        last = [-1]

        def log(step: int, values: dict) -> None:
            step = int(step)
            if step <= last[0]:
                raise ValueError(f"curve steps must increase: {step} after {last[0]}")
            last[0] = step
            live.step = step
            for name, value in values.items():
                if isinstance(value, numbers.Real) and math.isfinite(value):
                    live.log_metric(name, float(value), timestamp=False)

        yield log


def history_logger(log: Callable[[int, dict], None]) -> Callable[[dict], None]:
    """An ``on_checkpoint`` callback for :func:`stages.training.loop.train`: one history row -> one step."""
    def on_checkpoint(row: dict) -> None:
        log(row["step"], {name: row[column] for column, name in TRAIN_METRICS.items() if column in row})
    return on_checkpoint
