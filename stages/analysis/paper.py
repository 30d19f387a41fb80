"""This run's numbers next to the paper's headline claims, one verdict rule for all of them, and the
small summary that ``dvc metrics show`` / ``dvc exp show`` read.

The rule (:mod:`stages.analysis.verdicts`, docs/verdicts.md): a point claim is ``consistent`` when the
paper's value lies inside this run's 95% interval and the interval is narrow enough, ``not
reproduced`` when it lies outside, ``inconclusive`` when it lies inside an interval too wide; a
one-sided claim (a lag, rho above 0.92) is decided by the interval's bound on the claimed side;
``not measurable (needs ...)`` when the inputs are missing or too few. :func:`markdown` writes the
rule into ``metrics/paper.md`` itself.

Rows per measure where the paper's measure (raw RankMe) and this project's (centred RankMe) differ;
both groupings (by difficulty level, and by the paper's task classes: hard = ADD, MOD, MUL), each
labelled; the Pythia runs are never pooled with the algorithmic ones. Cross-scale rows compare the
smallest and the largest model size of the grid (every pair: ``data/events/cross_scale.csv``).

The paper's numbers (Billa, arXiv 2602.15997) are constants here, to compare against, never to tune to.
"""
from __future__ import annotations

import pandas as pd

from stages.analysis import verdicts as V
from stages.analysis.cross_scale import HARD_TASKS, task_class
from stages.analysis.summary import CELL

PYTHIA_TASK = "pythia"               # stages.pythia.settings.TASK (not imported: no pythia stack here)
MOD_FLOOR = 2.0                      # the paper's MOD collapse floor (raw RankMe), at every size
TOP_DOWN = 28 / 32                   # the paper's top-down consistency (task x model)
RHO = 0.92                           # the paper's cross-scale Spearman rho: above this
CONCORDANCE = {"easy": 0.52, "hard": 0.69}  # within-class timing concordance
REVERSAL = 0.26                      # prediction when task order reverses across scales
MEASURE_NAMES = {"rankme": "raw RankMe (paper's)", "rankme_centred": "centred RankMe"}
COLUMNS = ["claim", "measure", "grouping", "paper", "this_run", "n", "verdict", "needs", "rule", "how"]
GROUPINGS = {  # label -> (how to select the rows, which class)
    "level hard": lambda r: r["level"] == "hard",
    "level easy": lambda r: r["level"] == "easy",
    "hard tasks (ADD, MOD, MUL)": lambda r: r["task"].isin(HARD_TASKS),
    "easy tasks (the other five)": lambda r: ~r["task"].isin(HARD_TASKS),
}


def model_sizes(rows: pd.DataFrame) -> pd.DataFrame:
    """The runs that compare model sizes: the algorithmic ones (the Pythia stand-in is not a size)."""
    return rows[rows["task"] != PYTHIA_TASK]


def _row(claim, measure, grouping, paper, est, verdict, rule, how, percent=True) -> dict:
    measurable = verdict != V.NOT_MEASURABLE
    return {"claim": claim, "measure": measure, "grouping": grouping, "paper": paper,
            "this_run": V.fmt(est, percent) if measurable else "-", "n": V.size(est) if measurable else "-",
            "verdict": verdict, "needs": "" if measurable else (est.get("needs") or "its inputs"), "rule": rule,
            "how": how}


