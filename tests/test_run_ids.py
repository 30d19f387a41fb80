"""Run ids and model names are checked before any path is built from them: no path separators, no
'..', no empty names, only [A-Za-z0-9._-]; a bad one is a one-line error naming the argument."""
import os

import pytest

from stages.pipeline import extract, landscape, measure, pythia_measure, train
from stages.config import name_argument, run_id
from stages.errors import PipelineError
from stages.params import validate_params
from stages.pythia import settings

BAD = ["p405k/../../x", "../x", "..", ".", "", "a/b", "a\\b", "/abs", "x..y", ".hidden", "a b", "ü", "a\nb", "a:b"]


def tree(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files)


@pytest.mark.parametrize("bad", BAD)
def test_run_id_rejects_bad_parts(bad):
    for i, key in enumerate(("--task", "--level", "--model")):
        parts = ["copy", "easy", "p405k"]
        parts[i] = bad
        with pytest.raises(PipelineError) as exc:
            run_id(*parts, seed=0)
        assert f"'{key}'" in str(exc.value) and "\n" not in str(exc.value)


def test_good_ids_and_seeds():
    assert run_id("copy", "easy", "p405k", 0) == "copy-easy-p405k-s0"
    assert run_id("pythia", "lm", "70m-deduped.v1_x") == "pythia-lm-70m-deduped.v1_x"
    import numpy as np

    assert run_id("mod", "hard", "p3m", np.int64(2)) == "mod-hard-p3m-s2"
    for seed in (-1, True, 1.5, "1"):
        with pytest.raises(PipelineError, match="'--seed'"):
            run_id("copy", "easy", "p405k", seed)
    for value in (None, 3, ["a"]):
        with pytest.raises(PipelineError, match="'--model'"):
            run_id("copy", "easy", value)


def test_pythia_model_names(repo_params):
    params = {**repo_params, "pythia": {**repo_params["pythia"], "models": ["70m", "../../x"]}}
    with pytest.raises(PipelineError, match=r"'pythia\.models\[1\]' must be a non-empty name"):
        validate_params(params)
    with pytest.raises(PipelineError, match="'--model'"):
        settings.pythia_run_id("a/../b")
    pythia = validate_params(repo_params).pythia
    with pytest.raises(PipelineError, match="'--model'"):
        settings.source(pythia, "../70m")
    with pytest.raises(PipelineError, match="'pythia.profiles.local.train'"):
        pythia.suite_model("../70m")
    assert name_argument("70m", "pythia.models") == "70m"


SEEDED = [(extract.main, "extract"), (measure.main, "measure"), (landscape.main, "landscape"), (train.main, "train")]


@pytest.mark.parametrize("main,name", SEEDED)
@pytest.mark.parametrize("option,value", [("--model", "p405k/../../x"), ("--task", "../copy"), ("--level", "")])
def test_stage_mains_refuse_bad_names_before_touching_files(workdir, capsys, main, name, option, value):
    args = {"--task": "copy", "--level": "easy", "--model": "p405k"}
    args[option] = value
    before = tree(workdir.parent)
    with pytest.raises(SystemExit) as exc:
        main([*(x for kv in args.items() for x in kv), "--seed", "0"])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err, err
    if name != "train":  # train checks the task, level and model against its registries first
        assert f"'{option}'" in err, err
    assert tree(workdir.parent) == before


def test_pythia_measure_refuses_a_bad_model(workdir, capsys):
    before = tree(workdir.parent)
    with pytest.raises(SystemExit) as exc:
        pythia_measure.main(["--model", "70m/../../x"])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip()
    assert "'--model'" in err and "\n" not in err, err
    assert tree(workdir.parent) == before
