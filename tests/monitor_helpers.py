"""Tiny causal LMs and checkpoint folders for the monitor tests (built here, nothing downloaded)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from stages.pythia import evalsets, suite

TINY = {"hidden_size": 16, "layers": 2, "heads": 2, "seq_len": 64}


def tokenizer():
    return suite.build_tokenizer()


def tiny_model(tok, seed: int = 0):
    return suite.build_model(tok, TINY, seed)


def save_checkpoint(folder: Path, model, tok, step: int | None = None, trainer_state: bool = True) -> Path:
    """``save_pretrained`` (safetensors) + tokenizer (+ the Trainer's trainer_state.json)."""
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    if trainer_state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return folder


def trainer_dir(root: Path, steps=(0, 2, 4), seed: int = 0) -> Path:
    """A Trainer-style output folder: ``checkpoint-N`` with differently initialised tiny models."""
    tok = tokenizer()
    for i, step in enumerate(steps):
        save_checkpoint(Path(root) / f"checkpoint-{step}", tiny_model(tok, seed + i), tok, step)
    return Path(root)


def evals_file(path: Path, n_per_set: int = 4) -> Path:
    evalsets.write(evalsets.generate(n_per_set, 0), path)
    return Path(path)


def measure_args(out: Path, evals: Path, *extra) -> list[str]:
    return ["--evals", str(evals), "--per-set", "3", "--out", str(out), "--device", "cpu", "--poll", "0.05",
            "--settle", "0.2", *map(str, extra)]


def table_readings(frame: pd.DataFrame):
    """``(step, {layer: measures}, accuracy)`` per checkpoint of a measures table."""
    for step, g in frame.sort_values(["step", "layer"]).groupby("step", sort=True):
        geo = {int(r["layer"]): {"rankme": r["rankme"], "rankme_centred": r["rankme_centred"],
                                 "mean_dominance": r.get("mean_dominance", np.nan),
                                 "varies": str(r["varies"]).lower() in ("true", "1")} for r in g.to_dict("records")}
        acc = float(g["test_acc"].iloc[0])
        yield int(step), geo, (acc if np.isfinite(acc) else None)
