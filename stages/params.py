"""Typed schema of params.yaml (pydantic v2): every section, every key, its type and its range.

:func:`validate_params` turns the loaded YAML mapping into a :class:`Params` object or raises
:class:`~stages.errors.PipelineError` with one line naming the full YAML path of the first error::

    params.yaml: 'extract.devise' is not a known key (did you mean 'device'? known: batch_size, ...)
    params.yaml: 'train.defaults.steps' must be a positive integer, got 'ten'
    params.yaml: missing key 'tasks.copy.easy'
    params.yaml: unknown train.defaults.schedule 'zigzag' (choose from: constant, cosine, linear)

Every model forbids unknown keys (``extra="forbid"``, and a before-validator that reports the
unknown key with its full path), so a typo in an optional key is an error instead of a silently
used default. Types follow the stages' own checks (:mod:`stages.config`): integers are real
integers (not ``true``, not ``1.0``, not ``"1"``); other numbers may be integers, floats or numeric
strings (PyYAML reads ``1e-3`` without a dot as a string), must be finite and are returned as floats.

Checks that need more than params.yaml (the model's parameter count, a dataset's input-space
size) or on one run's merged train settings (``n_checkpoints`` against that run's ``steps``) stay
in the stages. Keys a stage reads with a default are optional here with the same default;
keys it reads without one are required.

:func:`load_typed_params` reads the file (:mod:`stages.params_file`) and validates it once: what every
stage passes down. This module imports only pydantic, :mod:`stages.errors`, :mod:`stages.params_file`
(PyYAML) and :mod:`stages.measures.registry` (plain dataclasses: the landscape measures'
registrations), so validating
params.yaml adds no task, model or torch code to a stage (tests/test_params_schema.py checks that
the names duplicated here -- schedules, precisions, measures, ... -- match the stages' own).
"""
from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, Optional, TypeVar, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, ValidationError, create_model,
                      model_validator)
from pydantic_core import PydanticCustomError

from stages.errors import PipelineError
from stages.measures.registry import LANDSCAPE
from stages.params_file import read_params

# The names the grid may hold. They live here (the schema), not in stages/tasks and stages/models, so that
# validating ``grid`` (every stage that reads it) imports no task or model code and so no extra
# dvc.yaml deps. TASK_NAMES is derived from the task registrations (TASKS, below);
# stages/models/presets.py checks at import time that its PRESETS have exactly MODEL_NAMES.
LEVELS = ("easy", "medium", "hard")
MODEL_NAMES = ("p100k", "p405k", "p3m", "p11m", "p25m", "p71m", "p151m")

# Names the stages use, declared once here (this module imports no torch); the stages import them.
LR_SCHEDULES = ("constant", "cosine", "linear")            # stages/training/schedule.py
MAX_CHECKPOINTS = 256                                      # stages/training/schedule.py
PRECISIONS = ("auto", "fp32", "bf16")                      # stages/training/precision.py
DEVICES = ("auto", "cpu", "cuda", "cuda:N")                # stages/training/device.py
POSITIONS = ("first", "all")                               # stages/pipeline/extract.py
GEOMETRY = ("rankme", "rankme_centred")                    # stages/analysis/runs.py
MOD_OPS = ("add", "sub", "mul")                            # stages/tasks/registry.py
EVAL_SETS = ("subject_verb", "determiner_noun", "word_order", "hypernym", "negation", "antonym",
             "syllogism", "logical_deduction")             # stages/pythia/grammar.py GENERATORS
HALFWAY = "halfway"                                        # stages/analysis/pythia_events.py
VERIFY = ("sha256", "size")                                # stages/pipeline/fetch_pythia.py
LANDSCAPE_MEASURES = tuple(LANDSCAPE)                      # stages/measures/registry.py: one registration each
DIRECTIONS = ("dip", "rise")                               # stages/analysis/landscape_events.py
MAX_DIGITS = 18                                            # stages/tasks/registry.py: int64 arithmetic

_NAME = re.compile(r"[A-Za-z0-9._-]+")                     # stages/config.py name_argument
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
_STEP = re.compile(r"step(\d+)")                           # stages/pythia/hub.py revision_step


# --------------------------------------------------------------------------------------------
# Errors: every check raises a PydanticCustomError whose type the formatter below turns into one line.

def _bad(detail: str, at: str = "") -> PydanticCustomError:
    """``'<path>' <detail>``; ``at`` extends the path of the value being validated (``"profile"``, ``"[2]"``)."""
    return PydanticCustomError("param", "{detail}", {"detail": detail, "at": at})


def _choice(value: Any, options, at: str = "") -> PydanticCustomError:
    """``unknown <path> '<value>' (choose from: ...)``, as :func:`stages.config.choose` words it."""
    shown = f"'{value}'" if isinstance(value, str) else repr(value)
    return PydanticCustomError("choice", "unknown {shown}", {"shown": shown, "options": ", ".join(options), "at": at})


def _join(path: str, at: str) -> str:
    if not at:
        return path
    if at.startswith("["):
        return f"{path}{at}"
    return f"{path}.{at}" if path else at


