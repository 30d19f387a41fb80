"""Stage ``plot_pages``: the tables behind the first charts of ``dvc plots show`` (docs/plots.md).

Reads the committed per-run plot tables (``plots/trajectories/<run>.csv``, the acquisition step from
``plots/runs/<run>.csv``) and the DVCLive curves (``dvclive/<run>/plots/metrics/*.tsv``) of every run
of the grid (and the Pythia suite), and writes:

* ``plots/aligned/runs.csv``: RankMe, centred RankMe and accuracy of every acquiring run against the
  step relative to its acquisition (the paper-style figure, one panel per task and level, seeds
  overlaid);
* ``plots/aligned/levels.csv``: per difficulty level, the median and range over runs of the same
  curves against step / acquisition step;
* ``plots/curves/<metric>.csv``: one DVCLive metric of every run, stacked (one chart per metric, a
  line per run; the learning rate, a schedule and not a result, is left out).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from stages import paths
from stages.analysis.plot_tables import aligned_table, curves_table, level_summary
from stages.config import run_id
from stages.errors import PipelineError
from stages.io.atomic import output_set
from stages.io.tables import read_csv, write_csv
from stages.pythia.settings import LEVEL as PYTHIA_LEVEL
from stages.pythia.settings import TASK as PYTHIA_TASK
from stages.params import Params
from stages.pipeline import stage

CURVES = ("train/loss", "train/acc", "test/loss", "test/acc", "train/batch_loss")  # not lr: a flat schedule
ALIGNED = paths.PLOTS / "aligned"
CURVES_DIR = paths.PLOTS / "curves"


def grid(params) -> list[dict]:
    g = params.grid
    runs = [{"task": t, "level": l, "model": m, "seed": s}
            for t, l, m, s in itertools.product(g.tasks, g.levels, g.models, g.seeds)]
    if params.pythia is not None:
        runs += [{"task": PYTHIA_TASK, "level": PYTHIA_LEVEL, "model": m, "seed": None} for m in params.pythia.models]
    for r in runs:
        r["run"] = run_id(r["task"], r["level"], r["model"], r["seed"])
    return runs


def acquisition_step(run: str):
    """The acquisition step recorded in ``plots/runs/<run>.csv`` (None when the run never acquires)."""
    table = read_csv(paths.run_plot_file(run))
    rows = table[table["event"].astype(str) == "acquisition"]
    return None if rows.empty else int(rows["event_step"].iloc[0])


def read_tsv(path: Path) -> pd.DataFrame:
    """A DVCLive metric file (tab-separated: step, the value, maybe a timestamp); one-line errors."""
    try:
        return pd.read_csv(path, sep="\t")
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise PipelineError(f"corrupt DVCLive table: {path} ({exc.__class__.__name__})") from None


def live_curves(runs: list[dict]) -> dict[str, pd.DataFrame]:
    """``{metric file name: stacked table}`` of :data:`CURVES` over the runs' DVCLive folders (the Pythia
    suite's curves are under ``dvclive/pythia-suite/<model>``)."""
    out = {}
    folders = {}
    for r in runs:
        folder = (paths.LIVE / "pythia-suite" / r["model"]) if r["task"] == PYTHIA_TASK else paths.dvclive_dir(r["run"])
        folders[r["run"]] = folder / "plots" / "metrics"
    for metric in CURVES:
        frames = {}
        for rid, folder in folders.items():
            path = folder / f"{metric}.tsv"
            if path.is_file():
                frames[rid] = read_tsv(path)
        if frames:
            out[metric.replace("/", "_")] = curves_table(frames, metric)
    return out


def plot_pages(params) -> dict[Path, pd.DataFrame]:
    runs = grid(params)
    for r in runs:
        path = paths.trajectory_file(r["run"])
        if not path.is_file():
            raise PipelineError(f"missing plot table: {path} (run stage measure or pythia_measure first)")
        r["trajectory"] = read_csv(path)
        r["acquisition"] = acquisition_step(r["run"])
    aligned = aligned_table(runs)
    tables = {ALIGNED / "runs.csv": aligned, ALIGNED / "levels.csv": level_summary(aligned)}
    tables.update({CURVES_DIR / f"{name}.csv": frame for name, frame in live_curves(runs).items()})
    return tables


@stage(threads=False)
def main(args, params: Params) -> None:
    tables = plot_pages(params)
    with output_set():
        for path, frame in tables.items():
            write_csv(frame, path)
    print(", ".join(str(p) for p in tables))


if __name__ == "__main__":
    main()
