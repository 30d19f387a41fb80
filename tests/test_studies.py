"""Study folders (studies/<name>/, docs/scale.md): generated from the root pipeline, current, runnable.

The generated dvc.yaml and params.yaml of every committed study must equal what
``python -m studies.generate`` writes now (a stage or parameter changed at the root reaches the
studies only through regeneration); the rewriting rules are checked on the scale study; and a toy
study runs end to end with ``dvc repro studies/<name>/dvc.yaml`` in a temporary copy of the
repository, leaving the root pipeline untouched, after which ``python -m studies.diff`` compares it
with the root.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, copy_checkout
from stages.cluster.dag import dvc_env, parse_status
from stages.config import load_typed_params
from studies import generate as gen


def test_every_committed_study_is_current():
    names = gen.study_names()
    assert "scale" in names and "paper" in names
    for name in names:
        assert gen.stale(name) == [], f"run `python -m studies.generate {name}`"


def test_check_flag_names_a_stale_file(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "studies" / "x"
    folder.mkdir(parents=True)
    (folder / "study.yaml").write_text("stages: [generate]\nparams: {grid.tasks: [mod]}\n")
    for name in ("params.yaml", "dvc.yaml"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "STUDIES", tmp_path / "studies")
    assert gen.main(["--check"]) == 1
    assert "studies/x/params.yaml, studies/x/dvc.yaml" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text().replace("n_test: 1000", "n_test: 999"))
    assert gen.main(["--check"]) == 1  # a root change makes the study stale
    assert "n_test: 999" in gen.render("x")[folder / "params.yaml"]


def test_bad_spec_is_one_line(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "studies" / "x"
    folder.mkdir(parents=True)
    for name in ("params.yaml", "dvc.yaml"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "STUDIES", tmp_path / "studies")
    (folder / "study.yaml").write_text("stages: [generate, nope]\n")
    assert gen.main(["x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: studies/x/study.yaml: 'stages' names unknown stage(s) nope (the root dvc.yaml "
                          "has: code, generate, train, ") and err.count("\n") == 1
    (folder / "study.yaml").write_text("stages: [generate]\nparams: {grid.tasks.x: 1}\n")
    assert gen.main(["x"]) == 2
    assert "'params.grid.tasks.x' names no section of the root params.yaml" in capsys.readouterr().err


def test_scale_study_rewrites_paths_for_its_folder():
    folder = ROOT / "studies" / "scale"
    dvc = yaml.safe_load((folder / "dvc.yaml").read_text())
    root = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    spec = yaml.safe_load((folder / "study.yaml").read_text())
    assert list(dvc["stages"]) == [s for s in root["stages"] if s in spec["stages"] or s == "code"]  # the root's order
    assert "code" not in spec["stages"] and dvc["stages"]["code"]["deps"] == ["../../stages"]  # always kept
    assert {"train", "events", "landscape", "plot_pages"} <= set(dvc["stages"]) and "fetch_pythia" not in dvc["stages"]
    for name, stage in dvc["stages"].items():
        assert stage["cmd"] == "PYTHONPATH=../.. " + root["stages"][name]["cmd"]
        for dep in stage["deps"]:
            if dep.startswith("../../"):
                assert (folder / dep).resolve().exists(), dep  # code: the root's files
            else:
                assert dep.split("/")[0] in gen.OUTPUT_ROOTS  # written by a stage of the study
        for out in stage["outs"]:
            path = next(iter(out)) if isinstance(out, dict) else out
            assert path.split("/")[0] in gen.OUTPUT_ROOTS  # written inside the study's folder
    events = dvc["stages"]["events"]
    assert "data/pythia/accuracy" not in events["deps"] and "data/landscape" in events["deps"]
    assert not any(str(p).startswith("pythia") for p in events["params"])  # the study has no pythia section
    assert dvc["stages"]["landscape"]["matrix"] == spec["matrix"]["landscape"]
    assert dvc["plots"] == root["plots"]
    params = load_typed_params(folder / "params.yaml")  # the schema accepts it
    assert params.pythia is None and params.grid.models == spec["params"]["grid.models"]
    assert len(params.grid.tasks) * len(params.grid.levels) >= 8 and len(params.grid.seeds) >= 2


def _env() -> dict:
    return {**dvc_env(), "OMP_NUM_THREADS": "1"}


def _run(cmd, cwd, **kw):
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


TOY = """\
stages: [generate, train, extract, measure, landscape, events, plot_pages]
params:
  grid.tasks: [copy, reverse, mod]
  grid.levels: [easy]
  grid.models: [p100k, p405k]
  grid.seeds: [0]
  runtime.threads: 1
  datasets.n_train: 256
  datasets.n_test: 64
  train.defaults.steps: 12
  train.defaults.batch_size: 64
  train.defaults.n_checkpoints: 6
  events.sensitivity.n_checkpoints: [4, 0]
  train.defaults.eval_train_max: 64
  train.defaults.device: cpu
  train.tasks.copy.easy: {}
  train.tasks.reverse.easy: {}
  train.tasks.mod.easy: {}
  tasks.mod.easy: {modulus: 13, train_fraction: 0.5, op: add}   # 84 train rows: room for the batch of 64
  extract.probe_size: 48
  events.bootstrap.resamples: 50
  landscape.max_checkpoints: 3
  landscape.workers: 1
  landscape.grad.samples: 8
  landscape.grad.chunk: 8
  landscape.hessian.samples: 8
  landscape.hessian.maxiter: 5
  landscape.llc.samples: 32
  landscape.llc.batch_size: 8
  landscape.llc.draws: 10
  landscape.llc.burn_in: 2
  pythia: null
