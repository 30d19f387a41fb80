"""What portable mode costs (``runtime.cpu_paths``, stages/numerics.py): the training step with the
pinned, vendor-exact code paths and operators against native mode (the CPU's own paths, torch's stock
operators), in one run, as ratios.

    python benchmarks/pinned_paths_cost.py [--preset p405k] [--rounds 3] [--repeats 15]
                                           [--params params.yaml]

The paths are fixed when a process starts, so each measurement is a child process whose environment
is the one a stage of that mode runs under (:func:`stages.runtime.process_environment`): ``--rounds``
rounds, each running the two children one after the other (interleaved, so that drift on a shared
machine falls on both). Each child times the grid's training step per distinct sequence length
(median of ``--repeats`` after a warm-up; :func:`machine_limits.trainer`, the training loop's own
update, on ``GPT(cfg, portable_ops=...)`` as stage ``train`` builds it) and prints the paths in
effect. The table gives the median over rounds and the ratio portable / native (above 1: portable
is slower).
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
from stages.numerics import VARIABLES  # noqa: E402  (imports nothing that computes)

MODES = ("native", "portable")


def child(preset: str, repeats: int, params_file: str, mode: str) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    from machine_limits import grid_runs, median_seconds, random_sequences, trainer
    from stages.config import load_typed_params
    from stages.pipeline.generate import generate
    from stages.models import GPT, model_config
    from stages.numerics import in_effect
    from stages.runtime import pin_threads

    params = load_typed_params(params_file)
    portable = mode == "portable"
    pin_threads(params.runtime.threads, portable)
    steps = {}
    for task, level in grid_runs(params):
        ds = generate(task, level, params)
        length = ds.train_prompt.shape[1] + ds.train_answer.shape[1]
        hp = params.train.resolve(task, level)
        torch.manual_seed(0)
        model = GPT(model_config(preset, ds.vocab_size, length - 1), portable_ops=portable)
        batch = random_sequences(hp.batch_size, length, ds.vocab_size)
        key = f"{task}-{level} (seq {length - 1})"
        if not any(k.endswith(f"(seq {length - 1})") for k in steps):
            steps[key] = median_seconds(trainer(model, batch, ds.train_prompt.shape[1], hp), repeats)
    print(json.dumps({"paths": in_effect(), "steps": steps}))


def environment(mode: str, params_file: str) -> dict[str, str]:
    """This process's environment without any pinned variable, plus what a stage of ``mode`` sets."""
    from stages.config import load_typed_params
    from stages.runtime import process_environment

    params = load_typed_params(params_file)
    params = params.model_copy(update={"runtime": params.runtime.model_copy(update={"cpu_paths": mode})})
    env = {k: v for k, v in os.environ.items() if k not in (*VARIABLES, "OMP_WAIT_POLICY", "ANATOMY_CPU_PATHS")}
    return {**env, **process_environment(params, env)}


def measure(mode: str, args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "--mode", mode, "--preset", args.preset,
                          "--repeats", str(args.repeats), "--params", args.params],
                         env=environment(mode, args.params), cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="p405k")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, default="native", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.preset, args.repeats, args.params, args.mode)
        return
    runs = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in runs:
            runs[mode].append(measure(mode, args))
    for mode, results in runs.items():
        print(f"{mode:<8} paths: {results[0]['paths']}")
    print(f"\n{'preset':<8} {'step':<22} {'portable ms':>12} {'native ms':>10} {'portable/native':>16}")
    for key in runs["portable"][0]["steps"]:
        ms = {mode: statistics.median(r["steps"][key] for r in results) * 1e3 for mode, results in runs.items()}
        print(f"{args.preset:<8} {key:<22} {ms['portable']:>12.2f} {ms['native']:>10.2f} "
              f"{ms['portable'] / ms['native']:>16.2f}")


if __name__ == "__main__":
    main()
