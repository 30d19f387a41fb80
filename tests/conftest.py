import os

# Before anything loads torch's OpenMP runtime: idle OpenMP threads sleep instead of spinning, so the test
# process (and the stage processes it starts, which inherit it) share a busy CPU instead of fighting over it.
# Numerics do not depend on it. (Stage entries set it themselves: stages.runtime.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def copy_checkout(dest: Path, skip=lambda rel: False) -> None:
    """The checkout's files (tracked, and untracked ones git does not ignore; working-tree versions) under
    ``dest``, less those whose repository-relative path ``skip`` accepts."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        if skip(rel) or not (ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes((ROOT / rel).read_bytes())


def pytest_collection_modifyitems(config, items):
    """Tests marked ``heavy`` (a whole pipeline through DVC, or a debugger over a training update) run
    first: under pytest-xdist (the README runs ``-n auto``) each starts at once on a worker of its own
    instead of finishing the run alone at the end. The order is otherwise kept."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)


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


# --- one tiny trained run, built once per session ----------------------------------------------------
# Training, extraction and measuring cost seconds each; many tests need a trained or measured run as their
# starting point and none of them tests how it was built beyond what test_pipeline.py asserts. These
# session fixtures run the stage mains once, in a directory of their own with the same tiny params.yaml as
# `workdir`; each test then gets its own copy of the outputs (a test may change or delete them freely).
TINY_RUN = "copy-easy-p405k-s0"
TINY_DATA = ["--task", "copy", "--level", "easy"]
TINY_ARGS = [*TINY_DATA, "--model", "p405k", "--seed", "0"]
STAGE_OUTPUTS = ("data", "dvclive", "plots", "metrics")


def _build(root: Path, params: dict, steps, start: Path | None = None) -> Path:
    if start is not None:
        shutil.copytree(start, root)
    else:
        root.mkdir(parents=True)
        (root / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for step in steps:
            step()
    return root


@pytest.fixture(scope="session")
def trained_tree(tmp_path_factory, repo_params) -> Path:
    """A directory holding the outputs of ``generate`` and ``train`` for TINY_RUN (tiny params)."""
    from stages.pipeline import generate, train

    return _build(tmp_path_factory.mktemp("cache") / "trained", tiny_params(repo_params),
                  [lambda: generate.main(TINY_DATA), lambda: train.main(TINY_ARGS)])


@pytest.fixture(scope="session")
def measured_tree(tmp_path_factory, repo_params, trained_tree) -> Path:
    """``trained_tree`` plus the outputs of ``extract`` and ``measure`` for TINY_RUN."""
    from stages.pipeline import extract, measure

    return _build(tmp_path_factory.mktemp("cache") / "measured", None,
                  [lambda: extract.main(TINY_ARGS), lambda: measure.main(TINY_ARGS)], start=trained_tree)


def copy_outputs(tree: Path, dest: Path) -> Path:
    """The stage outputs under ``tree`` copied into ``dest`` (whose params.yaml must be the tree's)."""
    assert (dest / "params.yaml").read_text() == (tree / "params.yaml").read_text(), "params differ from the cache's"
    for name in STAGE_OUTPUTS:
        if (tree / name).exists():
            shutil.copytree(tree / name, dest / name)
    return dest


@pytest.fixture
def trained_workdir(workdir, trained_tree) -> Path:
    """``workdir`` with TINY_RUN generated and trained (a fresh copy for each test)."""
    return copy_outputs(trained_tree, workdir)


@pytest.fixture
def measured_workdir(workdir, measured_tree) -> Path:
    """``workdir`` with TINY_RUN generated, trained, extracted and measured (a fresh copy for each test)."""
    return copy_outputs(measured_tree, workdir)