def _path(loc) -> str:
    path = ""
    for part in loc:
        path = _join(path, f"[{part}]" if isinstance(part, int) else str(part))
    return path


def _detail(err: dict) -> str:
    """One pydantic error as one line naming its full YAML path."""
    kind, ctx, loc = err["type"], err.get("ctx") or {}, tuple(err["loc"])
    if loc and loc[-1] == "[key]":  # a mapping key of the wrong type (YAML `1: ...`)
        return f"key {loc[-2]!r} under '{_path(loc[:-2])}' must be a string"
    path = _join(_path(loc), ctx.get("at", ""))
    if kind == "unknown_key":
        return f"'{path}' is not a known key ({ctx['hint']})"
    if kind == "missing":
        return f"missing key '{path}'"
    if kind == "choice":
        return f"unknown {path} {ctx['shown']} (choose from: {ctx['options']})"
    if kind == "entry":
        return f"unknown entry {ctx['shown']} in '{path}' (choose from: {ctx['options']})"
    if kind == "param":
        return f"'{path}' {ctx['detail']}"
    got = err.get("input")
    if not path:
        return f"must hold a mapping, got {got!r}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"'{path}' must be a mapping, got {got!r}"
    if kind == "list_type":
        return f"'{path}' must be a list, got {got!r}"
    if kind == "string_type":
        return f"'{path}' must be a string, got {got!r}"
    return f"'{path}' is invalid ({err['msg']}), got {got!r}"


def _message(err: dict, source: str) -> str:
    return f"{source}: {_detail(err)}"


# --------------------------------------------------------------------------------------------
# Value types. PlainValidator replaces pydantic's lax coercion (true -> 1, "3" -> 3, 2.0 -> 2).

