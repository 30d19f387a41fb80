"""Process-wide runtime settings shared by every stage: ``params.yaml: runtime``.

``runtime.threads`` is the number of torch CPU threads, and of the BLAS threads numpy and scipy
use (OpenBLAS would otherwise start one per core: ARPACK's dot products and norms in the
landscape stage split their sums by thread). Floating-point reductions split work by thread, so
results are bit-identical only between runs with the same value; it is a tracked param of every
stage that computes with torch. The CPU code paths (instruction sets) are pinned separately, by
``stages/__init__.py`` before numpy loads (stages/numerics.py); :func:`set_threads` warns when
they are not in effect.
"""
from __future__ import annotations

import torch
from threadpoolctl import threadpool_limits

import stages
from stages.errors import warn_on_success
from stages.numerics import in_effect, mismatches, warm_vector_math
from stages.params import Params


def set_threads(params: Params) -> int:
    """Set torch's intra-op CPU threads to ``runtime.threads`` (a positive integer: the schema checks it)
    and return it.

    Called first thing in each stage's ``main``; a stage-specific setting applied later (such as
    ``landscape.threads`` when non-zero) overrides it. Warns in one line when the process does not
    compute on the pinned CPU code paths (:func:`stages.numerics.mismatches`): its results will differ
    in the last bits from the committed ones. The line follows the stage's output
    (:func:`stages.errors.warn_on_success`), so a report of bad input stays one line on any CPU.
    """
    threads = pin_threads(params.runtime.threads)
    found = mismatches(in_effect(), stages.CPU_PATHS)
    if found:
        warn_on_success(f"warning: {'; '.join(found)}: results will differ in the last bits from a run on the "
                        "pinned CPU code paths (stages/numerics.py)")
    return threads


def pin_threads(threads: int) -> int:
    """Torch's intra-op threads and the BLAS threads of numpy/scipy, process-wide, to ``threads``;
    and MKL's vector-math kernels resolved on this thread before any call splits over threads
    (:func:`stages.numerics.warm_vector_math`)."""
    torch.set_num_threads(threads)
    threadpool_limits(limits=threads, user_api="blas")  # applied now, kept for the process
    warm_vector_math()
    return threads
