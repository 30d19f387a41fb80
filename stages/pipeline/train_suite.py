"""Stage ``train_suite``: the offline stand-in for Pythia, a tiny GPT-NeoX suite in an HF cache layout.

For every model under ``pythia.profiles.local.train`` it trains a ``GPTNeoXForCausalLM``
(transformers) on a deterministic corpus from the evaluation sets' grammar and saves it, with its
word-level tokenizer, at the profile's Pythia-style revisions ``stepN`` into
``pythia.profiles.local.cache_dir`` (models--local--pythia-<model>/refs, snapshots, trees), which
``fetch_pythia`` then resolves through huggingface_hub exactly like downloaded checkpoints.
All hyper-parameters (AdamW betas and weight decay, warm-up, cosine floor ``min_lr_ratio``, gradient
clipping) come from ``pythia.profiles.local.train.<model>``. Training curves (mean training loss since
the previous revision, the last batch's loss, the learning rate) go through DVCLive to
``dvclive/pythia-suite/<model>/``, one DVCLive step per saved revision.
"""
from __future__ import annotations

if __name__ == "__main__":  # a stage process: its environment before numpy and torch load (stages/runtime.py)
    from stages.runtime import prepare
    prepare()

import json
import math
from pathlib import Path

from transformers.utils import logging as hf_logging

from stages.errors import PipelineError
from stages.io.atomic import atomic_path
from stages.params import Params, Pythia
from stages.pythia import local_hub, suite
from stages.pythia.settings import section
from stages.training.live import curve_log
from stages.training.loop import make_optimizer, optimizer_step, run_steps, set_lr
from stages.training.schedule import warmup_cosine_factor
from stages.pipeline import stage

PROFILE = "local"  # the suite trains the models of this profile, whichever profile is active
KEY = f"pythia.profiles.{PROFILE}"
LIVE_DIR = Path("dvclive/pythia-suite")

hf_logging.disable_progress_bar()  # one tqdm bar per stage, not one per saved or loaded file


def without_library_version(directory) -> None:
    """``save_pretrained`` writes the installed transformers version into ``config.json`` and
    ``generation_config.json``: it is left out (loading does not need it), so the suite's files, and
    their hashes in dvc.lock, do not change with a transformers release."""
    for name in ("config.json", "generation_config.json"):
        path = Path(directory) / name
        if path.is_file():
            config = json.loads(path.read_text())
            if config.pop("transformers_version", None) is not None:
                path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def train_model(model_name: str, pythia: Pythia, cache_dir: Path, progress: bool = True, log=None) -> dict:
    """Train one suite model (settings from the ``pythia`` section ``pythia``); ``log(step, values)``
    (:func:`stages.training.live.curve_log`), if given, gets the training curves at every saved revision."""
    cfg = pythia.suite_model(model_name, PROFILE)
    local = pythia.profiles[PROFILE]
    repo = local.repo_id(model_name)
    steps = cfg.steps
    save_at = dict(zip(local.steps(), local.revisions))
    if max(save_at) > steps:
        raise PipelineError(f"'{KEY}.revisions' goes to step {max(save_at)} beyond "
                            f"'{KEY}.train.{model_name}.steps' = {steps}")
    tokenizer = suite.build_tokenizer()
    model = suite.build_model(tokenizer, cfg.model_dump(), cfg.seed)
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas, decay_vectors=True)
    data = suite.batches(tokenizer, cfg.seed, cfg.batch_size, cfg.seq_len, cfg.mixture)

    def publish(revision):
        def save(directory):
            model.save_pretrained(directory)
            tokenizer.save_pretrained(directory)
            without_library_version(directory)
        return local_hub.publish(cache_dir, repo, revision, save)

    commits = {}
    losses: list[float] = []  # batch losses since the last saved revision
    last_lr = cfg.lr * warmup_cosine_factor(0, steps, cfg.warmup, cfg.min_lr_ratio)  # at step 0: the first update's
    loss = None

    def checkpoint(step: int) -> None:
        nonlocal losses
        model.eval()
        commits[save_at[step]] = publish(save_at[step])
        model.train()
        if log is not None:
            log(step, {"train/loss": math.fsum(losses) / len(losses) if losses else math.nan,
                       "train/batch_loss": losses[-1] if losses else math.nan, "lr": last_lr})
        losses = []

    def update(step: int) -> None:
        nonlocal last_lr, loss
        last_lr = cfg.lr * warmup_cosine_factor(step, steps, cfg.warmup, cfg.min_lr_ratio)
        set_lr(opt, last_lr)
        batch = next(data)
        loss = optimizer_step(model, opt, model(input_ids=batch, labels=batch).loss, cfg.grad_clip)
        losses.append(float(loss.detach()))

    model.train()
    run_steps(steps, save_at, update, checkpoint, progress=progress, desc=f"train_suite {model_name}")
    return {"repo_id": repo, "commits": commits, "final_loss": float(loss.detach())}


@stage()
def main(args, params: Params) -> None:
    pythia = section(params, f"{KEY}.cache_dir")
    local = pythia.profiles.get(PROFILE)
    if local is None:
        raise PipelineError(f"missing key '{KEY}.cache_dir' (no '{PROFILE}' under 'pythia.profiles')")
    if local.cache_dir is None:
        raise PipelineError(f"'{KEY}.cache_dir' must be the path the suite is saved to, got None")
    if not local.train:
        raise PipelineError(f"'{KEY}.train' must map model names to training settings")
    cache_dir = local.cache_dir
    with atomic_path(cache_dir, directory=True) as tmp, atomic_path(LIVE_DIR, directory=True) as live_tmp:
        for name in local.train:
            with curve_log(live_tmp / name) as log:
                info = train_model(name, pythia, tmp, log=log)
            print(f"{info['repo_id']}: {len(info['commits'])} revisions, final loss {info['final_loss']:.3f}")
    print(cache_dir)


if __name__ == "__main__":
    main()
