"""Stage ``landscape``: gradient effective rank, gradient covariance rank, top Hessian eigenvalues and
the local learning coefficient (LLC) at selected checkpoints of one run.

Reads ``data/checkpoints/<run>/``, ``data/datasets/<task>-<level>/train.parquet`` and
``data/history/<run>.csv``; writes ``data/landscape/<run>.csv`` and the plot table
``plots/landscape/<run>.csv``. No wall-clock time goes into the outputs, so a rerun reproduces
them byte for byte; ``benchmarks/measure_cost.py`` measures the cost. All costs are set in
``params.yaml: landscape``; every sample is seeded.

**Which checkpoints** (:func:`choose_steps`). Acquisition is read from the run's history with the
events rule (:func:`stages.analysis.event_rules.acquisition`, ``events.acquisition_threshold`` and
``events.acquisition_window``): the first checkpoint starting ``window`` consecutive checkpoints at
or above the threshold. The landscape is measured on every checkpoint from step 0 through
acquisition and ``landscape.after_acquisition`` checkpoints past it; a run without acquisition
(absent, or undetermined at the end of the run) uses all its checkpoints. When that window holds
more than ``landscape.max_checkpoints`` checkpoints (0 = no cap) they are thinned evenly in
checkpoint index, first and last kept, so the early log-spaced checkpoints stay denser.

**Following a rise to its peak** (:func:`next_steps`, :func:`peaked`). The rise measures
(:func:`rises`: the columns of the measures registered with direction ``rise``,
``hessian_top1`` and ``llc``) often still climb at the window's end. While one of them
has its largest value within the last ``landscape.follow.settle`` measured checkpoints, the stage
measures further checkpoints past the last one, geometrically spaced (each batch: the first
checkpoints at or past ``follow.ratio``, ``ratio^2``, ... times the last measured step, one per
worker), until every rise has peaked, the run ends, or ``follow.extra`` more checkpoints have been
measured (the cost budget; 0 = never follow). Every row carries ``last_checkpoint``, the run's final
checkpoint step, so a rise cut off by the window (its maximum at the last measured checkpoint,
before the run ends) is reported as ``truncated`` by :mod:`stages.analysis.landscape_events`, never
as an event.

**Columns** (one row per measured checkpoint; each measure's row function is registered in
:mod:`stages.measures.registry` and written in :mod:`stages.measures.landscape_rows`):

* ``run, step, test_acc, n_params``, ``last_checkpoint`` (the run's final checkpoint step);
* ``grad_erank`` and its cap ``grad_erank_cap`` = min(samples, columns of G);
* ``gradcov_rank``, its cap ``gradcov_cap`` = samples - 1 and ``gradcov_saturated``
  (``gradcov_rank >= gradcov_cap``: the value only says "at least the cap");
* ``hessian_top1..k`` (largest over ``landscape.hessian.repeats`` Lanczos start vectors),
  ``hessian_top1_spread`` (largest minus smallest top value over the repeats; NaN with one repeat)
  and ``hessian_top1_noise`` = max(spread, ``hessian.tol`` x |top1|), the eigenvalue's own noise;
* ``llc`` (mean over chains), ``llc_std`` (standard deviation over chains), ``llc_chain_min``,
  ``llc_chain_max``, ``llc_chain0..`` (every chain), ``llc_drift`` and ``llc_stationary`` (the
  calibration check of :mod:`stages.measures.llc`: the loss trace after burn-in has no trend and
  no blow-up), ``init_loss`` (L(w*) on the LLC sample).
"""
from __future__ import annotations

if __name__ == "__main__":  # a stage process: its environment before numpy and torch load (stages/runtime.py)
    from stages.runtime import prepare
    prepare()

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from stages import paths
from stages.analysis.event_rules import acquisition
from stages.analysis.runs import layer_series, varying_layers
from stages.config import run_id
from stages.errors import PipelineError
from stages.io.checkpoints import load_model, read_manifest, verify_checkpoints
from stages.io.datasets import load_split
from stages.io.history import accuracy_by_step
from stages.io.measure_tables import read_measures
from stages.io.atomic import output_set
from stages.io.tables import write_csv
from stages.measures.landscape_rows import measure_checkpoint
from stages.measures.registry import LANDSCAPE
from stages.params import Events, LANDSCAPE_MEASURES, Landscape, Params
from stages.numerics import warm_vector_math
from stages.runtime import pin_threads
from stages.training.device import resolve_device
from stages.training.loop import sequences
from stages.pipeline import stage

