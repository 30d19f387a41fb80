"""Process-wide runtime settings shared by every stage: ``params.yaml: runtime``.

:func:`set_threads` is every stage's entry to them, called first thing in its ``main``:

* ``runtime.cpu_paths``: ``native`` (default) leaves numpy, torch, MKL, oneDNN and OpenBLAS on the
  CPU's own code paths and changes no environment variable; ``portable`` pins them to vendor-exact
  paths (stages/numerics.py). Those variables act only before numpy and torch load, so a stage run
  as ``python -m stages.<name>`` whose environment lacks them re-executes itself once with them set
  (before it has read or written anything but params.yaml); its child processes inherit them.
* ``runtime.threads``: torch's intra-op CPU threads and the BLAS threads of numpy and scipy
  (OpenBLAS would otherwise start one per core). Floating-point reductions split work by thread,
  so results are bit-identical only between runs with the same value.

Importing this module (or any under ``stages``) changes no environment variable and no torch or
numpy setting: only the call does.
"""
from __future__ import annotations

import json
import os
import sys

import torch
from threadpoolctl import threadpool_limits

from stages.errors import main_guard, warn_on_success
from stages.numerics import in_effect, mismatches, missing, pinned_environment, warm_vector_math
from stages.params import Params

REEXEC = "ANATOMY_CPU_PATHS"  # set to "portable" in the environment of a stage re-executed on the pinned paths


def set_threads(params: Params) -> int:
    """Apply ``params.runtime`` to this stage process (the CPU code paths, then the threads) and
    return the number of threads (a positive integer: the schema checks it).

    A stage-specific setting applied later (such as ``landscape.threads`` when non-zero) overrides
    the threads. In portable mode this may re-execute the stage (:func:`enter_portable`), and warns
    in one line when the process still does not compute on the pinned paths (called in-process, from
    a script that loaded numpy first): the line follows the stage's output
    (:func:`stages.errors.warn_on_success`), so a report of bad input stays one line."""
    portable = params.runtime.cpu_paths == "portable"
    pinned = enter_portable() if portable else {}
    threads = pin_threads(params.runtime.threads, portable)
    found = mismatches(in_effect(), pinned) if portable else []
    if found:
        warn_on_success(f"warning: {'; '.join(found)}: results will differ in the last bits from a run on the "
                        "pinned CPU code paths (stages/numerics.py)")
    return threads


def is_stage_entry() -> bool:
    """Whether this process is a stage run as ``python -m stages.<name>`` (so that it may re-execute)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name.startswith("stages.")


def enter_portable(environ=None, execv=None) -> dict[str, str]:
    """The pinned environment (stages/numerics.py), in effect from here on where possible: a stage
    entry whose environment lacks it re-executes itself (``execv``, default :func:`os.execve`) with
    it set, once (:data:`REEXEC` marks the second run). Elsewhere (tests, notebooks) nothing
    changes and :func:`set_threads` warns. A :class:`PipelineError` on a CPU without AVX2."""
    environ = os.environ if environ is None else environ
    pinned = pinned_environment()
    if missing(pinned, environ) and environ.get(REEXEC) != "portable" and is_stage_entry():
        sys.stdout.flush()
        sys.stderr.flush()
        env = {**environ, **pinned, REEXEC: "portable"}
        (execv or os.execve)(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    return pinned


def pin_threads(threads: int, portable: bool = False) -> int:
    """Torch's intra-op threads and the BLAS threads of numpy/scipy, process-wide, to ``threads``;
    in portable mode also MKL's vector-math kernels resolved on this thread before any call splits
    over threads (:func:`stages.numerics.warm_vector_math`)."""
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
    the CPU code paths and threads a stage computes with."""
    from stages.cli import stage_arguments
    from stages.config import load_typed_params

    args = stage_arguments("Print the CPU code paths and threads a stage computes with (params.yaml: runtime).",
                           argv)
    params = load_typed_params(args.params)
    threads = set_threads(params)
    print(json.dumps({**paths_record(params), "threads": threads}, sort_keys=True))


if __name__ == "__main__":
    main()
