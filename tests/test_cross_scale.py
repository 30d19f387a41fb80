"""Known-answer tests of the cross-scale statistics (stages/analysis/cross_scale.py)."""
import json

import numpy as np
import pandas as pd
import pytest

from stages.analysis.cross_scale import cross_scale, cross_scale_table

R = 200  # resamples: enough for the checks, fast


def table(cells, small, large, variable="acquisition_step", models=("p405k", "p3m"), sizes=(405_000, 3_000_000)):
    """One seed per (cell, model): ``cells`` is a list of (task, level); ``small``/``large`` the
    values of ``variable`` at the two sizes; the other variables follow ``variable``."""
    rows = []
    for model, n, vals in ((models[0], sizes[0], small), (models[1], sizes[1], large)):
        for (task, level), v in zip(cells, vals):
            row = {"task": task, "level": level, "model": model, "n_params": n, "seed": 0,
                   "floor_ratio": np.nan, "recovery_step": np.nan, "acquisition_step": np.nan}
            row[variable] = v
            rows.append(row)
    return pd.DataFrame(rows)


FOUR = [("a", "hard"), ("b", "hard"), ("c", "hard"), ("d", "hard")]


def test_one_reversal_gives_rho_0_8_and_five_sixths():
    out = cross_scale(table(FOUR, [10, 20, 30, 40], [100, 200, 400, 300]), resamples=R)
    pair = out["pairs"]["p405k__p3m"]
    assert (pair["small"], pair["large"], pair["cells"]) == ("p405k", "p3m", 4)
    rho = pair["rho"]["acquisition_step"]
    assert rho["value"] == pytest.approx(0.8) and rho["n"] == 4
    conc = pair["concordance"]["acquisition_step"]["all"]
    assert conc["value"] == pytest.approx(5 / 6) and conc["n"] == 6
    assert pair["reversed_pairs"]["acquisition_step"] == [["c-hard", "d-hard"]]
    # one seed per cell: the interval's width comes from resampling cells alone
    assert rho["low"] < rho["value"] <= rho["high"] and conc["low"] < conc["value"] <= conc["high"]
    # undefined variables: no value, no interval, n 0
    assert pair["rho"]["floor_ratio"] == {"value": None, "low": None, "high": None, "n": 0}
    assert pair["concordance"]["recovery_step"]["all"]["value"] is None
    assert "note" not in out


def test_identical_orderings():
    out = cross_scale(table(FOUR, [10, 20, 30, 40], [1, 2, 3, 4], variable="recovery_step"), resamples=R)
    pair = out["pairs"]["p405k__p3m"]
    assert pair["rho"]["recovery_step"]["value"] == pytest.approx(1)
    conc = pair["concordance"]["recovery_step"]["all"]
    assert conc["value"] == 1 and conc["low"] == 1 and conc["high"] == 1
    assert pair["reversed_pairs"]["recovery_step"] == []


def test_full_reversal():
    out = cross_scale(table(FOUR, [1, 2, 3, 4], [4, 3, 2, 1]), resamples=R)
    pair = out["pairs"]["p405k__p3m"]
    assert pair["rho"]["acquisition_step"]["value"] == pytest.approx(-1)
    assert pair["concordance"]["acquisition_step"]["all"]["value"] == 0
    assert len(pair["reversed_pairs"]["acquisition_step"]) == 6
    # each pair written [earlier at the small size, earlier at the large size]
    assert ["a-hard", "d-hard"] in pair["reversed_pairs"]["acquisition_step"]


def test_concordance_within_level():
    cells = [("a", "easy"), ("b", "easy"), ("c", "hard"), ("d", "hard")]
    # easy pair reverses; hard pair keeps its order; across-level pairs: (a,c) (a,d) (b,c) (b,d) all kept
    out = cross_scale(table(cells, [1, 2, 10, 20], [2, 1, 10, 20]), resamples=R)
    conc = out["pairs"]["p405k__p3m"]["concordance"]["acquisition_step"]
    assert conc["all"]["value"] == pytest.approx(5 / 6) and conc["all"]["n"] == 6
    assert list(conc["by_level"]) == ["easy", "hard"]
    assert conc["by_level"]["easy"]["value"] == 0 and conc["by_level"]["easy"]["n"] == 1
    assert conc["by_level"]["hard"]["value"] == 1 and conc["by_level"]["hard"]["n"] == 1
    assert out["pairs"]["p405k__p3m"]["reversed_pairs"]["acquisition_step"] == [["a-easy", "b-easy"]]


