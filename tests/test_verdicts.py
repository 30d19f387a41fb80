"""The verdict rule (stages/analysis/verdicts.py) and the paper table (stages/analysis/paper.py) on
constructed event tables with known answers: every branch of every verdict function, with one, two
and three model sizes; and every committed file under metrics/ and plots/ is a stage output."""
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stages.analysis import verdicts as V
from stages.analysis.cross_scale import cross_scale
from stages.analysis.paper import compare, markdown, summary_metrics
from stages.analysis.summary import CELL

ROOT = Path(__file__).resolve().parents[1]
R = 200


def est(value, low, high, n=6):
    return {"value": value, "low": low, "high": high, "n": n, "k": None, "configs": 1, "needs": None}


def test_clopper_pearson_exact_values():
    assert V.clopper_pearson(3, 3) == pytest.approx((0.025 ** (1 / 3), 1.0))  # 3/3: [29.2%, 100%]
    assert V.clopper_pearson(1, 3) == pytest.approx((0.0084037587, 0.9057006759))
    assert V.clopper_pearson(0, 12) == pytest.approx((0.0, 1 - 0.025 ** (1 / 12)))
    with pytest.raises(ValueError):
        V.clopper_pearson(4, 3)


def runs(outcomes: dict, column="precursor", model="p405k"):
    """One row per seed: ``outcomes`` maps (task, level) to a list of verdicts (True/False/None)."""
    return pd.DataFrame([{"task": t, "level": l, "model": model, "seed": s, column: v}
                         for (t, l), vs in outcomes.items() for s, v in enumerate(vs)])


def test_share_never_collapses_to_a_point_and_counts_configs():
    one = V.share(runs({("mod", "hard"): [True, True, True]}), "precursor", CELL, R)
    assert (one["k"], one["n"], one["configs"]) == (3, 3, 1)
    assert one["low"] == pytest.approx(0.2924017738) and one["high"] == 1.0
    assert V.fmt(one, percent=True) == "3/3 = 100% [29%, 100%]" and V.size(one) == "1 config, 3 runs"
    # two configurations that disagree: the bootstrap over configurations widens the exact interval
    two = V.share(runs({("copy", "easy"): [False] * 3, ("mod", "easy"): [True] * 3}), "precursor", CELL, R)
    cp = V.clopper_pearson(3, 6)
    assert two["value"] == 0.5 and two["low"] <= cp[0] and two["high"] >= cp[1] and two["configs"] == 2
    assert (two["low"], two["high"]) == (0.0, 1.0)
    # undetermined runs are left out of n; none decided: not measurable, naming what is missing
    some = V.share(runs({("mod", "hard"): [True, None, False]}), "precursor", CELL, R)
    assert (some["k"], some["n"]) == (1, 2)
    none = V.share(runs({("mod", "hard"): [None, None]}), "precursor", CELL, R, needs="decided runs")
    assert none["value"] is None and none["needs"] == "decided runs"


def test_point_verdict_every_branch():
    assert V.share_verdict(est(1.0, 0.54, 1.0), 1.0) == V.CONSISTENT          # inside, width 0.46
    assert V.share_verdict(est(1.0, 0.29, 1.0), 1.0) == V.INCONCLUSIVE        # inside, width 0.71 > 0.5
    assert V.share_verdict(est(1 / 3, 0.0084, 0.906), 1.0) == V.NOT_REPRODUCED  # 1/3 excludes 100%
    assert V.share_verdict(V.missing("runs"), 1.0) == V.NOT_MEASURABLE
    # magnitude: width at most half the paper's value (1.0 for ~2.0)
    assert V.magnitude_verdict(est(3.29, 2.45, 4.26), 2.0) == V.NOT_REPRODUCED  # the MOD floor of issue 20
    assert V.magnitude_verdict(est(2.1, 1.6, 2.4), 2.0) == V.CONSISTENT
    assert V.magnitude_verdict(est(2.1, 1.0, 3.5), 2.0) == V.INCONCLUSIVE


def test_one_sided_verdict_every_branch():
    assert V.one_sided_verdict(est(0.97, 0.93, 1.0), 0.92, "above") == V.CONSISTENT
    assert V.one_sided_verdict(est(0.2, -0.6, 1.0), 0.92, "above") == V.INCONCLUSIVE  # upper bound alone passed before
    assert V.one_sided_verdict(est(0.5, 0.1, 0.92), 0.92, "above") == V.NOT_REPRODUCED
    assert V.one_sided_verdict(est(-0.3, -0.5, -0.1), 0.0, "below") == V.CONSISTENT
    assert V.one_sided_verdict(est(0.71, 0.247, 0.783), 0.0, "below") == V.NOT_REPRODUCED  # the Hessian row
    assert V.one_sided_verdict(est(0.1, -0.2, 0.4), 0.0, "below") == V.INCONCLUSIVE
    assert V.one_sided_verdict(V.missing("x"), 0.0, "below") == V.NOT_MEASURABLE
    with pytest.raises(ValueError):
        V.one_sided_verdict(est(0, 0, 0), 0.0, "sideways")


