"""This run's numbers next to the paper's headline claims, each with a verdict, and the small
summary that ``dvc exp show`` / ``dvc metrics diff`` read.

Verdicts (``compare``):

* ``reproduced``: the paper's value lies inside this run's 95% interval (for a lag: the whole
  interval of the median lead is below 0);
* ``not reproduced``: it lies outside (for a lag: the interval is at or above 0);
* ``inconclusive``: the paper's value lies inside an interval too wide to tell (a rate whose
  interval spans more than half of [0, 1]), or a lag whose interval straddles 0;
* ``not measurable``: the grid has no runs for the claim (e.g. one model size for a cross-scale
  claim, no real Pythia checkpoints).

The paper's numbers (Billa, arXiv 2602.15997) are constants here, to compare against, never to tune to.
"""
from __future__ import annotations

import pandas as pd

from stages.analysis import bootstrap
from stages.analysis.summary import CELL

HARD_TASKS = ("add", "mod", "mul")  # the paper's hard tasks
MOD_FLOOR = 2.0                      # the paper's MOD collapse floor (raw RankMe), at every size
MOD_FLOOR_BAND = (1.5, 2.5)          # "~2.0": reproduced when the interval reaches this band


def _ci(rows: pd.DataFrame, statistic, resamples: int, seed: int) -> dict:
    return bootstrap.interval(rows.reset_index(drop=True), statistic, CELL, resamples, seed)


WIDE = 0.5  # a rate's interval wider than this cannot confirm a value


def _inside(ci: dict, value: float, wide: float | None = WIDE) -> str:
    if ci["value"] is None:
        return "not measurable"
    low = ci["low"] if ci["low"] is not None else ci["value"]
    high = ci["high"] if ci["high"] is not None else ci["value"]
    if not low - 1e-12 <= value <= high + 1e-12:
        return "not reproduced"
    return "inconclusive" if wide is not None and high - low > wide else "reproduced"


def _fmt(ci: dict, percent: bool = False) -> str:
    if ci["value"] is None:
        return "-"
    f = (lambda v: f"{100 * v:.0f}%") if percent else (lambda v: f"{v:.3g}")
    interval = "" if ci["low"] is None else f" [{f(ci['low'])}, {f(ci['high'])}]"
    return f"{f(ci['value'])}{interval} (n={ci['n']})"


