"""A Hugging Face ``TrainerCallback`` that reads RankMe every ``every`` steps and reports events.

Every ``every`` optimiser steps (and at the start and end of training) the callback runs the fixed
probe batch through the model (eval mode, no grad, ``output_hidden_states=True``, last non-pad
token or ``position``), updates a :class:`~stages.monitor.core.RankMeMonitor` and logs::

    rankme/layer_<l>            raw RankMe of every layer
    rankme_centred/layer_<l>    centred RankMe of every layer whose states vary
    rankme_monitor/accuracy     the accuracy the monitor was given (when any)
    rankme_monitor/<event>_step the step of each event reported at this reading
                                (collapse, floor, recovery, acquisition_expected, acquisition)

How the values reach the Trainer's reporting: with the trainer attached (``trainer=`` or
:meth:`RankMeCallback.attach`) they go through ``trainer.log`` -- ``state.log_history``, every
``report_to`` integration (TensorBoard, DVCLive, W&B ...) and every callback's ``on_log`` -- exactly
like the Trainer's own loss logs (the flag that schedules the Trainer's own log at this step is
kept). Without it, a ``TrainerCallback`` has no handle on ``Trainer.log``; the values are then
appended to ``state.log_history`` (so they land in ``trainer_state.json`` of every checkpoint) and
the integrations do not see them (a warning says so once).

Accuracy for acquisition and the precursor warning: ``accuracy_fn(model)`` at each reading, else
the latest evaluation metric ``accuracy_key`` (default ``eval_accuracy``; the Trainer evaluates
after ``on_step_end``, so this is the previous evaluation's value), else none (events that need
accuracy are then acquisition-free: the precursor warns at every recovery).

Resuming from a checkpoint: the monitor is rebuilt from the readings in ``state.log_history``
before the first new reading (no event is reported twice).
"""
from __future__ import annotations

import logging
import math
import re
from typing import Callable

import numpy as np
from transformers import TrainerCallback

from stages.analysis.events import Rules
from stages.monitor.core import ACQUISITION, COLLAPSE, PRECURSOR, RECOVERY, Event, RankMeMonitor
from stages.monitor.probe import probe_hidden_states

logger = logging.getLogger(__name__)
_RAW = re.compile(r"^rankme/layer_(\d+)$")


class RankMeCallback(TrainerCallback):
    """RankMe early-warning monitor for ``transformers.Trainer`` (see the module docstring).

    ``probe_inputs``: a tokenizer's ``BatchEncoding`` (or dict with ``input_ids`` and
    ``attention_mask``) or a tensor of input ids; ``every``: optimiser steps between readings.
    ``events`` holds every reported :class:`~stages.monitor.core.Event`; ``monitor`` the monitor.
    """

    def __init__(self, probe_inputs, every: int = 100, rules: Rules = Rules(), layer="last",
                 measure: str = "rankme_centred", position=None, hidden_fn: Callable | None = None,
                 accuracy_fn: Callable | None = None, accuracy_key: str = "eval_accuracy", trainer=None,
                 monitor: RankMeMonitor | None = None, print_events: bool = True):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive number of steps, got {every!r}")
        self.probe_inputs = probe_inputs
        self.every = every
        self.monitor = monitor if monitor is not None else RankMeMonitor(rules=rules, layer=layer, measure=measure)
        self.position = position
        self.hidden_fn = hidden_fn
        self.accuracy_fn = accuracy_fn
        self.accuracy_key = accuracy_key
        self.trainer = trainer
        self.print_events = print_events
        self._eval_accuracy: float | None = None
        self._warned = False

    @property
    def events(self) -> list[Event]:
        return self.monitor.events

    def attach(self, trainer) -> "RankMeCallback":
        """Register with ``trainer`` and log through ``trainer.log``; returns ``self``."""
        self.trainer = trainer
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        return self

    # ---- Trainer events --------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self.monitor.steps:
            self._restore(state.log_history)
        self._read(args, state, control, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            return self._read(args, state, control, model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._read(args, state, control, model)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        value = (metrics or {}).get(self.accuracy_key)
        if value is not None:
            self._eval_accuracy = float(value)

    # ---- internals -------------------------------------------------------------------------------
    def _read(self, args, state, control, model):
        step = int(state.global_step)
        if model is None or (self.monitor.steps and step <= self.monitor.steps[-1]):
            return control
        accuracy = self.accuracy_fn(model) if self.accuracy_fn is not None else self._eval_accuracy
        states = probe_hidden_states(model, self.probe_inputs, self.position, self.hidden_fn)
        new = self.monitor.update(step, states, accuracy)
        logs = {}
        for layer, g in self.monitor.latest.items():
            logs[f"rankme/layer_{layer}"] = g["rankme"]
            if g["varies"] and math.isfinite(g["rankme_centred"]):
                logs[f"rankme_centred/layer_{layer}"] = g["rankme_centred"]
        if accuracy is not None:
            logs["rankme_monitor/accuracy"] = float(accuracy)
        for e in new:
            if e.kind == COLLAPSE:
                logs["rankme_monitor/collapse_step"] = e.step
                logs["rankme_monitor/floor_step"] = e.floor_step
            elif e.kind == RECOVERY:
                logs["rankme_monitor/recovery_step"] = e.step
            elif e.kind == PRECURSOR:
                logs["rankme_monitor/acquisition_expected_step"] = e.reported_at
            elif e.kind == ACQUISITION:
                logs["rankme_monitor/acquisition_step"] = e.step
            if self.print_events and state.is_world_process_zero:
                logger.warning("RankMe monitor: %s", e.message)
        if self.trainer is not None:
            should_log = control.should_log
            self.trainer.log(logs)  # the handler's on_log clears should_log: keep the Trainer's own log
            control = self.trainer.control
            control.should_log = should_log
        else:
            state.log_history.append({**logs, "step": step})
            if not self._warned:
                self._warned = True
                logger.warning("RankMeCallback: no trainer attached, so RankMe goes to state.log_history only; "
                               "use RankMeCallback(...).attach(trainer) to reach the report_to integrations")
        return control

    def _restore(self, log_history: list[dict]) -> None:
        """Replay the readings logged before a resume, silently."""
        for entry in log_history:
            layers = {int(m.group(1)): v for k, v in entry.items() if (m := _RAW.match(k))}
            if not layers or "step" not in entry:
                continue
            geo = {}
            for l, raw in layers.items():
                centred = entry.get(f"rankme_centred/layer_{l}")
                geo[l] = {"rankme": float(raw), "rankme_centred": np.nan if centred is None else float(centred),
                          "varies": centred is not None}
            step = int(entry["step"])
            if not self.monitor.steps or step > self.monitor.steps[-1]:
                self.monitor.update_geometry(step, geo, entry.get("rankme_monitor/accuracy"))