MEASURES = LANDSCAPE_MEASURES


def plot_columns() -> list[str]:
    """The registered measures' columns (stages/measures/registry.py): plotted and shown on the progress bar."""
    return [m.column for m in LANDSCAPE.values()]


def rises() -> list[str]:
    """The columns of the measures registered as rises: followed until they peak."""
    return [m.column for m in LANDSCAPE.values() if m.direction == "rise"]


def thin(steps: list[int], max_checkpoints: int) -> list[int]:
    """At most ``max_checkpoints`` of ``steps``, evenly spaced in checkpoint index (first and last
    kept, so the early log-spaced checkpoints stay denser); 0 keeps all."""
    steps = sorted(steps)
    if not max_checkpoints or max_checkpoints >= len(steps):
        return steps
    if max_checkpoints == 1:
        return steps[:1]
    idx = np.unique(np.round(np.linspace(0, len(steps) - 1, max_checkpoints)).astype(int))
    return [steps[i] for i in idx]


def choose_steps(steps, accuracy: dict[int, float], max_checkpoints: int, after_acquisition: int,
                 threshold: float, window: int) -> tuple[list[int], int | None]:
    """``(checkpoints to measure, acquisition step or None)``: every checkpoint from the first
    through acquisition plus ``after_acquisition`` more (the whole run without acquisition),
    thinned to ``max_checkpoints`` (see the module docstring). ``accuracy`` maps checkpoint step
    to test accuracy (the run's history); checkpoints it lacks do not count towards acquisition."""
    steps = sorted(int(s) for s in steps)
    scored = [s for s in steps if s in accuracy and np.isfinite(accuracy[s])]
    acq, _status = acquisition(scored, [accuracy[s] for s in scored], threshold, window)
    if acq is None:
        span = steps
    else:
        span = steps[:steps.index(acq) + after_acquisition + 1]
    return thin(span, max_checkpoints), acq


def peaked(values, settle: int) -> bool:
    """Has a rising series peaked: is its largest finite value followed by at least ``settle``
    measured checkpoints? (No finite value: nothing to follow, ``True``.)"""
    v = np.asarray(values, dtype=float)
    finite = np.nonzero(np.isfinite(v))[0]
    if not len(finite):
        return True
    top = finite[int(np.argmax(v[finite]))]
    return len(v) - 1 - top >= settle


def next_steps(steps, last: int, ratio: float, count: int) -> list[int]:
    """Up to ``count`` checkpoints of ``steps`` after ``last``: the first at or past ``last x ratio^k``
    for k = 1, 2, ... (distinct; the run's final checkpoint closes the list when a target is past it)."""
    later = sorted(int(s) for s in steps if s > last)
    out: list[int] = []
    target = max(last, 1)
    while later and len(out) < count:
        target *= ratio
        pick = next((s for s in later if s >= target and s not in out), None)
        if pick is None:
            pick = later[-1] if later[-1] not in out else None
            if pick is not None:
                out.append(pick)
            break
        out.append(pick)
    return sorted(out)


