"""Cost of the RankMe monitor, in one process, medians.

    python benchmarks/monitor_cost.py --trainer [--repeats 5] [--threads 1]
    python benchmarks/monitor_cost.py [--tasks mod] [--level hard] [--model p405k] [--probe-size 512]
                                      [--repeats 20] [--threads 1] [--params params.yaml]

``--trainer``: the README's Hugging Face Trainer example (docs/monitor.md; the same model, data, probe
and ``TrainingArguments``) trained with and without ``RankMeCallback`` at its default cadence (a
reading at every Trainer log, plus one at step 0), alternating ``--repeats`` times; the ratio of the
median CPU seconds of ``trainer.train()`` minus one is the monitor's overhead (target: at most 5%).

Otherwise, one reading against one training step of this project's GPT:

A **training step** is one AdamW update of the preset (stages/models) on a ``train`` batch of the
task as stage ``train`` runs it: ``answer_loss`` forward, backward, gradient clipping, step
(stages/training/loop.py). A **reading** is what the monitor does every ``every`` steps
(``stages.monitor.monitor_step``): the fixed probe batch (the first ``--probe-size`` test examples,
as stage ``extract``, cut after the probed token unless ``--full-sequence``) through the model in eval mode without gradients, the hidden state of every
layer at the first answer position, raw and centred RankMe and mean dominance of every layer, and
the monitor's update. The two alternate ``--repeats`` times after a warm-up of each; the medians of
CPU seconds (``time.process_time``; wall seconds beside) give the ratio.

Overhead at one reading per 1% of training (100 readings per run) is ``ratio x 100 / steps``, with
``steps`` the task's training length in params.yaml. Datasets are generated in memory.
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

from stages.config import TASK_NAMES, load_typed_params  # noqa: E402
from stages.pipeline.generate import generate  # noqa: E402
from stages.models import GPT, model_config  # noqa: E402
from stages.monitor import RankMeMonitor, monitor_step  # noqa: E402
from stages.monitor.core import layer_geometry  # noqa: E402
from stages.monitor.probe import probe_hidden_states  # noqa: E402
from stages.pipeline.train import resolve_train_params  # noqa: E402
from stages.training.loop import make_optimizer, sequences, update  # noqa: E402


def clock():
    return time.process_time(), time.perf_counter()


def since(start) -> tuple[float, float]:
    c, w = clock()
    return c - start[0], w - start[1]


def bench(task: str, level: str, model_name: str, params: dict, probe_size: int, repeats: int,
          full_sequence: bool = False) -> dict:
    ds = generate(task, level, params)
    prompt_len = ds.train_prompt.shape[1]
    hp = resolve_train_params(params, task, level)
    torch.manual_seed(0)
    model = GPT(model_config(model_name, ds.vocab_size, prompt_len + ds.train_answer.shape[1] - 1))
    opt = make_optimizer(model, hp.lr, hp.weight_decay, hp.betas)
    train_seq = sequences(ds.train_prompt, ds.train_answer, "cpu")
    test_seq = sequences(ds.test_prompt, ds.test_answer, "cpu")
    batch = train_seq[:int(hp.batch_size)]
    # the first answer position, as stage extract; a causal model's state there depends on the tokens
    # up to it only, so the probe is cut after it (the same states as the full sequence, less work)
    probe = test_seq[:probe_size, :-1] if full_sequence else test_seq[:probe_size, :prompt_len]
    position = prompt_len - 1
    hidden_fn = lambda m, b: m(b, hidden_states=True)[1]  # noqa: E731 -- the project's GPT returns its states
    monitor = RankMeMonitor()
    model.train()

    def train_step():
        update(model, opt, batch, prompt_len, hp.grad_clip)

    step = 0
    train_step()
    monitor_step(model, probe, step, monitor, hidden_fn=hidden_fn, position=position)
    times = {"train": [], "reading": [], "forward": [], "rankme": []}
    for _ in range(repeats):
        step += 1
        t = clock()
        train_step()
        times["train"].append(since(t))
        t = clock()
        monitor_step(model, probe, step, monitor, hidden_fn=hidden_fn, position=position)
        times["reading"].append(since(t))
        t = clock()
        states = probe_hidden_states(model, probe, position, hidden_fn)
        times["forward"].append(since(t))
        t = clock()
        layer_geometry(states)
        times["rankme"].append(since(t))
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in times.items()}
    ratio = med["reading"][0] / med["train"][0]
    steps = int(hp.steps)
    return {"task": f"{task}-{level}", "params": model.num_params(), "seq_len": probe.shape[1],
            "probe": tuple(probe.shape), "batch": len(batch), "layers": len(states), "steps": steps,
            "train_s": med["train"], "reading_s": med["reading"], "forward_s": med["forward"],
            "rankme_s": med["rankme"], "ratio": ratio, "wall_ratio": med["reading"][1] / med["train"][1],
            "overhead_1pct": ratio * 100 / steps}


def readme_trainer(with_monitor: bool, out: str) -> float:
    """CPU seconds of ``trainer.train()`` in the README's Trainer example (keep the two in step)."""
    import io
    import random
    from contextlib import redirect_stdout

    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from stages.monitor import RankMeCallback
    from stages.pythia import grammar
    from stages.pythia.suite import batches, build_tokenizer

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    tok = build_tokenizer()
    model = GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        max_position_embeddings=64, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    train = [{"input_ids": x, "labels": x} for x in next(batches(tok, seed=0, batch_size=256, seq_len=32))]
    rng = random.Random(1)
    probe = tok([grammar.sentence(rng) for _ in range(32)], return_tensors="pt", padding=True, truncation=True,
                max_length=16)
    args = TrainingArguments(output_dir=out, max_steps=100, per_device_train_batch_size=16, learning_rate=3e-3,
                             logging_steps=10, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=train,
                      callbacks=[RankMeCallback(probe)] if with_monitor else None)
    with redirect_stdout(io.StringIO()):
        start = time.process_time()
        trainer.train()
        return time.process_time() - start


