"""Stage ``pythia_measure``: per revision of one model, accuracy on the evaluation sets, hidden states
of every layer, RankMe per layer and linear-probe accuracy, in the small models' formats.

Writes, for run ``pythia-lm-<model>``:

* ``data/hidden/<run>.parquet``: last-token hidden state of every layer (0 = embeddings) for the
  probe set (the first ``pythia.probe_per_set`` items of each set with a context, interleaved), one
  row group per revision, schema of stages/io/hidden.py; ``label`` codes the item's right answer;
* ``data/measures/<run>.csv``: run, step, layer, rankme, rankme_centred, mean_dominance, varies,
  probe_acc, test_acc, n_params, where
  step is the revision's training step and test_acc is the **chance-corrected** accuracy on
  ``pythia.test_acc`` (``mean``, the default, averages all eight sets; or one set's name): per set
  ``(accuracy - chance) / (1 - chance)``, 0 at the set's chance level, 1 at perfect, negative below
  chance. The sets' chance levels differ (1/2 to about 1/4), so raw accuracies would not share a
  scale; corrected, a ``test_acc`` of 0.5 means halfway from chance to perfect on average;
* ``data/pythia/accuracy/<run>.csv``: run, step, revision, eval_set, accuracy, n_items, chance
  (raw accuracy; chance is the set's mean over its items of ``1 / number of choices``);
* ``plots/trajectories/<run>.csv``: as for the small models (stages/analysis/trajectories.py).
"""
from __future__ import annotations

if __name__ == "__main__":  # a stage process: its environment before numpy and torch load (stages/runtime.py)
    from stages.runtime import prepare
    prepare()

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch
from tqdm import tqdm
from transformers.utils import logging as hf_logging
from transformers import AutoModelForCausalLM, AutoTokenizer

from stages import paths
from stages.analysis.trajectories import trajectory
from stages.errors import PipelineError
from stages.io.atomic import atomic_path, output_set
from stages.io.hidden import schema, step_table
from stages.io.tables import write_csv
from stages.measures.probes import probe_accuracy, split_mask
from stages.measures.rankme import geometry
from stages.pythia import evalsets, hub, scoring
from stages.pythia.grammar import GENERATORS
from stages.pythia.paths import EVALS_FILE, accuracy_file, manifest_file
from stages.pythia.probe_set import chance_corrected, probe_set  # noqa: F401 -- re-exported: stage and monitor share them
from stages.pythia.settings import pythia_run_id, section
from stages.pythia.rotary import pin_rotary
from stages.params import Params, Probe, Pythia
from stages.training.device import resolve_device
from stages.pipeline import stage

hf_logging.disable_progress_bar()  # one tqdm bar per stage, not one per saved or loaded file