def test_ties_count_half():
    cells = FOUR[:3]
    # small: a == b (tied); large: c == b. Pairs: (a,b) tied small -> 1/2; (a,c) kept -> 1; (b,c) tied large -> 1/2
    out = cross_scale(table(cells, [10, 10, 30], [1, 5, 5]), resamples=R)
    pair = out["pairs"]["p405k__p3m"]
    assert pair["concordance"]["acquisition_step"]["all"]["value"] == pytest.approx(2 / 3)
    assert pair["reversed_pairs"]["acquisition_step"] == []


def test_too_few_cells():
    out = cross_scale(table(FOUR[:2], [1, 2], [2, 1]), resamples=R)
    pair = out["pairs"]["p405k__p3m"]
    assert pair["rho"]["acquisition_step"] == {"value": None, "low": None, "high": None, "n": 2}
    assert pair["concordance"]["acquisition_step"]["all"]["value"] == 0
    assert pair["concordance"]["acquisition_step"]["all"]["n"] == 1
    single = cross_scale(table(FOUR[:1], [1], [2]), resamples=R)["pairs"]["p405k__p3m"]
    assert single["concordance"]["acquisition_step"]["all"] == {"value": None, "low": None, "high": None, "n": 0}


def test_only_cells_present_at_both_sizes():
    runs = table(FOUR, [10, 20, 30, 40], [100, 200, 400, 300])
    extra = runs.iloc[[0]].assign(task="e", acquisition_step=1)  # a cell measured only at the small size
    pair = cross_scale(pd.concat([runs, extra]), resamples=R)["pairs"]["p405k__p3m"]
    assert pair["cells"] == 4 and pair["rho"]["acquisition_step"]["value"] == pytest.approx(0.8)


def test_seed_median_aggregation():
    runs = table(FOUR, [10, 20, 30, 40], [100, 200, 400, 300])
    # two more seeds for cell d at the large size: median 250 puts it below c (400) ... and above b (200)
    noisy = runs[(runs.task == "d") & (runs.model == "p3m")]
    more = pd.concat([noisy.assign(seed=1, acquisition_step=250), noisy.assign(seed=2, acquisition_step=np.nan),
                      noisy.assign(seed=3, acquisition_step=240)])
    pair = cross_scale(pd.concat([runs, more]), resamples=R)["pairs"]["p405k__p3m"]
    # seed values of d at the large size: 300, 250, 240 (NaN left out) -> median 250: still the c/d reversal
    assert pair["rho"]["acquisition_step"]["value"] == pytest.approx(0.8)
    more.loc[:, "acquisition_step"] = [500, np.nan, 600]
    pair = cross_scale(pd.concat([runs, more]), resamples=R)["pairs"]["p405k__p3m"]
    assert pair["rho"]["acquisition_step"]["value"] == pytest.approx(1)  # median 500 > 400


def test_intervals_deterministic_and_contain_value():
    rng = np.random.default_rng(1)
    cells = [(f"t{i}", lvl) for i in range(4) for lvl in ("easy", "hard")]
    rows = []
    for model, n, scale in (("p405k", 405_000, 1.0), ("p3m", 3_000_000, 3.0)):
        for k, (task, level) in enumerate(cells):
            for s in range(3):
                base = 100 * (k + 1)
                rows.append({"task": task, "level": level, "model": model, "n_params": n, "seed": s,
                             "floor_ratio": 0.1 * (k + 1) + rng.normal(0, 0.15),
                             "recovery_step": scale * base + rng.normal(0, 60),
                             "acquisition_step": scale * base + rng.normal(0, 120)})
    runs = pd.DataFrame(rows)
    a, b = cross_scale(runs, resamples=R, seed=3), cross_scale(runs, resamples=R, seed=3)
    assert a == b
    json.dumps(a, allow_nan=False)
    pair = a["pairs"]["p405k__p3m"]
    stats = [pair["rho"][v] for v in pair["rho"]]
    for v, conc in pair["concordance"].items():
        stats += [conc["all"], *conc["by_level"].values()]
    for stat in stats:
        assert stat["value"] is not None and stat["low"] is not None
        assert stat["low"] - 1e-12 <= stat["value"] <= stat["high"] + 1e-12  # spearmanr rounding at rho 1
    # seed noise: the intervals have width
    assert pair["rho"]["acquisition_step"]["high"] > pair["rho"]["acquisition_step"]["low"]
    conc = pair["concordance"]["acquisition_step"]["all"]
    assert conc["high"] > conc["low"]
    # another seed changes the draws but not the values
    c = cross_scale(runs, resamples=R, seed=4)["pairs"]["p405k__p3m"]
    assert c["rho"]["floor_ratio"]["value"] == pair["rho"]["floor_ratio"]["value"]
    assert c["rho"]["floor_ratio"]["low"] != pair["rho"]["floor_ratio"]["low"]


