"""Transitions of the landscape measures and whether each precedes acquisition.

Input: one run's ``data/landscape/<run>.csv`` (see :mod:`stages.pipeline.landscape`), its acquisition step
and the shared event rules (:class:`stages.analysis.event_rules.Rules`). Each measure has a direction,
registered with the measure (stages/measures/registry.py) and overridable in
``params.yaml: landscape_events.directions``:

* **dip** measures (gradient effective rank, gradient covariance rank) collapse and recover, like
  RankMe: the dip is :func:`stages.analysis.event_rules.find_dip` searched up to acquisition (same
  ``min_depth`` and ``recovery_fraction``). Transition = **collapse** step; end = **recovery** step;
  change = dip depth ``peak - floor``.
* **rise** measures (top Hessian eigenvalue, LLC) grow. Over all measured checkpoints (the stage
  measures up to a margin past acquisition), with ``v0`` the first value and ``vmax`` the largest,
  change = ``vmax - v0``; transition = end = the **half-rise** step, the first checkpoint with
  ``v >= v0 + rise_fraction * (vmax - v0)``. There is no rise when it is small for the measure's
  scale: ``vmax - v0 < min_rise * max(|v0|, |vmax|)``.

**Noise.** A transition counts only when its change exceeds ``noise_factor`` times the measure's
own noise, estimated on the run (a measure registered with a ``noise`` column, :func:`noise_columns`:
the median of that column):

* ``llc``: the median over checkpoints of ``llc_std``, the spread of the SGLD chains;
* ``hessian_top1``: the median of ``hessian_top1_noise`` = max(spread over Lanczos repeats,
  ARPACK tolerance x |value|);
* any other measure (the gradient ranks): its checkpoint-to-checkpoint jitter, the median absolute
  difference between successive checkpoints (robust: a real transition moves only a few of them).

A dip or rise within the noise is reported with ``status`` ``below_noise`` and no transition step.

**Truncation.** A rise whose largest value is at the last measured checkpoint, while the run went on
past it (``last_checkpoint`` column of the table, written by stage ``landscape``; a table without it
counts as cut off), has not been seen to peak: its half-rise depends on where the window ended. It
is reported with ``status`` ``truncated``, no transition step and no precursor verdict, never as an
event.

**Saturation.** A measure at its cap cannot show how far above the cap it would be: ``gradcov_rank``
where ``gradcov_saturated`` (rank = samples - 1), ``grad_erank`` where it is at or above
``erank_saturation`` of ``grad_erank_cap``. A measure saturated at any measured checkpoint has its
transition reported but its precursor verdict undetermined (``None``).

**Precursor** (the shared rule, :func:`stages.analysis.event_rules.precursor_verdict`): the transition
ended at least ``rules.min_lead`` of the acquisition step before acquisition, with
``rules.min_checkpoints`` measured checkpoints strictly between; ``False`` without a transition or
when it ended too late; ``None`` without acquisition, when too few checkpoints separate the two,
or when the measure is saturated.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stages.analysis.event_rules import ABSENT, FOUND, UNDETERMINED, Rules, find_dip, lead_fraction, precursor_verdict

from stages.measures.registry import LANDSCAPE
from stages.params import DIRECTIONS  # noqa: E402  declared once

BELOW_NOISE = "below_noise"
TRUNCATED = "truncated"


def noise_columns() -> dict[str, str]:
    """Measure column -> the column of its own noise, from the registrations (stages/measures/registry.py)."""
    return {m.column: m.noise for m in LANDSCAPE.values() if m.noise}


def default_directions() -> dict[str, str]:
    """Measure column -> dip or rise, from the registrations (stages/measures/registry.py)."""
    return {m.column: m.direction for m in LANDSCAPE.values()}


def jitter(values) -> float:
    """Median absolute difference between successive finite values (0 with fewer than two)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.median(np.abs(np.diff(v)))) if len(v) >= 2 else 0.0


def measure_noise(frame: pd.DataFrame, measure: str) -> float:
    """The measure's noise on this run (see the module docstring)."""
    column = noise_columns().get(measure)
    if column is not None and column in frame.columns:
        noise = pd.to_numeric(frame[column], errors="coerce").dropna()
        if len(noise):
            return float(noise.median())
    return jitter(frame[measure].to_numpy())


def saturated_flags(frame: pd.DataFrame, measure: str, p: dict) -> np.ndarray:
    """Per row, whether ``measure`` is at its cap (all False for measures without a cap)."""
    if measure == "gradcov_rank" and "gradcov_saturated" in frame.columns:
        return frame["gradcov_saturated"].astype(str).str.lower().isin(["true", "1", "1.0"]).to_numpy()
    if measure == "grad_erank" and "grad_erank_cap" in frame.columns:
        cap = pd.to_numeric(frame["grad_erank_cap"], errors="coerce").to_numpy(dtype=float)
        values = pd.to_numeric(frame[measure], errors="coerce").to_numpy(dtype=float)
        with np.errstate(invalid="ignore"):
            return values >= p["erank_saturation"] * cap
    return np.zeros(len(frame), dtype=bool)


