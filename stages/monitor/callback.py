"""A Hugging Face ``TrainerCallback`` that reads RankMe on the Trainer's own logging schedule.

    trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[RankMeCallback(probe)])

**Where the readings go.** A reading is taken when the Trainer logs (its ``logging_steps``, or the
first log at least ``every`` steps after the previous reading) and its values are added to *that*
log: the ``logs`` dict every callback's ``on_log`` receives and the matching ``state.log_history``
entry. So every ``report_to`` integration (TensorBoard, DVCLive, W&B, MLflow ...) records them beside
the loss, at the same step, and the monitor adds no log call of its own: DVCLive, which counts log
calls as steps, keeps the user's loss at steps 0, 1, 2 ... To be read before the integrations, the
callback moves itself to the front of the Trainer's callback list when the Trainer first calls it
(``callbacks=[...]``, ``trainer.add_callback`` or :meth:`RankMeCallback.attach`). One more reading is
taken at the start of training (step 0, where the Trainer does not log): it goes into the monitor and
``state.log_history`` (so into ``trainer_state.json`` of every checkpoint), not to the integrations.

Logged keys (numbers only)::

    rankme/layer_<l>            raw RankMe of every layer
    rankme_centred/layer_<l>    centred RankMe of every layer whose states vary
    rankme_monitor/accuracy     the accuracy the monitor was given (when any)
    rankme_monitor/<event>_step the step of each event reported at this reading
                                (collapse, floor, recovery, acquisition_expected, acquisition)

**Quiet.** Nothing is printed; events go to the ``stages.monitor`` logger at INFO (the Trainer's
console, ``PrinterCallback``, shows the values inside its usual log lines). ``callback.events``
holds every :class:`~stages.monitor.core.Event`.

**Rules** are ``params.yaml: events`` keys (``rules={"min_depth": 0.3}``, ``rules="params.yaml"``) or
a :class:`~stages.analysis.event_rules.Rules` (:mod:`stages.monitor.rules`).

**Accuracy** for acquisition and the precursor warning: ``accuracy_fn(model)`` at each reading, else
the latest evaluation metric ``accuracy_key`` (default ``eval_accuracy``), else none (events that
need accuracy are then acquisition-free: the precursor warns at every recovery).

**Resuming** from a checkpoint: the monitor is rebuilt from the readings in ``state.log_history``
before the first new reading (no event is reported twice).
"""
from __future__ import annotations

import logging
import math
import re
import sys
from typing import Callable

import numpy as np
from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler

from stages.monitor.core import ACQUISITION, COLLAPSE, PRECURSOR, RECOVERY, Event, RankMeMonitor
from stages.monitor.probe import probe_hidden_states
from stages.monitor.rules import monitor_settings

logger = logging.getLogger("stages.monitor")
_RAW = re.compile(r"^rankme/layer_(\d+)$")
END_OF_TRAINING = "train_runtime"  # key of the Trainer's last log (its summary): always read there


class RankMeCallback(TrainerCallback):
    """RankMe early-warning monitor for ``transformers.Trainer`` (see the module docstring).

    ``probe_inputs``: a tokenizer's ``BatchEncoding`` (or dict with ``input_ids`` and
    ``attention_mask``) or a tensor of input ids, read at each example's last non-pad token (or
    ``position``). ``every``: least number of steps between readings (default ``None``: at every
    Trainer log). ``events`` holds every reported event; ``monitor`` the
    :class:`~stages.monitor.core.RankMeMonitor`.
    """

    def __init__(self, probe_inputs, every: int | None = None, rules=None, layer=None, measure: str | None = None,
                 position=None, hidden_fn: Callable | None = None, accuracy_fn: Callable | None = None,
                 accuracy_key: str = "eval_accuracy", monitor: RankMeMonitor | None = None,
                 event_level: int = logging.INFO):
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ValueError(f"every must be a positive number of steps or None (every Trainer log), got {every!r}")
        if monitor is None:
            rules, from_measure, from_layer = monitor_settings(rules)
            monitor = RankMeMonitor(rules=rules, layer=layer if layer is not None else (from_layer or "last"),
                                    measure=measure if measure is not None else (from_measure or "rankme_centred"))
        self.probe_inputs = probe_inputs
        self.every = every
        self.monitor = monitor
        self.position = position
        self.hidden_fn = hidden_fn
        self.accuracy_fn = accuracy_fn
        self.accuracy_key = accuracy_key
        self.event_level = event_level
        self._eval_accuracy: float | None = None
        self._placed = False
        self._warned = False

    @property
    def events(self) -> list[Event]:
        return self.monitor.events

    def attach(self, trainer) -> "RankMeCallback":
        """Add to ``trainer`` (if not yet) ahead of its other callbacks; returns ``self``. Optional:
        ``Trainer(..., callbacks=[callback])`` does the same when the Trainer first calls it."""
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        self._first_in(trainer.callback_handler)
        return self

    # ---- Trainer events --------------------------------------------------------------------------
    def on_init_end(self, args, state, control, **kwargs):
        self._place()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._place()
        if not self.monitor.steps:
            self._restore(state.log_history)
        step = int(state.global_step)
        if model is not None and (not self.monitor.steps or step > self.monitor.steps[-1]):
            logs = self._read(step, model)  # the start of training: no Trainer log here
            state.log_history.append({**logs, "step": step})

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        value = (metrics or {}).get(self.accuracy_key)
        if value is not None:
            self._eval_accuracy = float(value)

    def on_log(self, args, state, control, model=None, logs=None, **kwargs):
        self._place()
        step = int(state.global_step)
        if model is None or logs is None or (self.monitor.steps and step <= self.monitor.steps[-1]):
            return
        every = self.every if self.every is not None else 1
        if self.monitor.steps and step - self.monitor.steps[-1] < every and END_OF_TRAINING not in logs:
            return
        values = self._read(step, model)
        logs.update(values)  # the dict every later callback's on_log, integrations included, receives
        if state.log_history and state.log_history[-1].get("step") == step:
            state.log_history[-1].update(values)  # Trainer.log appended this log's copy just before on_log
        else:
            state.log_history.append({**values, "step": step})

    # ---- internals -------------------------------------------------------------------------------
    def _place(self) -> None:
        """Move ahead of the other callbacks (the reporting integrations come first otherwise)."""
        if self._placed:
            return
        frame = sys._getframe(1)
        for _ in range(4):  # the CallbackHandler method calling this callback is a few frames up
            frame = frame.f_back
            if frame is None:
                break
            handler = frame.f_locals.get("self")
            if isinstance(handler, CallbackHandler) and self in handler.callbacks:
                self._first_in(handler)
                return
        if not self._warned:
            self._warned = True
            logger.warning("RankMeCallback: not called by a transformers CallbackHandler, so it could not go ahead "
                           "of the reporting integrations; use RankMeCallback(...).attach(trainer)")

    def _first_in(self, handler: CallbackHandler) -> None:
        handler.callbacks.remove(self)
        handler.callbacks.insert(0, self)
        self._placed = True

    def _read(self, step: int, model) -> dict:
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
            logger.log(self.event_level, "RankMe monitor: %s", e.message)
        return logs

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