def landscape(task: str, level: str, model_name: str, seed: int, p: Landscape, events: Events,
              progress: bool = True, portable: bool = False) -> pd.DataFrame:
    """The landscape measures (``p``: the ``landscape`` section) of run ``<task>-<level>-<model>-s<seed>``,
    at checkpoints up to ``landscape.after_acquisition`` past acquisition (``events``' rule). ``portable``
    (``runtime.cpu_paths: portable``): the model's vendor-exact operators (stages/models/gpt.py)."""
    rid = run_id(task, level, model_name, seed)
    if p.threads:
        pin_threads(p.threads, portable)
    device = resolve_device(p.device, "landscape.device")
    ckpt_dir = paths.checkpoint_dir(rid)
    manifest = read_manifest(ckpt_dir)
    prompt, answer, meta = load_split(paths.dataset_dir(task, level), "train")
    check_fits(p, len(prompt), paths.dataset_dir(task, level) / "train.parquet", manifest, device)  # before compute
    verify_checkpoints(ckpt_dir, manifest)  # every step file against its sha256, once
    order = np.random.default_rng(p.seed).permutation(len(prompt))
    seq = sequences(prompt[order], answer[order], device)
    if p.hessian.k >= manifest.get("n_params", np.inf):
        raise PipelineError(f"'landscape.hessian.k' ({p.hessian.k}) must be below the model's parameter count")
    data = {"grad": seq[:p.grad.samples], "hessian": seq[:p.hessian.samples], "llc": seq[:p.llc.samples]}
    acc = accuracy_by_step(rid)
    steps, _acq = choose_steps(manifest["steps"], acc, p.max_checkpoints, p.after_acquisition,
                               events.acquisition_threshold, events.acquisition_window)

    last_checkpoint = int(max(manifest["steps"]))

    def job(step):
        return (ckpt_dir, int(step), manifest, data, meta["prompt_len"], p, device, portable)

    workers = min(p.workers, len(steps)) if device.type == "cpu" else 1
    rows = []
    bar = tqdm(total=len(steps), desc=f"landscape {rid}", disable=not progress, mininterval=2)
    with checkpoint_map(workers, p.threads, portable) as each:
        batch, extra = list(steps), 0
        while batch:
            for row in each(_measure_step, [job(s) for s in batch]):
                rows.append({"run": rid, "step": row["step"], "test_acc": acc.get(row["step"], np.nan),
                             "n_params": manifest.get("n_params"), "last_checkpoint": last_checkpoint, **row})
                bar.update(1)
                bar.set_postfix({k: f"{row[k]:.3g}" for k in plot_columns() if k in row})
            rows.sort(key=lambda r: r["step"])
            open_rises = [m for m in rises() if m in rows[0] and not peaked([r[m] for r in rows], p.follow.settle)]
            room = p.follow.extra - extra
            batch = next_steps(manifest["steps"], rows[-1]["step"], p.follow.ratio,
                               min(max(p.workers, 1), room)) if open_rises and room > 0 else []
            extra += len(batch)
            bar.total += len(batch)
    for row in rows:  # every row states how many checkpoints its table holds (a cut table is refused on read)
        row["n_checkpoints"] = len(rows)
    bar.close()
    return pd.DataFrame(rows)


GIB = 1 << 30


def memory_estimate(p: Landscape, manifest: dict) -> tuple[float, str]:
    """(bytes one worker needs at its peak, the largest term named) for the measures of ``p`` on the
    checkpoints of ``manifest``: the per-example gradient matrix (``grad.samples`` rows of
    ``sketch_dim`` or every parameter, float32) with one chunk of uncompressed per-example gradients
    and the Gram matrices; the Hessian's Lanczos vectors (float64) and the double-backward
    activations of ``hessian.samples`` sequences; SGLD's copies of the weights per chain. Model
    weights and the Python/torch baseline are left out: the estimate is the part that grows with
    the settings."""
    n_params = int(manifest.get("n_params") or 0)
    model = manifest.get("model") or {}
    width = int(model.get("d_model", 0)) * int(model.get("n_layer", 0)) * int(model.get("block_size", 0))
    terms = {}
    if {"grad_erank", "gradcov_rank"} & set(p.measures):
        n = p.grad.samples
        cols = p.grad.sketch_dim or n_params
        terms["landscape.grad.samples"] = 4 * n * cols + 3 * 4 * min(p.grad.chunk, n) * n_params + 2 * 8 * n * n
    if "hessian" in p.measures:
        ncv = max(2 * p.hessian.k + 2, 8)
        terms["landscape.hessian.samples"] = 8 * ncv * n_params + 4 * 32 * p.hessian.samples * width
    if "llc" in p.measures:
        terms["landscape.llc.samples"] = 4 * 4 * p.llc.chains * n_params + 4 * 16 * p.llc.batch_size * width
    if not terms:
        return 0.0, ""
    largest = max(terms, key=terms.get)
    return float(max(terms.values())), largest  # the measures run one after another


def memory_budget(setting, device=None) -> tuple[float, str]:
    """(bytes, how it was set) of ``landscape.memory_gb``: a number of GiB, or ``auto``: 80% of the
    CUDA device's memory, else of the machine's RAM."""
    if setting != "auto":
        return float(setting) * GIB, f"'landscape.memory_gb' = {setting:g}"
    if device is not None and torch.device(device).type == "cuda":
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
        where = f"{device}'s"
    else:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        where = "the machine's"
    return 0.8 * total, f"'landscape.memory_gb' = auto ({0.8 * total / GIB:.1f} GiB, 80% of {where} memory)"