def _int(value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        need = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer of at least {minimum}")
        raise _bad(f"must be {need}, got {value!r}")
    return value


def _number(value: Any) -> float:
    """An int, a float or a numeric string (YAML 1.1 reads ``1e-3`` as a string); finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _bad(f"must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise _bad(f"must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise _bad(f"must be a finite number, got {value!r}")
    return number


def _positive(value: Any) -> float:
    number = _number(value)
    if number <= 0:
        raise _bad(f"must be positive, got {value!r}")
    return number


def _non_negative(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise _bad(f"must be non-negative, got {value!r}")
    return number


def _fraction(value: Any) -> float:
    number = _number(value)
    if not 0 <= number <= 1:
        raise _bad(f"must lie in [0, 1], got {value!r}")
    return number


def _share_below_one(value: Any) -> float:
    number = _number(value)
    if not 0 <= number < 1:
        raise _bad(f"must lie in [0, 1), got {value!r}")
    return number


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value or value.startswith("."):
        raise _bad("must be a non-empty name of letters, digits, '.', '_' or '-' "
                   f"(no path separators, no '..', no leading '.'), got {value!r}")
    return value


def _device(value: Any) -> str:
    if not isinstance(value, str) or not _DEVICE.fullmatch(value):
        raise _choice(value, DEVICES)
    return value


def _one_of(options):
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise _choice(value, options)
        return value
    return check


def choice(*options: str) -> PlainValidator:
    """A string restricted to ``options``; the error lists them."""
    return PlainValidator(_one_of(options))


def _not_null(value: Any) -> Any:
    if value is None:
        raise _bad("must not be null (leave the key out instead)")
    return value


PosInt = Annotated[int, PlainValidator(lambda v: _int(v, 1))]
NonNegInt = Annotated[int, PlainValidator(lambda v: _int(v, 0))]
PosFloat = Annotated[float, PlainValidator(_positive)]
NonNegFloat = Annotated[float, PlainValidator(_non_negative)]
Fraction = Annotated[float, PlainValidator(_fraction)]          # [0, 1]
ShareBelowOne = Annotated[float, PlainValidator(_share_below_one)]  # [0, 1)
Name = Annotated[str, PlainValidator(_name)]
Device = Annotated[str, PlainValidator(_device)]
Precision = Annotated[Literal["auto", "fp32", "bf16"], choice(*PRECISIONS)]
# Optional keys: absent -> None (the stage's default applies); an explicit null is an error.
OptPosInt = Annotated[Optional[int], PlainValidator(lambda v: _int(v, 1))]
OptNonNegInt = Annotated[Optional[int], PlainValidator(lambda v: _int(v, 0))]
OptPosFloat = Annotated[Optional[float], PlainValidator(_positive)]
OptNonNegFloat = Annotated[Optional[float], PlainValidator(_non_negative)]
OptFraction = Annotated[Optional[float], PlainValidator(_fraction)]


def _list(item, what: str, distinct: bool = False, extra=None):
    """A non-empty list; each entry checked by ``item`` (errors name ``<path>[i]``); optionally distinct."""
    def check(value: Any) -> list:
        if not isinstance(value, list) or not value:
            raise _bad(f"must be a non-empty list of {what}, got {value!r}")
        out = []
        for i, entry in enumerate(value):
            try:
                out.append(item(entry))
            except PydanticCustomError as exc:
                ctx = dict(exc.context or {})
                if exc.type == "choice":  # 'unknown entry' names the list's key
                    raise PydanticCustomError("entry", "unknown entry {shown}", {**ctx, "shown": repr(entry)}) from None
                ctx["at"] = f"[{i}]"
                raise PydanticCustomError(exc.type, exc.message_template, ctx) from None
        if distinct and len(set(out)) != len(out):
            raise _bad(f"repeats an entry: {value!r}")
        if extra is not None:
            extra(out, value)
        return out
    return PlainValidator(check)


# --------------------------------------------------------------------------------------------
# Models.

class Section(BaseModel):
    """Base of every section: unknown keys are errors naming their full path; frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = sorted(f.alias or name for name, f in cls.model_fields.items())
            for key in data:
                if key not in known:
                    raise PydanticCustomError("unknown_key", "{hint}", {"hint": cls._hint(str(key), known),
                                                                        "at": str(key)})
        return data

    @classmethod
    def _hint(cls, key: str, known: list[str]) -> str:
        """What the error adds after an unknown ``key``: the closest known key, and all of them."""
        close = difflib.get_close_matches(key, known, n=1)
        return (f"did you mean '{close[0]}'? " if close else "") + f"known: {', '.join(known)}"

    def entry(self, key: str) -> Any:
        """The value of YAML key ``key`` (field names may differ: ``copy`` is ``copy_``)."""
        for name, field in type(self).model_fields.items():
            if (field.alias or name) == key:
                return getattr(self, name)
        raise KeyError(key)


# tasks -------------------------------------------------------------------------------------
# A task is one registration in TASKS below: its name, the model of its difficulty knobs and a
# description. TASK_NAMES, the ``tasks`` section (``Tasks``) and ``train.tasks`` (``TrainTasks``) are
# derived from it; the generator is the function of the same name in stages/tasks/registry.py.

class Knobs(Section):
    """What every task level may set besides its difficulty knobs (stages/tasks/dataset.py). A subclass
    adds the difficulty knobs and ``space()``: (number of distinct inputs, the knob that sets it)."""

    n_train: OptPosInt = None
    n_test: OptPosInt = None
    train_fraction: OptFraction = None  # enumerate the input space; this share trains


class SequenceKnobs(Knobs):  # copy, reverse, sort
    length: PosInt
    alphabet: PosInt = 10

    def space(self) -> tuple[int, str]:
        return self.alphabet ** self.length, "length"


class ParityKnobs(Knobs):
    length: PosInt

    def space(self) -> tuple[int, str]:
        return 2 ** self.length, "length"


class DigitsKnobs(Knobs):  # compare, add: two numbers of `digits` digits
    digits: PosInt

    @model_validator(mode="after")
    def _fits(self):
        if 2 * self.digits > MAX_DIGITS:
            raise _bad(f"digit counts must add up to at most {MAX_DIGITS}, got {self.digits} + {self.digits}")
        return self

    def space(self) -> tuple[int, str]:
        return 10 ** (2 * self.digits), "digits"


class MulKnobs(Knobs):
    digits: PosInt
    digits_b: OptPosInt = None  # default: digits

    @property
    def second(self) -> int:
        """The second factor's digit count (``digits_b``, default ``digits``)."""
        return self.digits if self.digits_b is None else self.digits_b

    @model_validator(mode="after")
    def _fits(self):
        if self.digits + self.second > MAX_DIGITS:
            raise _bad(f"digit counts must add up to at most {MAX_DIGITS}, got {self.digits} + {self.second}")
        return self

    def space(self) -> tuple[int, str]:
        return 10 ** (self.digits + self.second), "digits"


class ModKnobs(Knobs):
    modulus: Annotated[int, PlainValidator(lambda v: _int(v, 2))]
    op: Annotated[Literal["add", "sub", "mul"], choice(*MOD_OPS)] = "add"

    def space(self) -> tuple[int, str]:
        return self.modulus ** 2, "modulus"


@dataclass(frozen=True)
class Task:
    """One task: ``name`` (its key under ``tasks`` and ``train.tasks``, a ``grid.tasks`` entry, and the
    name of its generator in stages/tasks/registry.py), the model of its difficulty knobs, a description."""

    name: str
    knobs: type[Knobs]
    description: str


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("copy", SequenceKnobs, "repeat the sequence"),
    Task("reverse", SequenceKnobs, "repeat the sequence backwards"),
    Task("compare", DigitsKnobs, "relation of two numbers, then the larger one"),
    Task("parity", ParityKnobs, "running parity of a bit string"),
    Task("add", DigitsKnobs, "sum of two numbers"),
    Task("mod", ModKnobs, "(a op b) mod p, one token per residue"),
    Task("sort", SequenceKnobs, "sort the sequence"),
    Task("mul", MulKnobs, "product of two numbers"),
)}
TASK_NAMES = tuple(TASKS)

K = TypeVar("K", bound=Knobs)