def test_pairs_to_tell_52_from_69():
    n = V.pairs_to_tell(0.52, 0.69)
    assert n == 37
    for m, ok in ((n, True), (n - 1, False)):  # the first n at which both exact intervals exclude the other value
        lo_a, hi_a = V.clopper_pearson(round(0.52 * m), m)
        lo_b, hi_b = V.clopper_pearson(round(0.69 * m), m)
        assert (not lo_a <= 0.69 <= hi_a and not lo_b <= 0.52 <= hi_b) == ok
    assert V.pairs_to_tell(0.26, 0.5) == 20


def test_counts_list_every_verdict():
    assert V.counts([V.CONSISTENT, V.CONSISTENT, V.NOT_MEASURABLE]) == {
        "consistent": 2, "not reproduced": 0, "inconclusive": 0, "not measurable": 1}


# ------------------------------------------------------------------------------ the paper table

def event_rows(cells, models=(("p405k", 405_000),), acq=None, rec=None, seeds=1, measures=("rankme_centred", "rankme")):
    """An events table: ``cells`` (task, level); per model, acquisition/recovery steps per cell
    (``acq[model][i]``); precursor True when recovery < acquisition / 2; floors 3.0."""
    rows = []
    for model, n_params in models:
        for i, (task, level) in enumerate(cells):
            for seed in range(seeds):
                a = None if acq is None else acq[model][i]
                r = None if rec is None else rec[model][i]
                for measure in measures:
                    rows.append({"run": f"{task}-{level}-{model}-s{seed}", "task": task, "level": level,
                                 "model": model, "seed": seed, "n_params": n_params, "measure": measure,
                                 "acquisition_step": a, "recovery_step": r, "floor": 3.0, "floor_ratio": 0.1,
                                 "floor_step": 4, "floor_mean_dominance": 0.999, "floor_rankme_centred": 50.0,
                                 "precursor": None if a is None else (r is not None and r < a / 2),
                                 "lead_fraction": None, "top_down": False, "order": "simultaneous",
                                 "varying_layers": 2, "first_update_mean_dominance": 0.99 - 0.001 * i})
    return pd.DataFrame(rows)


def table(rows, primary="rankme_centred"):
    cross = cross_scale(rows[rows["measure"] == primary], resamples=R)
    return compare(rows, primary, cross, pd.DataFrame(), resamples=R)


def row(t, claim, grouping=None, measure=None):
    m = t[t["claim"].str.startswith(claim)]
    if grouping is not None:
        m = m[m["grouping"] == grouping]
    if measure is not None:
        m = m[m["measure"] == measure]
    assert len(m) == 1, (claim, grouping, list(t["claim"]))
    return m.iloc[0]


def test_one_model_size_cross_scale_not_measurable_and_groupings():
    cells = [("mod", "hard"), ("copy", "hard"), ("mod", "easy"), ("copy", "easy")]
    rows = event_rows(cells, acq={"p405k": [300, 30, 100, 15]}, rec={"p405k": [50, 40, 30, 20]}, seeds=3)
    t = table(rows)
    assert set(t["verdict"]) <= {*V.VERDICTS, V.NO_CLAIM}
    # by level: hard = mod-hard (precursor) + copy-hard (not): 3/6; by class: hard tasks = mod: 6/6
    r = row(t, "precursor", "level hard", "centred RankMe")
    assert (r["this_run"].split(" [")[0], r["n"]) == ("3/6 = 50%", "2 configs, 6 runs")
    r = row(t, "precursor", "hard tasks (ADD, MOD, MUL)", "centred RankMe")
    assert r["this_run"].startswith("6/6 = 100% [54%, 100%]") and r["verdict"] == V.CONSISTENT
    r = row(t, "precursor", "easy tasks (the other five)", "raw RankMe (paper's)")
    assert r["this_run"].startswith("0/6 = 0% [0%, 46%]") and r["verdict"] == V.CONSISTENT
    floor = row(t, "MOD collapse floor", measure="raw RankMe (paper's)")
    assert floor["verdict"] == V.NOT_REPRODUCED and "mean dominance 0.999" in floor["how"]
    top = row(t, "collapse is top-down", measure="raw RankMe (paper's)")
    assert top["this_run"].startswith("0/12 = 0%") and "2 varying layers in 12 runs" in top["how"]
    for claim in ("cross-scale ordering", "prediction when task order reverses"):
        r = row(t, claim)
        assert r["verdict"] == V.NOT_MEASURABLE and "two model sizes" in r["needs"] and r["this_run"] == "-"
    md = markdown(t)
    assert "not measurable (needs two model sizes" in md and "Clopper-Pearson" in md and "Verdicts: " in md
    summary = summary_metrics(t, rows, "rankme_centred")
    assert summary["precursor_hard_cls"] == 1.0 and summary["precursor_hard_lvl"] == 0.5
    assert summary["runs"] == summary["acquired_runs"] == 12
    assert sum(summary[k.replace(" ", "_")] for k in V.VERDICTS) == int(t["verdict"].isin(V.VERDICTS).sum())
    shift = row(t, "first-update mean shift (p405k)")
    assert shift["verdict"] == V.NO_CLAIM and shift["this_run"].startswith("0.9")