def rise(steps, values, rise_fraction: float = 0.5, min_rise: float = 0.2) -> tuple[int | None, float]:
    """``(half-rise step or None, rise vmax - v0)`` (see the module docstring; NaNs dropped)."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if len(values) < 2:
        return None, float("nan")
    v0, top = float(values[0]), float(values.max())
    change = top - v0
    if change <= 0 or change < min_rise * max(abs(v0), abs(top)):
        return None, change
    hit = np.nonzero(values >= v0 + rise_fraction * change)[0]
    return int(steps[hit[0]]), change


def measure_events(steps, values, direction: str, acquisition: int | None, rules: Rules, p: dict,
                   noise: float, saturated: bool, cut_off: bool = False) -> dict:
    """One measure's transition, end, lead and precursor verdict (see the module docstring);
    ``cut_off``: the measured checkpoints end before the run does (a rise peaking at the last one is
    truncated)."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    threshold = p["noise_factor"] * noise
    out = {"direction": direction, "status": ABSENT, "transition_step": None, "end_step": None,
           "lead_fraction": None, "precursor": None, "saturated": bool(saturated), "noise": float(noise),
           "threshold": float(threshold), "change": None, "peak_step": None, "floor_step": None,
           "recovery_status": None, "n_checkpoints": int(np.isfinite(values).sum())}
    if out["n_checkpoints"] < 2:
        out["status"] = UNDETERMINED
        return out
    if direction == "dip":
        dip = find_dip(steps, values, rules, until=acquisition)
        if dip.status == FOUND:
            out.update(change=float(dip.peak - dip.floor), peak_step=dip.peak_step, floor_step=dip.floor_step)
            if out["change"] > threshold:
                out.update(status=FOUND, transition_step=dip.collapse_step, end_step=dip.recovery_step,
                           recovery_status=dip.recovery_status)
            else:
                out["status"] = BELOW_NOISE
        else:
            out["status"] = dip.status
    else:
        step, change = rise(steps, values, p["rise_fraction"], p["min_rise"])
        out["change"] = None if not np.isfinite(change) else float(change)
        finite = np.nonzero(np.isfinite(values))[0]
        at_end = len(finite) and finite[int(np.argmax(values[finite]))] == finite[-1]
        if step is not None:
            if change <= threshold:
                out["status"] = BELOW_NOISE
            elif cut_off and at_end:
                out["status"] = TRUNCATED
                out["lead_fraction"] = None
                return out  # not an event: no transition, no verdict
            else:
                out.update(status=FOUND, transition_step=step, end_step=step)
    out["lead_fraction"] = lead_fraction(out["end_step"], acquisition)
    verdict = precursor_verdict(out["end_step"], acquisition, steps[np.isfinite(values)], rules)
    out["precursor"] = None if saturated else verdict
    return out


def run_measures(frame: pd.DataFrame, directions: dict[str, str], acquisition: int | None, rules: Rules,
                 p: dict) -> dict[str, dict]:
    """Per measure of ``directions`` present in ``frame`` (one run's landscape table): ``direction``,
    ``transition_step``, ``end_step``, ``lead_fraction``, ``precursor`` (True / False / None),
    ``saturated``, ``noise``, ``change`` (dip depth, None without a dip; rise ``vmax - v0``), plus
    ``status`` (found | below_noise | truncated | absent | undetermined), ``threshold`` (noise_factor x noise),
    ``peak_step``, ``floor_step``, ``recovery_status`` (dips) and ``n_checkpoints``.
    ``p`` is :func:`landscape_event_params`; ``acquisition`` the run's acquisition step or None."""
    frame = frame.sort_values("step").reset_index(drop=True)
    steps = frame["step"].to_numpy()
    last = pd.to_numeric(frame["last_checkpoint"], errors="coerce").max() if "last_checkpoint" in frame else np.nan
    cut_off = not np.isfinite(last) or steps[-1] < last
    out = {}
    for measure, direction in directions.items():
        if measure not in frame.columns:
            continue
        values = pd.to_numeric(frame[measure], errors="coerce").to_numpy(dtype=float)
        out[measure] = measure_events(steps, values, direction, acquisition, rules, p,
                                      noise=measure_noise(frame, measure),
                                      saturated=bool(saturated_flags(frame, measure, p).any()), cut_off=cut_off)
    return out


def landscape_event_params(cfg: "LandscapeEvents") -> dict:  # noqa: F821 (stages.params.LandscapeEvents)
    """The ``landscape_events`` section (checked by the schema: every error names its key) as the flat
    mapping :func:`run_measures` takes; ``directions``: every registered measure's own
    (:func:`default_directions`), overridden by those params.yaml sets."""
    return {"directions": {**default_directions(), **cfg.directions}, "rise_fraction": cfg.rise_fraction,
            "min_rise": cfg.min_rise, "noise_factor": cfg.noise_factor, "erank_saturation": cfg.erank_saturation}
