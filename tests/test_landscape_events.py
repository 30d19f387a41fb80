"""Landscape events against known answers: noise-aware transitions, saturation, the shared precursor
rule, and the stage's adaptive choice of checkpoints. Pure functions: milliseconds each."""
import copy

import numpy as np
import pandas as pd
import pytest

from stages.analysis.event_rules import Rules
from stages.analysis.landscape_events import jitter, landscape_event_params, rise, run_measures
from stages.errors import PipelineError
from stages.params import validate_params
from stages.pipeline.landscape import choose_steps, thin

RULES = Rules(min_depth=0.2, recovery_fraction=0.5, threshold=0.5, window=3, min_lead=0.5, min_checkpoints=3)
P = {"rise_fraction": 0.5, "min_rise": 0.2, "noise_factor": 2.0, "erank_saturation": 0.95}
STEPS = np.arange(0, 210, 10)  # 21 checkpoints, 0..200


def rising(at: int, low: float = 1.0, high: float = 2.0) -> np.ndarray:
    """``low`` up to step ``at - 10``, ``high`` from ``at`` on (half-rise exactly at ``at``)."""
    return np.where(STEPS >= at, high, low).astype(float)


def test_llc_rise_below_its_chain_spread_is_no_transition():
    frame = pd.DataFrame({"step": STEPS, "llc": rising(40), "llc_std": 0.6})  # rise 1.0 < 2 x 0.6
    out = run_measures(frame, {"llc": "rise"}, 150, RULES, P)["llc"]
    assert out["status"] == "below_noise" and out["transition_step"] is None and out["end_step"] is None
    assert out["noise"] == pytest.approx(0.6) and out["threshold"] == pytest.approx(1.2)
    assert out["change"] == pytest.approx(1.0)
    assert out["precursor"] is False  # acquisition but no transition


def test_llc_rise_above_its_chain_spread_is_a_transition_at_the_known_step():
    frame = pd.DataFrame({"step": STEPS, "llc": rising(40), "llc_std": 0.2})  # rise 1.0 > 2 x 0.2
    out = run_measures(frame, {"llc": "rise"}, 150, RULES, P)["llc"]
    assert out["status"] == "found" and out["transition_step"] == 40 and out["end_step"] == 40
    assert out["lead_fraction"] == pytest.approx((150 - 40) / 150)
    assert out["precursor"] is True  # lead 0.73 >= 0.5 and 10 checkpoints between
    assert out["saturated"] is False
    assert run_measures(frame, {"llc": "rise"}, None, RULES, P)["llc"]["precursor"] is None  # no acquisition
    late = run_measures(frame, {"llc": "rise"}, 60, RULES, P)["llc"]
    assert late["transition_step"] == 40 and late["precursor"] is False  # lead 1/3 < min_lead


def test_hessian_noise_comes_from_its_noise_column():
    values = rising(70, 100.0, 130.0)
    small = pd.DataFrame({"step": STEPS, "hessian_top1": values, "hessian_top1_noise": 5.0})
    large = small.assign(hessian_top1_noise=20.0)
    assert run_measures(small, {"hessian_top1": "rise"}, 180, RULES, P)["hessian_top1"]["transition_step"] == 70
    out = run_measures(large, {"hessian_top1": "rise"}, 180, RULES, P)["hessian_top1"]
    assert out["status"] == "below_noise" and out["noise"] == 20.0


def test_rank_dip_uses_successive_jitter_as_noise():
    base = 50 + 0.5 * (-1.0) ** np.arange(len(STEPS))  # jitter of 1.0 between successive checkpoints
    dipped = base.copy()
    dipped[3:6] = [40, 20, 20]  # collapse at step 40 (half depth ~35), floor 20..50
    dipped[6:] = 48 + 0.5 * (-1.0) ** np.arange(len(STEPS) - 6)  # recovered from step 60
    assert jitter(base) == pytest.approx(1.0)
    frame = pd.DataFrame({"step": STEPS, "grad_erank": dipped})
    out = run_measures(frame, {"grad_erank": "dip"}, 180, RULES, P)["grad_erank"]
    assert out["status"] == "found" and out["transition_step"] == 40 and out["end_step"] == 60
    assert out["floor_step"] == 40 and out["change"] == pytest.approx(30.5)
    assert out["precursor"] is True  # recovery at 60, acquisition 180: lead 2/3, 11 checkpoints between
    # a dip deep enough for the scale rule (min_depth) but within twice the jitter is no transition
    small = 5 + 0.5 * (-1.0) ** np.arange(len(STEPS))
    small[4] = 3.8  # depth 1.7 from the peak 5.5: >= 0.2 x 5.5, but < 2 x jitter (1.0)
    frame = pd.DataFrame({"step": STEPS, "grad_erank": small})
    quiet = run_measures(frame, {"grad_erank": "dip"}, 180, RULES, P)["grad_erank"]
    assert quiet["status"] == "below_noise" and quiet["change"] == pytest.approx(1.7)
    assert quiet["transition_step"] is None and quiet["precursor"] is False
    loud = run_measures(frame, {"grad_erank": "dip"}, 180, RULES, {**P, "noise_factor": 1.0})["grad_erank"]
    assert loud["status"] == "found" and loud["transition_step"] is not None


