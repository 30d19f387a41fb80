"""Training with AdamW, exact-match evaluation at every checkpoint, and crash-safe resume."""
from __future__ import annotations

import json
import re
import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as serialize
from tqdm import tqdm

from stages.io.atomic import atomic_path, write_text
from stages.io.checkpoints import save_state, step_file
from stages.models.gpt import GPT
from stages.models.vendor_neutral_ops import cross_entropy as portable_cross_entropy
from stages.training.precision import autocast
from stages.training.schedule import lr_at

# The resume state: ``resume.json`` (step, history, optimiser scalars and hyper-parameters, RNG states,
# and the name of its tensor file) commits ``resume-<nonce>.safetensors`` (model and optimiser tensors).
# Nothing in it is unpickled: a planted or corrupt file can at worst make the run start over.
RESUME = "resume.json"
RESUME_FORMAT = 1
LEGACY_RESUME = "resume.pt"  # pickled resume file of earlier versions: removed unread
_TENSORS = re.compile(r"resume-[0-9a-f]{32}\.safetensors")
_STEP = re.compile(r"step_\d{7}\.safetensors")
# What a run directory may hold while it trains; anything else is a leftover of a killed write
# (an atomic temporary, safetensors' ``.tmpXXXXXX`` of earlier versions) and is removed on start.
KEEP = {RESUME, "run-config.json", "manifest.json"}


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
                   betas: tuple[float, float]) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on the matrices (``dim >= 2``) only, as :func:`train` uses it.

    Fused: one kernel per step whose square roots are the CPU's IEEE instruction, where the unfused
    one sends them to MKL's vector math, whose bits differ by CPU vendor (stages/numerics.py)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=tuple(betas), fused=True)


def update(model: GPT, opt: torch.optim.Optimizer, batch: torch.Tensor, prompt_len: int, grad_clip: float,
           precision: str = "fp32") -> torch.Tensor:
    """One training update on ``batch``: answer loss (under ``precision``'s autocast), backward,
    gradient-norm clipping at ``grad_clip`` (0 = none), optimiser step. Returns the loss tensor.
    The update of :func:`train`; the benchmarks time this same function."""
    with autocast(batch.device, precision):
        loss = answer_loss(model, batch, prompt_len)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return loss


def batch_indices(seed: int, step: int, n: int, batch_size: int) -> np.ndarray | None:
    """Batch for update ``step``, a function of (seed, step) alone so a resumed run is identical."""
    if batch_size >= n:
        return None
    return np.random.default_rng([seed, step]).choice(n, size=batch_size, replace=False)


