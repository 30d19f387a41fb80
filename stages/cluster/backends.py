"""The Dask cluster to run on: a LocalCluster (default), an external scheduler, or SLURM.

Workers only launch ``dvc repro`` subprocesses in the shared workspace, so one thread per worker
is enough and local workers are threads of this process (``processes=False``: no start-up cost).
On SLURM every job is one worker; the workspace (and DVC cache) must be on a shared filesystem,
with ``dvc config core.hardlink_lock true`` when that filesystem is NFS.

HTTP servers (the scheduler's dashboard, each worker's status/metrics server) listen on localhost
only (:data:`LOCAL_HTTP`), since they have no authentication; ``--dashboard ADDRESS`` (e.g.
``:8787``, all interfaces) opens the scheduler's dashboard wider when the user asks for it.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from stages.errors import PipelineError

LOCAL_HTTP = "127.0.0.1:0"  # localhost, any free port


@dataclass
class ClusterSpec:
    workers: int = 2
    scheduler: str | None = None       # address of a running dask scheduler
    slurm: bool = False
    queue: str | None = None
    cores: int = 1
    memory: str = "4GB"
    jobs: int | None = None            # SLURM jobs (one worker each); default: workers
    walltime: str | None = None
    job_extra: list[str] = field(default_factory=list)  # extra #SBATCH lines, e.g. --gres=gpu:1
    dashboard: str = "127.0.0.1:0"     # the scheduler dashboard's address: localhost unless asked otherwise

    def validate(self) -> None:
        if self.scheduler and self.slurm:
            raise PipelineError("choose one of --scheduler and --slurm")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise PipelineError(f"'--workers' must be a positive integer, got {self.workers!r}")
        if self.jobs is not None and self.jobs < 1:
            raise PipelineError(f"'--jobs' must be a positive integer, got {self.jobs!r}")
        if self.cores < 1:
            raise PipelineError(f"'--cores' must be a positive integer, got {self.cores!r}")


@contextmanager
def open_client(spec: ClusterSpec):
    """A ``distributed.Client`` on the requested cluster, closed (and the cluster shut) on exit."""
    spec.validate()
    from distributed import Client, LocalCluster

    if spec.scheduler:
        try:
            client = Client(spec.scheduler, timeout="30s")
        except OSError as exc:
            raise PipelineError(f"cannot reach dask scheduler '--scheduler {spec.scheduler}' ({exc})") from None
        with client:
            yield client
        return
    if spec.slurm:
        cluster = _slurm_cluster(spec)
        cluster.scale(jobs=spec.jobs or spec.workers)
    else:
        cluster = LocalCluster(n_workers=spec.workers, threads_per_worker=1, processes=False,
                               dashboard_address=spec.dashboard, worker_dashboard_address=LOCAL_HTTP)
    with cluster, Client(cluster) as client:
        yield client


def _slurm_cluster(spec: ClusterSpec):
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise PipelineError("'--slurm' needs dask-jobqueue: pip install 'geometric-anatomy[slurm]'") from None
    kwargs = dict(cores=spec.cores, processes=1, memory=spec.memory, job_extra_directives=list(spec.job_extra),
                  scheduler_options={"dashboard_address": spec.dashboard},
                  worker_extra_args=["--dashboard-address", LOCAL_HTTP])  # on its node, localhost only
    if spec.queue:
        kwargs["queue"] = spec.queue
    if spec.walltime:
        kwargs["walltime"] = spec.walltime
    return SLURMCluster(**kwargs)
