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
