"""Process-wide runtime settings shared by every stage: ``params.yaml: runtime``.

``runtime.threads`` is the number of torch CPU threads. Floating-point reductions split work by
thread, so results are bit-identical only between runs with the same value; it is a tracked
param of every stage that computes with torch.
"""
from __future__ import annotations

import torch

from stages.config import get, positive_int


def set_threads(params: dict) -> int:
    """Set torch's intra-op CPU threads to ``runtime.threads`` (a positive integer) and return it.

    Called first thing in each stage's ``main``; a stage-specific setting applied later (such as
    ``landscape.threads`` when non-zero) overrides it.
    """
    threads = positive_int(get(params, "runtime.threads"), "runtime.threads")
    torch.set_num_threads(threads)
    return threads
