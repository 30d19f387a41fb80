"""What pinning the CPU code paths (stages/numerics.py) costs: the training step on the pinned paths
against the CPU's own (``ANATOMY_CPU_PATHS=native``) and against the pinned paths with MKL on its
AVX2 branch instead of COMPATIBLE (what the pinning used before it had to hold on AMD CPUs too; MKL
honours AVX2 on Intel CPUs only), in one run, as ratios.

    python benchmarks/pinned_paths_cost.py [--preset p405k] [--rounds 3] [--repeats 15]
                                           [--params params.yaml]

The paths are fixed when a process starts, so each measurement is a child process: ``--rounds``
rounds, each running the three children one after the other (interleaved, so that drift on a
shared machine falls on all). Each child times the grid's training step per
distinct sequence length (median of ``--repeats`` after a warm-up; :func:`machine_limits.trainer`,
the training loop's own update) and prints the paths in effect. The table gives the median over
rounds and the ratios pinned / native and pinned / mkl-avx2 (above 1: the pinned paths are slower).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from stages.numerics import VARIABLES  # noqa: E402  (this parent computes nothing; each child pins or not)


def child(preset: str, repeats: int, params_file: str, mkl_branch: str | None) -> None:
    if mkl_branch:  # after the stages package pinned the paths (the import above), before MKL's first call
        os.environ["MKL_CBWR"] = mkl_branch
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    from machine_limits import grid_runs, median_seconds, random_sequences, trainer
    from stages.config import load_typed_params
    from stages.generate import generate
    from stages.models import GPT, model_config
    from stages.numerics import in_effect
    from stages.runtime import pin_threads

    params = load_typed_params(params_file)
    pin_threads(params.runtime.threads)
    steps = {}
    for task, level in grid_runs(params):
        ds = generate(task, level, params)
        length = ds.train_prompt.shape[1] + ds.train_answer.shape[1]
        hp = params.train.resolve(task, level)
        torch.manual_seed(0)
        model = GPT(model_config(preset, ds.vocab_size, length - 1))
        batch = random_sequences(hp.batch_size, length, ds.vocab_size)
        key = f"{task}-{level} (seq {length - 1})"
        if not any(k.endswith(f"(seq {length - 1})") for k in steps):
            steps[key] = median_seconds(trainer(model, batch, ds.train_prompt.shape[1], hp), repeats)
    print(json.dumps({"paths": in_effect(), "steps": steps}))


VARIANTS = {"pinned": ("pinned", None), "native": ("native", None), "mkl-avx2": ("pinned", "AVX2,STRICT")}


def measure(variant: str, args) -> dict:
    paths, branch = VARIANTS[variant]
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env["ANATOMY_CPU_PATHS"] = paths
    extra = ["--mkl-branch", branch] if branch else []
    out = subprocess.run([sys.executable, __file__, "--child", "--preset", args.preset, "--repeats", str(args.repeats),
                          "--params", args.params, *extra], env=env, cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="p405k")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mkl-branch", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.preset, args.repeats, args.params, args.mkl_branch)
        return
    runs = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name in runs:
            runs[name].append(measure(name, args))
    for name, results in runs.items():
        print(f"{name:<8} paths: {results[0]['paths']}")
    print(f"\n{'preset':<8} {'step':<22} {'pinned ms':>10} {'native ms':>10} {'mkl-avx2 ms':>12} "
          f"{'pinned/native':>14} {'pinned/mkl-avx2':>16}")
    for key in runs["pinned"][0]["steps"]:
        ms = {name: statistics.median(r["steps"][key] for r in results) * 1e3 for name, results in runs.items()}
        print(f"{args.preset:<8} {key:<22} {ms['pinned']:>10.2f} {ms['native']:>10.2f} {ms['mkl-avx2']:>12.2f} "
              f"{ms['pinned'] / ms['native']:>14.2f} {ms['pinned'] / ms['mkl-avx2']:>16.2f}")


if __name__ == "__main__":
    main()
