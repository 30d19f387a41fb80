"""RankMe early-warning monitor for any training run (README: "Monitoring any training run").

Public API (stable names)::

    rankme(h, centred=False)                        RankMe of a batch of hidden states [n, d]
    event_rules(events=None)                        Rules from params.yaml's events: keys (a mapping or a file)
    detect_events(steps, values, accuracy=None, rules=None)      the offline detector
    RankMeMonitor(rules=None, layer="last", measure="rankme_centred")
        .update(step, hidden_states_per_layer, accuracy=None) -> list[Event]   (causal)
    monitor_step(model, probe_batch, step, monitor, hidden_fn=None)          plain PyTorch loops
    RankMeCallback(probe_inputs, every=None, ...)   transformers.TrainerCallback: Trainer(callbacks=[...])
    rankme-monitor PATH ...                         measure a folder of checkpoints (python -m stages.monitor.measure_dir)

Everything here is library code (no stage module is imported). ``RankMeCallback`` is imported lazily
(it needs transformers); logging goes to the ``stages.monitor`` logger (nothing is printed).
"""
from __future__ import annotations

from stages.analysis.event_rules import Rules
from stages.monitor.core import (ACQUISITION, COLLAPSE, PRECURSOR, RECOVERY, Event, RankMeMonitor, detect_events,
                                 layer_geometry, rankme)
from stages.monitor.probe import monitor_step, probe_hidden_states
from stages.monitor.rules import event_rules

__all__ = ["ACQUISITION", "COLLAPSE", "PRECURSOR", "RECOVERY", "Event", "RankMeCallback", "RankMeMonitor", "Rules",
           "detect_events", "event_rules", "layer_geometry", "monitor_step", "probe_hidden_states", "rankme"]


def __getattr__(name):
    if name == "RankMeCallback":
        from stages.monitor.callback import RankMeCallback

        return RankMeCallback
    raise AttributeError(f"module 'stages.monitor' has no attribute {name!r}")
