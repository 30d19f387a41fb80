"""Training settings per task and level, DVCLive training curves, and the checkpoint-count clamp."""
import copy
import math
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from stages import paths

from stages.pipeline import generate, train, train_suite
from stages.errors import PipelineError
from stages.params import validate_params
from stages.tasks import LEVELS
from stages.pipeline.train import resolve_train_params
from stages.training.live import TRAIN_METRICS, curve_log, history_logger
from stages.params import TrainSettings
from stages.training.schedule import warmup_cosine_factor
from stages.training.loop import train as train_loop
from pythia_helpers import pythia_params

ARGS = ["--task", "copy", "--level", "easy"]
RUN = "copy-easy-p405k-s0"


def read_tsv(path):
    return pd.read_csv(path, sep="\t")


# --- train.tasks: task-wide `all` and per-level blocks -------------------------------------------------

def with_tasks(repo_params, tasks):
    p = copy.deepcopy(repo_params)
    p["train"]["tasks"] = tasks
    return validate_params(p)


def test_all_then_own_level(repo_params):
    p = with_tasks(repo_params, {"mod": {"all": {"steps": 500, "lr": 2e-3}, "hard": {"steps": 900}, "easy": {}}})
    assert resolve_train_params(p, "mod", "hard").steps == 900
    assert resolve_train_params(p, "mod", "hard").lr == 2e-3
    assert resolve_train_params(p, "mod", "easy").steps == 500
    assert resolve_train_params(p, "mod", "medium").steps == 500  # a missing level block: no overrides
    assert resolve_train_params(p, "copy", "easy").steps == repo_params["train"]["defaults"]["steps"]
    # the record a run's manifest keeps: the merged keys as written, nothing added
    assert resolve_train_params(p, "mod", "hard").record() == {**repo_params["train"]["defaults"], "steps": 900,
                                                               "lr": 2e-3}


@pytest.mark.parametrize("tasks,needle", [
    ({"mod": {"steps": 5}}, "'train.tasks.mod.steps' is not a known key (task-wide settings go under 'all', "
                            "per-level ones under 'easy', 'medium' or 'hard')"),
    ({"mod": {"extreme": {}}}, "'train.tasks.mod.extreme' is not a known key (known: all, easy, hard, medium)"),
    ({"mod": [1]}, "'train.tasks.mod' must be a mapping"),
    ({"mod": {"all": 3}}, "'train.tasks.mod.all' must be a mapping"),
    ({"mod": {"hard": {"colour": 1}}}, "'train.tasks.mod.hard.colour' is not a known key"),
    ({"mod": {"all": {"colour": 1}}}, "'train.tasks.mod.all.colour' is not a known key"),
    ({"mod": {"hard": {"steps": 0}}}, "'train.tasks.mod.hard.steps' must be a positive integer"),
])
def test_bad_task_blocks_are_named(repo_params, tasks, needle):
    """The schema checks every override block before any run's settings are merged."""
    with pytest.raises(PipelineError) as err:
        with_tasks(repo_params, tasks)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_params_yaml_has_every_tracked_block(repo_params):
    """dvc.yaml's train stage tracks train.tasks.<task>.all and train.tasks.<task>.<level>: DVC needs both
    to exist for every task and level, and nothing else may sit beside them."""
    typed = validate_params(repo_params)
    for task, blocks in repo_params["train"]["tasks"].items():
        assert set(blocks) == {"all", *LEVELS}, task
        for level in LEVELS:
            resolve_train_params(typed, task, level)


def test_dvc_yaml_tracks_only_the_runs_own_level():
    from pathlib import Path

    stages = yaml.safe_load((Path(__file__).resolve().parents[1] / "dvc.yaml").read_text())["stages"]
    assert stages["train"]["params"] == ["runtime", "train.defaults", "train.tasks.${item.task}.all",
                                         "train.tasks.${item.task}.${item.level}"]
    assert stages["generate"]["matrix"] == {"task": "${grid.tasks}", "level": "${grid.levels}"}


