"""Stage ``events``: per-run events for every seed, per-level statistics with bootstrap intervals,
seed agreement, sensitivity of the precursor rate, landscape and Pythia events, cross-scale statistics.

Reads ``data/measures/<run>.csv`` (and ``data/landscape/<run>.csv``, ``data/pythia/accuracy/<run>.csv``
where present) for every run of the grid in params.yaml and writes

* ``data/events/runs.csv``: one row per run and measure (raw and centred RankMe, landscape measures):
  dip, acquisition, lead, precursor verdict, layer order;
* ``data/events/layers.csv``: the dip of every varying layer; ``data/events/cells.csv``: the verdict of
  each (task, level, model) over seeds and the share of seeds that agree;
  ``data/events/pythia_sets.csv``: Pythia events per evaluation set;
  ``data/events/cross_scale.csv``: the cross-scale statistics as a flat table;
  ``data/events/levels.json``: every per-level statistic with its 95% interval, per measure, and the
  verdict of each configuration; ``data/events/cross_scale.json``: the cross-scale statistics;
* ``metrics/summary.json``: the few numbers ``dvc metrics show`` / ``dvc exp show`` read (verdict
  counts, precursor shares per grouping, acquired runs); ``metrics/paper.csv`` and
  ``metrics/paper.md``: this run next to the paper's headline claims, with the verdict rule;
* ``plots/sensitivity/{threshold,resolution}.csv``: precursor rate per level against the rule's
  threshold and against checkpoint resolution; ``plots/runs/<run>.csv``: RankMe and accuracy with
  the run's collapse, recovery and acquisition (stages/analysis/plot_tables.py);
  ``plots/figures/trajectories.png``.
"""
from __future__ import annotations

if __name__ == "__main__":  # a stage process: its environment before numpy and torch load (stages/runtime.py)
    from stages.runtime import prepare
    prepare()

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stages import paths
from stages.analysis.cross_scale import cross_scale, cross_scale_table
from stages.analysis.event_rules import Rules
from stages.analysis.landscape_events import landscape_event_params, run_measures
from stages.analysis.pythia_events import HALFWAY, set_events
from stages.analysis.paper import compare, markdown, model_sizes, summary_metrics
from stages.analysis.plot_tables import run_plot_table
from stages.analysis.runs import run_events
from stages.analysis.trajectories import trajectory
from stages.analysis.summary import level_summary, resolution_sensitivity, seed_agreement, threshold_sensitivity
from stages.config import run_id
from stages.errors import PipelineError
from stages.io.measure_tables import read_accuracy, read_landscape, read_measures
from stages.io.atomic import output_set, write_text
from stages.io.tables import read_csv, write_csv, write_json
from stages.pythia.paths import accuracy_file
from stages.params import Events as EventsParams
from stages.params import Params
from stages.pythia.settings import LEVEL as PYTHIA_LEVEL
from stages.pythia.settings import TASK as PYTHIA_TASK
from stages.pipeline import stage

EVENTS_DIR = paths.DATA / "events"
SENSITIVITY_DIR = paths.PLOTS / "sensitivity"


@dataclass(frozen=True)
class Settings:
    rules: Rules
    measure: str            # geometry measure whose dip gives each run's verdict
    layer: object           # "last" | "mean" | layer number
    resamples: int
    bootstrap_seed: int
    thresholds: tuple[float, ...]
    resolutions: tuple[int, ...]


def settings(cfg: EventsParams) -> Settings:
    """The ``events`` section (checked by the schema: every error names its key) as :class:`Settings`."""
    rules = Rules(min_depth=cfg.min_depth, recovery_fraction=cfg.recovery_fraction, threshold=cfg.acquisition_threshold,
                  window=cfg.acquisition_window, min_lead=cfg.precursor_min_lead, min_checkpoints=cfg.min_checkpoints)
    return Settings(rules=rules, measure=cfg.measure, layer=cfg.layer, resamples=cfg.bootstrap.resamples,
                    bootstrap_seed=cfg.bootstrap.seed, thresholds=tuple(cfg.sensitivity.min_lead),
                    resolutions=tuple(cfg.sensitivity.n_checkpoints))


def grid_runs(params: Params) -> list[tuple[str, str, str, int | None]]:
    """(task, level, model, seed) of every run; Pythia runs (task "pythia", level "lm", model = size) have no
    seed, and there are none when params.yaml has no ``pythia`` section."""
    grid = params.grid
    small = list(itertools.product(grid.tasks, grid.levels, grid.models, grid.seeds))
    pythia = [] if params.pythia is None else [(PYTHIA_TASK, PYTHIA_LEVEL, m, None) for m in params.pythia.models]
    return small + pythia