def test_saturated_gradcov_reports_its_transition_but_no_verdict():
    values = np.full(len(STEPS), 63.0)
    values[3:6] = [40, 20, 30]
    frame = pd.DataFrame({"step": STEPS, "gradcov_rank": values, "gradcov_cap": 63,
                          "gradcov_saturated": values >= 63})
    out = run_measures(frame, {"gradcov_rank": "dip"}, 180, RULES, P)["gradcov_rank"]
    assert out["saturated"] is True and out["status"] == "found"
    assert out["transition_step"] == 30 and out["end_step"] == 60  # half depth 41.5: 40 at step 30
    assert out["precursor"] is None  # would be True unsaturated
    unsat = run_measures(frame.assign(gradcov_saturated=False), {"gradcov_rank": "dip"}, 180, RULES, P)
    assert unsat["gradcov_rank"]["precursor"] is True
    pinned = frame.assign(gradcov_rank=63.0, gradcov_saturated=True)  # at the cap all run: no dip at all
    flat = run_measures(pinned, {"gradcov_rank": "dip"}, 180, RULES, P)["gradcov_rank"]
    assert flat["transition_step"] is None and flat["saturated"] is True and flat["precursor"] is None


def test_grad_erank_near_its_cap_counts_as_saturated():
    frame = pd.DataFrame({"step": STEPS, "grad_erank": np.linspace(50, 62, len(STEPS)), "grad_erank_cap": 64})
    assert run_measures(frame, {"grad_erank": "dip"}, 180, RULES, P)["grad_erank"]["saturated"] is True  # 62 >= 60.8
    low = frame.assign(grad_erank=np.linspace(30, 50, len(STEPS)))
    assert run_measures(low, {"grad_erank": "dip"}, 180, RULES, P)["grad_erank"]["saturated"] is False


def test_run_measures_skips_absent_measures_and_handles_nan():
    frame = pd.DataFrame({"step": STEPS, "llc": np.nan, "llc_std": np.nan})
    out = run_measures(frame, {"llc": "rise", "hessian_top1": "rise"}, 100, RULES, P)
    assert set(out) == {"llc"} and out["llc"]["status"] == "undetermined" and out["llc"]["transition_step"] is None
    assert set(out["llc"]) >= {"direction", "transition_step", "end_step", "lead_fraction", "precursor", "saturated",
                               "noise", "change"}


def test_rise_keeps_the_scale_rule():
    assert rise(STEPS, rising(40))[0] == 40
    assert rise(STEPS, np.full(len(STEPS), 2.0))[0] is None
    assert rise(STEPS, np.linspace(10, 10.5, len(STEPS)))[0] is None  # 5% of the scale < min_rise


def test_bad_landscape_event_params_name_the_key(repo_params):
    """The schema checks ``landscape_events`` (errors name the key); landscape_event_params flattens it."""
    params = copy.deepcopy(repo_params)
    assert landscape_event_params(validate_params(params).landscape_events)["noise_factor"] == 2.0
    params["landscape_events"]["directions"]["llc"] = "up"
    with pytest.raises(PipelineError, match="landscape_events.directions.llc"):
        validate_params(params)
    params = copy.deepcopy(repo_params)
    params["landscape_events"]["noise_factor"] = -1
    with pytest.raises(PipelineError, match="'landscape_events.noise_factor'"):
        validate_params(params)
    params = copy.deepcopy(repo_params)
    del params["landscape_events"]["erank_saturation"]
    with pytest.raises(PipelineError, match="landscape_events.erank_saturation"):
        validate_params(params)


# --- adaptive checkpoint choice (stages.pipeline.landscape.choose_steps) -------------------------------------

CKPTS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]


def history(acquired_from: int | None, last_only: int = 0) -> dict[int, float]:
    acc = {s: 0.01 for s in CKPTS}
    if acquired_from is not None:
        acc.update({s: 0.9 for s in CKPTS if s >= acquired_from})
    for s in CKPTS[len(CKPTS) - last_only:] if last_only else []:
        acc[s] = 0.9
    return acc


