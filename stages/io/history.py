"""Training histories (``data/history/<run>.csv``) as written by the ``train`` stage."""
from __future__ import annotations

from stages import paths
from stages.errors import PipelineError
from stages.io.checkpoints import MANIFEST, read_manifest
from stages.io.tables import check_range, numeric_column, read_csv


def accuracy_by_step(run: str) -> dict[int, float]:
    """Exact-match test accuracy of run ``run`` by checkpoint step, from a validated history.

    The history must be whole (ends with a newline, no row cut short), have ``step`` and ``test_acc``
    with finite numbers in every row, numbers (or empty cells) in every other column but ``run``,
    accuracies (``test_acc``, ``train_acc``) in [0, 1],
    and list exactly the steps of the run's checkpoint manifest (``data/checkpoints/<run>/manifest.json``),
    in order. Every error is one line naming the file."""
    path = paths.history_file(run)
    history = read_csv(path, full_rows=True)
    if not {"step", "test_acc"} <= set(history.columns):
        raise PipelineError(f"corrupt table: {path} (needs columns step, test_acc)")
    steps = numeric_column(history, "step", path, required=True, finite=True, integer=True, minimum=0)
    acc = numeric_column(history, "test_acc", path, required=True, finite=True)
    history["test_acc"] = acc
    for column in history.columns:
        if column not in ("run", "step", "test_acc"):
            history[column] = numeric_column(history, column, path)  # losses may be empty (no batch before step 0)
    for column in ("test_acc", "train_acc"):
        if column in history.columns:
            check_range(history, column, path, 0.0, 1.0, "an exact-match accuracy in [0, 1]")
    directory = paths.checkpoint_dir(run)
    expected = [int(s) for s in read_manifest(directory)["steps"]]
    found = [int(s) for s in steps]
    if found != expected:
        at = next((i for i, (a, b) in enumerate(zip(found, expected)) if a != b), min(len(found), len(expected)))
        where = (f"row {at + 1} is step {found[at]}, the manifest's is {expected[at]}"
                 if at < min(len(found), len(expected)) else
                 f"it has {len(found)} steps, the manifest {len(expected)}")
        raise PipelineError(f"corrupt table: {path} (its steps do not match the checkpoint manifest "
                            f"{directory / MANIFEST}: {where})")
    return dict(zip(found, acc.astype(float)))
