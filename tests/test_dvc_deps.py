"""Every stage depends on the md5 manifest of its script's import closure (stages/code_manifest.py),
written by the stage ``code``, so editing shared code makes DVC rerun exactly the stages that use it;
dvc.yaml's code deps are what scripts/dvc_deps.py derives (nobody maintains them by hand).
"""
import hashlib
import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT, copy_checkout
from stages.cluster.dag import dvc_env
from stages.code_manifest import (closure, code_deps, code_digest, code_text, manifest, manifest_text, module_file,
                                  needs_dep, stage_scripts)

spec = importlib.util.spec_from_file_location("dvc_deps", ROOT / "scripts" / "dvc_deps.py")
dvc_deps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dvc_deps)
stages, stage_module = dvc_deps.stages, dvc_deps.stage_module

STAGES = sorted(n for n, s in stages().items() if stage_module(s["cmd"]) and n != "code")


def test_every_stage_runs_a_stage_script():
    assert STAGES and all(module_file(stage_module(stages()[n]["cmd"])) for n in STAGES)
    assert {stage_module(stages()[n]["cmd"]).rpartition(".")[2] for n in STAGES} == set(stage_scripts())


def test_dvc_yaml_deps_are_derived_from_the_imports():
    text = (ROOT / "dvc.yaml").read_text()
    assert dvc_deps.rewrite(text) == text, "run python scripts/dvc_deps.py (then python -m studies.generate)"


@pytest.mark.parametrize("name", STAGES)
def test_stage_depends_on_its_manifest_and_on_no_source_file(name):
    script = stage_module(stages()[name]["cmd"]).rpartition(".")[2]
    deps = dvc_deps.dep_paths(stages()[name])
    assert deps[0] == f"data/code/{script}.json"
    assert not [d for d in deps if d.split("/")[0] == "stages"]


def test_the_code_stage_depends_on_all_source_and_writes_every_manifest():
    code = stages()["code"]
    assert dvc_deps.dep_paths(code) == ["stages"]
    assert code["outs"] == [f"data/code/{s}.json" for s in stage_scripts()]
    assert list(stages())[0] == "code"


def test_the_import_walk_finds_what_it_must():
    # transitive: stages.pipeline.train -> stages.training.loop -> stages.io.checkpoints -> stages.io.tables
    found = closure("stages.pipeline.train")
    assert {"stages.training.loop", "stages.io.checkpoints", "stages.io.tables", "stages.io.atomic",
            "stages.models", "stages.models.gpt", "stages.config", "stages.errors", "stages.paths"} <= found
    # imports inside functions count (events imports its figures lazily in main)
    assert "stages.analysis.figures" in closure("stages.pipeline.events")
    assert needs_dep("stages.models") and not needs_dep("stages.training")
    assert "stages/code_manifest.py" not in code_deps("stages.pipeline.train")


def test_a_manifest_is_the_md5_of_each_file_of_the_closure():
    got = json.loads(manifest_text("train"))
    assert got == manifest("train") and list(got) == code_deps("stages.pipeline.train")
    gpt = (ROOT / "stages/models/gpt.py").read_text()
    assert got["stages/models/gpt.py"] == hashlib.md5(code_text(gpt).encode()).hexdigest()
    # which stages an edit reruns: the verdict rules only reach events; the model reaches every stage that runs it
    assert [s for s in stage_scripts() if "stages/analysis/verdicts.py" in manifest(s)] == ["events"]
    assert {"train", "extract", "landscape"} <= {s for s in stage_scripts() if "stages/models/gpt.py" in manifest(s)}


SOURCE = '''"""Module doc.

More."""
import os  # why

X = """a

b  """


def f(x):
    """Doc of f."""
    # a comment line
    return x + 1   # trailing


class C:
    """Class doc."""

    def g(self): "inline doc"; return 2
'''


def test_code_text_drops_comments_docstrings_and_blank_lines_but_nothing_in_a_string():
    assert code_text(SOURCE) == ('import os\nX = """a\n\nb  """\ndef f(x):\n    return x + 1\nclass C:\n'
                                 '    def g(self): "inline doc"; return 2\n')


