"""Stage ``train``: one (task, level, model) run -> dense checkpoints and an accuracy history.

Outputs ``data/checkpoints/<run>/`` (``step_XXXXXXX.safetensors`` + ``manifest.json``),
``data/history/<run>.csv`` (step, losses, exact-match train/test accuracy) and the same curves with
the learning rate through DVCLive in ``dvclive/<run>/`` (stages/training/live.py). Hyper-parameters are
``train.defaults`` overlaid with ``train.tasks.<task>.all`` and then ``train.tasks.<task>.<level>``.
A crashed run keeps its partial directory and resumes from its last checkpoint.
"""
from __future__ import annotations

import os
import shutil
import time

import pandas as pd
import torch

from stages import paths
from stages.cli import stage_arguments
from stages.config import (choose, fraction, get, grid_settings, load_params, positive_float, positive_int,
                           run_id)
from stages.errors import PipelineError, main_guard
from stages.io.checkpoints import write_manifest
from stages.io.datasets import load_split
from stages.io.tables import write_csv
from stages.models import GPT, PRESETS, model_config
from stages.runtime import set_threads
from stages.tasks import LEVELS, get_task
from stages.training.device import resolve_device
from stages.training.live import curve_log, history_logger
from stages.training.loop import TrainConfig, sequences, train
from stages.training.precision import PRECISIONS, resolve_precision
from stages.training.schedule import LR_SCHEDULES, checkpoint_steps

TRAIN_KEYS = {"steps", "lr", "weight_decay", "batch_size", "warmup", "schedule", "min_lr_ratio", "betas",
              "grad_clip", "device", "n_checkpoints", "log_fraction", "log_until", "eval_batch_size",
              "eval_train_max", "dropout", "precision"}


def resolve_train_params(params: dict, task: str, level: str) -> dict:
    """Merged and validated hyper-parameters for one run: ``train.defaults``, then the task-wide
    ``train.tasks.<task>.all``, then the level's ``train.tasks.<task>.<level>``. The two override
    blocks are distinct keys so that dvc.yaml can track a run's own level without its siblings."""
    defaults = get(params, "train.defaults")
    if not isinstance(defaults, dict):
        raise PipelineError(f"'train.defaults' must be a mapping of train settings, got {defaults!r}")
    merged = dict(defaults)
    base = f"train.tasks.{task}"
    overrides = get(params, base, {})
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise PipelineError(f"'{base}' must be a mapping with keys all, {', '.join(LEVELS)}, got {overrides!r}")
    for key in overrides:
        if key in TRAIN_KEYS:
            raise PipelineError(f"'{base}.{key}': task-wide settings go under '{base}.all', "
                                f"per-level ones under '{base}.<level>'")
        if key != "all" and key not in LEVELS:
            raise PipelineError(f"unknown key '{key}' under '{base}' (choose from: all, {', '.join(LEVELS)})")
    for part in ("all", level):
        block = overrides.get(part)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise PipelineError(f"'{base}.{part}' must be a mapping of train settings, got {block!r}")
        for key in block:
            if key not in TRAIN_KEYS:
                raise PipelineError(f"unknown key '{key}' in {base}.{part} (known: {', '.join(sorted(TRAIN_KEYS))})")
        merged.update(block)
    for key in merged:
        if key not in TRAIN_KEYS:
            raise PipelineError(f"unknown key '{key}' in train.defaults (known: {', '.join(sorted(TRAIN_KEYS))})")
    missing = sorted(TRAIN_KEYS - set(merged) - {"dropout", "min_lr_ratio", "eval_train_max", "precision"})
    if missing:
        raise PipelineError(f"missing key 'train.defaults.{missing[0]}'")
    k = f"train (run {task}-{level})"
    positive_int(merged["steps"], f"{k}.steps")
    positive_int(merged["batch_size"], f"{k}.batch_size")
    positive_int(merged["eval_batch_size"], f"{k}.eval_batch_size")
    positive_int(merged["warmup"], f"{k}.warmup", allow_zero=True)
    positive_float(merged["lr"], f"{k}.lr")
    positive_float(merged["weight_decay"], f"{k}.weight_decay", allow_zero=True)
    positive_float(merged["grad_clip"], f"{k}.grad_clip", allow_zero=True)
    fraction(merged.get("min_lr_ratio", 0.0), f"{k}.min_lr_ratio")
    fraction(merged.get("dropout", 0.0), f"{k}.dropout")
    choose(merged["schedule"], LR_SCHEDULES, f"{k}.schedule")
    choose(merged.get("precision", "auto"), PRECISIONS, f"{k}.precision")
    if "eval_train_max" in merged:  # a cap: more than the train split scores the whole split
        positive_int(merged["eval_train_max"], f"{k}.eval_train_max")
    betas = merged["betas"]
    if (not isinstance(betas, (list, tuple)) or len(betas) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)):
        raise PipelineError(f"'{k}.betas' must be a list of two numbers in [0, 1), got {betas!r}")
    return merged


