"""Stage ``events``: per-run events, per-layer dips, precursor statistics and cross-scale correlations.

Reads ``data/measures/<run>.csv`` for every run of the grid in params.yaml and writes:
``data/events/runs.csv`` and ``data/events/layers.csv`` (tables), ``metrics/events.json`` and
``metrics/cross_scale.json`` (DVC metrics), and ``plots/figures/trajectories.png``.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from stages.cli import stage_arguments
from stages import paths
from stages.analysis.cross_scale import cross_scale
from stages.analysis.events import acquisition_step, find_dip, layer_order
from stages.analysis.landscape_events import add_landscape
from stages.config import fraction, get, load_params, positive_int, run_id
from stages.errors import PipelineError, main_guard
from stages.io.tables import read_csv, write_csv, write_json
from stages.pythia.settings import grid_runs as pythia_runs  # Pythia runs: task "pythia", level "lm"

EVENTS_DIR = paths.DATA / "events"


def event_params(params: dict) -> dict:
    p = {
        "layer": get(params, "events.layer"),
        "collapse_drop": fraction(get(params, "events.collapse_drop"), "events.collapse_drop"),
        "recovery_fraction": fraction(get(params, "events.recovery_fraction"), "events.recovery_fraction"),
        "threshold": fraction(get(params, "events.acquisition_threshold"), "events.acquisition_threshold"),
        "window": positive_int(get(params, "events.acquisition_window"), "events.acquisition_window"),
        "precursor_min_gap": positive_int(get(params, "events.precursor_min_gap"), "events.precursor_min_gap",
                                          allow_zero=True),
    }
    if p["layer"] not in ("last", "mean") and not isinstance(p["layer"], int):
        raise PipelineError(f"'events.layer' must be 'last', 'mean' or a layer number, got {p['layer']!r}")
    return p


def grid_runs(params: dict) -> list[tuple[str, str, str]]:
    grid = [get(params, f"grid.{k}") for k in ("tasks", "levels", "models")]
    for key, values in zip(("tasks", "levels", "models"), grid):
        if not isinstance(values, list) or not values:
            raise PipelineError(f"'grid.{key}' must be a non-empty list")
    return list(itertools.product(*grid)) + pythia_runs(params)


def run_series(frame: pd.DataFrame, layer, key: str = "rankme") -> pd.Series:
    wide = frame.pivot(index="step", columns="layer", values=key).sort_index()
    if layer == "last":
        return wide[wide.columns.max()]
    if layer == "mean":
        return wide.mean(axis=1)
    if layer not in wide.columns:
        raise PipelineError(f"'events.layer' is {layer} but the run has layers {list(wide.columns)}")
    return wide[layer]


def run_events(frame: pd.DataFrame, p: dict) -> tuple[dict, list[dict]]:
    acc = frame.groupby("step")["test_acc"].first().sort_index()
    steps = acc.index.to_numpy()
    total = int(steps.max())
    acq = acquisition_step(steps, acc.to_numpy(), p["threshold"], p["window"])
    series = run_series(frame, p["layer"])
    dip = find_dip(series.index.to_numpy(), series.to_numpy(), p["collapse_drop"], p["recovery_fraction"])

    layers, collapse, floors = [], {}, {}
    for layer, g in frame.groupby("layer"):
        g = g.sort_values("step")
        d = find_dip(g["step"].to_numpy(), g["rankme"].to_numpy(), p["collapse_drop"], p["recovery_fraction"])
        collapse[int(layer)], floors[int(layer)] = d.collapse_step, d.floor_step
        layers.append({"layer": int(layer), **d.to_dict(),
                       "precedes_acquisition": None if acq is None or d.collapse_step is None else d.collapse_step < acq})
    order = layer_order(collapse, floors)

    gap = None if acq is None or dip.collapse_step is None else acq - dip.collapse_step
    lead = None if acq is None or dip.recovery_step is None else acq - dip.recovery_step
    precursor = bool(gap is not None and lead is not None and lead >= 0 and gap >= p["precursor_min_gap"])
    row = {**dip.to_dict(), "acquisition_step": acq, "precursor_gap": gap, "recovery_lead": lead,
           "gap_fraction": None if gap is None else gap / total, "precursor": precursor,
           "final_acc": float(acc.iloc[-1]), "total_steps": total, "order": order["order"],
           "order_spearman": order["spearman"], "top_down": order["top_down"]}
    return row, layers


def summarise(runs: pd.DataFrame) -> dict:
    by_level = {}
    for level, g in runs.groupby("level"):
        acquired = g[g["acquisition_step"].notna()]
        by_level[level] = {
            "runs": int(len(g)), "acquired": int(len(acquired)),
            "precursor_rate": float(acquired["precursor"].mean()) if len(acquired) else None,
            "median_precursor_gap": _median(acquired["precursor_gap"]),
            "median_gap_fraction": _median(acquired["gap_fraction"]),
        }
    return by_level


def _median(series: pd.Series):
    values = pd.to_numeric(series, errors="coerce").dropna()
    return float(values.median()) if len(values) else None


def events(params: dict) -> dict:
    p = event_params(params)
    run_rows, layer_rows = [], []
    for task, level, model in grid_runs(params):
        rid = run_id(task, level, model)
        frame = read_csv(paths.measures_file(rid))
        need = {"step", "layer", "rankme", "test_acc", "n_params"}
        if not need <= set(frame.columns) or frame.empty:
            raise PipelineError(f"corrupt table: {paths.measures_file(rid)} (needs columns {', '.join(sorted(need))})")
        row, layers = run_events(frame, p)
        ident = {"run": rid, "task": task, "level": level, "model": model, "n_params": int(frame["n_params"].iloc[0])}
        run_rows.append({**ident, **row})
        layer_rows.extend({**ident, **l} for l in layers)
    runs = pd.DataFrame(run_rows)
    write_csv(runs, EVENTS_DIR / "runs.csv")
    write_csv(pd.DataFrame(layer_rows), EVENTS_DIR / "layers.csv")
    metrics = {"runs": {r["run"]: {k: v for k, v in r.items() if k != "run"} for r in run_rows},
               "by_level": summarise(runs), "params": p}
    add_landscape(metrics, run_rows, params, p, EVENTS_DIR / "landscape.csv")
    write_json(metrics, paths.METRICS / "events.json")
    write_json(cross_scale(runs), paths.METRICS / "cross_scale.json")
    return metrics


@main_guard
def main(argv=None) -> None:
    args = stage_arguments(__doc__, argv)
    params = load_params(args.params)
    metrics = events(params)
    from stages.analysis.figures import trajectories_figure

    trajectories_figure([run_id(*r) for r in grid_runs(params)], paths.PLOTS / "figures" / "trajectories.png")
    for rid, r in metrics["runs"].items():
        print(f"{rid}: collapse {r['collapse_step']} floor {r['floor']} recovery {r['recovery_step']} "
              f"acquisition {r['acquisition_step']} gap {r['precursor_gap']} precursor {r['precursor']} order {r['order']}")


if __name__ == "__main__":
    main()
