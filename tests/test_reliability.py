"""Hostile inputs from the reliability audit (issue 24), kept as tests that failed on the code before
the fix: flipped or swapped checkpoints, leftovers of a killed save entering an output, files written
0600 under umask 022, a changed Pythia cache file of the same size."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stages import paths

from stages.pipeline import extract, generate, train
from stages.errors import PipelineError
from stages.io.checkpoints import MANIFEST, read_manifest, step_file
from stages.params import validate_params
from stages.training import loop

ROOT = Path(__file__).resolve().parents[1]
RUN = "copy-easy-p405k-s0"
ARGS = ["--task", "copy", "--level", "easy"]
RUN_ARGS = ARGS + ["--model", "p405k", "--seed", "0"]


def stage_error(main, argv, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: ") and sum(line.startswith("error: ") for line in lines) == 1
    return lines[-1]


@pytest.fixture
def trained(workdir):
    old = os.umask(0o022)
    try:
        generate.main(ARGS)
        train.main(RUN_ARGS)
    finally:
        os.umask(old)
    return paths.checkpoint_dir(RUN)


# ---------------------------------------------------------------- item 3: checkpoints verified


def test_manifest_records_every_checkpoints_sha256(trained):
    import hashlib

    manifest = read_manifest(trained)
    assert sorted(manifest["sha256"]) == [step_file(trained, s).name for s in manifest["steps"]]
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256((trained / name).read_bytes()).hexdigest() == digest


def test_flipped_bytes_in_a_checkpoint_stop_extract(trained, capsys):
    steps = read_manifest(trained)["steps"]
    victim = step_file(trained, steps[2])
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x01  # inside the last tensor: still a valid safetensors file that loads
    victim.write_bytes(bytes(data))
    err = stage_error(extract.main, RUN_ARGS, capsys)
    assert err.startswith(f"error: corrupt checkpoint: {victim} (sha256 ") and "rerun its train stage" in err
    assert not paths.hidden_file(RUN).exists()


def test_a_checkpoint_copied_over_another_stops_extract(trained, capsys):
    steps = read_manifest(trained)["steps"]
    shutil.copyfile(step_file(trained, steps[1]), step_file(trained, steps[4]))
    err = stage_error(extract.main, RUN_ARGS, capsys)
    assert err.startswith(f"error: corrupt checkpoint: {step_file(trained, steps[4])} (sha256 ")


def test_a_manifest_without_hashes_is_refused_where_weights_load(trained):
    manifest = yaml.safe_load((trained / MANIFEST).read_text())  # JSON is YAML
    manifest.pop("sha256")
    (trained / MANIFEST).write_text(__import__("json").dumps(manifest))
    assert read_manifest(trained)["steps"]  # reading the steps alone needs no hashes
    with pytest.raises(PipelineError, match=r"manifest.json lacks 'sha256'"):
        read_manifest(trained, verify=True)


# ---------------------------------------------------------------- item 5: kills leave nothing; umask


def test_outputs_honour_the_umask(trained):
    modes = {p.name: p.stat().st_mode & 0o777 for p in trained.iterdir()}
    assert set(modes.values()) == {0o644}, modes
    assert trained.stat().st_mode & 0o777 == 0o755
    assert paths.history_file(RUN).stat().st_mode & 0o777 == 0o644


def test_leftovers_of_a_killed_save_never_reach_the_checkpoint_output(workdir, monkeypatch):
    """A kill -9 inside a save leaves safetensors' ``.tmpXXXXXX`` (earlier versions) and an atomic
    temporary in the run's partial folder; the resumed run must not carry them into its output."""
    generate.main(ARGS)
    original, calls = loop.save_state, {"n": 0}

    def save(model, path):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt  # the process dies here
        return original(model, path)

    monkeypatch.setattr(loop, "save_state", save)
    with pytest.raises(KeyboardInterrupt):
        train.main(RUN_ARGS)
    monkeypatch.setattr(loop, "save_state", original)
    partial = paths.checkpoint_dir(RUN).with_name(f".{RUN}.partial")
    (partial / ".tmpAb3dEf").write_bytes(b"\0" * 4096)
    (partial / f".atomic-step_0000005.safetensors.{os.uname().nodename}-999999999.x1y2.tmp").write_bytes(b"\0")
    (partial / "step_0000005.tmp").write_bytes(b"\0")  # the name the save used before the fix
    train.main(RUN_ARGS)
    manifest = read_manifest(paths.checkpoint_dir(RUN), verify=True)
    expected = {step_file("", s).name for s in manifest["steps"]} | {MANIFEST}
    assert {p.name for p in paths.checkpoint_dir(RUN).iterdir()} == expected


