"""Stage ``landscape``: gradient effective rank, gradient covariance rank, top Hessian eigenvalues and
the local learning coefficient (LLC) at selected checkpoints of one run.

Reads ``data/checkpoints/<run>/``, ``data/datasets/<task>-<level>/train.parquet`` and
``data/history/<run>.csv``; writes ``data/landscape/<run>.csv`` (one row per measured checkpoint:
run, step, test_acc, n_params, grad_erank, gradcov_rank, hessian_top1..k, llc, llc_std, init_loss)
and the plot table ``plots/landscape/<run>.csv``. No wall-clock time goes into the outputs, so a
rerun reproduces them byte for byte; ``benchmarks/measure_cost.py`` measures the cost.
All costs are set in ``params.yaml: landscape`` (see README); every sample is seeded.
"""
from __future__ import annotations


import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from stages import paths
from stages.cli import stage_arguments
from stages.config import choose, fraction, get, load_params, positive_float, positive_int, run_id
from stages.errors import PipelineError, main_guard
from stages.io.checkpoints import load_model, read_manifest
from stages.io.datasets import load_split
from stages.io.history import accuracy_by_step
from stages.io.tables import write_csv
from stages.measures.grad_cov import gradient_covariance_rank
from stages.measures.grad_rank import gradient_effective_rank
from stages.measures.hessian import hessian_top_eigenvalues
from stages.measures.llc import estimate_llc
from stages.measures.per_example import per_example_gradients
from stages.runtime import set_threads
from stages.training.device import resolve_device
from stages.training.loop import answer_loss, sequences

MEASURES = ("grad_erank", "gradcov_rank", "hessian", "llc")
PLOT_COLUMNS = ("grad_erank", "gradcov_rank", "hessian_top1", "llc")


def landscape_params(params: dict) -> dict:
    """Validated ``landscape`` section; every error names its key."""
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
        "seed": positive_int(get(params, f"{k}.seed"), f"{k}.seed", allow_zero=True),
        "grad_samples": positive_int(get(params, f"{k}.grad.samples"), f"{k}.grad.samples"),
        "grad_chunk": positive_int(get(params, f"{k}.grad.chunk"), f"{k}.grad.chunk"),
        "sketch_dim": positive_int(get(params, f"{k}.grad.sketch_dim"), f"{k}.grad.sketch_dim", allow_zero=True),
        "cov_rtol": fraction(get(params, f"{k}.grad.cov_rtol"), f"{k}.grad.cov_rtol"),
        "hessian_samples": positive_int(get(params, f"{k}.hessian.samples"), f"{k}.hessian.samples"),
        "hessian_k": positive_int(get(params, f"{k}.hessian.k"), f"{k}.hessian.k"),
        "hessian_tol": positive_float(get(params, f"{k}.hessian.tol"), f"{k}.hessian.tol", allow_zero=True),
        "hessian_maxiter": positive_int(get(params, f"{k}.hessian.maxiter"), f"{k}.hessian.maxiter"),
        "llc_samples": positive_int(get(params, f"{k}.llc.samples"), f"{k}.llc.samples"),
        "llc_batch": positive_int(get(params, f"{k}.llc.batch_size"), f"{k}.llc.batch_size"),
        "llc_chains": positive_int(get(params, f"{k}.llc.chains"), f"{k}.llc.chains"),
        "llc_draws": positive_int(get(params, f"{k}.llc.draws"), f"{k}.llc.draws"),
        "llc_burn_in": positive_int(get(params, f"{k}.llc.burn_in"), f"{k}.llc.burn_in", allow_zero=True),
        "llc_lr": positive_float(get(params, f"{k}.llc.lr"), f"{k}.llc.lr"),
        "llc_gamma": positive_float(get(params, f"{k}.llc.gamma"), f"{k}.llc.gamma", allow_zero=True),
        "llc_nbeta": None if nbeta == "auto" else positive_float(nbeta, f"{k}.llc.nbeta"),
    }
    if p["llc_draws"] <= p["llc_burn_in"]:
        raise PipelineError(f"'{k}.llc.draws' ({p['llc_draws']}) must exceed '{k}.llc.burn_in' ({p['llc_burn_in']})")
    if "gradcov_rank" in p["measures"] and p["grad_samples"] < 2:
        raise PipelineError(f"'{k}.grad.samples' must be at least 2 for gradcov_rank")
    return p