def events(params: Params) -> dict:
    s = settings(params.events)
    land_p = landscape_event_params(params.landscape_events)
    pythia_threshold = HALFWAY if params.pythia is None else params.pythia.acquisition
    run_rows, layer_rows, frames, steps, idents, set_rows, plot_tables = [], [], {}, {}, [], [], {}
    for task, level, model, seed in grid_runs(params):
        rid = run_id(task, level, model, seed)
        frame = read_measures(paths.measures_file(rid))
        frames[rid] = frame
        if isinstance(s.layer, int) and s.layer not in set(frame["layer"]):  # sizes against the data (issue 24)
            raise PipelineError(f"'events.layer' = {s.layer} is not a layer of run {rid} ({paths.measures_file(rid)} "
                                f"has layers {frame['layer'].min()}..{frame['layer'].max()}): at most {frame['layer'].max()}")
        steps[rid] = np.sort(frame["step"].unique())
        ident = {"run": rid, "task": task, "level": level, "model": model, "seed": seed,
                 "n_params": int(frame["n_params"].iloc[0])}
        idents.append(ident)
        measures, layers = run_events(frame, s.rules, s.layer)
        if not any(m["measure"] == s.measure for m in measures):
            raise PipelineError(f"corrupt table: {paths.measures_file(rid)} (no {s.measure} of a varying layer)")
        run_rows.extend({**ident, **m} for m in measures)
        layer_rows.extend({**ident, **l} for l in layers)
        chosen = next(m for m in measures if m["measure"] == s.measure)
        plot_tables[rid] = run_plot_table(trajectory(frame), {"collapse": chosen["collapse_step"],
                                                              "recovery": chosen["recovery_step"],
                                                              "acquisition": chosen["acquisition_step"]})
        if seed is None and accuracy_file(rid).is_file():  # Pythia: events per evaluation set
            end = chosen["end_step"]
            sets = set_events(read_accuracy(accuracy_file(rid), steps[rid]), end, s.rules, pythia_threshold)
            set_rows.extend({"run": rid, "model": model, "recovery_step": end, **r} for r in sets.to_dict("records"))
        land = paths.landscape_file(rid)
        if land.is_file():
            acq = measures[0]["acquisition_step"]
            for name, m in run_measures(read_landscape(land), land_p["directions"], acq, s.rules, land_p).items():
                run_rows.append({**ident, "measure": name, "acquisition_step": acq, **m})
    small = [run_id(*r) for r in grid_runs(params) if r[3] is not None]  # the resolution study's runs
    fewest = min(small, key=lambda r: len(steps[r]))
    if over := [n for n in s.resolutions if n > len(steps[fewest])]:
        raise PipelineError(f"'events.sensitivity.n_checkpoints' holds {over[0]}, more than the {len(steps[fewest])} "
                            f"checkpoints of run {fewest}: at most {len(steps[fewest])} (0 = as trained)")
    rows = pd.DataFrame(run_rows)
    primary = rows[rows["measure"] == s.measure].reset_index(drop=True)
    cells = seed_agreement(rows, s.measure)
    threshold = threshold_sensitivity(primary, steps, s.rules, s.thresholds, s.resamples, s.bootstrap_seed)
    resolution = resolution_sensitivity(frames, pd.DataFrame(idents), s.rules, s.layer, s.measure, s.resolutions,
                                        s.resamples, s.bootstrap_seed)
    scale = cross_scale(model_sizes(primary), s.resamples, s.bootstrap_seed)  # the Pythia stand-in is not a size

    levels = level_summary(rows, s.measure, s.resamples, s.bootstrap_seed)
    details = {"measure": s.measure, "by_level": levels,
               "configurations": {f"{c.task}-{c.level}-{c.model}": {
                   "verdict": c.verdict, "precursor_seeds": c.precursor_seeds, "decided": c.decided,
                   "seeds": c.seeds, "agreement": c.agreement} for c in cells.itertuples()},
               "pythia_sets": {f"{r['model']}/{r['eval_set']}": {
                   "acquisition_step": _plain(r["acquisition_step"]), "lead_fraction": _plain(r["lead_fraction"]),
                   "precursor": r["precursor"]} for r in set_rows}}
    sets = pd.DataFrame(set_rows)
    paper = compare(rows, s.measure, scale, sets, s.resamples, s.bootstrap_seed)
    summary = summary_metrics(paper, rows, s.measure, scale)
    write_csv(rows, EVENTS_DIR / "runs.csv")
    write_csv(pd.DataFrame(layer_rows), EVENTS_DIR / "layers.csv")
    write_csv(cells, EVENTS_DIR / "cells.csv")
    write_csv(sets, EVENTS_DIR / "pythia_sets.csv")
    write_csv(cross_scale_table(scale), EVENTS_DIR / "cross_scale.csv")
    write_json(details, EVENTS_DIR / "levels.json")
    write_json(scale, EVENTS_DIR / "cross_scale.json")
    write_csv(threshold, SENSITIVITY_DIR / "threshold.csv")
    write_csv(resolution, SENSITIVITY_DIR / "resolution.csv")
    for rid, table in plot_tables.items():
        write_csv(table, paths.run_plot_file(rid))
    write_csv(paper, paths.METRICS / "paper.csv")
    write_text(paths.METRICS / "paper.md", markdown(paper, s.measure))
    write_json(summary, paths.METRICS / "summary.json")
    marks = {rid: {"collapse": r.collapse_step, "recovery": r.recovery_step, "acquisition": r.acquisition_step}
             for r in primary.itertuples()}
    return {"rows": rows, "levels": details, "summary": summary, "cells": cells, "paper": paper, "marks": marks}


def _plain(value):
    """A table cell as JSON: ``None`` for missing, int or float otherwise."""
    if value is None or pd.isna(value):
        return None
    return int(value) if float(value).is_integer() else float(value)


@stage()
def main(args, params: Params) -> None:
    from stages.analysis.figures import trajectories_figure

    with output_set():  # every output or none
        result = events(params)
        shown = [run_id(*r) for r in grid_runs(params) if r[3] in (None, min(params.grid.seeds))]
        trajectories_figure(shown, paths.PLOTS / "figures" / "trajectories.png", result["marks"])
    for c in result["cells"].itertuples():
        print(f"{c.task}-{c.level}-{c.model}: {c.verdict} ({c.verdicts}; {c.precursor_seeds}/{c.decided} seeds)")


if __name__ == "__main__":
    main()
