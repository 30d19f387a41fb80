"""Every project module a stage imports (transitively, through project imports) is a dvc.yaml dep of
that stage, so editing shared code makes DVC rerun the stages that use it; and the deps are exactly
what scripts/dvc_deps.py derives from the imports (nobody maintains them by hand).
"""
import importlib.util

import pytest
import yaml

from conftest import ROOT

spec = importlib.util.spec_from_file_location("dvc_deps", ROOT / "scripts" / "dvc_deps.py")
dvc_deps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dvc_deps)
closure, covered, needs_dep, missing_deps = dvc_deps.closure, dvc_deps.covered, dvc_deps.needs_dep, dvc_deps.missing_deps
stages, stage_module, module_file = dvc_deps.stages, dvc_deps.stage_module, dvc_deps.module_file

STAGES = sorted(n for n, s in stages().items() if stage_module(s["cmd"]))


def test_every_stage_runs_a_project_module():
    assert STAGES and all(module_file(stage_module(stages()[n]["cmd"])) for n in STAGES)


def test_dvc_yaml_deps_are_derived_from_the_imports():
    text = (ROOT / "dvc.yaml").read_text()
    assert dvc_deps.rewrite(text) == text, "run python scripts/dvc_deps.py (then python -m studies.generate)"


@pytest.mark.parametrize("name", STAGES)
def test_stage_deps_cover_its_imports(name):
    missing = missing_deps(name)
    assert not missing, f"dvc.yaml stage '{name}' imports project code its deps do not cover: {', '.join(missing)}"


def test_the_import_walk_finds_what_it_must():
    # transitive: stages.pipeline.train -> stages.training.loop -> stages.io.checkpoints -> stages.io.tables
    found = closure("stages.pipeline.train")
    assert {"stages.training.loop", "stages.io.checkpoints", "stages.io.tables", "stages.io.atomic",
            "stages.models", "stages.models.gpt", "stages.config", "stages.errors", "stages.paths"} <= found
    # imports inside functions count (events imports its figures lazily in main)
    assert "stages.analysis.figures" in closure("stages.pipeline.events")
    assert covered("stages/training/loop.py", ["stages/training"])
    assert not covered("stages/trainingx/loop.py", ["stages/training"])
    assert not covered("stages/config.py", ["stages/pipeline/train.py", "data/datasets/x"])
    assert needs_dep("stages.models") and not needs_dep("stages.training")


def test_rewrite_replaces_code_deps_and_keeps_data_deps():
    text = ("stages:\n  train:\n    cmd: python -m stages.pipeline.train\n    deps:\n      - stages/nothing.py\n"
            "      - stages/training\n      - data/datasets/x\n    outs:\n      - data/y\n")
    new = dvc_deps.rewrite(text)
    deps = dvc_deps.dep_paths(stages(new)["train"])
    assert deps == dvc_deps.code_deps("stages.pipeline.train") + ["data/datasets/x"]
    assert "stages/pipeline/train.py" in deps and "stages/training/loop.py" in deps and "stages/nothing.py" not in deps
    assert new.endswith("    outs:\n      - data/y\n") and dvc_deps.rewrite(new) == new


def test_code_manifest_prototype_rewrites_code_deps_only():
    """benchmarks/dvc_code_manifests.py (docs/performance.md): a stage's file-by-file code deps become
    its one manifest, data deps stay, and the code stage that writes the manifests comes first."""
    spec = importlib.util.spec_from_file_location("dvc_code_manifests", ROOT / "benchmarks" / "dvc_code_manifests.py")
    proto = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(proto)
    text = ("stages:\n  train:\n    cmd: python -m stages.pipeline.train\n    deps:\n      - stages/a.py\n"
            "      - stages/b/c.py\n      - data/x\n    outs:\n      - data/y\n")
    new = yaml.safe_load(proto.rewrite_dvc_yaml(text, ["train"]))["stages"]
    assert list(new) == ["code", "train"]
    assert new["train"]["deps"] == ["data/code/train.json", "data/x"] and new["train"]["outs"] == ["data/y"]
    assert new["code"]["deps"][0] == "stages" and new["code"]["outs"] == ["data/code/train.json"]