def test_missing_inputs_are_not_measurable_never_a_number():
    cells = [("copy", "easy")]
    rows = event_rows(cells, acq={"p405k": [None]}, rec={"p405k": [None]})
    t = table(rows)
    r = row(t, "precursor", "level hard", "centred RankMe")
    assert r["verdict"] == V.NOT_MEASURABLE and r["this_run"] == "-" and "level hard" in r["needs"]
    assert row(t, "LLC is not a precursor")["verdict"] == V.NOT_MEASURABLE
    assert summary_metrics(t, rows, "rankme_centred")["precursor_hard_lvl"] == "n/a"


NINE = [(f"t{i}", "hard") for i in range(9)]  # 36 within-level pairs: one short of 37


def test_two_sizes_rho_consistent_concordance_needs_pairs():
    acq = {"p405k": [10 * (i + 1) for i in range(9)], "p3m": [20 * (i + 1) for i in range(9)]}
    rows = event_rows(NINE, models=(("p405k", 405_000), ("p3m", 3_000_000)), acq=acq, rec=acq)
    t = table(rows)
    rho = row(t, "cross-scale rho of acquisition_step (p405k vs p3m)")
    assert rho["this_run"] == "1 [1, 1]" and rho["verdict"] == V.CONSISTENT
    conc = row(t, "timing concordance within a class (p405k vs p3m)", "level hard")
    assert conc["verdict"] == V.NOT_MEASURABLE and "37 within-class pairs" in conc["needs"] and "has 36" in conc["needs"]
    rev = row(t, "prediction when task order reverses")
    assert rev["verdict"] == V.NOT_MEASURABLE and "has 0" in rev["needs"]  # no order reverses


def test_cells_absent_at_a_size_are_named():
    acq = {"p405k": [10 * (i + 1) for i in range(9)], "p3m": [20 * (i + 1) for i in range(8)] + [None]}
    rows = event_rows(NINE, models=(("p405k", 405_000), ("p3m", 3_000_000)), acq=acq, rec=acq)
    t = table(rows)
    rho = row(t, "cross-scale rho of acquisition_step")
    assert rho["n"] == "8 cells" and rho["grouping"] == "8 task x level cells"
    assert "absent at p3m: 1 (t8-hard)" in rho["how"]


def test_two_sizes_reversed_order_not_reproduced_and_concordance_measured():
    ten = [(f"t{i}", "hard") for i in range(10)]  # 45 pairs
    acq = {"p405k": [10 * (i + 1) for i in range(10)], "p3m": [10 * (10 - i) for i in range(10)]}
    rec = {"p405k": [10 * (10 - i) for i in range(10)], "p3m": [1] * 10}
    rows = event_rows(ten, models=(("p405k", 405_000), ("p3m", 3_000_000)), acq=acq, rec=rec)
    t = table(rows)
    assert row(t, "cross-scale rho of acquisition_step")["verdict"] == V.NOT_REPRODUCED  # rho -1
    conc = row(t, "timing concordance within a class", "level hard")
    assert conc["this_run"].startswith("0% [0%, ") and conc["n"] == "45 pairs" and conc["verdict"] == V.NOT_REPRODUCED
    # every pair reverses, and the small size's recovery order predicts the large size's order in all 45
    rev = row(t, "prediction when task order reverses")
    assert rev["this_run"].startswith("100%") and rev["n"] == "45 pairs" and rev["verdict"] == V.NOT_REPRODUCED