def select_steps(steps: list[int], max_checkpoints: int) -> list[int]:
    """At most ``max_checkpoints`` of ``steps``, evenly spaced in checkpoint index (first and last
    kept, so the early log-spaced checkpoints stay denser); 0 keeps all."""
    steps = sorted(steps)
    if not max_checkpoints or max_checkpoints >= len(steps):
        return steps
    idx = np.unique(np.round(np.linspace(0, len(steps) - 1, max_checkpoints)).astype(int))
    return [steps[i] for i in idx]


def measure_checkpoint(model, data: dict, prompt_len: int, p: dict) -> dict:
    """All requested measures at one checkpoint; ``data`` holds the seeded sample tensors."""
    row: dict = {}
    loss = lambda m, rows: answer_loss(m, rows, prompt_len)  # noqa: E731
    if {"grad_erank", "gradcov_rank"} & set(p["measures"]):
        grads = per_example_gradients(model, data["grad"], prompt_len, chunk=p["grad_chunk"],
                                      sketch_dim=p["sketch_dim"], seed=p["seed"])
        if "grad_erank" in p["measures"]:
            row["grad_erank"] = gradient_effective_rank(grads)
        if "gradcov_rank" in p["measures"]:
            row["gradcov_rank"] = gradient_covariance_rank(grads, p["cov_rtol"])
    if "hessian" in p["measures"]:
        vals = hessian_top_eigenvalues(model, lambda m: loss(m, data["hessian"]), k=p["hessian_k"],
                                       tol=p["hessian_tol"], maxiter=p["hessian_maxiter"], seed=p["seed"])
        row.update({f"hessian_top{i + 1}": float(v) for i, v in enumerate(vals)})
    if "llc" in p["measures"]:
        res = estimate_llc(model, loss, data["llc"], lr=p["llc_lr"], gamma=p["llc_gamma"], nbeta=p["llc_nbeta"],
                           chains=p["llc_chains"], draws=p["llc_draws"], burn_in=p["llc_burn_in"],
                           batch_size=p["llc_batch"], seed=p["seed"])
        row.update(llc=res.llc, llc_std=res.llc_std, init_loss=res.init_loss)
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

    rows = []
    bar = tqdm(select_steps(manifest["steps"], p["max_checkpoints"]), desc=f"landscape {rid}",
               disable=not progress, mininterval=2)
    for step in bar:
        model = load_model(ckpt_dir, step, manifest, device)
        row = {"run": rid, "step": int(step), "test_acc": acc.get(int(step), np.nan),
               "n_params": manifest.get("n_params")}
        row.update(measure_checkpoint(model, data, meta["prompt_len"], p))
        rows.append(row)
        bar.set_postfix({k: f"{row[k]:.3g}" for k in PLOT_COLUMNS if k in row})
    return pd.DataFrame(rows)


def plot_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Long table for ``dvc plots`` (template ``.dvc/plots/landscape.json``, one line per measure):
    step, measure, value, and ``scaled`` = the value min-max scaled to [0, 1] over the run, so the
    timing of every measure's transition and of acquisition (``test_acc``) share one axis."""
    parts = []
    for col in (*PLOT_COLUMNS, "test_acc"):
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
    write_csv(frame, paths.landscape_file(rid))
    write_csv(plot_table(frame), paths.landscape_plot_file(rid))
    print(paths.landscape_file(rid))


if __name__ == "__main__":
    main()