def test_too_many_checkpoints_warn_and_train(workdir):
    generate.main(ARGS)
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["train"]["defaults"]["steps"] = 4  # n_checkpoints 6 > steps + 1
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    result = subprocess.run([sys.executable, "-m", "stages.pipeline.train", *ARGS, "--model", "p405k", "--seed", "0"],
                            cwd=workdir, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # off the pinned CPU code paths (a CPU without AVX2, say) the stage ends with one more warning, about the
    # last bits of its results (tests/test_runtime.py)
    warnings = [line for line in result.stderr.splitlines()
                if line.startswith("warning:") and not line.endswith("(stages/numerics.py)")]
    assert warnings == [f"warning: 'train (run {RUN}).n_checkpoints' is 6, more checkpoints than steps "
                        f"(train (run {RUN}).steps = 4); using 5, one at every step"]
    assert list(pd.read_csv(paths.history_file(RUN))["step"]) == [0, 1, 2, 3, 4]


# --- DVCLive ----------------------------------------------------------------------------------------

def listing(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_curve_log_writes_deterministic_tsvs_only(tmp_path):
    def write(where):
        with curve_log(where) as log:
            log(0, {"train/loss": 3.0, "train/batch_loss": math.nan, "lr": 1e-3})
            log(5, {"train/loss": 2.5, "train/batch_loss": 2.75, "lr": 1e-3})
        return listing(where)

    first = write(tmp_path / "a" / "dvclive" / "run")
    assert write(tmp_path / "b" / "dvclive" / "run") == first
    assert set(first) == {"plots/metrics/train/loss.tsv", "plots/metrics/train/batch_loss.tsv", "plots/metrics/lr.tsv"}
    assert first["plots/metrics/train/loss.tsv"].decode().splitlines() == ["step\tloss", "0\t3.0", "5\t2.5"]
    assert first["plots/metrics/train/batch_loss.tsv"].decode().splitlines() == ["step\tbatch_loss", "5\t2.75"]
    assert not any(b"timestamp" in content for content in first.values())
    assert not list((tmp_path / "a" / "dvclive").glob(".*"))  # no temporary directory left


def test_curve_log_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "dvclive" / "run"
    with pytest.raises(ValueError, match="curve steps must increase"):
        with curve_log(target) as log:
            log(3, {"lr": 1.0})
            log(3, {"lr": 1.0})
    assert not target.exists() and not list(target.parent.iterdir())


def test_train_stage_logs_its_history_through_dvclive(trained_workdir):
    history = pd.read_csv(paths.history_file(RUN))
    live = paths.dvclive_dir(RUN)
    first = listing(live)
    assert set(first) == {f"plots/metrics/{name}.tsv" for name in TRAIN_METRICS.values()}
    for column, name in TRAIN_METRICS.items():
        curve = read_tsv(live / "plots" / "metrics" / f"{name}.tsv")
        expected = history[history[column].notna()]
        assert list(curve["step"]) == list(expected["step"])
        assert curve.iloc[:, 1].tolist() == pytest.approx(expected[column].tolist(), rel=1e-12)
    assert read_tsv(live / "plots" / "metrics" / "train" / "batch_loss.tsv")["step"].iloc[0] > 0  # NaN at step 0
    import shutil

    shutil.rmtree(paths.checkpoint_dir(RUN))
    train.main(ARGS + ["--model", "p405k", "--seed", "0"])
    assert listing(live) == first  # a rerun writes the same bytes (nothing in dvc.lock changes)


def test_resumed_training_logs_the_same_curve(tmp_path):
    import torch

    from stages.models import GPT, model_config

    seq = torch.randint(0, 12, (32, 8), generator=torch.Generator().manual_seed(0))
    cfg = TrainSettings.model_validate({"steps": 6, "lr": 1e-2, "weight_decay": 0.0, "batch_size": 8, "warmup": 0,
                                        "schedule": "constant", "betas": [0.9, 0.98], "grad_clip": 1.0, "device": "cpu",
                                        "n_checkpoints": 5, "log_fraction": 0.5, "log_until": 0.1,
                                        "eval_batch_size": 4096})

    def model():
        torch.manual_seed(0)
        return GPT(model_config("p405k", vocab_size=12, block_size=7))

    def run(out, live, crash_at=None):
        with curve_log(live) as log:
            callback = history_logger(log)

            def on_checkpoint(row):
                callback(row)
                if row["step"] == crash_at:
                    raise KeyboardInterrupt
            train_loop(model(), cfg, seq, seq[:16], prompt_len=4, out_dir=out, seed=0, checkpoints=[0, 1, 2, 4, 6], progress=False,
                       on_checkpoint=on_checkpoint)

    run(tmp_path / "ref", tmp_path / "ref_live")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "crashed", tmp_path / "crashed_live", crash_at=2)
    assert not (tmp_path / "crashed_live").exists()
    run(tmp_path / "crashed", tmp_path / "crashed_live")  # resumes from step 2, replays 0..2 into the log
    assert listing(tmp_path / "crashed_live") == listing(tmp_path / "ref_live")


def test_train_suite_settings_come_from_params_and_curves_are_logged(repo_params, tmp_path):
    p = pythia_params(repo_params)
    local = p["pythia"]["profiles"]["local"]
    assert set(repo_params["pythia"]["profiles"]["local"]["train"]["tiny"]) >= {
        "betas", "weight_decay", "grad_clip", "min_lr_ratio", "lr", "warmup"}
    local["train"]["tiny"].update(warmup=2, min_lr_ratio=0.25)
    with curve_log(tmp_path / "live" / "tiny") as log:
        info = train_suite.train_model("tiny", validate_params(p).pythia, tmp_path / "hub", progress=False, log=log)
    assert len(info["commits"]) == 3
    configs = sorted((tmp_path / "hub").rglob("snapshots/*/*config.json"))
    assert configs and not any("transformers_version" in c.read_text() for c in configs)  # no library version
    live = tmp_path / "live" / "tiny" / "plots" / "metrics"
    lr = read_tsv(live / "lr.tsv")
    assert list(lr["step"]) == [0, 2, 4]  # the revisions step0, step2, step4
    base = local["train"]["tiny"]["lr"]
    # lr of the latest update: 0 -> update 0, 2 -> update 1, 4 -> update 3 (warm-up 2, cosine to 0.25)
    assert lr["lr"].tolist() == pytest.approx([base * warmup_cosine_factor(s, 4, 2, 0.25) for s in (0, 1, 3)])
    assert warmup_cosine_factor(3, 4, 2, 0.25) > 0.25 and warmup_cosine_factor(4, 4, 2, 0.25) == pytest.approx(0.25)
    loss = read_tsv(live / "train" / "loss.tsv")
    assert list(loss["step"]) == [2, 4] and loss["loss"].notna().all()
    for key, value in (("betas", [0.9, 1.0]), ("weight_decay", -1), ("grad_clip", "x"), ("min_lr_ratio", 2)):
        bad = copy.deepcopy(p)
        bad["pythia"]["profiles"]["local"]["train"]["tiny"][key] = value
        with pytest.raises(PipelineError, match=f"'pythia.profiles.local.train.tiny.{key}'"):  # the schema's check
            validate_params(bad)


def test_curves_in_a_git_repository_without_commits(tmp_path, monkeypatch):
    """A fresh `git init` before the first commit: DVCLive's own repository probe would raise
    ("Empty git repo") and `dvc init` a git repository; the curve log needs neither."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    with curve_log(tmp_path / "dvclive" / "run") as log:
        log(0, {"test/acc": 0.25, "lr": 1e-3})
        log(4, {"test/acc": 0.75, "lr": 1e-3, "train/loss": math.nan})
    assert (tmp_path / "dvclive/run/plots/metrics/test/acc.tsv").read_text() == "step\tacc\n0\t0.25\n4\t0.75\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".git", "dvclive"]  # no .dvc, no .dvcignore
