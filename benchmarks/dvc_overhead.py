"""What DVC's bookkeeping costs per stage: a ``dvc repro`` timed as a whole and per stage command.

    python benchmarks/dvc_overhead.py [--cwd DIR] [--json FILE] -- dvc repro [ARGS ...]

Runs the given command (normally a serial ``dvc repro``) in ``--cwd`` with a ``sitecustomize``
module on ``PYTHONPATH`` that records, for every Python process started as a pipeline stage
(``python -m stages.pipeline.<name>``), when it started and when it exited. The stage commands'
own time (interpreter start, imports and work) is the sum of those intervals; everything else in
the command's wall time is DVC: its start-up, reading ``dvc.yaml``, ``params.yaml`` and
``dvc.lock``, hashing dependencies and outputs, and rewriting ``dvc.lock`` after each stage.

Prints the wall time, the stage commands' time per kind of stage, and DVC's share: in total and
per stage that ran; then where DVC spent it: its start-up (before the first stage) and, per kind of
stage, the median time between a stage's exit and the next stage's start (recording the stage: hashing
and caching its outputs, rewriting dvc.lock; then checking the next). Meaningful for a serial
``dvc repro`` (one stage at a time); the command's own output goes to ``--log`` (default: discarded).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Loaded by every Python process of the command (site imports sitecustomize from PYTHONPATH).
SITECUSTOMIZE = '''
import atexit, json, os, sys, time
_argv = getattr(sys, "orig_argv", sys.argv)
if "-m" in _argv and any(a.startswith("stages.pipeline.") for a in _argv):
    _start = time.time()
    _name = next(a for a in _argv if a.startswith("stages.pipeline.")).rsplit(".", 1)[1]

    def _record():
        with open(os.environ["DVC_OVERHEAD_LOG"], "a") as f:
            f.write(json.dumps({"stage": os.environ.get("DVC_STAGE", _name), "kind": _name,
                                "start": _start, "end": time.time()}) + "\\n")
    atexit.register(_record)
'''


def run(command: list[str], cwd: Path, log: str | None) -> tuple[float, list[dict], float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        records = Path(tmp) / "stages.jsonl"
        env = {**os.environ, "DVC_OVERHEAD_LOG": str(records),
               "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))}
        out = open(log, "w") if log else subprocess.DEVNULL
        try:
            clock, began = time.perf_counter(), time.time()
            proc = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
            wall, ended = time.perf_counter() - clock, time.time()
        finally:
            if log:
                out.close()
        if proc.returncode != 0:
            sys.exit(f"error: {' '.join(command)} exited {proc.returncode}" + (f" (log: {log})" if log else ""))
        rows = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    return wall, rows, began, ended


def dvc_gaps(rows: list[dict], began: float, ended: float) -> tuple[float, dict[str, list[float]]]:
    """DVC's time before the first stage, and per kind of stage the times from each stage's exit to the
    next stage's start (or the command's end), for a serial run."""
    rows = sorted(rows, key=lambda r: r["start"])
    after = collections.defaultdict(list)
    for r, nxt in zip(rows, rows[1:] + [{"start": ended}]):
        after[r["kind"]].append(nxt["start"] - r["end"])
    return (rows[0]["start"] - began if rows else ended - began), dict(after)


def report(wall: float, rows: list[dict], began: float | None = None, ended: float | None = None) -> dict:
    per_kind = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        per_kind[r["kind"]][0] += 1
        per_kind[r["kind"]][1] += r["end"] - r["start"]
    commands = sum(s for _, s in per_kind.values())
    n = len(rows)
    dvc = wall - commands
    print(f"wall {wall:.1f} s; {n} stage command(s) {commands:.1f} s; DVC {dvc:.1f} s "
          f"({dvc / wall:.1%} of the wall time)" + (f", {dvc / n:.2f} s per stage" if n else ""))
    startup, after = dvc_gaps(rows, began, ended) if began is not None else (None, {})
    if startup is not None:
        print(f"DVC before the first stage: {startup:.1f} s")
    print("| stage | runs | command seconds | DVC after one (median s) |\n|---|---|---|---|")
    for kind, (count, seconds) in sorted(per_kind.items(), key=lambda kv: -kv[1][1]):
        gap = f"{statistics.median(after[kind]):.2f}" if after.get(kind) else "-"
        print(f"| {kind} | {count} | {seconds:.1f} | {gap} |")
    return {"wall_s": wall, "stages": n, "commands_s": commands, "dvc_s": dvc,
            "dvc_per_stage_s": dvc / n if n else None, "dvc_startup_s": startup, "dvc_after_s": after,
            "per_kind": {k: {"runs": c, "seconds": s} for k, (c, s) in per_kind.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cwd", type=Path, default=Path.cwd(), help="the workspace (default: here)")
    ap.add_argument("--log", help="write the command's output here")
    ap.add_argument("--json", help="write the numbers here as JSON")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command after --, e.g. dvc repro")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to time after --, e.g. -- dvc repro")
    result = report(*run(command, args.cwd, args.log))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
