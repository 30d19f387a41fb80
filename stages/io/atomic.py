"""Write to a temporary path, then rename: a crash never leaves output looking complete."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, directory: bool = False):
    """Yield a temporary sibling of ``path``; move it onto ``path`` only if the block succeeds.

    With ``directory=True`` the temporary path is an (empty) directory that replaces ``path`` whole.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if directory and path.exists():
        _remove(path)
    os.replace(tmp, path)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