def dvc_ignored(*relpaths) -> set[str]:
    out = subprocess.run(["dvc", "check-ignore", *relpaths], cwd=ROOT, capture_output=True, text=True)
    return set(out.stdout.split())


def test_temporary_names_are_invisible_to_dvc():
    """A killed run's temporaries must not enter an output's hash, a directory dependency, or the
    plots (`dvc plots show` draws every file under dvclive/, a killed run's temp folder included)."""
    temps = ["dvclive/.atomic-copy-easy-p405k-s0.host-12.abc.tmp/plots/metrics/lr.tsv",
             "data/checkpoints/copy-easy-p405k-s0/.tmpAb3dEf",
             "data/measures/.atomic-copy-easy-p405k-s0.csv.host-12.abc.tmp"]
    kept = ["dvclive/copy-easy-p405k-s0/plots/metrics/lr.tsv", "data/checkpoints/copy-easy-p405k-s0/step_0000001.safetensors"]
    assert dvc_ignored(*temps, *kept) == set(temps)


# ---------------------------------------------------------------- Pythia cache: sha256 re-checked


def test_pythia_cache_file_changed_after_fetch_is_refused(tmp_path, monkeypatch):
    from stages.pythia import hub
    from tests.pythia_helpers import publish_tiny

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    old = os.umask(0o022)
    try:
        publish_tiny(tmp_path, "local/pythia-tiny", ["step0"])
    finally:
        os.umask(old)
    entry = hub.fetch_revision("local/pythia-tiny", "step0", str(tmp_path), offline=True)
    manifest = {"repo_id": "local/pythia-tiny", "cache_dir": str(tmp_path), "verified": "sha256", "revisions": [entry]}
    snapshot = hub.snapshot_path(manifest, entry)
    weights = snapshot / "model.safetensors"
    assert weights.stat().st_mode & 0o777 == 0o644  # safetensors alone writes 0600
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size
    weights.write_bytes(bytes(data))
    with pytest.raises(PipelineError, match="model.safetensors fails the sha256 that fetch_pythia recorded"):
        hub.snapshot_path(manifest, entry)
    assert hub.snapshot_path({**manifest, "verified": "size"}, entry) == snapshot  # verify: size checks sizes only


# ---------------------------------------------------------------- item 1: no params value reaches a shell


def make_repo_copy(dest: Path, repo_params: dict) -> None:
    """The repository's tracked files (working-tree versions; no data, no dvc.lock) with tiny params,
    committed in a fresh git repository, as `dvc exp run` needs."""
    from tests.conftest import tiny_params
    from tests.pythia_helpers import pythia_params

    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        if rel == "dvc.lock" or rel.startswith("data/") or not (ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes((ROOT / rel).read_bytes())
    params = pythia_params({**tiny_params(repo_params), "pythia": repo_params["pythia"]})
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=dest, check=True)


