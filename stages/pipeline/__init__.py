"""The DVC stage scripts: one module per stage of dvc.yaml, run as ``python -m stages.pipeline.<stage>``.

Each is a thin entry behind :func:`stage`, which parses the stage's arguments (its matrix keys and
``--params``), loads the typed params once (stages/params.py), applies ``runtime`` (threads and CPU
code paths, stages/runtime.py) where the stage computes with torch, and turns bad input into one line
(stages/errors.py). The work itself is library code in the subpackages of :mod:`stages`; nothing
there imports a stage module (tests/test_layering.py).
"""
from __future__ import annotations

import functools
import sys
from typing import Callable

from stages.errors import main_guard


def stage(*keys: str, threads: bool = True) -> Callable:
    """Decorate ``work(args, params)`` into the stage's ``main(argv=None)``: ``--<key>`` for each of
    ``keys`` (from ``$DVC_STAGE`` under DVC: stages/cli.py), ``--params``; ``threads``: apply
    ``params.runtime`` first (:func:`stages.runtime.set_threads`), for stages that compute with torch
    (their dvc.yaml entry tracks ``runtime``)."""
    def wrap(work: Callable) -> Callable:
        @main_guard
        @functools.wraps(work)
        def main(argv=None):
            from stages.cli import stage_arguments
            from stages.config import load_typed_params

            args = stage_arguments(sys.modules[work.__module__].__doc__, argv, *keys)
            params = load_typed_params(args.params)
            if threads:
                from stages.runtime import set_threads

                set_threads(params)
            return work(args, params)
        return main
    return wrap
