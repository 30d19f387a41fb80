import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def tiny_params(base: dict) -> dict:
    """The repository's params shrunk to seconds: small datasets, few steps and checkpoints."""
    p = copy.deepcopy(base)
    p["grid"] = {"tasks": ["copy"], "levels": ["easy"], "models": ["p405k"], "seeds": [0]}
    p["datasets"].update(n_train=256, n_test=64)
    p["train"]["defaults"].update(steps=12, batch_size=64, n_checkpoints=6, eval_train_max=64, device="cpu")
    p["train"]["tasks"] = {t: {"all": {}, "easy": {}, "medium": {}, "hard": {}} for t in p["train"]["tasks"]}
    p["extract"].update(probe_size=48, device="cpu")
    p["measures"]["device"] = "cpu"
    p["events"]["bootstrap"]["resamples"] = 50
    p["events"]["sensitivity"]["n_checkpoints"] = [4, 0]  # at most the 6 checkpoints (refused above: issue 24)
    p.pop("pythia", None)  # Pythia runs are opt-in here: tests/pythia_helpers.py has their tiny settings
    return p


@pytest.fixture
def workdir(tmp_path, monkeypatch, repo_params):
    """A temporary project directory holding a tiny params.yaml; stages run with it as cwd."""
    params = tiny_params(repo_params)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    return tmp_path