def run_dvc(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    from stages.cluster.dag import dvc_command, dvc_env

    return subprocess.run(dvc_command(*args), cwd=cwd, env={**dvc_env(), "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True)


# (params list, hostile list, a matrix stage that pastes it into its command, that stage's data deps:
# made to exist so that DVC gets as far as running the command; stages that track params per task,
# such as generate's tasks.<task>.<level>, are refused by DVC itself for an unknown task)
HOSTILE = [
    ("grid.tasks", ["copy;touch pwned_tasks;"], "extract",
     ["data/checkpoints/copy;touch pwned_tasks;-easy-p405k-s0", "data/datasets/copy;touch pwned_tasks;-easy"]),
    ("grid.levels", ["easy$(touch pwned_levels)"], "extract",
     ["data/checkpoints/copy-easy$(touch pwned_levels)-p405k-s0", "data/datasets/copy-easy$(touch pwned_levels)"]),
    ("grid.models", ["p405k;touch pwned_models;"], "train", ["data/datasets/copy-easy"]),
    ("grid.seeds", ["$(touch pwned_seeds)0"], "train", ["data/datasets/copy-easy"]),
    ("pythia.models", ["tiny`touch pwned_pythia`"], "fetch_pythia", ["data/pythia/hub"]),
]


@pytest.mark.heavy
def test_no_params_value_reaches_a_shell(tmp_path, repo_params):
    """Shell metacharacters in every matrix list (as `dvc exp run -S` writes them into params.yaml),
    then `dvc repro`: DVC used to paste them into the stage command (``--model ${item.model}``) and the
    shell ran them before any stage read params. (`dvc repro` rather than `dvc exp run`, whose checkout
    removes the placeholder dependencies this workspace without a dvc.lock relies on.)"""

    repo = tmp_path / "repo"
    repo.mkdir()
    make_repo_copy(repo, repo_params)
    assert run_dvc(repo, "repro", "--single-item", "code").returncode == 0  # the code manifests every stage depends on
    for key, values, stage, deps in HOSTILE:
        subprocess.run(["git", "checkout", "-q", "--", "params.yaml"], cwd=repo, check=True)
        for dep in deps:
            (repo / dep).mkdir(parents=True, exist_ok=True)
        params = yaml.safe_load((repo / "params.yaml").read_text())
        section, name = key.split(".")
        params[section][name] = values  # what `dvc exp run -S key=...` writes before it reproduces
        (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        proc = run_dvc(repo, "repro", "--single-item", stage)
        assert not list(tmp_path.rglob("pwned*")), f"{key}: a shell ran a params value: {proc.stdout}"
        assert proc.returncode != 0, proc.stdout + proc.stderr
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and f"'{key}" in errors[0], proc.stdout + proc.stderr
        for dep in deps:
            (repo / dep).rmdir()
    # the honest grid still runs through the same commands (entry from $DVC_STAGE), and params diff works
    subprocess.run(["git", "checkout", "-q", "--", "params.yaml"], cwd=repo, check=True)
    proc = run_dvc(repo, "repro", "--single-item", "generate@copy-easy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (repo / "data/datasets/copy-easy/train.parquet").is_file()
    assert run_dvc(repo, "params", "diff").returncode == 0


def test_matrix_stages_match_dvc_yaml():
    """stages.config.MATRIX (how a stage finds its entry from $DVC_STAGE) mirrors dvc.yaml's matrices,
    and no command interpolates anything."""
    from stages.config import MATRIX

    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    matrices = {name: {k: v.removeprefix("${").removesuffix("}") for k, v in body["matrix"].items()}
                for name, body in spec.items() if "matrix" in body}
    assert matrices == MATRIX
    assert not [name for name, body in spec.items() if "${" in str(body["cmd"])]


def test_matrix_entry_from_dvc_stage(workdir, monkeypatch):
    from stages.cli import stage_arguments

    monkeypatch.setenv("DVC_STAGE", "train@copy-easy-p405k-0")
    args = stage_arguments("", [], "task", "level", "model", "seed")
    assert (args.task, args.level, args.model, args.seed) == ("copy", "easy", "p405k", 0)
    monkeypatch.setenv("DVC_STAGE", "dvc.yaml:generate@copy-easy")
    assert stage_arguments("", [], "task", "level").task == "copy"
    monkeypatch.setenv("DVC_STAGE", "train@copy-easy-p405k-7")
    with pytest.raises(PipelineError, match="names no single entry of the matrix"):
        stage_arguments("", [], "task", "level", "model", "seed")
    monkeypatch.setenv("DVC_STAGE", "events")
    with pytest.raises(PipelineError, match="pass --task, --level"):
        stage_arguments("", [], "task", "level")
    args = stage_arguments("", ["--task", "mod", "--level", "hard"], "task", "level")  # explicit wins
    assert (args.task, args.level) == ("mod", "hard")


# ---------------------------------------------------------------- item 2: tables checked for meaning

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from stages.io.hidden import iter_steps, schema, step_table  # noqa: E402
from stages.io.measure_tables import read_accuracy, read_landscape, read_measures  # noqa: E402
from stages.io.tables import write_csv  # noqa: E402

MSTEPS = [0, 1, 2, 4, 8, 16]


def measures_table(tmp_path, run="copy-easy-p405k-s0", edit=None) -> Path:
    """A well-formed measures table as stage measure writes it: 3 layers (0 = embeddings, constant
    states: centred RankMe empty), dim 16, n_checkpoints in every row."""
    rows = []
    for k, step in enumerate(MSTEPS):
        for layer in range(3):
            varies = layer > 0
            rows.append({"run": run, "step": step, "layer": layer, "rankme": 3.0 + k,
                         "rankme_centred": 2.0 + k if varies else np.nan, "mean_dominance": 0.5, "varies": varies,
                         "probe_acc": 0.5, "test_acc": k / 5, "n_params": 1000, "dim": 16})
    frame = pd.DataFrame(rows)
    frame["n_checkpoints"] = len(MSTEPS)
    if edit:
        edit(frame)
    path = tmp_path / f"{run}.csv"
    write_csv(frame, path)
    return path


def refusal(fn, *args) -> str:
    with pytest.raises(PipelineError) as exc:
        fn(*args)
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_well_formed_tables_pass(tmp_path):
    assert len(read_measures(measures_table(tmp_path))) == 18
    assert len(read_measures(measures_table(tmp_path, "pythia-lm-tiny", lambda f: f.loc[0, "test_acc"].__class__)))


def test_measures_cut_at_a_step_boundary(tmp_path):
    path = measures_table(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1 + 3 * 4]))  # header + the first 4 steps: a clean row boundary
    assert refusal(read_measures, path) == (f"corrupt table: {path} (holds 4 steps, up to step 4; expected the 6 "
                                            "of 'n_checkpoints': cut, or rows removed)")


@pytest.mark.parametrize("column,value,expect", [
    ("test_acc", 7.5, "'test_acc' = 7.5, expected an accuracy in [0, 1]"),
    ("test_acc", 1.7, "'test_acc' = 1.7, expected an accuracy in [0, 1]"),
    ("test_acc", -0.2, "'test_acc' = -0.2, expected an accuracy in [0, 1]"),
    ("probe_acc", 2.0, "'probe_acc' = 2.0, expected an accuracy in [0, 1]"),
    ("rankme", 0.5, "'rankme' = 0.5, expected a RankMe in [1, dim]"),
    ("rankme", 17.0, "'rankme' = 17.0, expected a RankMe in [1, dim]"),
    ("rankme_centred", -3.0, "'rankme_centred' = -3.0, expected a RankMe in [1, dim]"),
    ("rankme_centred", np.nan, "'rankme_centred' is empty, expected a number where the layer's states vary"),
])
def test_measures_values_that_cannot_be(tmp_path, column, value, expect):
    def edit(frame):
        frame.loc[7, column] = value  # step 2, layer 1 (a varying layer)
    path = measures_table(tmp_path, edit=edit)
    message = refusal(read_measures, path)
    assert message.startswith(f"corrupt table: {path} (line 9, step 2, layer 1: ") and expect in message


def test_measures_steps_out_of_order(tmp_path):
    def edit(frame):
        frame.loc[frame["step"] == 2, "step"] = 99
    path = measures_table(tmp_path, edit=edit)
    assert "line 11: step 4 after step 99; expected each step once, in increasing order" in refusal(read_measures, path)


def test_pythia_measures_allow_chance_corrected_accuracy(tmp_path):
    def edit(frame):
        frame["test_acc"] = -0.25
    assert len(read_measures(measures_table(tmp_path, "pythia-lm-tiny", edit))) == 18
    with pytest.raises(PipelineError, match=r"expected an accuracy in \[0, 1\]"):
        read_measures(measures_table(tmp_path, "copy-easy-p405k-s0", edit))


def landscape_table(tmp_path) -> Path:
    frame = pd.DataFrame({"run": "r", "step": MSTEPS, "test_acc": np.linspace(0, 1, 6), "n_params": 10,
                          "n_checkpoints": 6, "llc": np.linspace(1, 2, 6), "gradcov_saturated": False})
    path = tmp_path / "landscape.csv"
    write_csv(frame, path)
    return path


def test_landscape_cut_at_a_row_boundary(tmp_path):
    path = landscape_table(tmp_path)
    assert len(read_landscape(path)) == 6
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:5]))
    assert "holds 4 steps, up to step 4; expected the 6 of 'n_checkpoints'" in refusal(read_landscape, path)


