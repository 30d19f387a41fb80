"""Reading and validating params.yaml; every error names the offending key."""
from __future__ import annotations

import numbers
import os
import re
from itertools import product
from pathlib import Path
from typing import Any


from stages.errors import PipelineError

from stages.params import LEVELS, MODEL_NAMES, TASK_NAMES, load_params, load_typed_params, validate_params  # noqa: E402,F401  re-exported
from stages.params_file import PARAMS_FILE, load_yaml, read_params  # noqa: F401  re-exported


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


def seed_argument(value: str) -> int:
    """A ``--seed`` command-line value; the error names the option."""
    try:
        seed = int(value)
    except (TypeError, ValueError):
        raise PipelineError(f"'--seed' must be a non-negative integer, got {value!r}") from None
    return positive_int(seed, "--seed", allow_zero=True)


# ---------------------------------------------------------------- DVC matrix entries
# Which matrix entry a DVC stage is, without a shell ever seeing a params value.
#
# DVC pastes ``${item.x}`` into a stage's ``cmd`` and runs the result through a shell before any stage
# can validate params, so a grid value such as ``p405k;touch pwned`` (``dvc exp run -S``) would run as
# a command. The matrix stages' commands in dvc.yaml therefore carry no interpolation at all (``python
# -m stages.pipeline.train``); DVC names the entry in the environment variable ``DVC_STAGE`` it sets for every
# command (``train@copy-easy-p405k-0``), and :func:`matrix_arguments` maps that name back to its values
# by recomputing DVC's entry names (``dvc.parsing.MatrixDefinition.normalized_iterable``) from
# params.yaml, after the whole file has passed the schema (:mod:`stages.params`), so a hostile value is
# refused in one line before any work. Run by hand, a stage takes ``--task`` etc. as before.

# Each matrix stage of dvc.yaml: its matrix keys and the params list each one iterates, in dvc.yaml's
# order (tests/test_reliability.py checks this against dvc.yaml).
MATRIX = {
    "generate": {"task": "grid.tasks", "level": "grid.levels"},
    **{stage: {"task": "grid.tasks", "level": "grid.levels", "model": "grid.models", "seed": "grid.seeds"}
       for stage in ("train", "extract", "measure", "landscape")},
    **{stage: {"model": "pythia.models"} for stage in ("fetch_pythia", "pythia_measure")},
}
ENV = "DVC_STAGE"


def _dvc_str(value) -> str:
    """DVC's ``to_str`` for a matrix value in an entry name (``dvc.parsing.interpolate``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def entry_names(lists: dict[str, list]) -> dict[str, dict]:
    """DVC's name for every entry of a matrix (``key -> list``) -> the entry's values; a value that is
    a mapping or list is named by its position (``model0``), as DVC names it."""
    names: dict[str, list[dict]] = {}
    for combination in product(*(list(enumerate(v)) for v in lists.values())):
        fragments = [f"{k}{i}" if isinstance(v, (dict, list, tuple)) else _dvc_str(v)
                     for k, (i, v) in zip(lists, combination)]
        names.setdefault("-".join(fragments), []).append({k: v for k, (_, v) in zip(lists, combination)})
    return {name: entries[0] for name, entries in names.items() if len(entries) == 1}


def split_address(address: str) -> tuple[str, str | None]:
    """``[path:]group@key`` (DVC's stage addressing) -> ``(group, key)``; ``(name, None)`` without ``@``."""
    group, _, key = address.partition("@")
    return group.rpartition(":")[2], (key if _ else None)


def matrix_arguments(keys: tuple[str, ...], params_path: str | os.PathLike | None) -> dict[str, str]:
    """The values of ``keys`` for the matrix entry named by ``$DVC_STAGE``, read from params.yaml
    (validated first). Every failure is one line naming what was expected."""
    address = os.environ.get(ENV)
    flags = ", ".join(f"--{k}" for k in keys)
    if not address:
        raise PipelineError(f"missing {flags}: pass them, or run the stage through DVC (dvc repro), which names "
                            f"the matrix entry in ${ENV}")
    group, key = split_address(address)
    dims = MATRIX.get(group)
    if dims is None or tuple(dims) != tuple(keys) or key is None:
        raise PipelineError(f"${ENV} = {address!r} is not an entry of a matrix stage over {', '.join(keys)}; "
                            f"pass {flags}")
    data, path = read_params(params_path)
    validate_params(data, source=str(path))  # a hostile grid value stops here, in one line
    lists = {k: get(data, dotted) for k, dotted in dims.items()}
    entry = entry_names(lists).get(key)
    if entry is None:
        raise PipelineError(f"${ENV} = {address!r} names no single entry of the matrix over "
                            + ", ".join(f"'{d}'" for d in dims.values()) + f" in {Path(path)}")
    return {k: str(v) for k, v in entry.items()}