def train(model: GPT, cfg: TrainConfig, train_seq: torch.Tensor, test_seq: torch.Tensor, prompt_len: int,
          out_dir: Path, progress: bool = True, eval_train_max: int = 4096,
          on_checkpoint: Callable[[dict], None] | None = None) -> list[dict]:
    """Train ``model``; save every checkpoint step to ``out_dir`` and return the history rows.

    ``on_checkpoint`` (a curve logger) is called with every history row in step order: first the rows
    a resumed run restores, then each new checkpoint's, so it sees the same rows either way.

    ``out_dir`` also holds the resume state (model, optimiser, history and RNG states at the last
    checkpoint; see :func:`save_resume`), so a crashed run restarted on the same directory continues
    where it stopped, bit for bit, dropout included.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out_dir)
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas)
    history, start = load_resume(out_dir, model, opt, train_seq.device)
    for row in history if on_checkpoint else ():
        on_checkpoint(row)
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
            save_resume(out_dir, model, opt, history, step, train_seq.device)
            if on_checkpoint:
                on_checkpoint(history[-1])
            bar.set_postfix(test_acc=f"{test_acc:.3f}", loss=f"{train_loss_eval:.3f}")
            todo.pop(0)
        if step >= cfg.steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg.lr, cfg.steps, cfg.warmup, cfg.schedule, cfg.min_lr_ratio)
        idx = batch_indices(cfg.seed, step, len(train_seq), cfg.batch_size)
        batch = train_seq if idx is None else train_seq[torch.as_tensor(idx, device=train_seq.device)]
        last_loss = update(model, opt, batch, prompt_len, cfg.grad_clip, cfg.precision).item()
        step += 1
        bar.update(1)
    bar.close()
    clear_resume(out_dir)
    return history


class TornResume(Exception):
    """The resume state cannot be used: it is incomplete, corrupt or does not fit this run."""


def _rng_states(device: torch.device) -> dict:
    states = {"cpu": torch.get_rng_state().tolist()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device).tolist()
    return states


def _tensor_files(out_dir: Path) -> list[Path]:
    return [p for p in out_dir.iterdir() if _TENSORS.fullmatch(p.name)]


def remove_leftovers(out_dir: Path) -> list[Path]:
    """Delete every entry of a run directory that is neither a checkpoint, the resume state nor its
    config (temporary files of a write that was killed): they would otherwise become part of the
    checkpoint output (and of its DVC hash). Returns what was removed."""
    removed = []
    for path in sorted(out_dir.iterdir()):
        if path.name in KEEP or _STEP.fullmatch(path.name) or _TENSORS.fullmatch(path.name):
            if not path.is_dir() or path.is_symlink():
                continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(path)
    if removed:
        print(f"note: removed {len(removed)} leftover file(s) of an interrupted run from {out_dir}: "
              + ", ".join(p.name for p in removed[:3]) + (" ..." if len(removed) > 3 else ""), file=sys.stderr)
    return removed


def clear_resume(out_dir: Path) -> None:
    """Remove the resume state (a finished run needs none) and any pickled legacy file."""
    for path in _tensor_files(out_dir) + [out_dir / RESUME, out_dir / LEGACY_RESUME]:
        path.unlink(missing_ok=True)


def save_resume(out_dir: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, history: list[dict],
                step: int, device: torch.device) -> None:
    """Write the tensors to a new ``resume-<nonce>.safetensors``, then commit it by replacing
    ``resume.json``; a crash at any point leaves the previous pair intact."""
    tensors, aliases, seen = {}, {}, {}
    for name, value in model.state_dict().items():
        ident = (value.data_ptr(), value.dtype, tuple(value.shape), tuple(value.stride()))
        if value.numel() and ident in seen:  # a tied weight (head = embedding) is stored once
            aliases[name] = seen[ident]
            continue
        seen[ident] = name
        tensors[f"model/{name}"] = value.detach().to("cpu").contiguous()
    opt_state = opt.state_dict()
    scalars: dict[str, dict] = {}
    for index, entries in opt_state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer/{index}/{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(str(index), {})[key] = value
    nonce = secrets.token_hex(16)
    tensor_name = f"resume-{nonce}.safetensors"
    data = serialize(tensors, metadata={"nonce": nonce, "step": str(step)})  # no .tmpXXXXXX of safetensors'
    with atomic_path(out_dir / tensor_name) as tmp:
        tmp.write_bytes(data)
    del data
    state = {"format": RESUME_FORMAT, "step": step, "tensors": tensor_name, "nonce": nonce,
             "history": history, "model_aliases": aliases, "optimizer_scalars": scalars,
             "param_groups": opt_state["param_groups"], "rng": _rng_states(device)}
    write_text(out_dir / RESUME, json.dumps(state))
    for old in _tensor_files(out_dir):
        if old.name != tensor_name:
            old.unlink(missing_ok=True)


def load_resume(out_dir: Path, model: torch.nn.Module, opt: torch.optim.Optimizer,
                device: torch.device) -> tuple[list[dict], int]:
    """Restore model, optimiser and RNG states from ``out_dir``; return (history, step).

    No state: ``([], 0)``. A torn or corrupt state: one warning line on stderr naming the file, the
    state is removed and training starts over (the model and optimiser are left untouched).
    A pickled ``resume.pt`` of earlier versions is removed without being read.
    """
    legacy = out_dir / LEGACY_RESUME
    if legacy.exists() or legacy.is_symlink():
        legacy.unlink()
        print(f"warning: removed {legacy} unread (pickled resume files are no longer loaded)", file=sys.stderr)
    path = out_dir / RESUME
    if not path.is_file():
        if _tensor_files(out_dir):
            print(f"warning: {path} is missing but resume tensors exist (torn resume state); "
                  "training starts over", file=sys.stderr)
            clear_resume(out_dir)
        return [], 0
    try:
        state, tensors = _read_resume(path, out_dir)
        history, step = _apply_resume(state, tensors, model, opt, device)
    except TornResume as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"warning: ignoring corrupt resume state {path} ({reason}); training starts over", file=sys.stderr)
        clear_resume(out_dir)
        return [], 0
    return history, step


def _read_resume(path: Path, out_dir: Path) -> tuple[dict, dict]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or not UTF-8
        raise TornResume(f"unreadable: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != RESUME_FORMAT:
        raise TornResume(f"not a format-{RESUME_FORMAT} resume state")
    name = state.get("tensors")
    if not isinstance(name, str) or not _TENSORS.fullmatch(name):
        raise TornResume(f"bad tensor file name {name!r}")
    tensor_path = out_dir / name
    try:
        with safe_open(str(tensor_path), framework="pt", device="cpu") as f:
            metadata = f.metadata() or {}
        tensors = load_file(str(tensor_path), device="cpu")
    except (OSError, SafetensorError, ValueError) as exc:
        raise TornResume(f"{tensor_path}: {exc}") from None
    if metadata.get("nonce") != state.get("nonce"):
        raise TornResume(f"{tensor_path} does not belong to it")
    return state, tensors


def _int(value, what: str, low: int = 0, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        raise TornResume(f"bad {what}: {value!r}")
    return value


def _rng_tensor(values, like: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(values, list) or len(values) != like.numel():
        raise TornResume(f"bad {what} RNG state")
    for v in values:
        _int(v, f"{what} RNG state byte", 0, 255)
    return torch.tensor(values, dtype=torch.uint8)


def _apply_resume(state: dict, tensors: dict, model: torch.nn.Module, opt: torch.optim.Optimizer,
                  device: torch.device) -> tuple[list[dict], int]:
    """Validate everything, then load optimiser, model and RNG states (nothing is changed on failure)."""
    step = _int(state.get("step"), "step")
    history = state.get("history")
    if not isinstance(history, list) or not all(isinstance(r, dict) and isinstance(r.get("step"), int)
                                                and r["step"] <= step for r in history):
        raise TornResume("bad history")

    current = model.state_dict()
    aliases = state.get("model_aliases")
    if not isinstance(aliases, dict):
        raise TornResume("bad model_aliases")
    weights = {k[len("model/"):]: v for k, v in tensors.items() if k.startswith("model/")}
    for name, target in aliases.items():
        if target not in weights:
            raise TornResume(f"alias {name!r} -> {target!r} has no tensor")
        weights[name] = weights[target]
    if set(weights) != set(current):
        raise TornResume(f"model tensors differ: {sorted(set(weights) ^ set(current))[:3]}")
    for name, value in current.items():
        if weights[name].shape != value.shape or weights[name].dtype != value.dtype:
            raise TornResume(f"model tensor {name!r} has shape {tuple(weights[name].shape)}, "
                             f"{weights[name].dtype}; the model needs {tuple(value.shape)}, {value.dtype}")

    params = [p for group in opt.param_groups for p in group["params"]]
    groups = state.get("param_groups")
    scalars = state.get("optimizer_scalars")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups) or not isinstance(scalars, dict):
        raise TornResume("bad optimizer state")
    opt_state: dict[int, dict] = {}
    for key, value in tensors.items():
        if not key.startswith("optimizer/"):
            if not key.startswith("model/"):
                raise TornResume(f"unexpected tensor {key!r}")
            continue
        parts = key.split("/")
        if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) >= len(params):
            raise TornResume(f"unexpected tensor {key!r}")
        index = int(parts[1])
        if value.dim() and value.shape != params[index].shape:
            raise TornResume(f"optimizer tensor {key!r} does not fit parameter {index}")
        opt_state.setdefault(index, {})[parts[2]] = value
    for index, entries in scalars.items():
        if not index.isdigit() or int(index) >= len(params) or not isinstance(entries, dict):
            raise TornResume(f"bad optimizer scalars for {index!r}")
        opt_state.setdefault(int(index), {}).update(entries)
    groups = [{k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in g.items()} for g in groups]

    rng = state.get("rng")
    if not isinstance(rng, dict):
        raise TornResume("bad rng")
    cpu_rng = _rng_tensor(rng.get("cpu"), torch.get_rng_state(), "cpu")
    cuda_rng = None
    if device.type == "cuda":
        cuda_rng = _rng_tensor(rng.get("cuda"), torch.cuda.get_rng_state(device), "cuda")

    try:  # checks the groups before it changes anything
        opt.load_state_dict({"state": opt_state, "param_groups": groups})
    except (ValueError, KeyError, TypeError) as exc:
        raise TornResume(f"optimizer state does not fit: {exc}") from None
    model.load_state_dict(weights)
    torch.set_rng_state(cpu_rng)
    if cuda_rng is not None:
        torch.cuda.set_rng_state(cuda_rng, device)
    return history, step
