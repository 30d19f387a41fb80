"""GPU check: train a large preset briefly in bf16, measure RankMe, and estimate the full grid's GPU hours.

    python benchmarks/gpu_check.py                       # p151m on mod-hard, 200 steps, then the estimate
    python benchmarks/gpu_check.py --task copy --level hard --preset p71m
    python benchmarks/gpu_check.py --no-estimate         # the check only
    python benchmarks/gpu_check.py --seeds               # estimate x len(grid.seeds) of params.yaml
    python benchmarks/gpu_check.py --device cpu --quick  # seconds, for tests

Everything runs in memory with the project's own code: the dataset of (task, level) is built as the
``generate`` stage builds it (params.yaml), the model is ``stages.models.GPT`` at the preset's size, the
update is the one of ``stages.training.loop.train`` (same AdamW parameter groups, lr schedule, batch
order, autocast, gradient clipping), checkpoints are scored with ``evaluate``, hidden states are taken
with the ``extract`` stage's ``hidden_at`` and measured with ``stages.measures.rankme.geometry``.

Prints one line per number: device; preset and shape; training tokens/s; model FLOPs per step; achieved
model FLOP/s and MFU; peak memory; eval / extract / geometry time per checkpoint; the RankMe cost ratio;
then (unless ``--no-estimate``) the full grid's GPU hours per preset and in total, and the wall time when
``python -m stages.cluster repro --workers K`` packs several runs onto the one GPU.

On CUDA training uses bf16 autocast and MFU is against the GPU's dense bf16 tensor-core peak (table
below, or ``--peak-tflops``). On CPU training is fp32 and MFU is against the measured fp32 rate of a
1024x1024 ``torch.mm`` on this machine (with torch's current thread count).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from stages.config import LEVELS, TASK_NAMES, choose, load_params, load_typed_params  # noqa: E402
from stages.errors import PipelineError  # noqa: E402
from stages.pipeline.extract import hidden_at  # noqa: E402
from stages.measures.rankme import geometry  # noqa: E402
from stages.models import GPT, PRESETS, model_config  # noqa: E402
from stages.models.presets import PAPER_SIZES  # noqa: E402
from stages.tasks import build_dataset, get_task  # noqa: E402
from stages.training.device import resolve_device  # noqa: E402
from stages.training.memory import check_fits, train_bytes  # noqa: E402
from stages.training.precision import AUTO_BF16_MIN_PARAMS  # noqa: E402
from stages.training.loop import batch_indices, evaluate, make_optimizer, sequences, update  # noqa: E402
from stages.training.schedule import lr_at  # noqa: E402

# Dense (no structured sparsity) bf16 tensor-core peaks in TFLOP/s, from the vendors' datasheets.
# Matched in order against torch.cuda.get_device_name() (lower case), so specific names come first.
PEAK_BF16_TFLOPS: list[tuple[str, float, str]] = [
    (r"gh200|h200", 989.0, "H200 / GH200"),
    (r"h100.*nvl", 835.0, "H100 NVL"),
    (r"h100.*pcie", 756.0, "H100 PCIe"),
    (r"h100|h800", 989.0, "H100 SXM"),
    (r"a100|a800", 312.0, "A100"),
    (r"l40s", 362.0, "L40S"),
    (r"l40\b", 181.0, "L40"),
    (r"\bl4\b", 121.0, "L4"),
    (r"a10g", 125.0, "A10G (A10 datasheet)"),
    (r"\ba10\b", 125.0, "A10"),
    (r"rtx 4090", 165.0, "RTX 4090 (fp32 accumulate)"),
]
H200_TFLOPS = 989.0

# Assumptions of the FLOP-count estimate (replaced by measured step times when the burst runs).
ASSUMED_MFU = 0.30        # model FLOPs utilisation of a compute-bound run (p25m..p151m on an H100-class GPU)
ASSUMED_FLOOR_MS = 3.0    # overhead-bound floor of one eager-PyTorch update step (kernel launches + .item() sync)
USABLE_MEMORY = 0.9       # share of GPU memory the packed runs may use
MAX_SHARE = 8             # at most this many runs per GPU


class ArgumentError(PipelineError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the usage too)
        raise ArgumentError(message)


# FLOP counts ---------------------------------------------------------------------------------------

def non_embedding_params(model: GPT) -> int:
    """Parameters minus the token and position embeddings (the head is tied to the token embedding,
    so ``model.parameters()`` holds it once, as ``wte``)."""
    return model.num_params() - model.wte.weight.numel() - model.wpe.weight.numel()


def train_flops_per_step(n_non_emb: int, n_layer: int, d_model: int, context: int, batch: int) -> int:
    """Model FLOPs of one training step (forward + backward), the PaLM/Kaplan convention:

        6 * N * tokens  +  12 * n_layer * d_model * T * tokens,   tokens = batch * T

    N = non-embedding parameters, T = the model's context (prompt_len + answer_len - 1 positions, the
    input of ``answer_loss``); the second term is attention's QK^T and AV matmuls (causal masking not
    discounted). The tied output head and the embeddings are not counted, nor is the optimiser."""
    tokens = batch * context
    return 6 * n_non_emb * tokens + 12 * n_layer * d_model * context * tokens


def forward_flops(n_non_emb: int, n_layer: int, d_model: int, context: int, n_examples: int) -> int:
    """Forward-only model FLOPs (evaluation, extraction): a third of the training count."""
    tokens = n_examples * context
    return 2 * n_non_emb * tokens + 4 * n_layer * d_model * context * tokens


def peak_from_name(name: str) -> tuple[float | None, str]:
    low = name.lower()
    for pattern, tflops, label in PEAK_BF16_TFLOPS:
        if re.search(pattern, low):
            return tflops * 1e12, f"{label} dense bf16 datasheet peak"
    return None, "unknown"


def cpu_fp32_rate(n: int = 1024, repeat: int = 5) -> float:
    """Measured fp32 FLOP/s of one n x n x n ``torch.mm`` (best of ``repeat``)."""
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    b = torch.randn(n, n, generator=torch.Generator().manual_seed(1))
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeat):
        clock = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - clock)
    return 2 * n ** 3 / best


# params.yaml ----------------------------------------------------------------------------------------

class Params:
    """params.yaml read once: the raw mapping (``load_params``) and the typed one when it loads."""

    def __init__(self, path: str | None):
        self.raw = load_params(path)
        try:
            self.typed = load_typed_params(path)
        except Exception:  # the typed schema may be mid-refactor: the raw mapping suffices
            self.typed = None

    def train_settings(self, task: str, level: str) -> dict:
        """``train.defaults``, then ``train.tasks.<task>.all``, then ``train.tasks.<task>.<level>``:
        ``stages.pipeline.train.resolve_train_params`` when it takes (params, task, level), else that merge here."""
        if self.typed is not None:
            try:
                from stages.pipeline.train import resolve_train_params

                settings = resolve_train_params(self.typed, task, level)
                return settings.model_dump() if hasattr(settings, "model_dump") else dict(settings)
            except (ImportError, TypeError, AttributeError):
                pass
        train = self.raw["train"]
        merged = dict(train["defaults"])
        over = (train.get("tasks") or {}).get(task) or {}
        for part in ("all", level):
            merged.update(over.get(part) or {})
        merged.setdefault("eval_train_max", 4096)
        merged.setdefault("dropout", 0.0)
        merged.setdefault("min_lr_ratio", 0.0)
        return merged

    def dataset(self, task: str, level: str):
        """The ``generate`` stage's dataset of (task, level), built in memory."""
        get_task(task)
        if level not in LEVELS:
            raise PipelineError(f"unknown level '{level}' (choose from: {', '.join(LEVELS)})")
        if self.typed is not None:
            try:
                from stages.pipeline.generate import generate

                return generate(task, level, self.typed)
            except (ImportError, TypeError, AttributeError):
                pass
        ds = self.raw["datasets"]
        return build_dataset(task, level, self.raw["tasks"][task][level], ds["seed"], ds["n_train"], ds["n_test"])

    def seeds(self) -> list:
        return list(self.raw.get("grid", {}).get("seeds") or [0])


