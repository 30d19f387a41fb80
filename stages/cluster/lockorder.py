"""Keep dvc.lock byte-identical to a serial ``dvc repro``.

DVC writes each stage's dvc.lock entry itself (``dvc repro --single-item``), so the entries'
content is DVC's own. Only one thing can differ: DVC updates entries in place but APPENDS entries
new to dvc.lock, so on a fresh project parallel stages append in completion order rather than in
serial order. After the run, entries that were new are moved into the plan's serial order (the
order a serial ``dvc repro`` runs them), written with DVC's own YAML writer under its repo lock.
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
    from dvc.repo import Repo
    from dvc.utils.serialize import modify_yaml

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
