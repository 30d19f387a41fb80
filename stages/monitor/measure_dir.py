"""Measure every checkpoint of any causal LM that transformers loads, once or while a job writes them.

    rankme-monitor PATH [PATH ...] [--watch] [--probe FILE] [--out DIR] ...
    rankme-monitor --hub ORG/NAME [--cache-dir DIR] [--revisions step0,step512]
    rankme-monitor data/checkpoints/<run> [--dataset DIR] [--probe-size N]

(``rankme-monitor`` is the console entry point; ``python -m stages.monitor.measure_dir`` is the same.)
PATH is a folder of checkpoints (the Trainer's ``checkpoint-N``, or ``stepN`` folders), or one
checkpoint folder; several PATHs are measured as one run. One of this project's run folders
(``data/checkpoints/<run>``: ``step_XXXXXXX.safetensors`` + ``manifest.json``) is measured as stages
``extract`` and ``measure`` do: the first ``--probe-size`` (512) test examples of the run's task at the
first answer position, ``test_acc`` the exact-match accuracy on the whole test split; the dataset
comes from ``--dataset``, else ``data/datasets/<task>-<level>``, else is generated in memory from
``--params``/params.yaml. ``--hub`` measures the ``stepN`` revisions
of a repository already in the huggingface_hub cache (offline). Weights load with safetensors only
(``use_safetensors=True``; no remote code). The tokenizer comes from ``--tokenizer``, else the
checkpoint, else its parent folder.

Probe set: by default the Pythia evaluation sets (``--evals``, default ``data/pythia/evals.parquet``;
generated in memory from params.yaml's ``pythia.evals`` when that file is missing): the first
``--per-set`` items of each set with a context form the probe set (as in stage ``pythia_measure``),
and ``test_acc`` is the chance-corrected accuracy averaged over the eight sets. ``--probe FILE``: the
user's texts, one example per line; then there is no labelled evaluation and ``test_acc`` and
``probe_acc`` are NaN (events need no accuracy: the precursor warns at every recovery). A probe set
of fewer than 2 examples is an error; fewer examples than the hidden size is a warning (RankMe of
``n`` states is at most ``n``, so the measure saturates).

Writes under ``--out`` (default ``monitor``), for run ``--run`` (default: the folder's name):

* ``hidden/<run>.parquet``: the last-token hidden state of every layer, one row group per checkpoint
  (schema of stages/io/hidden.py); committed when the command ends;
* ``measures/<run>.csv``: run, step, layer, rankme, rankme_centred, mean_dominance, varies,
  probe_acc, test_acc, n_params, dim (as stage ``measure``), rewritten after every checkpoint;
* ``trajectories/<run>.csv``: the plot table (stages/analysis/trajectories.py);
* ``events/<run>.csv`` and ``events/<run>-layers.csv``: the offline events of the run as stage
  ``events`` computes them (rules from ``params.yaml: events`` when present);
  ``events/<run>-online.csv``: the events the online monitor reported, with the step of the
  checkpoint at which each was reported.

A rerun continues: checkpoints already in the outputs (same probe set) are not measured again
(``--fresh`` starts over).

``--watch``: keep polling (``--poll`` seconds) for new checkpoints as a running job writes them. A
checkpoint is measured only when complete (config.json, safetensors weights, and the Trainer's
``trainer_state.json`` for ``checkpoint-N`` folders) and its files have not changed for ``--settle``
seconds; one that still fails to load is retried at later polls (``--retries`` times) rather than
read half-written. The watcher exits cleanly, outputs written, when ``--until-file`` appears (after
measuring what is complete by then) or on SIGINT/SIGTERM (after the checkpoint in hand).
Bad input (no checkpoints, an unloadable checkpoint, too small a probe set) is one line naming the
path, exit status 2.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch

from stages.analysis.event_rules import Rules
from stages.analysis.runs import run_events
from stages.analysis.trajectories import trajectory
from stages.config import get, load_params, load_typed_params, name_argument
from stages.errors import PipelineError, main_guard
from stages.io.hidden import schema, step_table
from stages.io.tables import write_csv
from stages.measures.probes import probe_accuracy, split_mask
from stages.measures.rankme import geometry
from stages.monitor.checkpoints import (STEP_NAME, Checkpoint, Stability, completeness, discover, hub_checkpoints,
                                       is_project_run)
from stages.monitor.core import RankMeMonitor
from stages.monitor.rules import event_rules as rules_of

PROBE_TRAIN_FRACTION, PROBE_C, PROBE_MAX_ITER = 0.5, 10.0, 50  # params.yaml: measures.probe
DEFAULT_PER_SET, DEFAULT_N_PER_SET = 32, 64                    # params.yaml: pythia.probe_per_set, evals.n_per_set
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class LoadFailure(Exception):
    """A checkpoint that could not be loaded (yet): retried while watching, an error otherwise."""


def say(message: str) -> None:
    print(message, flush=True)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


# ---- probe set -----------------------------------------------------------------------------------
@dataclass
class TaskProbe:
    """This project's probe for its own run folders: the first ``probe_size`` test examples of the
    run's task (as stage ``extract``), read at the first answer position; ``test_seq`` every test
    example, for the exact-match ``test_acc`` (as stage ``train``'s history)."""
    probe_seq: torch.Tensor
    test_seq: torch.Tensor
    prompt_len: int


@dataclass
class Probe:
    contexts: list[str]
    labels: np.ndarray          # answer code per example (-1: unlabelled)
    items: pd.DataFrame | None  # every evaluation item, for test_acc (None: no labelled evaluation)
    source: str
    task: TaskProbe | None = None

    @property
    def labelled(self) -> bool:
        return bool((self.labels >= 0).all())

    @property
    def fingerprint(self) -> str:
        if self.task is not None:
            return hashlib.sha1(self.task.probe_seq.cpu().numpy().tobytes()).hexdigest()
        return hashlib.sha1("\n".join(self.contexts).encode()).hexdigest()


def load_task_probe(args, params_path: Path | None, run_dir: Path) -> Probe:
    """The probe of one of this project's run folders: its task's test split from ``--dataset``, else
    ``data/datasets/<task>-<level>`` (run from the project root), else generated in memory from the
    params file's ``tasks``/``datasets`` (as stage ``generate``)."""
    from stages.config import load_typed_params
    from stages.io.checkpoints import read_manifest
    from stages.io.datasets import load_split
    from stages.paths import dataset_dir
    from stages.tasks import build_dataset
    from stages.training.loop import sequences

    manifest = read_manifest(run_dir)
    task, level = manifest.get("task"), manifest.get("level")
    if not isinstance(task, str) or not isinstance(level, str):
        raise PipelineError(f"checkpoint manifest {run_dir / 'manifest.json'}: no 'task' and 'level' to build the "
                            "probe set from")
    where = Path(args.dataset) if args.dataset is not None else dataset_dir(task, level)
    if (where / "test.parquet").is_file():
        prompt, answer, meta = load_split(where, "test")
        prompt_len, source = int(meta["prompt_len"]), str(where)
    elif args.dataset is not None:
        raise PipelineError(f"missing dataset: {where / 'test.parquet'} (--dataset names a folder written by "
                            "stage generate)")
    else:
        path = params_path if params_path is not None else Path("params.yaml")
        if not path.is_file():
            raise PipelineError(f"{run_dir}: no dataset {where} and no {path} to generate it from (pass --dataset DIR "
                                "or --params FILE)")
        params = load_typed_params(path)
        ds = build_dataset(task, level, params.tasks.knobs(task, level), params.datasets.seed,
                           params.datasets.n_train, params.datasets.n_test)
        prompt, answer, prompt_len = ds.test_prompt, ds.test_answer, ds.test_prompt.shape[1]
        source = f"{task}-{level} test split (generated from {path})"
        warn(f"{where} not found: generated the {task}-{level} dataset in memory from {path}")
    size = args.probe_size if args.probe_size is not None else 512
    if size > len(prompt):
        raise PipelineError(f"'--probe-size' = {size} exceeds the {len(prompt)} test examples of {source}")
    seq = sequences(prompt, answer, "cpu")
    return Probe([], answer[:size, 0].astype(np.int32), None, source,
                 task=TaskProbe(seq[:size], seq, prompt_len))


def load_probe(args, params: dict) -> Probe:
    from stages.pythia import evalsets
    from stages.pythia.paths import EVALS_FILE
    from stages.pythia.probe_set import probe_set

    if args.probe is not None:
        try:
            lines = [line.strip() for line in Path(args.probe).read_text(encoding="utf-8").splitlines()]
        except (OSError, UnicodeDecodeError) as exc:
            raise PipelineError(f"cannot read probe file {args.probe} ({exc.__class__.__name__})") from None
        contexts = [line for line in lines if line]
        probe = Probe(contexts, np.full(len(contexts), -1, dtype=np.int32), None, str(args.probe))
    else:
        evals = Path(args.evals) if args.evals is not None else EVALS_FILE
        if evals.is_file():
            items, source = evalsets.read(evals), str(evals)
        elif args.evals is None:
            n = get(params, "pythia.evals.n_per_set", DEFAULT_N_PER_SET)
            seed = get(params, "pythia.evals.seed", 0)
            items, source = evalsets.generate(int(n), int(seed)), f"Pythia evaluation sets (generated: {n} per set)"
            warn(f"{evals} not found: generated the evaluation sets in memory ({n} per set, seed {seed})")
        else:
            raise PipelineError(f"missing evaluation sets file: {evals}")
        per_set = args.per_set if args.per_set is not None else get(params, "pythia.probe_per_set", DEFAULT_PER_SET)
        if isinstance(per_set, bool) or not isinstance(per_set, int) or per_set < 1:
            raise PipelineError(f"'--per-set' must be a positive integer, got {per_set!r}")
        chosen = probe_set(items, int(per_set))
        probe = Probe(list(chosen["context"]), chosen["label"].to_numpy(np.int32),
                      None if args.no_accuracy else items, source)
    if len(probe.contexts) < 2:
        raise PipelineError(f"probe set {probe.source}: {len(probe.contexts)} example(s); RankMe needs at least 2 "
                            "(one example per line)")
    return probe


# ---- measuring -----------------------------------------------------------------------------------
class Measurer:
    """Measures checkpoints one at a time and keeps the run's outputs up to date."""

    def __init__(self, run: str, probe: Probe, out: Path, device, batch_size: int, rules: Rules,
                 tokenizer: Path | None = None, fresh: bool = False, quiet: bool = False):
        self.run, self.probe, self.device, self.batch_size, self.rules = run, probe, device, batch_size, rules
        self.tokenizer_path, self.quiet = tokenizer, quiet
        self.monitor = RankMeMonitor(rules=rules)
        self.rows: list[dict] = []
        self.done: set[int] = set()
        self.hidden = out / "hidden" / f"{run}.parquet"
        self.measures = out / "measures" / f"{run}.csv"
        self.trajectory = out / "trajectories" / f"{run}.csv"
        self.events = out / "events" / f"{run}.csv"
        self.layer_events = out / "events" / f"{run}-layers.csv"
        self.online = out / "events" / f"{run}-online.csv"
        self._tmp = self.hidden.with_name(f".{self.hidden.name}.partial-{os.getpid()}")
        self._writer = None
        self._schema = None
        self._tokenizer = None
        self._warned_small = False
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one line per checkpoint, not a bar per loaded file
        if not fresh:
            self._resume()

    # -- resume ------------------------------------------------------------------------------------
    def _resume(self) -> None:
        if not (self.measures.is_file() and self.hidden.is_file()):
            return
        from stages.io.hidden import hidden_manifest
        from stages.io.measure_tables import read_measures

        manifest = hidden_manifest(self.hidden)
        if manifest.get("probe_fingerprint") != self.probe.fingerprint:
            raise PipelineError(f"{self.hidden} was measured with another probe set; pass --fresh to start over "
                                "(or another --out / --run)")
        frame = read_measures(self.measures)
        old = pq.ParquetFile(self.hidden)
        groups = {}
        for i in range(old.num_row_groups):
            steps = old.read_row_group(i, columns=["step"]).column("step").to_numpy()
            if len(steps):
                groups[int(steps[0])] = i
        keep = sorted(set(groups) & set(int(s) for s in frame["step"].unique()))
        if not keep:
            return
        self._schema = old.schema_arrow
        self._tmp.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self._tmp, self._schema)
        for step in keep:
            self._writer.write_table(old.read_row_group(groups[step]))
        frame = frame[frame["step"].isin(keep)].sort_values(["step", "layer"])
        frame["varies"] = frame["varies"].astype(str).str.lower().isin(["true", "1"])
        self.rows = frame.to_dict("records")
        for step, g in frame.groupby("step", sort=True):
            acc = float(g["test_acc"].iloc[0])
            self.monitor.update_geometry(int(step), self._geo(g.to_dict("records")), acc if math.isfinite(acc) else None)
            self.done.add(int(step))
        say(f"{self.run}: continuing after {len(keep)} checkpoint(s) already measured in {self.measures}")

    @staticmethod
    def _geo(rows: list[dict]) -> dict:
        return {int(r["layer"]): {"rankme": r["rankme"], "rankme_centred": r["rankme_centred"],
                                  "mean_dominance": r["mean_dominance"], "varies": bool(r["varies"])} for r in rows}

    # -- loading -----------------------------------------------------------------------------------
    def _load_tokenizer(self, ck: Checkpoint):
        if self._tokenizer is not None:
            return self._tokenizer
        from transformers import AutoTokenizer

        candidates = [self.tokenizer_path] if self.tokenizer_path is not None else [ck.path, ck.path.parent]
        for where in candidates:
            if where is not None and any((Path(where) / f).is_file() for f in TOKENIZER_FILES):
                try:
                    self._tokenizer = AutoTokenizer.from_pretrained(where)
                except Exception as exc:  # noqa: BLE001 -- half-written files raise anything
                    raise LoadFailure(f"tokenizer in {where}: {' '.join(str(exc).split())[:200]}") from None
                return self._tokenizer
        if self.tokenizer_path is not None:
            raise PipelineError(f"no tokenizer files in --tokenizer {self.tokenizer_path}")
        raise PipelineError(f"checkpoint {ck.name}: no tokenizer in it or in {ck.path.parent}; pass --tokenizer DIR")

    def _load(self, ck: Checkpoint):
        from transformers import AutoModelForCausalLM

        ok, why = completeness(ck)
        if not ok:
            raise LoadFailure(why)
        tokenizer = self._load_tokenizer(ck)
        try:
            model = AutoModelForCausalLM.from_pretrained(ck.path, use_safetensors=True, trust_remote_code=False)
        except Exception as exc:  # noqa: BLE001 -- a truncated safetensors file raises SafetensorError, OSError, ...
            raise LoadFailure(' '.join(str(exc).split())[:300] or exc.__class__.__name__) from None
        return model.to(self.device).eval(), tokenizer

    # -- one checkpoint ----------------------------------------------------------------------------
    def _read_lm(self, ck: Checkpoint):
        """(hidden states [L+1, n, d], test_acc, n_params, probed positions) of a transformers checkpoint."""
        from stages.pythia import scoring
        from stages.pythia.probe_set import chance_corrected

        model, tokenizer = self._load(ck)
        n_params = sum(p.numel() for p in model.parameters())
        test_acc = float("nan")
        if self.probe.items is not None:
            items = self.probe.items
            correct = scoring.accuracy(items, scoring.choice_loglik(model, tokenizer, items, self.batch_size,
                                                                    self.device))
            chance = pd.Series(scoring.chance(items)).groupby(items["eval_set"].values).mean()
            by_set = pd.Series(correct).groupby(items["eval_set"].values).mean()
            test_acc = float(chance_corrected(by_set, chance[by_set.index]).mean())
        try:
            states = scoring.last_token_states(model, tokenizer, self.probe.contexts, self.batch_size, self.device)
        except (AttributeError, TypeError) as exc:  # no hidden_states in the output, or not a sequence of them
            raise PipelineError(f"checkpoint {ck.name}: {type(model).__name__} gave no hidden states (expected a causal "
                                f"LM that returns hidden_states with output_hidden_states=True; {exc})") from None
        positions = np.asarray([len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in self.probe.contexts])
        return states, test_acc, n_params, positions

    @torch.no_grad()
    def _read_project(self, ck: Checkpoint):
        """The same for one of this project's step files: hidden states at the first answer position (as
        stage extract) and the exact-match test accuracy (as stage train)."""
        from stages.io.checkpoints import load_model, read_manifest
        from stages.training.loop import evaluate

        task = self.probe.task
        if task is None:
            raise PipelineError(f"checkpoint {ck.name}: a project step file among transformers checkpoints; measure "
                                "its run folder on its own")
        try:
            model = load_model(ck.path.parent, ck.step, read_manifest(ck.path.parent, verify=True), self.device)
        except PipelineError as exc:
            raise LoadFailure(str(exc)) from None
        test_acc = float(evaluate(model, task.test_seq.to(self.device), task.prompt_len, self.batch_size)[1])
        chunks = []
        for start in range(0, len(task.probe_seq), self.batch_size):
            _, hidden = model(task.probe_seq[start:start + self.batch_size, :-1].to(self.device), hidden_states=True)
            chunks.append(torch.stack([h[:, task.prompt_len - 1] for h in hidden]).float().cpu())
        states = torch.cat(chunks, dim=1).numpy()
        positions = np.full(states.shape[1], task.prompt_len - 1)
        return states, test_acc, model.num_params(), positions

    def measure(self, ck: Checkpoint) -> None:
        step = ck.step
        states, test_acc, n_params, positions = self._read_project(ck) if ck.project else self._read_lm(ck)
        bad = ~np.isfinite(states).all(axis=(1, 2))
        if bad.any():
            raise PipelineError(f"checkpoint {ck.name}: hidden states of layer {int(np.argmax(bad))} hold NaN or inf")
        n, d = states.shape[1], states.shape[2]
        if n < d and not self._warned_small:
            self._warned_small = True
            warn(f"probe set {self.probe.source}: {n} examples for hidden size {d}; RankMe of a layer is at most "
                 f"{n} (< {d}), so it saturates: use at least {d} examples for the full range")
        geo = geometry(torch.as_tensor(states), device=self.device)
        mask = split_mask(np.arange(n), PROBE_TRAIN_FRACTION)
        if self._writer is None:
            manifest = {"run": self.run, "source": str(ck.path.parent), "probe": self.probe.source,
                        "probe_fingerprint": self.probe.fingerprint, "n_params": n_params}
            self._schema = schema(d, {"run": self.run, "manifest": json.dumps(manifest)})
            self._tmp.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp, self._schema)
        self._writer.write_table(step_table(step, states, np.arange(n), positions, self.probe.labels, self._schema))
        rows = []
        for layer in range(len(states)):
            probe_acc = float("nan")
            if self.probe.labelled:
                try:
                    probe_acc = probe_accuracy(states[layer], self.probe.labels, mask, PROBE_C, PROBE_MAX_ITER)
                except ValueError:
                    pass
            rows.append({"run": self.run, "step": step, "layer": layer,
                         **{k: v[layer].item() for k, v in geo.items()},
                         "probe_acc": probe_acc, "test_acc": test_acc, "n_params": n_params, "dim": d})
        self.rows.extend(rows)
        self.done.add(step)
        tracked = self.monitor.chosen_layer
        if self.monitor.steps and step <= self.monitor.steps[-1]:
            warn(f"{ck.name}: step {step} arrived after step {self.monitor.steps[-1]}: measured, but left out of the "
                 "online events (the offline events table includes it)")
            new = []
        else:
            new = self.monitor.update_geometry(step, self._geo(rows), test_acc if math.isfinite(test_acc) else None)
            tracked = self.monitor.chosen_layer
        if not self.quiet:
            value = next((r[self.monitor.measure] for r in rows if r["layer"] == tracked), float("nan"))
            say(f"{ck.name}: step {step}  test_acc {test_acc:.3f}  {self.monitor.measure} "
                f"(layer {tracked}) {value:.2f}")
            for e in new:
                say(f"  {e.message}")
        self.write_tables()

    # -- outputs -----------------------------------------------------------------------------------
    def write_tables(self) -> None:
        if not self.rows:
            return
        frame = pd.DataFrame(self.rows).sort_values(["step", "layer"]).reset_index(drop=True)
        write_csv(frame, self.measures)
        write_csv(trajectory(frame), self.trajectory)
        measures, layers = run_events(frame, self.rules, "last")
        write_csv(pd.DataFrame([{"run": self.run, **m} for m in measures]), self.events)
        write_csv(pd.DataFrame([{"run": self.run, **m} for m in layers]), self.layer_events)
        write_csv(pd.DataFrame([{"run": self.run, **e.to_dict()} for e in self.monitor.events],
                               columns=["run", *ONLINE_COLUMNS]), self.online)

    def close(self) -> None:
        """Commit the hidden-state Parquet (what was measured so far) and the tables."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            os.replace(self._tmp, self.hidden)
        self.write_tables()


ONLINE_COLUMNS = ["kind", "step", "reported_at", "measure", "layer", "peak_step", "collapse_step", "floor_step",
                  "recovery_step", "peak", "floor", "accuracy", "revises", "message"]


# ---- the two modes -------------------------------------------------------------------------------
def measure_once(sources, measurer: Measurer, stop: threading.Event, describe: str) -> bool:
    """Measure every complete checkpoint; ``False`` when interrupted."""
    cks = sources()
    if not cks:
        raise PipelineError(f"no checkpoints in {describe} (expected checkpoint-N or stepN folders, a folder "
                            "with config.json, or one of this project's run folders: step_*.safetensors with "
                            "manifest.json)")
    ready = []
    for ck in cks:
        ok, why = completeness(ck)
        if ok:
            ready.append(ck)
        else:
            warn(f"{ck.name}: incomplete ({why}); left out")
    if not ready:
        raise PipelineError(f"no complete checkpoints in {describe}")
    for ck in ready:
        if ck.step in measurer.done:
            continue
        if stop.is_set():
            return False
        try:
            measurer.measure(ck)
        except LoadFailure as exc:
            raise PipelineError(f"checkpoint {ck.name}: cannot load ({exc})") from None
    return True


def watch(sources, measurer: Measurer, stop: threading.Event, poll: float, settle: float, until_file: Path | None,
          retries: int, clock=time.monotonic) -> str:
    """Measure checkpoints as they appear; returns ``"done"`` (sentinel) or ``"interrupted"``."""
    stability = Stability(settle)
    failures: dict[Path, int] = {}
    sentinel_since = None
    grace = max(settle, poll) * (retries + 2)
    while True:
        if sentinel_since is None and until_file is not None and until_file.exists():
            sentinel_since = clock()
            say(f"{until_file} appeared: measuring what is complete, then stopping")
        waiting = []
        for ck in sources():
            if ck.step in measurer.done:
                continue
            if stop.is_set():
                return "interrupted"
            ok, why = completeness(ck)
            if not ok or not stability.stable(ck, clock()):
                waiting.append((ck, why or "files still changing"))
                continue
            try:
                measurer.measure(ck)
                failures.pop(ck.path, None)
            except LoadFailure as exc:
                failures[ck.path] = failures.get(ck.path, 0) + 1
                if failures[ck.path] > retries:
                    raise PipelineError(f"checkpoint {ck.name}: cannot load after {retries} retries ({exc})") from None
                warn(f"{ck.name}: cannot load yet ({exc}); retry {failures[ck.path]} of {retries} at a later poll")
                stability.reset(ck, clock())
                waiting.append((ck, str(exc)))
        if stop.is_set():
            return "interrupted"
        if sentinel_since is not None and (not waiting or clock() - sentinel_since > grace):
            for ck, why in waiting:
                warn(f"{ck.name}: incomplete when {until_file} appeared ({why}); left out")
            return "done"
        stop.wait(poll)


# ---- command line --------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rankme-monitor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", type=Path, help="checkpoint folder(s), or folder(s) of checkpoints")
    p.add_argument("--hub", metavar="REPO_ID", help="measure the stepN revisions of this repo in the HF cache")
    p.add_argument("--cache-dir", type=Path, help="huggingface_hub cache (default: HF_HUB_CACHE)")
    p.add_argument("--revisions", help="comma-separated stepN revisions (default: every stepN cached)")
    p.add_argument("--probe", type=Path, help="probe texts, one example per line (default: evaluation sets)")
    p.add_argument("--evals", type=Path, help="evaluation sets Parquet (default: data/pythia/evals.parquet)")
    p.add_argument("--per-set", type=int, help="probe items per evaluation set (default: pythia.probe_per_set)")
    p.add_argument("--dataset", type=Path, help="this project's run folders: the task's dataset folder "
                   "(default: data/datasets/<task>-<level>, else generated from --params/params.yaml)")
    p.add_argument("--probe-size", type=int, help="this project's run folders: probe examples (default 512, as "
                   "extract.probe_size)")
    p.add_argument("--no-accuracy", action="store_true", help="skip scoring the evaluation sets (test_acc NaN)")
    p.add_argument("--tokenizer", type=Path, help="tokenizer folder (default: the checkpoint's, or its parent's)")
    p.add_argument("--out", type=Path, default=Path("monitor"), help="output folder (default: monitor)")
    p.add_argument("--run", help="run name in the outputs (default: the checkpoints' folder name)")
    p.add_argument("--params", type=Path, help="params file for the event rules (default: params.yaml if present)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--fresh", action="store_true", help="ignore outputs of an earlier run and start over")
    p.add_argument("--watch", action="store_true", help="keep measuring new checkpoints as they are written")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between polls (--watch)")
    p.add_argument("--settle", type=float, default=5.0, help="seconds a checkpoint's files must stay unchanged (--watch)")
    p.add_argument("--until-file", type=Path, help="stop watching once this file exists")
    p.add_argument("--retries", type=int, default=3, help="retries of a checkpoint that fails to load (--watch)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if not args.paths and not args.hub:
        p.error("give checkpoint PATH(s) or --hub REPO_ID")
    if args.paths and args.hub:
        p.error("give either checkpoint PATH(s) or --hub, not both")
    for key in ("batch_size", "retries"):
        if getattr(args, key) < (1 if key == "batch_size" else 0):
            p.error(f"--{key.replace('_', '-')} must be {'positive' if key == 'batch_size' else 'non-negative'}")
    if args.poll <= 0 or args.settle < 0:
        p.error("--poll must be positive and --settle non-negative")
    return args


def event_rules(path: Path | None) -> Rules:
    """``params.yaml: events`` (validated as stage ``events`` does), or the defaults."""
    if path is None:
        path = Path("params.yaml")
        if not path.is_file():
            return Rules()
    return rules_of(path)


def run_name(args) -> str:
    """``--run``, else the repo (``org--name``), else the folder holding the checkpoints."""
    if args.run is not None:
        return name_argument(args.run, "--run")
    if args.hub:
        name = args.hub.replace("/", "--")
    else:
        resolved = [p.resolve() for p in args.paths]
        if len(resolved) > 1:
            name = Path(os.path.commonpath(resolved)).name
        else:
            path = resolved[0]
            is_checkpoint = STEP_NAME.match(path.name) or (path / "config.json").is_file()
            name = path.parent.name if is_checkpoint else path.name
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name).lstrip(".-") or "run"
    return name_argument(safe, "--run")


def main_run(args, stop: threading.Event) -> int:
    from stages.training.device import resolve_device

    if args.threads:
        torch.set_num_threads(args.threads)
    rules = event_rules(args.params)
    params = load_params(args.params) if args.params else (load_params("params.yaml") if Path("params.yaml").is_file()
                                                           else {})
    project = [p for p in args.paths if p.is_dir() and is_project_run(p)]
    if project and len(args.paths) > 1:
        raise PipelineError(f"{project[0]} is one of this project's run folders: measure it on its own")
    probe = load_task_probe(args, args.params, project[0]) if project else load_probe(args, params)
    device = resolve_device(args.device, "--device")
    if args.hub:
        revisions = [r.strip() for r in args.revisions.split(",")] if args.revisions else None
        describe = f"the huggingface_hub cache for {args.hub}" + (f" ({args.cache_dir})" if args.cache_dir else "")
        sources = lambda: hub_checkpoints(args.hub, args.cache_dir, revisions)  # noqa: E731
    else:
        describe = ", ".join(str(p) for p in args.paths)
        if not args.watch:
            for p in args.paths:
                if not p.is_dir():
                    raise PipelineError(f"missing checkpoint folder: {p}")
        sources = lambda: discover(args.paths)  # noqa: E731
    run = run_name(args)
    measurer = Measurer(run, probe, args.out, device, args.batch_size, rules, args.tokenizer, args.fresh, args.quiet)
    try:
        if args.watch:
            if not args.hub and not all(p.is_dir() for p in args.paths):
                say(f"waiting for {describe} to appear")
            result = watch(sources, measurer, stop, args.poll, args.settle, args.until_file, args.retries)
            code = 0
            if result == "interrupted":
                say("interrupted: outputs written for the checkpoints measured")
        else:
            code = 0 if measure_once(sources, measurer, stop, describe) else 130
            if code:
                say("interrupted: outputs written for the checkpoints measured")
    finally:
        measurer.close()
    if measurer.rows:
        say(f"{len(measurer.done)} checkpoint(s) of {run}: {measurer.measures}")
    return code


@main_guard
def main(argv=None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    previous = {}

    def handler(signum, frame):
        stop.set()
        for sig, old in previous.items():  # a second signal acts at once
            signal.signal(sig, old)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    try:
        code = main_run(args, stop)
    finally:
        for sig, old in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, old)
    return code


if __name__ == "__main__":
    sys.exit(main())