# training -------------------------------------------------------------------------------------------

class Run:
    """One model on one dataset, updated exactly as ``stages.training.loop.train`` does."""

    def __init__(self, preset: str, ds, settings: dict, device: torch.device, precision: str,
                 batch_size: int | None = None, seed: int = 0, total_steps: int | None = None):
        meta = ds.meta()
        self.prompt_len = meta["prompt_len"]
        self.seq_len = meta["prompt_len"] + meta["answer_len"]
        self.context = self.seq_len - 1
        self.settings = settings
        self.device, self.precision, self.seed = device, precision, seed
        self.total_steps = total_steps or settings["steps"]
        cfg = model_config(preset, meta["vocab_size"], self.context, settings.get("dropout", 0.0))
        torch.manual_seed(seed)
        self.model = GPT(cfg).to(device)
        self.cfg = cfg
        model = self.model
        self.opt = make_optimizer(model, settings["lr"], settings["weight_decay"], settings["betas"])
        self.train_seq = sequences(ds.train_prompt, ds.train_answer, device)
        self.test_seq = sequences(ds.test_prompt, ds.test_answer, device)
        self.batch_size = batch_size or settings["batch_size"]
        self.batch = min(self.batch_size, len(self.train_seq))  # batch_indices: the whole split when it is smaller
        self.n_params = model.num_params()
        self.n_non_emb = non_embedding_params(model)
        self.flops_per_step = train_flops_per_step(self.n_non_emb, cfg.n_layer, cfg.d_model, self.context, self.batch)

    def step(self, step: int) -> float:
        s = self.settings
        for group in self.opt.param_groups:
            group["lr"] = lr_at(step, s["lr"], self.total_steps, s["warmup"], s["schedule"], s.get("min_lr_ratio", 0.0))
        idx = batch_indices(self.seed, step, len(self.train_seq), self.batch_size)
        batch = self.train_seq if idx is None else self.train_seq[torch.as_tensor(idx, device=self.device)]
        return update(self.model, self.opt, batch, self.prompt_len, s["grad_clip"], self.precision).item()

    def evaluate(self, eval_train_max: int, eval_batch_size: int) -> tuple[float, float]:
        """The checkpoint scoring of ``train``: the whole test split, then the first train examples;
        returns the test split's (loss, exact match)."""
        test = evaluate(self.model, self.test_seq, self.prompt_len, eval_batch_size, self.precision)
        evaluate(self.model, self.train_seq[:eval_train_max], self.prompt_len, eval_batch_size, self.precision)
        return test


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn):
    sync(device)
    clock = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - clock


