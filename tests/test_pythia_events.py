import math

import pandas as pd
import pytest

from stages.analysis.event_rules import Rules, acquisition
from stages.analysis.pythia_events import COLUMNS, set_events, set_threshold
from stages.errors import PipelineError

# Pythia-like checkpoints: log-spaced, then every doubling up to the end of training.
STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 143000]
RULES = Rules()  # window 3, min_lead 0.5, min_checkpoints 3


def table(sets: dict[str, tuple[float, list[float]]], steps=STEPS) -> pd.DataFrame:
    """Accuracy table as pythia_measure writes it, from {set: (chance, accuracy per step)}."""
    rows = []
    for name, (chance, accs) in sets.items():
        assert len(accs) == len(steps)
        rows += [{"run": "pythia-lm-x", "step": s, "revision": f"step{s}", "eval_set": name, "accuracy": a,
                  "n_items": 64, "chance": chance} for s, a in zip(steps, accs)]
    return pd.DataFrame(rows)


def from_step(step: int, before: float, after: float, steps=STEPS) -> list[float]:
    return [after if s >= step else before for s in steps]


def row(events: pd.DataFrame, name: str) -> pd.Series:
    return events.set_index("eval_set").loc[name]


def test_thresholds_are_chance_corrected():
    assert set_threshold(0.25) == 0.625 and set_threshold(0.5) == 0.75
    assert set_threshold(0.25, 0.2) == pytest.approx(0.4)
    events = set_events(table({"a": (0.5, [0.5] * len(STEPS)), "b": (0.25, [0.25] * len(STEPS))}), None, RULES)
    assert list(events.columns) == COLUMNS and list(events["eval_set"]) == ["a", "b"]
    assert list(events["threshold"]) == [0.75, 0.625] and list(events["chance"]) == [0.5, 0.25]


def test_accuracy_at_chance_plus_a_quarter_never_acquires_under_halfway():
    accs = from_step(64, 0.25, 0.5)  # 4-way set, sits at 0.5 from step 64 to the end
    acc = table({"antonym": (0.25, accs)})
    r = row(set_events(acc, end_step=32, rules=RULES), "antonym")
    assert r["threshold"] == 0.625
    assert r["acquisition_status"] == "absent" and pd.isna(r["acquisition_step"])
    assert r["precursor"] is None and math.isnan(r["lead_fraction"])
    # ... though a flat 0.5 (the old rule) fires at step 64, just above chance
    assert acquisition(STEPS, accs, 0.5, RULES.window) == (64, "found")
    # a share of a third of the way from chance is exactly 0.5: acquired there too
    r = row(set_events(acc, end_step=32, rules=RULES, threshold=1 / 3), "antonym")
    assert r["threshold"] == pytest.approx(0.5) and r["acquisition_step"] == 64


def test_accuracy_exactly_at_the_threshold_counts():
    accs = from_step(8000, 1 / 3, 2 / 3)  # 3-way set: halfway is 1/3 + (2/3) / 2, rounded
    r = row(set_events(table({"three_way": (1 / 3, accs)}), None, RULES), "three_way")
    assert r["acquisition_status"] == "found" and r["acquisition_step"] == 8000
    r = row(set_events(table({"four_way": (0.25, from_step(8000, 0.25, 40 / 64))}), None, RULES), "four_way")
    assert r["acquisition_step"] == 8000


def test_easy_set_acquired_with_recovery_hard_set_late_is_a_precursor():
    recovery = 1000
    acc = table({
        "negation": (0.5, from_step(1000, 0.5, 0.9)),                 # easy: acquired as the dip recovers
        "logical_deduction": (0.2630, from_step(32000, 0.27, 0.8)),   # hard: acquired much later
    })
    events = set_events(acc, recovery, RULES)
    easy, hard = row(events, "negation"), row(events, "logical_deduction")
    assert easy["acquisition_step"] == 1000 and easy["acquisition_status"] == "found"
    assert easy["lead_fraction"] == 0.0 and easy["precursor"] is False
    assert hard["acquisition_step"] == 32000 and hard["acquisition_status"] == "found"
    assert hard["lead_fraction"] == pytest.approx((32000 - 1000) / 32000)
    assert hard["precursor"] is True  # 2000, 4000, 8000, 16000 lie between recovery and acquisition
    assert hard["threshold"] == pytest.approx(0.2630 + 0.737 / 2)


def test_long_lead_with_too_few_checkpoints_between_is_undetermined():
    steps = [0, 1000, 2000, 32000, 64000, 143000]  # only 2000 between recovery and acquisition
    acc = table({"logical_deduction": (0.25, from_step(32000, 0.25, 0.8, steps))}, steps)
    r = row(set_events(acc, 1000, RULES), "logical_deduction")
    assert r["acquisition_step"] == 32000 and r["lead_fraction"] > RULES.min_lead
    assert r["precursor"] is None


def test_acquired_only_at_the_last_checkpoint_is_undetermined():
    acc = table({"syllogism": (0.5, from_step(143000, 0.5, 1.0)),
                 "hypernym": (0.25, from_step(64000, 0.25, 1.0))})  # two checkpoints: still short of window 3
    events = set_events(acc, 1000, RULES)
    for name in ("syllogism", "hypernym"):
        r = row(events, name)
        assert r["acquisition_status"] == "undetermined" and pd.isna(r["acquisition_step"])
        assert r["precursor"] is None and math.isnan(r["lead_fraction"])


def test_no_recovery_means_no_precursor():
    acc = table({"logical_deduction": (0.25, from_step(32000, 0.25, 0.8))})
    r = row(set_events(acc, None, RULES), "logical_deduction")
    assert r["acquisition_step"] == 32000 and r["precursor"] is False and math.isnan(r["lead_fraction"])


def test_unsorted_rows_give_the_same_events():
    acc = table({"negation": (0.5, from_step(1000, 0.5, 0.9)), "antonym": (0.25, from_step(4000, 0.25, 0.9))})
    shuffled = acc.sample(frac=1.0, random_state=0)
    pd.testing.assert_frame_equal(set_events(shuffled, 512, RULES), set_events(acc, 512, RULES))


def test_bad_tables_are_one_line_errors():
    acc = table({"a": (0.5, [0.5] * len(STEPS))})
    with pytest.raises(PipelineError, match="chance"):
        set_events(acc.drop(columns="chance"), None, RULES)
    with pytest.raises(PipelineError, match="several runs"):
        set_events(pd.concat([acc, acc.assign(run="other")]), None, RULES)
    with pytest.raises(PipelineError, match="more than one row"):
        set_events(pd.concat([acc, acc]).assign(run="x"), None, RULES)
    with pytest.raises(PipelineError, match="chance level"):
        set_events(acc.assign(chance=[0.5] * (len(STEPS) - 1) + [0.25]), None, RULES)