def trainer_overhead(repeats: int) -> None:
    import tempfile

    times = {False: [], True: []}
    with tempfile.TemporaryDirectory() as out:
        readme_trainer(True, out)  # warm-up
        for _ in range(repeats):
            for with_monitor in (False, True):
                times[with_monitor].append(readme_trainer(with_monitor, out))
    base, monitored = statistics.median(times[False]), statistics.median(times[True])
    print(f"README Trainer example (100 steps, readings at steps 0, 10, ..., 100), {torch.get_num_threads()} "
          f"thread(s), medians of {repeats} alternating repeats (CPU seconds)")
    print(f"without the monitor {base:.3f} s, with it {monitored:.3f} s: overhead {100 * (monitored / base - 1):.1f}% "
          f"(target <= 5%); per run: {', '.join(f'{100 * (m / b - 1):.1f}%' for b, m in zip(times[False], times[True]))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer", action="store_true", help="the README's Trainer example with and without it")
    parser.add_argument("--tasks", default="mod", help="comma-separated tasks, or 'all'")
    parser.add_argument("--level", default="hard")
    parser.add_argument("--model", default="p405k")
    parser.add_argument("--probe-size", type=int, default=None, help="default: params.yaml extract.probe_size")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--params", default=None)
    parser.add_argument("--full-sequence", action="store_true",
                        help="run the probe's whole sequences, not just the tokens up to the probed position")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.trainer:
        trainer_overhead(args.repeats if args.repeats != 20 else 5)
        return
    params = load_typed_params(args.params)
    probe_size = args.probe_size or params.extract.probe_size
    tasks = list(TASK_NAMES) if args.tasks == "all" else args.tasks.split(",")
    print(f"{args.model}, {torch.get_num_threads()} thread(s), probe {probe_size} examples, "
          f"medians of {args.repeats} alternating repeats (CPU seconds; wall in brackets)")
    print(f"{'run':<14} {'batch':>5} {'seq':>4} {'train step s':>17} {'reading s':>17} {'forward s':>9} "
          f"{'rankme s':>8} {'ratio':>6} {'steps':>5} {'overhead @1%':>12}")
    rows = []
    for task in tasks:
        r = bench(task, args.level, args.model, params, probe_size, args.repeats, args.full_sequence)
        rows.append(r)
        print(f"{r['task']:<14} {r['batch']:>5} {r['seq_len']:>4} {r['train_s'][0]:>8.4f} ({r['train_s'][1]:.4f}) "
              f"{r['reading_s'][0]:>8.4f} ({r['reading_s'][1]:.4f}) {r['forward_s'][0]:>9.4f} {r['rankme_s'][0]:>8.4f} "
              f"{r['ratio']:>6.3f} {r['steps']:>5} {100 * r['overhead_1pct']:>11.2f}%", flush=True)
    ratios = [r["ratio"] for r in rows]
    print(f"reading / training step: median ratio {np.median(ratios):.3f} over {len(rows)} task(s); at one reading "
          f"per 1% of training the monitor costs ratio x 100 / steps of training time "
          f"(target < 5%: ratio < 0.05 x steps / 100)")


if __name__ == "__main__":
    main()