def load(manifest: dict, entry: dict, device):
    """Tokenizer and model of one revision. Weights load only from safetensors: a snapshot holding only
    pickle weights (``pytorch_model.bin``, which can run code when unpickled) is refused."""
    snapshot = hub.snapshot_path(manifest, entry)
    where = f"model '{manifest['repo_id']}' revision '{entry['revision']}'"
    if not any(snapshot.glob("*.safetensors")):
        bin_weights = sorted(p.name for p in snapshot.glob("*.bin"))
        found = f"it holds only pickle weights ({', '.join(bin_weights)})" if bin_weights else "it holds no weights"
        raise PipelineError(f"{where}: no safetensors weights in {snapshot}: {found}; weights load only from "
                            "safetensors (convert the revision, or pick one that has them)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(snapshot)
        model = AutoModelForCausalLM.from_pretrained(snapshot, use_safetensors=True).to(device).eval()
    except (OSError, ValueError) as exc:
        raise PipelineError(f"{where}: cannot load {snapshot} ({' '.join(str(exc).split())})") from None
    pin_rotary(model)  # cos/sin off MKL's vector math on the CPU: the same bits on any vendor's CPU
    return model, tokenizer


def measure(model_name: str, cfg: Pythia, probe_cfg: Probe,
            progress: bool = True, portable: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measures and accuracies of every revision of ``model_name``, with the ``pythia`` settings ``cfg``
    and the linear probe's ``measures.probe`` settings ``probe_cfg``; ``portable``: ``runtime.cpu_paths:
    portable`` (:func:`stages.measures.rankme.geometry`)."""
    rid = pythia_run_id(model_name)
    which = cfg.test_acc
    if which != "mean" and which not in GENERATORS:  # the schema's list of sets is a copy of GENERATORS
        raise PipelineError(f"unknown pythia.test_acc '{which}' (choose from: mean, {', '.join(GENERATORS)})")
    per_set, batch_size = cfg.probe_per_set, cfg.batch_size
    device = resolve_device(cfg.device, "pythia.device")
    train_fraction, probe_c, probe_iter = probe_cfg.train_fraction, probe_cfg.C, probe_cfg.max_iter

    manifest = hub.read_manifest(manifest_file(model_name))
    items = evalsets.read(EVALS_FILE)
    probe = probe_set(items, per_set)
    if len(probe) < 4:
        raise PipelineError(f"'pythia.probe_per_set' = {per_set} leaves {len(probe)} probe items: too few")
    samples = np.arange(len(probe))
    chance = pd.Series(scoring.chance(items)).groupby(items["eval_set"].values).mean()
    mask = split_mask(samples, train_fraction)

    rows, acc_rows, writer, sch = [], [], None, None
    out = paths.hidden_file(rid)
    with atomic_path(out) as tmp:
        try:
            for entry in tqdm(manifest["revisions"], desc=f"pythia_measure {rid}", disable=not progress):
                step = int(entry["step"])
                model, tokenizer = load(manifest, entry, device)
                n_params = sum(p.numel() for p in model.parameters())
                correct = scoring.accuracy(items, scoring.choice_loglik(model, tokenizer, items, batch_size, device))
                by_set = pd.Series(correct).groupby(items["eval_set"].values).agg(["mean", "size"])
                for name, r in by_set.iterrows():
                    acc_rows.append({"run": rid, "step": step, "revision": entry["revision"], "eval_set": name,
                                     "accuracy": float(r["mean"]), "n_items": int(r["size"]),
                                     "chance": float(chance[name])})
                corrected = chance_corrected(by_set["mean"], chance[by_set.index])
                test_acc = float(corrected.mean()) if which == "mean" else float(corrected.loc[which])

                states = scoring.last_token_states(model, tokenizer, list(probe["context"]), batch_size, device)
                if writer is None:
                    sch = schema(states.shape[-1], {"run": rid, "manifest": json.dumps(
                        {"run": rid, "model_name": model_name, "repo_id": manifest["repo_id"], "n_params": n_params,
                         "steps": [int(e["step"]) for e in manifest["revisions"]]})})
                    writer = pq.ParquetWriter(tmp, sch)
                positions = np.asarray([len(tokenizer(c, add_special_tokens=False)["input_ids"])
                                        for c in probe["context"]])
                writer.write_table(step_table(step, states, samples, positions, probe["label"].to_numpy(), sch))
                geo = geometry(torch.as_tensor(states), device=device, portable=portable)
                for layer in range(len(states)):
                    rows.append({"run": rid, "step": step, "layer": layer,
                                 **{k: v[layer].item() for k, v in geo.items()},
                                 "probe_acc": probe_accuracy(states[layer], probe["label"].to_numpy(), mask,
                                                             probe_c, probe_iter),
                                 "test_acc": test_acc, "n_params": n_params, "dim": states.shape[-1],
                                 "n_checkpoints": len(manifest["revisions"])})
                del model
        finally:
            if writer is not None:
                writer.close()
    return pd.DataFrame(rows), pd.DataFrame(acc_rows)


@stage("model")
def main(args, params: Params) -> None:
    rid = pythia_run_id(args.model)
    cfg = section(params, "pythia.test_acc")
    with output_set():  # the hidden states and the three tables, or none of them
        frame, acc = measure(args.model, cfg, params.measures.probe,
                             portable=params.runtime.cpu_paths == "portable")
        write_csv(acc, accuracy_file(rid))
        write_csv(frame, paths.measures_file(rid))
        write_csv(trajectory(frame), paths.trajectory_file(rid))
    final = acc[acc["step"] == acc["step"].max()]
    print(", ".join(f"{s} {a:.2f}" for s, a in zip(final["eval_set"], final["accuracy"])))
    print(paths.measures_file(rid))


if __name__ == "__main__":
    main()
