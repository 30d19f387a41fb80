"""Events on trajectories: dip (collapse, floor, recovery), acquisition, precursor verdict, layer order.

Every rule is defined on the checkpoints alone, with no reference to the run's length in steps:

* **acquisition**: the first checkpoint of ``window`` consecutive checkpoints whose accuracy is
  ``>= threshold``. Status ``undetermined`` when only the last ``< window`` checkpoints reach the
  threshold (the run ended before it could be decided), ``absent`` when accuracy never reaches it.
* **dip** of a measure (RankMe, centred RankMe, ...), searched up to acquisition (the whole run when
  there is none): the **floor** is the minimum over that span, the **peak** the maximum before the
  floor. The dip exists when its depth ``peak - floor`` is at least ``min_depth`` of the peak (the
  measure's own scale, so a flat or noisy trajectory has no dip). **collapse** is the first
  checkpoint after the peak at or below the half-depth level ``floor + (peak - floor) / 2``: the
  middle of the descent, so it never sits on the first checkpoint by construction (it does when the
  measure really halves its drop in the first update). **recovery** is the first checkpoint after
  the floor at or above ``floor + recovery_fraction * (peak - floor)``; ``undetermined`` when fewer
  than ``min_checkpoints`` checkpoints follow the floor.
* **precursor**: the geometry finished its transition (recovery; for measures that rise, the
  half-rise) before acquisition by at least ``min_lead`` of the acquisition step
  (``lead_fraction = (acquisition - end) / acquisition``, scale-free: equivalent to a lead of
  ``-log(1 - min_lead)`` in log-steps), with at least ``min_checkpoints`` checkpoints strictly
  between the two events. Too few checkpoints between them to tell: ``undetermined`` (``None``),
  never a guess; no acquisition: ``None`` (left out of rates).
* **layer order**: Spearman correlation of layer depth with collapse step over the layers whose
  states vary across samples; equal collapse steps are ties (average ranks), never broken.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

FOUND, ABSENT, UNDETERMINED = "found", "absent", "undetermined"


@dataclass(frozen=True)
class Rules:
    """The event rules' parameters (``params.yaml: events``), validated at the stage boundary."""
    min_depth: float = 0.2          # dip depth as a share of its peak
    recovery_fraction: float = 0.5  # recovery regains this share of the dip depth
    threshold: float = 0.5          # acquisition accuracy
    window: int = 3                 # consecutive checkpoints at or above the threshold
    min_lead: float = 0.5           # precursor: lead as a share of the acquisition step
    min_checkpoints: int = 3        # checkpoints needed between events (and after a floor)


@dataclass
class Dip:
    initial: float
    status: str = ABSENT
    peak: float | None = None
    peak_step: int | None = None
    collapse_step: int | None = None
    floor: float | None = None
    floor_step: int | None = None
    recovery_step: int | None = None
    recovery_status: str = ABSENT

    @property
    def collapsed(self) -> bool:
        return self.collapse_step is not None

    def to_dict(self) -> dict:
        return asdict(self)


def acquisition(steps, accuracy, threshold: float = 0.5, window: int = 3) -> tuple[int | None, str]:
    """``(step, status)``: first step starting ``window`` consecutive checkpoints with accuracy
    ``>= threshold``; ``(None, "undetermined")`` when only a shorter run of them ends the series."""
    ok = np.asarray(accuracy, dtype=float) >= threshold
    run = 0
    for i, flag in enumerate(ok):
        run = run + 1 if flag else 0
        if run == window:
            return int(np.asarray(steps)[i - window + 1]), FOUND
    return None, (UNDETERMINED if run > 0 else ABSENT)


def acquisition_step(steps, accuracy, threshold: float = 0.5, window: int = 3) -> int | None:
    return acquisition(steps, accuracy, threshold, window)[0]


