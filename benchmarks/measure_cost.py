"""Cost of each landscape measure on one checkpoint, relative to one training step, and of the whole
``landscape`` stage on one run.

    python benchmarks/measure_cost.py --task mod --level hard --model p405k [--seed 0] [--step 295]
                                      [--repeats 3] [--stage] [--params params.yaml]

Uses the run's checkpoint when ``data/checkpoints/<run>/`` exists (``--step``, default the last of
the checkpoints the stage would measure), otherwise a freshly initialised model of the preset; the
dataset is read from ``data/datasets/<task>-<level>`` when present, else generated in memory from
params.yaml. A training step is one AdamW update on a ``train`` batch (forward, backward, clip,
step); each measure uses the ``landscape`` params as the stage does, on the same device and thread
count. Prints seconds (median of ``--repeats``, after one warm-up call) and the ratio to one
training step, then the projected cost of the run: per-checkpoint total x the number of
checkpoints the stage chooses (``stages.pipeline.landscape.choose_steps``; ``max_checkpoints`` without a
history). ``--stage`` also runs the stage itself on the run (nothing written) and prints its time,
warm-up included.

Seconds are CPU seconds of this process (``time.process_time``), with wall seconds beside them: on
one thread the CPU time is what the work costs on an idle core, while the wall time also counts
waiting for a core on a busy machine.
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
from stages.config import load_typed_params, run_id  # noqa: E402
from stages.io.checkpoints import load_model, read_manifest  # noqa: E402
from stages.io.datasets import load_split  # noqa: E402
from stages.io.history import accuracy_by_step  # noqa: E402
from stages.pipeline.landscape import choose_steps, landscape, measure_checkpoint  # noqa: E402
from stages.models import GPT, model_config  # noqa: E402
from stages.pipeline.train import resolve_train_params  # noqa: E402
from stages.training.device import resolve_device  # noqa: E402
from stages.training.loop import make_optimizer, sequences, update  # noqa: E402


def timed(fn, repeats: int) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` of one call, medians of ``repeats`` after a warm-up call
    (torch.func compiles its batching rules on the first)."""
    fn()
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall)


def dataset(task: str, level: str, params: dict) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(train prompts, train answers, prompt_len, vocab_size), from disk when the stage's input exists."""
    directory = paths.dataset_dir(task, level)
    if directory.is_dir():
        prompt, answer, meta = load_split(directory, "train")
        return prompt, answer, meta["prompt_len"], meta["vocab_size"]
    from stages.pipeline.generate import generate

    ds = generate(task, level, params)
    return ds.train_prompt, ds.train_answer, ds.train_prompt.shape[1], ds.vocab_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="mod")
    parser.add_argument("--level", default="hard")
    parser.add_argument("--model", default="p405k")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stage", action="store_true", help="also time the whole stage on the run")
    parser.add_argument("--params", default=None)
    args = parser.parse_args()
    params = load_typed_params(args.params)
    p = params.landscape
    if p.threads:
        torch.set_num_threads(p.threads)
    device = resolve_device(p.device, "landscape.device")
    prompt, answer, prompt_len, vocab = dataset(args.task, args.level, params)
    rid = run_id(args.task, args.level, args.model, args.seed)
    n_checkpoints, chosen = p.max_checkpoints, None
    if paths.checkpoint_dir(rid).is_dir():
        manifest = read_manifest(paths.checkpoint_dir(rid))
        if paths.history_file(rid).is_file():
            chosen, acq = choose_steps(manifest["steps"], accuracy_by_step(rid), p.max_checkpoints,
                                       p.after_acquisition, params.events.acquisition_threshold,
                                       params.events.acquisition_window)
            n_checkpoints = len(chosen)
            print(f"{rid}: acquisition at step {acq}; the stage measures {n_checkpoints} checkpoints: {chosen}")
        step = args.step if args.step is not None else (chosen or manifest["steps"])[-1]
        model, source = load_model(paths.checkpoint_dir(rid), step, manifest, device), f"checkpoint step {step}"
    else:
        torch.manual_seed(0)
        cfg = model_config(args.model, vocab, prompt_len + answer.shape[1] - 1)
        model, source = GPT(cfg).to(device), "fresh initialisation (no checkpoints found)"
    order = np.random.default_rng(p.seed).permutation(len(prompt))
    seq = sequences(prompt[order], answer[order], device)
    data = {"grad": seq[:p.grad.samples], "hessian": seq[:p.hessian.samples], "llc": seq[:p.llc.samples]}

    hp = resolve_train_params(params, args.task, args.level)
    trainee = GPT(model.cfg).to(device)
    trainee.load_state_dict(model.state_dict())
    opt = make_optimizer(trainee, hp.lr, hp.weight_decay, hp.betas)
    batch = seq[:hp.batch_size]

    def train_step():
        update(trainee, opt, batch, prompt_len, hp.grad_clip)

    step_s, step_wall = timed(train_step, max(args.repeats, 5))
    print(f"{rid}: {model.num_params():,} params, {source}, device {device}, {torch.get_num_threads()} thread(s)")
    print(f"one training step (batch {len(batch)}): {step_s:.4f} CPU s ({step_wall:.4f} wall s)")
    print(f"{'measure':<14} {'CPU s':>9} {'wall s':>9} {'x training step':>16}   settings")
    settings = {
        "grad": f"{p.grad.samples} per-example gradients, sketch_dim {p.grad.sketch_dim}, two Gram matrices "
                "(grad_erank + gradcov_rank share them)",
        "hessian": f"top {p.hessian.k} by Lanczos on {p.hessian.samples} examples, tol {p.hessian.tol}, "
                   f"{p.hessian.repeats} start vector(s)",
        "llc": f"{p.llc.chains} chains x {p.llc.draws} SGLD steps, batch {p.llc.batch_size}",
    }
    names = {"grad": ["grad_erank", "gradcov_rank"], "hessian": ["hessian"], "llc": ["llc"]}
    total = total_wall = 0.0
    for key, measures in names.items():
        if not set(measures) & set(p.measures):
            continue
        only = p.model_copy(update={"measures": list(measures)})
        seconds, wall = timed(lambda: measure_checkpoint(model, data, prompt_len, only), args.repeats)
        total, total_wall = total + seconds, total_wall + wall
        print(f"{key:<14} {seconds:>9.3f} {wall:>9.3f} {seconds / step_s:>16.1f}   {settings[key]}")
    print(f"{'all':<14} {total:>9.3f} {total_wall:>9.3f} {total / step_s:>16.1f}   per checkpoint")
    print(f"projected per run: {total:.3f} CPU s x {n_checkpoints} checkpoints = {total * n_checkpoints:.1f} CPU s "
          "(plus loading and the first-call warm-up)")
    if args.stage:
        c, w = time.process_time(), time.perf_counter()
        frame = landscape(args.task, args.level, args.model, args.seed, p, params.events, progress=False)
        print(f"stage on {rid}: {time.process_time() - c:.1f} CPU s ({time.perf_counter() - w:.1f} wall s) for "
              f"{len(frame)} checkpoints ({torch.get_num_threads()} thread(s), warm-up included)")


if __name__ == "__main__":
    main()
