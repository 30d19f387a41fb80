"""Where every stage reads and writes; dvc.yaml uses the same layout."""
from __future__ import annotations

from pathlib import Path

DATA = Path("data")
METRICS = Path("metrics")
PLOTS = Path("plots")
LIVE = Path("dvclive")  # DVCLive training curves (stages/training/live.py)


def dataset_dir(task: str, level: str) -> Path:
    return DATA / "datasets" / f"{task}-{level}"


def checkpoint_dir(run: str) -> Path:
    return DATA / "checkpoints" / run


def history_file(run: str) -> Path:
    return DATA / "history" / f"{run}.csv"


def hidden_file(run: str) -> Path:
    return DATA / "hidden" / f"{run}.parquet"


def measures_file(run: str) -> Path:
    return DATA / "measures" / f"{run}.csv"


def trajectory_file(run: str) -> Path:
    return PLOTS / "trajectories" / f"{run}.csv"


def landscape_file(run: str) -> Path:
    return DATA / "landscape" / f"{run}.csv"


def landscape_plot_file(run: str) -> Path:
    return PLOTS / "landscape" / f"{run}.csv"


def run_plot_file(run: str) -> Path:
    """Long plot table of one run (stages/analysis/plot_tables.py), template .dvc/plots/run.json."""
    return PLOTS / "runs" / f"{run}.csv"


def dvclive_dir(run: str) -> Path:
    """DVCLive directory of one run's training curves (``plots/metrics/*.tsv``, ``metrics.json``)."""
    return LIVE / run