def fmt(x: float) -> str:
    return f"{x:.3g}"


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2 ** 30:.2f} GiB"


# the check ------------------------------------------------------------------------------------------

def check(args, params: Params, device: torch.device, precision: str, peak: float | None, peak_label: str) -> dict:
    ds = params.dataset(args.task, args.level)
    settings = params.train_settings(args.task, args.level)
    run = Run(args.preset, ds, settings, device, precision, batch_size=args.batch, total_steps=settings["steps"])
    cfg = run.cfg
    print(f"preset: {args.preset}  n_params: {run.n_params:,}  non_embedding_params: {run.n_non_emb:,}  "
          f"n_layer: {cfg.n_layer}  d_model: {cfg.d_model}")
    print(f"task: {args.task}-{args.level}  sequence length: {run.seq_len} (model context T = {run.context})  "
          f"batch: {run.batch}  lr: {settings['lr']}  precision: {precision}")

    extract_cfg = params.raw.get("extract", {})
    probe_size = min(int(extract_cfg.get("probe_size", 512)), len(run.test_seq))
    extract_batch = int(extract_cfg.get("batch_size", 512))
    n_answer = ds.test_answer.shape[1] if extract_cfg.get("positions", "first") == "all" else 1
    positions = list(range(run.prompt_len - 1, run.prompt_len - 1 + n_answer))
    probe = run.test_seq[:probe_size]
    eval_train_max = int(settings.get("eval_train_max", 4096))
    eval_batch = int(settings.get("eval_batch_size", 2048))

    n_ckpt = max(2, args.checkpoints)
    ckpts = sorted({int(round(s)) for s in np.linspace(0, args.steps, n_ckpt)})
    warmup = min(args.warmup_steps, max(args.steps - 1, 0))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step, train_s, timed_steps, rows = 0, 0.0, 0, []
    for target in ckpts:
        while step < target:
            _, seconds = timed(device, lambda: run.step(step))
            if step >= warmup:
                train_s += seconds
                timed_steps += 1
            step += 1
        (test_loss, test_acc), eval_s = timed(device, lambda: run.evaluate(eval_train_max, eval_batch))
        states, extract_s = timed(device, lambda: hidden_at(run.model, probe, positions, extract_batch, precision))
        geo, geometry_s = timed(device, lambda: geometry(torch.as_tensor(states), device=device))
        rows.append({"step": step, "eval_s": eval_s, "extract_s": extract_s, "geometry_s": geometry_s})
        print(f"checkpoint step {step}: eval {eval_s:.3f}s  extract {extract_s:.3f}s  geometry {geometry_s:.3f}s  "
              f"test_acc {test_acc:.3f}  test_loss {test_loss:.3f}  "
              f"rankme(last layer) {float(geo['rankme'][-1]):.1f} of {states.shape[1]} states x {states.shape[2]} dims")

    step_s = train_s / max(timed_steps, 1)
    tokens = run.batch * run.context
    tok_s = tokens / step_s
    flops_s = run.flops_per_step / step_s
    print(f"train tokens/s: {tok_s:.4g}  ({timed_steps} timed steps after {warmup} warm-up, "
          f"{step_s * 1e3:.2f} ms/step)")
    print(f"model FLOPs/step: {run.flops_per_step:.4g}  (6*N*B*T + 12*n_layer*d_model*T*B*T; "
          f"N = {run.n_non_emb:,}, B = {run.batch}, T = {run.context})")
    print(f"achieved model FLOP/s: {flops_s:.4g}")
    mfu = flops_s / peak if peak else None
    print(f"MFU: {fmt(mfu) if mfu is not None else 'unknown'}  (against {peak / 1e12:.4g} TFLOP/s, {peak_label})"
          if peak else "MFU: unknown  (no peak for this device; pass --peak-tflops)")
    peak_mem = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    print(f"peak memory: {gib(peak_mem) if peak_mem is not None else 'n/a on cpu'}")

    budget, n_run_ckpt = settings["steps"], settings["n_checkpoints"]
    between_steps = budget / n_run_ckpt
    between_s = between_steps * step_s
    rank_s = float(np.mean([r["extract_s"] + r["geometry_s"] for r in rows]))
    eval_mean = float(np.mean([r["eval_s"] for r in rows]))
    print(f"eval time per checkpoint: {eval_mean:.4g}s")
    print(f"RankMe cost ratio: {rank_s / between_s:.4g}  (extract+geometry {rank_s:.4g}s per checkpoint / "
          f"training between checkpoints {between_s:.4g}s = {between_steps:.3g} steps "
          f"[{args.task}-{args.level} budget {budget} steps / {n_run_ckpt} checkpoints] x {step_s * 1e3:.3g} ms)")
    return {"tokens_per_s": tok_s, "mfu": mfu, "step_s": step_s, "peak_mem": peak_mem}


