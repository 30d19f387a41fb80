"""Event rules on constructed trajectories with known answers (stages/analysis/event_rules.py, runs.py, summary.py)."""
import numpy as np
import pandas as pd
import pytest
import torch

from stages.analysis import bootstrap
from stages.analysis.event_rules import (ABSENT, FOUND, UNDETERMINED, Rules, acquisition, acquisition_step, find_dip,
                                    layer_order, lead_fraction, precursor_verdict, spearman)
from stages.analysis.runs import run_events, subsample
from stages.analysis.summary import level_summary, resolution_sensitivity, seed_agreement, threshold_sensitivity
from stages.measures.rankme import geometry, rankme, rankme_from_singular_values

STEPS = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])


def test_acquisition_needs_three_consecutive_checkpoints():
    steps = [0, 10, 20, 30, 40, 50, 60]
    assert acquisition_step(steps, [0, 0.6, 0.7, 0.2, 0.5, 0.9, 0.95]) == 40
    assert acquisition(steps, [0, 0.6, 0.7, 0.49, 0.5, 0.9, 0.3]) == (None, ABSENT)
    assert acquisition(steps, [0, 0, 0, 0, 0, 0.9, 0.95]) == (None, UNDETERMINED)  # run ended mid-window
    assert acquisition(steps, [0.5] * 7) == (0, FOUND)
    assert acquisition_step(steps, [0, 0.6, 0.7, 0.8, 0, 0, 0]) == 10
    assert acquisition_step(steps, [0, 0.9, 0.9, 0.9, 1, 1, 1], threshold=0.95) == 40
    assert acquisition_step(steps, [0, 0.9, 0.9, 0.1, 1, 1, 1], window=2) == 10


def test_dip_half_depth_collapse_floor_and_recovery():
    r = np.array([30, 31, 29, 25, 14, 6, 8, 20, 24, 40, 40, 40], dtype=float)
    d = find_dip(STEPS, r)
    # peak 31 at step 1, floor 6 at step 16, half-depth 18.5 -> first at or below it: step 8 (14)
    assert (d.status, d.peak, d.peak_step, d.collapse_step, d.floor, d.floor_step) == (FOUND, 31, 1, 8, 6, 16)
    assert d.recovery_step == 64 and d.recovery_status == FOUND  # 6 + 0.5 * 25 = 18.5 -> 20 at step 64