def accuracy_table(tmp_path, edit=None) -> Path:
    frame = pd.DataFrame([{"run": "pythia-lm-tiny", "step": s, "revision": f"step{s}", "eval_set": name,
                           "accuracy": 0.3, "n_items": 6, "chance": 0.25}
                          for s in (0, 2, 4) for name in ("agreement", "counting")])
    if edit:
        edit(frame)
    path = tmp_path / "accuracy.csv"
    write_csv(frame, path)
    return path


def test_pythia_accuracy_table(tmp_path):
    assert len(read_accuracy(accuracy_table(tmp_path), [0, 2, 4])) == 6
    path = accuracy_table(tmp_path, lambda f: f.__setitem__("accuracy", [0.3, 0.3, 5.0, 0.3, 0.3, 0.3]))
    assert "line 4, step 2, eval_set agreement: 'accuracy' = 5.0, expected an accuracy in [0, 1]" in refusal(
        read_accuracy, path)
    path = accuracy_table(tmp_path, lambda f: f.__setitem__("accuracy", ["0.3", "high", "0.3", "0.3", "0.3", "0.3"]))
    assert "column 'accuracy' holds a non-numeric value in line 3" in refusal(read_accuracy, path)
    path = accuracy_table(tmp_path)
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:6]))  # cut at a row boundary
    assert "evaluation set 'counting' has steps 0, 2; 'agreement' has 0, 2, 4" in refusal(read_accuracy, path, None)
    path = accuracy_table(tmp_path)
    assert "expected the 4 steps of the run's measures table" in refusal(read_accuracy, path, [0, 2, 4, 8])


