"""One exception type for bad input, reported as a single line by every stage."""
from __future__ import annotations

import functools
import sys


class PipelineError(Exception):
    """Bad configuration or a missing/corrupt file. The message names the key or file."""


def main_guard(fn):
    """Wrap a stage's ``main`` so bad input exits non-zero with a one-line message."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PipelineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    return wrapper
