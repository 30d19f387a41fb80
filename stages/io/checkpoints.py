"""Checkpoint directories: ``step_0000123.safetensors`` files plus ``manifest.json``.

The manifest records the model config, the dataset it was trained on and the steps, so
downstream stages never guess. Every failure names the file.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from stages.errors import PipelineError
from stages.io.tables import read_json, write_json
from stages.models.gpt import GPT, GPTConfig

MANIFEST = "manifest.json"
_STEP_FILE = re.compile(r"step_(\d+)\.safetensors$")


def step_file(directory: str | os.PathLike, step: int) -> Path:
    return Path(directory) / f"step_{step:07d}.safetensors"


def save_state(model: torch.nn.Module, path: str | os.PathLike) -> None:
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if k != "head.weight"}
    tmp = Path(path).with_suffix(".tmp")
    save_file(state, str(tmp))
    os.replace(tmp, path)


def write_manifest(directory: str | os.PathLike, manifest: dict) -> None:
    write_json(manifest, Path(directory) / MANIFEST)


def read_manifest(directory: str | os.PathLike) -> dict:
    directory = Path(directory)
    if not directory.is_dir():
        raise PipelineError(f"missing checkpoint directory: {directory}")
    manifest = read_json(directory / MANIFEST)
    if not isinstance(manifest, dict):
        raise PipelineError(f"corrupt checkpoint manifest: {directory / MANIFEST} (not a JSON object)")
    for key in ("model", "steps"):
        if key not in manifest:
            raise PipelineError(f"corrupt checkpoint manifest: {directory / MANIFEST} lacks '{key}'")
    steps = manifest["steps"]
    if (not isinstance(steps, list) or not steps
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
            or sorted(set(steps)) != steps):
        raise PipelineError(f"corrupt checkpoint manifest: {directory / MANIFEST} ('steps' must be a non-empty "
                            "list of distinct non-negative integers in increasing order)")
    return manifest


def load_model(directory: str | os.PathLike, step: int, manifest: dict | None = None,
               device: str | torch.device = "cpu", portable_ops: bool = False) -> GPT:
    manifest = manifest or read_manifest(directory)
    path = step_file(directory, step)
    if not path.is_file():
        raise PipelineError(f"missing checkpoint: {path}")
    try:
        state = load_file(str(path), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise PipelineError(f"corrupt checkpoint: {path} ({exc})") from None
    model = GPT(GPTConfig(**manifest["model"]), portable_ops=portable_ops)
    state["head.weight"] = state.get("wte.weight")
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        raise PipelineError(f"corrupt checkpoint: {path} (weights do not fit the manifest's model: {str(exc).splitlines()[0]})") from None
    return model.to(device).eval()


def listed_steps(directory: str | os.PathLike) -> list[int]:
    return sorted(int(m.group(1)) for p in Path(directory).iterdir() if (m := _STEP_FILE.search(p.name)))
