"""Checkpoint directories: ``step_0000123.safetensors`` files plus ``manifest.json``.

The manifest records the model config, the dataset it was trained on, the steps and the sha256 of
every step file (``sha256``: file name -> hex digest), so downstream stages never guess and never use
a flipped or swapped checkpoint: :func:`read_manifest` with ``verify=True`` (the stages that load
weights) hashes every step file once per process and refuses a mismatch. Every failure names the file.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as serialize

from stages.errors import PipelineError
from stages.io.atomic import atomic_path
from stages.io.tables import read_json, write_json
from stages.models.gpt import GPT, GPTConfig

MANIFEST = "manifest.json"
_STEP_FILE = re.compile(r"step_(\d+)\.safetensors$")
_HEX = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 22
_VERIFIED: dict[tuple, bool] = {}  # (directory, manifest's identity) already hashed by this process


def step_file(directory: str | os.PathLike, step: int) -> Path:
    return Path(directory) / f"step_{step:07d}.safetensors"


def save_state(model: torch.nn.Module, path: str | os.PathLike) -> str:
    """Write the model's weights (the tied head left out) to ``path`` atomically; return their sha256.

    The bytes are serialised in memory and written through :func:`stages.io.atomic.atomic_path`, so
    safetensors' own temporary file (``.tmpXXXXXX``, mode 0600, beside the target) never appears and
    the file gets the umask's permissions."""
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if k != "head.weight"}
    data = serialize(state)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def step_digests(directory: str | os.PathLike, steps) -> dict[str, str]:
    """``{step file name: sha256}`` for the manifest's ``sha256`` entry."""
    return {step_file(directory, s).name: file_sha256(step_file(directory, s)) for s in steps}


def verify_checkpoints(directory: str | os.PathLike, manifest: dict) -> None:
    """Hash every step file of ``manifest`` and compare with its recorded sha256 (once per process per
    directory and manifest); one line naming the first file that is missing or differs."""
    directory = Path(directory)
    where = directory / MANIFEST
    digests = manifest.get("sha256")
    if not isinstance(digests, dict):
        raise PipelineError(f"corrupt checkpoint manifest: {where} lacks 'sha256' (file -> digest; written "
                            "before checkpoints were hashed: rerun its train stage)")
    key = (str(directory.resolve()), repr(sorted(digests.items())), tuple(manifest["steps"]))
    if _VERIFIED.get(key):
        return
    for step in manifest["steps"]:
        path = step_file(directory, step)
        expected = digests.get(path.name)
        if not isinstance(expected, str) or not _HEX.fullmatch(expected):
            raise PipelineError(f"corrupt checkpoint manifest: {where} ('sha256' has no 64-hex digest for {path.name})")
        if not path.is_file():
            raise PipelineError(f"missing checkpoint: {path}")
        actual = file_sha256(path)
        if actual != expected:
            raise PipelineError(f"corrupt checkpoint: {path} (sha256 {actual[:12]}..., {where} records "
                                f"{expected[:12]}...: changed or replaced since training; rerun its train stage)")
    _VERIFIED[key] = True


def write_manifest(directory: str | os.PathLike, manifest: dict) -> None:
    write_json(manifest, Path(directory) / MANIFEST)


def read_manifest(directory: str | os.PathLike, verify: bool = False) -> dict:
    """The checked manifest of a checkpoint directory; with ``verify``, every step file's sha256 too
    (:func:`verify_checkpoints`): the stages that load weights ask for it."""
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
    if verify:
        verify_checkpoints(directory, manifest)
    return manifest


def load_model(directory: str | os.PathLike, step: int, manifest: dict | None = None,
               device: str | torch.device = "cpu", portable_ops: bool = False) -> GPT:
    manifest = manifest or read_manifest(directory, verify=True)
    path = step_file(directory, step)
    if not path.is_file():
        raise PipelineError(f"missing checkpoint: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise PipelineError(f"corrupt checkpoint: {path} ({exc})") from None
    cfg = _model_config(directory, manifest)
    try:
        with torch.device("meta"):  # the manifest's model, allocating nothing, to compare shapes first
            expected = {k: tuple(v.shape) for k, v in GPT(cfg).state_dict().items() if k != "head.weight"}
    except (AssertionError, ValueError, RuntimeError) as exc:
        raise PipelineError(f"corrupt checkpoint manifest: {Path(directory) / MANIFEST} (its 'model' cannot be "
                            f"built: {' '.join(str(exc).split()) or type(exc).__name__})") from None
    if expected != shapes:
        differ = sorted(set(expected) ^ set(shapes)) or sorted(k for k in expected if expected[k] != shapes[k])
        name = differ[0]
        raise PipelineError(f"corrupt checkpoint: {path} (weights do not fit the manifest's model: '{name}' is "
                            f"{shapes.get(name, 'absent')} in the file, {expected.get(name, 'absent')} in "
                            f"{Path(directory) / MANIFEST})")
    try:
        state = load_file(str(path), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise PipelineError(f"corrupt checkpoint: {path} ({exc})") from None
    model = GPT(cfg, portable_ops=portable_ops)
    state["head.weight"] = state.get("wte.weight")
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        raise PipelineError(f"corrupt checkpoint: {path} (weights do not fit the manifest's model: {str(exc).splitlines()[0]})") from None
    return model.to(device).eval()


def _model_config(directory, manifest: dict) -> GPTConfig:
    model = manifest.get("model")
    try:
        cfg = GPTConfig(**model)
        ok = all(isinstance(getattr(cfg, k), int) and not isinstance(getattr(cfg, k), bool) and getattr(cfg, k) > 0
                 for k in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"))
    except TypeError:
        ok = False
    if not ok:
        raise PipelineError(f"corrupt checkpoint manifest: {Path(directory) / MANIFEST} ('model' must map vocab_size, "
                            f"block_size, n_layer, n_head, d_model to positive integers, got {model!r})")
    return cfg

