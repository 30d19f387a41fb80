"""How early, and how reliably, does the online RankMe monitor warn that a capability is coming?

    python benchmarks/monitor_warning.py [MEASURES_DIR ...] [--from-hidden] [--measure rankme_centred]
                                         [--resamples 1000] [--seed 0] [--params params.yaml] [--csv FILE]
                                         [--controls DIR] [--no-cuts]

For every run with a measures table in MEASURES_DIR (default ``data/measures``; runs named
``<task>-<level>-<model>-s<seed>``, or ``<task>-<level>-<model>`` without a seed axis), the online
monitor (stages/monitor) is replayed over the run's checkpoints in step order, fed the centred RankMe
of the deepest varying layer (``--measure rankme`` for raw RankMe) and the run's ``test_acc``, with
the event rules of ``params.yaml: events`` (defaults when absent). It sees each checkpoint only
once it is reached. ``--from-hidden`` also takes runs that have no measures table yet but whose
``../hidden/<run>.parquet`` and ``../history/<run>.csv`` exist, computing the two RankMe columns
exactly as stage ``measure`` does (same ``geometry``; no probe accuracy).

Printed per run: the acquisition step (``window`` checkpoints at or above the threshold), the first
``precursor`` ("acquisition expected") warning -- the step of the checkpoint at which the monitor
reported it -- and the lead ``acquisition - warning`` in steps and as a share of the acquisition
step, with the offline precursor verdict (stage ``events``) beside it. Per difficulty level:

* **warned in time**: share of acquired runs warned before their acquisition step (a warning needs
  accuracy below threshold, so it can never come inside the acquisition window itself);
* **median lead** (steps, and share of the acquisition step) over the runs warned in time;
* **false alarms**: runs that never acquire (``absent``) but got a warning; runs whose acquisition
  is ``undetermined`` (the run ended inside a streak) are counted apart;
* 95% intervals: the hierarchical bootstrap of stages/analysis/bootstrap.py over (task, level, model)
  cells and their seeds.

Also checked on every run: the monitor's final events equal the offline detector's
(``agree`` column; ``pending`` when the run ended on an unconfirmed floor).

**Evaluation with negative controls** (issue 20; the rules below, :data:`FROZEN`, were fixed before
the evaluation first ran and are printed with every result; changing them is a new evaluation):

* positives: the runs above that acquire;
* negatives, runs that never acquire within their budget: ``--controls DIR`` (measures tables from
  benchmarks/monitor_controls.py: copy-easy with shuffled answers, mul-hard), and, unless
  ``--no-cuts``, every acquiring run with its budget **cut** at the last checkpoint at or before
  ``cut_share`` of its acquisition step (the trainer stopped early: the capability never comes);
* a warning at step ``w`` is a **hit** when acquisition follows within the **horizon**:
  ``w < acquisition <= (1 + horizon) w`` (scale-free: ``horizon`` 3 = within two doublings of the
  training time at the warning); earlier is **early** (a miss), none is a miss; any warning in a
  negative is a **false alarm**;
* the **baseline** warns in every run at the first checkpoint at or past ``baseline_share`` of the
  run's budget (its last step), judged by the same horizon: it needs no geometry, so a monitor is
  worth its cost only where it beats it (hits on positives, false alarms on negatives);
* shares carry exact Clopper-Pearson 95% intervals (stages/analysis/verdicts.py).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from stages.analysis.bootstrap import interval, median, rate  # noqa: E402
from stages.analysis.event_rules import FOUND, Rules, acquisition  # noqa: E402
from stages.analysis.verdicts import clopper_pearson  # noqa: E402
from stages.analysis.runs import run_events  # noqa: E402
from stages.errors import PipelineError  # noqa: E402
from stages.io.hidden import iter_steps  # noqa: E402
from stages.io.measure_tables import read_measures  # noqa: E402
from stages.measures.rankme import geometry  # noqa: E402
from stages.monitor import PRECURSOR, RankMeMonitor  # noqa: E402
from stages.monitor.measure_dir import event_rules  # noqa: E402

FROZEN = {"horizon": 3.0, "baseline_share": 0.1, "cut_share": 0.5}  # fixed before the evaluation ran
RUN = re.compile(r"^(?P<task>[^-]+)-(?P<level>[^-]+)-(?P<model>.+?)(?:-s(?P<seed>\d+))?$")
FIELDS = ("acquisition_step", "peak_step", "collapse_step", "floor_step", "recovery_step")
LEVEL_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def readings(frame: pd.DataFrame):
    for step, g in frame.sort_values(["step", "layer"]).groupby("step", sort=True):
        geo = {int(r["layer"]): {"rankme": r["rankme"], "rankme_centred": r["rankme_centred"],
                                 "varies": str(r["varies"]).lower() in ("true", "1")} for r in g.to_dict("records")}
        acc = float(g["test_acc"].iloc[0])
        yield int(step), geo, (acc if np.isfinite(acc) else None)


def measures_from_hidden(hidden: Path, history: Path, run: str) -> pd.DataFrame:
    """rankme, rankme_centred, mean_dominance, varies per (checkpoint, layer) as stage ``measure``."""
    acc = pd.read_csv(history).set_index("step")["test_acc"]
    rows = []
    for step, layers in iter_steps(hidden):
        order = sorted(layers)
        geo = geometry(torch.as_tensor(np.stack([layers[l].vectors for l in order])))
        for i, l in enumerate(order):
            rows.append({"run": run, "step": step, "layer": l, **{k: v[i].item() for k, v in geo.items()},
                         "test_acc": float(acc.get(step, np.nan)), "n_params": 0})
    return pd.DataFrame(rows)


def replay(frame: pd.DataFrame, rules: Rules, measure: str) -> dict:
    monitor = RankMeMonitor(rules=rules, measure=measure)
    for step, geo, acc in readings(frame):
        monitor.update_geometry(step, geo, acc)
    final = monitor.final()
    rows, _ = run_events(frame, rules, "last")
    offline = next(r for r in rows if r["measure"] == measure)
    warning = next((e for e in monitor.events if e.kind == PRECURSOR), None)
    acq = final["acquisition_step"]
    acquired = final["acquisition_status"] == FOUND
    warn_at = None if warning is None else warning.reported_at
    in_time = (warn_at is not None and warn_at < acq) if acquired else None
    lead = acq - warn_at if acquired and in_time else None
    return {"acquisition_step": acq, "acquisition_status": final["acquisition_status"],
            "collapse_step": final["collapse_step"], "floor_step": final["floor_step"],
            "recovery_step": final["recovery_step"], "warning_step": warn_at,
            "warnings": sum(e.kind == PRECURSOR for e in monitor.events),
            "in_time": in_time, "lead_steps": lead, "lead_share": None if lead is None else lead / acq,
            "false_alarm": (warn_at is not None) if final["acquisition_status"] == "absent" else None,
            "offline_precursor": offline["precursor"], "offline_lead_fraction": offline["lead_fraction"],
            "agree": "pending" if final["pending"] else all(final[k] == offline[k] for k in FIELDS),
            "checkpoints": len(monitor.steps), "layer": monitor.chosen_layer}


def collect(dirs: list[Path], from_hidden: bool) -> tuple[list[tuple[str, pd.DataFrame, str]], list[str]]:
    found, notes, seen = [], [], set()
    for d in dirs:
        candidates = {p.stem: ("measures", p) for p in sorted(d.glob("*.csv"))}
        if from_hidden:
            for p in sorted((d.parent / "hidden").glob("*.parquet")):
                history = d.parent / "history" / f"{p.stem}.csv"
                if p.stem not in candidates and history.is_file():
                    candidates[p.stem] = ("hidden", p)
        for run, (kind, path) in sorted(candidates.items()):
            if run in seen:
                continue
            if not RUN.match(run):
                notes.append(f"{path}: run name not <task>-<level>-<model>[-s<seed>]; left out")
                continue
            try:
                frame = read_measures(path) if kind == "measures" else measures_from_hidden(
                    path, d.parent / "history" / f"{run}.csv", run)
            except (PipelineError, OSError, ValueError, KeyError) as exc:
                notes.append(f"{path}: unreadable ({exc}); left out (still being written?)")
                continue
            seen.add(run)
            found.append((run, frame, "measures table" if kind == "measures" else "from hidden states"))
    return found, notes


def fmt(v, spec: str = "d") -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return format(int(v) if spec == "d" else v, spec)


def ci(res: dict, spec: str) -> str:
    if res["value"] is None:
        return "-"
    if res["low"] is None:
        return format(res["value"], spec)
    return f"{format(res['value'], spec)} [{format(res['low'], spec)}, {format(res['high'], spec)}]"


def level_table(runs: pd.DataFrame, resamples: int, seed: int) -> pd.DataFrame:
    cells = ["task", "level", "model"]
    out = []
    groups = sorted(runs["level"].unique(), key=lambda l: (LEVEL_ORDER.get(l, 9), l))
    for level in groups + ["all"]:
        g = runs if level == "all" else runs[runs["level"] == level]
        g = g.reset_index(drop=True)
        acquired = g[g["acquisition_status"] == FOUND]
        never = g[g["acquisition_status"] == "absent"]
        out.append({
            "level": level, "runs": len(g), "acquired": len(acquired),
            "warned_in_time": int(acquired["in_time"].astype(bool).sum()),
            "share_in_time": ci(interval(g, rate("in_time"), cells, resamples, seed), ".2f"),
            "median_lead_steps": ci(interval(g, median("lead_steps"), cells, resamples, seed), ".0f"),
            "median_lead_share": ci(interval(g, median("lead_share"), cells, resamples, seed), ".2f"),
            "never_acquired": len(never), "false_alarms": int(never["false_alarm"].astype(bool).sum()),
            "undetermined": int((g["acquisition_status"] == "undetermined").sum()),
            "offline_precursor": f"{int((g['offline_precursor'] == True).sum())}/"  # noqa: E712
                                 f"{int(g['offline_precursor'].notna().sum())}",
            "final_events_agree": f"{int((g['agree'] == True).sum())}/{len(g)}",  # noqa: E712
        })
    return pd.DataFrame(out)


def judge(warn_at, acq, horizon: float) -> str:
    """``hit`` (acquisition within the horizon after the warning), ``early`` (acquisition later than
    that), ``late`` (at or after acquisition), ``miss`` (no warning before the run ended) or, for a run
    that never acquires, ``false alarm`` / ``quiet``."""
    if acq is None or (isinstance(acq, float) and not np.isfinite(acq)):
        return "quiet" if warn_at is None else "false alarm"
    if warn_at is None:
        return "miss"
    if warn_at >= acq:
        return "late"
    return "hit" if acq <= (1 + horizon) * warn_at else "early"


def baseline_step(steps, share: float) -> int:
    """The trivial warning: the first checkpoint at or past ``share`` of the run's budget (last step)."""
    steps = np.sort(np.asarray(steps))
    return int(steps[np.searchsorted(steps, share * steps[-1])])


