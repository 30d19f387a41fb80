"""Command-line arguments shared by the stages: the matrix keys dvc.yaml passes, and ``--params``."""
from __future__ import annotations

import argparse


def stage_arguments(description: str, argv=None, *keys: str) -> argparse.Namespace:
    """Parse ``--<key>`` (each required) for every name in ``keys``, plus an optional ``--params``."""
    parser = argparse.ArgumentParser(description=description)
    for key in keys:
        parser.add_argument(f"--{key}", required=True)
    parser.add_argument("--params", default=None, help="params file (default: params.yaml)")
    args = parser.parse_args(argv)
    if "seed" in keys:
        from stages.config import seed_argument

        args.seed = seed_argument(args.seed)
    return args