def compare(rows: pd.DataFrame, primary: str, cross: dict, pythia_sets: pd.DataFrame,
            resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per headline claim: claim, paper, this_run, verdict, how (what was measured).

    ``rows``: the long per-run table of the events stage (one row per run and measure);
    ``cross``: the cross-scale result; ``pythia_sets``: per-set Pythia events."""
    out = []

    def add(claim, paper, ci, verdict, how, percent=True):
        out.append({"claim": claim, "paper": paper, "this_run": _fmt(ci, percent), "verdict": verdict, "how": how})

    acquired = rows[rows["acquisition_step"].notna()]
    for measure in dict.fromkeys([primary, "rankme"]):  # the verdict's measure, then the paper's raw RankMe
        label = measure
        hard = acquired[(acquired["measure"] == measure) & acquired["task"].isin(HARD_TASKS)
                        & (acquired["level"] == "hard")]
        ci = _ci(hard, bootstrap.rate("precursor"), resamples, seed)
        add(f"precursor on hard tasks ({label})", "100% (ADD, MOD, MUL, all sizes)", ci, _inside(ci, 1.0),
            "acquired runs of add/mod/mul at level hard; precursor = recovery leads acquisition by "
            "events.precursor_min_lead")
        easy = acquired[(acquired["measure"] == measure) & (acquired["level"] == "easy")]
        ci = _ci(easy, bootstrap.rate("precursor"), resamples, seed)
        add(f"no precursor on easy tasks ({label})", "0% (together)", ci, _inside(ci, 0.0),
            "acquired runs at level easy")

    llc = acquired[acquired["measure"] == "llc"]
    ci = _ci(llc, bootstrap.rate("precursor"), resamples, seed)
    add("LLC is not a precursor", "0/24 (synchronous)", ci, _inside(ci, 0.0), "acquired runs, all levels")

    hess = acquired[acquired["measure"] == "hessian_top1"]
    ci = _ci(hess, bootstrap.median("lead_fraction"), resamples, seed)
    if ci["value"] is None:
        verdict = "not measurable"
    elif ci["high"] is not None and ci["high"] < 0:
        verdict = "reproduced"
    elif ci["low"] is not None and ci["low"] >= 0 or ci["low"] is None and ci["value"] >= 0:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    add("Hessian lags acquisition", "lags", ci, verdict,
        "median lead of the Hessian half-rise, share of the acquisition step (< 0: after acquisition)",
        percent=False)

    mod = rows[(rows["measure"] == "rankme") & (rows["task"] == "mod")]
    for model, g in mod.groupby("model", sort=True):
        ci = _ci(g, bootstrap.median("floor"), resamples, seed)
        if ci["value"] is None:
            verdict = "not measurable"
        else:
            low = ci["low"] if ci["low"] is not None else ci["value"]
            high = ci["high"] if ci["high"] is not None else ci["value"]
            verdict = "reproduced" if low <= MOD_FLOOR_BAND[1] and high >= MOD_FLOOR_BAND[0] else "not reproduced"
        add(f"MOD collapse floor ({model})", "RankMe ~2.0 at every size", ci, verdict,
            f"median raw-RankMe floor of mod runs (all levels); reproduced when the interval reaches "
            f"{MOD_FLOOR_BAND[0]}-{MOD_FLOOR_BAND[1]}", percent=False)

    p = rows[rows["measure"] == primary]
    ci = _ci(p, bootstrap.rate("top_down"), resamples, seed)
    add("collapse is top-down", "28/32 (88%)", ci, _inside(ci, 28 / 32),
        "runs with two or more varying layers that collapse at different checkpoints; ties count as not top-down")

    pairs = {k: v for k, v in (cross.get("pairs") or {}).items() if v.get("cells")}
    if not pairs:
        empty = {"value": None, "low": None, "high": None, "n": 0}
        add("cross-scale ordering of floors and phase boundaries", "Spearman rho > 0.92", empty, "not measurable",
            "needs two model sizes with task x level cells in common (grid.models)", percent=False)
        add("timing concordance within a difficulty class", "52% (easy) - 69% (hard); 26% on reversal", empty,
            "not measurable", "needs two model sizes with task x level cells in common (grid.models)")
    for name, pair in pairs.items():
        if not pair.get("cells"):  # sizes with no task x level cell in common (e.g. a Pythia model and p405k)
            continue
        for variable in ("floor_ratio", "recovery_step", "acquisition_step"):
            ci = pair["rho"][variable]
            verdict = "not measurable" if ci["value"] is None else (
                "reproduced" if (ci["high"] if ci["high"] is not None else ci["value"]) > 0.92 else "not reproduced")
            add(f"cross-scale rho of {variable} ({name})", "> 0.92", ci, verdict,
                "Spearman rho across task x level cells, seed medians", percent=False)
        for level, paper in (("easy", 0.52), ("hard", 0.69)):
            ci = pair["concordance"]["acquisition_step"]["by_level"].get(level) or {"value": None, "low": None,
                                                                                       "high": None, "n": 0}
            add(f"timing concordance, {level} ({name})", f"{paper:.0%}", ci, _inside(ci, paper),
                "share of pairs of cells of the class ordered alike by acquisition step at both sizes")

    ld = pythia_sets[pythia_sets["eval_set"] == "logical_deduction"] if len(pythia_sets) else pythia_sets
    real = [m for m in ld["model"].unique()] if len(ld) else []
    note = ("offline suite only (" + ", ".join(real) + "): not the paper's Pythia-2.8B") if real else "no Pythia runs"
    for r in (ld.to_dict("records") if len(ld) else []):
        gap = r["acquisition_step"] - r["recovery_step"] if pd.notna(r["acquisition_step"]) and pd.notna(
            r["recovery_step"]) else None
        ci = {"value": None if gap is None else float(gap), "low": None, "high": None, "n": 1}
        verdict = "not measurable" if r["model"] != "2.8b" else (
            "reproduced" if r["precursor"] is True else "not reproduced")
        add(f"Pythia logical-deduction precursor gap ({r['model']})", "~49K steps on Pythia-2.8B; none on easy sets",
            ci, verdict, note + f"; acquisition {r['acquisition_status']}", percent=False)
    if not real:
        add("Pythia logical-deduction precursor gap", "~49K steps on Pythia-2.8B; none on easy sets",
            {"value": None, "low": None, "high": None, "n": 0}, "not measurable", note)
    return pd.DataFrame(out, columns=["claim", "paper", "this_run", "verdict", "how"])


def summary_metrics(levels: dict, cells: pd.DataFrame, cross: dict) -> dict:
    """A few dozen numbers for ``dvc exp show`` / ``dvc metrics diff``: per level the precursor rate
    with its interval, the median lead, the top-down rate; per configuration the share of seeds with
    a precursor and the median acquisition and recovery steps; the cross-scale rho of acquisition
    per pair of sizes. Numbers only (no params, no text)."""
    out: dict = {}
    for level, s in levels.items():
        rate = s["precursor_rate"]
        out[level] = {"precursor": rate["value"], "precursor_lo": rate["low"], "precursor_hi": rate["high"],
                      "lead": s["median_lead_fraction"]["value"], "top_down": s["top_down_rate"]["value"],
                      "acquired": s["acquired"]}
    for c in cells.itertuples():
        out.setdefault("configs", {})[f"{c.task}-{c.level}-{c.model}"] = {
            "precursor": None if not c.decided else c.precursor_seeds / c.decided,
            "acquisition": c.acquisition, "recovery": c.recovery}
    for name, pair in (cross.get("pairs") or {}).items():
        out.setdefault("cross_scale", {})[name] = {"rho_acquisition": pair["rho"]["acquisition_step"]["value"],
                                                   "concordance": pair["concordance"]["acquisition_step"]["all"]["value"]}
    return out


def markdown(table: pd.DataFrame) -> str:
    """The comparison as a Markdown table (for the README)."""
    lines = ["| claim | paper | this run (95% interval, n) | verdict |", "|---|---|---|---|"]
    lines += [f"| {r.claim} | {r.paper} | {r.this_run} | {r.verdict} |" for r in table.itertuples()]
    return "\n".join(lines) + "\n"