def check_fits(p: Landscape, n_train: int, where, manifest: dict, device=None) -> None:
    """The sizes of ``p`` against the run's data and the memory budget, before any checkpoint is
    measured: every sample count at most the ``n_train`` train examples in ``where`` (they were
    silently cut to it), and the estimated peak memory of all workers within ``landscape.memory_gb``
    (:func:`memory_budget`)."""
    wanted = {"landscape.grad.samples": (p.grad.samples, {"grad_erank", "gradcov_rank"}),
              "landscape.hessian.samples": (p.hessian.samples, {"hessian"}),
              "landscape.llc.samples": (p.llc.samples, {"llc"})}
    for key, (value, needs) in wanted.items():
        if needs & set(p.measures) and value > n_train:
            raise PipelineError(f"'{key}' = {value} exceeds the {n_train} train examples of {where}: at most {n_train}")
    per_worker, key = memory_estimate(p, manifest)
    workers = p.workers if device is None or torch.device(device).type == "cpu" else 1
    total = per_worker * workers
    budget, stated = memory_budget(p.memory_gb, device)
    if total > budget:
        raise PipelineError(f"landscape measures need about {total / GIB:.1f} GiB ({workers} worker(s) x "
                            f"{per_worker / GIB:.1f} GiB, mostly '{key}' for {manifest.get('n_params')} parameters), "
                            f"over {stated}: lower '{key}' or 'landscape.workers', set 'landscape.grad.sketch_dim', "
                            "or raise the budget")


def _measure_step(job) -> dict:
    """One checkpoint's measures (``step`` first): the unit of work of :func:`landscape`. Every
    sample and chain is seeded by ``landscape.seed`` alone, so a checkpoint's row is the same
    whichever process measures it and in whatever order."""
    ckpt_dir, step, manifest, data, prompt_len, p, device, portable = job
    model = load_model(ckpt_dir, step, manifest, device, portable_ops=portable)
    return {"step": step, **measure_checkpoint(model, data, prompt_len, p)}


def _worker_threads(threads: int, portable: bool = False) -> None:
    if threads:
        pin_threads(threads, portable)
    elif portable:
        warm_vector_math()


@contextmanager
def checkpoint_map(workers: int, threads: int, portable: bool = False):
    """A ``map`` over checkpoints: the built-in one here for one worker, else that of ``workers``
    spawned processes on ``threads`` torch threads each (0: torch's default). Results come in order.
    The workers inherit the stage's environment (its CPU code paths, stages/runtime.py)."""
    if workers <= 1:
        yield map
        return
    # spawn: a forked child would inherit torch's OpenMP pool in a broken state
    executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_threads, initargs=(threads, portable))
    try:
        yield executor.map
    finally:
        executor.shutdown(cancel_futures=True)


def rankme_at(measures: pd.DataFrame, steps) -> pd.DataFrame:
    """Raw and centred RankMe of the deepest layer whose states vary, at ``steps`` (NaN where the
    measures table has no such checkpoint): the reference the landscape measures are compared with."""
    layers = varying_layers(measures)
    out = pd.DataFrame({"step": list(steps)})
    for column in ("rankme", "rankme_centred"):
        if column in measures.columns and layers:
            out[column] = out["step"].map(layer_series(measures, column, "last", layers)).astype(float)
    return out


def plot_table(frame: pd.DataFrame, rankme: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long table for ``dvc plots`` (template ``.dvc/plots/landscape.json``, one line per measure):
    step, measure, value, and ``scaled`` = the value min-max scaled to [0, 1] over the run, so the
    timing of every measure's transition, of RankMe's dip (``rankme``, ``rankme_centred`` from
    ``rankme``, see :func:`rankme_at`) and of acquisition (``test_acc``) share one axis."""
    if rankme is not None:
        frame = frame.merge(rankme, on="step", how="left")
    parts = []
    for col in ("rankme", "rankme_centred", *plot_columns(), "test_acc"):
        if col not in frame:
            continue
        values = frame[col].astype(float)
        span = values.max() - values.min()
        scaled = (values - values.min()) / span if span > 0 else values * 0.0
        parts.append(pd.DataFrame({"step": frame["step"], "measure": col, "value": values, "scaled": scaled}))
    return pd.concat(parts, ignore_index=True)


@stage("task", "level", "model", "seed")
def main(args, params: Params) -> None:
    rid = run_id(args.task, args.level, args.model, args.seed)
    # a non-zero landscape.threads overrides it inside landscape()
    frame = landscape(args.task, args.level, args.model, args.seed, params.landscape, params.events,
                      portable=params.runtime.cpu_paths == "portable")
    rankme = rankme_at(read_measures(paths.measures_file(rid)), frame["step"])
    with output_set():  # both tables or neither
        write_csv(frame, paths.landscape_file(rid))
        write_csv(plot_table(frame, rankme), paths.landscape_plot_file(rid))
    print(paths.landscape_file(rid))


if __name__ == "__main__":
    main()
