"""Write to a temporary path, then rename: a crash never leaves output looking complete.

Temporary siblings are named ``.atomic-<name>.<host>-<pid>.<random>.tmp``. Before the rename they get
the permissions an ordinary ``open`` would give under the user's umask (``mkstemp`` and ``mkdtemp``
make them private). A hard kill (SIGKILL, power loss) can leave one behind: the next write into the
same directory removes it at once when its writer (named in it) was a process on this host that has
ended, and otherwise once nothing has touched it for :data:`STALE_SECONDS`. The repository's
``.dvcignore`` hides these names from DVC meanwhile (output hashes, directory dependencies, plots).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

TMP_PREFIX = ".atomic-"
TMP_SUFFIX = ".tmp"
STALE_SECONDS = 3600
_PENDING: contextvars.ContextVar[list | None] = contextvars.ContextVar("pending_outputs", default=None)
_OWNER = re.compile(r"\.([A-Za-z0-9-]*)-(\d+)\.[^.]+" + re.escape(TMP_SUFFIX) + "$")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32]


def current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` can only set it, which would race
    with other threads creating files); falls back to a set-and-restore where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # the restrictive value for the instant it is set
    os.umask(mask)
    return mask


def _alive(host: str, pid: int) -> bool:
    if host != _host():
        return False  # another machine on a shared filesystem: only the age counts
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _newest_mtime(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def remove_stale(directory: str | os.PathLike, max_age: float = STALE_SECONDS) -> list[Path]:
    """Delete this module's temporary files and directories in ``directory`` whose writer is not running:
    at once if it ran on this host, else once nothing has touched them for ``max_age`` seconds (another
    machine's process cannot be asked); return what was removed."""
    removed = []
    now = time.time()
    try:
        candidates = [p for p in Path(directory).iterdir()
                      if p.name.startswith(TMP_PREFIX) and p.name.endswith(TMP_SUFFIX)]
    except OSError:
        return removed
    for path in candidates:
        try:
            owner = _OWNER.search(path.name)
            if owner and _alive(owner.group(1), int(owner.group(2))):
                continue
            orphan = owner is not None and owner.group(1) == _host()  # its writer on this host has ended
            if not orphan and now - _newest_mtime(path) < max_age:
                continue
            _remove(path)
            removed.append(path)
        except OSError:
            continue  # another writer's cleanup got there first, or it is not ours to remove
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, directory: bool = False):
    """Yield a temporary sibling of ``path``; move it onto ``path`` only if the block succeeds.

    With ``directory=True`` the temporary path is an (empty) directory that replaces ``path`` whole.
    The result has umask permissions (``0o666 & ~umask`` for a file, ``0o777 & ~umask`` for a directory).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent)
    prefix = f"{TMP_PREFIX}{path.name}.{_host()}-{os.getpid()}."
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=TMP_SUFFIX, dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=TMP_SUFFIX, dir=path.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, (0o777 if directory else 0o666) & ~current_umask())
    except BaseException:
        _remove(tmp)
        raise
    pending = _PENDING.get()
    if pending is not None:  # inside output_set(): moved into place with the rest of the set
        pending.append((tmp, path, directory))
        return
    _replace(tmp, path, directory)


def _replace(tmp: Path, path: Path, directory: bool) -> None:
    if directory and path.exists():
        _remove(path)
    os.replace(tmp, path)


@contextlib.contextmanager
def output_set():
    """All or nothing for a stage's outputs: every :func:`atomic_path` write inside the block stays
    in its temporary file until the block ends; then all are moved into place, one rename each. If
    the block raises, every one of them is deleted and no output is touched; if a rename fails
    (a full disk, a permission), the renames already done are undone (:func:`_commit`)."""
    pending: list = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for tmp, _, _ in pending:
            with contextlib.suppress(OSError):
                _remove(tmp)
        raise
    finally:
        _PENDING.reset(token)
    _commit(pending)


def _commit(pending: list) -> None:
    """Move every ``(tmp, path, directory)`` into place, all or nothing: each existing output is first
    renamed aside; if any rename fails, the outputs already moved are put back (the old ones restored,
    new ones removed), every temporary is deleted, and one :class:`PipelineError` line names the path."""
    from stages.errors import PipelineError

    done: list[tuple[Path, Path | None]] = []  # (path, its previous version set aside, or None)
    try:
        for tmp, path, directory in pending:
            aside = None
            if path.exists() or path.is_symlink():
                aside = path.with_name(f"{TMP_PREFIX}{path.name}.{_host()}-{os.getpid()}.old{TMP_SUFFIX}")
                _remove(aside)
                os.replace(path, aside)
            done.append((path, aside))
            os.replace(tmp, path)
    except OSError as exc:
        for path, aside in reversed(done):
            with contextlib.suppress(OSError):
                if aside is None:
                    _remove(path)
                else:
                    if path.exists() or path.is_symlink():
                        _remove(path)
                    os.replace(aside, path)
        for tmp, _, _ in pending:
            with contextlib.suppress(OSError):
                _remove(tmp)
        failed = done[-1][0] if done else pending[0][1]
        raise PipelineError(f"could not write {failed} ({' '.join(str(exc).split())}); no output of this stage "
                            "was changed") from None
    for _, aside in done:
        if aside is not None:
            with contextlib.suppress(OSError):
                _remove(aside)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
