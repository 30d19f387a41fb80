"""Cost of each landscape measure on one checkpoint relative to one training step, measured in one run.

    python benchmarks/measure_cost.py --task mod --level hard --model p405k [--step 1000] [--repeats 3]

Uses the run's checkpoint when ``data/checkpoints/<run>/`` exists (``--step``, default its last),
otherwise a freshly initialised model of the preset; the dataset is generated in memory from
params.yaml. A training step is one AdamW update on a ``train`` batch (forward, backward, clip,
step); each measure uses the ``landscape`` params as the stage does, on the same device and
thread count. Prints seconds (median of ``--repeats``) and the ratio to one training step.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from stages import paths  # noqa: E402
from stages.config import load_params, run_id  # noqa: E402
from stages.generate import generate  # noqa: E402
from stages.io.checkpoints import load_model, read_manifest  # noqa: E402
from stages.landscape import landscape_params, measure_checkpoint  # noqa: E402
from stages.models import GPT, model_config  # noqa: E402
from stages.train import resolve_train_params  # noqa: E402
from stages.training.loop import answer_loss, sequences  # noqa: E402


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        clock = time.perf_counter()
        fn()
        times.append(time.perf_counter() - clock)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="mod")
    parser.add_argument("--level", default="hard")
    parser.add_argument("--model", default="p405k")
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--params", default=None)
    args = parser.parse_args()
    params = load_params(args.params)
    p = landscape_params(params)
    if p["threads"]:
        torch.set_num_threads(p["threads"])
    device = p["device"]
    ds = generate(args.task, args.level, params)
    prompt_len = ds.train_prompt.shape[1]
    rid = run_id(args.task, args.level, args.model)
    if paths.checkpoint_dir(rid).is_dir():
        manifest = read_manifest(paths.checkpoint_dir(rid))
        step = args.step if args.step is not None else manifest["steps"][-1]
        model, source = load_model(paths.checkpoint_dir(rid), step, manifest, device), f"checkpoint step {step}"
    else:
        torch.manual_seed(0)
        cfg = model_config(args.model, ds.vocab_size, prompt_len + ds.train_answer.shape[1] - 1)
        model, source = GPT(cfg).to(device), "fresh initialisation (no checkpoints found)"
    order = np.random.default_rng(p["seed"]).permutation(len(ds.train_prompt))
    seq = sequences(ds.train_prompt[order], ds.train_answer[order], device)
    data = {"grad": seq[:p["grad_samples"]], "hessian": seq[:p["hessian_samples"]], "llc": seq[:p["llc_samples"]]}

    hp = resolve_train_params(params, args.task, args.level)
    trainee = GPT(model.cfg).to(device)
    trainee.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(trainee.parameters(), lr=float(hp["lr"]), weight_decay=float(hp["weight_decay"]))
    batch = seq[:hp["batch_size"]]

    def train_step():
        loss = answer_loss(trainee, batch, prompt_len)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainee.parameters(), float(hp["grad_clip"]) or float("inf"))
        opt.step()

    train_step()  # warm-up
    step_s = timed(train_step, max(args.repeats, 5))
    print(f"{rid}: {model.num_params():,} params, {source}, device {device}, {torch.get_num_threads()} thread(s)")
    print(f"one training step (batch {len(batch)}): {step_s:.4f} s")
    print(f"{'measure':<14} {'seconds':>9} {'x training step':>16}   settings")
    settings = {
        "grad": f"{p['grad_samples']} per-example gradients, sketch_dim {p['sketch_dim']} "
                "(grad_erank + gradcov_rank share them)",
        "hessian": f"top {p['hessian_k']} by Lanczos on {p['hessian_samples']} examples, tol {p['hessian_tol']}",
        "llc": f"{p['llc_chains']} chains x {p['llc_draws']} SGLD steps, batch {p['llc_batch']}",
    }
    names = {"grad": ["grad_erank", "gradcov_rank"], "hessian": ["hessian"], "llc": ["llc"]}
    total = 0.0
    for key, measures in names.items():
        if not set(measures) & set(p["measures"]):
            continue
        only = {**p, "measures": measures}
        seconds = timed(lambda: measure_checkpoint(model, data, prompt_len, only), args.repeats)
        total += seconds
        print(f"{key:<14} {seconds:>9.3f} {seconds / step_s:>16.1f}   {settings[key]}")
    print(f"{'all':<14} {total:>9.3f} {total / step_s:>16.1f}   per checkpoint; x max_checkpoints "
          f"{p['max_checkpoints']} per run")


if __name__ == "__main__":
    main()
