"""The early-warning evaluation's rules (benchmarks/monitor_warning.py) on constructed runs with
known answers: horizon, baseline, budget cut, and the per-group counts against negatives."""
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from stages.analysis.event_rules import Rules

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "monitor_warning.py"
spec = importlib.util.spec_from_file_location("monitor_warning", SCRIPT)
mw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mw)


def test_judge_every_outcome():
    assert mw.judge(40, 112, 3.0) == "hit"        # 112 <= 4 x 40
    assert mw.judge(20, 112, 3.0) == "early"      # 112 > 80
    assert mw.judge(None, 112, 3.0) == "miss"
    assert mw.judge(120, 112, 3.0) == "late"
    assert mw.judge(40, None, 3.0) == "false alarm" and mw.judge(None, None, 3.0) == "quiet"


def test_baseline_and_cut():
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 100]
    assert mw.baseline_step(steps, 0.1) == 16     # first checkpoint at or past 10 of 100
    frame = pd.DataFrame({"step": steps, "layer": 1, "test_acc": [0, 0, 0, 0, 0, 0, 0.9, 0.9, 0.9]})
    cut = mw.cut_budget(frame, Rules(), 0.5)     # acquisition at 32: budget ends at 16
    assert cut["step"].max() == 16
    assert mw.cut_budget(frame.assign(test_acc=0.0), Rules(), 0.5) is None  # never acquires


def measures(steps, rankme, acc):
    """A 2-layer measures table whose deepest layer has ``rankme`` (raw and centred alike)."""
    rows = []
    for s, r, a in zip(steps, rankme, acc):
        for layer, value in ((0, 1.0), (1, r)):
            rows.append({"step": s, "layer": layer, "rankme": value, "rankme_centred": value if layer else np.nan,
                         "mean_dominance": 0.5, "varies": bool(layer), "test_acc": a, "n_params": 1})
    return pd.DataFrame(rows)


def test_evaluation_counts_hits_and_false_alarms():
    steps = list(range(0, 200, 10))
    dip = [50, 20, 10, 10, 10, 45, 48, 50, 50, 50] + [50] * 10   # floor 20-40, recovered at 50
    acc = [0.0] * 12 + [0.9] * 8                                   # acquisition at 120
    positive = measures(steps, dip, acc)
    control = measures(steps, dip, [0.0] * 20)                     # the same geometry, never acquires
    runs, groups = mw.evaluation([("p", positive)], [("control: x", "x", control)], Rules(min_checkpoints=2),
                                 "rankme_centred")
    by = runs.set_index("group")
    assert by.loc["positive", "acquisition_step"] == 120 and by.loc["positive", "baseline_step"] == 20
    assert by.loc["positive", "baseline"] == "early"               # 120 > 4 x 20
    assert by.loc["positive", "warning_step"] == 50 and by.loc["positive", "monitor"] == "hit"  # recovered at 50
    assert by.loc["control: x", "monitor"] == "false alarm" and by.loc["control: x", "baseline"] == "false alarm"
    g = groups.set_index("group")
    assert g.loc["control: x", "monitor"] == "1/1 [3%, 100%]" and g.loc["control: x", "counted"] == "false alarms"
