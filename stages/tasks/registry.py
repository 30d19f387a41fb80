"""Task generators: for every task registered in :data:`stages.params.TASKS`, the function of the same
name builds its :class:`Layout` from the task's knob model (checked by the schema).

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

from stages.config import choose
from stages.params import (LEVELS, TASKS, DigitsKnobs, Knobs, ModKnobs, MulKnobs, ParityKnobs,  # noqa: F401
                           SequenceKnobs, Task)  # LEVELS: re-exported

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


# The generators: one per task of stages.params.TASKS, named after it, taking the task's knob model
# (checked by the schema) and returning its Layout.

def copy(k: SequenceKnobs) -> Layout:
    return Layout((k.alphabet,) * k.length, k.alphabet, lambda x: (x, x.copy()))


def reverse(k: SequenceKnobs) -> Layout:
    return Layout((k.alphabet,) * k.length, k.alphabet, lambda x: (x, x[:, ::-1].copy()))


def sort(k: SequenceKnobs) -> Layout:
    return Layout((k.alphabet,) * k.length, k.alphabet, lambda x: (x, np.sort(x, axis=1)))


def parity(k: ParityKnobs) -> Layout:
    return Layout((2,) * k.length, 2, lambda x: (x, np.cumsum(x, axis=1) % 2))


def compare(k: DigitsKnobs) -> Layout:
    n = k.digits

    def render(x):
        a, b = undigits(x[:, :n]), undigits(x[:, n:])
        rel = np.where(a < b, special("<", 10), np.where(a == b, special("~", 10), special(">", 10)))
        comma = np.full((len(x), 1), special(",", 10))
        prompt = np.concatenate([x[:, :n], comma, x[:, n:]], axis=1)
        answer = np.concatenate([rel[:, None], digits(np.maximum(a, b), n)], axis=1)
        return prompt, answer

    return Layout((10,) * (2 * n), 10, render)


def add(k: DigitsKnobs) -> Layout:
    n = k.digits

    def render(x):
        a, b = undigits(x[:, :n]), undigits(x[:, n:])
        op = np.full((len(x), 1), special("+", 10))
        return np.concatenate([x[:, :n], op, x[:, n:]], axis=1), digits(a + b, n + 1)

    return Layout((10,) * (2 * n), 10, render)


def mul(k: MulKnobs) -> Layout:
    n, m = k.digits, k.second

    def render(x):
        a, b = undigits(x[:, :n]), undigits(x[:, n:])
        op = np.full((len(x), 1), special("*", 10))
        return np.concatenate([x[:, :n], op, x[:, n:]], axis=1), digits(a * b, n + m)

    return Layout((10,) * (n + m), 10, render)


MOD_OPS = {"add": ("+", np.add), "sub": ("-", np.subtract), "mul": ("*", np.multiply)}


def mod(k: ModKnobs) -> Layout:
    p = k.modulus
    symbol, fn = MOD_OPS[k.op]

    def render(x):
        op = np.full((len(x), 1), special(symbol, p))
        return np.concatenate([x[:, :1], op, x[:, 1:]], axis=1), (fn(x[:, :1], x[:, 1:]) % p)

    return Layout((p, p), p, render)


def get_task(name: str) -> Task:
    """The registration of task ``name`` (stages.params.TASKS); an unknown name is a one-line error."""
    return TASKS[choose(name, TASKS, "task")]


def layout(task: str, knobs: Knobs) -> Layout:
    """The layout of ``task`` at the checked ``knobs`` (its knob model, as
    ``stages.params.task_knobs`` returns it): the output of its generator, the function named after it here."""
    return globals()[get_task(task).name](knobs)
