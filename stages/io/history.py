"""Training histories (``data/history/<run>.csv``) as written by the ``train`` stage."""
from __future__ import annotations

from stages import paths
from stages.errors import PipelineError
from stages.io.tables import read_csv


def accuracy_by_step(run: str) -> dict[int, float]:
    """Exact-match test accuracy of run ``run`` by checkpoint step."""
    path = paths.history_file(run)
    history = read_csv(path)
    if not {"step", "test_acc"} <= set(history.columns):
        raise PipelineError(f"corrupt table: {path} (needs columns step, test_acc)")
    return dict(zip(history["step"].astype(int), history["test_acc"].astype(float)))
