"""Hostile inputs from the reliability audit (issue 24), kept as tests that failed on the code before
the fix: flipped or swapped checkpoints, leftovers of a killed save entering an output, files written
0600 under umask 022, a changed Pythia cache file of the same size."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stages import extract, generate, paths, train
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


def test_no_params_value_reaches_a_shell(tmp_path, repo_params):
    """Shell metacharacters in every matrix list (as `dvc exp run -S` writes them into params.yaml),
    then `dvc repro`: DVC used to paste them into the stage command (``--model ${item.model}``) and the
    shell ran them before any stage read params. (`dvc repro` rather than `dvc exp run`, whose checkout
    removes the placeholder dependencies this workspace without a dvc.lock relies on.)"""

    repo = tmp_path / "repo"
    repo.mkdir()
    make_repo_copy(repo, repo_params)
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
