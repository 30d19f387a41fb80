"""``python -m stages.cluster repro``: reproduce the stale DVC stages on a Dask cluster.

    python -m stages.cluster repro                         # LocalCluster, 2 workers
    python -m stages.cluster repro --workers 4 events      # only what 'events' needs
    python -m stages.cluster repro --scheduler tcp://host:8786
    python -m stages.cluster repro --slurm --queue gpu --cores 8 --memory 32GB --jobs 6 \\
        --job-extra=--gres=gpu:1
    python -m stages.cluster repro --dry-run               # print the plan in order

Stages run as ``dvc --wait-for-lock repro --single-item STAGE`` in this workspace; afterwards
``dvc status`` is clean and dvc.lock is the one a serial ``dvc repro`` writes.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from stages.cluster.backends import ClusterSpec, open_client
from stages.cluster.dag import PIPELINE, parse_status, read_plan, run_dvc
from stages.cluster.execute import execute, log, raise_for
from stages.cluster.lockorder import lock_keys, restore_serial_order
from stages.errors import PipelineError, main_guard


def repro(root: str | Path, spec: ClusterSpec, targets: list[str] | None = None, dry_run: bool = False,
          progress=log, chains: bool = True) -> int:
    """Run the plan; return the number of stages run. Raises PipelineError on failure."""
    root = Path(root).resolve()
    if not (root / "dvc.yaml").is_file():
        raise PipelineError(f"missing file: {root / 'dvc.yaml'} (run from the repository root or pass --root)")
    refuse_ignored(root)
    from stages.config import load_typed_params

    load_typed_params(root / "params.yaml")  # a bad params.yaml in one line, before DVC's own messages
    plan = read_plan(root, targets)
    if dry_run:
        print(plan.describe(chains) if len(plan) else "nothing to reproduce: every stage is up to date")
        return 0
    if not len(plan):
        progress("nothing to reproduce: every stage is up to date")
        return 0
    spec.validate()
    before = lock_keys(root)
    clock = time.perf_counter()
    progress(f"reproducing {len(plan)} stage(s) on {_where(spec)}")
    with open_client(spec) as client:
        outcome = execute(plan, client, root, progress, chains)
    try:
        if restore_serial_order(root, before, plan.order):
            progress("dvc.lock: new entries put in pipeline order")
    except Exception as exc:  # cosmetic: the entries are DVC's own and valid in any order
        progress(f"warning: dvc.lock entries left in completion order ({exc})")
    raise_for(outcome)
    left = parse_status(run_dvc(root, "status", "--json", *(targets or [PIPELINE])), ignore_always_changed=True)
    if left:
        raise PipelineError(f"'dvc status' still lists stage(s) after the run: {', '.join(sorted(left))}")
    progress(f"{len(plan)} stage(s) reproduced in {time.perf_counter() - clock:.1f}s; dvc status is clean")
    return len(plan)


def refuse_ignored(root: Path) -> None:
    """A pipeline folder that the repository's .dvcignore hides from DVC (the paper study, until a user
    opts in) stops here in one line that says which line to delete, before DVC's own message."""
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo

    try:
        repo = Repo(str(root))
    except NotDvcRepoError:
        raise PipelineError(f"not a DVC repository: {root} (run from a clone of the project, or `dvc init` first)") from None
    with repo:
        if repo.dvcignore.is_ignored(repo.fs, str(root / "dvc.yaml")):
            relative = root.relative_to(repo.root_dir).as_posix()
            raise PipelineError(f"{relative}/dvc.yaml is dvc-ignored: delete the line '/{relative}/' from "
                                f"{Path(repo.root_dir) / '.dvcignore'} to run it (docs/scale.md section 4)")


def _where(spec: ClusterSpec) -> str:
    if spec.scheduler:
        return f"scheduler {spec.scheduler}"
    if spec.slurm:
        return f"SLURM ({spec.jobs or spec.workers} job(s), queue {spec.queue or 'default'})"
    return f"a LocalCluster with {spec.workers} worker(s)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m stages.cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("repro", help="reproduce stale stages on a Dask cluster")
    r.add_argument("targets", nargs="*", help="stages to bring up to date (default: the whole DAG)")
    r.add_argument("--root", default=".", help="repository root (default: current directory)")
    r.add_argument("--workers", type=int, default=2, help="local workers, or SLURM jobs without --jobs")
    r.add_argument("--dry-run", action="store_true", help="print the plan in order and exit")
    r.add_argument("--no-chains", action="store_true",
                   help="one dvc process per stage (default: a chain such as train -> extract -> measure "
                        "of one run shares one, when that delays nothing)")
    where = r.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS", help="use a running dask scheduler")
    where.add_argument("--slurm", action="store_true", help="start workers as SLURM jobs (dask-jobqueue)")
    r.add_argument("--queue", help="SLURM partition")
    r.add_argument("--cores", type=int, default=1, help="cores per SLURM job")
    r.add_argument("--memory", default="4GB", help="memory per SLURM job")
    r.add_argument("--jobs", type=int, help="SLURM jobs (one worker each)")
    r.add_argument("--walltime", help="SLURM walltime, e.g. 04:00:00")
    r.add_argument("--dashboard", default="127.0.0.1:0", metavar="ADDRESS",
                   help="address of the Dask dashboard (default: localhost, a free port; ':8787' listens on "
                        "every interface, without authentication)")
    r.add_argument("--job-extra", action="append", default=[], metavar="DIRECTIVE",
                   help="extra #SBATCH directive, repeatable (e.g. --job-extra=--gres=gpu:1)")
    return p


@main_guard
def main(argv=None) -> None:
    args = parser().parse_args(argv)
    spec = ClusterSpec(workers=args.workers, scheduler=args.scheduler, slurm=args.slurm, queue=args.queue,
                       cores=args.cores, memory=args.memory, jobs=args.jobs, walltime=args.walltime,
                       job_extra=args.job_extra, dashboard=args.dashboard)
    spec.validate()
    repro(args.root, spec, args.targets or None, args.dry_run, chains=not args.no_chains)


if __name__ == "__main__":
    sys.exit(main())
