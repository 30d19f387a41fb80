"""Geometric anatomy of capability acquisition: a DVC pipeline.

Each top-level module here is one DVC stage (``python -m stages.<name>``); shared
domain code lives in the subpackages ``tasks``, ``models``, ``measures``, ``io`` and
``analysis``.
"""
