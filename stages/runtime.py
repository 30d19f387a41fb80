"""Process-wide runtime settings shared by every stage: ``params.yaml: runtime``.

``runtime.threads`` is the number of torch CPU threads. Floating-point reductions split work by
thread, so results are bit-identical only between runs with the same value; it is a tracked
param of every stage that computes with torch.
"""
from __future__ import annotations

import torch

from stages.params import Params


def set_threads(params: Params) -> int:
    """Set torch's intra-op CPU threads to ``runtime.threads`` (a positive integer: the schema checks it)
    and return it.

    Called first thing in each stage's ``main``; a stage-specific setting applied later (such as
    ``landscape.threads`` when non-zero) overrides it.
    """
    threads = params.runtime.threads
    torch.set_num_threads(threads)
    return threads
