"""Stage ``measure``: RankMe and linear-probe accuracy per (checkpoint, layer) of one run.

Reads ``data/hidden/<run>.parquet`` one checkpoint at a time and ``data/history/<run>.csv`` (whose
steps must be those of ``data/checkpoints/<run>/manifest.json``; NaN or inf hidden states stop the
stage with the step and layer);
writes ``data/measures/<run>.csv`` (run, step, layer, rankme, rankme_centred, mean_dominance, varies,
probe_acc, test_acc, n_params; see stages/measures/rankme.py) and the
plot table ``plots/trajectories/<run>.csv`` (one row per step: accuracy, RankMe of every layer,
and RankMe of the last layer relative to its value at the first checkpoint).
"""
from __future__ import annotations

if __name__ == "__main__":  # a stage process: its environment before numpy and torch load (stages/runtime.py)
    from stages.runtime import prepare
    prepare()

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from stages import paths
from stages.analysis.trajectories import trajectory
from stages.config import run_id
from stages.errors import PipelineError
from stages.io.hidden import hidden_manifest, iter_steps
from stages.io.history import accuracy_by_step
from stages.io.atomic import output_set
from stages.io.tables import write_csv
from stages.measures.probes import probe_accuracy, split_mask
from stages.measures.rankme import geometry
from stages.params import Measures, Params
from stages.training.device import resolve_device
from stages.pipeline import stage


def measure(rid: str, cfg: Measures, progress: bool = True, portable: bool = False) -> pd.DataFrame:
    """One row per (checkpoint, layer) of run ``rid``, with the ``measures`` settings ``cfg``; ``portable``:
    ``runtime.cpu_paths: portable`` (:func:`stages.measures.rankme.geometry`)."""
    train_fraction, probe_c, probe_iter = cfg.probe.train_fraction, cfg.probe.C, cfg.probe.max_iter
    device = resolve_device(cfg.device, "measures.device")
    chunk = cfg.rankme_chunk  # matrices per SVD call; None: default from a memory budget
    acc = accuracy_by_step(rid)

    hidden = paths.hidden_file(rid)
    n_params = hidden_manifest(hidden).get("n_params")
    rows = []
    for step, layers in tqdm(iter_steps(hidden), desc=f"measure {rid}", disable=not progress, mininterval=2):
        order = sorted(layers)
        for l in order:
            if not np.isfinite(layers[l].vectors).all():
                raise PipelineError(f"corrupt Parquet file: {hidden} (step {step} layer {l}: hidden states hold "
                                    "NaN or inf; did training diverge?)")
        stack = torch.as_tensor(np.stack([layers[l].vectors for l in order]))
        geo = geometry(stack, device=device, chunk=chunk, portable=portable)
        for i, l in enumerate(order):
            st = layers[l]
            mask = split_mask(st.samples, train_fraction)
            rows.append({"run": rid, "step": step, "layer": l, **{k: v[i].item() for k, v in geo.items()},
                         "probe_acc": probe_accuracy(st.vectors, st.labels, mask, probe_c, probe_iter),
                         "test_acc": acc.get(step, np.nan), "n_params": n_params,
                         "dim": st.vectors.shape[1]})
    if not rows:
        raise PipelineError(f"corrupt Parquet file: {hidden} (no checkpoints in it)")
    frame = pd.DataFrame(rows)
    frame["n_checkpoints"] = frame["step"].nunique()  # in every row: readers refuse a table with fewer steps
    return frame


@stage("task", "level", "model", "seed")
def main(args, params: Params) -> None:
    rid = run_id(args.task, args.level, args.model, args.seed)
    frame = measure(rid, params.measures, portable=params.runtime.cpu_paths == "portable")
    with output_set():  # both tables or neither
        write_csv(frame, paths.measures_file(rid))
        write_csv(trajectory(frame), paths.trajectory_file(rid))
    print(paths.measures_file(rid))


if __name__ == "__main__":
    main()