# the grid estimate ----------------------------------------------------------------------------------

def grid_shapes(params: Params, tasks, levels, batch_size: int | None = None) -> list[dict]:
    """One entry per (task, level): dataset sizes, context, batch and the step budget of params.yaml."""
    out = []
    for task in tasks:
        for level in levels:
            ds = params.dataset(task, level)
            meta = ds.meta()
            s = params.train_settings(task, level)
            n_ckpt = min(int(s["n_checkpoints"]), int(s["steps"]) + 1)
            n_eval = meta["n_test"] + min(int(s.get("eval_train_max", 4096)), meta["n_train"])
            probe = min(int(params.raw.get("extract", {}).get("probe_size", 512)), meta["n_test"])
            out.append({"task": task, "level": level, "ds": ds, "settings": s, "steps": int(s["steps"]),
                        "n_ckpt": n_ckpt, "context": meta["prompt_len"] + meta["answer_len"] - 1,
                        "batch": min(int(batch_size or s["batch_size"]), meta["n_train"]), "n_eval": n_eval, "probe": probe,
                        "vocab": meta["vocab_size"]})
    return out


def fits(preset: str, shapes: list[dict], device: torch.device, precision: str) -> None:
    """Stop (one line: the size and the estimate) when ``preset`` cannot train the largest of ``shapes``
    in the free memory of ``device`` (stages/training/memory.py, the check the train stage makes)."""
    for sh in sorted(shapes, key=lambda s: (s["context"] * s["batch"], s["vocab"]), reverse=True)[:1]:
        n_params, _, cfg = counted_model(preset, sh["vocab"], sh["context"])
        prec = precision if n_params >= AUTO_BF16_MIN_PARAMS or precision == "fp32" else "fp32"
        answer_len = sh["ds"].meta()["answer_len"]
        est = train_bytes(n_params, cfg.n_layer, cfg.d_model, cfg.n_head, sh["context"], sh["batch"], answer_len,
                          sh["vocab"], prec)
        check_fits(preset, est, device, sh["batch"], sh["context"],
                   what=f"training on {sh['task']}-{sh['level']} ({prec})")