def compare(rows: pd.DataFrame, primary: str, cross: dict, pythia_sets: pd.DataFrame,
            resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per claim, measure and grouping (:data:`COLUMNS`).

    ``rows``: the long per-run table of the events stage (one row per run and measure);
    ``primary``: the measure whose dip gives each run's verdict (``events.measure``);
    ``cross``: the cross-scale result (algorithmic runs only); ``pythia_sets``: per-set Pythia events."""
    out = []
    algo = rows[rows["task"] != PYTHIA_TASK]
    acquired = algo[algo["acquisition_step"].notna()]
    share_rule = f"share: paper inside the exact 95% interval, width <= {V.SHARE_WIDTH:.0%}"

    for measure in dict.fromkeys([primary, "rankme"]):
        name = MEASURE_NAMES.get(measure, measure)
        m = acquired[acquired["measure"] == measure]
        for grouping, select in GROUPINGS.items():
            hard = grouping.startswith(("level hard", "hard tasks"))
            g = m[select(m)]
            paper = 1.0 if hard else 0.0
            est = V.share(g, "precursor", CELL, resamples, seed,
                          needs=f"acquired runs with a decided verdict in {grouping} (grid.tasks, grid.levels)")
            undecided = int(g["precursor"].isna().sum())
            out.append(_row("precursor (recovery leads acquisition)", name, grouping,
                            "100%" if hard else "0% (together)", est, V.share_verdict(est, paper), share_rule,
                            f"lead >= events.precursor_min_lead of the acquisition step; {undecided} undetermined "
                            "run(s) left out"))

    for measure in dict.fromkeys(["rankme", primary]):
        name = MEASURE_NAMES.get(measure, measure)
        m = algo[(algo["measure"] == measure) & (algo["task"] == "mod")]
        for model, g in (m.groupby("model", sort=True) if len(m) else [("-", m)]):
            est = V.median(g, "floor", CELL, resamples, seed, needs="mod runs with a dip (grid.tasks: mod)")
            out.append(_row(f"MOD collapse floor ({model})", name, "mod, all levels", "~2.0 at every size", est,
                            V.magnitude_verdict(est, MOD_FLOOR),
                            f"magnitude: paper inside the 95% interval of the median, width <= "
                            f"{V.MAGNITUDE_WIDTH:.0%} of the paper's value", _floor_note(g), percent=False))

    for measure in dict.fromkeys(["rankme", primary]):
        name = MEASURE_NAMES.get(measure, measure)
        m = algo[algo["measure"] == measure]
        for model, g in (m.groupby("model", sort=False) if len(m) else [("-", m)]):
            est = V.share(g, "top_down", CELL, resamples, seed,
                          needs="runs with two or more varying layers that collapse (grid.models)")
            out.append(_row(f"collapse is top-down ({model})", name, f"{model} runs (Pythia not pooled)",
                            "28/32 (88%)", est, V.share_verdict(est, TOP_DOWN), share_rule, _layers_note(g)))

    if "first_update_mean_dominance" in algo.columns:
        m = algo[algo["measure"] == "rankme"]
        for model, g in m.groupby("model", sort=False):
            est = V.median(g, "first_update_mean_dominance", CELL, resamples, seed,
                           needs="runs with mean dominance at a checkpoint after step 0")
            out.append(_row(f"first-update mean shift ({model})", "mean dominance, last layer", f"{model} runs",
                            "- (not reported)", est, V.NO_CLAIM if est["value"] is not None else V.NOT_MEASURABLE,
                            "reported beside the claims", "median over runs at the first checkpoint after step 0 "
                            "(1 = every state along one shared direction: raw RankMe collapses, centred need not)",
                            percent=False))

    llc = acquired[acquired["measure"] == "llc"]
    est = V.share(llc, "precursor", CELL, resamples, seed, needs=_landscape_needs(llc, "LLC"))
    out.append(_row("LLC is not a precursor", "llc", "all levels", "0/24 (synchronous)", est,
                    V.share_verdict(est, 0.0), share_rule, _truncated_note(llc)))

    hess = acquired[acquired["measure"] == "hessian_top1"]
    est = V.median(hess, "lead_fraction", CELL, resamples, seed, needs=_landscape_needs(hess, "Hessian"))
    out.append(_row("Hessian lags acquisition", "hessian_top1", "all levels", "lags (lead < 0)", est,
                    V.one_sided_verdict(est, 0.0, "below"),
                    "one-sided: consistent when the whole interval is below 0, not reproduced when at or above 0",
                    "median lead of the Hessian half-rise, share of the acquisition step (< 0: after acquisition); "
                    + _truncated_note(hess), percent=False))

    out.extend(_cross_rows(cross))
    out.extend(_pythia_rows(pythia_sets))
    return pd.DataFrame(out, columns=COLUMNS)


def _floor_note(g: pd.DataFrame) -> str:
    if not len(g):
        return "no mod runs"
    parts = []
    for column, label in (("floor_mean_dominance", "mean dominance"), ("floor_rankme_centred", "centred RankMe"),
                          ("floor_rankme", "raw RankMe")):
        if column in g.columns:
            v = pd.to_numeric(g[column], errors="coerce").dropna()
            if len(v) and not (g["measure"].iloc[0] == column[len("floor_"):]):
                parts.append(f"{label} {v.min():.3g}-{v.max():.3g}")
    steps = pd.to_numeric(g["floor_step"], errors="coerce").dropna() if "floor_step" in g.columns else []
    where = f"floor at step {int(steps.min())}-{int(steps.max())}" if len(steps) else "no floor"
    return f"{where}; at the floor: " + ", ".join(parts) if parts else where


def _layers_note(m: pd.DataFrame) -> str:
    if "varying_layers" not in m.columns or not len(m):
        return "no runs"
    decided = m[m["top_down"].notna()]
    by = decided["varying_layers"].value_counts().sort_index()
    layers = ", ".join(f"{int(k)} varying layers in {int(v)} runs" for k, v in by.items()) or "none"
    simultaneous = int((decided["order"] == "simultaneous").sum())
    return (f"decided by {layers}; {simultaneous} simultaneous (not top-down); "
            f"{int(m['top_down'].isna().sum())} undetermined")


def _landscape_needs(m: pd.DataFrame, name: str) -> str:
    truncated = int((m["status"] == "truncated").sum()) if "status" in m.columns else 0
    if truncated:
        return (f"{name} rises followed past their peak ({truncated} of {len(m)} cut off by the measured window: "
                "raise landscape.follow.extra)")
    return f"acquired runs with a {name} half-rise (stage landscape)"


def _truncated_note(m: pd.DataFrame) -> str:
    if "status" not in m.columns or not len(m):
        return ""
    t = int((m["status"] == "truncated").sum())
    return f"{t} rise(s) cut off by the measured window (truncated, not events)" if t else "no rise truncated"


def _cross_rows(cross: dict) -> list[dict]:
    pairs = [p for p in (cross.get("pairs") or {}).values() if p.get("cells")]
    need = "two model sizes with task x level cells in common (grid.models; the Pythia stand-in is not a size)"
    rho_rule = f"one-sided: consistent when the interval's lower bound > {RHO}, not reproduced when its upper bound <= {RHO}"
    if not pairs:
        out = [_row("cross-scale ordering of floors and phase boundaries", "rankme", "task x level cells",
                    f"Spearman rho > {RHO}", V.missing(need), V.NOT_MEASURABLE, rho_rule, "")]
        for level, paper in CONCORDANCE.items():
            out.append(_row("timing concordance within a class", "acquisition step", f"level {level}", f"{paper:.0%}",
                            V.missing(need), V.NOT_MEASURABLE, "share", ""))
        out.append(_row("prediction when task order reverses across scales", "recovery -> acquisition",
                        "reversed pairs", f"{REVERSAL:.0%}", V.missing(need), V.NOT_MEASURABLE, "share", ""))
        return out
    out = []
    for pair in pairs:
        out.extend(_pair_rows(pair, rho_rule))
    return out


def _pair_rows(pair: dict, rho_rule: str) -> list[dict]:
    """The rows of one pair of model sizes: rho per variable, overall and within-class concordance,
    the reversal statistic; the notes name cells with no acquisition at a size (left out of n)."""
    name = f"{pair['small']} vs {pair['large']}"
    absent = "; ".join(f"absent at {m}: {len(c)} ({', '.join(c)})" for m, c in (pair.get("absent") or {}).items() if c)
    absent = f"; {absent} (no acquisition: left out)" if absent else ""
    out = []
    for variable in ("floor_ratio", "recovery_step", "acquisition_step"):
        ci = pair["rho"][variable]
        est = V.from_interval(ci, f"3 or more cells with a defined {variable} at both sizes (has {ci['n']})")
        est.update(configs=None, unit="cells")
        out.append(_row(f"cross-scale rho of {variable} ({name})", "rankme" if variable != "acquisition_step" else "-",
                        f"{ci['n']} task x level cells", f"> {RHO}", est, V.one_sided_verdict(est, RHO, "above"),
                        rho_rule, "Spearman rho across cells, seed medians; interval: bootstrap over cells and seeds"
                        + (absent if variable == "acquisition_step" else ""), percent=False))
    conc = pair["concordance"]["acquisition_step"]
    ci = conc["all"]
    est = _pair_share(ci, 1, f"two cells with an acquisition at both sizes (has {ci['n']} pairs)")
    out.append(_row(f"timing concordance, all pairs ({name})", "acquisition step", "all cells", "-", est,
                    V.NO_CLAIM if est["value"] is not None else V.NOT_MEASURABLE, "reported beside the claims",
                    "pairs of cells ordered alike by acquisition step at both sizes (ties 1/2)" + absent))
    enough = V.pairs_to_tell(CONCORDANCE["easy"], CONCORDANCE["hard"])
    for grouping, key, labels in (("level", "by_level", {"easy": "easy", "hard": "hard"}),
                                  ("class", "by_class", {"easy": "easy tasks", "hard": "hard tasks"})):
        for cls, paper in CONCORDANCE.items():
            ci = conc.get(key, {}).get(labels[cls]) or {"value": None, "low": None, "high": None, "n": 0}
            est = _pair_share(ci, enough, f"{enough} within-class pairs of cells to tell 52% from 69% "
                                          f"(has {ci['n']}; grid.tasks)")
            out.append(_row(f"timing concordance within a class ({name})", "acquisition step",
                            f"{grouping} {labels[cls]}", f"{paper:.0%}", est, V.share_verdict(est, paper),
                            f"share; reported with >= {enough} pairs",
                            "pairs of cells of the class ordered alike by acquisition step at both sizes" + absent))
    enough_rev = V.pairs_to_tell(REVERSAL, 0.5)
    ci = pair.get("reversal") or {"value": None, "low": None, "high": None, "n": 0}
    est = _pair_share(ci, enough_rev, f"{enough_rev} pairs of cells whose acquisition order reverses, to tell 26% "
                                      f"from a coin flip (has {ci['n']})")
    out.append(_row(f"prediction when task order reverses across scales ({name})", "recovery -> acquisition",
                    "reversed pairs", f"{REVERSAL:.0%}", est, V.share_verdict(est, REVERSAL),
                    f"share; reported with >= {enough_rev} pairs",
                    "share of the reversed pairs whose small-size recovery order predicts the large-size "
                    "acquisition order" + absent))
    return out


def _pair_share(ci: dict, enough: int, needs: str) -> dict:
    """A share over pairs of cells: measurable with ``enough`` pairs; its interval the bootstrap interval
    widened to contain the exact interval of its pairs (pairs share cells, so neither alone suffices)."""
    if ci.get("value") is None or ci["n"] < enough:
        return V.missing(needs, ci.get("n", 0))
    low, high = V.clopper_pearson(round(ci["value"] * ci["n"]), ci["n"])
    if ci.get("low") is not None:
        low, high = min(low, ci["low"]), max(high, ci["high"])
    return {"value": ci["value"], "low": low, "high": high, "n": ci["n"], "k": None, "configs": None, "needs": None}


def _pythia_rows(pythia_sets: pd.DataFrame) -> list[dict]:
    claim, paper = "Pythia logical-deduction precursor gap", "~49K steps on Pythia-2.8B; none on easy sets"
    ld = pythia_sets[pythia_sets["eval_set"] == "logical_deduction"] if len(pythia_sets) else pythia_sets
    out = []
    for r in (ld.to_dict("records") if len(ld) else []):
        if r["model"] != "2.8b":
            out.append(_row(f"{claim} ({r['model']})", "rankme", "Pythia (not pooled)", paper,
                            V.missing("EleutherAI's Pythia-2.8B checkpoints (pythia.profile: pythia); this is the "
                                      f"offline stand-in {r['model']}"), V.NOT_MEASURABLE, "-",
                            f"acquisition {r['acquisition_status']}"))
            continue
        gap = (r["acquisition_step"] - r["recovery_step"] if pd.notna(r["acquisition_step"])
               and pd.notna(r["recovery_step"]) else None)
        est = {"value": gap, "low": gap, "high": gap, "n": 1, "k": None, "configs": 1, "needs": None}
        verdict = (V.NOT_MEASURABLE if r["precursor"] is None or pd.isna(r["precursor"])
                   else V.CONSISTENT if r["precursor"] else V.NOT_REPRODUCED)
        if verdict == V.NOT_MEASURABLE:
            est = V.missing("a decided precursor verdict on logical deduction (acquisition "
                            f"{r['acquisition_status']})")
        out.append(_row(f"{claim} ({r['model']})", "rankme", "Pythia (not pooled)", paper, est, verdict,
                        "one run: precursor verdict of the shared rule", "", percent=False))
    if not len(ld):
        out.append(_row(claim, "rankme", "Pythia (not pooled)", paper,
                        V.missing("Pythia runs with a logical_deduction evaluation set (pythia.models)"),
                        V.NOT_MEASURABLE, "-", ""))
    return out


NA = "n/a"  # DVC leaves JSON nulls out of its tables: a value that cannot be computed is this string


def summary_metrics(paper: pd.DataFrame, rows: pd.DataFrame, primary: str, cross: dict | None = None) -> dict:
    """The few numbers ``dvc metrics show`` prints on one screen, flat and self-explanatory:
    how many claims got each verdict, the precursor share of ``primary`` in each grouping
    (``precursor_<class>_lvl``: by level, ``precursor_<class>_cls``: by the paper's task classes;
    acquired algorithmic runs with a decided verdict; ``n/a`` when there are none), how many runs
    acquired and, with two or more model sizes, per pair of sizes the Spearman rho of the acquisition
    step and the overall timing concordance (``rho_acq_<small>_<large>``, ``concordance_<small>_<large>``)."""
    counts = V.counts(paper["verdict"])
    out = {k.replace(" ", "_"): v for k, v in counts.items()}  # rows without a paper value are not counted
    algo = rows[(rows["task"] != PYTHIA_TASK) & (rows["measure"] == primary)]
    acquired = algo[algo["acquisition_step"].notna()]
    for label, select in (("hard_lvl", lambda r: r["level"] == "hard"), ("easy_lvl", lambda r: r["level"] == "easy"),
                          ("hard_cls", lambda r: r["task"].isin(HARD_TASKS)),
                          ("easy_cls", lambda r: ~r["task"].isin(HARD_TASKS))):
        decided = acquired[select(acquired)]["precursor"].dropna()
        out[f"precursor_{label}"] = round(float(decided.astype(bool).mean()), 3) if len(decided) else NA
    out["runs"], out["acquired_runs"] = int(len(algo)), int(len(acquired))
    for pair in (cross or {}).get("pairs", {}).values():
        if not pair.get("cells"):
            continue
        name = f"{pair['small']}_{pair['large']}"
        for key, stat in ((f"rho_acq_{name}", pair["rho"]["acquisition_step"]),
                          (f"concordance_{name}", pair["concordance"]["acquisition_step"]["all"])):
            out[key] = NA if stat["value"] is None else round(float(stat["value"]), 3)
    return out


def _verdict_cell(r) -> str:
    return f"not measurable (needs {r.needs})" if r.verdict == V.NOT_MEASURABLE else r.verdict


def markdown(table: pd.DataFrame, primary: str = "rankme_centred") -> str:
    """``metrics/paper.md``: the verdict rule, the table, the verdict counts and each row's notes."""
    counts = V.counts(table["verdict"])
    lines = [
        "# This run against the paper's claims",
        "",
        "Verdict rule, the same for every row (docs/verdicts.md):",
        "",
        f"- **consistent**: the paper's value lies inside this run's 95% interval and the interval is narrow "
        f"enough: width <= {V.SHARE_WIDTH:.0%} for a share, <= {V.MAGNITUDE_WIDTH:.0%} of the paper's value for a "
        "magnitude (a collapse floor);",
        "- **not reproduced**: the paper's value lies outside the interval;",
        "- **inconclusive**: the paper's value lies inside an interval too wide to confirm it;",
        "- one-sided claims (a lag; rho > 0.92) are decided by the interval's bound on the claimed side: "
        "consistent when the whole interval lies on the claimed side, not reproduced when it lies wholly on "
        "the other, inconclusive when it straddles;",
        "- **not measurable (needs ...)**: the inputs are missing or too few; no number is shown.",
        "",
        "Shares (precursor, top-down, concordance) carry the exact Clopper-Pearson interval of k of n runs, "
        "widened to contain the hierarchical bootstrap interval over configurations and seeds when more than "
        "one configuration contributes; magnitudes and leads the bootstrap interval of the median. `n` counts "
        "configurations (task, level, model) and runs. Runs whose verdict is undetermined are left out of n. "
        f"The events stage marks runs by `{primary}`; the paper measured raw RankMe; both are shown. "
        "The Pythia runs are never pooled with the algorithmic ones.",
        "",
        "| claim | measure | grouping | paper | this run (95% interval) | n | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {r.claim} | {r.measure} | {r.grouping} | {r.paper} | {r.this_run} | {r.n} | {_verdict_cell(r)} |"
              for r in table.itertuples()]
    judged = sum(counts.values())
    lines += ["", "Verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items())
              + f" (of {judged} claims; {len(table) - judged} row(s) without a paper value).",
              "", "Notes per row (how each number was measured; what a not-measurable row needs):", ""]
    lines += [f"{i}. {r.claim}, {r.measure}, {r.grouping}: {r.how or '-'}" for i, r in enumerate(table.itertuples(), 1)]
    return "\n".join(lines) + "\n"
