"""One exception type for bad input, reported as a single line by every stage."""
from __future__ import annotations

import functools
import sys


class PipelineError(Exception):
    """Bad configuration or a missing/corrupt file. The message names the key or file."""


_on_success: list[str] | None = None  # warnings held back while a guarded main runs


def warn_on_success(message: str) -> None:
    """Print ``message`` to stderr when the running stage's ``main`` returns, and not at all when it
    stops on bad input (whose report stays one line); at once outside a guarded ``main``.

    For warnings about the results (not the input), such as computing off the pinned CPU code paths."""
    if _on_success is None:
        print(message, file=sys.stderr)
    else:
        _on_success.append(message)


def main_guard(fn):
    """Wrap a stage's ``main`` so bad input exits non-zero with a one-line message; warnings passed to
    :func:`warn_on_success` follow a normal return."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        global _on_success
        outer, _on_success = _on_success, []
        try:
            result = fn(*args, **kwargs)
            held = _on_success
        except PipelineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        finally:
            _on_success = outer
        for message in held:
            warn_on_success(message)
        return result

    return wrapper