def run(task: str, level: str, model_name: str, seed: int, params: dict, progress: bool = True) -> dict:
    """Train run ``<task>-<level>-<model>-s<seed>``: ``seed`` fixes the initialisation and the batch order."""
    get_task(task)
    if level not in LEVELS:
        raise PipelineError(f"unknown level '{level}' (choose from: {', '.join(LEVELS)})")
    choose(model_name, PRESETS, "model")
    grid_settings(params)
    hp = resolve_train_params(params, task, level)
    rid = run_id(task, level, model_name, seed)
    steps = checkpoint_steps(hp["steps"], hp["n_checkpoints"], hp["log_fraction"], hp["log_until"],
                             key=f"train (run {rid})")
    device = resolve_device(hp["device"], "train.defaults.device")

    data_dir = paths.dataset_dir(task, level)
    train_p, train_a, meta = load_split(data_dir, "train")
    test_p, test_a, _ = load_split(data_dir, "test")
    prompt_len = meta["prompt_len"]
    cfg = model_config(model_name, meta["vocab_size"], prompt_len + meta["answer_len"] - 1, hp.get("dropout", 0.0))
    torch.manual_seed(seed)
    model = GPT(cfg).to(device)
    precision = resolve_precision(hp.get("precision", "auto"), device, model.num_params(),
                                  "train.defaults.precision")

    out = paths.checkpoint_dir(rid)
    partial = out.with_name(f".{rid}.partial")
    if partial.exists():
        manifest_path = partial / "run-config.json"
        same = manifest_path.is_file() and manifest_path.read_text() == _fingerprint(hp, cfg, meta, seed)
        if not same:
            shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    (partial / "run-config.json").write_text(_fingerprint(hp, cfg, meta, seed))

    tcfg = TrainConfig(steps=hp["steps"], lr=float(hp["lr"]), weight_decay=float(hp["weight_decay"]),
                       batch_size=hp["batch_size"], warmup=hp["warmup"], schedule=hp["schedule"],
                       min_lr_ratio=float(hp.get("min_lr_ratio", 0.0)), betas=tuple(hp["betas"]),
                       grad_clip=float(hp["grad_clip"]), seed=seed, eval_batch_size=hp["eval_batch_size"],
                       checkpoints=steps, precision=precision)
    with curve_log(paths.dvclive_dir(rid)) as log:  # loss, accuracy and lr per checkpoint (DVCLive)
        history = train(model, tcfg, sequences(train_p, train_a, device), sequences(test_p, test_a, device),
                        prompt_len, partial, progress=progress, eval_train_max=hp.get("eval_train_max", 4096),
                        on_checkpoint=history_logger(log))
    manifest = {"run": rid, "task": task, "level": level, "model_name": model_name, "seed": seed, "model": cfg.to_dict(),
                "n_params": model.num_params(), "steps": steps, "train": hp, "device": str(device),
                "precision": precision,
                "dataset": meta, "torch": torch.__version__}
    (partial / "run-config.json").unlink()
    write_manifest(partial, manifest)
    frame = pd.DataFrame(history)
    frame.insert(0, "run", rid)
    write_csv(frame, paths.history_file(rid))
    if out.exists():
        shutil.rmtree(out)
    os.replace(partial, out)
    return manifest


def _fingerprint(hp: dict, cfg, meta: dict, seed: int) -> str:
    import json

    return json.dumps({"train": hp, "seed": seed, "model": cfg.to_dict(), "dataset": meta}, sort_keys=True)


@main_guard
def main(argv=None) -> None:
    args = stage_arguments(__doc__, argv, "task", "level", "model", "seed")
    params = load_params(args.params)
    set_threads(params)
    clock = time.perf_counter()
    manifest = run(args.task, args.level, args.model, args.seed, params)
    print(f"{manifest['run']}: {manifest['n_params']} params, {len(manifest['steps'])} checkpoints, "
          f"{time.perf_counter() - clock:.1f}s on {manifest['device']}")


if __name__ == "__main__":
    main()
