"""Hub access through huggingface_hub: fetch revisions, verify files, write and read the manifest.

Weights stay in the HF cache (``cache_dir`` or ``HF_HUB_CACHE``); DVC tracks only the manifest
(revision -> commit hash, file sizes and sha256), so multi-GB weights are never hashed twice.
Downloads use ``snapshot_download``, which resumes interrupted files; every file is then checked
against the hub's tree listing (size, and sha256 for LFS files or the git blob id otherwise),
which huggingface_hub caches under ``<repo folder>/trees/<commit>.json``, so offline runs verify
too.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (HfHubHTTPError, IncompleteSnapshotError, LocalEntryNotFoundError,
                                    RepositoryNotFoundError, RevisionNotFoundError)
from huggingface_hub.file_download import repo_folder_name

from stages.errors import PipelineError
from stages.io.tables import read_json, write_json

# What a model needs: config, weights (safetensors preferred, .bin when a revision has no safetensors), tokenizer.
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model"]
BIN_PATTERNS = ["*.json", "pytorch_model*.bin", "*.txt", "*.model"]
_STEP = re.compile(r"^step(\d+)$")
_CHUNK = 1 << 22


def revision_step(revision: str) -> int:
    """Training step of a Pythia-style revision name ``stepN``."""
    match = _STEP.match(str(revision))
    if not match:
        raise PipelineError(f"revision '{revision}' is not of the form stepN (in 'pythia.profiles.*.revisions')")
    return int(match.group(1))


def offline_mode(setting) -> bool:
    """``offline: auto`` honours HF_HUB_OFFLINE; true/false force it."""
    if setting == "auto":
        return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}
    if isinstance(setting, bool):
        return setting
    raise PipelineError(f"'pythia.profiles.*.offline' must be auto, true or false, got {setting!r}")


def file_digests(path: Path) -> tuple[str, str]:
    """``(sha256, git blob sha1)`` of a file, read once."""
    sha256, git = hashlib.sha256(), hashlib.sha1()
    git.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            sha256.update(chunk)
            git.update(chunk)
    return sha256.hexdigest(), git.hexdigest()


def tree_listing(cache_dir: str | os.PathLike, repo_id: str, commit: str) -> dict | None:
    """The hub's file listing for ``commit`` as huggingface_hub cached it (documented JSON format), or None."""
    path = Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model") / "trees" / f"{commit}.json"
    try:
        return json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return None


def verify_snapshot(snapshot: Path, listing: dict | None, repo_id: str, revision: str, check_hash: bool = True) -> dict:
    """``{file: {size, sha256}}`` of every file in the snapshot, checked against the hub listing."""
    files = {}
    for path in sorted(p for p in snapshot.rglob("*") if p.is_file()):
        rel = path.relative_to(snapshot).as_posix()
        size = path.stat().st_size
        entry = (listing or {}).get(rel)
        expected_size = None if entry is None else entry.get("lfs_size") or entry["size"]
        if expected_size is not None and size != expected_size:
            raise PipelineError(f"{repo_id}@{revision}: file {rel} has {size} bytes, the hub lists {expected_size} "
                                "(interrupted download? re-run fetch_pythia online)")
        record = {"size": size}
        if check_hash:
            sha256, git_sha1 = file_digests(path)
            record["sha256"] = sha256
            if entry is not None:
                ok = sha256 == entry["lfs_sha256"] if entry.get("lfs_sha256") else git_sha1 == entry["blob_id"]
                if not ok:
                    raise PipelineError(f"{repo_id}@{revision}: file {rel} fails its checksum against the hub listing "
                                        "(corrupt cache entry: delete it and re-run fetch_pythia)")
        files[rel] = record
    return files


def resolve_cache(cache_dir: str | None) -> str:
    """``cache_dir`` from params (relative to the repo root), or huggingface_hub's default (HF_HUB_CACHE)."""
    return str(Path(cache_dir).resolve()) if cache_dir else constants.HF_HUB_CACHE


def fetch_revision(repo_id: str, revision: str, cache_dir: str | None, offline: bool,
                   check_hash: bool = True) -> dict:
    """Download (or, offline, resolve in the cache) one revision; return its manifest entry."""
    cache = resolve_cache(cache_dir)
    where = f"the HF cache {cache}"
    try:
        snapshot = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache,
                                          allow_patterns=ALLOW_PATTERNS, local_files_only=offline))
        if not any(snapshot.glob("*.safetensors")) and not offline:  # older revisions ship only .bin
            snapshot = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache,
                                              allow_patterns=BIN_PATTERNS, local_files_only=offline))
    except IncompleteSnapshotError:
        raise PipelineError(f"model '{repo_id}' revision '{revision}' is only partly in {where} (interrupted "
                            "download): re-run fetch_pythia with the hub reachable to resume it") from None
    except LocalEntryNotFoundError:
        why = "downloads are off (HF_HUB_OFFLINE=1 or an offline profile)" if offline else "the hub is unreachable"
        raise PipelineError(f"model '{repo_id}' revision '{revision}' is not in {where} and {why}") from None
    except RevisionNotFoundError:
        raise PipelineError(f"model '{repo_id}' has no revision '{revision}' on the hub") from None
    except RepositoryNotFoundError:
        raise PipelineError(f"model '{repo_id}' not found on the hub (check 'pythia.profiles.*.repo')") from None
    except HfHubHTTPError as exc:
        raise PipelineError(f"model '{repo_id}' revision '{revision}': hub error {exc}") from None
    commit = snapshot.name
    if not any(snapshot.glob("*.safetensors")) and not any(snapshot.glob("*.bin")):
        raise PipelineError(f"model '{repo_id}' revision '{revision}' has no weights in {snapshot}")
    if not (snapshot / "config.json").is_file():
        raise PipelineError(f"model '{repo_id}' revision '{revision}' has no config.json in {snapshot}")
    files = verify_snapshot(snapshot, tree_listing(cache, repo_id, commit), repo_id, revision, check_hash)
    return {"revision": revision, "step": revision_step(revision), "commit": commit, "files": files}