class Levels(Section, Generic[K]):
    """One task's knobs at every level (dvc.yaml generates every task at every level)."""

    easy: K
    medium: K
    hard: K


def _attribute(name: str) -> str:
    """A task's field name in the models below: its own, or with ``_`` where BaseModel has it (``copy``)."""
    return f"{name}_" if hasattr(BaseModel, name) else name


class _Tasks(Section):
    def knobs(self, task: str, level: str) -> dict:
        """The knobs as written in params.yaml (unset optional keys left out), as the task registry takes them."""
        return self.entry(task).entry(level).model_dump(exclude_unset=True)


def tasks_model(tasks: dict[str, Task]) -> type[_Tasks]:
    """The ``tasks`` section of the registered ``tasks``: each task's knob model at every level."""
    return create_model("Tasks", __base__=_Tasks, __doc__="``tasks``: every registered task's knobs at every level.",
                        **{_attribute(t.name): (Levels[t.knobs], Field(alias=t.name)) for t in tasks.values()})


Tasks = tasks_model(TASKS)


def task_knobs(task: str, level: str, knobs: dict) -> Knobs:
    """``tasks.<task>.<level>`` (a mapping as in params.yaml) as its task's knob model; a
    :class:`PipelineError` naming the key otherwise (for callers that bypass params.yaml)."""
    try:
        return TASKS[task].knobs.model_validate(knobs)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise PipelineError(_detail({**err, "loc": ("tasks", task, level, *err["loc"])})) from None


# grid --------------------------------------------------------------------------------------

class Grid(Section):
    """The DVC matrix of the small-model runs."""

    tasks: Annotated[list[str], _list(_one_of(TASK_NAMES), "task names", distinct=True)]
    levels: Annotated[list[str], _list(_one_of(LEVELS), "levels", distinct=True)]
    models: Annotated[list[str], _list(_one_of(MODEL_NAMES), "model presets", distinct=True)]
    seeds: Annotated[list[int], _list(lambda v: _int(v, 0), "integers", distinct=True)]


class Runtime(Section):
    threads: PosInt
    cpu_paths: Annotated[Literal["native", "portable"], choice("native", "portable")] = "native"  # stages/runtime.py


class Datasets(Section):
    seed: NonNegInt
    n_train: PosInt
    n_test: PosInt


# train -------------------------------------------------------------------------------------

def _betas(value: Any) -> tuple[float, float]:
    """AdamW's (beta1, beta2): two real numbers (not strings, not booleans) in [0, 1), as stages/pipeline/train.py."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in value)):
        raise _bad(f"must be a list of two numbers in [0, 1), got {value!r}")
    return float(value[0]), float(value[1])


def _n_checkpoints(value: Any) -> int:
    n = _int(value, 1)
    if n > MAX_CHECKPOINTS:
        raise _bad(f"must be at most {MAX_CHECKPOINTS}, got {n}")
    return n


Schedule = Annotated[Literal["constant", "cosine", "linear"], choice(*LR_SCHEDULES)]
Betas = Annotated[tuple[float, float], PlainValidator(_betas)]
NCheckpoints = Annotated[int, PlainValidator(_n_checkpoints)]


class TrainSettings(Section):
    """``train.defaults``: every key a run needs (stages/pipeline/train.py); optional ones carry the stage's default."""

    steps: PosInt
    lr: PosFloat
    weight_decay: NonNegFloat
    batch_size: PosInt
    warmup: NonNegInt
    schedule: Schedule
    min_lr_ratio: Fraction = 0.0
    betas: Betas
    grad_clip: NonNegFloat
    dropout: Fraction = 0.0
    device: Device
    n_checkpoints: NCheckpoints  # at most MAX_CHECKPOINTS; at most steps + 1 is checked per run
    log_fraction: Fraction
    log_until: Fraction
    eval_batch_size: PosInt
    eval_train_max: PosInt = 4096
    precision: Precision = "auto"

    def record(self) -> dict:
        """The keys params.yaml set (defaults it left out stay out), JSON-ready: what a run's manifest records."""
        out = self.model_dump(exclude_unset=True)
        if "betas" in out:
            out["betas"] = list(out["betas"])
        return out


# Overrides of ``train.defaults``: any of its keys, with its type and range, all optional (absent = not
# overridden; an explicit null is an error, as for the defaults' optional keys).
Overrides = create_model("Overrides", __base__=Section, __doc__="Overrides of ``train.defaults``: any of its keys, all optional.",
                         **{name: (Annotated[(field.annotation, *field.metadata)], None)
                            for name, field in TrainSettings.model_fields.items()})


class TaskOverrides(Section):
    """``train.tasks.<task>``: ``all`` for every level of the task, then the level's own block (null or
    missing = none). Distinct keys, so that a run's dvc.yaml params track ``all`` and its own level only."""

    all: Optional[Overrides] = None
    easy: Optional[Overrides] = None
    medium: Optional[Overrides] = None
    hard: Optional[Overrides] = None

    @classmethod
    def _hint(cls, key: str, known: list[str]) -> str:
        if key in TrainSettings.model_fields:
            return "task-wide settings go under 'all', per-level ones under 'easy', 'medium' or 'hard'"
        return super()._hint(key, known)