def test_a_comment_or_docstring_edit_keeps_the_digest_and_a_code_edit_changes_it(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    before = code_digest(path)
    for old, new in [("# why", "# because"), ("Doc of f.", "What f does,\n    over two lines."), ("\n\n\nclass", "\nclass")]:
        path.write_text(SOURCE.replace(old, new))
        assert code_digest(path) == before, new
    for old, new in [("x + 1", "x + 2"), ("b  ", "b "), ("a\n\nb", "a\nb"), ("inline doc", "inline")]:
        path.write_text(SOURCE.replace(old, new))
        assert code_digest(path) != before, new


def test_rewrite_replaces_code_deps_keeps_data_deps_and_lists_the_manifests():
    text = ("stages:\n  code:\n    cmd: python -m stages.pipeline.code\n    deps:\n      - stages\n    outs:\n"
            "      - data/code/old.json\n  train:\n    cmd: python -m stages.pipeline.train\n    deps:\n"
            "      - stages/nothing.py\n      - stages/training\n      - data/datasets/x\n    outs:\n      - data/y\n")
    new = dvc_deps.rewrite(text)
    assert dvc_deps.dep_paths(stages(new)["train"]) == ["data/code/train.json", "data/datasets/x"]
    assert stages(new)["train"]["outs"] == ["data/y"]
    assert stages(new)["code"] == {"cmd": "python -m stages.pipeline.code", "deps": ["stages"],
                                   "outs": [f"data/code/{s}.json" for s in stage_scripts()]}
    assert dvc_deps.rewrite(new) == new


def test_a_stage_running_another_module_is_a_one_line_error():
    text = "stages:\n  odd:\n    cmd: python -m stages.runtime\n    deps:\n      - stages/runtime.py\n"
    with pytest.raises(SystemExit, match="dvc.yaml stage 'odd' runs stages.runtime: a stage script must be stages.pipeline.<name>"):
        dvc_deps.rewrite(text)


def test_the_code_stage_writes_the_manifests(tmp_path):
    done = subprocess.run([sys.executable, "-m", "stages.pipeline.code"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (tmp_path / "data" / "code").iterdir())
    assert written == [f"{s}.json" for s in stage_scripts()]
    assert all((tmp_path / "data" / "code" / f"{s}.json").read_text() == manifest_text(s) for s in stage_scripts())
    assert "torch" not in done.stdout + done.stderr


@pytest.mark.heavy
def test_dvc_reruns_only_the_stages_whose_code_changed(tmp_path):
    """In a copy of the repository, after ``dvc repro code``: an edit of comments and docstrings in
    stages/numerics.py (which every stage imports) reruns ``code`` and changes no manifest; an edit of
    the verdict rules' code changes exactly one manifest, and DVC finds changed code deps only at
    ``events``."""
    dest = tmp_path / "repo"
    copy_checkout(dest, skip=lambda rel: rel.startswith("studies/"))
    env = {**dvc_env(), "PYTHONPATH": str(dest)}

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=dest, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    run("repro", "--single-item", "code")
    before = {s: (dest / "data/code" / f"{s}.json").read_text() for s in stage_scripts()}
    numerics = dest / "stages/numerics.py"
    text = numerics.read_text()
    first, _, rest = text.partition("\n")
    numerics.write_text(first + " Edited.\n" + rest + "\n# an edited comment\n")  # the module docstring's first line
    assert list(json.loads(run("status", "--json", "code"))) == ["code"]
    run("repro", "--single-item", "code")
    assert all((dest / "data/code" / f"{s}.json").read_text() == before[s] for s in stage_scripts())
    verdicts = dest / "stages/analysis/verdicts.py"
    verdicts.write_text(verdicts.read_text() + "\n_AN_EDIT = 1\n")
    assert list(json.loads(run("status", "--json", "code"))) == ["code"]
    run("repro", "--single-item", "code")
    changed = [s for s in stage_scripts() if (dest / "data/code" / f"{s}.json").read_text() != before[s]]
    assert changed == ["events"]
    status = json.loads(run("status", "--json"))
    code_changed = sorted(name for name, what in status.items()
                          for entry in what if isinstance(entry, dict) and "data/code/events.json" in entry.get("changed deps", {}))
    assert code_changed == ["events"]


def test_dvc_overhead_splits_dvc_time_between_stages():
    """benchmarks/dvc_overhead.py: DVC's start-up is the time before the first stage; each stage is
    charged the gap from its exit to the next stage's start (the last one, to the command's end)."""
    spec = importlib.util.spec_from_file_location("dvc_overhead", ROOT / "benchmarks" / "dvc_overhead.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = [{"kind": "train", "start": 13.0, "end": 20.0}, {"kind": "code", "start": 2.0, "end": 3.0},
            {"kind": "train", "start": 21.5, "end": 30.0}, {"kind": "generate", "start": 5.0, "end": 10.0}]
    startup, after = bench.dvc_gaps(rows, began=0.0, ended=34.0)
    assert startup == 2.0 and after == {"code": [2.0], "generate": [3.0], "train": [1.5, 4.0]}