def write_manifest(path: str | os.PathLike, manifest: dict) -> None:
    write_json(manifest, path)


_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def read_manifest(path: str | os.PathLike) -> dict:
    """A manifest written by :func:`write_manifest`, checked key by key; every error is one line naming
    the file and the bad key: ``repo_id`` (a string), ``cache_dir`` (a string or null) and
    ``revisions``, a non-empty list in increasing step order of ``{revision, step, commit, files}``
    with a 40-hex-digit commit and ``files`` mapping relative paths inside the snapshot to
    ``{"size": bytes, ...}``."""
    manifest = read_json(path)

    def bad(why: str):
        raise PipelineError(f"corrupt manifest: {path} ({why})")

    if not isinstance(manifest, dict) or not {"repo_id", "revisions", "cache_dir"} <= set(manifest):
        bad("needs repo_id, cache_dir, revisions")
    if not isinstance(manifest["repo_id"], str) or not manifest["repo_id"]:
        bad(f"'repo_id' must be a non-empty string, got {manifest['repo_id']!r}")
    if manifest["cache_dir"] is not None and not isinstance(manifest["cache_dir"], str):
        bad(f"'cache_dir' must be a path or null, got {manifest['cache_dir']!r}")
    revisions = manifest["revisions"]
    if not isinstance(revisions, list) or not revisions:
        bad("'revisions' must be a non-empty list")
    steps = []
    for i, entry in enumerate(revisions):
        key = f"revisions[{i}]"
        if not isinstance(entry, dict):
            bad(f"'{key}' must be a mapping, got {entry!r}")
        missing = [k for k in ("revision", "step", "commit", "files") if k not in entry]
        if missing:
            bad(f"'{key}' lacks {', '.join(repr(k) for k in missing)}")
        if not isinstance(entry["revision"], str) or not entry["revision"]:
            bad(f"'{key}.revision' must be a non-empty string, got {entry['revision']!r}")
        step = entry["step"]
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            bad(f"'{key}.step' must be a non-negative integer, got {step!r}")
        if not isinstance(entry["commit"], str) or not _COMMIT.fullmatch(entry["commit"]):
            bad(f"'{key}.commit' must be a 40-digit hex commit hash, got {entry['commit']!r}")
        files = entry["files"]
        if not isinstance(files, dict) or not files:
            bad(f"'{key}.files' must be a non-empty mapping of file names to {{size, sha256}}")
        for rel, record in files.items():
            parts = Path(rel).parts
            if not rel or Path(rel).is_absolute() or ".." in parts or "\\" in rel:
                bad(f"'{key}.files' names {rel!r}, not a path inside the snapshot")
            size = record.get("size") if isinstance(record, dict) else None
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                bad(f"'{key}.files.{rel}.size' must be a non-negative integer, got {size!r}")
            digest = record.get("sha256")
            if manifest.get("verified") == "sha256" and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
                bad(f"'{key}.files.{rel}.sha256' must be a 64-digit hex digest (the manifest says verified: sha256), "
                    f"got {digest!r}")
        steps.append(step)
    if sorted(set(steps)) != steps:
        bad("'revisions' must have distinct steps in increasing order")
    return manifest


def snapshot_path(manifest: dict, entry: dict) -> Path:
    """Resolve a manifest entry by its commit hash, offline, through the hub client; sizes must still
    match, and, for a manifest fetched with ``verify: sha256`` (its ``verified`` field), every file's
    sha256 too: a cache entry changed after fetch_pythia is refused, not loaded."""
    repo_id, revision = manifest["repo_id"], entry["revision"]
    try:
        snapshot = Path(snapshot_download(repo_id, revision=entry["commit"],
                                          cache_dir=resolve_cache(manifest["cache_dir"]), local_files_only=True))
    except LocalEntryNotFoundError:
        raise PipelineError(f"model '{repo_id}' revision '{revision}' (commit {entry['commit']}) has left the HF cache "
                            f"{manifest['cache_dir']}: re-run fetch_pythia") from None
    for rel, record in entry["files"].items():
        path = snapshot / rel
        if not path.is_file() or path.stat().st_size != record["size"]:
            raise PipelineError(f"model '{repo_id}' revision '{revision}': cached file {path} is missing or changed "
                                "since fetch_pythia: re-run it")
        if manifest.get("verified") == "sha256" and file_digests(path)[0] != record.get("sha256"):
            raise PipelineError(f"model '{repo_id}' revision '{revision}': cached file {path} fails the sha256 that "
                                "fetch_pythia recorded (changed since): delete it and re-run fetch_pythia")
    return snapshot
