"""Training with AdamW, exact-match evaluation at every checkpoint, and crash-safe resume."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from stages.io.checkpoints import save_state, step_file
from stages.models.gpt import GPT
from stages.training.precision import autocast
from stages.training.schedule import lr_at

RESUME = "resume.pt"


@dataclass
class TrainConfig:
    steps: int
    lr: float
    weight_decay: float
    batch_size: int
    warmup: int = 0
    schedule: str = "constant"
    min_lr_ratio: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    seed: int = 0
    eval_batch_size: int = 4096
    checkpoints: list[int] = field(default_factory=list)
    precision: str = "fp32"  # fp32 | bf16 (autocast; see stages.training.precision)


def sequences(prompt: np.ndarray, answer: np.ndarray, device) -> torch.Tensor:
    return torch.as_tensor(np.concatenate([prompt, answer], axis=1), dtype=torch.long, device=device)


def answer_logits(model: GPT, seq: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Logits predicting each answer token: positions ``prompt_len-1 .. end-1``."""
    return model(seq[:, :-1])[:, prompt_len - 1:]


def answer_loss(model: GPT, seq: torch.Tensor, prompt_len: int) -> torch.Tensor:
    logits = answer_logits(model, seq, prompt_len)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, prompt_len:].reshape(-1))


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


def batch_indices(seed: int, step: int, n: int, batch_size: int) -> np.ndarray | None:
    """Batch for update ``step``, a function of (seed, step) alone so a resumed run is identical."""
    if batch_size >= n:
        return None
    return np.random.default_rng([seed, step]).choice(n, size=batch_size, replace=False)


def train(model: GPT, cfg: TrainConfig, train_seq: torch.Tensor, test_seq: torch.Tensor, prompt_len: int,
          out_dir: Path, progress: bool = True, eval_train_max: int = 4096) -> list[dict]:
    """Train ``model``; save every checkpoint step to ``out_dir`` and return the history rows.

    ``out_dir`` also holds ``resume.pt`` (model, optimiser, history at the last checkpoint), so a
    crashed run restarted on the same directory continues where it stopped.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=tuple(cfg.betas))
    history: list[dict] = []
    start = 0
    resume = out_dir / RESUME
    if resume.is_file():
        try:
            state = torch.load(resume, map_location=train_seq.device, weights_only=False)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            history, start = state["history"], state["step"]
        except Exception:  # a torn resume file: start over
            history, start = [], 0
    eval_train = train_seq[:eval_train_max]
    done = {row["step"] for row in history}
    todo = sorted(s for s in cfg.checkpoints if s >= start and s not in done)
    last_loss = float("nan")
    model.train()
    bar = tqdm(total=cfg.steps, initial=start, disable=not progress, desc=out_dir.name, unit="step", mininterval=2)
    step = start
    while True:
        if todo and step == todo[0]:
            test_loss, test_acc = evaluate(model, test_seq, prompt_len, cfg.eval_batch_size, cfg.precision)
            train_loss_eval, train_acc = evaluate(model, eval_train, prompt_len, cfg.eval_batch_size, cfg.precision)
            history.append({"step": step, "train_loss": train_loss_eval, "batch_loss": last_loss,
                            "test_loss": test_loss, "test_acc": test_acc, "train_acc": train_acc,
                            "lr": lr_at(max(step - 1, 0), cfg.lr, cfg.steps, cfg.warmup, cfg.schedule, cfg.min_lr_ratio)})
            save_state(model, step_file(out_dir, step))
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "history": history, "step": step},
                       out_dir / (RESUME + ".tmp"))
            os.replace(out_dir / (RESUME + ".tmp"), resume)
            bar.set_postfix(test_acc=f"{test_acc:.3f}", loss=f"{train_loss_eval:.3f}")
            todo.pop(0)
        if step >= cfg.steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg.lr, cfg.steps, cfg.warmup, cfg.schedule, cfg.min_lr_ratio)
        idx = batch_indices(cfg.seed, step, len(train_seq), cfg.batch_size)
        batch = train_seq if idx is None else train_seq[torch.as_tensor(idx, device=train_seq.device)]
        with autocast(batch.device, cfg.precision):
            loss = answer_loss(model, batch, prompt_len)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        last_loss = loss.item()
        step += 1
        bar.update(1)
    bar.close()
    resume.unlink(missing_ok=True)
    return history
