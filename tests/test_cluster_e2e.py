"""End to end: the pipeline's DAG reproduced on a 2-worker LocalCluster equals a serial run.

Two temporary copies of the repository (git-tracked files with the .dvc/ config; no data, no
dvc.lock) get the same tiny params.yaml with the smallest grid that keeps both workers busy
with matrix stages: one task and level, two seeds (one shared ``generate``, then two
train -> extract -> measure -> landscape chains side by side, beside the Pythia branch). One runs a serial
``dvc repro``, the other ``python -m stages.cluster repro --workers 2``. Afterwards ``dvc status``
is clean in both and the dvc.lock files hold the same entries with the same hashes: the
pipeline writes no wall-clock time into its outputs.

One thing is pinned so that a serial run can be compared at all (it applies equally to two serial
runs): OMP_NUM_THREADS=1 for both runs, since torch's CPU results depend on the thread count.
DVC writes no .gitignore files under data/ (the project's .gitignore already ignores it), so the
``events`` stage's directory dependencies hold only what the stages wrote.
"""
import subprocess
import sys
import time

import pytest
import yaml

from conftest import ROOT, tiny_params
from pythia_helpers import pythia_params
from stages.cluster.dag import dvc_env, parse_status
from test_landscape_stage import small_landscape

# What both runs bring up to date: events and everything it needs (the grid's
# train/extract/measure/landscape matrix, the dataset item it reads, the tiny local Pythia
# suite); the other dataset items would only add minutes of CI time.
TARGETS = ["events"]


def make_copy(dest, repo_params) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        if rel == "dvc.lock" or (rel.startswith("data/") and not rel.endswith(".gitignore")):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / rel).read_bytes())
    params = small_landscape(pythia_params({**tiny_params(repo_params), "pythia": repo_params["pythia"]}))
    # two runs, the smallest grid whose matrix stages run on both workers at once (the default grid's
    # 4 runs took 239 s here, 8 runs 433 s; the stages and their DVC wiring are the same for every run)
    params["grid"] = {**repo_params["grid"], "tasks": ["copy"], "levels": ["easy"], "seeds": [0, 1]}
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    # a checkout has commits (DVCLive 3.x cannot start in a repository without one)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=dest, check=True)


def env() -> dict:
    return {**dvc_env(), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def dvc(cwd, *args) -> str:
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env(), capture_output=True, text=True)
    assert proc.returncode == 0, f"dvc {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc.stdout


def entries(lock: dict) -> dict:
    """(stage, section, path) -> entry, over deps and outs."""
    out = {}
    for stage, body in lock["stages"].items():
        for section in ("deps", "outs"):
            for item in body.get(section, []):
                out[(stage, section, item["path"])] = item
    return out


@pytest.mark.heavy
def test_cluster_repro_matches_serial(tmp_path, repo_params):
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    for dest in (serial, parallel):
        make_copy(dest, repo_params)

    clock = time.perf_counter()
    dvc(serial, "repro", *TARGETS)
    serial_s = time.perf_counter() - clock

    clock = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stages.cluster", "repro", "--workers", "2", *TARGETS],
                          cwd=parallel, env=env(), capture_output=True, text=True)
    cluster_s = time.perf_counter() - clock
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dvc status is clean" in proc.stderr
    print(f"serial dvc repro {serial_s:.1f}s, 2-worker cluster {cluster_s:.1f}s")

    for dest in (serial, parallel):
        assert parse_status(dvc(dest, "status", "--json", *TARGETS)) == set()
    lock_s = yaml.safe_load((serial / "dvc.lock").read_text())
    lock_p = yaml.safe_load((parallel / "dvc.lock").read_text())
    assert lock_p["schema"] == lock_s["schema"]
    assert list(lock_p["stages"]) and set(lock_p["stages"]) == set(lock_s["stages"])
    for stage, body in lock_s["stages"].items():
        other = lock_p["stages"][stage]
        assert set(other) == set(body), stage
        assert other["cmd"] == body["cmd"] and other.get("params") == body.get("params"), stage
        for section in ("deps", "outs"):
            assert [i["path"] for i in other.get(section, [])] == [i["path"] for i in body.get(section, [])]

    es, ep = entries(lock_s), entries(lock_p)
    assert set(es) == set(ep)
    differing = sorted(key for key in es if es[key] != ep[key])
    assert not differing, f"dvc.lock entries differ from the serial run: {differing}"
    assert not list((parallel / "data").rglob(".gitignore"))

    again = subprocess.run([sys.executable, "-m", "stages.cluster", "repro", *TARGETS], cwd=parallel,
                           env=env(), capture_output=True, text=True)
    assert again.returncode == 0 and "nothing to reproduce" in again.stderr, again.stderr[-2000:]