def train_tasks_model(tasks: dict[str, Task]) -> type[Section]:
    """``train.tasks`` of the registered ``tasks``: a task missing or null has no overrides."""
    return create_model("TrainTasks", __base__=Section, __doc__="``train.tasks``: a task missing or null has no overrides.",
                        **{_attribute(t.name): (Optional[TaskOverrides], Field(None, alias=t.name))
                           for t in tasks.values()})


TrainTasks = train_tasks_model(TASKS)


class Train(Section):
    defaults: TrainSettings
    tasks: TrainTasks = TrainTasks()

    def key_of(self, task: str, level: str, name: str) -> str:
        """The YAML path that sets ``name`` for one run: its level's block, else ``all``, else the defaults."""
        over = self.tasks.entry(task)
        for part in (level, "all"):
            block = None if over is None else over.entry(part)
            if block is not None and name in block.model_fields_set:
                return f"train.tasks.{task}.{part}.{name}"
        return f"train.defaults.{name}"

    def resolve(self, task: str, level: str) -> TrainSettings:
        """One run's settings: defaults, then ``train.tasks.<task>.all``, then ``train.tasks.<task>.<level>``.

        Keys params.yaml leaves out stay unset in the result (their defaults apply), so
        ``resolve(...).model_dump(exclude_unset=True)`` holds exactly the keys written in those blocks."""
        merged = self.defaults.model_dump(exclude_unset=True)
        over = self.tasks.entry(task)
        for part in ("all", level):
            block = None if over is None else over.entry(part)
            if block is not None:
                merged.update(block.model_dump(exclude_unset=True))
        return TrainSettings.model_validate(merged)


# extract, measures -------------------------------------------------------------------------

class Extract(Section):
    probe_size: PosInt
    positions: Annotated[Literal["first", "all"], choice(*POSITIONS)]
    batch_size: PosInt
    device: Device = "auto"
    precision: Precision = "auto"


class Probe(Section):
    train_fraction: Fraction
    C: PosFloat
    max_iter: PosInt


class Measures(Section):
    device: Device = "auto"
    probe: Probe
    rankme_chunk: OptPosInt = None  # matrices per SVD call; default from a memory budget


# events ------------------------------------------------------------------------------------

def _layer(value: Any) -> Union[str, int]:
    if value in ("last", "mean") and isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise _bad(f"must be 'last', 'mean' or a layer number, got {value!r}")


def _resolution(value: Any) -> int:
    n = _int(value, 0)
    if n == 1:
        raise _bad("must be 0 (as trained) or at least 2, got 1")
    return n


class Bootstrap(Section):
    resamples: NonNegInt
    seed: NonNegInt


class Sensitivity(Section):
    min_lead: Annotated[list[float], _list(_share_below_one, "shares in [0, 1)")]
    n_checkpoints: Annotated[list[int], _list(_resolution, "checkpoint counts (0 = as trained)")]


class Events(Section):
    measure: Annotated[Literal["rankme", "rankme_centred"], choice(*GEOMETRY)]
    layer: Annotated[Union[Literal["last", "mean"], int], PlainValidator(_layer)]
    min_depth: Fraction
    recovery_fraction: Fraction
    acquisition_threshold: Fraction
    acquisition_window: PosInt
    precursor_min_lead: ShareBelowOne
    min_checkpoints: NonNegInt
    bootstrap: Bootstrap
    sensitivity: Sensitivity


# pythia ------------------------------------------------------------------------------------

def _acquisition(value: Any) -> Union[str, float]:
    if value == HALFWAY and isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value < 1:
        return float(value)
    raise _bad(f"must be '{HALFWAY}' or a number in (0, 1), got {value!r}")


def _offline(value: Any) -> Union[str, bool]:
    if value == "auto" and isinstance(value, str) or isinstance(value, bool):
        return value
    raise _bad(f"must be auto, true or false, got {value!r}")


def _repo(value: Any) -> str:
    if not isinstance(value, str) or "{model}" not in value:
        raise _bad(f"must be a string containing {{model}}, got {value!r}")
    return value


def _cache_dir(value: Any) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise _bad(f"must be a path or null, got {value!r}")
    return value


def _revision(value: Any) -> str:
    if not isinstance(value, str) or not _STEP.fullmatch(value):
        raise _bad(f"must be a revision of the form stepN, got {value!r}")
    return value


def _increasing(revisions: list[str], raw) -> None:
    steps = [int(_STEP.fullmatch(r).group(1)) for r in revisions]
    if sorted(set(steps)) != steps:
        raise _bad("must list distinct revisions in increasing step order")


class Evals(Section):
    seed: NonNegInt
    n_per_set: PosInt


