"""Throughput of the scale-out and GPU paths, as ratios measured in one run.

    python benchmarks/cluster_throughput.py [--steps 150] [--workers 2] [--device auto] [--skip-repro]

Prints
1. training tokens/s of the GPT update step in fp32 and under bf16 autocast (on ``--device``);
2. the cost of RankMe for one checkpoint: the batched on-device call vs one SVD per layer, and
   the chunked call (one matrix per SVD) vs one call;
3. wall time of a serial ``dvc repro events`` vs ``python -m stages.cluster repro --workers N
   events`` on the default grid, each in a fresh temporary copy of the repository (git-tracked
   files) with small params (``--steps`` training steps per run).

Ratios above 1 mean the second option is faster. The cluster pays one ``dvc`` process start per
stage (about a second of CPU), so with seconds-long stages on a busy machine it can lose; with
realistic stage lengths the stages' own work dominates. Both repro runs use the same
OMP_NUM_THREADS (torch's CPU results depend on it; the cluster leaves it as you set it).
"""
from __future__ import annotations

import argparse
import os
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

from stages.cluster.dag import dvc_env  # noqa: E402
from stages.measures.rankme import rankme, rankme_batched  # noqa: E402
from stages.models import GPT, model_config  # noqa: E402
from stages.training.device import resolve_device  # noqa: E402
from stages.training.loop import make_optimizer, update  # noqa: E402


def tokens_per_second(model_name: str, device: torch.device, precision: str, steps: int, batch: int = 256,
                      seq_len: int = 16) -> float:
    torch.manual_seed(0)
    model = GPT(model_config(model_name, vocab_size=32, block_size=seq_len - 1)).to(device)
    opt = make_optimizer(model, lr=1e-3, weight_decay=1.0, betas=(0.9, 0.98))
    seq = torch.randint(0, 32, (batch, seq_len), device=device)

    def step():
        update(model, opt, seq, seq_len // 2, grad_clip=1.0, precision=precision)

    step()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    clock = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps * batch * (seq_len - 1) / (time.perf_counter() - clock)


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        clock = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - clock)
    return best


def measure_costs(device: torch.device, layers: int = 13, n: int = 512, d: int = 256) -> dict:
    z = torch.randn(layers, n, d, generator=torch.Generator().manual_seed(0))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    batched = timed(lambda: (rankme_batched(z, device=device), sync()))
    per_layer = timed(lambda: [rankme(m) for m in z.numpy()])
    chunk1 = timed(lambda: (rankme_batched(z, device=device, chunk=1), sync()))
    return {"batched_s": batched, "per_layer_s": per_layer, "chunk1_s": chunk1}


def workspace_copy(dest: Path, steps: int) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in filter(None, files.split("\0")):
        if rel == "dvc.lock" or (rel.startswith("data/") and not rel.endswith(".gitignore")):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes((ROOT / rel).read_bytes())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["datasets"].update(n_train=512, n_test=128)
    params["train"]["defaults"].update(steps=steps, batch_size=64, n_checkpoints=8, eval_train_max=128,
                                       device="cpu")
    params["train"]["tasks"] = {t: {} for t in params["train"]["tasks"]}
    params["extract"].update(probe_size=64, device="cpu")
    params["measures"]["device"] = "cpu"
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)


def repro_times(steps: int, workers: int, targets: list[str]) -> tuple[float, float]:
    env = {**dvc_env(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with tempfile.TemporaryDirectory() as tmp:
        serial, parallel = Path(tmp, "serial"), Path(tmp, "parallel")
        for dest in (serial, parallel):
            dest.mkdir()
            workspace_copy(dest, steps)
        serial_s = _timed_run([sys.executable, "-m", "dvc", "repro", *targets], serial, env)
        cluster_s = _timed_run([sys.executable, "-m", "stages.cluster", "repro", "--workers", str(workers),
                                *targets], parallel, env)
        return serial_s, cluster_s


def _timed_run(cmd: list[str], cwd: Path, env: dict) -> float:
    clock = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed in {cwd}:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--models", nargs="+", default=["p405k", "p3m"])
    ap.add_argument("--train-steps", type=int, default=20, help="update steps timed per model and precision")
    ap.add_argument("--steps", type=int, default=150, help="training steps per run in the repro comparison")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--targets", nargs="*", default=["events"])
    ap.add_argument("--skip-repro", action="store_true")
    args = ap.parse_args()
    device = resolve_device(args.device)
    print(f"device {device}, torch {torch.__version__}, {os.cpu_count()} CPU(s), "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")

    for name in args.models:
        fp32 = tokens_per_second(name, device, "fp32", args.train_steps)
        bf16 = tokens_per_second(name, device, "bf16", args.train_steps)
        print(f"train {name}: fp32 {fp32:,.0f} tokens/s, bf16 autocast {bf16:,.0f} tokens/s, "
              f"bf16/fp32 = {bf16 / fp32:.2f}x")

    c = measure_costs(device)
    print(f"RankMe of 13 layers x [512, 256]: batched on {device} {c['batched_s'] * 1e3:.1f} ms, "
          f"per-layer float64 SVD {c['per_layer_s'] * 1e3:.1f} ms, chunk=1 {c['chunk1_s'] * 1e3:.1f} ms; "
          f"per-layer/batched = {c['per_layer_s'] / c['batched_s']:.2f}x, "
          f"chunk=1/batched = {c['chunk1_s'] / c['batched_s']:.2f}x")

    if not args.skip_repro:
        serial_s, cluster_s = repro_times(args.steps, args.workers, args.targets)
        print(f"dvc repro {' '.join(args.targets)} ({args.steps} steps/run): serial {serial_s:.1f}s, "
              f"{args.workers}-worker cluster {cluster_s:.1f}s -> speed-up {serial_s / cluster_s:.2f}x")


if __name__ == "__main__":
    main()
