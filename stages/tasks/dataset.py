"""Deterministic, disjoint train/test splits for one task at one difficulty level."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from stages.errors import PipelineError
from stages.params import task_knobs
from stages.tasks.registry import LEVELS, SPECIALS, Layout, get_task, layout as task_layout, special

ENUMERATE_LIMIT = 2_000_000  # input spaces up to this size are enumerated, not sampled


@dataclass
class Dataset:
    task: str
    level: str
    knobs: dict
    seed: int
    n_symbols: int
    train_prompt: np.ndarray
    train_answer: np.ndarray
    test_prompt: np.ndarray
    test_answer: np.ndarray

    @property
    def vocab_size(self) -> int:
        return self.n_symbols + len(SPECIALS)

    @property
    def tokens(self) -> list[str]:
        return [str(i) for i in range(self.n_symbols)] + list(SPECIALS)

    def meta(self) -> dict:
        return {
            "task": self.task,
            "level": self.level,
            "knobs": self.knobs,
            "seed": self.seed,
            "n_symbols": self.n_symbols,
            "vocab_size": self.vocab_size,
            "prompt_len": int(self.train_prompt.shape[1]),
            "answer_len": int(self.train_answer.shape[1]),
            "n_train": int(len(self.train_prompt)),
            "n_test": int(len(self.test_prompt)),
            "tokens": self.tokens,
        }


def _rng(seed: int, task: str, level: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(task.encode()), zlib.crc32(level.encode())])


def _decode(index: np.ndarray, radices) -> np.ndarray:
    out = np.empty((len(index), len(radices)), dtype=np.int64)
    rest = index.astype(np.int64)
    for j in range(len(radices) - 1, -1, -1):
        rest, out[:, j] = np.divmod(rest, radices[j])
    return out


def _unique_sample(rng, layout: Layout, n: int) -> np.ndarray:
    """``n`` distinct input vectors, in the order they were first drawn."""
    chosen = np.empty((0, len(layout.radices)), dtype=np.int64)
    seen: set[bytes] = set()
    radices = np.asarray(layout.radices)
    while len(chosen) < n:
        draw = rng.integers(0, radices, size=(max(2 * (n - len(chosen)), 64), len(radices)))
        keep = []
        for i, row in enumerate(draw):
            key = row.tobytes()
            if key not in seen:
                seen.add(key)
                keep.append(i)
        chosen = np.concatenate([chosen, draw[keep]])
    return chosen[:n]


def build_dataset(task: str, level: str, knobs: dict, seed: int, n_train: int, n_test: int) -> Dataset:
    """Build the splits. ``knobs`` may override ``n_train``/``n_test`` or set ``train_fraction``
    (then the whole input space is enumerated, ``train_fraction`` of it trains, the rest tests)."""
    key = f"tasks.{task}.{level}"
    get_task(task)
    if level not in LEVELS:
        raise PipelineError(f"unknown level '{level}' (choose from: {', '.join(LEVELS)})")
    checked = task_knobs(task, level, knobs)  # the schema's check, for callers that bypass params.yaml
    layout = task_layout(task, checked)
    n_train = n_train if checked.n_train is None else checked.n_train
    n_test = n_test if checked.n_test is None else checked.n_test
    rng = _rng(seed, task, level)
    space = layout.space_size

    if checked.train_fraction is not None:
        frac = checked.train_fraction
        if space > ENUMERATE_LIMIT:
            raise PipelineError(f"'{key}.train_fraction' needs an input space of at most {ENUMERATE_LIMIT}, this one has {space}")
        inputs = _decode(rng.permutation(space), layout.radices)
        n_train = int(round(frac * space))
        if not 0 < n_train < space:
            raise PipelineError(f"'{key}.train_fraction' leaves an empty split ({n_train} of {space} inputs)")
        train_x, test_x = inputs[:n_train], inputs[n_train:]
    else:
        if space < n_train + n_test:
            raise PipelineError(
                f"'{key}' has only {space} distinct inputs, fewer than n_train + n_test = {n_train + n_test}; "
                f"set '{key}.train_fraction' or lower the sizes")
        if space <= ENUMERATE_LIMIT:
            inputs = _decode(rng.choice(space, size=n_train + n_test, replace=False), layout.radices)
        else:
            inputs = _unique_sample(rng, layout, n_train + n_test)
        train_x, test_x = inputs[:n_train], inputs[n_train:]

    sep = special("=", layout.n_symbols)

    def render(x):
        prompt, answer = layout.render(x)
        prompt = np.concatenate([prompt, np.full((len(x), 1), sep)], axis=1)
        return prompt.astype(np.int32), answer.astype(np.int32)

    trp, tra = render(train_x)
    tep, tea = render(test_x)
    return Dataset(task, level, dict(knobs), seed, layout.n_symbols, trp, tra, tep, tea)