def _mixture(value: Any) -> dict[str, float]:
    """Weights of the evaluation-set generators in the training corpus (stages/pythia/grammar.py sentence)."""
    if not isinstance(value, dict) or not value:
        raise _bad(f"must map evaluation-set names to non-negative weights, got {value!r}")
    out = {}
    for name, weight in value.items():
        if name not in EVAL_SETS:
            raise PydanticCustomError("unknown_key", "{hint}", {"hint": f"known: {', '.join(EVAL_SETS)}",
                                                                "at": str(name)})
        try:
            out[name] = _non_negative(weight)
        except PydanticCustomError as exc:
            raise PydanticCustomError(exc.type, exc.message_template, {**(exc.context or {}), "at": name}) from None
    if not any(out.values()):
        raise _bad(f"needs a positive weight, got {value!r}")
    return out


class SuiteModel(Section):
    """``pythia.profiles.<profile>.train.<model>``: one model of the locally trained suite
    (:meth:`Pythia.suite_model`, stages/pipeline/train_suite.py): AdamW, linear warm-up, then a
    cosine from lr to min_lr_ratio x lr, gradient norm clipped at grad_clip (0 = none)."""

    hidden_size: PosInt
    layers: PosInt
    heads: PosInt
    seq_len: PosInt
    steps: PosInt
    batch_size: PosInt
    lr: PosFloat
    warmup: NonNegInt
    seed: NonNegInt
    betas: Betas
    weight_decay: NonNegFloat
    grad_clip: NonNegFloat
    min_lr_ratio: Fraction
    mixture: Annotated[Optional[dict[str, float]], PlainValidator(_mixture)] = None  # default: every set alike

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden_size % self.heads:
            raise _bad(f"must be divisible by heads ({self.heads}), got {self.hidden_size}", at="hidden_size")
        return self


class Profile(Section):
    repo: Annotated[str, PlainValidator(_repo)]
    models: Annotated[Optional[list[str]], _list(_name, "model names")] = None  # the sizes it offers (documentation)
    cache_dir: Annotated[Optional[str], PlainValidator(_cache_dir)] = None  # null: huggingface_hub's cache
    offline: Annotated[Union[Literal["auto"], bool], PlainValidator(_offline)] = "auto"
    revisions: Annotated[list[str], _list(_revision, "stepN revisions", extra=_increasing)]
    train: Annotated[Optional[dict[str, SuiteModel]], BeforeValidator(_not_null)] = None  # local suite only

    @model_validator(mode="after")
    def _train_names(self):
        for name in self.train or {}:
            try:
                _name(name)
            except PydanticCustomError:
                raise _bad("is not a usable model name (letters, digits, '.', '_' or '-')", at=f"train.{name}") from None
        return self

    def repo_id(self, model: str) -> str:
        """The hub repository of ``model``: ``repo`` with ``{model}`` filled in."""
        return self.repo.format(model=model)

    def steps(self) -> list[int]:
        """The training step of every revision, in order (``stepN`` -> N; the schema checked the form)."""
        return [int(_STEP.fullmatch(r).group(1)) for r in self.revisions]


class Pythia(Section):
    profile: str
    models: Annotated[list[str], _list(_name, "model names", distinct=True)]
    evals: Evals
    test_acc: Annotated[str, choice("mean", *EVAL_SETS)]
    acquisition: Annotated[Union[Literal["halfway"], float], PlainValidator(_acquisition)] = HALFWAY
    probe_per_set: PosInt
    batch_size: PosInt
    device: Device = "auto"
    verify: Annotated[Literal["sha256", "size"], choice(*VERIFY)] = "sha256"
    profiles: dict[str, Profile]

    @model_validator(mode="after")
    def _active_profile(self):
        if not self.profiles:
            raise _bad("must map profile names to settings, got {}", at="profiles")
        if not isinstance(self.profile, str) or self.profile not in self.profiles:
            raise _choice(self.profile, sorted(self.profiles), at="profile")
        train = self.profiles[self.profile].train
        if train is not None:
            for i, model in enumerate(self.models):
                if model not in train:
                    raise _bad(f"names '{model}', which has no training settings under 'pythia.profiles."
                               f"{self.profile}.train' (the local suite trains: {', '.join(train)})", at=f"models[{i}]")
        return self

    def active(self) -> Profile:
        """The profile ``pythia.profile`` names (the schema checked that it exists)."""
        return self.profiles[self.profile]

    def suite_model(self, model: str, profile: str = "local") -> SuiteModel:
        """The training settings of ``model`` in the locally trained suite ``pythia.profiles.<profile>.train``;
        a profile or model without them is a one-line error naming the key."""
        key = f"pythia.profiles.{profile}"
        if profile not in self.profiles:
            raise PipelineError(f"missing key '{key}' (no '{profile}' under 'pythia.profiles')")
        train = self.profiles[profile].train or {}
        if model not in train:
            raise PipelineError(f"model '{model}' has no training settings under '{key}.train'"
                                + (f" (the local suite trains: {', '.join(train)})" if train else ""))
        return train[model]


# landscape ---------------------------------------------------------------------------------
# A new key in params.yaml needs its line here (unknown keys are errors). The cross-key rules are
# validators of the section; the one that needs the model (hessian.k below its parameter count)
# stays in stages/pipeline/landscape.py.

