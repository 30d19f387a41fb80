"""Command-line arguments shared by the per-run stages."""
from __future__ import annotations

import argparse


def run_arguments(description: str, argv=None, model: bool = True) -> argparse.Namespace:
    """``--task --level [--model] [--params]`` as used by every matrix stage in dvc.yaml."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--task", required=True)
    parser.add_argument("--level", required=True)
    if model:
        parser.add_argument("--model", required=True)
    parser.add_argument("--params", default=None, help="params file (default: params.yaml)")
    return parser.parse_args(argv)