def find_dip(steps, values, rules: Rules = Rules(), until: int | None = None) -> Dip:
    """The dip of ``values`` (see the module docstring), searched over checkpoints ``<= until``."""
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=float)
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if len(values) == 0:
        return Dip(initial=float("nan"), status=UNDETERMINED, recovery_status=UNDETERMINED)
    dip = Dip(initial=float(values[0]))
    span = len(values) if until is None else int(np.searchsorted(steps, until, side="right"))
    if span < 2:
        dip.status = dip.recovery_status = UNDETERMINED
        return dip
    floor_i = int(np.argmin(values[:span]))
    peak_i = int(np.argmax(values[:floor_i + 1]))
    peak, floor = float(values[peak_i]), float(values[floor_i])
    depth = peak - floor
    if depth <= 0 or depth < rules.min_depth * abs(peak):
        return dip
    half = floor + 0.5 * depth
    collapse_i = peak_i + int(np.nonzero(values[peak_i:floor_i + 1] <= half)[0][0])
    dip.status = FOUND
    dip.peak, dip.peak_step = peak, int(steps[peak_i])
    dip.collapse_step, dip.floor, dip.floor_step = int(steps[collapse_i]), floor, int(steps[floor_i])
    target = floor + rules.recovery_fraction * depth
    rec = np.nonzero(values[floor_i:] >= target)[0]
    if len(rec):
        dip.recovery_step, dip.recovery_status = int(steps[floor_i + int(rec[0])]), FOUND
    elif len(values) - 1 - floor_i < rules.min_checkpoints:
        dip.recovery_status = UNDETERMINED
    return dip


def lead_fraction(end_step: int | None, acquisition_step: int | None) -> float | None:
    """``(acquisition - end) / acquisition``: the share of the time to acquisition by which the
    geometric transition came first (negative when it came after)."""
    if end_step is None or acquisition_step is None or acquisition_step <= 0:
        return None
    return (acquisition_step - end_step) / acquisition_step


def precursor_verdict(end_step: int | None, acquisition_step: int | None, steps, rules: Rules = Rules(),
                      min_lead: float | None = None) -> bool | None:
    """Is a transition that ended at ``end_step`` a precursor of acquisition at ``acquisition_step``?

    ``True``: it ended at least ``min_lead`` (default ``rules.min_lead``) of the acquisition step
    earlier, with ``rules.min_checkpoints`` checkpoints of ``steps`` strictly between.
    ``False``: no transition, or it ended too late (at or after acquisition, or with too short a lead). ``None``: no acquisition, or the lead is long
    enough but too few checkpoints separate the events to tell them apart.
    """
    if acquisition_step is None:
        return None
    if end_step is None or end_step >= acquisition_step:
        return False
    frac = lead_fraction(end_step, acquisition_step)
    if frac is None or frac < (rules.min_lead if min_lead is None else min_lead):
        return False
    steps = np.asarray(steps)
    between = int(np.count_nonzero((steps > end_step) & (steps < acquisition_step)))
    return True if between >= rules.min_checkpoints else None


def layer_order(collapse_steps: dict[int, int | None]) -> dict:
    """Order in which layers collapse: Spearman's rho of depth against collapse step over the
    layers given (the caller leaves out layers whose states do not vary) that collapsed. Negative
    rho: deeper layers first (top-down). Equal steps are ties with average ranks; ``ties`` counts
    the pairs of layers that collapse at the same checkpoint."""
    layers = sorted(l for l, s in collapse_steps.items() if s is not None)
    steps = [collapse_steps[l] for l in layers]
    ties = sum(a == b for i, a in enumerate(steps) for b in steps[i + 1:])
    result = {"layers": layers, "spearman": None, "order": "undetermined", "top_down": None, "ties": ties}
    if len(layers) < 2:
        return result
    if len(set(steps)) == 1:
        result.update(order="simultaneous", top_down=False)
        return result
    from scipy.stats import spearmanr  # here, not at the top: scipy.stats costs 0.5 s to import per stage
    rho = float(spearmanr(layers, steps).statistic)
    result.update(spearman=rho, top_down=rho < 0,
                  order="top-down" if rho < 0 else ("bottom-up" if rho > 0 else "mixed"))
    return result


def spearman(x, y) -> dict:
    """Spearman's rho with p-value and n; ``None`` where fewer than 3 points or no variation."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"rho": None, "p": None, "n": int(len(x))}
    from scipy.stats import spearmanr  # here, not at the top: scipy.stats costs 0.5 s to import per stage
    res = spearmanr(x, y)
    return {"rho": float(res.statistic), "p": float(res.pvalue), "n": int(len(x))}
