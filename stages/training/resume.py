"""Crash-safe resume of a training run: the state at the last checkpoint, and a run directory's leftovers.

The resume state: ``resume.json`` (step, history, optimiser scalars and hyper-parameters, RNG states,
and the name of its tensor file) commits ``resume-<nonce>.safetensors`` (model and optimiser tensors).
Nothing in it is unpickled: a planted or corrupt file can at worst make the run start over.
"""
from __future__ import annotations

import json
import re
import secrets
import shutil
import sys
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as serialize

from stages.io.atomic import atomic_path, write_text

RESUME = "resume.json"
RESUME_FORMAT = 1
_TENSORS = re.compile(r"resume-[0-9a-f]{32}\.safetensors")
_STEP = re.compile(r"step_\d{7}\.safetensors")
# What a run directory may hold while it trains; anything else (an atomic temporary, safetensors'
# ``.tmpXXXXXX`` of earlier versions, a pickled ``resume.pt`` of the first version) is a leftover and
# is removed unread on start.
KEEP = {RESUME, "run-config.json", "manifest.json"}


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
    """Remove the resume state (a finished run needs none)."""
    for path in _tensor_files(out_dir) + [out_dir / RESUME]:
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
    """
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