def cut_budget(frame: pd.DataFrame, rules: Rules, share: float) -> pd.DataFrame | None:
    """The run as if its budget ended at the last checkpoint at or before ``share`` of its acquisition
    step (``None`` without acquisition or with fewer than 3 checkpoints left)."""
    acc = frame.groupby("step")["test_acc"].first().sort_index()
    acq, _ = acquisition(acc.index.to_numpy(), acc.to_numpy(), rules.threshold, rules.window)
    if acq is None:
        return None
    kept = frame[frame["step"] <= share * acq]
    return kept if kept["step"].nunique() >= 3 else None


def share_ci(k: int, n: int) -> str:
    if n == 0:
        return "-"
    low, high = clopper_pearson(k, n)
    return f"{k}/{n} [{100 * low:.0f}%, {100 * high:.0f}%]"


def evaluation(positives: list[tuple[str, pd.DataFrame]], negatives: list[tuple[str, str, pd.DataFrame]],
               rules: Rules, measure: str, frozen: dict = FROZEN) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per run (monitor and baseline outcomes) and per group (hits on positives, false alarms on
    negatives, with exact intervals), under the ``frozen`` horizon, baseline share and cut."""
    rows = []
    for kind, run, frame in [("positive", r, f) for r, f in positives] + negatives:
        res = replay(frame, rules, measure)
        acq = res["acquisition_step"] if res["acquisition_status"] == FOUND else None
        if kind != "positive" and acq is not None:
            kind = f"{kind} (acquired: not a negative)"
        base = baseline_step(frame["step"].unique(), frozen["baseline_share"])
        rows.append({"group": kind, "run": run, "acquisition_step": acq, "budget": int(frame["step"].max()),
                     "warning_step": res["warning_step"], "monitor": judge(res["warning_step"], acq, frozen["horizon"]),
                     "baseline_step": base, "baseline": judge(base, acq, frozen["horizon"])})
    runs = pd.DataFrame(rows)
    out = []
    for group, g in runs.groupby("group", sort=False):
        positive = group == "positive"
        good = "hit" if positive else "false alarm"
        out.append({"group": group, "runs": len(g), "counted": "hits" if positive else "false alarms",
                    "monitor": share_ci(int((g["monitor"] == good).sum()), len(g)),
                    "monitor_early": int((g["monitor"] == "early").sum()),
                    "baseline": share_ci(int((g["baseline"] == good).sum()), len(g)),
                    "baseline_early": int((g["baseline"] == "early").sum())})
    return runs, pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="*", type=Path, default=[Path("data/measures")])
    parser.add_argument("--from-hidden", action="store_true",
                        help="also runs with hidden states and history but no measures table yet")
    parser.add_argument("--measure", default="rankme_centred", choices=["rankme_centred", "rankme"])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--params", type=Path, default=None)
    parser.add_argument("--csv", type=Path, default=None, help="write the per-run table here")
    parser.add_argument("--controls", type=Path, action="append", default=[],
                        help="measures tables of runs that never acquire (benchmarks/monitor_controls.py)")
    parser.add_argument("--no-cuts", action="store_true", help="no budget-cut copies of the acquiring runs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rules = event_rules(args.params)
    missing = [d for d in args.dirs if not d.is_dir()]
    for d in missing:
        print(f"{d}: no such folder; left out")
    runs, notes = collect([d for d in args.dirs if d.is_dir()], args.from_hidden)
    for note in notes:
        print(note)
    if not runs:
        print("no runs with a measures table found")
        return
    rows = []
    for run, frame, source in runs:
        m = RUN.match(run)
        rows.append({"run": run, "task": m["task"], "level": m["level"], "model": m["model"],
                     "seed": int(m["seed"]) if m["seed"] else 0, "source": source,
                     **replay(frame, rules, args.measure)})
    table = pd.DataFrame(rows).sort_values(["level", "task", "model", "seed"],
                                           key=lambda s: s.map(LEVEL_ORDER).fillna(9) if s.name == "level" else s)
    print(f"rules: {rules}; measure: {args.measure} of the deepest varying layer")
    print(f"{'run':<24} {'acquisition':>16} {'collapse':>8} {'recovery':>8} {'warning':>8} {'lead':>6} "
          f"{'share':>6} {'offline':>8} {'agree':>7}  source")
    for r in table.to_dict("records"):
        acq = f"{fmt(r['acquisition_step'])} {r['acquisition_status'][:5]}"
        print(f"{r['run']:<24} {acq:>16} {fmt(r['collapse_step']):>8} {fmt(r['recovery_step']):>8} "
              f"{fmt(r['warning_step']):>8} {fmt(r['lead_steps']):>6} {fmt(r['lead_share'], '.2f'):>6} "
              f"{str(r['offline_precursor']):>8} {str(r['agree']):>7}  {r['source']}")
    print()
    levels = level_table(table, args.resamples, args.seed)
    print(levels.to_string(index=False))
    if args.csv:
        table.to_csv(args.csv, index=False)

    positives = [(run, frame) for run, frame, _ in runs if not run.startswith("pythia-")]  # Pythia: not pooled
    negatives = []
    if not args.no_cuts:
        for run, frame in positives:
            short = cut_budget(frame, rules, FROZEN["cut_share"])
            if short is not None:
                negatives.append(("budget cut", f"{run}@{int(short['step'].max())}", short))
    controls, notes = collect([d for d in args.controls if d.is_dir()], False)
    for note in notes:
        print(note)
    negatives += [("control: " + run.split("-")[0], run, frame) for run, frame, _ in controls]
    per_run, groups = evaluation(positives, negatives, rules, args.measure)
    print()
    print(f"evaluation, frozen before it ran: {FROZEN} (horizon: acquisition within (1 + horizon) x the warning "
          f"step; baseline: warn at baseline_share of the budget; cut: budget ends at cut_share of acquisition)")
    print(per_run.to_string(index=False))
    print()
    print(groups.to_string(index=False))


if __name__ == "__main__":
    main()