def test_choose_steps_measures_up_to_acquisition_and_a_margin():
    steps, acq = choose_steps(CKPTS, history(32), max_checkpoints=0, after_acquisition=2, threshold=0.5, window=3)
    assert acq == 32 and steps == [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    steps, _ = choose_steps(CKPTS, history(32), max_checkpoints=20, after_acquisition=0, threshold=0.5, window=3)
    assert steps == [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32]


def test_choose_steps_thins_evenly_in_index_to_the_cap():
    steps, acq = choose_steps(CKPTS, history(32), max_checkpoints=5, after_acquisition=2, threshold=0.5, window=3)
    assert acq == 32 and steps == [0, 3, 8, 24, 64]  # indices 0, 3, 6, 9, 12 of the 13 in the window


def test_choose_steps_without_acquisition_uses_the_whole_run():
    steps, acq = choose_steps(CKPTS, history(None), max_checkpoints=0, after_acquisition=2, threshold=0.5, window=3)
    assert acq is None and steps == CKPTS
    steps, acq = choose_steps(CKPTS, history(None), max_checkpoints=4, after_acquisition=2, threshold=0.5, window=3)
    assert acq is None and steps == [0, 6, 24, 128]  # indices 0, 5 (4.67), 9 (9.33), 14
    # only the last two checkpoints reach the threshold: acquisition undetermined, whole run
    steps, acq = choose_steps(CKPTS, history(None, last_only=2), max_checkpoints=0, after_acquisition=2,
                              threshold=0.5, window=3)
    assert acq is None and steps == CKPTS


def test_choose_steps_margin_stops_at_the_last_checkpoint_and_ignores_unscored_steps():
    steps, acq = choose_steps(CKPTS, history(64), max_checkpoints=0, after_acquisition=5, threshold=0.5, window=3)
    assert acq == 64 and steps == CKPTS
    acc = history(32)
    del acc[48]  # a checkpoint without a history row does not count towards the window of 3
    steps, acq = choose_steps(CKPTS, acc, max_checkpoints=0, after_acquisition=1, threshold=0.5, window=3)
    assert acq == 32 and steps[-1] == 48


def test_thin_keeps_ends_and_early_density():
    steps = [0, 1, 2, 3, 5, 8, 13, 21, 50, 100]
    assert thin(steps, 0) == steps and thin(steps, 20) == steps
    chosen = thin(steps, 4)
    assert chosen[0] == 0 and chosen[-1] == 100 and len(chosen) == 4
    assert thin(steps, 1) == [0]


# --- following a rise to its peak (stages.pipeline.landscape.peaked / next_steps) and truncation --------------

def test_peaked_needs_settle_checkpoints_after_the_maximum():
    from stages.pipeline.landscape import peaked

    assert peaked([1, 2, 3, 2, 2], settle=2) and not peaked([1, 2, 3, 2], settle=2)
    assert not peaked([1, 2, 3], settle=1) and peaked([1, 3, 3], settle=1)  # a plateau has peaked
    assert peaked([np.nan, np.nan], settle=2)  # nothing to follow


def test_next_steps_are_geometric_past_the_last_and_end_at_the_run_end():
    from stages.pipeline.landscape import next_steps

    assert next_steps(CKPTS, 16, ratio=1.5, count=2) == [24, 48]  # targets 24, 36 -> 24, 48
    assert next_steps(CKPTS, 64, ratio=1.5, count=3) == [96, 128]  # 96; 144 is past the end: the last
    assert next_steps(CKPTS, 128, ratio=1.5, count=2) == []
    assert next_steps(CKPTS, 0, ratio=2.0, count=1) == [2]


def test_a_rise_cut_off_by_the_window_is_truncated_never_an_event():
    climbing = np.linspace(1.0, 3.0, len(STEPS))  # still rising at the last measured checkpoint
    frame = pd.DataFrame({"step": STEPS, "llc": climbing, "llc_std": 0.01, "last_checkpoint": 400})
    out = run_measures(frame, {"llc": "rise"}, 150, RULES, P)["llc"]
    assert out["status"] == "truncated" and out["transition_step"] is None and out["precursor"] is None
    assert out["lead_fraction"] is None
    # the same rise measured to the run's end: its half-rise is an event (the run ended, not the window)
    ended = run_measures(frame.assign(last_checkpoint=200), {"llc": "rise"}, 150, RULES, P)["llc"]
    assert ended["status"] == "found" and ended["transition_step"] == 100
    # a table without last_checkpoint (before the stage wrote it) counts as cut off
    assert run_measures(frame.drop(columns="last_checkpoint"), {"llc": "rise"}, 150, RULES, P)["llc"]["status"] == "truncated"
    # a rise that peaked inside the window is an event
    peaked_ = frame.assign(llc=np.r_[climbing[:15], climbing[14] - np.arange(1, 7) * 0.01])
    assert run_measures(peaked_, {"llc": "rise"}, 150, RULES, P)["llc"]["status"] == "found"