def hidden_file(tmp_path, steps=(0, 4, 8), layers=3, rows=5) -> Path:
    sch = schema(4, {"run": "r", "manifest": json.dumps({"run": "r", "steps": list(steps), "n_params": 1})})
    path = tmp_path / "hidden.parquet"
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(path, sch) as writer:
        for step in steps:
            writer.write_table(step_table(step, rng.normal(size=(layers, rows, 4)), np.arange(rows),
                                          np.zeros(rows), np.arange(rows), sch))
    return path


def test_hidden_states_one_row_group_trusts_the_step_column(tmp_path):
    path = hidden_file(tmp_path)
    original = [(s, {l: st.vectors.copy() for l, st in layers.items()}) for s, layers in iter_steps(path)]
    pq.write_table(pq.read_table(path), path, row_group_size=10**6)  # a plain read/write round trip
    assert pq.ParquetFile(path).num_row_groups == 1
    again = list(iter_steps(path))
    assert [s for s, _ in again] == [0, 4, 8]
    for (s, layers), (_, states) in zip(again, original):
        assert all(np.array_equal(layers[l].vectors, states[l]) for l in states)


def test_hidden_states_with_a_row_group_removed(tmp_path):
    path = hidden_file(tmp_path)
    pf = pq.ParquetFile(path)
    kept = [pf.read_row_group(i) for i in (0, 2)]
    with pq.ParquetWriter(path.with_suffix(".cut"), pf.schema_arrow) as writer:
        for table in kept:
            writer.write_table(table)
    path.with_suffix(".cut").replace(path)
    assert refusal(lambda: list(iter_steps(path))) == (f"corrupt Parquet file: {path} (lacks step 4: expected the 3 "
                                                       "steps its manifest lists)")


