"""Bad input is one line naming the file or key, never a traceback or a silently smaller result:
cut and non-numeric tables, sizes larger than the data, NaN hidden states, bad Pythia manifests and
pickle-only snapshots, unknown grid entries."""
import copy
import json
import pickle

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from stages import paths

from stages.pipeline import extract, generate, measure, pythia_measure, train
from stages.config import LEVELS, MODEL_NAMES, TASK_NAMES
from stages.errors import PipelineError
from stages.io.checkpoints import write_manifest
from stages.io.hidden import schema, step_table
from stages.io.history import accuracy_by_step
from stages.io.measure_tables import read_landscape, read_measures
from stages.io.tables import read_csv, write_csv
from stages.params import validate_params
from stages.pythia import evalsets, hub
from stages.pipeline.train import resolve_train_params

RUN = "copy-easy-p405k-s0"
ARGS = ["--task", "copy", "--level", "easy"]
RUN_ARGS = ARGS + ["--model", "p405k", "--seed", "0"]
STEPS = [0, 1, 2, 3, 5, 8, 12]


def one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message, message
    return message


def stage_error(main, argv, capsys) -> str:
    """Run a stage's ``main``: it must exit 2 with exactly one ``error: ...`` line on stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.replace("\r", "\n")  # a progress bar may come first
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    return errors[0]


def set_params(workdir, edit):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    edit(params)
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return params


# ---------------------------------------------------------------- tables


def measures_frame(steps=STEPS, layers=(0, 1, 2)) -> pd.DataFrame:
    rows = [{"run": RUN, "step": s, "layer": l, "rankme": 1.0 + l + s / 10,
             "rankme_centred": np.nan if l == 0 else 2.0 + s / 10, "mean_dominance": 0.5, "varies": l > 0,
             "probe_acc": 0.25, "test_acc": s / 12, "n_params": 405000} for s in steps for l in layers]
    return pd.DataFrame(rows)


def landscape_frame() -> pd.DataFrame:
    return pd.DataFrame({"run": RUN, "step": [0, 2, 12], "test_acc": [0.0, 0.1, 0.9], "n_params": 405000,
                         "grad_erank": [3.5, 2.0, 4.0], "gradcov_saturated": [False, True, False],
                         "hessian_top1": [1.0, np.nan, 3.0], "llc": [0.5, 0.6, 0.7],
                         "llc_stationary": [True, None, False]})


def test_measures_table_round_trips(tmp_path):
    path = tmp_path / "m.csv"
    write_csv(measures_frame(), path)
    frame = read_measures(path, expected_steps=STEPS)
    assert sorted(frame["step"].unique()) == STEPS and frame["step"].dtype == np.int64
    assert frame["rankme_centred"].isna().sum() == len(STEPS)


def test_measures_table_cut_to_500_bytes(tmp_path):
    path = tmp_path / "m.csv"
    write_csv(measures_frame(), path)
    data = path.read_bytes()
    assert len(data) > 500
    path.write_bytes(data[:500])
    with pytest.raises(PipelineError) as exc:
        read_measures(path)
    assert f"corrupt table: {path}" in one_line(exc) and "truncated" in str(exc.value)


def test_measures_table_cut_at_a_row_end_misses_steps(tmp_path):
    path = tmp_path / "m.csv"
    write_csv(measures_frame(), path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1 + 3 * 4]))  # header + the first four steps' rows
    assert read_measures(path)["step"].nunique() == 4  # a whole table of four steps...
    with pytest.raises(PipelineError) as exc:  # ... but not the run's
        read_measures(path, expected_steps=STEPS)
    assert f"corrupt table: {path}" in one_line(exc) and "lacks steps 5, 8, 12" in str(exc.value)
    path.write_text("".join(lines[:1 + 3 * 4 + 2]))  # the fifth step with two of its three layers
    with pytest.raises(PipelineError) as exc:
        read_measures(path)
    assert f"corrupt table: {path}" in one_line(exc) and "step 5 has layers 0, 1" in str(exc.value)


@pytest.mark.parametrize("column,value,needle", [
    ("rankme", "abc", "column 'rankme' holds a non-numeric value in line 5: 'abc'"),
    ("step", "x12", "column 'step' holds a non-numeric value"),
    ("test_acc", "0.5%", "column 'test_acc' holds a non-numeric value"),
    ("rankme", np.inf, "column 'rankme' holds an infinite value"),
    ("layer", 1.5, "column 'layer' holds a non-integer value"),
    ("n_params", np.nan, "column 'n_params' has an empty cell"),
])
def test_measures_table_bad_cells(tmp_path, column, value, needle):
    path = tmp_path / "m.csv"
    frame = measures_frame().astype({column: object})
    frame.loc[3, column] = value
    write_csv(frame, path)
    with pytest.raises(PipelineError) as exc:
        read_measures(path)
    assert f"corrupt table: {path}" in one_line(exc) and needle in str(exc.value)


def test_measures_table_missing_column_and_duplicate_row(tmp_path):
    path = tmp_path / "m.csv"
    write_csv(measures_frame().drop(columns=["n_params"]), path)
    with pytest.raises(PipelineError, match="lacks column n_params"):
        read_measures(path)
    frame = measures_frame()
    write_csv(pd.concat([frame, frame.iloc[[4]]]), path)
    with pytest.raises(PipelineError, match="step 1 layer 1 appears twice"):
        read_measures(path)


def test_landscape_table_round_trips_and_refuses_a_cut(tmp_path):
    path = tmp_path / "l.csv"
    write_csv(landscape_frame(), path)
    frame = read_landscape(path)
    assert list(frame["step"]) == [0, 2, 12] and frame["gradcov_saturated"].dtype == bool
    assert list(frame["llc_stationary"][[0, 2]]) == [True, False] and pd.isna(frame["llc_stationary"][1])

    data = path.read_bytes()
    path.write_bytes(data[:data.rindex(b",") - 2])  # the last row cut mid-way: NaN cells to pandas
    assert pd.read_csv(path).iloc[-1].isna().any()
    with pytest.raises(PipelineError) as exc:
        read_landscape(path)
    assert f"corrupt table: {path}" in one_line(exc) and "truncated" in str(exc.value)

    lines = data.decode().splitlines()
    path.write_text("\n".join([lines[0], lines[1], ",".join(lines[2].split(",")[:5]), lines[3]]) + "\n")
    with pytest.raises(PipelineError) as exc:  # a short row that does end with a newline
        read_landscape(path)
    assert f"corrupt table: {path} (line 3 has 5 fields, the header 9)" in one_line(exc)


def test_landscape_table_non_numeric_cell_and_header(tmp_path):
    path = tmp_path / "l.csv"
    frame = landscape_frame().astype({"llc": object})
    frame.loc[1, "llc"] = "n/a?"
    write_csv(frame, path)
    with pytest.raises(PipelineError) as exc:
        read_landscape(path)
    assert f"corrupt table: {path} (column 'llc' holds a non-numeric value in line 3" in one_line(exc)
    write_csv(landscape_frame().drop(columns=["step"]), path)
    with pytest.raises(PipelineError, match="lacks column step"):
        read_landscape(path)


def test_read_csv_refuses_a_file_without_final_newline(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    assert read_csv(path).to_dict("list") == {"a": [1], "b": [2]}
    path.write_text("a,b\n1,2")
    with pytest.raises(PipelineError) as exc:
        read_csv(path)
    assert one_line(exc) == f"corrupt table: {path} (truncated: it does not end with a newline)"
    path.write_text("")
    with pytest.raises(PipelineError, match=f"corrupt table: {path}"):
        read_csv(path)
    path.write_text("a,b\n1,2\n3\n")  # a short row is NaN by default (unchanged), an error with full_rows
    assert read_csv(path)["b"].isna().sum() == 1
    with pytest.raises(PipelineError, match="line 3 has 1 fields"):
        read_csv(path, full_rows=True)


def write_history(steps, accs=None):
    frame = pd.DataFrame({"run": RUN, "step": steps, "train_loss": 1.0,
                          "batch_loss": [np.nan] + [1.0] * (len(steps) - 1),
                          "test_loss": 1.0, "test_acc": accs if accs is not None else [s / 12 for s in steps],
                          "train_acc": 0.5, "lr": 1e-3})
    write_csv(frame, paths.history_file(RUN))


def test_history_must_match_the_checkpoint_manifest(workdir, capsys):
    write_manifest(paths.checkpoint_dir(RUN), {"model": {}, "steps": STEPS})
    write_history(STEPS)
    assert accuracy_by_step(RUN) == {s: s / 12 for s in STEPS}

    history = paths.history_file(RUN)
    lines = history.read_text().splitlines(keepends=True)
    history.write_text("".join(lines[:4]))  # header + 3 whole rows
    with pytest.raises(PipelineError) as exc:
        accuracy_by_step(RUN)
    assert one_line(exc) == (f"corrupt table: {history} (its steps do not match the checkpoint manifest "
                             f"{paths.checkpoint_dir(RUN) / 'manifest.json'}: it has 3 steps, the manifest 7)")
    err = stage_error(measure.main, RUN_ARGS, capsys)  # the stage stops before reading hidden states
    assert f"corrupt table: {history}" in err and "it has 3 steps, the manifest 7" in err

    history.write_text("".join(lines)[:-9])  # cut mid-row
    assert f"corrupt table: {history} (truncated" in stage_error(measure.main, RUN_ARGS, capsys)

    write_history([0, 1, 2, 4, 5, 8, 12])
    with pytest.raises(PipelineError, match="row 4 is step 4, the manifest's is 3"):
        accuracy_by_step(RUN)


@pytest.mark.parametrize("column,value,needle", [
    ("test_acc", "high", "column 'test_acc' holds a non-numeric value in line 4: 'high'"),
    ("test_acc", np.nan, "column 'test_acc' has an empty cell in line 4"),
    ("test_acc", -np.inf, "column 'test_acc' holds an infinite value"),
    ("step", "two", "column 'step' holds a non-numeric value"),
    ("train_loss", "oops", "column 'train_loss' holds a non-numeric value"),
])
def test_history_non_numeric_or_missing_values(workdir, column, value, needle):
    write_manifest(paths.checkpoint_dir(RUN), {"model": {}, "steps": STEPS})
    write_history(STEPS)
    frame = pd.read_csv(paths.history_file(RUN)).astype({column: object})
    frame.loc[2, column] = value
    write_csv(frame, paths.history_file(RUN))
    with pytest.raises(PipelineError) as exc:
        accuracy_by_step(RUN)
    assert f"corrupt table: {paths.history_file(RUN)}" in one_line(exc) and needle in str(exc.value)


def test_checkpoint_manifest_steps_are_checked(workdir):
    write_manifest(paths.checkpoint_dir(RUN), {"model": {}, "steps": [0, 2, 1]})
    write_history([0, 2, 1])
    with pytest.raises(PipelineError, match="corrupt checkpoint manifest: .*manifest.json \\('steps' must be"):
        accuracy_by_step(RUN)


# ---------------------------------------------------------------- sizes larger than the data


def test_probe_size_larger_than_the_test_split(workdir):
    generate.main(ARGS)
    write_manifest(paths.checkpoint_dir(RUN), {"model": {"d_model": 128}, "steps": [0], "n_params": 1})
    n_test = pq.read_metadata(paths.dataset_dir("copy", "easy") / "test.parquet").num_rows
    params = set_params(workdir, lambda p: p["extract"].update(probe_size=n_test + 1))
    with pytest.raises(PipelineError) as exc:  # caught at params time (issue 23) ...
        validate_params(params)
    assert one_line(exc) == (f"params.yaml: 'datasets.n_test' = {n_test} is below 'extract.probe_size' = "
                             f"{n_test + 1} (the probe set is the first {n_test + 1} test examples of "
                             f"tasks.copy.easy): at least {n_test + 1}")
    params["extract"]["probe_size"] = n_test
    cfg = validate_params(params).extract.model_copy(update={"probe_size": n_test + 1})
    with pytest.raises(PipelineError) as exc:  # ... and against the data read, should they differ
        extract.extract("copy", "easy", "p405k", 0, cfg, progress=False)
    assert one_line(exc) == (f"'extract.probe_size' = {n_test + 1} exceeds the {n_test} test examples of "
                             "data/datasets/copy-easy/test.parquet")
    assert not paths.hidden_file(RUN).exists()


def test_probe_per_set_larger_than_a_set():
    items = evalsets.generate(5, 0)
    assert len(pythia_measure.probe_set(items, 5)) == 5 * items.loc[items["context"] != "", "eval_set"].nunique()
    with pytest.raises(PipelineError) as exc:
        pythia_measure.probe_set(items, 6)
    assert one_line(exc).startswith("'pythia.probe_per_set' = 6 exceeds the 5 items of evaluation set")


def train_params(repo_params, **defaults) -> dict:
    from tests.conftest import tiny_params

    params = tiny_params(repo_params)
    params["train"]["defaults"].update(defaults)
    return params


def test_eval_train_max_is_a_cap_but_must_be_a_positive_integer(repo_params):
    hp = resolve_train_params(validate_params(train_params(repo_params, eval_train_max=10**9)), "copy", "easy")
    assert hp.eval_train_max == 10**9
    for bad in (-1, 0, 2.5, "all", True):
        with pytest.raises(PipelineError) as exc:
            validate_params(train_params(repo_params, eval_train_max=bad))
        assert "'train.defaults.eval_train_max' must be a positive integer" in one_line(exc)


@pytest.mark.parametrize("betas", [[0.9], [0.9, 0.98, 0.999], [0.9, 1.0], [-0.1, 0.9], ["0.9", 0.98], [True, 0.9],
                                   "0.9,0.98", 0.9, None])
def test_bad_betas(repo_params, betas):
    with pytest.raises(PipelineError) as exc:
        validate_params(train_params(repo_params, betas=betas))
    assert "'train.defaults.betas' must be a list of two numbers in [0, 1)" in one_line(exc)


def test_good_betas(repo_params):
    hp = resolve_train_params(validate_params(train_params(repo_params, betas=[0, 0.999])), "copy", "easy")
    assert hp.betas == (0, 0.999) and hp.record()["betas"] == [0, 0.999]


def test_train_overrides_must_be_mappings(repo_params):
    params = train_params(repo_params)
    params["train"]["tasks"]["copy"] = [150]
    with pytest.raises(PipelineError) as exc:
        validate_params(params)
    assert one_line(exc).startswith("params.yaml: 'train.tasks.copy' must be a mapping")
    params["train"]["tasks"]["copy"] = {"all": {"steps": 20}, "easy": 7}
    with pytest.raises(PipelineError, match="'train.tasks.copy.easy' must be a mapping"):
        validate_params(params)
    params["train"]["tasks"]["copy"] = {"all": [20]}
    with pytest.raises(PipelineError, match="'train.tasks.copy.all' must be a mapping"):
        validate_params(params)
    params["train"]["tasks"]["copy"] = {"all": {"steps": 20}, "easy": {"steps": 30}}
    assert resolve_train_params(validate_params(params), "copy", "easy").steps == 30
    assert resolve_train_params(validate_params(params), "copy", "hard").steps == 20
    params["train"]["tasks"]["copy"] = None  # an empty override is fine
    assert resolve_train_params(validate_params(params), "copy", "easy").steps == 12
    params["train"]["defaults"] = [1]
    with pytest.raises(PipelineError, match="'train.defaults' must be a mapping"):
        validate_params(params)


def test_bad_betas_stop_the_train_stage(workdir, capsys):
    generate.main(ARGS)
    set_params(workdir, lambda p: p["train"]["defaults"].update(betas=[0.9, 1.5]))
    assert "betas' must be a list of two numbers in [0, 1)" in stage_error(train.main, RUN_ARGS, capsys)
    assert not paths.checkpoint_dir(RUN).exists()


# ---------------------------------------------------------------- NaN hidden states


def test_nan_hidden_states_are_named(workdir, capsys):
    write_manifest(paths.checkpoint_dir(RUN), {"model": {}, "steps": [0, 4]})
    write_history([0, 4], [0.0, 0.5])
    rng = np.random.default_rng(0)
    sch = schema(8, {"run": RUN, "manifest": json.dumps({"n_params": 10, "steps": [0, 4]})})
    path = paths.hidden_file(RUN)
    path.parent.mkdir(parents=True)
    samples = np.arange(16)
    with pq.ParquetWriter(path, sch) as writer:
        for step in (0, 4):
            states = rng.normal(size=(3, 16, 8)).astype(np.float32)
            if step == 4:
                states[2, 5, 3] = np.nan
            writer.write_table(step_table(step, states, samples, np.zeros(16), samples % 4, sch))
    err = stage_error(measure.main, RUN_ARGS, capsys)
    assert f"corrupt Parquet file: {path} (step 4 layer 2: hidden states hold NaN or inf" in err
    assert not paths.measures_file(RUN).exists()


# ---------------------------------------------------------------- Pythia manifests and weights


def good_manifest() -> dict:
    return {"model": "tiny", "repo_id": "local/pythia-tiny", "cache_dir": "data/pythia/hub",
            "revisions": [{"revision": f"step{s}", "step": s, "commit": f"{s:040x}",
                           "files": {"config.json": {"size": 10, "sha256": "ab"}}} for s in (0, 2)]}


@pytest.mark.parametrize("edit,needle", [
    (lambda m: m.pop("revisions"), "needs repo_id, cache_dir, revisions"),
    (lambda m: m.update(repo_id=3), "'repo_id' must be a non-empty string"),
    (lambda m: m.update(revisions={}), "'revisions' must be a non-empty list"),
    (lambda m: m["revisions"][1].pop("commit"), "'revisions[1]' lacks 'commit'"),
    (lambda m: m["revisions"][0].update(step="0"), "'revisions[0].step' must be a non-negative integer"),
    (lambda m: m["revisions"][0].update(commit="main"), "'revisions[0].commit' must be a 40-digit hex"),
    (lambda m: m["revisions"][0].update(files=["config.json"]), "'revisions[0].files' must be a non-empty mapping"),
    (lambda m: m["revisions"][0]["files"].update({"../x": {"size": 1}}), "names '../x', not a path inside"),
    (lambda m: m["revisions"][0]["files"]["config.json"].pop("size"), "config.json.size' must be a non-negative"),
    (lambda m: m["revisions"].reverse(), "distinct steps in increasing order"),
    (lambda m: m["revisions"].__setitem__(0, "step0"), "'revisions[0]' must be a mapping"),
])
def test_pythia_manifest_with_wrong_keys(tmp_path, edit, needle):
    path = tmp_path / "tiny.json"
    manifest = good_manifest()
    path.write_text(json.dumps(manifest))
    assert hub.read_manifest(path) == manifest
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(PipelineError) as exc:
        hub.read_manifest(path)
    assert one_line(exc).startswith(f"corrupt manifest: {path} (") and needle in str(exc.value)


def test_pythia_measure_stops_on_a_bad_manifest(workdir, repo_params):
    from stages.pythia.paths import manifest_file
    from tests.conftest import tiny_params
    from tests.pythia_helpers import pythia_params

    params = tiny_params(repo_params)
    params["pythia"] = pythia_params(repo_params)["pythia"]
    manifest = good_manifest()
    del manifest["revisions"][0]["files"]
    manifest_file("tiny").parent.mkdir(parents=True)
    manifest_file("tiny").write_text(json.dumps(manifest))
    typed = validate_params(params)
    with pytest.raises(PipelineError) as exc:
        pythia_measure.measure("tiny", typed.pythia, typed.measures.probe, progress=False)
    assert one_line(exc) == f"corrupt manifest: {manifest_file('tiny')} ('revisions[0]' lacks 'files')"


class Planted:
    """Unpickling this writes ``marker``: what a pickled weights file could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('unpickled')",)


