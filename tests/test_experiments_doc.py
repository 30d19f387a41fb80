"""docs/experiments.md as written: its first `dvc exp show` recipe fits a 200-column terminal without a
cut cell, and a team shares outputs through a DVC remote (a local directory here) so that a second clone
pulls instead of recomputing."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "experiments.md"


def tools():
    dvc = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    git = shutil.which("git")
    if not Path(dvc).exists() or git is None:
        pytest.skip("needs dvc and git")
    return dvc, git


def env(**extra):
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # `python` = this one
    return {**os.environ, "PATH": path, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", **extra}


def sh(cmd, cwd, **extra):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env(**extra), timeout=600)
    assert out.returncode == 0, f"{cmd}: {out.stdout[-1500:]}{out.stderr[-1500:]}"
    return out.stdout


def doc_commands(prefix: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    return [line.split("  #")[0].strip() for b in blocks for line in b.splitlines() if line.startswith(prefix)]


def project_copy(repo: Path, files=("dvc.yaml", "params.yaml", "metrics/summary.json", ".dvcignore")) -> None:
    for name in files:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    # every study's params and metrics files: keys and metric names they share with the root's make DVC
    # prefix the column names (what the recipes have to cope with); their locks, logs and plots change
    # nothing in the table and only cost DVC parsing time (a study's dvc.lock runs to 25,000 lines)
    for study in sorted((ROOT / "studies").glob("*/dvc.yaml")):
        for name in ("dvc.yaml", "params.yaml", "metrics/summary.json"):
            source = study.parent / name
            if source.is_file():
                (repo / source.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, repo / source.relative_to(ROOT))


def test_the_first_exp_show_recipe_fits_200_columns(tmp_path):
    dvc, git = tools()
    repo = tmp_path / "repo"
    repo.mkdir()
    sh([git, "init", "-q"], repo)
    sh([dvc, "init", "-q"], repo)
    project_copy(repo)
    sh([git, "add", "-A"], repo)
    sh([git, "commit", "-qm", "baseline"], repo)
    # an experiment: two knobs and every metric changed
    params = (repo / "params.yaml").read_text()
    params = re.sub(r"hard: \{modulus: \d+,", "hard: {modulus: 113,", params, count=1)
    params = re.sub(r"^(\s*seeds: ).*$", r"\1[0, 1, 2, 3]", params, count=1, flags=re.M)
    (repo / "params.yaml").write_text(params)
    summary = json.loads((repo / "metrics" / "summary.json").read_text())
    (repo / "metrics" / "summary.json").write_text(json.dumps({k: (v + 1 if isinstance(v, int) else 0.123)
                                                               for k, v in summary.items()}))
    sh([git, "commit", "-qam", "experiment"], repo)
    first = doc_commands("dvc exp show")[0]
    table = sh(shlex.split(first) + ["--no-pager", "-n", "2"], repo, COLUMNS="200")
    lines = [l for l in table.splitlines() if l.strip()]
    assert max(len(l) for l in lines) <= 200 and "…" not in table, table
    header = lines[1]
    for column in ("tasks.mod.hard.modulus", "grid.seeds", "acquired_runs", "precursor_hard_cls", "precursor_easy_cls"):
        assert column in header, header
    assert "stages/" not in table and "Created" not in header and "consistent" not in header
    rows = {l.split()[0]: l for l in lines[3:-1]}
    assert len(rows) == 3 and "113" in table and "[0, 1, 2, 3]" in table
    second = doc_commands("dvc exp show")[1]
    table = sh(shlex.split(second) + ["--no-pager", "-n", "2"], repo, COLUMNS="200")
    header = [l for l in table.splitlines() if l.strip()][1]
    for column in ("precursor_hard_lvl", "precursor_hard_cls", "tasks.mod.hard.modulus"):
        assert column in header, header
    assert "grid.seeds" not in header and "acquired_runs" not in header
    metrics = doc_commands("dvc metrics show")[0]
    shown = sh(shlex.split(metrics), repo, COLUMNS="200")
    assert max(len(l) for l in shown.splitlines()) <= 200 and "acquired_runs" in shown, shown


def test_a_colleague_pulls_instead_of_recomputing(tmp_path):
    dvc, git = tools()
    mine, theirs, remote = tmp_path / "mine", tmp_path / "theirs", tmp_path / "remote"
    mine.mkdir()
    sh([git, "init", "-q"], mine)
    sh([dvc, "init", "-q"], mine)
    shutil.copytree(ROOT / "stages", mine / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, mine / name)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["grid"].update(tasks=["copy"], levels=["easy"], seeds=[0])  # one dataset: seconds
    (mine / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (mine / ".gitignore").write_text("/data/\n__pycache__/\n")
    sh([git, "add", "-A"], mine)
    sh([git, "commit", "-qm", "project"], mine)
    sh([dvc, "repro", "generate"], mine)
    built = (mine / "data" / "datasets" / "copy-easy" / "test.parquet").read_bytes()
    # docs/experiments.md: add the remote, commit it, push
    sh([dvc, "remote", "add", "-d", "shared", str(remote)], mine)
    sh([git, "add", "-A"], mine)
    sh([git, "commit", "-qm", "outputs and remote"], mine)
    sh([dvc, "push", "--with-deps", "generate"], mine)
    sh([git, "clone", "-q", str(mine), str(theirs)], tmp_path)
    assert not (theirs / "data").exists()
    before = sh([dvc, "status", "generate"], theirs)
    assert "not in cache" in before  # a fresh clone: every output missing
    sh([dvc, "pull", "--with-deps", "generate"], theirs)  # the stages that ran here (code, generate); `dvc pull` when every stage has
    assert (theirs / "data" / "datasets" / "copy-easy" / "test.parquet").read_bytes() == built
    assert "up to date" in sh([dvc, "status", "generate"], theirs)
    again = sh([dvc, "repro", "generate"], theirs)
    assert "Running stage" not in again and "didn't change" in again  # nothing recomputed
