"""Task definitions.

Every task maps a fixed-length vector of input symbols to a fixed-length answer. A
sequence is ``prompt + [SEP] + answer``; the model is trained on the answer tokens only and
scored by exact match of the whole answer. Token ids ``0..n_symbols-1`` are the task's
symbols (digits, letters, residues); the special tokens follow them.

Tasks whose natural answer is a single binary decision are given answers whose chance
level is far below the 50% acquisition threshold: ``parity`` emits the running parity of
the bit string and ``compare`` emits the relation followed by the larger number.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from stages.config import LEVELS, TASK_NAMES, choose, positive_int  # noqa: F401 (LEVELS is re-exported)
from stages.errors import PipelineError

SPECIALS = ("<pad>", "=", "+", "-", "*", "<", "~", ">", ",")  # "~" is the equality relation


def special(name: str, n_symbols: int) -> int:
    return n_symbols + SPECIALS.index(name)


def digits(values: np.ndarray, width: int) -> np.ndarray:
    """Base-10 digits, most significant first, zero padded to ``width``."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return (values[:, None] // powers[None, :]) % 10


def undigits(d: np.ndarray) -> np.ndarray:
    powers = 10 ** np.arange(d.shape[1] - 1, -1, -1, dtype=np.int64)
    return (d.astype(np.int64) * powers).sum(axis=1)


@dataclass(frozen=True)
class Layout:
    """How one task at one level looks: input radices and the rule producing prompts/answers."""

    radices: tuple[int, ...]  # symbol count per input slot
    n_symbols: int
    render: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # inputs -> (prompt, answer)

    @property
    def space_size(self) -> int:
        size = 1
        for r in self.radices:
            size *= int(r)
        return size


def _seq_knobs(knobs: dict, key: str) -> tuple[int, int]:
    length = positive_int(knobs.get("length"), f"{key}.length")
    alphabet = positive_int(knobs.get("alphabet", 10), f"{key}.alphabet")
    return length, alphabet


def _copy(knobs, key):
    length, alphabet = _seq_knobs(knobs, key)
    return Layout((alphabet,) * length, alphabet, lambda x: (x, x.copy()))


def _reverse(knobs, key):
    length, alphabet = _seq_knobs(knobs, key)
    return Layout((alphabet,) * length, alphabet, lambda x: (x, x[:, ::-1].copy()))


def _sort(knobs, key):
    length, alphabet = _seq_knobs(knobs, key)
    return Layout((alphabet,) * length, alphabet, lambda x: (x, np.sort(x, axis=1)))


def _parity(knobs, key):
    length = positive_int(knobs.get("length"), f"{key}.length")
    return Layout((2,) * length, 2, lambda x: (x, np.cumsum(x, axis=1) % 2))


def _two_numbers(knobs, key, first="digits", second="digits"):
    n = positive_int(knobs.get(first), f"{key}.{first}")
    m = positive_int(knobs.get(second, n), f"{key}.{second}")
    if n + m > 18:
        raise PipelineError(f"'{key}' digit counts must add up to at most 18, got {n} + {m}")
    return n, m


def _compare(knobs, key):
    n, _ = _two_numbers(knobs, key)

    def render(x):
        a, b = undigits(x[:, :n]), undigits(x[:, n:])
        rel = np.where(a < b, special("<", 10), np.where(a == b, special("~", 10), special(">", 10)))
        comma = np.full((len(x), 1), special(",", 10))
        prompt = np.concatenate([x[:, :n], comma, x[:, n:]], axis=1)
        answer = np.concatenate([rel[:, None], digits(np.maximum(a, b), n)], axis=1)
        return prompt, answer

    return Layout((10,) * (2 * n), 10, render)


def _add(knobs, key):
    n, _ = _two_numbers(knobs, key)

    def render(x):
        a, b = undigits(x[:, :n]), undigits(x[:, n:])
        op = np.full((len(x), 1), special("+", 10))
        return np.concatenate([x[:, :n], op, x[:, n:]], axis=1), digits(a + b, n + 1)

    return Layout((10,) * (2 * n), 10, render)


def _mul(knobs, key):
    n, m = _two_numbers(knobs, key, "digits", "digits_b")

    def render(x):
        a, b = undigits(x[:, :n]), undigits(x[:, n:])
        op = np.full((len(x), 1), special("*", 10))
        return np.concatenate([x[:, :n], op, x[:, n:]], axis=1), digits(a * b, n + m)

    return Layout((10,) * (n + m), 10, render)


MOD_OPS = {"add": ("+", np.add), "sub": ("-", np.subtract), "mul": ("*", np.multiply)}


def _mod(knobs, key):
    p = positive_int(knobs.get("modulus"), f"{key}.modulus")
    if p < 2:
        raise PipelineError(f"'{key}.modulus' must be at least 2, got {p}")
    op_name = choose(knobs.get("op", "add"), MOD_OPS, f"{key}.op")
    symbol, fn = MOD_OPS[op_name]

    def render(x):
        op = np.full((len(x), 1), special(symbol, p))
        return np.concatenate([x[:, :1], op, x[:, 1:]], axis=1), (fn(x[:, :1], x[:, 1:]) % p)

    return Layout((p, p), p, render)


@dataclass(frozen=True)
class Task:
    name: str
    knobs: tuple[str, ...]
    build: Callable[[dict, str], Layout]
    description: str

    def layout(self, knobs: dict, key: str) -> Layout:
        if not isinstance(knobs, dict):
            raise PipelineError(f"'{key}' must be a mapping of difficulty knobs, got {knobs!r}")
        allowed = set(self.knobs) | {"n_train", "n_test", "train_fraction"}
        for name in knobs:
            if name not in allowed:
                raise PipelineError(f"unknown knob '{key}.{name}' (task {self.name} takes: {', '.join(sorted(allowed))})")
        return self.build(knobs, key)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("copy", ("length", "alphabet"), _copy, "repeat the sequence"),
        Task("reverse", ("length", "alphabet"), _reverse, "repeat the sequence backwards"),
        Task("compare", ("digits",), _compare, "relation of two numbers, then the larger one"),
        Task("parity", ("length",), _parity, "running parity of a bit string"),
        Task("add", ("digits",), _add, "sum of two numbers"),
        Task("mod", ("modulus", "op"), _mod, "(a op b) mod p, one token per residue"),
        Task("sort", ("length", "alphabet"), _sort, "sort the sequence"),
        Task("mul", ("digits", "digits_b"), _mul, "product of two numbers"),
    )
}


if tuple(TASKS) != TASK_NAMES:  # the schema's grid validation (stages/params.py) reads the names there
    raise ImportError(f"stages.config.TASK_NAMES {TASK_NAMES} differs from the tasks {tuple(TASKS)}")


def get_task(name: str) -> Task:
    return TASKS[choose(name, TASKS, "task")]