def publish(tmp_path, revision, keep_safetensors: bool, marker):
    """A tiny model published at ``revision`` with a planted ``pytorch_model.bin``; the manifest entry."""
    from stages.pythia import local_hub, suite
    from tests.pythia_helpers import TINY

    tokenizer = suite.build_tokenizer()
    model = suite.build_model(tokenizer, TINY, 0)

    def save(directory):
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        if not keep_safetensors:
            for f in directory.glob("*.safetensors"):
                f.unlink()
        (directory / "pytorch_model.bin").write_bytes(pickle.dumps(Planted(marker)))

    cache = tmp_path / "hub"
    local_hub.publish(cache, "local/pythia-tiny", revision, save)
    entry = hub.fetch_revision("local/pythia-tiny", revision, str(cache), offline=True)
    return {"repo_id": "local/pythia-tiny", "cache_dir": str(cache), "revisions": [entry]}, entry


def test_pickle_only_snapshot_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    marker = tmp_path / "unpickled"
    manifest, entry = publish(tmp_path, "step0", keep_safetensors=False, marker=marker)
    with pytest.raises(PipelineError) as exc:
        pythia_measure.load(manifest, entry, "cpu")
    message = one_line(exc)
    assert message.startswith("model 'local/pythia-tiny' revision 'step0': no safetensors weights in ")
    assert "only pickle weights (pytorch_model.bin)" in message and "load only from safetensors" in message
    assert not marker.exists()


