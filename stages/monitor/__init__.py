"""RankMe early-warning monitor for any training run (README: "Monitoring any training run").

Public API (stable names)::

    rankme(h, centred=False)                        RankMe of a batch of hidden states [n, d]
    detect_events(steps, values, accuracy=None, rules=Rules())   the offline detector
    RankMeMonitor(rules=Rules(), layer="last", measure="rankme_centred")
        .update(step, hidden_states_per_layer, accuracy=None) -> list[Event]   (causal)
    monitor_step(model, probe_batch, step, monitor, hidden_fn=None)          plain PyTorch loops
    RankMeCallback(probe_inputs, every=N, ...)       transformers.TrainerCallback
    python -m stages.monitor.measure_dir PATH ...    measure a directory of checkpoints

``RankMeCallback`` is imported lazily (it needs transformers).
"""
from __future__ import annotations

from stages.analysis.events import Rules
from stages.monitor.core import (ACQUISITION, COLLAPSE, PRECURSOR, RECOVERY, Event, RankMeMonitor, detect_events,
                                 layer_geometry, rankme)
from stages.monitor.probe import monitor_step, probe_hidden_states

__all__ = ["ACQUISITION", "COLLAPSE", "PRECURSOR", "RECOVERY", "Event", "RankMeCallback", "RankMeMonitor", "Rules",
           "detect_events", "layer_geometry", "monitor_step", "probe_hidden_states", "rankme"]


def __getattr__(name):
    if name == "RankMeCallback":
        from stages.monitor.callback import RankMeCallback

        return RankMeCallback
    raise AttributeError(f"module 'stages.monitor' has no attribute {name!r}")
