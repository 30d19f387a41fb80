"""Command-line arguments shared by the stages: the matrix keys, and ``--params``."""
from __future__ import annotations

import argparse


def stage_arguments(description: str, argv=None, *keys: str) -> argparse.Namespace:
    """Parse ``--<key>`` for every name in ``keys``, plus an optional ``--params``. Under DVC the keys
    are not on the command line (no params value may reach a shell): they come from the matrix entry
    DVC names in ``$DVC_STAGE`` (:func:`stages.config.matrix_arguments`)."""
    parser = argparse.ArgumentParser(description=description)
    for key in keys:
        parser.add_argument(f"--{key}")
    parser.add_argument("--params", default=None, help="params file (default: params.yaml)")
    args = parser.parse_args(argv)
    if keys and all(getattr(args, key) is None for key in keys):
        from stages.config import matrix_arguments

        for key, value in matrix_arguments(keys, args.params).items():
            setattr(args, key, value)
    elif missing := [f"--{key}" for key in keys if getattr(args, key) is None]:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    if "seed" in keys:
        from stages.config import seed_argument

        args.seed = seed_argument(args.seed)
    return args
