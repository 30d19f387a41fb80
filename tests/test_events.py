import numpy as np
import pandas as pd
import pytest

from stages.analysis.cross_scale import cross_scale
from stages.analysis.events import acquisition_step, find_dip, layer_order, spearman


def test_acquisition_needs_three_consecutive_checkpoints():
    steps = [0, 10, 20, 30, 40, 50, 60]
    assert acquisition_step(steps, [0, 0.6, 0.7, 0.2, 0.5, 0.9, 0.95]) == 40
    assert acquisition_step(steps, [0, 0.6, 0.7, 0.49, 0.5, 0.9, 0.3]) is None
    assert acquisition_step(steps, [0.5] * 7) == 0
    assert acquisition_step(steps, [0, 0.6, 0.7, 0.8, 0, 0, 0]) == 10  # first sustained stretch
    assert acquisition_step(steps, [0, 0.9, 0.9, 0.9, 1, 1, 1], threshold=0.95) == 40
    assert acquisition_step(steps, [0, 0.9, 0.9, 0.1, 1, 1, 1], window=2) == 10


def test_dip_collapse_floor_recovery():
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128])
    r = np.array([30, 20, 10, 4, 2, 6, 18, 31, 40], dtype=float)
    d = find_dip(steps, r, collapse_drop=0.2, recovery_fraction=0.5)
    assert d.collapse_step == 1 and d.floor == 2 and d.floor_step == 8
    assert d.recovery_step == 32  # 2 + 0.5 * (30 - 2) = 16 -> first reached at 32
    flat = find_dip(steps, np.linspace(10, 12, len(steps)))
    assert not flat.collapsed and flat.floor is None and flat.recovery_step is None


def test_dip_without_recovery():
    d = find_dip([0, 1, 2, 3], [10.0, 5.0, 3.0, 2.0])
    assert d.collapse_step == 1 and d.floor_step == 3 and d.recovery_step is None


def test_layer_order():
    top_down = layer_order({1: 30, 2: 20, 3: 10}, {1: 40, 2: 30, 3: 20})
    assert top_down["top_down"] is True and top_down["order"] == "top-down" and top_down["spearman"] == pytest.approx(-1)
    bottom_up = layer_order({1: 5, 2: 10, 3: 20}, {1: 6, 2: 11, 3: 21})
    assert bottom_up["top_down"] is False and bottom_up["order"] == "bottom-up"
    tie_broken = layer_order({1: 1, 2: 1}, {1: 9, 2: 4})  # same collapse, deeper floors first
    assert tie_broken["order"] == "top-down"
    assert layer_order({1: 1, 2: 1}, {1: 4, 2: 4})["order"] == "simultaneous"
    assert layer_order({0: None, 1: 3}, {0: None, 1: 4})["order"] == "undetermined"


def test_spearman_guards_small_samples():
    assert spearman([1, 2], [3, 4])["rho"] is None
    assert spearman([1, 2, 3], [3, 2, 1])["rho"] == pytest.approx(-1)
    assert spearman([1, 2, 3, np.nan], [1, 2, 3, 4])["n"] == 3


def test_cross_scale_within_task_groups():
    runs = pd.DataFrame({
        "task": ["mod"] * 3 + ["copy"] * 3, "level": ["hard"] * 6, "model": ["a", "b", "c"] * 2,
        "n_params": [1e5, 1e6, 1e7] * 2, "floor": [1, 2, 3, 10, 20, 30], "initial": [10] * 3 + [40] * 3,
        "order_spearman": [-1, -0.5, 0, 0.2, 0.1, 0], "top_down": [True, True, False, False, False, False],
    })
    out = cross_scale(runs)
    assert out["by_task_level"]["mod-hard"]["size_vs_floor"]["rho"] == pytest.approx(1)
    assert out["pooled"]["size_vs_floor"]["rho"] == pytest.approx(1)  # sizes ranked within each task
    assert out["pooled"]["n_model_sizes"] == 3 and out["note"] is None
    assert out["pooled"]["top_down_rate"] == pytest.approx(1 / 3)
