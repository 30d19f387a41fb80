"""Stage ``fetch_pythia``: one model's revisions from the hub (or the HF cache) -> a manifest.

Downloads each ``stepN`` revision of the active profile with huggingface_hub's
``snapshot_download`` (resumable; offline when HF_HUB_OFFLINE is set or the profile says so),
verifies every file against the hub's tree listing, and writes
``data/pythia/manifests/<model>.json`` (revision -> commit hash, file sizes and sha256). The
weights stay in the HF cache; downstream stages depend on the manifest only.
"""
from __future__ import annotations


from tqdm import tqdm

from stages.params import Params, Pythia
from stages.pythia import hub, settings
from stages.pythia.paths import manifest_file
from stages.pipeline import stage


def fetch(model: str, cfg: Pythia, progress: bool = True) -> dict:
    """The manifest of ``model`` under the active profile of the ``pythia`` section ``cfg``."""
    src = settings.source(cfg, model)
    check_hash = cfg.verify == "sha256"  # one of stages.params.VERIFY: the schema checked it
    entries = [hub.fetch_revision(src.repo_id, rev, src.cache_dir, src.offline, check_hash)
               for rev in tqdm(src.revisions, desc=f"fetch {src.repo_id}", disable=not progress)]
    return {"model": model, "profile": src.profile, "repo_id": src.repo_id, "cache_dir": src.cache_dir,
            "verified": "sha256" if check_hash else "size", "revisions": entries}


@stage("model", threads=False)
def main(args, params: Params) -> None:
    manifest = fetch(args.model, settings.section(params, "pythia.profiles"))
    hub.write_manifest(manifest_file(args.model), manifest)
    print(f"{manifest_file(args.model)}: {manifest['repo_id']}, {len(manifest['revisions'])} revisions")


if __name__ == "__main__":
    main()
