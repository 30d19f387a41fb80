"""dvc.yaml and params.yaml agree: every matrix item resolves, every tracked param exists."""
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stages.config import get

ROOT = Path(__file__).resolve().parents[1]


def dvc_exe():
    exe = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    return exe if Path(exe).exists() else None


def test_dvc_parses_every_stage(repo_params):
    exe = dvc_exe()
    if exe is None:
        pytest.skip("dvc is not installed")
    out = subprocess.run([exe, "stage", "list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    names = {line.split()[0] for line in out.splitlines() if line.strip()}
    g = repo_params["grid"]
    for task, level in itertools.product(repo_params["tasks"], ["easy", "medium", "hard"]):
        # datasets only for the grid's tasks and levels
        assert (f"generate@{task}-{level}" in names) == (task in g["tasks"] and level in g["levels"])
    for task, level, model, seed in itertools.product(g["tasks"], g["levels"], g["models"], g["seeds"]):
        for stage in ("train", "extract", "measure"):
            assert f"{stage}@{task}-{level}-{model}-{seed}" in names
    assert "events" in names


def test_tracked_params_exist(repo_params):
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    grid = repo_params["grid"]
    items = {"task": repo_params["tasks"], "level": ["easy", "medium", "hard"], "model": grid["models"]}
    for name, stage in stages.items():
        for key in stage.get("params", []):
            if not isinstance(key, str):
                continue
            for task, level, model in itertools.product(items["task"], items["level"], items["model"]):
                resolved = key.replace("${item.task}", task).replace("${item.level}", level).replace("${item.model}", model)
                get(repo_params, resolved)  # raises naming the key if missing
