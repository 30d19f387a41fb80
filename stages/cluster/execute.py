"""Run a :class:`~stages.cluster.dag.Plan` on Dask: one task per stage (or per chain of stages,
see :func:`~stages.cluster.dag.chains`), each starting as soon as its upstream tasks finished.

Each task runs ``dvc --wait-for-lock repro --single-item STAGE [STAGE ...]`` in the shared
workspace. DVC
holds its repository lock only while it checks and records a stage; it releases the lock while
the stage's command runs (``dvc.stage.run``: ``unlocked_repo(cmd_run)``), guarding the stage's own
deps/outs with its per-path rwlock instead. So stages with disjoint outputs really run at the same
time, ``--wait-for-lock`` queues the short bookkeeping sections, and every dvc.lock entry is
written by DVC itself exactly as in a serial ``dvc repro``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from stages.cluster.dag import Plan, dvc_command, dvc_env, task_graph
from stages.errors import PipelineError

TAIL_LINES = 20


class StageFailed(Exception):
    """A stage's ``dvc repro`` exited non-zero; carries the stage name and its output tail."""

    def __init__(self, stage: str, message: str):
        super().__init__(stage, message)
        self.stage = stage
        self.message = message

    def __str__(self) -> str:
        return self.message


def repro_stages(stages: list[str], root: str) -> dict:
    """Worker task: reproduce ``stages`` in this order in the workspace ``root`` with one
    ``dvc repro --single-item``; raise :class:`StageFailed` naming them, with DVC's output tail."""
    clock = time.perf_counter()
    proc = subprocess.run(dvc_command("--wait-for-lock", "repro", "--single-item", *stages), cwd=root,
                          env=dvc_env(), capture_output=True, text=True)
    seconds = time.perf_counter() - clock
    label = " -> ".join(stages)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-TAIL_LINES:])
        which = "stage" if len(stages) == 1 else "chain"
        raise StageFailed(label, f"{which} '{label}' failed (exit {proc.returncode}) after {seconds:.1f}s:\n{tail}")
    return {"stages": list(stages), "seconds": seconds, "host": os.uname().nodename, "pid": os.getpid()}


@dataclass
class Outcome:
    done: list[dict]
    failed: dict[str, str]   # stage -> message
    skipped: dict[str, str]  # stage -> failed upstream stage

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped


def execute(plan: Plan, client, root: str | os.PathLike, progress=print, chains: bool = True) -> Outcome:
    """Submit every task with its upstream futures as dependencies and wait for all of them.

    A failing stage does not stop independent branches (their finished work is recorded in
    dvc.lock); its downstream stages are skipped. Returns what happened; see :func:`raise_for`.
    """
    import cloudpickle
    from distributed import as_completed

    from stages.cluster import dag as dag_module

    # Ship this code to the workers by value: workers started elsewhere (--scheduler, SLURM) need
    # only Python with DVC and dask, not this package on their import path.
    for module in (dag_module, sys.modules[__name__]):
        cloudpickle.register_pickle_by_value(module)
    root = str(Path(root).resolve())
    token = uuid.uuid4().hex[:8]
    futures, labels = [], {}
    for group, after in task_graph(plan, chains):
        ups = [futures[j] for j in after]
        # Upstream futures as extra arguments: Dask starts the task only after they succeed.
        future = client.submit(_after, group, root, *ups, key=f"dvc-repro-{group[0]}-{token}", pure=False)
        futures.append(future)
        labels[future.key] = " -> ".join(group)
    done, failed, skipped = [], {}, {}
    total, finished = len(plan.order), 0
    for future in as_completed(futures):
        stage = labels[future.key]
        if future.status == "finished":
            info = future.result()
            done.append(info)
            finished += len(info["stages"])
            progress(f"[{finished}/{total}] {stage} done in {info['seconds']:.1f}s on {info['host']}")
            continue
        exc = future.exception()
        culprit = getattr(exc, "stage", None)
        if culprit is not None and culprit != stage:
            skipped[stage] = culprit
            progress(f"skipped {stage} (upstream '{culprit}' failed)")
        else:
            failed[stage] = str(exc) if culprit else f"stage '{stage}' failed: {exc!r}"
            progress(f"FAILED {stage}")
    return Outcome(done, failed, skipped)


def _after(stages: list[str], root: str, *upstream_results) -> dict:
    return repro_stages(stages, root)


def raise_for(outcome: Outcome) -> None:
    """One error naming every failed stage (with its output tail) and the stages skipped because of it."""
    if outcome.ok:
        return
    parts = [msg for msg in outcome.failed.values()]
    if outcome.skipped:
        parts.append(f"skipped {len(outcome.skipped)} downstream stage(s): {', '.join(sorted(outcome.skipped))}")
    raise PipelineError("\n".join(parts))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