def test_hidden_states_ragged_or_duplicated(tmp_path):
    path = hidden_file(tmp_path)
    pf = pq.ParquetFile(path)
    groups = [pf.read_row_group(i) for i in range(3)]
    for variant, expect in (([groups[0], groups[1].slice(0, 12), groups[2]], "step 4 has layers/rows 0:5, 1:5, 2:2"),
                            ([groups[0], groups[1], groups[1], groups[2]], "step 4 comes after step 4")):
        with pq.ParquetWriter(path, pf.schema_arrow) as writer:
            for table in variant:
                writer.write_table(table)
        assert expect in refusal(lambda: list(iter_steps(path)))


def test_history_accuracy_out_of_range(workdir):
    from stages.io.checkpoints import write_manifest
    from stages.io.history import accuracy_by_step

    write_manifest(paths.checkpoint_dir(RUN), {"model": {}, "steps": [0, 4]})
    frame = pd.DataFrame({"run": RUN, "step": [0, 4], "train_loss": 1.0, "batch_loss": [np.nan, 1.0],
                          "test_loss": 1.0, "test_acc": [0.0, 1.7], "train_acc": 0.5, "lr": 1e-3})
    write_csv(frame, paths.history_file(RUN))
    assert "(line 3, step 4: 'test_acc' = 1.7, expected an exact-match accuracy in [0, 1])" in refusal(
        accuracy_by_step, RUN)


# ---------------------------------------------------------------- item 4 (and issue 23 item 5): sizes fit the data


def test_a_modulus_too_small_for_the_probe_set_fails_at_params_time(repo_params):
    import copy

    from stages.params import validate_params

    params = copy.deepcopy(repo_params)
    params["tasks"]["mod"]["hard"]["modulus"] = 3
    assert refusal(validate_params, params) == (
        "params.yaml: 'tasks.mod.hard.modulus' = 3 leaves 5 test examples (9 inputs, train_fraction 0.5), fewer "
        "than 'extract.probe_size' = 512 needs for the probe set: modulus must be at least 32")
    params["tasks"]["mod"]["hard"]["modulus"] = 32  # 1024 inputs, 512 test: just enough
    validate_params(params)
    params["grid"]["tasks"] = ["parity"]  # 2^8 inputs at the easy level, half of them test
    assert "'tasks.parity.easy.length' = 8 leaves 128 test examples" in refusal(validate_params, params)
    assert "length must be at least 10" in refusal(validate_params, params)


def test_probe_train_fraction_must_leave_both_parts(repo_params):
    import copy

    from stages.params import validate_params

    for bad in (1.0, 0.0):
        params = copy.deepcopy(repo_params)
        params["measures"]["probe"]["train_fraction"] = bad
        assert refusal(validate_params, params).startswith(
            f"params.yaml: 'measures.probe.train_fraction' = {bad} splits the 512 probe rows")


