"""Publish checkpoints into an HF cache layout, so the hub client resolves ``stepN`` offline.

Layout (what huggingface_hub itself writes when symlinks are unavailable)::

    <cache>/models--<org>--<name>/refs/<revision>          -> commit hash
    <cache>/models--<org>--<name>/snapshots/<commit>/...   the files
    <cache>/models--<org>--<name>/trees/<commit>.json      the tree listing (size, git blob id, LFS sha256)

The commit hash is a git-style sha1 over the files' blob ids, so identical content gives the
same commit. Used by ``train_suite`` and by the tests; never by real Pythia runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from huggingface_hub.file_download import repo_folder_name

from stages.io.atomic import current_umask, write_text
from stages.pythia.hub import file_digests

LFS_SUFFIXES = (".safetensors", ".bin")


def publish(cache_dir: str | os.PathLike, repo_id: str, revision: str, save) -> str:
    """Call ``save(directory)`` (e.g. ``model.save_pretrained``) and publish the result as ``revision``.

    Returns the commit hash. Each file lands atomically in its snapshot; the ref is written last, so an
    interrupted publish leaves no resolvable revision behind.
    """
    storage = Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model")
    storage.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=storage, prefix=".publish.") as tmp:
        staging = Path(tmp) / "files"
        staging.mkdir()
        save(staging)
        for path in staging.rglob("*"):  # safetensors writes 0600; the cache gets the umask's modes
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~current_umask())
        files = {}
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            sha256, blob = file_digests(path)
            entry = {"size": path.stat().st_size, "blob_id": blob}
            if path.name.endswith(LFS_SUFFIXES):
                entry.update(lfs_sha256=sha256, lfs_size=entry["size"])
            files[path.relative_to(staging).as_posix()] = entry
        commit = hashlib.sha1(json.dumps({"revision": revision, "files": files}, sort_keys=True).encode()).hexdigest()
        snapshot = storage / "snapshots" / commit
        if not snapshot.is_dir():
            snapshot.parent.mkdir(exist_ok=True)
            os.replace(staging, Path(tmp) / commit)
            os.replace(Path(tmp) / commit, snapshot)
        trees = storage / "trees"
        trees.mkdir(exist_ok=True)
        write_text(trees / f"{commit}.json", json.dumps({"format_version": 1, "files": files}, indent=1, sort_keys=True))
    (storage / "refs").mkdir(exist_ok=True)
    write_text(storage / "refs" / revision, commit)
    return commit