def test_seed_noise_alone_widens_interval():
    # the two cells at the large size overlap through their seeds: the seed resample can swap them,
    # so the concordance interval cannot be a point even though there is a single pair of cells
    rows = []
    for model, n, seeds in (("p405k", 405_000, {"a": [10, 10, 10], "b": [20, 20, 20]}),
                            ("p3m", 3_000_000, {"a": [100, 150, 300], "b": [120, 200, 250]})):
        for task, values in seeds.items():
            rows += [{"task": task, "level": "easy", "model": model, "n_params": n, "seed": s,
                      "acquisition_step": v} for s, v in enumerate(values)]
    conc = cross_scale(pd.DataFrame(rows), resamples=R)["pairs"]["p405k__p3m"]["concordance"]
    stat = conc["acquisition_step"]["all"]
    assert stat["value"] == 1 and stat["n"] == 1  # medians 150 < 200
    assert stat["low"] == 0 and stat["high"] == 1


def test_fewer_than_two_sizes():
    runs = table(FOUR, [10, 20, 30, 40], [1, 2, 3, 4], models=("p405k", "p405k"), sizes=(405_000, 405_000))
    out = cross_scale(runs, resamples=R)
    assert out["pairs"] == {} and isinstance(out["note"], str)
    assert out["size_vs_floor"]["pooled"]["rho"] is None
    assert cross_scale_table(out).empty
    empty = cross_scale(runs.iloc[:0], resamples=R)
    assert empty["pairs"] == {} and "note" in empty


def test_pairs_ordered_by_size():
    runs = pd.concat([table(FOUR, [1, 2, 3, 4], [1, 2, 3, 4], models=("p3m", "p405k"), sizes=(3_000_000, 405_000)),
                      table(FOUR, [1, 2, 3, 4], [1, 2, 3, 4], models=("p20m", "p20m"), sizes=(20_000_000,) * 2)])
    out = cross_scale(runs, resamples=0)
    assert list(out["pairs"]) == ["p405k__p3m", "p405k__p20m", "p3m__p20m"]
    assert out["pairs"]["p405k__p20m"]["large_params"] == 20_000_000
    assert out["pairs"]["p405k__p3m"]["rho"]["acquisition_step"]["low"] is None  # no resamples, no interval


def test_size_vs_floor():
    rows = []
    for model, n, floors in (("a", 100_000, (0.1, 0.5)), ("b", 1_000_000, (0.2, 0.4)), ("c", 10_000_000, (0.3, 0.3001))):
        for task, floor in zip(("mod", "copy"), floors):
            rows += [{"task": task, "level": "hard", "model": model, "n_params": n, "seed": s,
                      "floor_ratio": floor + d} for s, d in enumerate((0.0, 0.01, -0.01))]
    out = cross_scale(pd.DataFrame(rows), resamples=20)
    svf = out["size_vs_floor"]
    assert svf["n_model_sizes"] == 3
    assert svf["by_cell"]["mod-hard"]["rho"] == pytest.approx(1)
    assert svf["by_cell"]["copy-hard"]["rho"] == pytest.approx(-1)
    assert svf["by_cell"]["mod-hard"]["models"] == ["a", "b", "c"]
    assert svf["pooled"]["rho"] == pytest.approx(0) and svf["pooled"]["n"] == 6
    assert "note" not in out and len(out["pairs"]) == 3


def test_table_flat():
    cells = [("a", "easy"), ("b", "easy"), ("c", "hard"), ("d", "hard")]
    out = cross_scale(table(cells, [1, 2, 10, 20], [2, 1, 10, 20]), resamples=R)
    t = cross_scale_table(out)
    assert list(t.columns) == ["pair", "statistic", "variable", "level", "value", "low", "high", "n"]
    assert len(t) == 3 + 2 * 4 + 1  # 3 rho + 2 timing variables x (all, easy, hard, easy tasks) + reversal
    row = t[(t.statistic == "concordance") & (t.variable == "acquisition_step") & (t.level == "easy")].iloc[0]
    assert row["value"] == 0 and row["n"] == 1
    row = t[(t.statistic == "rho") & (t.variable == "acquisition_step")].iloc[0]
    assert row["pair"] == "p405k__p3m" and row["n"] == 4