def test_mean_shift_collapse_raw_drops_centred_does_not():
    """A shared direction that grows after the first update: raw RankMe collapses at once, centred
    RankMe (the variation across samples) is unchanged and has no dip."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(256, 32, generator=gen)
    direction = torch.zeros(32)
    direction[0] = 1.0
    shifts = [0.0, 50.0, 50.0, 50.0, 20.0, 5.0, 0.0, 0.0]
    stack = torch.stack([base + s * direction for s in shifts])
    geo = geometry(stack)
    steps = np.arange(len(shifts))
    raw, centred = find_dip(steps, geo["rankme"]), find_dip(steps, geo["rankme_centred"])
    assert raw.status == FOUND and raw.collapse_step == 1 and raw.recovery_step == 5
    assert centred.status == ABSENT and np.ptp(geo["rankme_centred"]) < 1e-5  # float32 SVD
    assert geo["mean_dominance"][0] < 0.1 and geo["mean_dominance"][1] > 0.99
    assert geo["varies"].all()


def test_constant_layer_has_no_centred_geometry():
    row = torch.randn(1, 16, generator=torch.Generator().manual_seed(1))
    geo = geometry(row.repeat(64, 1)[None])
    assert geo["mean_dominance"][0] == pytest.approx(1.0)
    assert not geo["varies"][0] and np.isnan(geo["rankme_centred"][0])
    # Rank one: singular values (8 |row|, 0, ..., 0), RankMe 1 + 15 eps ln(1/eps) or so with eps = 1e-7.
    exact = rankme_from_singular_values([8 * float(torch.linalg.vector_norm(row.double())), *[0.0] * 15])
    assert rankme(row.repeat(64, 1)) == pytest.approx(exact, rel=1e-12)  # float64 SVD
    # geometry's float32 SVD leaves spurious singular values of order n * eps32 * s_1; each share d of the
    # total adds about d * ln(1 / EPS) = 16 d to RankMe: abs 1e-5 admits shares summing to 6e-7, 5 ulp32.
    # Seen: a spurious 3.4e-6 beside 30.2 on Zen 4, adding 1.7e-6.
    assert geo["rankme"][0] == pytest.approx(exact, abs=1e-5)


def test_no_dip_when_shallow_or_monotone():
    assert find_dip(STEPS, np.linspace(10, 12, len(STEPS))).status == ABSENT
    assert find_dip(STEPS, 10 - 0.1 * np.arange(len(STEPS))).status == ABSENT  # 11% below the peak < 20%
    assert find_dip(STEPS[:1], [3.0]).status == UNDETERMINED


def test_dip_searched_up_to_acquisition_only():
    """A later, deeper compression after acquisition is not the dip that precedes it."""
    r = np.array([30, 30, 10, 10, 30, 30, 30, 30, 2, 2, 2, 2], dtype=float)
    d = find_dip(STEPS, r, until=64)
    assert (d.floor, d.floor_step, d.recovery_step) == (10, 2, 8)


def test_recovery_undetermined_near_the_end():
    d = find_dip(STEPS, np.array([30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 5, 5], dtype=float))
    assert d.status == FOUND and d.recovery_step is None and d.recovery_status == UNDETERMINED
    d = find_dip(STEPS, np.array([30, 30, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5], dtype=float))
    assert d.recovery_status == ABSENT


def test_precursor_rule_is_scale_free():
    rules = Rules(min_lead=0.5, min_checkpoints=3)
    steps = np.arange(0, 10_001, 10)
    assert lead_fraction(100, 400) == pytest.approx(0.75)
    assert precursor_verdict(100, 400, steps, rules) is True
    # the same run ten times longer, checkpoints ten times sparser: the same verdict
    assert precursor_verdict(1000, 4000, steps * 10, rules) is True
    assert precursor_verdict(250, 400, steps, rules) is False  # lead 0.375 < 0.5
    assert precursor_verdict(500, 400, steps, rules) is False  # recovered after acquisition
    assert precursor_verdict(None, 400, steps, rules) is False  # no transition
    assert precursor_verdict(100, None, steps, rules) is None  # nothing to precede


def test_precursor_undetermined_with_too_few_checkpoints_between():
    rules = Rules(min_lead=0.5, min_checkpoints=3)
    assert precursor_verdict(4, 16, STEPS, rules) is None  # lead 0.75, but only step 8 between
    assert precursor_verdict(4, 64, STEPS, rules) is True  # 8, 16, 32 between
    assert precursor_verdict(4, 16, STEPS, Rules(min_lead=0.5, min_checkpoints=1)) is True


def test_layer_order_ties_are_ties():
    top_down = layer_order({1: 30, 2: 20, 3: 10})
    assert top_down["top_down"] is True and top_down["order"] == "top-down" and top_down["spearman"] == pytest.approx(-1)
    assert layer_order({1: 5, 2: 10, 3: 20})["order"] == "bottom-up"
    tied = layer_order({1: 1, 2: 1})
    assert tied["order"] == "simultaneous" and tied["ties"] == 1 and tied["top_down"] is False
    partial = layer_order({1: 10, 2: 5, 3: 5})  # ranks 3, 1.5, 1.5
    assert partial["ties"] == 1 and partial["spearman"] == pytest.approx(-np.sqrt(3) / 2)
    assert layer_order({0: None, 1: 3})["order"] == "undetermined"


def _run_frame(raw_last, acc, steps=STEPS, constant_layer0=True):
    rows = []
    for i, s in enumerate(steps):
        rows.append({"step": s, "layer": 0, "rankme": 1.0, "rankme_centred": np.nan, "varies": not constant_layer0,
                     "test_acc": acc[i], "n_params": 10})
        for layer, value in ((1, raw_last[i] * 1.5), (2, raw_last[i])):
            rows.append({"step": s, "layer": layer, "rankme": value, "rankme_centred": value, "varies": True,
                         "test_acc": acc[i], "n_params": 10})
    return pd.DataFrame(rows)


HARD = np.array([30, 30, 10, 5, 5, 20, 30, 30, 30, 30, 30, 30], dtype=float)  # recovers at step 16
ACC_LATE = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0.9, 0.95, 1.0])  # acquired at 256
ACC_TOGETHER = np.array([0, 0, 0, 0, 0, 0.8, 0.9, 1, 1, 1, 1, 1])  # acquired at 16


def test_run_events_leave_out_the_constant_layer():
    measures, layers = run_events(_run_frame(HARD, ACC_LATE), Rules())
    raw = next(m for m in measures if m["measure"] == "rankme")
    assert raw["acquisition_step"] == 256 and raw["recovery_step"] == 16 and raw["precursor"] is True
    assert raw["lead_fraction"] == pytest.approx(240 / 256) and raw["lead_steps"] == 240
    assert raw["order_layers"] == 2 and raw["order"] == "simultaneous"  # layers 1 and 2, never layer 0
    assert {l["layer"] for l in layers} == {1, 2}
    together = next(m for m in run_events(_run_frame(HARD, ACC_TOGETHER), Rules())[0] if m["measure"] == "rankme")
    assert together["acquisition_step"] == 16 and together["precursor"] is False


def test_subsample_to_even_checkpoints():
    assert subsample(STEPS, 3).tolist() == [0, 10, 11]  # targets 0, 512, 1024
    assert subsample(STEPS, 100).tolist() == list(range(len(STEPS)))


def _long(verdicts):
    rows = []
    for (task, level), seeds in verdicts.items():
        for seed, v in enumerate(seeds):
            rows.append({"run": f"{task}-{level}-m-s{seed}", "task": task, "level": level, "model": "m", "seed": seed,
                         "measure": "rankme_centred", "precursor": v, "acquisition_step": 256 if v is not None else None,
                         "end_step": 16 if v else 200, "recovery_step": 16 if v else 200,
                         "lead_fraction": 0.9 if v else 0.2, "lead_steps": 100,
                         "floor": 2.0, "floor_ratio": 0.1, "top_down": v})
    return pd.DataFrame(rows)


def test_seed_agreement_and_level_summary():
    rows = _long({("mod", "hard"): [True, True, False], ("add", "hard"): [True, True, True],
                  ("copy", "easy"): [False, False, None]})
    cells = seed_agreement(rows, "rankme_centred").set_index("task")
    assert cells.loc["mod", "verdict"] == "precursor" and cells.loc["mod", "agreement"] == pytest.approx(2 / 3)
    assert cells.loc["mod", "verdicts"] == "P P -"
    assert cells.loc["mod", "acquisition"] == 256 and cells.loc["mod", "recovery"] == 16  # medians over seeds
    assert cells.loc["copy", "decided"] == 2 and cells.loc["copy", "verdict"] == "together"
    summary = level_summary(rows, "rankme_centred", resamples=200)
    hard = summary["hard"]["precursor_rate"]
    assert hard["value"] == pytest.approx(5 / 6) and hard["low"] <= 5 / 6 <= hard["high"]
    assert summary["easy"]["precursor_rate"]["value"] == 0 and summary["easy"]["acquired"] == 2
    assert summary == level_summary(rows, "rankme_centred", resamples=200)  # seeded: reproducible


def test_bootstrap_interval_known_cases():
    frame = pd.DataFrame({"task": list("abcd"), "level": "x", "model": "m", "flag": [True] * 4})
    ci = bootstrap.interval(frame, bootstrap.rate("flag"), ["task", "level", "model"], resamples=100)
    assert (ci["value"], ci["low"], ci["high"], ci["n"]) == (1.0, 1.0, 1.0, 4)
    mixed = frame.assign(flag=[True, False, True, False])
    ci = bootstrap.interval(mixed, bootstrap.rate("flag"), ["task", "level", "model"], resamples=500)
    assert ci["value"] == 0.5 and ci["low"] < 0.5 < ci["high"]


@pytest.mark.parametrize("make", [bootstrap.rate, bootstrap.median])
def test_column_bootstrap_equals_resampling_the_frame(make):
    """The fast path (resampling one column's array) draws and computes exactly what the statistic
    gives on each resampled frame; nulls, None and mixed types included."""
    rng = np.random.default_rng(3)
    n = 23
    values = rng.normal(size=n).round(2).astype(object)
    values[[2, 7, 11]] = None
    values[[5]] = np.nan
    if make is bootstrap.rate:
        values = np.array([None if v is None or v != v else bool(v > 0) for v in values], dtype=object)
    frame = pd.DataFrame({"task": rng.choice(list("abcde"), n), "level": "hard", "model": "m",
                          "seed": np.arange(n), "x": values})
    fast = make("x")
    slow = lambda f: fast(f)  # noqa: E731  (no column_values: the frame is resampled)
    cells = ["task", "level", "model"]
    a = bootstrap.interval(frame, fast, cells, resamples=300, seed=5)
    b = bootstrap.interval(frame, slow, cells, resamples=300, seed=5)
    assert a == b and a["low"] is not None and a["low"] < a["high"]


def test_threshold_and_resolution_sensitivity():
    frames = {"a-hard-m-s0": _run_frame(HARD, ACC_LATE), "b-easy-m-s0": _run_frame(HARD, ACC_TOGETHER)}
    ident = pd.DataFrame([{"run": "a-hard-m-s0", "task": "a", "level": "hard", "model": "m", "seed": 0},
                          {"run": "b-easy-m-s0", "task": "b", "level": "easy", "model": "m", "seed": 0}])
    rows = []
    for r in ident.itertuples():
        m = next(x for x in run_events(frames[r.run], Rules())[0] if x["measure"] == "rankme_centred")
        rows.append({**r._asdict(), **m})
    rows = pd.DataFrame(rows)
    steps = {k: STEPS for k in frames}
    table = threshold_sensitivity(rows, steps, Rules(), [0.0, 0.9, 0.95], resamples=50).set_index(["min_lead", "level"])
    assert table.loc[(0.0, "hard"), "precursor_rate"] == 1.0 and table.loc[(0.95, "hard"), "precursor_rate"] == 0.0
    assert table.loc[(0.0, "easy"), "precursor_rate"] == 0.0
    res = resolution_sensitivity(frames, ident, Rules(), "last", "rankme_centred", [0, 4], resamples=50)
    res = res.set_index(["n_checkpoints", "level"])
    assert res.loc[(0, "hard"), "precursor_rate"] == 1.0
    # at 4 even checkpoints (0, 256, 512, 1024) the hard run's dip is invisible: no precursor
    assert res.loc[(4, "hard"), "precursor_rate"] == 0.0


def test_spearman_guards_small_samples():
    assert spearman([1, 2], [3, 4])["rho"] is None
    assert spearman([1, 2, 3], [3, 2, 1])["rho"] == pytest.approx(-1)
    assert spearman([1, 2, 3, np.nan], [1, 2, 3, 4])["n"] == 3


@pytest.mark.parametrize("key,value,needle", [
    ("precursor_min_lead", 1.5, "events.precursor_min_lead"),
    ("precursor_min_lead", 1.0, "events.precursor_min_lead"),
    ("min_depth", -0.1, "events.min_depth"),
    ("min_checkpoints", -1, "events.min_checkpoints"),
    ("measure", "rankme_raw", "events.measure"),
    ("layer", "first", "events.layer"),
])
def test_bad_rule_parameters_name_the_key(repo_params, key, value, needle):
    import copy

    from stages.errors import PipelineError
    from stages.pipeline.events import settings
    from stages.params import validate_params

    params = copy.deepcopy(repo_params)
    params["events"][key] = value
    with pytest.raises(PipelineError, match=needle.replace(".", r"\.")) as exc:
        settings(validate_params(params).events)  # the schema names the key
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("seeds", [[], [0, 0], [-1], "0"])
def test_bad_seed_lists_name_the_key(repo_params, seeds):
    import copy

    from stages.errors import PipelineError
    from stages.params import validate_params

    params = copy.deepcopy(repo_params)
    params["grid"]["seeds"] = seeds
    with pytest.raises(PipelineError, match=r"grid\.seeds"):
        validate_params(params)
