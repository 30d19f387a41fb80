"""Where the time of the default grid goes, against this machine's own limit -- one run, ratios.

    python benchmarks/machine_limits.py [--presets p405k p3m] [--task copy --level hard]
                                        [--repeats 7] [--skip-stages] [--skip-compile]
                                        [--params params.yaml]

Prints, all measured in this one process (or its children) on this machine:

1. **Matmul limit**: fp32 ``torch.mm`` of 1024 x 1024 matrices, GFLOP/s at ``runtime.threads``
   threads and at one thread (median of ``--repeats``).
2. **Training step vs the limit**, per preset and per sequence length of the grid's tasks: model
   FLOPs per step / step time (``6 N T`` for the weight matmuls, N = 12 n_layer d^2 + d vocab,
   T = tokens per batch, plus ``12 n_layer d t`` per token for attention scores and values with t
   tokens per sequence), and that rate as a share of the measured matmul rate.
   2b. ``torch.compile`` of that step (the grid's longest sequence, first preset): compiled vs
   eager step time, the first call's compile time, and the steps needed to win it back.
3. **Evaluation as a share of training** for every run of the grid: exact-match evaluation of the
   test split and ``eval_train_max`` train rows at each of the run's checkpoints, against its
   ``steps`` training steps (timed per step and per evaluation on the run's real dataset sizes).
4. **Each stage as a share of training, and DVC's overhead per stage** (unless ``--skip-stages``):
   a temporary copy of this repository reduced to one run (``--task/--level``, first model, seed
   0) runs the stage commands directly (timed), then ``dvc repro --force`` of the same stages;
   DVC's overhead is its wall time per stage minus the direct time (hashing outputs, caching,
   the lock file, starting).

Shared machines are noisy: step and evaluation times are medians of ``--repeats`` after a warm-up.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from stages.config import load_typed_params  # noqa: E402
from stages.pipeline.generate import generate  # noqa: E402
from stages.models import GPT, PRESETS, model_config  # noqa: E402
from stages.training.loop import evaluate, make_optimizer, update  # noqa: E402
from stages.training.schedule import checkpoint_steps  # noqa: E402

STAGES = ("generate", "train", "extract", "measure", "landscape")


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_gflops(threads: int, repeats: int, n: int = 1024) -> float:
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    seconds = median_seconds(lambda: torch.mm(a, b), repeats)
    return 2 * n ** 3 / seconds / 1e9


def step_flops(n_layer: int, d_model: int, vocab: int, batch: int, t: int) -> float:
    """Model FLOPs of one training step (forward + backward) on ``batch`` sequences of ``t`` input tokens."""
    weights = 12 * n_layer * d_model ** 2 + d_model * vocab
    tokens = batch * t
    return 6 * weights * tokens + 12 * n_layer * d_model * t * tokens


def trainer(model: GPT, batch: torch.Tensor, prompt_len: int, hp):
    opt = make_optimizer(model, hp.lr, hp.weight_decay, hp.betas)
    return lambda: update(model, opt, batch, prompt_len, hp.grad_clip)


def random_sequences(n: int, length: int, vocab: int) -> torch.Tensor:
    return torch.as_tensor(np.random.default_rng(0).integers(0, vocab, size=(n, length)))


def grid_runs(params) -> list[tuple[str, str]]:
    return [(t, lv) for t in params.grid.tasks for lv in params.grid.levels]


def part_steps(params, presets: list[str], repeats: int, peak: float) -> None:
    print("\n## 2. Training step against the matmul limit "
          f"({torch.get_num_threads()} threads; limit {peak:.1f} GFLOP/s)")
    print(f"{'preset':<8} {'run':<12} {'seq':>4} {'batch':>6} {'step s':>8} {'GFLOP/step':>11} "
          f"{'GFLOP/s':>8} {'share of limit':>15}")
    for preset in presets:
        seen = set()
        for task, level in grid_runs(params):
            ds = generate(task, level, params)
            length = ds.train_prompt.shape[1] + ds.train_answer.shape[1]
            if length in seen:
                continue
            seen.add(length)
            hp = params.train.resolve(task, level)
            torch.manual_seed(0)
            cfg = model_config(preset, ds.vocab_size, length - 1)
            model = GPT(cfg)
            batch = random_sequences(hp.batch_size, length, ds.vocab_size)
            seconds = median_seconds(trainer(model, batch, ds.train_prompt.shape[1], hp), repeats)
            flops = step_flops(cfg.n_layer, cfg.d_model, cfg.vocab_size, hp.batch_size, length - 1)
            rate = flops / seconds / 1e9
            print(f"{preset:<8} {task + '-' + level:<12} {length - 1:>4} {hp.batch_size:>6} {seconds:>8.4f} "
                  f"{flops / 1e9:>11.2f} {rate:>8.1f} {rate / peak:>15.2f}")


def part_compile(params, preset: str, repeats: int) -> None:
    """``torch.compile`` of the training step's model on the grid's longest sequence: the step-time
    ratio and the break-even number of steps (compile time / time saved per step)."""
    datasets = {tl: generate(*tl, params) for tl in grid_runs(params)}
    (task, level), ds = max(datasets.items(), key=lambda kv: kv[1].train_prompt.shape[1] + kv[1].train_answer.shape[1])
    hp = params.train.resolve(task, level)
    prompt_len = ds.train_prompt.shape[1]
    length = prompt_len + ds.train_answer.shape[1]
    batch = random_sequences(hp.batch_size, length, ds.vocab_size)
    torch.manual_seed(0)
    eager = median_seconds(trainer(GPT(model_config(preset, ds.vocab_size, length - 1)), batch, prompt_len, hp),
                           repeats)
    torch.manual_seed(0)
    model = GPT(model_config(preset, ds.vocab_size, length - 1))
    step = trainer(torch.compile(model), batch, prompt_len, hp)
    print(f"\n## 2b. torch.compile ({preset}, {task}-{level}, {hp.steps} steps)")
    try:
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
    except Exception as exc:  # no C++ compiler, unsupported platform ...
        print(f"torch.compile unavailable here: {str(exc).splitlines()[0][:120]}")
        return
    compiled = median_seconds(step, repeats)
    saved = eager - compiled
    even = f"{first / saved:.0f} steps" if saved > 0 else "never (no faster)"
    print(f"eager {eager:.4f} s/step, compiled {compiled:.4f} s/step ({eager / compiled:.2f}x); first compiled call "
          f"{first:.1f} s; break-even after {even}; this run has {hp.steps}")


def part_eval(params, preset: str, repeats: int) -> None:
    print(f"\n## 3. Evaluation as a share of training ({preset}; per checkpoint: test split + eval_train_max rows)")
    print(f"{'run':<12} {'steps':>6} {'ckpts':>6} {'step s':>8} {'eval s':>8} {'eval rows':>10} {'eval share':>11}")
    for task, level in grid_runs(params):
        ds = generate(task, level, params)
        hp = params.train.resolve(task, level)
        prompt_len = ds.train_prompt.shape[1]
        length = prompt_len + ds.train_answer.shape[1]
        steps = checkpoint_steps(hp.steps, hp.n_checkpoints, hp.log_fraction, hp.log_until, key="benchmark")
        torch.manual_seed(0)
        model = GPT(model_config(preset, ds.vocab_size, length - 1))
        step_s = median_seconds(trainer(model, random_sequences(hp.batch_size, length, ds.vocab_size),
                                        prompt_len, hp), repeats)
        test = random_sequences(len(ds.test_prompt), length, ds.vocab_size)
        train_rows = random_sequences(min(hp.eval_train_max, len(ds.train_prompt)), length, ds.vocab_size)

        def one_eval():
            evaluate(model, test, prompt_len, hp.eval_batch_size)
            evaluate(model, train_rows, prompt_len, hp.eval_batch_size)
        eval_s = median_seconds(one_eval, repeats)
        train_total, eval_total = hp.steps * step_s, len(steps) * eval_s
        print(f"{task + '-' + level:<12} {hp.steps:>6} {len(steps):>6} {step_s:>8.4f} {eval_s:>8.4f} "
              f"{len(test) + len(train_rows):>10} {eval_total / (train_total + eval_total):>11.2f}")


def repo_copy(dest: Path, params_file: Path, task: str, level: str) -> str:
    """A committed copy of this working tree (tracked and untracked-not-ignored files) whose grid is
    one run; returns the model name."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file() and not name.startswith(("data/", "dvclive/", "plots/", "metrics/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    raw = yaml.safe_load(params_file.read_text())
    model = raw["grid"]["models"][0]
    raw["grid"].update(tasks=[task], levels=[level], models=[model], seeds=[0])
    (dest / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (dest / "dvc.lock").unlink(missing_ok=True)
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "bench"]):
        subprocess.run(command, cwd=dest, check=True)
    return model


