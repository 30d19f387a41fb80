"""Where the Pythia branch reads and writes; dvc.yaml uses the same layout."""
from __future__ import annotations

from pathlib import Path

from stages import paths

PYTHIA = paths.DATA / "pythia"
EVALS_FILE = PYTHIA / "evals.parquet"


def manifest_file(model: str) -> Path:
    return PYTHIA / "manifests" / f"{model}.json"


def accuracy_file(run: str) -> Path:
    return PYTHIA / "accuracy" / f"{run}.csv"
