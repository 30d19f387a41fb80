"""Stage ``extract``: hidden states of every layer at the answer position(s) -> Parquet.

For each checkpoint of a run, one forward pass of the fixed probe set (the first
``extract.probe_size`` test examples) writes one row group to ``data/hidden/<run>.parquet``;
memory stays flat however many checkpoints there are.
"""
from __future__ import annotations

if __name__ == "__main__":  # a stage process: its environment before numpy and torch load (stages/runtime.py)
    from stages.runtime import prepare
    prepare()

import json

import numpy as np
import pyarrow.parquet as pq
import torch
from tqdm import tqdm

from stages import paths
from stages.config import run_id
from stages.errors import PipelineError
from stages.io.atomic import atomic_path
from stages.io.checkpoints import load_model, read_manifest, verify_checkpoints
from stages.io.datasets import load_split
from stages.io.hidden import schema, step_table
from stages.params import Extract, Params
from stages.training.device import resolve_device
from stages.training.loop import sequences
from stages.training.precision import autocast, resolve_precision
from stages.pipeline import stage



@torch.no_grad()
def hidden_at(model, seq: torch.Tensor, positions: list[int], batch_size: int,
              precision: str = "fp32") -> np.ndarray:
    """``[n_layers + 1, n_samples * len(positions), d]`` float32: rows ordered sample-major."""
    chunks = []
    for start in range(0, len(seq), batch_size):
        with autocast(seq.device, precision):
            _, states = model(seq[start:start + batch_size, :-1], hidden_states=True)
        stacked = torch.stack([s[:, positions] for s in states])  # [L+1, b, P, d]
        chunks.append(stacked.reshape(stacked.shape[0], -1, stacked.shape[-1]).float().cpu())
    return torch.cat(chunks, dim=1).numpy()


def extract(task: str, level: str, model_name: str, seed: int, cfg: Extract, progress: bool = True) -> str:
    """Hidden states of run ``<task>-<level>-<model>-s<seed>`` with the ``extract`` settings ``cfg``."""
    rid = run_id(task, level, model_name, seed)
    probe_size, batch_size, which = cfg.probe_size, cfg.batch_size, cfg.positions
    device = resolve_device(cfg.device, "extract.device")

    ckpt_dir = paths.checkpoint_dir(rid)
    manifest = read_manifest(ckpt_dir)
    prompt, answer, meta = load_split(paths.dataset_dir(task, level), "test")
    if probe_size > len(prompt):
        raise PipelineError(f"'extract.probe_size' = {probe_size} exceeds the {len(prompt)} test examples of "
                            f"{paths.dataset_dir(task, level) / 'test.parquet'}")
    verify_checkpoints(ckpt_dir, manifest)  # every step file against its sha256, once
    precision = resolve_precision(cfg.precision, device, manifest.get("n_params", 0),
                                  "extract.precision")
    prompt, answer = prompt[:probe_size], answer[:probe_size]
    prompt_len = meta["prompt_len"]
    n_answer = answer.shape[1] if which == "all" else 1
    positions = list(range(prompt_len - 1, prompt_len - 1 + n_answer))
    seq = sequences(prompt, answer, device)
    samples = np.repeat(np.arange(len(prompt)), n_answer)
    pos_col = np.tile(np.asarray(positions), len(prompt))
    labels = answer[:, :n_answer].reshape(-1)

    out = paths.hidden_file(rid)
    sch = schema(manifest["model"]["d_model"], {"run": rid, "manifest": json.dumps(
        {k: manifest[k] for k in ("run", "task", "level", "model_name", "model", "n_params", "steps")})})
    with atomic_path(out) as tmp, pq.ParquetWriter(tmp, sch) as writer:
        for step in tqdm(manifest["steps"], desc=f"extract {rid}", disable=not progress, mininterval=2):
            model = load_model(ckpt_dir, step, manifest, device)
            states = hidden_at(model, seq, positions, batch_size, precision)
            writer.write_table(step_table(step, states, samples, pos_col, labels, sch))
    return str(out)


@stage("task", "level", "model", "seed")
def main(args, params: Params) -> None:
    print(extract(args.task, args.level, args.model, args.seed, params.extract))


if __name__ == "__main__":
    main()
