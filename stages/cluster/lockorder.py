"""Keep dvc.lock byte-identical to a serial ``dvc repro``.

DVC writes each stage's dvc.lock entry itself (``dvc repro --single-item``), so the entries'
content is DVC's own. Only the order of entries NEW to dvc.lock can differ: DVC updates existing
entries in place but appends new ones, so parallel stages append in completion order. After the
run, new entries are moved into the plan's order (topological, ties in dvc.yaml order: the order
a full serial ``dvc repro`` appends them in). A targeted serial ``dvc repro TARGET`` has no fixed
order itself (it walks a subgraph whose node order depends on Python's hash seed), so the order
of new entries carries no meaning beyond stable diffs. The rewrite uses DVC's own YAML writer
under its repo lock; if those internals are missing in another DVC version it is skipped.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml

LOCK = "dvc.lock"


def lock_keys(root: str | os.PathLike) -> list[str]:
    path = Path(root) / LOCK
    if not path.is_file():
        return []
    data = yaml.safe_load(path.read_text()) or {}
    return list((data.get("stages") or {}).keys())


def serial_key_order(current: list[str], before: list[str], order: list[str]) -> list[str]:
    """Entries present before keep their places; new ones follow in serial ``order``."""
    old = set(before)
    rank = {s: i for i, s in enumerate(order)}
    new = sorted((k for k in current if k not in old), key=lambda k: rank.get(k, len(rank)))
    return [k for k in current if k in old] + new


def restore_serial_order(root: str | os.PathLike, before: list[str], order: list[str]) -> bool:
    """Reorder new dvc.lock entries into serial order; True when the file was rewritten."""
    current = lock_keys(root)
    wanted = serial_key_order(current, before, order)
    if wanted == current:
        return False
    try:
        from dvc.repo import Repo
        from dvc.utils.serialize import modify_yaml
    except ImportError:  # another DVC layout: keep DVC's (valid) completion order
        return False
    repo = Repo(str(root))
    try:
        with repo.lock, modify_yaml(str(Path(root) / LOCK)) as data:
            stages = data["stages"]
            entries = {k: stages[k] for k in wanted}
            stages.clear()
            stages.update(entries)
    finally:
        repo.close()
    return True
