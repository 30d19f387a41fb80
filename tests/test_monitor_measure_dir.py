"""``python -m stages.monitor.measure_dir``: tiny causal LMs saved by the tests (safetensors) in
temporary folders: Trainer folders, hub-cache revisions, bad input, and watching a running job."""
from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch

from monitor_helpers import evals_file, measure_args, save_checkpoint, tiny_model, tokenizer, trainer_dir
from stages.analysis.event_rules import Rules
from stages.analysis.runs import run_events
from stages.io.hidden import hidden_manifest, iter_steps
from stages.io.measure_tables import read_measures
from stages.measures.rankme import geometry
from stages.monitor import measure_dir
from stages.pythia import local_hub

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
COLUMNS = ["run", "step", "layer", "rankme", "rankme_centred", "mean_dominance", "varies", "probe_acc", "test_acc",
           "n_params", "dim"]  # as stage measure


@pytest.fixture(scope="module")
def evals(tmp_path_factory):
    return evals_file(tmp_path_factory.mktemp("evals") / "evals.parquet")


@pytest.fixture
def lm(tmp_path):
    return trainer_dir(tmp_path / "run-a", steps=(0, 2, 4))


def run(*argv) -> int:
    return measure_dir.main([str(a) for a in argv])


def test_measures_a_trainer_folder_like_the_pipeline(lm, evals, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(lm, *measure_args(out, evals)) == 0
    frame = pd.read_csv(out / "measures" / "run-a.csv")
    assert list(frame.columns) == COLUMNS
    assert sorted(frame["step"].unique()) == [0, 2, 4] and sorted(frame["layer"].unique()) == [0, 1, 2]
    assert frame["test_acc"].notna().all() and frame["probe_acc"].notna().all()
    assert (frame["run"] == "run-a").all() and frame["n_params"].nunique() == 1
    read_measures(out / "measures" / "run-a.csv")  # the pipeline's validated reader accepts it
    steps = list(iter_steps(out / "hidden" / "run-a.parquet"))
    assert [s for s, _ in steps] == [0, 2, 4]
    assert steps[0][1][2].vectors.shape == (21, 16)  # 7 sets with a context x 3 items, hidden size 16
    stack = torch.as_tensor(np.stack([steps[1][1][l].vectors for l in range(3)]))
    assert np.allclose(geometry(stack)["rankme"], frame[frame["step"] == 2]["rankme"], rtol=1e-6)
    assert hidden_manifest(out / "hidden" / "run-a.parquet")["n_params"] == int(frame["n_params"].iloc[0])
    events = pd.read_csv(out / "events" / "run-a.csv")
    rows, _ = run_events(read_measures(out / "measures" / "run-a.csv"), Rules(), "last")
    assert list(events["measure"]) == [r["measure"] for r in rows]
    assert (out / "trajectories" / "run-a.csv").is_file() and (out / "events" / "run-a-online.csv").is_file()
    assert "checkpoint-4: step 4" in capsys.readouterr().out


def test_a_rerun_continues_and_new_checkpoints_are_added(lm, evals, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run(lm, *measure_args(out, evals)) == 0
    before = pd.read_csv(out / "measures" / "run-a.csv")
    tok = tokenizer()
    save_checkpoint(lm / "checkpoint-6", tiny_model(tok, 9), tok, 6)
    measured = []
    original = measure_dir.Measurer.measure
    monkeypatch.setattr(measure_dir.Measurer, "measure", lambda self, ck: (measured.append(ck.step), original(self, ck)))
    assert run(lm, *measure_args(out, evals)) == 0
    assert measured == [6] and "continuing after 3 checkpoint(s)" in capsys.readouterr().out
    after = pd.read_csv(out / "measures" / "run-a.csv")
    pd.testing.assert_frame_equal(after[after["step"] < 6].reset_index(drop=True), before)
    assert [s for s, _ in iter_steps(out / "hidden" / "run-a.parquet")] == [0, 2, 4, 6]
    other = tmp_path / "probe.txt"
    other.write_text("\n".join(f"the cat {i}" for i in range(20)))
    with pytest.raises(SystemExit) as exc:  # another probe set: refuse to mix, suggest --fresh
        run(lm, *measure_args(out, evals, "--probe", other))
    assert exc.value.code == 2 and "--fresh" in capsys.readouterr().err


def test_a_text_probe_set_has_no_accuracy_and_a_small_one_warns(lm, evals, tmp_path, capsys):
    probe = tmp_path / "probe.txt"
    probe.write_text("the cat sleeps\n\na dog runs\nthe bird sings\nthe cat runs\nthe dog sleeps\n")
    out = tmp_path / "out"
    assert run(lm, *measure_args(out, evals, "--probe", probe, "--run", "mine")) == 0
    frame = pd.read_csv(out / "measures" / "mine.csv")
    assert frame["test_acc"].isna().all() and frame["probe_acc"].isna().all()
    err = capsys.readouterr().err
    assert "5 examples for hidden size 16" in err  # blank lines are not examples
    one = tmp_path / "one.txt"
    one.write_text("only one line\n")
    with pytest.raises(SystemExit) as exc:
        run(lm, *measure_args(tmp_path / "o2", evals, "--probe", one))
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.count("\n") == 0 and "one.txt" in err and "at least 2" in err


def expect_error(capsys, *argv, match: str) -> str:
    with pytest.raises(SystemExit) as exc:
        run(*argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and err[-1].startswith("error:") and match in err[-1], err
    return err[-1]


def test_bad_input_is_one_line_naming_the_path(tmp_path, evals, capsys):
    args = measure_args(tmp_path / "out", evals)
    empty = tmp_path / "empty"
    empty.mkdir()
    expect_error(capsys, empty, *args, match=f"no checkpoints in {empty}")
    expect_error(capsys, tmp_path / "nowhere", *args, match=f"missing checkpoint folder: {tmp_path / 'nowhere'}")

    tok = tokenizer()
    model = tiny_model(tok)
    pickled = tmp_path / "pickled" / "step3"
    pickled.mkdir(parents=True)
    model.config.save_pretrained(pickled)
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    expect_error(capsys, pickled.parent, *args, match="only pickle weights (pytorch_model.bin)")

    broken = save_checkpoint(tmp_path / "broken" / "checkpoint-1", model, tok, 1)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    expect_error(capsys, broken.parent, *args, match="checkpoint-1: cannot load")

    unfinished = save_checkpoint(tmp_path / "unfinished" / "checkpoint-1", model, tok, 1, trainer_state=False)
    line = expect_error(capsys, unfinished.parent, *args, match=f"no complete checkpoints in {unfinished.parent}")
    assert "trainer_state.json" not in line


def test_weights_load_with_safetensors_only_and_no_remote_code(lm, evals, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    calls = []
    original = AutoModelForCausalLM.from_pretrained

    def spy(*a, **kw):
        calls.append(kw)
        return original(*a, **kw)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    assert run(lm / "checkpoint-2", *measure_args(tmp_path / "out", evals)) == 0
    assert calls == [{"use_safetensors": True, "trust_remote_code": False}]
    assert pd.read_csv(tmp_path / "out" / "measures" / "run-a.csv")["step"].unique().tolist() == [2]


def test_hub_cache_revisions(tmp_path, evals):
    tok = tokenizer()
    cache = tmp_path / "hub"
    for i, rev in enumerate(["step0", "step8", "step4"]):
        def save(folder, model=tiny_model(tok, i)):
            model.save_pretrained(folder)
            tok.save_pretrained(folder)
        local_hub.publish(cache, "local/tiny", rev, save)
    out = tmp_path / "out"
    assert run("--hub", "local/tiny", "--cache-dir", cache, "--revisions", "step0,step8", *measure_args(out, evals)) == 0
    assert pd.read_csv(out / "measures" / "local--tiny.csv")["step"].unique().tolist() == [0, 8]


def test_watch_waits_for_complete_checkpoints_retries_a_half_written_one_and_stops_at_the_sentinel(
        tmp_path, evals, capsys, monkeypatch):
    root = tmp_path / "job"
    root.mkdir()
    tok = tokenizer()
    save_checkpoint(root / "checkpoint-0", tiny_model(tok, 0), tok, 0)
    staged = save_checkpoint(tmp_path / "staging" / "step4", tiny_model(tok, 4), tok, trainer_state=False)
    full_weights = (staged / "model.safetensors").read_bytes()
    loads = []
    original = measure_dir.Measurer._load
    tried_half = threading.Event()  # the watcher has tried the half-written step4 (however slow the machine)

    def spy(self, ck):
        loads.append((ck.path.name, (ck.path / "trainer_state.json").is_file()))
        try:
            return original(self, ck)
        finally:
            if ck.path.name == "step4":
                tried_half.set()

    monkeypatch.setattr(measure_dir.Measurer, "_load", spy)

    def job():  # a training job writing checkpoints while the watcher runs
        time.sleep(0.3)
        save_checkpoint(root / "checkpoint-2", tiny_model(tok, 2), tok, 2, trainer_state=False)
        time.sleep(0.6)  # weights written, trainer_state.json not yet: not complete
        (root / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
        half = root / "step4"
        half.mkdir()
        for f in staged.iterdir():
            if f.name != "model.safetensors":
                shutil.copy(f, half / f.name)
        (half / "model.safetensors").write_bytes(full_weights[: len(full_weights) // 2])  # stalls half-written
        tried_half.wait(timeout=120)
        (half / "model.safetensors").write_bytes(full_weights)
        time.sleep(0.3)
        (root / "DONE").touch()

    writer = threading.Thread(target=job)
    writer.start()
    try:
        code = run(root, "--watch", "--until-file", root / "DONE", "--retries", "50", *measure_args(tmp_path / "w", evals))
    finally:
        writer.join()
    assert code == 0
    frame = pd.read_csv(tmp_path / "w" / "measures" / "job.csv")
    assert frame["step"].unique().tolist() == [0, 2, 4]
    assert ("checkpoint-2", False) not in loads  # never read before the Trainer's marker
    err = capsys.readouterr().err
    assert "step4: cannot load yet" in err and "retry 1 of 50" in err
    # what was measured is the completed checkpoint: the same numbers as measuring it afterwards
    assert run(root, *measure_args(tmp_path / "after", evals)) == 0
    after = pd.read_csv(tmp_path / "after" / "measures" / "job.csv")
    pd.testing.assert_frame_equal(frame, after)


def test_watch_exits_cleanly_on_sigint(lm, evals, tmp_path, capsys):
    out = tmp_path / "out"
    measures = out / "measures" / "run-a.csv"
    before = signal.getsignal(signal.SIGINT)  # other code in the session may have installed its own

    def interrupt():
        deadline = time.time() + 30
        while not measures.is_file() and time.time() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt)
    thread.start()
    try:
        assert run(lm, "--watch", *measure_args(out, evals)) == 0
    finally:
        thread.join()
    assert "interrupted" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGINT) is before  # the previous handler is restored
    steps = [s for s, _ in iter_steps(out / "hidden" / "run-a.parquet")]  # the Parquet was committed
    assert steps and steps == sorted(pd.read_csv(measures)["step"].unique())


def test_checkpoint_discovery_and_stability(tmp_path):
    from stages.errors import PipelineError
    from stages.monitor.checkpoints import Stability, discover

    root = tmp_path / "r"
    (root / "checkpoint-2").mkdir(parents=True)
    (root / "step10").mkdir()
    (root / "notes").mkdir()
    assert [(c.step, c.trainer) for c in discover([root])] == [(2, True), (10, False)]
    assert [c.step for c in discover([root / "step10"])] == [10]  # one checkpoint folder
    assert discover([tmp_path / "not-yet"]) == []                 # a folder a job has not created yet
    (root / "step2").mkdir()
    with pytest.raises(PipelineError, match="two checkpoints of step 2"):
        discover([root])
    named = tmp_path / "final-model"
    named.mkdir()
    (named / "config.json").write_text("{}")
    with pytest.raises(PipelineError, match="cannot tell its training step"):
        discover([named])
    (named / "trainer_state.json").write_text('{"global_step": 7}')
    assert [c.step for c in discover([named])] == [7]

    stability = Stability(settle=1.0)
    ck = discover([named])[0]
    assert not stability.stable(ck, now=0.0)
    assert not stability.stable(ck, now=0.5)
    assert stability.stable(ck, now=1.0)
    (named / "model.safetensors").write_bytes(b"x")  # a new file: the clock starts again
    assert not stability.stable(ck, now=1.5) and stability.stable(ck, now=2.5)


def project_run(root, params, steps=(0, 3)):
    """One of this project's run folders (step_XXXXXXX.safetensors + manifest.json) of a tiny GPT
    trained a few steps on copy-easy, and its dataset folder."""
    from stages.config import load_typed_params
    from stages.io.checkpoints import save_state, step_digests, step_file, write_manifest
    from stages.io.datasets import write_dataset
    from stages.models import GPT, GPTConfig
    from stages.tasks import build_dataset
    from stages.training.loop import make_optimizer, sequences, update

    p = load_typed_params(params)
    ds = build_dataset("copy", "easy", p.tasks.knobs("copy", "easy"), p.datasets.seed, p.datasets.n_train,
                       p.datasets.n_test)
    write_dataset(ds, root / "datasets" / "copy-easy")
    prompt_len = ds.train_prompt.shape[1]
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=ds.vocab_size, block_size=prompt_len + ds.train_answer.shape[1], n_layer=2, n_head=2,
                    d_model=16)
    model = GPT(cfg)
    opt = make_optimizer(model, 1e-2, 0.0, (0.9, 0.99))
    run_dir = root / "checkpoints" / "copy-easy-tiny-s0"
    run_dir.mkdir(parents=True)
    seq = sequences(ds.train_prompt, ds.train_answer, "cpu")
    for step in range(max(steps) + 1):
        if step in steps:
            save_state(model, step_file(run_dir, step))
        update(model, opt, seq[:32], prompt_len, 1.0)
    write_manifest(run_dir, {"run": run_dir.name, "task": "copy", "level": "easy", "model": cfg.to_dict(),
                             "n_params": model.num_params(), "steps": list(steps),
                             "sha256": step_digests(run_dir, steps)})
    return run_dir, root / "datasets" / "copy-easy", ds


def test_a_project_run_folder_is_measured_as_extract_and_measure_do(tmp_path):
    from stages.io.checkpoints import load_model
    from stages.training.loop import evaluate, sequences

    params = ROOT / "params.yaml"
    run_dir, dataset, ds = project_run(tmp_path, params)
    out = tmp_path / "measured"
    assert run(run_dir, "--dataset", dataset, "--probe-size", 24, "--out", out, "--device", "cpu",
               "--params", params) == 0
    frame = read_measures(out / "measures" / "copy-easy-tiny-s0.csv")
    assert frame["step"].unique().tolist() == [0, 3] and frame["layer"].unique().tolist() == [0, 1, 2]
    prompt_len = ds.test_prompt.shape[1]
    seq = sequences(ds.test_prompt, ds.test_answer, "cpu")
    model = load_model(run_dir, 3)
    with torch.no_grad():
        _, hidden = model(seq[:24, :-1], hidden_states=True)
    expected = geometry(torch.stack([h[:, prompt_len - 1] for h in hidden]).float())
    got = frame[frame["step"] == 3].sort_values("layer")
    np.testing.assert_allclose(got["rankme"], expected["rankme"], rtol=1e-5)
    assert got["test_acc"].iloc[0] == evaluate(model, seq, prompt_len, 64)[1]
    # without --dataset and no data/datasets here: generated from params.yaml, the same numbers
    again = tmp_path / "again"
    assert run(run_dir, "--probe-size", 24, "--out", again, "--device", "cpu", "--params", params) == 0
    pd.testing.assert_frame_equal(read_measures(again / "measures" / "copy-easy-tiny-s0.csv"), frame)


def test_bad_project_input_is_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    expect_error(capsys, empty, "--out", tmp_path / "o", "--device", "cpu", "--probe", ROOT / "README.md",
                 match="step_*.safetensors with manifest.json")
    run_dir, dataset, _ = project_run(tmp_path, ROOT / "params.yaml", steps=(0,))
    (run_dir / "step_0000000.safetensors").write_bytes(b"not safetensors")
    line = expect_error(capsys, run_dir, "--dataset", dataset, "--probe-size", 8, "--out", tmp_path / "o", "--device",
                        "cpu", match="step_0000000.safetensors")
    assert "corrupt checkpoint" in line
    expect_error(capsys, run_dir, "--dataset", tmp_path / "nowhere", "--out", tmp_path / "o", "--device", "cpu",
                 match=f"missing dataset: {tmp_path / 'nowhere' / 'test.parquet'}")


def test_the_monitor_imports_library_code_only():
    """No module run as a pipeline stage (dvc.yaml's ``python -m stages.X``) is imported by the monitor."""
    import re
    import subprocess
    import sys

    stage_modules = sorted(set(re.findall(r"python -m (stages\.[\w.]+)", (ROOT / "dvc.yaml").read_text())))
    assert "stages.pipeline.events" in stage_modules and "stages.pipeline.pythia_measure" in stage_modules
    code = ("import sys; import stages.monitor, stages.monitor.callback, stages.monitor.measure_dir; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('stages.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            check=True).stdout.split()
    assert "stages.monitor.callback" in loaded
    assert not set(loaded) & set(stage_modules)
