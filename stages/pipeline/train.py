"""Stage ``train``: one (task, level, model) run -> dense checkpoints and an accuracy history.

Outputs ``data/checkpoints/<run>/`` (``step_XXXXXXX.safetensors`` + ``manifest.json``),
``data/history/<run>.csv`` (step, losses, exact-match train/test accuracy) and the same curves with
the learning rate through DVCLive in ``dvclive/<run>/`` (stages/training/live.py). Hyper-parameters are
``train.defaults`` overlaid with ``train.tasks.<task>.all`` and then ``train.tasks.<task>.<level>``.
A crashed run keeps its partial directory and resumes from its last checkpoint.
"""
from __future__ import annotations

if __name__ == "__main__":  # a stage process: its environment before numpy and torch load (stages/runtime.py)
    from stages.runtime import prepare
    prepare()

import os
import shutil
import time

import pandas as pd
import torch

from stages import paths
from stages.config import choose, run_id
from stages.errors import PipelineError
from stages.io.checkpoints import step_digests, write_manifest
from stages.io.datasets import load_split
from stages.io.tables import write_csv
from stages.models import GPT, PRESETS, model_config
from stages.params import Params, TrainSettings
from stages.runtime import paths_record
from stages.tasks import LEVELS, get_task
from stages.training.device import resolve_device
from stages.training.live import curve_log, history_logger
from stages.training.loop import sequences, train
from stages.training.memory import check_fits, train_bytes
from stages.training.precision import resolve_precision
from stages.training.schedule import checkpoint_steps
from stages.pipeline import stage


def resolve_train_params(params: Params, task: str, level: str) -> TrainSettings:
    """Merged hyper-parameters for one run: ``train.defaults``, then the task-wide
    ``train.tasks.<task>.all``, then the level's ``train.tasks.<task>.<level>`` (:meth:`Train.resolve`;
    the schema has checked every block). The two override blocks are distinct keys so that dvc.yaml
    can track a run's own level without its siblings."""
    return params.train.resolve(task, level)


def run(task: str, level: str, model_name: str, seed: int, params: Params, progress: bool = True) -> dict:
    """Train run ``<task>-<level>-<model>-s<seed>``: ``seed`` fixes the initialisation and the batch order."""
    get_task(task)
    if level not in LEVELS:
        raise PipelineError(f"unknown level '{level}' (choose from: {', '.join(LEVELS)})")
    choose(model_name, PRESETS, "model")
    settings = resolve_train_params(params, task, level)
    hp = settings.record()  # the manifest's and the resume fingerprint's record of the settings
    rid = run_id(task, level, model_name, seed)
    steps = checkpoint_steps(settings.steps, settings.n_checkpoints, settings.log_fraction, settings.log_until,
                             key=f"train (run {rid})")
    device = resolve_device(settings.device, "train.defaults.device")

    data_dir = paths.dataset_dir(task, level)
    train_p, train_a, meta = load_split(data_dir, "train")
    test_p, test_a, _ = load_split(data_dir, "test")
    for name in ("batch_size", "eval_train_max"):  # sizes that must fit the data, before any compute
        value = getattr(settings, name)
        if value > len(train_p):
            raise PipelineError(f"'{params.train.key_of(task, level, name)}' = {value} exceeds the {len(train_p)} "
                                f"train examples of {data_dir / 'train.parquet'} (run {rid}): at most {len(train_p)}")
    prompt_len = meta["prompt_len"]
    cfg = model_config(model_name, meta["vocab_size"], prompt_len + meta["answer_len"] - 1, settings.dropout)
    torch.manual_seed(seed)
    # initialised on the CPU, as before; moved to the device once it is known to fit
    model = GPT(cfg, portable_ops=params.runtime.cpu_paths == "portable")
    precision = resolve_precision(settings.precision, device, model.num_params(),
                                  "train.defaults.precision")
    batch = min(settings.batch_size, len(train_p))
    check_fits(model_name, train_bytes(model.num_params(), cfg.n_layer, cfg.d_model, cfg.n_head, cfg.block_size,
                                       batch, meta["answer_len"], meta["vocab_size"], precision),
               device, batch, cfg.block_size, what=f"training run {rid}")
    model = model.to(device)

    out = paths.checkpoint_dir(rid)
    partial = out.with_name(f".{rid}.partial")
    if partial.exists():
        manifest_path = partial / "run-config.json"
        same = manifest_path.is_file() and manifest_path.read_text() == _fingerprint(hp, cfg, meta, seed)
        if not same:
            shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    (partial / "run-config.json").write_text(_fingerprint(hp, cfg, meta, seed))

    with curve_log(paths.dvclive_dir(rid)) as log:  # loss, accuracy and lr per checkpoint (DVCLive)
        history = train(model, settings, sequences(train_p, train_a, device), sequences(test_p, test_a, device),
                        prompt_len, partial, seed=seed, checkpoints=steps, precision=precision, progress=progress,
                        on_checkpoint=history_logger(log))
    manifest = {"run": rid, "task": task, "level": level, "model_name": model_name, "seed": seed, "model": cfg.to_dict(),
                "n_params": model.num_params(), "steps": steps, "train": hp, "device": str(device),
                "precision": precision, "cpu_paths": paths_record(params),
                "dataset": meta, "torch": torch.__version__, "sha256": step_digests(partial, steps)}
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


@stage("task", "level", "model", "seed")
def main(args, params: Params) -> None:
    clock = time.perf_counter()
    manifest = run(args.task, args.level, args.model, args.seed, params)
    print(f"{manifest['run']}: {manifest['n_params']} params, {len(manifest['steps'])} checkpoints, "
          f"{time.perf_counter() - clock:.1f}s on {manifest['device']}")


if __name__ == "__main__":
    main()