def test_weights_load_with_use_safetensors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    marker = tmp_path / "unpickled"
    manifest, entry = publish(tmp_path, "step2", keep_safetensors=True, marker=marker)
    real = pythia_measure.AutoModelForCausalLM
    calls = []

    class Spy:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            calls.append(kwargs)
            return real.from_pretrained(*args, **kwargs)

    monkeypatch.setattr(pythia_measure, "AutoModelForCausalLM", Spy)
    model, _ = pythia_measure.load(manifest, entry, "cpu")
    assert calls == [{"use_safetensors": True}] and model.config.hidden_size == 16
    assert not marker.exists()


# ---------------------------------------------------------------- grid


def test_grid_names_match_the_registries():
    from stages.models import PRESETS
    from stages.tasks import LEVELS as TASK_LEVELS, TASKS

    assert tuple(TASKS) == TASK_NAMES and tuple(PRESETS) == MODEL_NAMES and TASK_LEVELS == LEVELS


def test_grid_settings(repo_params):
    params = copy.deepcopy(repo_params)
    params["grid"] = {"tasks": ["copy", "sort"], "levels": ["easy", "hard"], "models": ["p405k", "p3m"], "seeds": [0, 3]}
    grid = validate_params(params).grid
    assert (grid.tasks, grid.levels, grid.models, grid.seeds) == (["copy", "sort"], ["easy", "hard"], ["p405k", "p3m"], [0, 3])