matrix:
  landscape: {task: [mod], level: [easy], model: [p100k, p405k], seed: [0]}
"""


def lock_entries(lock: dict) -> dict:
    """(stage, section, path) -> entry, over deps and outs."""
    return {(stage, section, item["path"]): item for stage, body in lock["stages"].items()
            for section in ("deps", "outs") for item in body.get(section, [])}


@pytest.mark.heavy
def test_toy_study_end_to_end_serial_and_on_a_cluster(tmp_path):
    """A tiny study (3 cells x 2 sizes, 12 steps) reproduced with ``dvc repro studies/toy/dvc.yaml``
    in a copy of the repository: its outputs land in its own folder, the root pipeline is not run,
    the cross-scale statistics have a pair of sizes, and studies.diff compares it with the root.

    The same study in a second copy, reproduced by ``python -m stages.cluster repro --root studies/toy
    --workers 2`` (the smallest DAG that keeps both workers busy with matrix stages, with a fan-in at
    events): afterwards ``dvc status`` is clean and its dvc.lock holds the serial run's entries with
    the same hashes, so the pipeline writes no wall-clock time into its outputs. Both runs compute on
    one thread (the study's ``runtime.threads: 1``; torch's CPU results depend on the thread count)."""
    dest, parallel = tmp_path / "repo", tmp_path / "parallel"
    copy_checkout(dest, skip=lambda rel: rel.endswith("dvc.lock") or rel.startswith(("data/", "studies/scale/data/")))
    (dest / "studies" / "toy").mkdir()
    (dest / "studies" / "toy" / "study.yaml").write_text(TOY)
    (dest / "studies" / "toy" / ".gitignore").write_text("/data/\n")
    _run([sys.executable, "-m", "studies.generate", "toy"], dest)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    _run(["git", "init", "-q"], dest)
    _run(["git", "add", "-A"], dest)
    _run([*git, "commit", "-q", "-m", "copy"], dest)
    shutil.copytree(dest, parallel, symlinks=True)

    _run([sys.executable, "-m", "dvc", "repro", "studies/toy/dvc.yaml"], dest, timeout=900)
    study = dest / "studies" / "toy"
    assert parse_status(_run([sys.executable, "-m", "dvc", "status", "--json", "studies/toy/dvc.yaml"], dest)) == set()
    assert (study / "dvc.lock").is_file() and not (dest / "dvc.lock").exists() and not (dest / "data").exists()
    assert sorted(p.name for p in (study / "data" / "landscape").iterdir()) == ["mod-easy-p100k-s0.csv",
                                                                               "mod-easy-p405k-s0.csv"]
    summary = json.loads((study / "metrics" / "summary.json").read_text())
    assert summary["runs"] == 6
    scale = json.loads((study / "data" / "events" / "cross_scale.json").read_text())
    assert list(scale["pairs"]) == ["p100k__p405k"] and scale["pairs"]["p100k__p405k"]["cells"] == 3
    assert "p100k" in (study / "metrics" / "paper.md").read_text()
    out = _run([sys.executable, "-m", "studies.diff", "toy", "--params"], dest)
    assert "grid.models" in out and "['p100k', 'p405k']" in out and "train.defaults.steps" in out
    # the root's committed metrics/summary.json on the left, the study's on the right
    out = _run([sys.executable, "-m", "studies.diff", "toy", "--metrics", "--all"], dest)
    assert "metrics/summary.json" in out and "runs" in out and "toy" in out.splitlines()[0]

    cluster = [sys.executable, "-m", "stages.cluster", "repro", "--root", "studies/toy"]
    proc = subprocess.run([*cluster, "--workers", "2"], cwd=parallel, env=_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "dvc status is clean" in proc.stderr, proc.stderr[-3000:]
    assert parse_status(_run([sys.executable, "-m", "dvc", "status", "--json", "studies/toy/dvc.yaml"], parallel)) == set()
    lock_s = yaml.safe_load((study / "dvc.lock").read_text())
    lock_p = yaml.safe_load((parallel / "studies" / "toy" / "dvc.lock").read_text())
    assert lock_p["schema"] == lock_s["schema"] and set(lock_p["stages"]) == set(lock_s["stages"])
    for stage, body in lock_s["stages"].items():
        other = lock_p["stages"][stage]
        assert set(other) == set(body) and other["cmd"] == body["cmd"] and other.get("params") == body.get("params"), stage
    es, ep = lock_entries(lock_s), lock_entries(lock_p)
    assert set(es) == set(ep)
    differing = sorted(key for key in es if es[key] != ep[key])
    assert not differing, f"dvc.lock entries differ from the serial run: {differing}"
    assert not list((parallel / "studies" / "toy" / "data").rglob(".gitignore"))
    again = subprocess.run(cluster, cwd=parallel, env=_env(), capture_output=True, text=True)
    assert again.returncode == 0 and "nothing to reproduce" in again.stderr, again.stderr[-2000:]


def test_paper_study_is_the_papers_grid_and_every_cell_fits():
    from stages.pipeline.generate import generate
    from stages.models.presets import PAPER_SIZES

    folder = ROOT / "studies" / "paper"
    params = load_typed_params(folder / "params.yaml")
    assert params.grid.models == list(PAPER_SIZES) and len(params.grid.seeds) == 3
    assert len(params.grid.tasks) == 8 and params.grid.levels == ["easy", "medium", "hard"]
    assert params.pythia.profile == "pythia" and params.pythia.models == ["160m", "410m", "2.8b"]
    assert params.landscape.grad.sketch_dim > 0 and params.train.defaults.precision == "auto"
    for task in params.grid.tasks:  # the probe set and the batch fit every cell's splits
        for level in params.grid.levels:
            ds = generate(task, level, params)
            assert len(ds.test_prompt) >= params.extract.probe_size, (task, level)
            assert len(ds.train_prompt) >= params.train.resolve(task, level).batch_size, (task, level)
    dvc = yaml.safe_load((folder / "dvc.yaml").read_text())
    assert "train_suite" not in dvc["stages"] and "pythia_measure" in dvc["stages"]
    assert "data/pythia/hub" not in dvc["stages"]["fetch_pythia"].get("deps", [])  # the local suite's output
    assert "data/pythia/accuracy" in dvc["stages"]["events"]["deps"]


def test_the_paper_study_is_hidden_from_dvc_until_a_user_opts_in(tmp_path):
    """.dvcignore hides studies/paper (80% of the project's stages) from every DVC command; the cluster
    runner says in one line which line to delete, and docs/scale.md's command deletes exactly that line."""
    from dvc.repo import Repo
    from stages.cluster.__main__ import repro
    from stages.cluster.backends import ClusterSpec
    from stages.errors import PipelineError

    with Repo(str(ROOT)) as repo:
        assert repo.dvcignore.is_ignored(repo.fs, str(ROOT / "studies" / "paper" / "dvc.yaml"))
        assert not repo.dvcignore.is_ignored(repo.fs, str(ROOT / "studies" / "scale" / "dvc.yaml"))
    with pytest.raises(PipelineError, match=r"studies/paper/dvc.yaml is dvc-ignored: delete the line "
                                            r"'/studies/paper/' from .*\.dvcignore"):
        repro(ROOT / "studies" / "paper", ClusterSpec(), dry_run=True)
    doc = (ROOT / "docs" / "scale.md").read_text()
    opt_in = next(line.split("  #")[0].strip() for line in doc.splitlines() if line.startswith("sed -i") and ".dvcignore" in line)
    original = (ROOT / ".dvcignore").read_text()
    (tmp_path / ".dvcignore").write_text(original)
    subprocess.run(opt_in, shell=True, cwd=tmp_path, check=True)
    left = (tmp_path / ".dvcignore").read_text().splitlines()
    assert "/studies/paper/" not in left and len(left) == len(original.splitlines()) - 1
