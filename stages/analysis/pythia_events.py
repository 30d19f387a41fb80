"""Acquisition of each Pythia evaluation set, against chance-corrected thresholds, and its precursor verdict.

The eight evaluation sets have different chance levels (a two-way minimal pair: 1/2; four
choices: 1/4; logical deduction: 3 to 5 choices), so one flat accuracy threshold fires near chance
on some sets and far above it on others. Each set gets its own threshold between its chance level
``c`` (``chance`` column of ``data/pythia/accuracy/<run>.csv``) and perfect accuracy:

* ``"halfway"``: ``c + (1 - c) / 2``, halfway from chance to 1 (0.75 for c = 1/2, 0.625 for c = 1/4);
* a share ``f`` in (0, 1): ``c + f (1 - c)`` (``"halfway"`` is ``f = 0.5``).

A set's acquisition, lead fraction and precursor verdict then follow the event rules of
:mod:`stages.analysis.event_rules` (``window`` consecutive checkpoints at or above the threshold;
``lead_fraction``; ``precursor_verdict`` with ``min_lead`` and ``min_checkpoints``), against one
``end_step`` per model: the step at which its RankMe dip recovered (computed by the caller; ``None``
when it did not). One model can so show a precursor gap on a hard set and none on easy ones.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from stages.analysis.event_rules import Rules, acquisition, lead_fraction, precursor_verdict
from stages.errors import PipelineError

from stages.params import HALFWAY  # noqa: E402  declared once
COLUMNS = ["eval_set", "chance", "threshold", "acquisition_step", "acquisition_status", "lead_fraction", "precursor"]
NEEDED = ("eval_set", "step", "accuracy", "chance")
# An accuracy that equals the threshold counts as reaching it, whatever the rounding of chance + f (1 - chance)
# (accuracies are k / n_items; the thresholds need not be exact binary fractions).
TOLERANCE = 1e-9


def set_threshold(chance: float, threshold: str | float = HALFWAY) -> float:
    """The accuracy threshold of a set with chance level ``chance``: ``chance + f (1 - chance)``."""
    share = 0.5 if threshold == HALFWAY else float(threshold)
    return chance + share * (1.0 - chance)


def set_events(accuracy: pd.DataFrame, end_step: int | None, rules: Rules,
               threshold: str | float = HALFWAY) -> pd.DataFrame:
    """One row per evaluation set of one model's accuracy table (columns eval_set, step, accuracy,
    chance; one row per set and checkpoint): eval_set, chance, threshold, acquisition_step,
    acquisition_status (found | absent | undetermined), lead_fraction and precursor
    (True | False | None) of the transition that ended at ``end_step``. Sets in name order."""
    missing = [c for c in NEEDED if c not in accuracy.columns]
    if missing:
        raise PipelineError(f"accuracy table lacks columns {', '.join(missing)} (needs {', '.join(NEEDED)})")
    if "run" in accuracy.columns and accuracy["run"].nunique() > 1:
        raise PipelineError(f"accuracy table holds several runs ({', '.join(map(str, accuracy['run'].unique()))}); "
                            "set events are per model")
    if accuracy.duplicated(["eval_set", "step"]).any():
        raise PipelineError("accuracy table has more than one row for a set at one step")

    rows = []
    for name, g in accuracy.groupby("eval_set", sort=True):
        g = g.sort_values("step")
        chances = g["chance"].to_numpy(dtype=float)
        chance = float(chances[0])
        if not np.all(np.isfinite(chances)) or np.ptp(chances) > TOLERANCE or not 0 < chance < 1:
            raise PipelineError(f"accuracy table: set '{name}' needs one chance level in (0, 1) at every step, "
                                f"got {sorted(set(chances.tolist()))}")
        level = set_threshold(chance, threshold)
        steps = g["step"].to_numpy(dtype=np.int64)
        step, status = acquisition(steps, g["accuracy"].to_numpy(dtype=float), level - TOLERANCE, rules.window)
        rows.append({"eval_set": name, "chance": chance, "threshold": level, "acquisition_step": step,
                     "acquisition_status": status, "lead_fraction": lead_fraction(end_step, step),
                     "precursor": precursor_verdict(end_step, step, steps, rules)})
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["acquisition_step"] = out["acquisition_step"].astype("Int64")
    out["lead_fraction"] = out["lead_fraction"].astype(float)
    out["precursor"] = out["precursor"].astype(object).where(out["precursor"].notna(), None)
    return out
