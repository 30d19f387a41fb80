"""How a stage shares a busy machine: the training step beside competing CPU-bound processes, as a
ratio to its time without them, with OpenMP's default (active, spinning) waiting and with the
passive waiting every stage now sets (stages/runtime.py: ``OMP_WAIT_POLICY=PASSIVE``), in one run.

    python benchmarks/load_share.py [--preset p405k] [--task copy --level easy] [--steps 20]
                                    [--rounds 2] [--competitors 0 1 2] [--params params.yaml]
                                    [--spincounts 3000 30000]   # more variants: GOMP_SPINCOUNT=N

Each measurement is a child process (OpenMP reads its waiting policy when it loads) that times
``--steps`` training updates of ``--preset`` on ``--task/--level``'s sequences at ``runtime.threads``
threads (the training loop's own update, :func:`machine_limits.trainer`), started while ``k``
processes spin (``while True: pass``) for each ``k`` of ``--competitors``; the variants and loads
are interleaved over ``--rounds`` rounds so that drift on a shared machine falls on all. A fair
share of a machine with ``c`` cores and ``k`` competitors is a slowdown of about ``(k + threads) /
c`` once that exceeds 1; an order of magnitude above it is a stage that spins against the load.
The table gives the median step per variant and load and each load's ratio to the variant's own
time without competitors.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {"spinning (before)": {}, "passive (now)": {"OMP_WAIT_POLICY": "PASSIVE"}}
CLEARED = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def child(args) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    from machine_limits import random_sequences, trainer
    from stages.config import load_typed_params
    from stages.pipeline.generate import generate
    from stages.models import GPT, model_config
    from stages.runtime import pin_threads

    params = load_typed_params(args.params)
    pin_threads(params.runtime.threads)
    ds = generate(args.task, args.level, params)
    length = ds.train_prompt.shape[1] + ds.train_answer.shape[1]
    hp = params.train.resolve(args.task, args.level)
    torch.manual_seed(0)
    model = GPT(model_config(args.preset, ds.vocab_size, length - 1))
    step = trainer(model, random_sequences(hp.batch_size, length, ds.vocab_size), ds.train_prompt.shape[1], hp)
    step()  # warm-up
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"median_s": statistics.median(times), "threads": params.runtime.threads}))


def measure(variant: str, competitors: int, args, variants=VARIANTS) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(variants[variant])
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(competitors)]
    try:
        out = subprocess.run([sys.executable, __file__, "--child", "--preset", args.preset, "--task", args.task,
                              "--level", args.level, "--steps", str(args.steps), "--params", args.params],
                             env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="p405k")
    parser.add_argument("--task", default="copy")
    parser.add_argument("--level", default="easy")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--competitors", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--spincounts", type=int, nargs="*", default=[],
                        help="also time libgomp's GOMP_SPINCOUNT=N (spin N iterations, then sleep) for each N")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    loads = sorted(set([0, *args.competitors]))
    variants = {**VARIANTS, **{f"GOMP_SPINCOUNT={n}": {"GOMP_SPINCOUNT": str(n)} for n in args.spincounts}}
    runs = {(v, k): [] for v in variants for k in loads}
    threads = None
    for _ in range(args.rounds):
        for k in loads:
            for v in variants:
                result = measure(v, k, args, variants)
                runs[v, k].append(result["median_s"])
                threads = result["threads"]
    cores = os.cpu_count()
    print(f"{args.preset} training step ({args.task}-{args.level}), {threads} threads, {cores} cores; "
          f"median of {args.steps} steps, median over {args.rounds} rounds")
    width = max(18, *(len(v) + 1 for v in variants))
    head = f"{'waiting':<{width}}" + "".join(f"{f'+{k} ms':>10}" for k in loads)
    head += "".join(f"{f'+{k}/idle':>10}" for k in loads if k)
    print(head)
    for v in variants:
        ms = {k: statistics.median(runs[v, k]) * 1e3 for k in loads}
        line = f"{v:<{width}}" + "".join(f"{ms[k]:>10.1f}" for k in loads)
        line += "".join(f"{ms[k] / ms[0]:>10.2f}" for k in loads if k)
        print(line)
    fair = "  ".join(f"+{k}: {max(1.0, (k + threads) / cores):.2f}" for k in loads if k)
    print(f"fair share (max(1, (competitors + threads) / cores)): {fair}")
    spin = {k: statistics.median(runs["spinning (before)", k]) for k in loads}
    passive = {k: statistics.median(runs["passive (now)", k]) for k in loads}
    print("passive / spinning: " + "  ".join(f"+{k}: {passive[k] / spin[k]:.2f}" for k in loads))


if __name__ == "__main__":
    main()
