"""The landscape measures: one :class:`LandscapeMeasure` registration each, in :data:`LANDSCAPE`.

Everything else derives from it: the names ``landscape.measures`` accepts (``stages.params.LANDSCAPE_MEASURES``),
the row functions the landscape stage calls (the function named after the measure in
:mod:`stages.measures.landscape_rows`, in registration order, which is the order of the table's columns),
the columns it plots and follows until they peak (stages/pipeline/landscape.py), and the direction and
noise column its events use (stages/analysis/landscape_events.py). This module imports nothing, so the
schema reads it without loading torch.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LandscapeMeasure:
    name: str                  # the landscape.measures entry; its row function in stages/measures/landscape_rows.py
    column: str                # the row's column that is plotted and whose transition the events detect
    direction: str             # dip | rise: its default in landscape_events.directions; a rise is followed to its peak
    noise: str | None = None   # the row's column estimating the value's own noise (default: checkpoint jitter)


LANDSCAPE: dict[str, LandscapeMeasure] = {m.name: m for m in (
    LandscapeMeasure("grad_erank", "grad_erank", "dip"),
    LandscapeMeasure("gradcov_rank", "gradcov_rank", "dip"),
    LandscapeMeasure("hessian", "hessian_top1", "rise", noise="hessian_top1_noise"),
    LandscapeMeasure("llc", "llc", "rise", noise="llc_std"),
)}
