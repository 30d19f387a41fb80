"""The online RankMe monitor: the offline event rules, applied causally as readings arrive.

Offline (:func:`detect_events`) the rules of :mod:`stages.analysis.event_rules` see the whole run. Online
(:class:`RankMeMonitor`) every reading ``k`` sees only readings ``0..k``; the monitor's *current
dip* is the offline detector applied to that prefix::

    acq_k = acquisition(steps[:k+1], accuracy[:k+1])            # found only once its window is complete
    D_k   = find_dip(steps[:k+1], values[:k+1], until=acq_k)    # values: the finite readings

so it uses no future reading by construction, and ``D_K`` at the last reading ``K`` *is* the offline
result. Events are what the monitor **reports**: once reported, an event never changes (a later,
deeper floor is reported as a new ``collapse`` event with ``revises=True``).

* ``acquisition``: reported at the reading that completes ``window`` consecutive readings with
  accuracy ``>= threshold``, stamped with the window's first step (lag: ``window - 1`` readings).
* ``collapse``: ``D_k`` has a dip (the measure fell at least ``min_depth`` of its running peak below
  it) whose floor (the running minimum) is **confirmed**: at least ``min_checkpoints`` finite
  readings follow the floor without a new minimum, or the measure has already recovered, or
  acquisition has closed the search span; and the floor does not lie inside a streak of
  at-threshold accuracy still shorter than ``window`` (whose completion would cut the search span
  before the floor). Stamped with the collapse step (half-depth crossing); carries the peak and
  floor. Reported again (``revises=True``) whenever the confirmed (peak, collapse, floor) changes.
* ``recovery``: the first reading after the confirmed floor at or above
  ``floor + recovery_fraction * depth``; reported at that reading (no lag).
* ``precursor`` ("acquisition expected"): reported with a recovery while acquisition has not been
  reported and the current accuracy is below ``threshold`` (or unknown).

**Final events equal the offline detector's** (tested): at the end of a run, the latest
``collapse`` event's (peak, collapse, floor) steps and its ``recovery`` step equal
``find_dip(..., until=acquisition)``'s, and the ``acquisition`` event's step equals
``acquisition(...)``'s, except when the offline floor is still unconfirmed (:attr:`RankMeMonitor.pending`):
then the offline detector itself calls the run undetermined (``recovery_status`` or
``acquisition_status`` is ``"undetermined"``). The only lags are reporting lags: a collapse is
reported ``min_checkpoints`` readings after its floor at most (sooner when the measure recovers),
an acquisition ``window - 1`` readings after its step.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from stages.analysis.event_rules import FOUND, UNDETERMINED, Rules, acquisition, find_dip
from stages.analysis.runs import dip_fields
from stages.measures.rankme import EPS, geometry, mean_dominance, varies
from stages.monitor.rules import event_rules

COLLAPSE, RECOVERY, PRECURSOR, ACQUISITION = "collapse", "recovery", "precursor", "acquisition"
MEASURES = ("rankme_centred", "rankme")


def _gram_rankme(z: torch.Tensor) -> np.ndarray:
    """RankMe of each matrix of a float64 stack ``[b, n, d]``: singular values as square roots of the
    eigenvalues of the smaller Gram matrix (``Z^T Z`` or ``Z Z^T``), entropy as stages/measures/rankme.py."""
    n, d = z.shape[-2:]
    gram = z.transpose(-1, -2) @ z if n >= d else z @ z.transpose(-1, -2)
    s = torch.linalg.eigvalsh(gram).clamp_min(0).sqrt()
    p = s / s.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny) + EPS
    return torch.exp(-(p * p.log()).sum(dim=-1)).cpu().numpy()


def fast_geometry(stack: torch.Tensor) -> dict[str, np.ndarray]:
    """:func:`stages.measures.rankme.geometry` for the online monitor, computed in float64 from Gram
    matrices (one ``d x d`` product and a symmetric eigensolve per matrix instead of an SVD), and with
    no centred SVD for layers whose states do not vary (NaN there anyway). On real hidden states it
    is within 1e-5 (relative) of a float64 SVD; the pipeline's float32 SVD is within 5e-4 of it.
    Several times faster on a CPU: an SVD of a rank-deficient matrix (an input-independent layer) is
    slow, its Gram eigensolve is not."""
    z = stack.detach().to(torch.float64)
    dominance = mean_dominance(z).cpu().numpy()
    varying = varies(dominance)
    centred = np.full(len(z), np.nan)
    if varying.any():
        idx = torch.as_tensor(np.flatnonzero(varying), device=z.device)
        part = z[idx]
        centred[varying] = _gram_rankme(part - part.mean(dim=1, keepdim=True))
    return {"rankme": _gram_rankme(z), "rankme_centred": centred, "mean_dominance": dominance, "varies": varying}


def rankme(h, centred: bool = False) -> float:
    """RankMe of one batch of hidden states ``h`` ``[n, d]`` (tensor or array): the exponential of
    the entropy of its normalised singular values (stages/measures/rankme.py). ``centred`` subtracts
    the mean state first; centred RankMe is NaN when the states do not vary across the batch."""
    z = h.detach() if isinstance(h, torch.Tensor) else torch.as_tensor(np.asarray(h))
    if z.dim() != 2:
        raise ValueError(f"rankme expects a batch of hidden states [n, d], got shape {tuple(z.shape)}")
    if z.shape[0] < 2:
        raise ValueError(f"rankme needs at least 2 hidden states, got {z.shape[0]}")
    return float(fast_geometry(z[None])["rankme_centred" if centred else "rankme"][0])


def detect_events(steps, values, accuracy=None, rules=None) -> dict:
    """The offline detector on one trajectory: ``acquisition_step``/``acquisition_status`` of
    ``accuracy`` (absent without one) and the dip of ``values`` searched up to acquisition
    (peak, collapse, floor, recovery and their statuses), with its lead on acquisition and precursor
    verdict, as in ``data/events/runs.csv``. Non-finite values are left out of the dip."""
    rules = rules if isinstance(rules, Rules) else event_rules(rules)
    steps = np.asarray(steps)
    if accuracy is None:
        acq, status = None, "absent"
    else:
        acq, status = acquisition(steps, np.asarray(accuracy, dtype=float), rules.threshold, rules.window)
    dip = find_dip(steps, values, rules, until=acq)
    return {"acquisition_step": acq, "acquisition_status": status, **dip_fields(dip, acq, steps, rules)}


@dataclass(frozen=True)
class Event:
    """One reported event. ``step`` is the step it is stamped with (collapse, recovery or
    acquisition step; for a precursor, the recovery step), ``reported_at`` the step of the reading
    that reported it (``>= step``)."""
    kind: str
    step: int
    reported_at: int
    measure: str
    layer: int | None = None
    peak_step: int | None = None
    collapse_step: int | None = None
    floor_step: int | None = None
    recovery_step: int | None = None
    peak: float | None = None
    floor: float | None = None
    accuracy: float | None = None
    revises: bool = False

    @property
    def message(self) -> str:
        where = f"{self.measure}" + (f" layer {self.layer}" if self.layer is not None else "")
        if self.kind == COLLAPSE:
            again = " (revised: deeper floor)" if self.revises else ""
            return (f"step {self.reported_at}: collapse of {where} at step {self.step}{again}: "
                    f"{self.peak:.3g} (step {self.peak_step}) -> floor {self.floor:.3g} (step {self.floor_step})")
        if self.kind == RECOVERY:
            return f"step {self.reported_at}: recovery of {where} at step {self.step} (floor at step {self.floor_step})"
        if self.kind == PRECURSOR:
            acc = "unknown" if self.accuracy is None else f"{self.accuracy:.3g}"
            return (f"step {self.reported_at}: precursor: acquisition expected ({where} recovered at step "
                    f"{self.step}; accuracy {acc} still below threshold)")
        return f"step {self.reported_at}: acquisition at step {self.step} (accuracy {self.accuracy:.3g})"

    def to_dict(self) -> dict:
        return {**asdict(self), "message": self.message}


@dataclass
class RankMeMonitor:
    """Causal event detector on a stream of readings (see the module docstring).

    ``rules``: a :class:`Rules`, a mapping with the keys of ``params.yaml: events``
    (``{"min_depth": 0.3, "acquisition_window": 2}``) or a params file path
    (:func:`stages.monitor.rules.event_rules`).
    ``layer``: ``"last"`` (the deepest layer whose states vary, chosen at the first reading where
    any layer varies, then fixed) or a layer number. ``measure``: ``"rankme_centred"`` (default, as
    ``params.yaml: events.measure``) or ``"rankme"`` (raw, the paper's).

    Feed it hidden states (:meth:`update`), per-layer measures already computed
    (:meth:`update_geometry`) or one scalar per reading (:meth:`observe`); each returns the events
    newly reported at that reading. Steps must increase.
    """
    rules: Rules = field(default_factory=Rules)
    layer: object = "last"
    measure: str = "rankme_centred"
    events: list[Event] = field(default_factory=list, init=False)
    history: list[dict] = field(default_factory=list, init=False)  # one row per (reading, layer)
    latest: dict[int, dict] = field(default_factory=dict, init=False)  # layer -> measures of the last reading

    def __post_init__(self):
        if not isinstance(self.rules, Rules):  # params.yaml's events: keys, or a params file
            self.rules = event_rules(self.rules)
        if self.measure not in MEASURES:
            raise ValueError(f"measure must be one of {', '.join(MEASURES)}, got {self.measure!r}")
        if self.layer != "last" and (not isinstance(self.layer, (int, np.integer)) or isinstance(self.layer, bool)
                                     or self.layer < 0):
            raise ValueError(f"layer must be 'last' or a layer number, got {self.layer!r}")
        self._steps: list[int] = []          # every reading
        self._acc: list[float] = []
        self._mstep: list[int] = []          # readings with a finite measure value
        self._mval: list[float] = []
        self._chosen: int | None = None if self.layer == "last" else int(self.layer)
        self._collapse_key = None
        self._recovery_key = None
        self._acquired: int | None = None
        self._pending = False

    # ---- feeding -------------------------------------------------------------------------------
    def update(self, step: int, hidden_states_per_layer, accuracy: float | None = None) -> list[Event]:
        """One reading from hidden states: ``{layer: [n, d]}`` or a list indexed by layer (0 =
        embeddings). Computes raw and centred RankMe and mean dominance of every layer
        (:func:`fast_geometry`)."""
        return self.update_geometry(step, layer_geometry(hidden_states_per_layer), accuracy)

    def update_geometry(self, step: int, per_layer: Mapping[int, Mapping], accuracy: float | None = None) -> list[Event]:
        """One reading from per-layer measures ``{layer: {"rankme", "rankme_centred",
        "mean_dominance", "varies"}}`` (a measures table's row of each layer)."""
        if not per_layer:
            raise ValueError("a reading needs at least one layer")
        self._check_step(step)
        layers = {int(l): dict(v) for l, v in per_layer.items()}
        for l, v in layers.items():
            if "varies" not in v:
                v["varies"] = bool(np.isfinite(v.get("rankme_centred", np.nan)))
        if self._chosen is None:
            moving = [l for l, v in layers.items() if bool(v["varies"])]
            if moving:
                self._chosen = max(moving)
        acc = float("nan") if accuracy is None else float(accuracy)
        for l in sorted(layers):
            self.history.append({"step": int(step), "layer": l, **layers[l], "test_acc": acc})
        self.latest = layers
        value = float("nan")
        if self._chosen is not None and self._chosen in layers:
            value = layers[self._chosen].get(self.measure, float("nan"))
            value = float("nan") if value is None else float(value)
        return self._observe(step, value, accuracy)

    def observe(self, step: int, value: float | None, accuracy: float | None = None) -> list[Event]:
        """One reading of the tracked measure as a scalar (NaN/None: no value at this reading)."""
        self._check_step(step)
        return self._observe(step, float("nan") if value is None else float(value), accuracy)

    # ---- state ---------------------------------------------------------------------------------
    @property
    def steps(self) -> list[int]:
        return list(self._steps)

    @property
    def chosen_layer(self) -> int | None:
        """The layer whose measure the monitor tracks (``None`` while no layer has varied)."""
        return self._chosen

    @property
    def pending(self) -> bool:
        """The current dip has a floor that is not yet confirmed (no collapse reported for it)."""
        return self._pending

    def final(self) -> dict:
        """The monitor's events as they stand: acquisition (reported or not) and the latest reported
        collapse with its recovery, in :func:`detect_events`' field names."""
        acq, status = self._acquisition()
        out = {"acquisition_step": acq, "acquisition_status": status, "peak_step": None, "collapse_step": None,
               "floor_step": None, "recovery_step": None, "pending": self._pending}
        collapse = next((e for e in reversed(self.events) if e.kind == COLLAPSE), None)
        if collapse is not None:
            out.update(peak_step=collapse.peak_step, collapse_step=collapse.collapse_step,
                       floor_step=collapse.floor_step)
            rec = next((e for e in reversed(self.events) if e.kind == RECOVERY
                        and (e.peak_step, e.collapse_step, e.floor_step) ==
                        (collapse.peak_step, collapse.collapse_step, collapse.floor_step)), None)
            out["recovery_step"] = None if rec is None else rec.step
        return out

    def offline(self) -> dict:
        """The offline detector on every reading so far: :func:`detect_events` of the tracked
        measure and the accuracy (readings without accuracy count as below threshold)."""
        acq, status = self._acquisition()
        dip = find_dip(self._mstep, self._mval, self.rules, until=acq)
        return {"acquisition_step": acq, "acquisition_status": status,
                **dip_fields(dip, acq, np.asarray(self._steps), self.rules)}

    def table(self, run: str | None = None) -> pd.DataFrame:
        """The readings as a measures table (step, layer, rankme, rankme_centred, mean_dominance,
        varies, test_acc; ``run`` first when given)."""
        frame = pd.DataFrame(self.history)
        if run is not None:
            frame.insert(0, "run", run)
        return frame

    # ---- internals -----------------------------------------------------------------------------
    def _check_step(self, step) -> None:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ValueError(f"step must be an integer, got {step!r}")
        if self._steps and step <= self._steps[-1]:
            raise ValueError(f"steps must increase: got step {step} after step {self._steps[-1]}")

    def _acquisition(self) -> tuple[int | None, str]:
        if not self._steps:
            return None, "absent"
        return acquisition(self._steps, self._acc, self.rules.threshold, self.rules.window)

    def _streak_start(self) -> int | None:
        """Step starting the current streak of at-threshold accuracy, when it is shorter than the window."""
        ok = 0
        for a in reversed(self._acc):
            if a >= self.rules.threshold:
                ok += 1
            else:
                break
        if ok == 0 or ok >= self.rules.window:
            return None
        return self._steps[-ok]

    def _observe(self, step: int, value: float, accuracy) -> list[Event]:
        r = self.rules
        acc = float("nan") if accuracy is None else float(accuracy)
        self._steps.append(int(step))
        self._acc.append(acc)
        if math.isfinite(value):
            self._mstep.append(int(step))
            self._mval.append(value)
        new: list[Event] = []
        base = {"measure": self.measure, "layer": self._chosen, "reported_at": int(step)}
        acq, status = acquisition(self._steps, self._acc, r.threshold, r.window)
        dip = find_dip(self._mstep, self._mval, r, until=acq) if self._mstep else None
        self._pending = False
        if dip is not None and dip.status == FOUND:
            after = len(self._mstep) - 1 - self._mstep.index(dip.floor_step)
            streak = self._streak_start() if acq is None else None
            confirmed = acq is not None or (
                (after >= r.min_checkpoints or dip.recovery_status == FOUND)
                and (streak is None or dip.floor_step <= streak))
            key = (dip.peak_step, dip.collapse_step, dip.floor_step)
            if confirmed:
                if key != self._collapse_key:
                    new.append(Event(COLLAPSE, dip.collapse_step, peak_step=dip.peak_step,
                                     collapse_step=dip.collapse_step, floor_step=dip.floor_step, peak=dip.peak,
                                     floor=dip.floor, revises=self._collapse_key is not None, **base))
                    self._collapse_key = key
                if dip.recovery_status == FOUND and (key, dip.recovery_step) != self._recovery_key:
                    ev = dict(peak_step=dip.peak_step, collapse_step=dip.collapse_step, floor_step=dip.floor_step,
                              recovery_step=dip.recovery_step, peak=dip.peak, floor=dip.floor)
                    new.append(Event(RECOVERY, dip.recovery_step, **ev, **base))
                    self._recovery_key = (key, dip.recovery_step)
                    if acq is None and not acc >= r.threshold:
                        new.append(Event(PRECURSOR, dip.recovery_step, **ev,
                                         accuracy=acc if math.isfinite(acc) else None, **base))
            else:
                self._pending = True
        if status == FOUND and self._acquired is None:
            self._acquired = acq
            new.append(Event(ACQUISITION, acq, accuracy=acc, **{**base, "layer": None}))
        self.events.extend(new)
        return new


def layer_geometry(hidden_states_per_layer, exact: bool = False) -> dict[int, dict]:
    """``{layer: {"rankme", "rankme_centred", "mean_dominance", "varies"}}`` of hidden states given as
    ``{layer: [n, d]}`` or a list/tuple indexed by layer; layers of equal shape are computed together.
    :func:`fast_geometry` by default; ``exact`` uses the pipeline's own ``geometry`` (float32 SVD)."""
    if isinstance(hidden_states_per_layer, Mapping):
        items = [(int(l), h) for l, h in hidden_states_per_layer.items()]
    elif isinstance(hidden_states_per_layer, (Sequence, torch.Tensor)):
        items = list(enumerate(hidden_states_per_layer))
    else:
        raise TypeError("hidden states must be a dict {layer: [n, d]} or a list indexed by layer")
    if not items:
        raise ValueError("no hidden states given")
    tensors = {}
    for l, h in items:
        t = h.detach() if isinstance(h, torch.Tensor) else torch.as_tensor(np.asarray(h))
        if t.dim() != 2:
            raise ValueError(f"layer {l}: hidden states must be [n, d], got shape {tuple(t.shape)}")
        if t.shape[0] < 2:
            raise ValueError(f"layer {l}: RankMe needs at least 2 hidden states, got {t.shape[0]}")
        if not torch.isfinite(t).all():
            raise ValueError(f"layer {l}: hidden states hold NaN or inf")
        tensors[l] = t
    out: dict[int, dict] = {}
    by_shape: dict[tuple, list[int]] = {}
    for l, t in tensors.items():
        by_shape.setdefault((tuple(t.shape), str(t.device)), []).append(l)
    for layers in by_shape.values():
        stack = torch.stack([tensors[l] for l in layers])
        geo = geometry(stack.float()) if exact else fast_geometry(stack)
        for i, l in enumerate(layers):
            out[l] = {k: (bool(v[i]) if k == "varies" else float(v[i])) for k, v in geo.items()}
    return dict(sorted(out.items()))


__all__ = ["ACQUISITION", "COLLAPSE", "PRECURSOR", "RECOVERY", "Event", "RankMeMonitor", "Rules", "detect_events",
           "fast_geometry", "layer_geometry", "rankme", "UNDETERMINED"]