def test_input_space_matches_the_task_registry(repo_params):
    from stages.params import input_space, task_knobs, validate_params
    from stages.tasks.registry import layout

    params = validate_params(repo_params)
    for task, levels in repo_params["tasks"].items():
        for level in levels:
            knobs = params.tasks.knobs(task, level)
            assert input_space(task, knobs)[0] == layout(task, task_knobs(task, level, knobs)).space_size, (task, level)


def test_train_batch_larger_than_the_data_stops_before_training(workdir, capsys):
    generate.main(ARGS)
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["train"]["tasks"]["copy"]["easy"] = {"batch_size": 1000}
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    err = stage_error(train.main, RUN_ARGS, capsys)
    assert err == ("error: 'train.tasks.copy.easy.batch_size' = 1000 exceeds the 256 train examples of "
                   "data/datasets/copy-easy/train.parquet (run copy-easy-p405k-s0): at most 256")
    params["train"]["tasks"]["copy"]["easy"] = {}
    params["train"]["defaults"]["eval_train_max"] = 10**9
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    assert "'train.defaults.eval_train_max' = 1000000000 exceeds the 256" in stage_error(train.main, RUN_ARGS, capsys)
    assert not paths.checkpoint_dir(RUN).exists()


def test_landscape_sizes_and_memory_are_checked_before_compute(repo_params):
    import copy

    from stages.pipeline.landscape import check_fits
    from stages.params import validate_params

    manifest = {"n_params": 405_000, "model": {"d_model": 128, "n_layer": 2, "block_size": 10}}
    params = copy.deepcopy(repo_params)
    landscape = validate_params(params).landscape
    check_fits(landscape, 4000, "train.parquet", manifest)  # the repository's settings fit
    params["landscape"]["grad"]["samples"] = 100_000
    assert refusal(check_fits, validate_params(params).landscape, 4000, "train.parquet", manifest) == (
        "'landscape.grad.samples' = 100000 exceeds the 4000 train examples of train.parquet: at most 4000")
    params["landscape"]["grad"]["samples"] = 4000  # fits the data: 4000 x 405K float32 gradients per worker
    params["landscape"]["memory_gb"] = 8
    message = refusal(check_fits, validate_params(params).landscape, 4000, "train.parquet", manifest)
    assert message.startswith("landscape measures need about 12.8 GiB (2 worker(s) x 6.4 GiB") and (
        "over 'landscape.memory_gb' = 8: lower 'landscape.grad.samples'" in message)
    params["landscape"]["memory_gb"] = 16
    check_fits(validate_params(params).landscape, 4000, "train.parquet", manifest)
    params["landscape"]["memory_gb"] = "auto"  # 80% of this machine's RAM
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    params["landscape"]["workers"] = int(ram / 6.4e9) + 1
    assert "over 'landscape.memory_gb' = auto (" in refusal(
        check_fits, validate_params(params).landscape, 4000, "train.parquet", manifest)
    params = copy.deepcopy(repo_params)
    params["landscape"]["llc"]["samples"] = 10_000
    assert "'landscape.llc.samples' = 10000 exceeds the 4000" in refusal(
        check_fits, validate_params(params).landscape, 4000, "t", manifest)
    params["landscape"]["llc"].update(samples=16, batch_size=32)
    assert "'landscape.llc.batch_size' = 32 exceeds 'landscape.llc.samples' = 16" in refusal(validate_params, params)


# ---------------------------------------------------------------- item 6: YAML and the remaining tracebacks


