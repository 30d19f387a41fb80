"""Cost of one run's pieces at each model size, as ratios to p405k, measured in one run.

    python benchmarks/scale_cost.py                                  # p100k, p405k, p3m on the grid's cells
    python benchmarks/scale_cost.py --models p405k,p3m --cells copy-hard,mod-hard --repeats 5
    python benchmarks/scale_cost.py --json /tmp/scale_cost.json      # also write the numbers (studies/scale/plan.py)

For every (task, level) cell (default: ``grid.tasks`` x ``grid.levels`` of params.yaml, i.e. the default
tasks' sequence lengths) and every model size, with the project's own functions and the settings of
params.yaml, on a freshly initialised model (seed 0):

* ``step``: one training update (``stages.training.loop.update``: forward, backward, clip, fused AdamW)
  on a ``train`` batch of ``train.defaults.batch_size`` rows of the cell's training set;
* ``ckpt``: what ``train`` does at each checkpoint: ``evaluate`` on the whole test split and on
  ``eval_train_max`` train rows, ``save_state`` and ``save_resume`` (to a temporary directory);
* ``extract``: ``load_model`` of that checkpoint and the stage's ``hidden_at`` on the probe set
  (``extract.probe_size`` test rows);
* ``measure``: ``stages.measures.rankme.geometry`` on every layer's states and the linear probe
  (``probe_accuracy``) per layer, as the ``measure`` stage does per checkpoint;
* ``landscape``: ``stages.pipeline.landscape.measure_checkpoint`` with the ``landscape`` section (all four
  measures), per checkpoint.

Each is the median of ``--repeats`` calls after one warm-up call (the first call of torch.func and of
scikit-learn is slower). Seconds are CPU seconds of this process (``time.process_time``) on
``--threads`` torch threads (default 1: CPU seconds are then what the work costs on an idle core even
on a busy machine); wall seconds are printed beside them, with ``uptime``'s load before and after.
The run's projection: ``steps x step + n_checkpoints x (ckpt + extract + measure)`` and, apart,
``landscape x max_checkpoints`` (the stage measures at most that many checkpoints per run).
Sizes: ``p100k`` is a proxy below p405k, NOT one of the paper's sizes (stages/models/presets.py).

A study's cost from measured numbers (docs/scale.md), without measuring again:

    python benchmarks/scale_cost.py --plan studies/scale --from-json /tmp/a.json,/tmp/b.json

sums, over every run of the study's grid (its params.yaml; the landscape runs of its dvc.yaml), the
measured pieces of that run's cell and size at the study's own ``steps`` and ``n_checkpoints``, plus
one stage process start (measured: CPU seconds of a child importing a stage) and ``--dvc-s`` of DVC
bookkeeping per stage; a cell or size missing from the JSON files is named, not guessed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from stages.config import load_typed_params  # noqa: E402
from stages.pipeline.extract import hidden_at  # noqa: E402
from stages.pipeline.generate import generate  # noqa: E402
from stages.io.checkpoints import load_model, save_state, step_file  # noqa: E402
from stages.pipeline.landscape import measure_checkpoint  # noqa: E402
from stages.measures.probes import probe_accuracy, split_mask  # noqa: E402
from stages.measures.rankme import geometry  # noqa: E402
from stages.models import GPT, model_config  # noqa: E402
from stages.models.presets import PROXY_SIZES  # noqa: E402
from stages.numerics import in_effect  # noqa: E402
from stages.runtime import pin_threads  # noqa: E402
from stages.pipeline.train import resolve_train_params  # noqa: E402
from stages.training.loop import evaluate, make_optimizer, save_resume, sequences, update  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_cost import timed  # noqa: E402  medians of CPU and wall seconds after a warm-up call

PIECES = ("step", "ckpt", "extract", "measure", "landscape")
REFERENCE = "p405k"


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "uptime unavailable"


def cell_costs(task: str, level: str, model_name: str, params, repeats: int, skip: set[str]) -> dict:
    """Seconds (CPU, wall) of each piece for one cell and size; see the module docstring."""
    ds = generate(task, level, params)
    prompt_len = ds.train_prompt.shape[1]
    hp = resolve_train_params(params, task, level)
    train_seq = sequences(ds.train_prompt, ds.train_answer, "cpu")
    test_seq = sequences(ds.test_prompt, ds.test_answer, "cpu")
    torch.manual_seed(0)
    cfg = model_config(model_name, ds.vocab_size, prompt_len + ds.train_answer.shape[1] - 1)
    model = GPT(cfg)
    opt = make_optimizer(model, hp.lr, hp.weight_decay, hp.betas)
    rng = np.random.default_rng(0)
    batch = train_seq[torch.as_tensor(rng.choice(len(train_seq), size=min(hp.batch_size, len(train_seq)),
                                                 replace=False))]
    out = {"task": task, "level": level, "model": model_name, "n_params": model.num_params(),
           "context": int(train_seq.shape[1] - 1), "steps": hp.steps, "n_checkpoints": min(hp.n_checkpoints, hp.steps + 1)}
    times = {}
    times["step"] = timed(lambda: update(model, opt, batch, prompt_len, hp.grad_clip), max(repeats, 3))
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        eval_train = train_seq[:hp.eval_train_max]

        def checkpoint():
            evaluate(model, test_seq, prompt_len, hp.eval_batch_size)
            evaluate(model, eval_train, prompt_len, hp.eval_batch_size)
            save_state(model, step_file(tmp, 1))
            save_resume(tmp, model, opt, [], 1, torch.device("cpu"))

        times["ckpt"] = timed(checkpoint, repeats)
        out["checkpoint_bytes"] = step_file(tmp, 1).stat().st_size
        out["resume_bytes"] = sum(p.stat().st_size for p in tmp.glob("resume-*.safetensors"))
        manifest = {"model": cfg.to_dict(), "steps": [1]}
        ex = params.extract
        probe = test_seq[:ex.probe_size]
        positions = [prompt_len - 1]

        def extract():
            loaded = load_model(tmp, 1, manifest, "cpu")
            return hidden_at(loaded, probe, positions, ex.batch_size)

        times["extract"] = timed(extract, repeats)
        states = extract()  # [L+1, n, d]
        out["hidden_bytes"] = int(states.nbytes)
    labels = probe[:, prompt_len].numpy()
    mask = split_mask(np.arange(len(labels)), params.measures.probe.train_fraction)
    pc = params.measures.probe

    def measure():
        geometry(torch.as_tensor(states))
        for layer in states:
            probe_accuracy(layer, labels, mask, pc.C, pc.max_iter)

    times["measure"] = timed(measure, repeats)
    if "landscape" not in skip:
        lp = params.landscape
        order = np.random.default_rng(lp.seed).permutation(len(train_seq))
        seq = train_seq[torch.as_tensor(order)]
        data = {"grad": seq[:lp.grad.samples], "hessian": seq[:lp.hessian.samples], "llc": seq[:lp.llc.samples]}
        times["landscape"] = timed(lambda: measure_checkpoint(model, data, prompt_len, lp), max(1, repeats - 1))
    out["cpu_s"] = {k: v[0] for k, v in times.items()}
    out["wall_s"] = {k: v[1] for k, v in times.items()}
    c = out["cpu_s"]
    out["run_cpu_s"] = (out["steps"] * c["step"] + out["n_checkpoints"] * (c["ckpt"] + c["extract"] + c["measure"]))
    if "landscape" in c:
        out["landscape_run_cpu_s"] = c["landscape"] * params.landscape.max_checkpoints
    return out


def process_start_cpu_s() -> float:
    """CPU seconds of a fresh interpreter importing a stage module (what every DVC stage pays first)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import stages.pipeline.landscape, stages.pipeline.train"], check=True,
                   cwd=Path(__file__).resolve().parents[1])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def plan(study: Path, files: list[str], dvc_s: float) -> int:
    """Print the study's estimated CPU seconds per size and in total, from measured rows (JSON)."""
    import itertools

    import yaml

    rows = {}
    for f in files:
        for r in json.loads(Path(f).read_text())["rows"]:
            rows[(r["task"], r["level"], r["model"])] = r  # later files win
    params = load_typed_params(study / "params.yaml")
    stages_ = yaml.safe_load((study / "dvc.yaml").read_text())["stages"]
    g = params.grid

    def listed(value, fallback):
        return fallback if isinstance(value, str) else value  # "${grid.x}": the grid's list

    lm = stages_.get("landscape", {}).get("matrix", {})
    land = set(itertools.product(listed(lm.get("task"), g.tasks), listed(lm.get("level"), g.levels),
                                 listed(lm.get("model"), g.models), listed(lm.get("seed"), g.seeds))) if lm else set()
    start = process_start_cpu_s()
    per_model: dict[str, float] = {}
    pieces = {"train steps": 0.0, "checkpoints (eval+save, extract, measure)": 0.0, "landscape": 0.0,
              "process starts + DVC": 0.0}
    missing = set()
    n_runs = n_stages = 0
    for task, level, model, seed in itertools.product(g.tasks, g.levels, g.models, g.seeds):
        r = rows.get((task, level, model))
        if r is None:
            missing.add(f"{task}-{level}-{model}")
            continue
        hp = params.train.resolve(task, level)
        c = r["cpu_s"]
        n_ckpt = min(hp.n_checkpoints, hp.steps + 1)
        cost = {"train steps": hp.steps * c["step"],
                "checkpoints (eval+save, extract, measure)": n_ckpt * (c["ckpt"] + c["extract"] + c["measure"])}
        stages_run = 3
        if (task, level, model, seed) in land:
            if "landscape" not in c:
                missing.add(f"{task}-{level}-{model} (landscape)")
            else:
                cost["landscape"] = min(params.landscape.max_checkpoints or n_ckpt, n_ckpt) * c["landscape"]
            stages_run += 1
        cost["process starts + DVC"] = stages_run * (start + dvc_s)
        n_runs, n_stages = n_runs + 1, n_stages + stages_run
        for k, v in cost.items():
            pieces[k] += v
        per_model[model] = per_model.get(model, 0.0) + sum(cost.values())
    if missing:
        print(f"not measured (add them with --cells/--models): {', '.join(sorted(missing))}")
        return 1
    extra = (len(g.tasks) * len(g.levels) + 1) * (start + dvc_s)  # generate stages and events
    pieces["process starts + DVC"] += extra
    total = sum(pieces.values())
    print(f"study {study}: {n_runs} runs ({len(g.tasks)} tasks x {len(g.levels)} levels x {len(g.models)} sizes x "
          f"{len(g.seeds)} seeds), {n_stages} run stages, {len(land)} landscape runs; process start {start:.2f} CPU s "
          f"+ DVC {dvc_s:.1f} s per stage")
    for m, v in per_model.items():
        print(f"  {m:>6}: {v:8.0f} CPU s ({100 * v / total:.0f}%)")
    for k, v in pieces.items():
        print(f"  {k}: {v:.0f} CPU s")
    print(f"total {total:.0f} CPU s (events stage not included): {total / 3600:.2f} h on 1 idle core, "
          f"{total / 7200:.2f} h on 2 idle cores with 2 stage processes at a time")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="p100k,p405k,p3m", help="comma-separated presets")
    parser.add_argument("--cells", default=None, help="comma-separated <task>-<level> (default: grid.tasks x grid.levels)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--no-landscape", action="store_true")
    parser.add_argument("--params", default=None)
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    parser.add_argument("--plan", default=None, help="a study folder: estimate its cost from --from-json, measure nothing")
    parser.add_argument("--from-json", default="", help="comma-separated JSON files of earlier runs (--json)")
    parser.add_argument("--dvc-s", type=float, default=1.0, help="DVC's CPU seconds per stage in --plan (default 1)")
    args = parser.parse_args(argv)
    if args.plan:
        return plan(Path(args.plan), [f for f in args.from_json.split(",") if f], args.dvc_s)
    params = load_typed_params(args.params)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.cells:
        cells = [tuple(c.strip().rsplit("-", 1)) for c in args.cells.split(",") if c.strip()]
    else:
        cells = [(t, l) for t in params.grid.tasks for l in params.grid.levels]
    pin_threads(args.threads)
    load_before = uptime()
    print(f"uptime before: {load_before}")
    print(f"CPU paths: ANATOMY_CPU_PATHS={os.environ.get('ANATOMY_CPU_PATHS', '(unset)')}, in effect {in_effect()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {args.repeats} repeats, medians "
          "after a warm-up call; CPU seconds (wall in brackets)")
    proxies = [m for m in models if m in PROXY_SIZES]
    if proxies:
        print(f"{', '.join(proxies)}: proxy size(s) below p405k, NOT among the paper's sizes")
    rows = []
    skip = {"landscape"} if args.no_landscape else set()
    for task, level in cells:
        for m in models:
            row = cell_costs(task, level, m, params, args.repeats, skip)
            rows.append(row)
            c, w = row["cpu_s"], row["wall_s"]
            print(f"{task}-{level} {m:>6} ({row['n_params']:>9,} params, context {row['context']:>2}): "
                  + "  ".join(f"{k} {c[k]:.4g} ({w[k]:.3g})" for k in PIECES if k in c), flush=True)
    print("\nratios to p405k (CPU seconds; same cell):")
    print(f"{'cell':<12} {'model':>6} " + " ".join(f"{k:>10}" for k in PIECES) + f" {'run':>10}")
    ref = {(r["task"], r["level"]): r for r in rows if r["model"] == REFERENCE}
    ratios: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        base = ref.get((r["task"], r["level"]))
        if base is None:
            continue
        parts = {k: r["cpu_s"][k] / base["cpu_s"][k] for k in PIECES if k in r["cpu_s"]}
        parts["run"] = r["run_cpu_s"] / base["run_cpu_s"]
        r["ratio_to_p405k"] = parts
        for k, v in parts.items():
            ratios.setdefault(r["model"], {}).setdefault(k, []).append(v)
        print(f"{r['task'] + '-' + r['level']:<12} {r['model']:>6} "
              + " ".join(f"{parts.get(k, float('nan')):>10.3g}" for k in (*PIECES, "run")))
    print("\ngeometric mean over cells:")
    for m, parts in ratios.items():
        print(f"{m:>6}: " + "  ".join(f"{k} {float(np.exp(np.mean(np.log(v)))):.3g}x" for k, v in parts.items()))
    print("\nprojected CPU seconds per run (1 thread): steps x step + checkpoints x (ckpt + extract + measure);"
          " landscape x max_checkpoints apart")
    for r in rows:
        land = r.get("landscape_run_cpu_s")
        print(f"{r['task'] + '-' + r['level']:<12} {r['model']:>6}: {r['steps']:>5} steps, {r['n_checkpoints']} ckpts: "
              f"{r['run_cpu_s']:8.1f} s" + (f"   landscape {land:8.1f} s" if land is not None else "")
              + f"   checkpoint {r['checkpoint_bytes'] / 1e6:.2f} MB, hidden {r['hidden_bytes'] / 1e6:.2f} MB per step")
    load_after = uptime()
    print(f"uptime after: {load_after}")
    if args.json:
        Path(args.json).write_text(json.dumps({"uptime_before": load_before, "uptime_after": load_after,
                                               "threads": args.threads, "repeats": args.repeats,
                                               "cpu_paths": in_effect(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