def _nbeta(value: Any) -> Union[str, float]:
    if value == "auto" and isinstance(value, str):
        return value
    try:
        return _positive(value)
    except PydanticCustomError:
        raise _bad(f"must be auto or a positive number, got {value!r}") from None


class Grad(Section):
    samples: PosInt
    chunk: PosInt
    sketch_dim: NonNegInt  # 0 = exact
    cov_rtol: Fraction


class Hessian(Section):
    samples: PosInt
    k: PosInt
    tol: NonNegFloat
    maxiter: PosInt
    repeats: PosInt


class LLC(Section):
    samples: PosInt
    batch_size: PosInt
    chains: PosInt
    draws: PosInt
    burn_in: NonNegInt
    lr: PosFloat
    gamma: NonNegFloat
    nbeta: Annotated[Union[Literal["auto"], float], PlainValidator(_nbeta)]
    max_drift: PosFloat


MIN_RECORDED_DRAWS = 8  # LLC draws after burn-in the stationarity check needs (two halves of >= 4)


class Follow(Section):
    """``landscape.follow``: measure past the window until every rise has peaked (stages/pipeline/landscape.py)."""
    extra: NonNegInt = 0     # at most this many checkpoints past the window (0 = never follow)
    settle: PosInt = 2       # a rise has peaked when this many measured checkpoints follow its maximum
    ratio: float = Field(1.5, gt=1.0)  # geometric spacing of the followed checkpoints


class Landscape(Section):
    measures: Annotated[list[str], _list(_one_of(LANDSCAPE_MEASURES), "landscape measures")]
    device: Device
    threads: NonNegInt  # 0 = torch's default
    workers: PosInt = 1  # processes measuring checkpoints in parallel (CPU); results do not depend on it
    max_checkpoints: NonNegInt  # 0 = no cap
    after_acquisition: NonNegInt
    follow: Follow = Follow()
    seed: NonNegInt
    grad: Grad
    hessian: Hessian
    llc: LLC
    # refuse a run whose estimated peak memory (all workers) exceeds this many GiB (stages/pipeline/landscape.py);
    # auto: 80% of the device's memory (the GPU's, or the machine's RAM on the CPU)
    memory_gb: Annotated[Union[Literal["auto"], float], PlainValidator(_nbeta)] = "auto"

    @model_validator(mode="after")
    def _enough(self):
        if self.llc.batch_size > self.llc.samples:
            raise _bad(f"= {self.llc.batch_size} exceeds 'landscape.llc.samples' = {self.llc.samples} (SGLD draws its "
                       f"minibatches from those samples): at most {self.llc.samples}", at="llc.batch_size")
        if self.llc.draws - self.llc.burn_in < MIN_RECORDED_DRAWS:
            raise _bad(f"({self.llc.draws}) must exceed 'landscape.llc.burn_in' ({self.llc.burn_in}) by at least "
                       f"{MIN_RECORDED_DRAWS} (the stationarity check compares two halves of the recorded draws)",
                       at="llc.draws")
        if "gradcov_rank" in self.measures and self.grad.samples < 2:
            raise _bad("must be at least 2 for gradcov_rank", at="grad.samples")
        return self


