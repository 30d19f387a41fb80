"""The monitor's event rules, written with the keys of ``params.yaml: events``.

``event_rules`` turns any of these into the :class:`~stages.analysis.event_rules.Rules` the detector uses::

    event_rules()                                        # the defaults (those of params.yaml)
    event_rules({"min_depth": 0.3, "acquisition_window": 2})   # params.yaml's keys, the rest default
    event_rules("params.yaml")                           # the events: section of a params file
    event_rules(Rules(...))                              # as it is

A mapping may also hold ``measure`` and ``layer`` (the online monitor tracks one layer: ``last`` or a
number; ``mean`` is offline only) and the offline-only ``bootstrap``/``sensitivity``, which are
ignored here; any other key is an error naming it. :func:`monitor_settings` returns the rules with
the measure and layer.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping

from stages.analysis.event_rules import Rules

# params.yaml ``events:`` key -> Rules field
RULE_KEYS = {"min_depth": "min_depth", "recovery_fraction": "recovery_fraction",
             "acquisition_threshold": "threshold", "acquisition_window": "window",
             "precursor_min_lead": "min_lead", "min_checkpoints": "min_checkpoints"}
OFFLINE_ONLY = ("bootstrap", "sensitivity")
MEASURES = ("rankme_centred", "rankme")


def _check(key: str, value) -> float | int:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if key in ("acquisition_window", "min_checkpoints"):
        low = 1 if key == "acquisition_window" else 0
        if not number or int(value) != value or value < low:
            raise ValueError(f"events.{key} must be an integer >= {low}, got {value!r}")
        return int(value)
    if not number or not math.isfinite(value):
        raise ValueError(f"events.{key} must be a number, got {value!r}")
    if key == "precursor_min_lead" and not 0 <= value < 1:
        raise ValueError(f"events.{key} must be in [0, 1), got {value!r}")
    if key != "precursor_min_lead" and not 0 < value <= 1:
        raise ValueError(f"events.{key} must be in (0, 1], got {value!r}")
    return float(value)


def _from_file(path: Path) -> dict:
    from stages.config import load_typed_params

    cfg = load_typed_params(path).events
    return {key: getattr(cfg, key) for key in (*RULE_KEYS, "measure", "layer")}


def monitor_settings(events=None) -> tuple[Rules, str | None, object]:
    """``(rules, measure, layer)`` from ``events`` (see the module docstring); measure and layer are
    ``None`` when not given."""
    if events is None:
        return Rules(), None, None
    if isinstance(events, Rules):
        return events, None, None
    if isinstance(events, (str, os.PathLike)):
        events = _from_file(Path(events))
    if not isinstance(events, Mapping):
        raise TypeError(f"rules must be a Rules, a mapping of params.yaml 'events:' keys or a params file path, "
                        f"got {type(events).__name__}")
    unknown = sorted(set(events) - set(RULE_KEYS) - {"measure", "layer", *OFFLINE_ONLY})
    if unknown:
        raise ValueError(f"unknown events key '{unknown[0]}' (the keys of params.yaml 'events:': "
                         f"{', '.join([*RULE_KEYS, 'measure', 'layer'])})")
    rules = Rules(**{RULE_KEYS[k]: _check(k, v) for k, v in events.items() if k in RULE_KEYS})
    measure = events.get("measure")
    if measure is not None and measure not in MEASURES:
        raise ValueError(f"events.measure must be one of {', '.join(MEASURES)}, got {measure!r}")
    layer = events.get("layer")
    if layer == "mean":
        raise ValueError("events.layer 'mean' is an offline choice; the online monitor tracks one layer: "
                         "'last' or a layer number")
    return rules, measure, layer


def event_rules(events=None) -> Rules:
    """The :class:`Rules` of ``events`` (a mapping of params.yaml ``events:`` keys, a params file, a
    ``Rules``, or ``None`` for the defaults)."""
    return monitor_settings(events)[0]


__all__ = ["RULE_KEYS", "event_rules", "monitor_settings"]