def test_three_sizes_compare_smallest_with_largest():
    acq = {m: [10 * (i + 1) for i in range(9)] for m in ("a", "b", "c")}
    rows = event_rows(NINE, models=(("b", 3_000_000), ("a", 405_000), ("c", 11_000_000)), acq=acq, rec=acq)
    t = table(rows)
    rhos = t[t["claim"].str.startswith("cross-scale rho")]
    assert len(rhos) == 9  # every pair of sizes, ordered by parameter count
    assert [c.split("(")[-1] for c in rhos["claim"][::3]] == ["a vs b)", "a vs c)", "b vs c)"]
    conc = t[t["claim"].str.startswith("timing concordance, all pairs")]
    assert len(conc) == 3 and set(conc["verdict"]) == {V.NO_CLAIM} and set(conc["n"]) == {"36 pairs"}


def test_reversal_statistic_known_answer():
    from tests.test_cross_scale import table as scale_table

    four = [("a", "hard"), ("b", "hard"), ("c", "hard"), ("d", "hard")]
    runs_ = scale_table(four, [10, 20, 30, 40], [10, 20, 40, 30])           # c and d reverse
    runs_["recovery_step"] = [1, 2, 5, 3] + [np.nan] * 4                  # small size: d recovers before c
    pair = cross_scale(runs_, resamples=R)["pairs"]["p405k__p3m"]
    assert pair["reversal"]["value"] == 1.0 and pair["reversal"]["n"] == 1
    runs_["recovery_step"] = [1, 2, 3, 5] + [np.nan] * 4                  # c before d: predicts the old order
    assert cross_scale(runs_, resamples=R)["pairs"]["p405k__p3m"]["reversal"]["value"] == 0.0
    conc = pair["concordance"]["acquisition_step"]
    assert conc["by_class"] == {"easy tasks": conc["by_level"]["hard"]}  # tasks a..d are all of the easy class


def test_every_committed_metrics_and_plots_file_is_a_stage_output():
    try:
        from dvc.repo import Repo
    except ImportError:
        pytest.skip("dvc is not installed")
    files = subprocess.run(["git", "ls-files", "metrics", "plots"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    outs = [Path(o.fs_path).resolve() for o in Repo(str(ROOT)).index.outs]
    stale = [f for f in files if not any((ROOT / f).resolve() == o or o in (ROOT / f).resolve().parents
                                         for o in outs)]
    assert stale == [], f"committed files no stage of dvc.yaml writes: {stale}"


def test_summary_carries_cross_scale_numbers_with_two_sizes():
    acq = {"p405k": [10 * (i + 1) for i in range(9)], "p3m": [20 * (i + 1) for i in range(9)]}
    rows = event_rows(NINE, models=(("p405k", 405_000), ("p3m", 3_000_000)), acq=acq, rec=acq)
    cross = cross_scale(rows[rows["measure"] == "rankme_centred"], resamples=R)
    summary = summary_metrics(compare(rows, "rankme_centred", cross, pd.DataFrame(), resamples=R), rows,
                              "rankme_centred", cross)
    assert summary["rho_acq_p405k_p3m"] == 1.0 and summary["concordance_p405k_p3m"] == 1.0
    one = event_rows(NINE, acq={"p405k": acq["p405k"]}, rec={"p405k": acq["p405k"]})
    assert not any(k.startswith("rho_") for k in summary_metrics(table(one), one, "rankme_centred",
                                                                 cross_scale(one, resamples=R)))


def test_the_pythia_stand_in_is_not_a_model_size():
    from stages.analysis.paper import model_sizes

    cells = [("copy", "easy"), ("mod", "easy"), ("mod", "hard")]
    rows = event_rows(cells, acq={"p405k": [15, 100, 300]}, rec={"p405k": [5, 30, 140]})
    pythia = event_rows([("pythia", "lm")], models=(("tiny", 100_000),), acq={"tiny": [384]}, rec={"tiny": [768]})
    both = pd.concat([rows, pythia], ignore_index=True)
    assert cross_scale(both[both["measure"] == "rankme_centred"], resamples=R)["pairs"]  # would pair tiny with p405k
    assert cross_scale(model_sizes(both[both["measure"] == "rankme_centred"]), resamples=R)["pairs"] == {}
    t = compare(both, "rankme_centred", cross_scale(model_sizes(both), resamples=R), pd.DataFrame(), resamples=R)
    assert row(t, "collapse is top-down (p405k)", measure="raw RankMe (paper's)")["n"] == "3 configs, 3 runs"
    assert not t["claim"].str.contains("tiny").any()  # never pooled, never a size
