"""Geometric anatomy of capability acquisition: a DVC pipeline.

Each top-level module here is one DVC stage (``python -m stages.<name>``); shared
domain code lives in the subpackages ``tasks``, ``models``, ``measures``, ``io`` and
``analysis``.
"""

from stages.numerics import pin_code_paths

# Before any stage module imports numpy or torch: the CPU code paths every stage computes with
# (stages/numerics.py). What was set, for the check in stages.runtime.set_threads.
CPU_PATHS = pin_code_paths()
