"""The online RankMe monitor (stages/monitor/core.py): events on constructed trajectories, agreement
with the offline detector once a run ends, causality, and real measures tables."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from monitor_helpers import table_readings
from stages.analysis.event_rules import UNDETERMINED, Rules, acquisition, find_dip
from stages.analysis.runs import run_events
from stages.io.measure_tables import read_measures
from stages.measures import rankme as rm
from stages.monitor import (ACQUISITION, COLLAPSE, PRECURSOR, RECOVERY, RankMeMonitor, detect_events, layer_geometry,
                            rankme)
from stages.monitor.core import fast_geometry

DATA = Path(__file__).parent / "data" / "monitor"
FIELDS = ("acquisition_step", "acquisition_status", "peak_step", "collapse_step", "floor_step", "recovery_step")


def feed(values, acc=None, steps=None, rules=Rules()):
    steps = list(range(0, 10 * len(values), 10)) if steps is None else list(steps)
    mon = RankMeMonitor(rules=rules)
    for i, (s, v) in enumerate(zip(steps, values)):
        mon.observe(int(s), v, None if acc is None else acc[i])
    return mon


def summary(events):
    return [(e.kind, e.step, e.reported_at) for e in events]


def assert_final_matches_offline(mon):
    final, off = mon.final(), mon.offline()
    if final["pending"]:
        # the offline detector itself cannot decide this run yet
        assert off["recovery_status"] == UNDETERMINED or off["acquisition_status"] == UNDETERMINED
    else:
        for key in FIELDS:
            assert final[key] == off[key], (key, final, off)


# ---- rankme ----------------------------------------------------------------------------------------
def test_rankme_of_a_batch():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(64, 12))
    assert rankme(h) == pytest.approx(rm.rankme(h), rel=1e-5)
    assert rankme(torch.as_tensor(h)) == pytest.approx(rm.rankme(h), rel=1e-5)
    assert rankme(h, centred=True) == pytest.approx(rm.rankme(h - h.mean(0)), rel=1e-5)
    q, _ = np.linalg.qr(rng.normal(size=(64, 5)))
    assert rankme(q) == pytest.approx(5.0, rel=1e-4)  # 5 equal singular values
    assert np.isnan(rankme(np.ones((8, 4)), centred=True))  # states that do not vary: no centred geometry
    with pytest.raises(ValueError, match=r"\[n, d\]"):
        rankme(np.ones((2, 3, 4)))
    with pytest.raises(ValueError, match="at least 2"):
        rankme(np.ones((1, 4)))


def test_fast_geometry_agrees_with_a_float64_svd_and_the_pipeline():
    rng = np.random.default_rng(2)
    low = rng.normal(size=(3, 96, 2)) @ rng.normal(size=(3, 2, 40))  # collapsed: rank 2
    wide = rng.normal(size=(3, 30, 40))                             # fewer states than dimensions
    const = np.tile(rng.normal(size=(3, 1, 40)), (1, 96, 1))        # input-independent layer
    for stack in (low, wide, const, rng.normal(size=(3, 96, 40))):
        fast = fast_geometry(torch.as_tensor(stack))
        truth = [rm.rankme(m) for m in stack]  # float64 SVD
        assert np.allclose(fast["rankme"], truth, rtol=1e-5)
        pipeline = rm.geometry(torch.as_tensor(stack).float())
        assert np.allclose(fast["rankme"], pipeline["rankme"], rtol=1e-3)
        assert np.array_equal(fast["varies"], pipeline["varies"])
        assert np.allclose(fast["rankme_centred"], pipeline["rankme_centred"], rtol=1e-3, equal_nan=True)
    assert np.isnan(fast_geometry(torch.as_tensor(const))["rankme_centred"]).all()


# ---- constructed trajectories ---------------------------------------------------------------------
def test_dip_recovery_then_acquisition():
    values = [10, 10.5, 9, 6, 3, 2, 2.2, 2.4, 3, 5, 7, 9, 9.5, 9.6, 9.7, 9.8]
    acc = [0.0] * 11 + [0.6, 0.7, 0.8, 0.9, 0.9]
    mon = feed(values, acc)
    # collapse: half-depth crossing at step 30, reported once 3 readings follow the floor (step 50)
    assert summary(mon.events) == [(COLLAPSE, 30, 80), (RECOVERY, 100, 100), (PRECURSOR, 100, 100),
                                   (ACQUISITION, 110, 130)]
    c = mon.events[0]
    assert (c.peak_step, c.floor_step, c.peak, c.floor, c.revises) == (10, 50, 10.5, 2.0, False)
    assert "acquisition expected" in mon.events[2].message
    assert mon.final() == {"acquisition_step": 110, "acquisition_status": "found", "peak_step": 10,
                           "collapse_step": 30, "floor_step": 50, "recovery_step": 100, "pending": False}
    assert_final_matches_offline(mon)
    off = detect_events(range(0, 160, 10), values, acc)
    assert (off["precursor"], off["lead_steps"]) == (False, 10)  # offline verdict: lead 10/110 < min_lead


def test_deeper_floor_is_reported_as_a_revision():
    values = [10, 9, 5, 4, 4.2, 4.5, 8, 9, 3, 2.5, 2.8, 3, 3.2, 8, 9]
    mon = feed(values)
    assert summary(mon.events) == [(COLLAPSE, 20, 60), (RECOVERY, 60, 60), (PRECURSOR, 60, 60),
                                   (COLLAPSE, 20, 120), (RECOVERY, 130, 130), (PRECURSOR, 130, 130)]
    assert [e.floor_step for e in mon.events if e.kind == COLLAPSE] == [30, 90]
    assert [e.revises for e in mon.events if e.kind == COLLAPSE] == [False, True]
    assert mon.final()["floor_step"] == 90 and mon.final()["recovery_step"] == 130
    assert_final_matches_offline(mon)


def test_floor_inside_an_unfinished_acquisition_streak_waits_for_the_window():
    # the minimum at step 90 comes after accuracy reached the threshold at step 80: if the streak
    # completes, acquisition (80) cuts the search span before it, so it is not reported as the floor
    values = [10, 9, 8, 7, 6, 5, 4.9, 4.8, 4.7, 2, 6.8, 7, 7]
    acc = [0.0] * 8 + [0.6] * 5
    mon = feed(values, acc)
    assert summary(mon.events) == [(COLLAPSE, 30, 100), (ACQUISITION, 80, 100)]
    assert mon.events[0].floor_step == 80
    assert_final_matches_offline(mon)


def test_unconfirmed_floor_at_the_end_is_pending():
    mon = feed([10, 9, 5, 3])
    assert mon.events == [] and mon.pending
    assert mon.offline()["status"] == "found" and mon.offline()["recovery_status"] == UNDETERMINED
    assert_final_matches_offline(mon)


def test_flat_or_rising_measure_has_no_events_and_nan_readings_are_skipped():
    assert feed([5, 5.1, 4.9, 5.0, 5.2, 5.1, 5.0]).events == []
    mon = feed([10, np.nan, 9, 5, np.nan, 4, 4.1, 4.2, 4.3])
    assert summary(mon.events) == [(COLLAPSE, 30, 80)]  # 3 finite readings after the floor (step 50)
    assert_final_matches_offline(mon)


def test_accuracy_at_threshold_when_recovering_gives_no_precursor():
    values = [10, 9, 5, 4, 4.2, 4.5, 8, 9]
    acc = [0, 0, 0, 0, 0, 0, 0.7, 0.8]
    kinds = [e.kind for e in feed(values, acc).events]
    assert RECOVERY in kinds and PRECURSOR not in kinds


def test_steps_must_increase_and_arguments_are_checked():
    mon = RankMeMonitor()
    mon.observe(5, 1.0)
    with pytest.raises(ValueError, match="increase"):
        mon.observe(5, 1.0)
    with pytest.raises(ValueError, match="measure"):
        RankMeMonitor(measure="loss")
    with pytest.raises(ValueError, match="layer"):
        RankMeMonitor(layer=-1)


# ---- agreement with the offline detector, and causality, on random trajectories ---------------------
def random_run(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 50))
    steps = np.cumsum(rng.integers(1, 20, size=n))
    values = 10 * np.exp(np.cumsum(rng.normal(0, 0.3, size=n)))
    if rng.random() < 0.5:  # a dip shape under the noise
        values *= 1 - 0.7 * np.exp(-0.5 * ((np.arange(n) - rng.integers(n)) / max(1, n / 8)) ** 2)
    values[rng.random(n) < 0.05] = np.nan
    kind = rng.integers(3)
    if kind == 0:
        acc = None
    else:
        at = rng.integers(n)
        acc = list(np.clip((np.arange(n) >= at) * rng.uniform(0.3, 1.0, n) + rng.normal(0, 0.1, n), 0, 1))
    rules = Rules(window=int(rng.integers(1, 5)), min_checkpoints=int(rng.integers(0, 5)))
    return steps, values, acc, rules


@pytest.mark.parametrize("seed", range(0, 400, 4))
def test_final_events_equal_offline_and_reports_are_causal(seed):
    steps, values, acc, rules = random_run(seed)
    full = feed(values, acc, steps, rules)
    assert_final_matches_offline(full)
    # the offline detector as the pipeline calls it
    until, _ = acquisition(steps, acc, rules.threshold, rules.window) if acc is not None else (None, None)
    dip = find_dip(steps, values, rules, until=until)
    assert full.offline()["floor_step"] == dip.floor_step
    # causality: a prefix reports exactly the events the full run had reported by then
    for k in range(1, len(steps) + 1):
        prefix = feed(values[:k], None if acc is None else acc[:k], steps[:k], rules)
        assert prefix.events == [e for e in full.events if e.reported_at <= steps[k - 1]]
    # reported events never precede their stamps, and the one-shot kinds come once
    assert all(e.reported_at >= e.step for e in full.events)
    assert sum(e.kind == ACQUISITION for e in full.events) <= 1


# ---- hidden states and layer choice ---------------------------------------------------------------
def test_update_from_hidden_states_matches_geometry_and_tracks_the_deepest_varying_layer():
    rng = np.random.default_rng(1)
    const = np.tile(rng.normal(size=(1, 6)), (20, 1))  # layer 0: the same state for every example
    layers = [torch.as_tensor(const), torch.as_tensor(rng.normal(size=(20, 6))),
              torch.as_tensor(rng.normal(size=(20, 6)))]
    mon = RankMeMonitor()
    mon.update(0, layers)
    expected = rm.geometry(torch.stack(layers).float())
    for l in range(3):
        assert mon.latest[l]["rankme"] == pytest.approx(float(expected["rankme"][l]), rel=1e-3)
        assert mon.latest[l]["varies"] == bool(expected["varies"][l])
    assert np.isnan(mon.latest[0]["rankme_centred"])
    assert mon.chosen_layer == 2
    mon.update(1, {0: layers[0], 1: layers[1], 2: layers[2][:, :3].repeat(1, 2)})  # dict form, any widths
    table = mon.table(run="r")
    assert list(table.columns[:3]) == ["run", "step", "layer"] and len(table) == 6
    with pytest.raises(ValueError, match=r"\[n, d\]"):
        layer_geometry([torch.zeros(4, 3, 2)])
    with pytest.raises(ValueError, match="NaN"):
        layer_geometry([torch.full((4, 3), float("nan"))])


# ---- real measures tables --------------------------------------------------------------------------
TABLES = sorted(DATA.glob("*.csv"))


@pytest.mark.parametrize("path", TABLES, ids=[p.stem for p in TABLES])
def test_real_tables_final_events_equal_the_pipeline_events(path):
    frame = read_measures(path)
    rules = Rules()
    mon = RankMeMonitor(rules=rules)
    readings = list(table_readings(frame))
    for step, geo, acc in readings:
        mon.update_geometry(step, geo, acc)
    rows, _ = run_events(frame, rules, "last")
    offline = next(r for r in rows if r["measure"] == "rankme_centred")
    final = mon.final()
    assert not final["pending"]
    for key in FIELDS:
        assert final[key] == offline[key], key
    # causality on the real run: replaying half of it reports the same events up to there
    half = RankMeMonitor(rules=rules)
    cut = readings[len(readings) // 2][0]
    for step, geo, acc in readings:
        if step <= cut:
            half.update_geometry(step, geo, acc)
    assert half.events == [e for e in mon.events if e.reported_at <= cut]


def test_real_tables_are_present():
    assert len(TABLES) >= 2
    assert all(pd.read_csv(p)["run"].nunique() == 1 for p in TABLES)
