"""The training loop of the small models and of the offline Pythia suite (stages/pipeline/train_suite.py).

:func:`run_steps` is the one loop: updates ``0 .. steps-1``, a checkpoint callback before each listed
step (and after the last update). :func:`train` drives it for the small GPTs: AdamW, exact-match
evaluation at every checkpoint, and crash-safe resume (stages/training/resume.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from stages.io.checkpoints import save_state, step_file
from stages.models.gpt import GPT
from stages.models.vendor_neutral_ops import cross_entropy as portable_cross_entropy
from stages.params import TrainSettings
from stages.training.precision import autocast
from stages.training.resume import clear_resume, load_resume, remove_leftovers, save_resume
from stages.training.schedule import lr_at


def sequences(prompt: np.ndarray, answer: np.ndarray, device) -> torch.Tensor:
    return torch.as_tensor(np.concatenate([prompt, answer], axis=1), dtype=torch.long, device=device)


def answer_logits(model: GPT, seq: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Logits predicting each answer token: positions ``prompt_len-1 .. end-1`` (the last block
    and the head compute those positions only; see :meth:`GPT.forward`)."""
    return model(seq[:, :-1], start=prompt_len - 1)


def answer_loss(model: GPT, seq: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens; a portable model's (``model.portable_ops``) takes its
    second derivative off MKL's vector math (the same bits otherwise)."""
    logits = answer_logits(model, seq, prompt_len)
    loss = portable_cross_entropy if getattr(model, "portable_ops", False) else F.cross_entropy
    return loss(logits.reshape(-1, logits.shape[-1]), seq[:, prompt_len:].reshape(-1))


@torch.no_grad()
def evaluate(model: GPT, seq: torch.Tensor, prompt_len: int, batch_size: int,
             precision: str = "fp32") -> tuple[float, float]:
    """(mean answer-token loss, exact-match accuracy); teacher-forced argmax over the answer
    equals greedy decoding whenever the whole answer is right, so this is exact match."""
    was_training = model.training
    model.eval()
    total_loss, correct = 0.0, 0
    for start in range(0, len(seq), batch_size):
        chunk = seq[start:start + batch_size]
        with autocast(seq.device, precision):
            logits = answer_logits(model, chunk, prompt_len).float()
        target = chunk[:, prompt_len:]
        total_loss += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum").item() / target.shape[1]
        correct += (logits.argmax(-1) == target).all(dim=1).sum().item()
    model.train(was_training)
    return total_loss / len(seq), correct / len(seq)


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float,
                   betas: tuple[float, float], decay_vectors: bool = False) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on the matrices (``dim >= 2``) only, as :func:`train` uses it;
    ``decay_vectors``: on every parameter, in one group (the offline Pythia suite's optimiser).

    Fused: one kernel per step whose square roots are the CPU's IEEE instruction, where the unfused
    one sends them to MKL's vector math, whose bits differ by CPU vendor (stages/numerics.py)."""
    if decay_vectors:
        groups = [{"params": list(model.parameters())}]
    else:
        groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), weight_decay=weight_decay, fused=True)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def optimizer_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor,
                   grad_clip: float) -> torch.Tensor:
    """Backward ``loss``, clip the gradient norm at ``grad_clip`` (0 = none), step ``opt``; returns ``loss``."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return loss


def update(model: GPT, opt: torch.optim.Optimizer, batch: torch.Tensor, prompt_len: int, grad_clip: float,
           precision: str = "fp32") -> torch.Tensor:
    """One training update on ``batch``: answer loss (under ``precision``'s autocast), backward,
    gradient-norm clipping at ``grad_clip`` (0 = none), optimiser step. Returns the loss tensor.
    The update of :func:`train`; the benchmarks time this same function."""
    with autocast(batch.device, precision):
        loss = answer_loss(model, batch, prompt_len)
    return optimizer_step(model, opt, loss, grad_clip)


def run_steps(steps: int, checkpoints: Iterable[int], step: Callable[[int], None],
              checkpoint: Callable[[int], dict | None], start: int = 0, progress: bool = True,
              desc: str = "") -> None:
    """The training loop: ``step(s)`` for updates ``s = start .. steps-1``; ``checkpoint(s)`` before update
    ``s`` for every ``s`` in ``checkpoints`` at or after ``start`` (``s == steps``: after the last update).
    What ``checkpoint`` returns, if anything, is shown beside the progress bar."""
    todo = sorted({s for s in checkpoints if s >= start})
    bar = tqdm(total=steps, initial=start, disable=not progress, desc=desc, unit="step", mininterval=2)
    for s in range(start, steps + 1):
        if todo and s == todo[0]:
            shown = checkpoint(s)
            if shown:
                bar.set_postfix(shown)
            todo.pop(0)
        if s == steps:
            break
        step(s)
        bar.update(1)
    bar.close()


def batch_indices(seed: int, step: int, n: int, batch_size: int) -> np.ndarray | None:
    """Batch for update ``step``, a function of (seed, step) alone so a resumed run is identical."""
    if batch_size >= n:
        return None
    return np.random.default_rng([seed, step]).choice(n, size=batch_size, replace=False)


def train(model: GPT, settings: TrainSettings, train_seq: torch.Tensor, test_seq: torch.Tensor, prompt_len: int,
          out_dir: Path, *, seed: int, checkpoints: Iterable[int], precision: str = "fp32", progress: bool = True,
          on_checkpoint: Callable[[dict], None] | None = None) -> list[dict]:
    """Train ``model`` with one run's ``settings`` (``train.*`` of params.yaml, merged: the schema's
    :class:`~stages.params.TrainSettings`); save every step of ``checkpoints`` to ``out_dir`` and return
    the history rows. ``seed`` fixes the batch order; ``precision`` is the resolved ``fp32`` or ``bf16``.

    ``on_checkpoint`` (a curve logger) is called with every history row in step order: first the rows
    a resumed run restores, then each new checkpoint's, so it sees the same rows either way.

    ``out_dir`` also holds the resume state (model, optimiser, history and RNG states at the last
    checkpoint; stages/training/resume.py), so a crashed run restarted on the same directory continues
    where it stopped, bit for bit, dropout included.
    """
    cfg = settings
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out_dir)
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas)
    history, start = load_resume(out_dir, model, opt, train_seq.device)
    for row in history if on_checkpoint else ():
        on_checkpoint(row)
    eval_train = train_seq[:cfg.eval_train_max]
    done = {row["step"] for row in history}
    last_loss = float("nan")

    def lr(step: int) -> float:
        return lr_at(step, cfg.lr, cfg.steps, cfg.warmup, cfg.schedule, cfg.min_lr_ratio)

    def checkpoint(step: int) -> dict | None:
        if step in done:
            return None
        test_loss, test_acc = evaluate(model, test_seq, prompt_len, cfg.eval_batch_size, precision)
        train_loss_eval, train_acc = evaluate(model, eval_train, prompt_len, cfg.eval_batch_size, precision)
        history.append({"step": step, "train_loss": train_loss_eval, "batch_loss": last_loss,
                        "test_loss": test_loss, "test_acc": test_acc, "train_acc": train_acc,
                        "lr": lr(max(step - 1, 0))})
        save_state(model, step_file(out_dir, step))
        save_resume(out_dir, model, opt, history, step, train_seq.device)
        if on_checkpoint:
            on_checkpoint(history[-1])
        return {"test_acc": f"{test_acc:.3f}", "loss": f"{train_loss_eval:.3f}"}

    def step(s: int) -> None:
        nonlocal last_loss
        set_lr(opt, lr(s))
        idx = batch_indices(seed, s, len(train_seq), cfg.batch_size)
        batch = train_seq if idx is None else train_seq[torch.as_tensor(idx, device=train_seq.device)]
        last_loss = update(model, opt, batch, prompt_len, cfg.grad_clip, precision).item()

    model.train()
    run_steps(cfg.steps, checkpoints, step, checkpoint, start, progress, out_dir.name)
    clear_resume(out_dir)
    return history
