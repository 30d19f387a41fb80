"""Geometric anatomy of capability acquisition: a DVC pipeline.

Each top-level module here is one DVC stage (``python -m stages.<name>``); shared
domain code lives in the subpackages ``tasks``, ``models``, ``measures``, ``io`` and
``analysis``. Importing any of it changes no environment variable and no torch or numpy
setting; a stage applies ``params.yaml: runtime`` when it starts (stages/runtime.py).
"""