def memory_estimate(n_params: int, n_layer: int, d_model: int, context: int, batch: int, vocab: int) -> float:
    """Rough bytes of one training run when not measured: fp32 weights, grads and AdamW moments (16 B per
    parameter) plus bf16 activations, ~34 * B*T*d bytes per layer (Korthikanti et al. 2022, flash
    attention: no T^2 term), plus fp32 logits and their gradient."""
    return 16 * n_params + 34 * batch * context * d_model * n_layer + 8 * batch * context * vocab


def counted_model(preset: str, vocab: int, context: int) -> tuple[int, int, object]:
    """(n_params, non-embedding params, config) of a preset, counted on the meta device (no memory, no init)."""
    cfg = model_config(preset, vocab, context)
    with torch.device("meta"):
        model = GPT(cfg)
    return model.num_params(), non_embedding_params(model), cfg


def assumed_cost(preset: str, sh: dict, target_peak: float) -> dict:
    n_params, n_non_emb, cfg = counted_model(preset, sh["vocab"], sh["context"])
    flops = train_flops_per_step(n_non_emb, cfg.n_layer, cfg.d_model, sh["context"], sh["batch"])
    return {"step_s": max(flops / (ASSUMED_MFU * target_peak), ASSUMED_FLOOR_MS / 1e3), "eval_per_ex": None,
            "mem": memory_estimate(n_params, cfg.n_layer, cfg.d_model, sh["context"], sh["batch"], sh["vocab"]),
            "n_non_emb": n_non_emb, "n_layer": cfg.n_layer, "d_model": cfg.d_model, "flops": flops,
            "mem_measured": False}


