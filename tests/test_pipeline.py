"""The stages end to end on a tiny grid, and their behaviour on bad input."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from stages import paths

from stages.pipeline import events, generate, train
from checkpoint_helpers import listed_steps
from stages.io.checkpoints import step_file

RUN = "copy-easy-p405k-s0"
ARGS = ["--task", "copy", "--level", "easy"]


def test_tiny_pipeline_end_to_end(measured_workdir):
    """generate, train, extract and measure ran in ``measured_workdir`` (tests/conftest.py); events here."""
    events.main([])
    manifest = json.loads((paths.checkpoint_dir(RUN) / "manifest.json").read_text())
    assert listed_steps(paths.checkpoint_dir(RUN)) == manifest["steps"] and len(manifest["steps"]) == 6
    history = pd.read_csv(paths.history_file(RUN))
    assert list(history["step"]) == manifest["steps"] and history["test_acc"].between(0, 1).all()

    table = pq.read_table(paths.hidden_file(RUN))
    assert pq.ParquetFile(paths.hidden_file(RUN)).num_row_groups == 6  # one per checkpoint
    assert set(table.column_names) == {"step", "layer", "sample", "position", "label", "vector"}
    assert set(table.column("layer").to_pylist()) == {0, 1, 2}
    assert len(table) == 6 * 3 * 48 and table.schema.field("vector").type.list_size == 128

    m = pd.read_csv(paths.measures_file(RUN))
    assert len(m) == 6 * 3 and m["rankme"].between(1, 48).all() and m["probe_acc"].between(0, 1).all()
    assert (m[m.layer == 0]["rankme"] < 1.01).all()  # the separator's embedding is input-independent
    traj = pd.read_csv(paths.trajectory_file(RUN))
    assert {"step", "test_acc", "rankme_rel", "rankme_layer2"} <= set(traj.columns) and traj["rankme_rel"].iloc[0] == 1

    metrics = json.loads((paths.DATA / "events" / "levels.json").read_text())
    summary = json.loads((paths.METRICS / "summary.json").read_text())
    assert summary["runs"] == 1 and summary["precursor_easy_lvl"] in (0.0, 1.0, "n/a")  # flat: one screen
    assert all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in summary.values())  # no null
    paper = pd.read_csv(paths.METRICS / "paper.csv")
    assert set(paper["verdict"]) <= {"consistent", "not reproduced", "inconclusive", "not measurable", "no paper value"}
    assert "not measurable" in set(paper[paper["claim"].str.startswith("cross-scale")]["verdict"])
    assert "copy-easy-p405k" in metrics["configurations"] and "easy" in metrics["by_level"]
    runs = pd.read_csv(paths.DATA / "events" / "runs.csv")
    assert set(runs["measure"]) == {"rankme", "rankme_centred"} and set(runs["run"]) == {RUN}
    assert {"rankme_centred", "mean_dominance", "varies"} <= set(m.columns)
    assert not m[m.layer == 0]["varies"].any() and m[m.layer == 0]["rankme_centred"].isna().all()
    for name in ("threshold", "resolution"):
        assert (paths.PLOTS / "sensitivity" / f"{name}.csv").is_file()
    chart = pd.read_csv(paths.run_plot_file(RUN))
    centred = runs[runs["measure"] == "rankme_centred"].iloc[0]
    marks = chart.dropna(subset=["event"]).set_index("event")["event_step"]
    for event in ("collapse", "recovery", "acquisition"):  # the chart's rules are the run's events
        expected = centred[f"{event}_step"]
        assert (event not in marks and pd.isna(expected)) or marks[event] == expected
    assert (paths.DATA / "events" / "runs.csv").is_file() and (paths.DATA / "events" / "cross_scale.json").is_file()
    assert (paths.PLOTS / "figures" / "trajectories.png").stat().st_size > 1000
    assert not list(paths.DATA.rglob("*.tmp")) and not list(paths.DATA.rglob("*.partial"))


def test_training_is_deterministic_and_resumes_after_a_crash(trained_workdir, monkeypatch):
    reference = pd.read_csv(paths.history_file(RUN))
    final = step_file(paths.checkpoint_dir(RUN), 12).read_bytes()

    from stages.training import loop

    original = loop.save_state
    calls = {"n": 0}

    def crash_after_three(model, path):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("simulated crash")
        original(model, path)

    monkeypatch.setattr(loop, "save_state", crash_after_three)
    import shutil

    shutil.rmtree(paths.checkpoint_dir(RUN))
    paths.history_file(RUN).unlink()
    with pytest.raises(KeyboardInterrupt):
        train.main(ARGS + ["--model", "p405k", "--seed", "0"])
    assert not paths.checkpoint_dir(RUN).exists() and not paths.history_file(RUN).exists()
    partial = paths.checkpoint_dir(RUN).with_name(f".{RUN}.partial")
    assert (partial / "resume.json").is_file()

    monkeypatch.setattr(loop, "save_state", original)
    train.main(ARGS + ["--model", "p405k", "--seed", "0"])
    resumed = pd.read_csv(paths.history_file(RUN))
    pd.testing.assert_frame_equal(resumed, reference)
    assert step_file(paths.checkpoint_dir(RUN), 12).read_bytes() == final
    assert not partial.exists()


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("args,needle", [
    (["stages.pipeline.generate", "--task", "copi", "--level", "easy"], "unknown task 'copi'"),
    (["stages.pipeline.generate", "--task", "copy", "--level", "insane"], "unknown level 'insane'"),
    (["stages.pipeline.train", "--task", "copy", "--level", "easy", "--model", "gpt5", "--seed", "0"], "unknown model 'gpt5'"),
    (["stages.pipeline.train", "--task", "copy", "--level", "easy", "--model", "p405k", "--seed", "0"], "missing dataset directory: data/datasets/copy-easy"),
    (["stages.pipeline.extract", "--task", "copy", "--level", "easy", "--model", "p405k", "--seed", "0"], "missing checkpoint directory: data/checkpoints/copy-easy-p405k-s0"),
    (["stages.pipeline.measure", "--task", "copy", "--level", "easy", "--model", "p405k", "--seed", "0"], "missing table: data/history/copy-easy-p405k-s0.csv"),
])
def test_cli_errors_are_one_line(workdir, args, needle):
    result = cli(*args, cwd=workdir)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and needle in result.stderr, result.stderr


@pytest.mark.parametrize("key,value,needle", [
    ("steps", 0, "steps' must be a positive integer"),
    ("batch_size", -1, "batch_size' must be a positive integer"),
    ("schedule", "zigzag", "unknown train.defaults.schedule 'zigzag'"),
    ("colour", 1, "'train.defaults.colour' is not a known key"),
    ("device", "tpu", "unknown train.defaults.device 'tpu'"),
])
def test_bad_train_params(workdir, key, value, needle):
    generate.main(ARGS)
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["train"]["defaults"][key] = value
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    result = cli("stages.pipeline.train", *ARGS, "--model", "p405k", "--seed", "0", cwd=workdir)
    assert result.returncode == 2 and needle in result.stderr, result.stderr
    assert not paths.checkpoint_dir(RUN).exists() and not paths.history_file(RUN).exists()


def test_corrupt_inputs_are_named_and_leave_no_output(trained_workdir):
    workdir = trained_workdir
    ckpt = step_file(paths.checkpoint_dir(RUN), 2)
    ckpt.write_bytes(b"not a safetensors file")
    result = cli("stages.pipeline.extract", *ARGS, "--model", "p405k", "--seed", "0", cwd=workdir)
    assert result.returncode == 2 and f"corrupt checkpoint: {ckpt}" in result.stderr
    assert not paths.hidden_file(RUN).exists() and not list(paths.hidden_file(RUN).parent.glob("*"))
    ckpt.unlink()
    result = cli("stages.pipeline.extract", *ARGS, "--model", "p405k", "--seed", "0", cwd=workdir)
    assert result.returncode == 2 and f"missing checkpoint: {ckpt}" in result.stderr

    paths.hidden_file(RUN).parent.mkdir(parents=True, exist_ok=True)
    paths.hidden_file(RUN).write_bytes(b"PAR1 garbage")
    result = cli("stages.pipeline.measure", *ARGS, "--model", "p405k", "--seed", "0", cwd=workdir)
    assert result.returncode == 2 and "corrupt Parquet file: data/hidden/copy-easy-p405k-s0.parquet" in result.stderr
    assert not paths.measures_file(RUN).exists()

    (paths.dataset_dir("copy", "easy") / "test.parquet").write_bytes(b"junk")
    result = cli("stages.pipeline.train", *ARGS, "--model", "p405k", "--seed", "0", cwd=workdir)
    assert result.returncode == 2 and "corrupt Parquet file: data/datasets/copy-easy/test.parquet" in result.stderr


def test_missing_params_key_is_named(workdir):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    del params["tasks"]["copy"]["easy"]
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    result = cli("stages.pipeline.generate", *ARGS, cwd=workdir)
    assert result.returncode == 2 and "missing key 'tasks.copy.easy'" in result.stderr


def test_dataset_files_round_trip(workdir):
    generate.main(ARGS)
    from stages.io.datasets import load_split

    prompt, answer, meta = load_split(paths.dataset_dir("copy", "easy"), "train")
    assert prompt.shape == (256, 5) and np.array_equal(prompt[:, :4], answer) and meta["vocab_size"] == 19
