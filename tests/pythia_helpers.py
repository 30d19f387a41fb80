"""Tiny GPT-NeoX checkpoints in a temporary HF cache layout, for the Pythia-branch tests."""
from __future__ import annotations

import copy

from stages.pythia import local_hub, suite

TINY = {"hidden_size": 16, "layers": 1, "heads": 2, "seq_len": 64, "steps": 4, "batch_size": 4,
        "lr": 3.0e-3, "warmup": 0, "seed": 0, "betas": [0.9, 0.95], "weight_decay": 0.01, "grad_clip": 1.0,
        "min_lr_ratio": 0.1}


def publish_tiny(cache_dir, repo_id: str, revisions, seed: int = 0) -> dict:
    """Publish a (differently initialised) tiny model at each revision; returns revision -> commit."""
    tokenizer = suite.build_tokenizer()
    commits = {}
    for i, revision in enumerate(revisions):
        model = suite.build_model(tokenizer, TINY, seed + i)

        def save(directory, model=model):
            model.save_pretrained(directory)
            tokenizer.save_pretrained(directory)

        commits[revision] = local_hub.publish(cache_dir, repo_id, revision, save)
    return commits


def pythia_params(base: dict) -> dict:
    """The repository's pythia section shrunk to seconds: one tiny local model, 3 revisions, small eval sets."""
    p = copy.deepcopy(base)
    p["pythia"]["models"] = ["tiny"]
    p["pythia"]["profile"] = "local"
    p["pythia"]["evals"] = {"seed": 0, "n_per_set": 6}
    p["pythia"].update(probe_per_set=4, batch_size=32, device="cpu")
    local = p["pythia"]["profiles"]["local"]
    local.update(revisions=["step0", "step2", "step4"], train={"tiny": dict(TINY)})
    return p