def test_yaml_syntax_errors_duplicate_keys_and_alias_bombs_are_one_line(workdir, capsys):
    text = (workdir / "params.yaml").read_text()
    cases = {
        "grid:\n  tasks: [copy\n": "corrupt YAML file: params.yaml (line 3, column 1: while parsing a flow sequence",
        text + "runtime:\n  threads: 1\n": "duplicate key 'runtime' (first at line",
        "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefghi", "bcdefghij")):
            "expands to more than 100000 nodes through aliases",
    }
    for content, needle in cases.items():
        (workdir / "params.yaml").write_text(content)
        err = stage_error(generate.main, ARGS, capsys)
        assert err.startswith("error: corrupt YAML file: params.yaml (") and needle in err, err


def test_a_failed_rename_at_the_end_changes_no_output(tmp_path, monkeypatch):
    """The events stage's last rename failing used to leave its earlier tables replaced."""
    from stages.io import atomic
    from stages.io.atomic import output_set, write_text

    for name in ("a.csv", "b.csv", "c.csv"):
        (tmp_path / name).write_text(f"old {name}")
    real = os.replace

    def failing(src, dst):
        if Path(dst) == tmp_path / "c.csv" and not str(src).endswith(".old.tmp"):  # the new c.csv, not its restore
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing)
    with pytest.raises(PipelineError) as exc:
        with output_set():
            for name in ("a.csv", "b.csv", "c.csv"):
                write_text(tmp_path / name, f"new {name}")
    assert str(exc.value) == (f"could not write {tmp_path / 'c.csv'} ([Errno 28] No space left on device); no output "
                              "of this stage was changed")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {n: f"old {n}" for n in ("a.csv", "b.csv", "c.csv")}


def test_a_manifest_model_too_big_for_its_weights_is_refused_before_allocating(trained):
    from stages.io.checkpoints import load_model

    manifest = json.loads((trained / MANIFEST).read_text())
    manifest["model"]["d_model"] = 100_000  # 51 GB of weights if built
    message = refusal(load_model, trained, manifest["steps"][0], manifest)
    assert message.startswith(f"corrupt checkpoint: {step_file(trained, manifest['steps'][0])} (weights do not fit "
                              "the manifest's model: ")
    manifest["model"]["n_head"] = "eight"
    assert "'model' must map vocab_size, block_size, n_layer, n_head, d_model to positive integers" in refusal(
        load_model, trained, manifest["steps"][0], manifest)


# ---------------------------------------------------------------- item 7: the Dask dashboard on localhost


def test_dask_http_servers_listen_on_localhost_only():
    import psutil

    from stages.cluster.backends import ClusterSpec, open_client

    def listening() -> set[str]:
        return {c.laddr.ip for c in psutil.Process().net_connections("inet") if c.status == psutil.CONN_LISTEN}

    before = listening()
    with open_client(ClusterSpec(workers=2)):
        opened = listening() - before
    assert opened and opened <= {"127.0.0.1"}, opened


def test_params_check_command_reports_an_unknown_grid_task_in_one_line(workdir, capsys):
    from stages import params as schema

    schema.main([])
    assert capsys.readouterr().out == "params.yaml: valid (1 grid runs)\n"
    text = (workdir / "params.yaml").read_text().replace("- copy\n", "- modd\n", 1)
    (workdir / "params.yaml").write_text(text)
    with pytest.raises(SystemExit) as exc:
        schema.main([])
    assert exc.value.code == 2
    assert capsys.readouterr().err == ("error: params.yaml: unknown entry 'modd' in 'grid.tasks' (choose from: copy, "
                                       "reverse, compare, parity, add, mod, sort, mul)\n")


def test_landscape_budget_on_the_cpu_device(repo_params):
    """check_fits as the stage calls it, with the resolved device."""
    import torch

    from stages.pipeline.landscape import check_fits, memory_budget
    from stages.params import validate_params

    manifest = {"n_params": 405_000, "model": {"d_model": 128, "n_layer": 2, "block_size": 10}}
    check_fits(validate_params(repo_params).landscape, 4000, "t", manifest, torch.device("cpu"))
    assert memory_budget(8, torch.device("cpu")) == (8 * 2**30, "'landscape.memory_gb' = 8")
