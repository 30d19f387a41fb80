"""The DVC stage graph and its stale part, from ``dvc dag --dot`` and ``dvc status --json``.

Only DVC's public CLI output is read. Edges point from an upstream stage to the stage that
depends on it. A stage is stale when ``dvc status`` reports it or when any stage upstream of it
is stale (DVC's status compares each stage with dvc.lock and may list only the first of a chain).
"""
from __future__ import annotations

import heapq
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from stages.errors import PipelineError

_NODE = re.compile(r'^\s*"((?:[^"\\]|\\.)+)"\s*;?\s*$')
_EDGE = re.compile(r'^\s*"((?:[^"\\]|\\.)+)"\s*->\s*"((?:[^"\\]|\\.)+)"\s*;?\s*$')


PIPELINE = "dvc.yaml"  # the pipeline file in the root a command runs in (DVC's default target for repro)


def dvc_command(*args: str) -> list[str]:
    """``dvc ARGS`` run by this interpreter, so the workers use the venv's DVC."""
    return [sys.executable, "-m", "dvc", *args]


def dvc_env() -> dict:
    """The environment for DVC and the stage commands: this interpreter's bin dir first on PATH,
    so the ``python`` in dvc.yaml's commands is the one running this program."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_dvc(root: str | os.PathLike, *args: str) -> str:
    """stdout of ``dvc ARGS`` in ``root``; a failure names the command and DVC's message."""
    proc = subprocess.run(dvc_command(*args), cwd=root, env=dvc_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise PipelineError(f"'dvc {' '.join(args)}' failed in {root}: {' | '.join(tail)}")
    return proc.stdout


def parse_dot(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Nodes (in the order DVC prints them, i.e. dvc.yaml order) and (upstream, downstream) edges."""
    nodes: list[str] = []
    edges: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        if name not in seen:
            seen.add(name)
            nodes.append(name)

    for line in text.splitlines():
        if m := _EDGE.match(line):
            up, down = (g.replace('\\"', '"') for g in m.groups())
            add(up)
            add(down)
            edges.append((up, down))
        elif m := _NODE.match(line):
            add(m.group(1).replace('\\"', '"'))
    return nodes, edges


def parse_status(text: str, ignore_always_changed: bool = False) -> set[str]:
    """Stage names that ``dvc status --json`` reports as changed ({} when everything is up to date).

    With ``ignore_always_changed``, stages reported only as ``always changed`` (``always_changed:
    true`` in dvc.yaml: DVC lists them after every run) are left out."""
    start = text.find("{")
    if start < 0:
        raise PipelineError(f"unexpected 'dvc status --json' output: {text.strip()[:200]!r}")
    try:
        data = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise PipelineError(f"unexpected 'dvc status --json' output ({exc})") from None
    if ignore_always_changed:
        return {k for k, v in data.items() if v != ["always changed"]}
    return set(data)


@dataclass
class Plan:
    """Stale stages in a serial order (upstream first) with their stale upstream stages."""

    order: list[str]
    upstream: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.order)

    def describe(self, chains: bool = True) -> str:
        """One line per task: the stage(s) one ``dvc repro`` runs and the tasks it waits for."""
        lines = []
        for i, (group, after) in enumerate(task_graph(self, chains), 1):
            wait = f"  (after {', '.join(str(j + 1) for j in after)})" if after else ""
            lines.append(f"{i:3d}. {' -> '.join(group)}{wait}")
        return "\n".join(lines)


def chains(plan: Plan) -> list[list[str]]:
    """Partition the plan into chains, each run by one ``dvc repro --single-item S1 S2 ...``.

    A stage joins a chain when each of its upstream stages is in the chain or already finished
    before the chain starts (upstream of its first stage), and every other stage waiting on the
    chain depends on it anyway. So merging never delays a stage; it only saves DVC start-ups
    (about a second of CPU each). For the default grid each run's generate -> train -> extract
    -> measure becomes one chain and the runs stay parallel.
    """
    children: dict[str, list[str]] = {s: [] for s in plan.order}
    for s in plan.order:
        for u in plan.upstream[s]:
            children[u].append(s)
    below: dict[str, set[str]] = {}
    for s in reversed(plan.order):
        below[s] = set().union(*([{c} | below[c] for c in children[s]] or [set()]))
    above: dict[str, set[str]] = {}
    for s in plan.order:
        above[s] = set().union(*([{u} | above[u] for u in plan.upstream[s]] or [set()]))
    taken: set[str] = set()
    groups = []
    for head in plan.order:
        if head in taken:
            continue
        group, members = [head], {head}
        while True:
            outside = {c for m in group for c in children[m] if c not in members}
            ready = [c for c in outside if set(plan.upstream[c]) <= members | above[head]]
            if len(ready) != 1 or not all(c == ready[0] or c in below[ready[0]] for c in outside):
                break
            group.append(ready[0])
            members.add(ready[0])
        taken |= members
        groups.append(group)
    return groups


def task_graph(plan: Plan, chains_on: bool = True) -> list[tuple[list[str], list[int]]]:
    """(stages of the task, indices of the tasks it waits for), upstream tasks first."""
    groups = chains(plan) if chains_on else [[s] for s in plan.order]
    where = {s: i for i, g in enumerate(groups) for s in g}
    out = []
    for i, g in enumerate(groups):
        after = sorted({where[u] for s in g for u in plan.upstream[s]} - {i})
        out.append((g, after))
    return out


def build_plan(nodes: list[str], edges: list[tuple[str, str]], stale: set[str],
               targets: list[str] | None = None) -> Plan:
    """Stale stages plus everything downstream of them, limited to ``targets`` and their ancestors,
    ordered topologically; ties keep dvc.yaml order, as a serial ``dvc repro`` does."""
    index = {n: i for i, n in enumerate(nodes)}
    for s in stale:
        if s not in index:  # e.g. a .dvc file with no edges that dvc dag still lists; keep it
            index[s] = len(nodes)
            nodes = [*nodes, s]
    children: dict[str, list[str]] = {n: [] for n in nodes}
    parents: dict[str, list[str]] = {n: [] for n in nodes}
    for up, down in edges:
        children[up].append(down)
        parents[down].append(up)

    todo = set(_closure(stale, children))
    if targets:
        for t in targets:
            if t not in index:
                raise PipelineError(f"unknown stage '{t}' (not in 'dvc dag'; try 'dvc stage list')")
        todo &= _closure(set(targets), parents)

    upstream = {s: sorted((p for p in parents[s] if p in todo), key=index.__getitem__) for s in todo}
    waiting = {s: len(upstream[s]) for s in todo}
    ready = [(index[s], s) for s in todo if waiting[s] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, s = heapq.heappop(ready)
        order.append(s)
        for c in children[s]:
            if c in waiting:
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(ready, (index[c], c))
    if len(order) != len(todo):
        raise PipelineError(f"the DVC DAG has a cycle among: {', '.join(sorted(todo - set(order)))}")
    return Plan(order, {s: upstream[s] for s in order})


def _closure(start: set[str], step: dict[str, list[str]]) -> set[str]:
    seen, stack = set(start), list(start)
    while stack:
        for nxt in step.get(stack.pop(), []):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def read_plan(root: str | os.PathLike = ".", targets: list[str] | None = None) -> Plan:
    """The plan for the pipeline ``root/dvc.yaml``, from ``dvc dag --dot`` and ``dvc status --json``.
    Both name ``dvc.yaml`` explicitly: without a target DVC lists every pipeline of the repository
    (a study's folder, studies/*/dvc.yaml, too), where ``dvc repro`` runs only the one in ``root``."""
    nodes, edges = parse_dot(run_dvc(root, "dag", "--dot", PIPELINE))
    stale = parse_status(run_dvc(root, "status", "--json", PIPELINE))
    return build_plan(nodes, edges, stale, targets)
