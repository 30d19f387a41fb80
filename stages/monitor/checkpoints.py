"""Finding checkpoints of a causal LM on disk, and telling when one is completely written.

A *source* is one of:

* a folder of checkpoints: its sub-folders named ``checkpoint-N`` (the Trainer's), ``stepN``,
  ``step-N`` or ``step_N`` are the checkpoints, ``N`` the step;
* one checkpoint folder: named as above, or holding ``config.json`` (its step then comes from
  ``trainer_state.json``'s ``global_step``);
* this project's own run folder (``data/checkpoints/<run>/``: ``step_XXXXXXX.safetensors`` files and
  ``manifest.json``, written by stage ``train``): each step file is a checkpoint;
* the ``stepN`` revisions of a hub repository in the huggingface_hub cache (:func:`hub_checkpoints`,
  read offline from the cache's documented layout ``models--<org>--<name>/refs/<revision>`` ->
  ``snapshots/<commit>``).

A checkpoint is **complete** when it has ``config.json`` and safetensors weights (every shard named
by ``model.safetensors.index.json``), plus ``trainer_state.json`` for a Trainer ``checkpoint-N``
folder (the Trainer writes it last). While watching, it must also be **stable**: the same files,
sizes and modification times for ``settle`` seconds (:class:`Stability`). Pickle-only weights
(``*.bin``, ``*.pt``) are refused: weights load with safetensors only.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.file_download import repo_folder_name

from stages.errors import PipelineError

STEP_NAME = re.compile(r"^(?:checkpoint-|step[-_]?)(\d+)$")
PROJECT_STEP = re.compile(r"^step_(\d+)\.safetensors$")
PROJECT_MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
UNSAFE_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".pkl")
TRAINER_FILES = ("training_args", "optimizer", "scheduler", "rng_state", "scaler")  # the Trainer's own unsafe_files


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    trainer: bool = False  # a Trainer checkpoint-N folder: complete only with trainer_state.json
    label: str = ""        # revision name for hub checkpoints
    project: bool = False  # this project's step_XXXXXXX.safetensors file (path) in a run folder with manifest.json

    @property
    def name(self) -> str:
        return self.label or str(self.path)


def _trainer_step(path: Path) -> int | None:
    try:
        return int(json.loads((path / TRAINER_STATE).read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _as_checkpoint(path: Path) -> Checkpoint | None:
    match = STEP_NAME.match(path.name)
    if match:
        return Checkpoint(int(match.group(1)), path, trainer=path.name.startswith("checkpoint-"))
    if (path / "config.json").is_file():
        step = _trainer_step(path)
        if step is None:
            raise PipelineError(f"checkpoint {path}: cannot tell its training step (name the folder checkpoint-N or "
                                f"stepN, or keep the Trainer's {TRAINER_STATE} in it)")
        return Checkpoint(step, path, trainer=True)
    return None


def is_project_run(path: Path) -> bool:
    """A run folder of this project: ``manifest.json`` beside ``step_XXXXXXX.safetensors`` files."""
    path = Path(path)
    return (path / PROJECT_MANIFEST).is_file() and any(PROJECT_STEP.match(p.name) for p in path.iterdir())


def project_checkpoints(path: Path) -> list[Checkpoint]:
    return sorted((Checkpoint(int(m.group(1)), p, project=True) for p in Path(path).iterdir()
                   if (m := PROJECT_STEP.match(p.name))), key=lambda c: c.step)


def discover(sources: list[Path]) -> list[Checkpoint]:
    """The checkpoints in ``sources`` (folders that do not exist yet give none), by step. Two
    checkpoints with one step are an error."""
    found: dict[int, Checkpoint] = {}
    for source in sources:
        source = Path(source)
        if not source.is_dir():
            continue
        if is_project_run(source):
            candidates = project_checkpoints(source)
            for ck in candidates:
                if ck.step in found and found[ck.step].path != ck.path:
                    raise PipelineError(f"two checkpoints of step {ck.step}: {found[ck.step].path} and {ck.path}")
                found[ck.step] = ck
            continue
        single = _as_checkpoint(source)
        if single is not None:
            candidates = [single]
        else:
            candidates = [c for p in sorted(source.iterdir()) if p.is_dir() and STEP_NAME.match(p.name)
                          for c in [_as_checkpoint(p)] if c is not None]
        for ck in candidates:
            if ck.step in found and found[ck.step].path != ck.path:
                raise PipelineError(f"two checkpoints of step {ck.step}: {found[ck.step].path} and {ck.path}")
            found[ck.step] = ck
    return [found[s] for s in sorted(found)]


def hub_checkpoints(repo_id: str, cache_dir: str | os.PathLike | None = None,
                    revisions: list[str] | None = None) -> list[Checkpoint]:
    """The ``stepN`` revisions of ``repo_id`` present in the huggingface_hub cache (offline), by step."""
    cache = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    storage = cache / repo_folder_name(repo_id=repo_id, repo_type="model")
    refs = storage / "refs"
    if not refs.is_dir():
        return []
    out = []
    for ref in sorted(p for p in refs.iterdir() if p.is_file()):
        match = re.fullmatch(r"step(\d+)", ref.name)
        if not match or (revisions is not None and ref.name not in revisions):
            continue
        commit = ref.read_text().strip()
        out.append(Checkpoint(int(match.group(1)), storage / "snapshots" / commit, label=f"{repo_id}@{ref.name}"))
    return sorted(out, key=lambda c: c.step)


def completeness(ck: Checkpoint) -> tuple[bool, str]:
    """``(complete, why not)``; raises :class:`PipelineError` for pickle-only weights."""
    path = ck.path
    if ck.project:  # stage train writes each step file whole (a temporary file renamed)
        return (path.is_file(), "" if path.is_file() else "step file missing")
    if not path.is_dir():
        return False, "folder missing"
    if not (path / "config.json").is_file():
        return False, "no config.json yet"
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            return False, "model.safetensors.index.json unreadable (being written?)"
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            return False, f"shards missing: {', '.join(missing[:3])}"
    elif not any(path.glob("*.safetensors")):
        unsafe_files = sorted(p.name for p in path.iterdir() if p.suffix in UNSAFE_WEIGHT_SUFFIXES
                         and not p.name.startswith(TRAINER_FILES))
        if unsafe_files and (not ck.trainer or (path / TRAINER_STATE).is_file()):
            raise PipelineError(f"checkpoint {ck.name}: no safetensors weights, only pickle weights "
                                f"({', '.join(unsafe_files)}); weights load only from safetensors (re-save with "
                                "save_pretrained(..., safe_serialization=True))")
        return False, "no safetensors weights yet"
    if ck.trainer and path.name.startswith("checkpoint-") and not (path / TRAINER_STATE).is_file():
        return False, f"no {TRAINER_STATE} yet (the Trainer writes it last)"
    return True, ""


def signature(path: Path) -> tuple:
    """Every file's (relative name, size, mtime): equal signatures mean nothing was written in between."""
    if path.is_file():
        st = path.stat()
        return ((path.name, st.st_size, st.st_mtime_ns),)
    out = []
    for root, _, files in os.walk(path, followlinks=True):
        for name in files:
            p = Path(root) / name
            try:
                st = p.stat()
            except OSError:
                out.append((str(p.relative_to(path)), -1, -1))
                continue
            out.append((str(p.relative_to(path)), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


class Stability:
    """Tracks each checkpoint's signature: stable once unchanged for ``settle`` seconds."""

    def __init__(self, settle: float):
        self.settle = settle
        self._seen: dict[Path, tuple[tuple, float]] = {}

    def stable(self, ck: Checkpoint, now: float) -> bool:
        sig = signature(ck.path)
        prev = self._seen.get(ck.path)
        if prev is None or prev[0] != sig:
            self._seen[ck.path] = (sig, now)
            return self.settle <= 0
        return now - prev[1] >= self.settle

    def reset(self, ck: Checkpoint, now: float) -> None:
        """Start the clock again (after a failed load: wait for the files to settle once more)."""
        self._seen[ck.path] = (signature(ck.path), now)
