"""Stage ``landscape``: gradient effective rank, gradient covariance rank, top Hessian eigenvalues and
the local learning coefficient (LLC) at selected checkpoints of one run.

Reads ``data/checkpoints/<run>/``, ``data/datasets/<task>-<level>/train.parquet`` and
``data/history/<run>.csv``; writes ``data/landscape/<run>.csv`` and the plot table
``plots/landscape/<run>.csv``. No wall-clock time goes into the outputs, so a rerun reproduces
them byte for byte; ``benchmarks/measure_cost.py`` measures the cost. All costs are set in
``params.yaml: landscape``; every sample is seeded.

**Which checkpoints** (:func:`choose_steps`). Acquisition is read from the run's history with the
events rule (:func:`stages.analysis.events.acquisition`, ``events.acquisition_threshold`` and
``events.acquisition_window``): the first checkpoint starting ``window`` consecutive checkpoints at
or above the threshold. The landscape is measured on every checkpoint from step 0 through
acquisition and ``landscape.after_acquisition`` checkpoints past it; a run without acquisition
(absent, or undetermined at the end of the run) uses all its checkpoints. When that window holds
more than ``landscape.max_checkpoints`` checkpoints (0 = no cap) they are thinned evenly in
checkpoint index, first and last kept, so the early log-spaced checkpoints stay denser.

**Columns** (one row per measured checkpoint):

* ``run, step, test_acc, n_params``;
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

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from stages import paths
from stages.analysis.events import acquisition
from stages.analysis.runs import layer_series, varying_layers
from stages.cli import stage_arguments
from stages.config import choose, fraction, get, load_params, positive_float, positive_int, run_id
from stages.errors import PipelineError, main_guard
from stages.io.checkpoints import load_model, read_manifest
from stages.io.datasets import load_split
from stages.io.history import accuracy_by_step
from stages.io.measures import read_measures
from stages.io.atomic import output_set
from stages.io.tables import write_csv
from stages.measures.grad_cov import covariance_rank_cap, gradient_covariance_rank
from stages.measures.grad_rank import effective_rank_cap, gradient_effective_rank, gram_matrix
from stages.measures.hessian import hessian_top_eigenvalues_repeated
from stages.measures.llc import estimate_llc
from stages.measures.per_example import per_example_gradients
from stages.runtime import set_threads
from stages.training.device import resolve_device
from stages.training.loop import answer_loss, sequences

MEASURES = ("grad_erank", "gradcov_rank", "hessian", "llc")
PLOT_COLUMNS = ("grad_erank", "gradcov_rank", "hessian_top1", "llc")
MIN_RECORDED_DRAWS = 8  # draws after burn-in the stationarity check needs (two halves of >= 4)


def landscape_params(params: dict) -> dict:
    """Validated ``landscape`` section (plus the ``events`` acquisition rule it reads); every
    error names its key."""
    k = "landscape"
    measures = get(params, f"{k}.measures")
    if not isinstance(measures, list) or not measures:
        raise PipelineError(f"'{k}.measures' must be a non-empty list (choose from: {', '.join(MEASURES)})")
    for m in measures:
        choose(m, MEASURES, f"{k}.measures entry")
    nbeta = get(params, f"{k}.llc.nbeta")
    p = {
        "measures": list(measures),
        "device": resolve_device(get(params, f"{k}.device"), f"{k}.device"),
        "threads": positive_int(get(params, f"{k}.threads"), f"{k}.threads", allow_zero=True),
        "max_checkpoints": positive_int(get(params, f"{k}.max_checkpoints"), f"{k}.max_checkpoints", allow_zero=True),
        "after_acquisition": positive_int(get(params, f"{k}.after_acquisition"), f"{k}.after_acquisition",
                                          allow_zero=True),
        "acquisition_threshold": fraction(get(params, "events.acquisition_threshold"), "events.acquisition_threshold"),
        "acquisition_window": positive_int(get(params, "events.acquisition_window"), "events.acquisition_window"),
        "seed": positive_int(get(params, f"{k}.seed"), f"{k}.seed", allow_zero=True),
        "grad_samples": positive_int(get(params, f"{k}.grad.samples"), f"{k}.grad.samples"),
        "grad_chunk": positive_int(get(params, f"{k}.grad.chunk"), f"{k}.grad.chunk"),
        "sketch_dim": positive_int(get(params, f"{k}.grad.sketch_dim"), f"{k}.grad.sketch_dim", allow_zero=True),
        "cov_rtol": fraction(get(params, f"{k}.grad.cov_rtol"), f"{k}.grad.cov_rtol"),
        "hessian_samples": positive_int(get(params, f"{k}.hessian.samples"), f"{k}.hessian.samples"),
        "hessian_k": positive_int(get(params, f"{k}.hessian.k"), f"{k}.hessian.k"),
        "hessian_tol": positive_float(get(params, f"{k}.hessian.tol"), f"{k}.hessian.tol", allow_zero=True),
        "hessian_maxiter": positive_int(get(params, f"{k}.hessian.maxiter"), f"{k}.hessian.maxiter"),
        "hessian_repeats": positive_int(get(params, f"{k}.hessian.repeats"), f"{k}.hessian.repeats"),
        "llc_samples": positive_int(get(params, f"{k}.llc.samples"), f"{k}.llc.samples"),
        "llc_batch": positive_int(get(params, f"{k}.llc.batch_size"), f"{k}.llc.batch_size"),
        "llc_chains": positive_int(get(params, f"{k}.llc.chains"), f"{k}.llc.chains"),
        "llc_draws": positive_int(get(params, f"{k}.llc.draws"), f"{k}.llc.draws"),
        "llc_burn_in": positive_int(get(params, f"{k}.llc.burn_in"), f"{k}.llc.burn_in", allow_zero=True),
        "llc_lr": positive_float(get(params, f"{k}.llc.lr"), f"{k}.llc.lr"),
        "llc_gamma": positive_float(get(params, f"{k}.llc.gamma"), f"{k}.llc.gamma", allow_zero=True),
        "llc_nbeta": None if nbeta == "auto" else positive_float(nbeta, f"{k}.llc.nbeta"),
        "llc_max_drift": positive_float(get(params, f"{k}.llc.max_drift"), f"{k}.llc.max_drift"),
    }
    if p["llc_draws"] - p["llc_burn_in"] < MIN_RECORDED_DRAWS:
        raise PipelineError(f"'{k}.llc.draws' ({p['llc_draws']}) must exceed '{k}.llc.burn_in' ({p['llc_burn_in']}) "
                            f"by at least {MIN_RECORDED_DRAWS} (the stationarity check compares two halves of the "
                            "recorded draws)")
    if "gradcov_rank" in p["measures"] and p["grad_samples"] < 2:
        raise PipelineError(f"'{k}.grad.samples' must be at least 2 for gradcov_rank")
    return p


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


def measure_checkpoint(model, data: dict, prompt_len: int, p: dict) -> dict:
    """All requested measures at one checkpoint; ``data`` holds the seeded sample tensors."""
    row: dict = {}
    loss = lambda m, rows: answer_loss(m, rows, prompt_len)  # noqa: E731
    if {"grad_erank", "gradcov_rank"} & set(p["measures"]):
        grads = per_example_gradients(model, data["grad"], prompt_len, chunk=p["grad_chunk"],
                                      sketch_dim=p["sketch_dim"], seed=p["seed"])
        n = grads.shape[0]
        if "grad_erank" in p["measures"]:
            row["grad_erank"] = gradient_effective_rank(gram=gram_matrix(grads))
            row["grad_erank_cap"] = effective_rank_cap(n, grads.shape[1])
        if "gradcov_rank" in p["measures"]:
            rank = gradient_covariance_rank(rtol=p["cov_rtol"], centred_gram=gram_matrix(grads, centre=True))
            cap = covariance_rank_cap(n)
            row.update(gradcov_rank=rank, gradcov_cap=cap, gradcov_saturated=bool(rank >= cap))
    if "hessian" in p["measures"]:
        vals, spread = hessian_top_eigenvalues_repeated(
            model, lambda m: loss(m, data["hessian"]), k=p["hessian_k"], tol=p["hessian_tol"],
            maxiter=p["hessian_maxiter"], seed=p["seed"], repeats=p["hessian_repeats"])
        row.update({f"hessian_top{i + 1}": float(v) for i, v in enumerate(vals)})
        row["hessian_top1_spread"] = spread
        floor = p["hessian_tol"] * abs(float(vals[0]))
        row["hessian_top1_noise"] = float(np.nanmax([spread, floor])) if np.isfinite(vals[0]) else float("nan")
    if "llc" in p["measures"]:
        res = estimate_llc(model, loss, data["llc"], lr=p["llc_lr"], gamma=p["llc_gamma"], nbeta=p["llc_nbeta"],
                           chains=p["llc_chains"], draws=p["llc_draws"], burn_in=p["llc_burn_in"],
                           batch_size=p["llc_batch"], seed=p["seed"], max_drift=p["llc_max_drift"])
        row.update(llc=res.llc, llc_std=res.llc_std, llc_chain_min=res.chain_min, llc_chain_max=res.chain_max,
                   **{f"llc_chain{c}": v for c, v in enumerate(res.per_chain)},
                   llc_drift=res.drift, llc_stationary=res.stationary, init_loss=res.init_loss)
    return row


def landscape(task: str, level: str, model_name: str, seed: int, params: dict, progress: bool = True) -> pd.DataFrame:
    rid = run_id(task, level, model_name, seed)
    p = landscape_params(params)
    if p["threads"]:
        torch.set_num_threads(p["threads"])
    device = p["device"]
    ckpt_dir = paths.checkpoint_dir(rid)
    manifest = read_manifest(ckpt_dir)
    prompt, answer, meta = load_split(paths.dataset_dir(task, level), "train")
    order = np.random.default_rng(p["seed"]).permutation(len(prompt))
    seq = sequences(prompt[order], answer[order], device)
    if p["hessian_k"] >= manifest.get("n_params", np.inf):
        raise PipelineError(f"'landscape.hessian.k' ({p['hessian_k']}) must be below the model's parameter count")
    data = {"grad": seq[:p["grad_samples"]], "hessian": seq[:p["hessian_samples"]], "llc": seq[:p["llc_samples"]]}
    acc = accuracy_by_step(rid)
    steps, _acq = choose_steps(manifest["steps"], acc, p["max_checkpoints"], p["after_acquisition"],
                               p["acquisition_threshold"], p["acquisition_window"])

    rows = []
    bar = tqdm(steps, desc=f"landscape {rid}", disable=not progress, mininterval=2)
    for step in bar:
        model = load_model(ckpt_dir, step, manifest, device)
        row = {"run": rid, "step": int(step), "test_acc": acc.get(int(step), np.nan),
               "n_params": manifest.get("n_params")}
        row.update(measure_checkpoint(model, data, meta["prompt_len"], p))
        rows.append(row)
        bar.set_postfix({k: f"{row[k]:.3g}" for k in PLOT_COLUMNS if k in row})
    return pd.DataFrame(rows)


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
    for col in ("rankme", "rankme_centred", *PLOT_COLUMNS, "test_acc"):
        if col not in frame:
            continue
        values = frame[col].astype(float)
        span = values.max() - values.min()
        scaled = (values - values.min()) / span if span > 0 else values * 0.0
        parts.append(pd.DataFrame({"step": frame["step"], "measure": col, "value": values, "scaled": scaled}))
    return pd.concat(parts, ignore_index=True)


@main_guard
def main(argv=None) -> None:
    args = stage_arguments(__doc__, argv, "task", "level", "model", "seed")
    rid = run_id(args.task, args.level, args.model, args.seed)
    params = load_params(args.params)
    set_threads(params)  # a non-zero landscape.threads overrides it inside landscape()
    frame = landscape(args.task, args.level, args.model, args.seed, params)
    rankme = rankme_at(read_measures(paths.measures_file(rid)), frame["step"])
    with output_set():  # both tables or neither
        write_csv(frame, paths.landscape_file(rid))
        write_csv(plot_table(frame, rankme), paths.landscape_plot_file(rid))
    print(paths.landscape_file(rid))


if __name__ == "__main__":
    main()