@pytest.mark.parametrize("key,value,needle", [
    ("tasks", ["copy", "copi"], "unknown entry 'copi' in 'grid.tasks' (choose from: copy, reverse"),
    ("levels", ["easy", "insane"], "unknown entry 'insane' in 'grid.levels' (choose from: easy, medium, hard)"),
    ("models", ["gpt5"], "unknown entry 'gpt5' in 'grid.models' (choose from: p100k, p405k"),
    ("models", [3], "unknown entry 3 in 'grid.models'"),
    ("tasks", [], "'grid.tasks' must be a non-empty list"),
    ("levels", "easy", "'grid.levels' must be a non-empty list"),
    ("tasks", ["copy", "copy"], "'grid.tasks' repeats an entry"),
    ("seeds", [0, -1], "'grid.seeds[1]' must be a non-negative integer"),
])
def test_unknown_grid_entries(repo_params, key, value, needle):
    params = copy.deepcopy(repo_params)
    params["grid"][key] = value
    with pytest.raises(PipelineError) as exc:
        validate_params(params)
    assert needle in one_line(exc)


@pytest.mark.parametrize("stage,key,value", [
    ("generate", "tasks", ["copy", "copyy"]),
    ("generate", "levels", ["hard", "impossible"]),
    ("train", "models", ["p405k", "p999m"]),
    ("train", "tasks", ["Copy"]),
])
def test_unknown_grid_entries_stop_the_stages(workdir, repo_params, capsys, stage, key, value):
    from tests.conftest import tiny_params

    params = tiny_params(repo_params)
    params["grid"][key] = value
    with pytest.raises(PipelineError) as exc:  # the schema the stages' params pass (load_typed_params)
        typed = validate_params(params)
        if stage == "generate":
            generate.generate("copy", "easy", typed)
        else:
            train.run("copy", "easy", "p405k", 0, typed, progress=False)
    assert f"unknown entry {value[-1]!r} in 'grid.{key}'" in one_line(exc)

    set_params(workdir, lambda p: p["grid"].update({key: value}))
    main = {"generate": generate.main, "train": train.main}[stage]
    err = stage_error(main, ARGS if stage == "generate" else RUN_ARGS, capsys)
    assert f"grid.{key}" in err and repr(value[-1]) in err
    assert not paths.dataset_dir("copy", "easy").exists() and not paths.checkpoint_dir(RUN).exists()