def burst_cost(preset: str, sh: dict, device: torch.device, precision: str, burst_steps: int,
               batch_size: int | None, eval_examples: int) -> dict:
    """Measured seconds per training step (2 warm-up steps, then ``burst_steps`` timed) and per
    evaluated example (``evaluate`` on up to ``eval_examples`` test examples), and peak memory."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    run = Run(preset, sh["ds"], sh["settings"], device, precision, batch_size=batch_size, total_steps=sh["steps"])
    cfg = run.cfg
    for i in range(2):
        run.step(i)
    _, secs = timed(device, lambda: [run.step(2 + i) for i in range(burst_steps)])
    n_ex = min(len(run.test_seq), eval_examples)
    probe = run.test_seq[:n_ex]
    evaluate(run.model, probe, run.prompt_len, 2048, precision)  # warm-up
    _, eval_secs = timed(device, lambda: evaluate(run.model, probe, run.prompt_len, 2048, precision))
    if device.type == "cuda":
        mem, measured_mem = torch.cuda.max_memory_allocated(device), True
    else:
        mem, measured_mem = memory_estimate(run.n_params, cfg.n_layer, cfg.d_model, run.context, run.batch,
                                            sh["vocab"]), False
    out = {"step_s": secs / burst_steps, "eval_per_ex": eval_secs / n_ex, "mem": mem, "n_non_emb": run.n_non_emb,
           "n_layer": cfg.n_layer, "d_model": cfg.d_model, "flops": run.flops_per_step, "mem_measured": measured_mem}
    del run, probe
    return out


def estimate(params: Params, device: torch.device, precision: str, peak: float | None,
             burst_steps: int, presets, tasks, levels, target_peak: float, n_seeds: int,
             batch_size: int | None = None, eval_examples: int = 2048) -> dict:
    """Device hours of every (task, level, preset) run and the packing of several runs per GPU.

    ``burst_steps > 0``: the time of a training step is measured (``burst_steps`` timed steps after 2
    warm-up ones) for every preset at every distinct (context, batch) of the grid, and the evaluation's
    time per example with ``evaluate``. ``burst_steps == 0``: FLOP counts only, converted at
    ``ASSUMED_MFU`` of ``target_peak`` with a floor of ``ASSUMED_FLOOR_MS`` per step."""
    shapes = grid_shapes(params, tasks, levels, batch_size)
    measured = burst_steps > 0
    where = (f"measured on {device.type} ({burst_steps} timed steps per preset and shape)" if measured else
             f"FLOP counts at assumed MFU {ASSUMED_MFU:.0%} of {target_peak / 1e12:.4g} TFLOP/s, "
             f"floor {ASSUMED_FLOOR_MS:g} ms per step, {ASSUMED_FLOOR_MS / 3:g} ms per eval batch")
    n_runs = len(shapes) * len(presets) * n_seeds
    print(f"estimate: {len(tasks)} tasks x {len(levels)} levels x {len(presets)} presets x {n_seeds} seed(s) "
          f"= {n_runs} runs; {where}")
    per_preset = {}
    for preset in presets:
        cost: dict[tuple, dict] = {}  # (context, batch) -> step seconds, eval seconds/example, memory, mfu
        tot = {"train_flops": 0.0, "eval_flops": 0.0, "train_s": 0.0, "eval_s": 0.0, "steps": 0, "mem": 0.0}
        for sh in shapes:
            key = (sh["context"], sh["batch"])
            if key not in cost:
                cost[key] = (burst_cost(preset, sh, device, precision, burst_steps, batch_size, eval_examples)
                             if measured else assumed_cost(preset, sh, target_peak))
            c = cost[key]
            fwd_ex = forward_flops(c["n_non_emb"], c["n_layer"], c["d_model"], sh["context"], 1)
            eval_flops = sh["n_ckpt"] * (sh["n_eval"] + sh["probe"]) * fwd_ex  # evaluate + extract forwards
            if measured:
                eval_s = sh["n_ckpt"] * (sh["n_eval"] + sh["probe"]) * c["eval_per_ex"]
            else:
                n_batches = math.ceil(sh["n_eval"] / 2048) + 1 + math.ceil(sh["probe"] / 512)
                eval_s = sh["n_ckpt"] * max((sh["n_eval"] + sh["probe"]) * fwd_ex / (ASSUMED_MFU * target_peak),
                                            n_batches * ASSUMED_FLOOR_MS / 3e3)
            tot["train_flops"] += n_seeds * sh["steps"] * c["flops"]
            tot["eval_flops"] += n_seeds * eval_flops
            tot["train_s"] += n_seeds * sh["steps"] * c["step_s"]
            tot["eval_s"] += n_seeds * eval_s
            tot["steps"] += n_seeds * sh["steps"]
            tot["mem"] = max(tot["mem"], c["mem"])
            tot["mem_measured"] = c["mem_measured"]
            n_weights = counted_model(preset, sh["vocab"], sh["context"])[0]
            tot["ckpt_bytes"] = tot.get("ckpt_bytes", 0) + n_seeds * sh["n_ckpt"] * 4 * n_weights
        hours = (tot["train_s"] + tot["eval_s"]) / 3600
        flops = tot["train_flops"] + tot["eval_flops"]
        # utilisation of the device while this preset's runs go one at a time (what packing can fill)
        util = flops / ((tot["train_s"] + tot["eval_s"]) * (peak if measured else target_peak)) \
            if (peak or not measured) else None
        tot.update(hours=hours, flops=flops, util=util)
        per_preset[preset] = tot
        print(f"estimate {preset}: {len(shapes) * n_seeds} runs  {tot['steps']:,} steps  "
              f"train {tot['train_flops'] / 1e15:.4g} PFLOP  eval+extract {tot['eval_flops'] / 1e15:.4g} PFLOP  "
              f"{hours:.3g} {'device' if measured and device.type == 'cpu' else 'GPU'}-hours  "
              f"(train {tot['train_s'] / 3600:.3g} h, eval {tot['eval_s'] / 3600:.3g} h)  "
              f"utilisation {fmt(util) if util is not None else 'unknown'}  "
              f"memory/run {gib(tot['mem'])}{'' if tot['mem_measured'] else ' (formula)'}")
    total_h = sum(p["hours"] for p in per_preset.values())
    total_f = sum(p["flops"] for p in per_preset.values())
    print(f"estimate total: {total_h:.4g} {'device' if measured and device.type == 'cpu' else 'GPU'}-hours "
          f"for {n_runs} runs, {total_f / 1e15:.4g} PFLOP of model FLOPs, one run at a time on one "
          f"{'GPU' if device.type == 'cuda' or not measured else 'CPU'}")
    ckpt = sum(p["ckpt_bytes"] for p in per_preset.values())
    by_preset = ", ".join(f"{name} {p['ckpt_bytes'] / 1e9:.0f} GB" for name, p in per_preset.items())
    print(f"checkpoint files: {ckpt / 1e12:.3g} TB of fp32 weights on disk ({by_preset}), and about 3x that "
          "written again as resume state (weights + AdamW moments) at every checkpoint; disk time and the "
          "CPU-side measure stage (probes) are not in the GPU hours")
    if measured and device.type == "cpu":
        print("packing: skipped (step times measured on cpu say nothing about sharing a GPU; "
              "run with --burst-steps 0 for the FLOP-count packing, or on a GPU)")
    else:
        packing(per_preset, device, measured, int(params.raw.get("runtime", {}).get("threads", 1) or 1))
    return {"per_preset": per_preset, "total_hours": total_h, "total_flops": total_f, "n_runs": n_runs}


def packing(per_preset: dict, device: torch.device, measured: bool, threads_per_run: int = 1) -> None:
    """Runs per GPU when ``python -m stages.cluster repro --workers K`` runs K stages at once on one GPU.

    Every worker's ``train`` stage uses ``device: auto``, i.e. the same GPU, so K workers share it.
    Assumption: the GPU time-slices the K processes and aggregate throughput grows with K until the sum
    of their utilisations reaches that of the best single run (the saturation level, the largest
    preset's utilisation); a preset packs ``k = min(floor(saturation / its utilisation),
    floor(usable memory / its peak memory), MAX_SHARE, CPU cores / runtime.threads)`` runs, and its wall
    time is its hours / k. With ``--workers K`` every preset runs ``min(K, k)`` at a time."""
    utils = [p["util"] for p in per_preset.values() if p["util"]]
    if not utils:
        print("packing: unknown (no utilisation without a device peak; pass --peak-tflops)")
        return
    saturation = max(max(utils), ASSUMED_MFU if not measured else 0.0)
    total_mem = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else 141e9
    cores = (os.cpu_count() or 1) if device.type == "cuda" else 16
    cap = max(1, min(MAX_SHARE, cores // threads_per_run))
    ks = {}
    for name, p in per_preset.items():
        k_util = max(1, int(saturation / p["util"])) if p["util"] else 1
        k_mem = max(1, int(USABLE_MEMORY * total_mem // max(p["mem"], 1)))
        ks[name] = min(k_util, k_mem, cap)
    print(f"packing: runs per GPU {', '.join(f'{n} {k}' for n, k in ks.items())}  (saturation at utilisation "
          f"{saturation:.3g}; memory {gib(total_mem)} x {USABLE_MEMORY}; cap {cap} = min({MAX_SHARE}, "
          f"{cores} cores / {threads_per_run} runtime.threads)"
          f"{'' if device.type == 'cuda' else ', for an H200 with 141 GB and 16 cores'})")
    packed = sum(p["hours"] / ks[n] for n, p in per_preset.items())
    serial = sum(p["hours"] for p in per_preset.values())
    print(f"packing wall time: {packed:.4g} h with each preset at its own k, vs {serial:.4g} h one run at a time")
    for workers in (1, 2, 4, 8):
        wall = sum(p["hours"] / min(workers, ks[n]) for n, p in per_preset.items())
        print(f"  python -m stages.cluster repro --workers {workers}: ~{wall:.4g} h on one GPU")


# main -----------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="benchmarks/gpu_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="p151m", help=f"model preset ({', '.join(PRESETS)}; default p151m)")
    p.add_argument("--task", default="mod", help="task of the training check (default mod; copy is a longer sequence)")
    p.add_argument("--level", default="hard", help="level (default hard)")
    p.add_argument("--steps", type=int, default=200, help="training steps of the check (default 200)")
    p.add_argument("--warmup-steps", type=int, default=5, help="first steps left out of the timing (default 5)")
    p.add_argument("--checkpoints", type=int, default=2, help="evenly spaced checkpoints incl. 0 and the end (default 2)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: train.defaults.batch_size)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--peak-tflops", type=float, default=None, help="peak TFLOP/s for MFU (overrides the table)")
    p.add_argument("--no-estimate", action="store_true", help="skip the full-grid estimate")
    p.add_argument("--burst-steps", type=int, default=None,
                   help="timed steps per preset and shape in the estimate (default 10 on cuda; 0 = FLOP counts "
                        "only at the stated assumptions, the default on cpu)")
    p.add_argument("--estimate-presets", default=None, help="comma list of presets to estimate (default: all)")
    p.add_argument("--target-tflops", type=float, default=None,
                   help="peak TFLOP/s the FLOP-count estimate converts at (default: this GPU's peak, else H200 989)")
    p.add_argument("--seeds", nargs="?", type=int, const=-1, default=None,
                   help="multiply the grid by seeds: alone = len(grid.seeds) of params.yaml, or a number")
    p.add_argument("--quick", action="store_true", help="tiny: p405k, a few steps, small batch, estimate on a subset")
    p.add_argument("--params", default=None, help="params file (default params.yaml)")
    return p


def run_main(argv=None) -> dict:
    args = parser().parse_args(argv)
    if args.quick:
        if not any(a.startswith("--preset") for a in (argv if argv is not None else sys.argv[1:])):
            args.preset = "p405k"
        args.steps = min(args.steps, 8)
        args.warmup_steps = min(args.warmup_steps, 2)
        args.batch = args.batch or 64
    choose(args.preset, PRESETS, "preset")
    choose(args.task, TASK_NAMES, "task")
    choose(args.level, LEVELS, "level")
    for name, value, low in (("--steps", args.steps, 1), ("--warmup-steps", args.warmup_steps, 0),
                             ("--checkpoints", args.checkpoints, 1), ("--batch", args.batch, 1),
                             ("--burst-steps", args.burst_steps, 0)):
        if value is not None and value < low:
            raise PipelineError(f"'{name}' must be at least {low}, got {value}")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        raise PipelineError(f"'--peak-tflops' must be positive, got {args.peak_tflops}")
    presets = list(PAPER_SIZES)  # the paper's six; the proxy p100k only when named
    if args.estimate_presets:
        presets = [choose(p.strip(), PRESETS, "preset") for p in args.estimate_presets.split(",") if p.strip()]
    elif args.quick:
        presets = ["p405k", "p3m"]
    device = resolve_device(args.device, "--device")
    params = Params(args.params)

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        precision = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
        peak, label = peak_from_name(name)
        if args.peak_tflops:
            peak, label = args.peak_tflops * 1e12, "--peak-tflops"
        mem = torch.cuda.get_device_properties(device).total_memory
        print(f"device: {name} ({device}, {gib(mem)}, {precision} autocast)")
    else:
        precision = "fp32"
        threads = torch.get_num_threads()
        if args.peak_tflops:
            peak, label = args.peak_tflops * 1e12, "--peak-tflops"
        else:
            peak = cpu_fp32_rate()
            label = f"measured fp32 rate of a 1024x1024 torch.mm on {threads} thread(s), not a GPU peak"
        print(f"device: cpu ({threads} torch thread(s), fp32; MFU is against the measured fp32 matmul rate "
              f"{peak / 1e9:.3g} GFLOP/s)")
    burst = args.burst_steps if args.burst_steps is not None else (2 if args.quick else
                                                                    (10 if device.type == "cuda" else 0))
    tasks, levels = (["mod", "copy"], ["easy", "hard"]) if args.quick else (list(TASK_NAMES), list(LEVELS))
    # Every preset this run will train must fit the device: one line naming the size and the estimate,
    # before any training (the check's preset on its cell; with a measured estimate, every preset on the
    # grid's longest context).
    fits(args.preset, [s for s in grid_shapes(params, [args.task], [args.level], args.batch)], device, precision)
    if not args.no_estimate and burst > 0:
        shapes = grid_shapes(params, tasks, levels, args.batch)
        for preset in presets:
            fits(preset, shapes, device, precision)
    result = {"check": check(args, params, device, precision, peak, label)}
    if not args.no_estimate:
        target = args.target_tflops * 1e12 if args.target_tflops else (
            peak if device.type == "cuda" and peak else H200_TFLOPS * 1e12)
        n_seeds = 1 if args.seeds is None else (len(params.seeds()) if args.seeds == -1 else args.seeds)
        if n_seeds < 1:
            raise PipelineError(f"'--seeds' must be positive, got {args.seeds}")
        clock = time.perf_counter()
        result["estimate"] = estimate(params, device, precision, peak, burst, presets, tasks, levels, target,
                                      n_seeds, batch_size=args.batch, eval_examples=256 if args.quick else 2048)
        print(f"estimate took {time.perf_counter() - clock:.1f}s")
    return result


def main(argv=None) -> int:
    try:
        run_main(argv)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