def _directions(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise _bad(f"must map measure names to dip or rise, got {value!r}")
    for measure, direction in value.items():
        if not isinstance(measure, str):
            raise _bad(f"must map measure names to dip or rise, got the key {measure!r}")
        if direction not in DIRECTIONS or not isinstance(direction, str):
            raise _choice(direction, DIRECTIONS, at=measure)
    return dict(value)


class LandscapeEvents(Section):
    directions: Annotated[dict[str, Literal["dip", "rise"]], PlainValidator(_directions)]
    rise_fraction: Fraction
    min_rise: Fraction
    noise_factor: NonNegFloat
    erank_saturation: Fraction


# the file ----------------------------------------------------------------------------------

class Params(Section):
    """The whole of params.yaml; only ``pythia`` may be left out (no Pythia runs then)."""

    grid: Grid
    runtime: Runtime
    datasets: Datasets
    tasks: Tasks
    train: Train
    extract: Extract
    measures: Measures
    events: Events
    pythia: Annotated[Optional[Pythia], BeforeValidator(_not_null)] = None
    landscape: Landscape
    landscape_events: LandscapeEvents


def input_space(task: str, knobs: dict) -> tuple[int, str]:
    """(number of distinct inputs, the knob that sets it) of a task level (its knob model's ``space``), as
    the task's ``Layout.space_size`` (stages/tasks/registry.py; tests/test_reliability.py checks they agree)."""
    return TASKS[task].knobs.model_construct(**knobs).space()


def split_sizes(task: str, knobs: dict, datasets: Datasets) -> tuple[int, int, int]:
    """(input space, train examples, test examples) that stage ``generate`` makes of a task level
    (stages/tasks/dataset.py: ``train_fraction`` enumerates the space, else ``n_train`` + ``n_test``)."""
    space, _ = input_space(task, knobs)
    if knobs.get("train_fraction") is not None:
        n_train = int(round(knobs["train_fraction"] * space))
        return space, n_train, space - n_train
    return space, knobs.get("n_train") or datasets.n_train, knobs.get("n_test") or datasets.n_test


def _smallest(knob_value: int, fits) -> int | None:
    """The smallest value above ``knob_value`` (up to 10**6) for which ``fits(value)`` holds, or None."""
    value = knob_value + 1
    while value <= 10**6:
        if fits(value):
            return value
        value = value + 1 if value < 64 else int(value * 1.05) + 1
    return None


def check_sizes(params: "Params") -> None:
    """What extract and the probes need of every task level the grid generates, at params time
    (issue 23): each split non-empty and no larger than the input space, at least
    ``extract.probe_size`` test examples (the probe set), and a probe set that
    ``measures.probe.train_fraction`` splits into two non-empty parts. A difficulty knob too small
    fails naming the key and the smallest value that fits."""
    probe = params.extract.probe_size
    fit_rows = int(round(params.measures.probe.train_fraction * probe))
    if not 0 < fit_rows < probe:
        raise PipelineError(f"params.yaml: 'measures.probe.train_fraction' = {params.measures.probe.train_fraction} "
                            f"splits the {probe} probe rows ('extract.probe_size') into {fit_rows} that fit the "
                            f"probe and {probe - fit_rows} that score it: expected both non-empty, i.e. a fraction "
                            f"in [{0.5 / probe:.4g}, {1 - 0.5 / probe:.4g}]")
    for task in params.grid.tasks:
        for level in params.grid.levels:
            key = f"tasks.{task}.{level}"
            knobs = params.tasks.knobs(task, level)
            space, n_train, n_test = split_sizes(task, knobs, params.datasets)
            _, knob = input_space(task, knobs)
            if knobs.get("train_fraction") is None and space < n_train + n_test:
                raise PipelineError(f"params.yaml: '{key}' has only {space} distinct inputs, fewer than n_train + "
                                    f"n_test = {n_train + n_test}; set '{key}.train_fraction' or lower the sizes")
            if n_train <= 0 or n_test <= 0:
                raise PipelineError(f"params.yaml: '{key}.train_fraction' leaves an empty split ({n_train} of "
                                    f"{space} inputs train)")
            if n_test < probe:
                if knobs.get("train_fraction") is None:
                    where = f"'{key}.n_test'" if knobs.get("n_test") else "'datasets.n_test'"
                    raise PipelineError(f"params.yaml: {where} = {n_test} is below 'extract.probe_size' = {probe} "
                                        f"(the probe set is the first {probe} test examples of {key}): at least {probe}")
                smallest = _smallest(knobs[knob], lambda v: split_sizes(task, {**knobs, knob: v}, params.datasets)[2]
                                     >= probe)
                need = f"{knob} must be at least {smallest}" if smallest else "lower 'extract.probe_size'"
                raise PipelineError(f"params.yaml: '{key}.{knob}' = {knobs[knob]} leaves {n_test} test examples "
                                    f"({space} inputs, train_fraction {knobs['train_fraction']}), fewer than "
                                    f"'extract.probe_size' = {probe} needs for the probe set: {need}")


def validate_params(data: dict, source: str = "params.yaml") -> Params:
    """``data`` (params.yaml as loaded) as a :class:`Params`; a :class:`PipelineError` with one line
    naming the full YAML path of the first error otherwise. ``source`` starts the message."""
    try:
        params = Params.model_validate(data)
    except ValidationError as exc:
        raise PipelineError(_message(exc.errors()[0], source)) from None
    try:
        check_sizes(params)
    except PipelineError as exc:
        raise PipelineError(str(exc).replace("params.yaml: ", f"{source}: ", 1)) from None
    return params


def load_params(path: str | os.PathLike | None = None) -> dict:
    """params.yaml as a plain mapping, after the whole file has passed the schema of
    :mod:`stages.params` (unknown keys, types, ranges; the one-line error names the YAML path)."""
    data, path = read_params(path)
    validate_params(data, source=str(path))
    return data


def load_typed_params(path: str | os.PathLike | None = None) -> Params:
    """params.yaml as a validated :class:`stages.params.Params` (read and validated once): what every
    stage's ``main`` passes down."""
    data, path = read_params(path)
    return validate_params(data, source=str(path))


def main(argv=None) -> None:
    """``python -m stages.params [FILE]``: validate params.yaml (or FILE) as every stage does; one line
    either way. Run it before ``dvc exp run``/``dvc repro``: DVC resolves dvc.yaml first and answers a
    mistyped grid entry with a page of its own messages."""
    import sys

    from stages.errors import main_guard

    args = list(sys.argv[1:] if argv is None else argv)
    source = args[0] if args else None
    params = main_guard(load_typed_params)(source)
    runs = len(params.grid.tasks) * len(params.grid.levels) * len(params.grid.models) * len(params.grid.seeds)
    print(f"{source or 'params.yaml'}: valid ({runs} grid runs)")


if __name__ == "__main__":
    main()
