"""Events on trajectories: collapse, floor, recovery, acquisition, precursor gap, layer order.

Definitions (thresholds come from ``params.yaml: events``):

* **acquisition**: the first checkpoint of ``window`` consecutive checkpoints whose exact-match
  accuracy is ``>= threshold`` (default 3 and 0.5).
* **collapse**: the first checkpoint at which the measure falls to ``(1 - collapse_drop)`` of its
  value at the first checkpoint.
* **floor**: the minimum of the dip that follows, i.e. before the measure climbs back over the
  collapse threshold (or until the end of training).
* **recovery**: the first checkpoint after the floor at which the measure has regained
  ``recovery_fraction`` of the dip depth (``floor + f * (initial - floor)``).
* **precursor gap**: acquisition step minus collapse step; a run's geometric transition is a
  **precursor** when it collapses, recovers no later than acquisition, and the gap is at least
  ``precursor_min_gap`` training steps (otherwise geometry and accuracy move together).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import spearmanr


@dataclass
class Dip:
    initial: float
    collapse_step: int | None = None
    floor: float | None = None
    floor_step: int | None = None
    recovery_step: int | None = None

    @property
    def collapsed(self) -> bool:
        return self.collapse_step is not None

    def to_dict(self) -> dict:
        return asdict(self)


def acquisition_step(steps, accuracy, threshold: float = 0.5, window: int = 3) -> int | None:
    """First step starting ``window`` consecutive checkpoints with accuracy ``>= threshold``."""
    ok = np.asarray(accuracy, dtype=float) >= threshold
    run = 0
    for i, flag in enumerate(ok):
        run = run + 1 if flag else 0
        if run == window:
            return int(np.asarray(steps)[i - window + 1])
    return None


def find_dip(steps, values, collapse_drop: float = 0.2, recovery_fraction: float = 0.5) -> Dip:
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=float)
    initial = float(values[0])
    dip = Dip(initial=initial)
    level = (1.0 - collapse_drop) * initial
    below = np.nonzero(values <= level)[0]
    if len(below) == 0:
        return dip
    start = int(below[0])
    above = np.nonzero(values[start:] > level)[0]
    end = start + int(above[0]) if len(above) else len(values)
    floor_i = start + int(np.argmin(values[start:end]))
    dip.collapse_step, dip.floor, dip.floor_step = int(steps[start]), float(values[floor_i]), int(steps[floor_i])
    target = dip.floor + recovery_fraction * (initial - dip.floor)
    rec = np.nonzero(values[floor_i:] >= target)[0]
    if len(rec):
        dip.recovery_step = int(steps[floor_i + int(rec[0])])
    return dip


def layer_order(collapse_steps: dict[int, int | None], floor_steps: dict[int, int | None]) -> dict:
    """Order in which layers collapse. ``spearman`` correlates depth with collapse time (ties
    broken by floor time): negative means deeper layers go first, i.e. top-down."""
    layers = sorted(l for l, s in collapse_steps.items() if s is not None)
    result = {"layers": layers, "spearman": None, "order": "undetermined", "top_down": None}
    if len(layers) < 2:
        return result
    keys = [(collapse_steps[l], floor_steps[l] if floor_steps[l] is not None else collapse_steps[l]) for l in layers]
    if len(set(keys)) == 1:
        result.update(order="simultaneous", top_down=False)
        return result
    ranks = _rank(keys)
    rho = float(spearmanr(layers, ranks).statistic)
    result.update(spearman=rho, top_down=rho < 0,
                  order="top-down" if rho < 0 else ("bottom-up" if rho > 0 else "mixed"))
    return result


def _rank(keys: list[tuple]) -> list[float]:
    """Average ranks of lexicographic keys (ties share a rank)."""
    ordered = sorted(set(keys))
    position = {k: i for i, k in enumerate(ordered)}
    return [float(position[k]) for k in keys]


def spearman(x, y) -> dict:
    """Spearman's rho with p-value and n; ``None`` where fewer than 3 points or no variation."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"rho": None, "p": None, "n": int(len(x))}
    res = spearmanr(x, y)
    return {"rho": float(res.statistic), "p": float(res.pvalue), "n": int(len(x))}
