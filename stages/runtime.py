"""Process-wide runtime settings shared by every stage: ``params.yaml: runtime``.

A stage process applies them in two places:

* :func:`prepare`, at the top of a stage module run as ``python -m stages.pipeline.<name>`` (before numpy and
  torch load), sets the variables its libraries read once when they load
  (:func:`process_environment`): OpenMP's passive waiting (``OMP_WAIT_POLICY=PASSIVE``, unless the
  environment chooses) so that a stage shares a busy machine instead of spinning against it, and
  under ``runtime.cpu_paths: portable`` the pinned CPU code paths (stages/numerics.py). Native
  mode leaves numpy, torch, MKL, oneDNN and OpenBLAS on the CPU's own code paths.
* :func:`set_threads`, first thing in each stage's ``main``: ``runtime.threads`` torch intra-op
  threads and BLAS threads for numpy and scipy (OpenBLAS would otherwise start one per core;
  floating-point reductions split work by thread, so results are bit-identical only between runs
  with the same value). Where :func:`prepare` did not run (a stage module without it, or numpy
  loaded first) a stage entry re-executes itself once with the variables set.

Child processes (landscape workers) inherit the environment. Importing this module (or any under
``stages``) changes no environment variable and no torch or numpy setting: only the calls do.
"""
from __future__ import annotations

import json
import os
import sys

from stages.errors import PipelineError, main_guard, warn_on_success
from stages.numerics import VARIABLES, in_effect, mismatches, missing, pinned_environment, warm_vector_math
from stages.params import Params

REEXEC = "ANATOMY_CPU_PATHS"  # set to the mode in the environment of a stage re-executed with it
WAITING = {"OMP_WAIT_POLICY": "PASSIVE"}  # docs/performance.md: a stage under load (benchmarks/load_share.py)


def process_environment(params: Params, environ=None) -> dict[str, str]:
    """The variables a stage process computes under (``environ``, default ``os.environ``, may already
    choose OpenMP's waiting): OpenMP's passive waiting and, in portable mode, the pinned code paths
    (a :class:`PipelineError` on a CPU without AVX2)."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in WAITING.items() if not any(name in environ for name in (k, "GOMP_SPINCOUNT"))}
    if params.runtime.cpu_paths == "portable":
        env.update(pinned_environment())
    return env


def _params_argument(argv) -> str | None:
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--params", default=None)
    return parser.parse_known_args(argv)[0].params


def prepare(argv=None) -> None:
    """Set :func:`process_environment` in ``os.environ`` while numpy and torch are not yet loaded
    (``--params`` from ``argv``, default ``sys.argv[1:]``). Called at the top of a stage module run as
    ``__main__``; bad params are left to the stage's ``main`` to report."""
    if "numpy" in sys.modules or "torch" in sys.modules:
        return  # too late to act: set_threads re-executes
    from stages.config import load_typed_params

    try:
        os.environ.update(process_environment(load_typed_params(_params_argument(argv))))
    except PipelineError:
        return


def set_threads(params: Params) -> int:
    """Apply ``params.runtime`` to this stage process (the CPU code paths, then the threads) and
    return the number of threads (a positive integer: the schema checks it).

    A stage-specific setting applied later (such as ``landscape.threads`` when non-zero) overrides
    the threads. This may re-execute the stage (:func:`enter`); in portable mode it warns
    in one line when the process still does not compute on the pinned paths (called in-process, from
    a script that loaded numpy first): the line follows the stage's output
    (:func:`stages.errors.warn_on_success`), so a report of bad input stays one line."""
    portable = params.runtime.cpu_paths == "portable"
    enter(params)
    pinned = pinned_environment() if portable else {}
    threads = pin_threads(params.runtime.threads, portable)
    found = mismatches(in_effect(), pinned) if portable else []
    if found:
        warn_on_success(f"warning: {'; '.join(found)}: results will differ in the last bits from a run on the "
                        "pinned CPU code paths (stages/numerics.py)")
    return threads


def is_stage_entry() -> bool:
    """Whether this process is a stage run as ``python -m stages.pipeline.<name>`` (so that it may re-execute)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name.startswith("stages.")


def enter(params: Params, environ=None, execv=None) -> None:
    """Make :func:`process_environment` hold for this process: a stage entry whose environment lacks
    it (no :func:`prepare`) re-executes itself (``execv``, default :func:`os.execve`) with it set, once
    (:data:`REEXEC` marks the second run). Elsewhere (tests, notebooks) nothing changes and
    :func:`set_threads` warns where portable paths are not in effect. A :class:`PipelineError` for
    portable mode on a CPU without AVX2."""
    environ = os.environ if environ is None else environ
    needed = missing(process_environment(params, environ), environ)
    if needed and environ.get(REEXEC) != params.runtime.cpu_paths and is_stage_entry():
        sys.stdout.flush()
        sys.stderr.flush()
        env = {**environ, **needed, REEXEC: params.runtime.cpu_paths}
        (execv or os.execve)(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def pin_threads(threads: int, portable: bool = False) -> int:
    """Torch's intra-op threads and the BLAS threads of numpy/scipy, process-wide, to ``threads``;
    in portable mode also MKL's vector-math kernels resolved on this thread before any call splits
    over threads (:func:`stages.numerics.warm_vector_math`)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(limits=threads, user_api="blas")  # applied now, kept for the process
    if portable:
        warm_vector_math()
    return threads


def paths_record(params: Params) -> dict:
    """What a run manifest records of the CPU code paths: the mode and what was in effect."""
    return {"mode": params.runtime.cpu_paths, **in_effect()}


@main_guard
def main(argv=None) -> None:
    """``python -m stages.runtime [--params P]``: apply ``runtime`` as a stage does and print, as JSON,
    the CPU code paths, threads and environment variables a stage computes with."""
    from stages.cli import stage_arguments
    from stages.config import load_typed_params

    args = stage_arguments("Print the CPU code paths and threads a stage computes with (params.yaml: runtime).",
                           argv)
    params = load_typed_params(args.params)
    threads = set_threads(params)
    environment = {k: os.environ[k] for k in (*VARIABLES, *WAITING, "GOMP_SPINCOUNT", REEXEC) if k in os.environ}
    print(json.dumps({**paths_record(params), "threads": threads, "environment": environment}, sort_keys=True))


if __name__ == "__main__":
    prepare()
    main()
