import pandas as pd
import pytest
import yaml

from stages.analysis.runs import run_events
from stages.config import load_typed_params
from stages import paths
from stages.pipeline import events, fetch_pythia, pythia_evals, pythia_measure, train_suite
from stages.io.hidden import hidden_manifest, iter_steps
from stages.pythia import evalsets
from stages.pythia.paths import EVALS_FILE, accuracy_file, manifest_file
from tests.pythia_helpers import pythia_params

COLUMNS = ["run", "step", "layer", "rankme", "rankme_centred", "mean_dominance", "varies", "probe_acc", "test_acc",
           "n_params", "dim", "n_checkpoints"]


@pytest.fixture
def pythia_workdir(workdir, repo_params, monkeypatch):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["pythia"] = pythia_params(repo_params)["pythia"]
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return workdir


def test_pipeline_writes_small_model_formats(pythia_workdir):
    pythia_evals.main([])
    train_suite.main([])
    fetch_pythia.main(["--model", "tiny"])
    manifest = yaml.safe_load(manifest_file("tiny").read_text())
    assert manifest["repo_id"] == "local/pythia-tiny" and manifest["cache_dir"] == "data/pythia/hub"
    assert [r["revision"] for r in manifest["revisions"]] == ["step0", "step2", "step4"]
    pythia_measure.main(["--model", "tiny"])

    rid = "pythia-lm-tiny"
    frame = pd.read_csv(paths.measures_file(rid))
    assert list(frame.columns) == COLUMNS
    assert sorted(frame["step"].unique()) == [0, 2, 4] and sorted(frame["layer"].unique()) == [0, 1]
    assert (frame["rankme"] > 1).all() and (frame["test_acc"] <= 1).all()
    assert frame["n_params"].nunique() == 1 and (frame["run"] == rid).all()
    acc = pd.read_csv(accuracy_file(rid))
    assert list(acc.columns) == ["run", "step", "revision", "eval_set", "accuracy", "n_items", "chance"]
    assert acc.groupby("step").size().eq(8).all()  # one row per evaluation set and revision
    assert acc["accuracy"].between(0, 1).all()
    items = evalsets.read(EVALS_FILE)
    expected = items.assign(c=items["choices"].map(lambda c: 1 / len(c))).groupby("eval_set")["c"].mean()
    assert (acc["chance"] - acc["eval_set"].map(expected)).abs().max() < 1e-12  # mean over items of 1 / choices
    assert expected["negation"] == 0.5 and expected["antonym"] == 0.25
    corrected = ((acc["accuracy"] - acc["chance"]) / (1 - acc["chance"])).groupby(acc["step"]).mean()
    assert frame.groupby("step")["test_acc"].first().round(6).equals(corrected.round(6))
    traj = pd.read_csv(paths.trajectory_file(rid))
    assert {"step", "test_acc", "rankme_rel", "rankme_last", "rankme_layer1"} <= set(traj.columns)

    steps = [(step, layers) for step, layers in iter_steps(paths.hidden_file(rid))]
    assert [s for s, _ in steps] == [0, 2, 4] and sorted(steps[0][1]) == [0, 1]
    assert steps[0][1][1].vectors.shape == (7 * 4, 16)  # 7 sets with a context x probe_per_set
    assert hidden_manifest(paths.hidden_file(rid))["repo_id"] == "local/pythia-tiny"

    params = load_typed_params("params.yaml")
    assert ("pythia", "lm", "tiny", None) in events.grid_runs(params)
    rows, layers = run_events(frame, events.settings(params.events).rules)
    assert {r["measure"] for r in rows} == {"rankme", "rankme_centred"} and rows[0]["total_steps"] == 4
    assert {"rankme_centred", "mean_dominance", "varies"} <= set(frame.columns)


def test_missing_revision_is_one_line_error(pythia_workdir, capsys):
    params = yaml.safe_load(open("params.yaml"))
    params["pythia"]["profiles"]["local"]["revisions"] = ["step0"]
    yaml.safe_dump(params, open("params.yaml", "w"))
    train_suite.main([])
    capsys.readouterr()
    params["pythia"]["profiles"]["local"]["revisions"] = ["step0", "step4"]
    yaml.safe_dump(params, open("params.yaml", "w"))
    with pytest.raises(SystemExit) as exc:
        fetch_pythia.main(["--model", "tiny"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    message = err[err.index("error:"):].rstrip("\n")  # after fetch's progress bar
    assert "\n" not in message and "'local/pythia-tiny'" in message and "'step4'" in message


def test_bad_params_name_the_key(pythia_workdir, capsys):
    params = yaml.safe_load(open("params.yaml"))
    params["pythia"]["profile"] = "nope"
    yaml.safe_dump(params, open("params.yaml", "w"))
    with pytest.raises(SystemExit):
        fetch_pythia.main(["--model", "tiny"])
    assert "pythia.profile" in capsys.readouterr().err
    params["pythia"]["profile"] = "local"
    params["pythia"]["test_acc"] = "chess"
    yaml.safe_dump(params, open("params.yaml", "w"))
    with pytest.raises(SystemExit):
        pythia_measure.main(["--model", "tiny"])
    assert "pythia.test_acc" in capsys.readouterr().err
