"""Dense checkpoint schedule (log-spaced early, linear later) and learning-rate schedules."""
from __future__ import annotations

import math
import sys

import numpy as np

from stages.params import LR_SCHEDULES, MAX_CHECKPOINTS  # noqa: F401  declared once, checked by the schema


def checkpoint_steps(steps: int, n_checkpoints: int, log_fraction: float = 0.5, log_until: float = 0.1,
                     key: str = "train") -> list[int]:
    """``n_checkpoints`` distinct steps in ``[0, steps]``, always including 0 and ``steps``.

    ``log_fraction`` of them are log-spaced in ``[1, log_until * steps]``, the rest linear up to
    ``steps``. Collisions after rounding are refilled in the widest remaining gaps. More than
    ``steps + 1`` checkpoints (every step) is clamped to ``steps + 1`` with one warning line on stderr.
    The values are the schema's (stages/params.py checked their types and ranges).
    """
    n = n_checkpoints
    if n > steps + 1:
        print(f"warning: '{key}.n_checkpoints' is {n}, more checkpoints than steps ({key}.steps = {steps}); "
              f"using {steps + 1}, one at every step", file=sys.stderr)
        n = steps + 1
    if n == 1:
        return [steps]
    boundary = max(1, int(round(steps * log_until)))
    n_log = int(round((n - 1) * log_fraction)) if boundary > 1 else 0
    chosen = {0, steps}
    if n_log:
        chosen.update(int(round(s)) for s in np.geomspace(1, boundary, n_log))
    n_lin = max(n - len(chosen), 0)
    if n_lin:
        chosen.update(int(round(s)) for s in np.linspace(boundary, steps, n_lin + 1)[1:])
    points = sorted(chosen)
    while len(points) < n:  # refill collisions: split the widest gap
        gaps = np.diff(points)
        i = int(np.argmax(gaps))
        points.insert(i + 1, points[i] + int(gaps[i]) // 2)
    while len(points) > n:  # drop from the densest region, never the endpoints
        gaps = np.diff(points)
        i = int(np.argmin(gaps[1:])) + 1
        points.pop(i)
    return points


def lr_at(step: int, base_lr: float, total: int, warmup: int, schedule: str, min_lr_ratio: float = 0.0) -> float:
    """Learning rate for update number ``step`` (0-based) with linear warm-up; ``schedule`` is one of
    :data:`LR_SCHEDULES` (the schema checked it once)."""
    if warmup and step < warmup:
        return base_lr * (step + 1) / warmup
    if schedule == "constant":
        return base_lr
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    floor = base_lr * min_lr_ratio
    if schedule == "cosine":
        return floor + (base_lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return floor + (base_lr - floor) * (1 - progress)


def warmup_cosine_factor(step: int, steps: int, warmup: int, min_lr_ratio: float) -> float:
    """The offline Pythia suite's multiplier of ``lr`` for update ``step``: linear warm-up times a cosine
    from 1 to ``min_lr_ratio`` over the whole run (the warm-up is not taken out of the cosine's span)."""
    return min(1.0, (step + 1) / max(1, warmup)) * (
        min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / steps))))
