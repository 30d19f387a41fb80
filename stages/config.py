"""Reading and validating params.yaml; every error names the offending key."""
from __future__ import annotations

import numbers
import os
import re
from pathlib import Path
from typing import Any

import yaml

from stages.errors import PipelineError

PARAMS_FILE = Path(os.environ.get("GEOMETRY_PARAMS", "params.yaml"))

# The names the grid may hold. They live here, not only in stages/tasks and stages/models, so that
# validating ``grid`` (every stage that reads it) imports no task or model code and so no extra
# dvc.yaml deps; stages/tasks/registry.py and stages/models/presets.py check at import time that
# their TASKS / PRESETS have exactly these names.
LEVELS = ("easy", "medium", "hard")
TASK_NAMES = ("copy", "reverse", "compare", "parity", "add", "mod", "sort", "mul")
MODEL_NAMES = ("p100k", "p405k", "p3m", "p11m", "p25m", "p71m", "p151m")


def _read_params(path: str | os.PathLike | None) -> tuple[dict, Path]:
    path = Path(path or PARAMS_FILE)
    if not path.is_file():
        raise PipelineError(f"missing params file: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PipelineError(f"corrupt params file: {path} ({exc})") from None
    if not isinstance(data, dict):
        raise PipelineError(f"params file {path} must hold a mapping")
    return data, path


def load_params(path: str | os.PathLike | None = None) -> dict:
    """params.yaml as a plain mapping, after the whole file has passed the schema of
    :mod:`stages.params` (unknown keys, types, ranges; the one-line error names the YAML path)."""
    from stages.params import validate_params  # here, not at the top: stages.params imports this module

    data, path = _read_params(path)
    validate_params(data, source=str(path))
    return data


def load_typed_params(path: str | os.PathLike | None = None) -> "Params":  # noqa: F821 (stages.params.Params)
    """params.yaml as a validated :class:`stages.params.Params` (read and validated once): what every
    stage's ``main`` passes down."""
    from stages.params import validate_params

    data, path = _read_params(path)
    return validate_params(data, source=str(path))


def get(params: dict, dotted: str, default: Any = ...) -> Any:
    """Look up ``a.b.c``; a missing key without a default is an error naming it."""
    node: Any = params
    for i, part in enumerate(dotted.split(".")):
        if not isinstance(node, dict) or part not in node:
            if default is not ...:
                return default
            where = ".".join(dotted.split(".")[:i]) or "params"
            raise PipelineError(f"missing key '{dotted}' (no '{part}' under '{where}')")
        node = node[part]
    return node


def choose(name: str, options, key: str) -> str:
    """Check that ``name`` is one of ``options``; the error names the key and the choices."""
    if name not in options:
        raise PipelineError(f"unknown {key} '{name}' (choose from: {', '.join(sorted(options))})")
    return name


def positive_int(value: Any, key: str, allow_zero: bool = False) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        need = "a non-negative" if allow_zero else "a positive"
        raise PipelineError(f"'{key}' must be {need} integer, got {value!r}")
    return value


def positive_float(value: Any, key: str, allow_zero: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PipelineError(f"'{key}' must be a number, got {value!r}") from None
    if isinstance(value, bool) or not (number >= 0 if allow_zero else number > 0):
        need = "non-negative" if allow_zero else "positive"
        raise PipelineError(f"'{key}' must be {need}, got {value!r}")
    return number


def fraction(value: Any, key: str) -> float:
    number = positive_float(value, key, allow_zero=True)
    if number > 1:
        raise PipelineError(f"'{key}' must lie in [0, 1], got {value!r}")
    return number


_NAME = re.compile(r"[A-Za-z0-9._-]+")


def name_argument(value: Any, key: str) -> str:
    """A task, level or model name that becomes part of a file name: non-empty, only letters, digits,
    ``.``, ``_`` and ``-``, no ``..`` and no leading ``.`` (so never a path separator, a parent
    directory or a hidden file). The one-line error names ``key`` (``--model``, ``pythia.models``)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value or value.startswith("."):
        raise PipelineError(f"'{key}' must be a non-empty name of letters, digits, '.', '_' or '-' "
                            f"(no path separators, no '..', no leading '.'), got {value!r}")
    return value


def run_id(task: str, level: str, model: str, seed: int | None = None) -> str:
    """``<task>-<level>-<model>-s<seed>``; runs without a seed axis (Pythia) have no suffix.

    Every part is checked (:func:`name_argument`) before any path is built from the id; errors name
    the stage's command-line option."""
    for value, key in ((task, "--task"), (level, "--level"), (model, "--model")):
        name_argument(value, key)
    if seed is None:
        return f"{task}-{level}-{model}"
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        seed = int(seed)  # numpy integers from a table are fine; their repr is not
    return f"{task}-{level}-{model}-s{positive_int(seed, '--seed', allow_zero=True)}"


def seed_list(params: dict) -> list[int]:
    """``grid.seeds``: a non-empty list of distinct non-negative integers."""
    seeds = get(params, "grid.seeds")
    if not isinstance(seeds, list) or not seeds:
        raise PipelineError(f"'grid.seeds' must be a non-empty list of integers, got {seeds!r}")
    for s in seeds:
        positive_int(s, "grid.seeds", allow_zero=True)
    if len(set(seeds)) != len(seeds):
        raise PipelineError(f"'grid.seeds' repeats a seed: {seeds!r}")
    return seeds


def grid_settings(params: dict) -> tuple[list[str], list[str], list[str], list[int]]:
    """Validated ``grid``: ``(tasks, levels, models, seeds)``. Each of ``grid.tasks``, ``grid.levels`` and
    ``grid.models`` must be a non-empty list of distinct known names (tasks of stages/tasks, levels
    easy/medium/hard, model presets of stages/models); seeds as :func:`seed_list`. The one-line
    error names the key and the unknown entry."""
    out = []
    for key, known in (("grid.tasks", TASK_NAMES), ("grid.levels", LEVELS), ("grid.models", MODEL_NAMES)):
        values = get(params, key)
        if not isinstance(values, list) or not values:
            raise PipelineError(f"'{key}' must be a non-empty list, got {values!r}")
        for value in values:
            if not isinstance(value, str) or value not in known:
                raise PipelineError(f"unknown entry {value!r} in '{key}' (choose from: {', '.join(known)})")
        if len(set(values)) != len(values):
            raise PipelineError(f"'{key}' repeats an entry: {values!r}")
        out.append(list(values))
    return out[0], out[1], out[2], seed_list(params)


def seed_argument(value: str) -> int:
    """A ``--seed`` command-line value; the error names the option."""
    try:
        seed = int(value)
    except (TypeError, ValueError):
        raise PipelineError(f"'--seed' must be a non-negative integer, got {value!r}") from None
    return positive_int(seed, "--seed", allow_zero=True)