def part_stages(params_file: Path, task: str, level: str) -> None:
    print(f"\n## 4. Stages of one run ({task}-{level}, seed 0) as a share of training, and DVC's overhead")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="machine-limits-") as tmp:
        work = Path(tmp)
        model = repo_copy(work, params_file, task, level)
        args = {"generate": ["--task", task, "--level", level]}
        for stage in STAGES[1:]:
            args[stage] = ["--task", task, "--level", level, "--model", model, "--seed", "0"]
        direct = {}
        for stage in STAGES:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", f"stages.pipeline.{stage}", *args[stage]], cwd=work, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            direct[stage] = time.perf_counter() - start
        names = subprocess.run([sys.executable, "-m", "dvc", "stage", "list", "--name-only"], cwd=work, env=env,
                               check=True, capture_output=True, text=True).stdout.split()
        targets = [n for n in names if n.split("@")[0] in ("measure", "landscape")]
        started: dict[str, float] = {}
        begin = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "dvc", "repro", "--force", *targets], cwd=work, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            hit = re.match(r"Running stage '([^']+)'", line.strip())
            if hit:
                started[hit.group(1).split("@")[0]] = time.perf_counter()
        if proc.wait():
            raise SystemExit(f"dvc repro failed in {work}")
        end = time.perf_counter()
    order = sorted(started, key=started.get)
    ends = [started[s] for s in order[1:]] + [end]
    in_dvc = {s: e - started[s] for s, e in zip(order, ends)}
    print(f"{'stage':<10} {'direct s':>9} {'share of train':>15} {'dvc repro s':>12} {'dvc overhead s':>15}")
    for stage in STAGES:
        dvc = in_dvc.get(stage, float("nan"))
        print(f"{stage:<10} {direct[stage]:>9.1f} {direct[stage] / direct['train']:>15.2f} {dvc:>12.1f} "
              f"{dvc - direct[stage]:>15.1f}")
    print(f"dvc start-up before the first stage: {started[order[0]] - begin:.1f} s; "
          f"total {end - begin:.1f} s against {sum(direct.values()):.1f} s run directly")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["p405k", "p3m"], choices=list(PRESETS))
    parser.add_argument("--task", default="copy")
    parser.add_argument("--level", default="hard")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-stages", action="store_true", help="leave out part 4 (a few minutes)")
    parser.add_argument("--skip-compile", action="store_true", help="leave out part 2b (compiles the model)")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    args = parser.parse_args()
    params = load_typed_params(args.params)
    threads = params.runtime.threads
    print(f"# Machine limits: {os.cpu_count()} CPUs, torch {torch.__version__}, runtime.threads {threads}")
    print("\n## 1. fp32 matmul limit (1024 x 1024)")
    one = matmul_gflops(1, args.repeats)
    peak = matmul_gflops(threads, args.repeats)
    print(f"1 thread: {one:.1f} GFLOP/s; {threads} threads: {peak:.1f} GFLOP/s ({peak / one:.2f}x)")
    part_steps(params, args.presets, args.repeats, peak)
    if not args.skip_compile:
        part_compile(params, args.presets[0], args.repeats)
    part_eval(params, args.presets[0], args.repeats)
    if not args.skip_stages:
        part_stages(Path(args.params), args.task, args.level)


if __name__ == "__main__":
    main()
