import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from stages.errors import PipelineError
from stages.pythia import hub
from tests.pythia_helpers import publish_tiny

REPO = "local/pythia-tiny"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    directory = tmp_path / "hf-cache"
    commits = publish_tiny(directory, REPO, ["step0", "step8"])
    return directory, commits


def test_offline_fetch_resolves_revisions_and_records_manifest(cache):
    directory, commits = cache
    assert hub.offline_mode("auto")
    entry = hub.fetch_revision(REPO, "step8", str(directory), offline=hub.offline_mode("auto"))
    assert entry["commit"] == commits["step8"] != commits["step0"]
    assert entry["step"] == 8 and entry["revision"] == "step8"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(entry["files"])
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in entry["files"].values())

    snapshot = hub.snapshot_path({"repo_id": REPO, "cache_dir": str(directory)}, entry)
    model = AutoModelForCausalLM.from_pretrained(snapshot)
    tokenizer = AutoTokenizer.from_pretrained(snapshot)
    assert model.config.model_type == "gpt_neox"
    assert tokenizer("the dog runs .", add_special_tokens=False)["input_ids"][0] != tokenizer.unk_token_id


def test_missing_revision_offline_names_model_and_revision(cache):
    directory, _ = cache
    with pytest.raises(PipelineError, match=r"local/pythia-tiny.*step512"):
        hub.fetch_revision(REPO, "step512", str(directory), offline=True)
    with pytest.raises(PipelineError, match=r"EleutherAI/pythia-70m.*step0"):
        hub.fetch_revision("EleutherAI/pythia-70m", "step0", str(directory), offline=True)


def test_corrupt_file_fails_verification(cache):
    directory, commits = cache
    snapshot = next(directory.glob(f"models--local--pythia-tiny/snapshots/{commits['step0']}"))
    weights = snapshot / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    weights.write_bytes(bytes(data))
    with pytest.raises(PipelineError, match="model.safetensors fails its checksum"):
        hub.fetch_revision(REPO, "step0", str(directory), offline=True)
    assert hub.fetch_revision(REPO, "step0", str(directory), offline=True, check_hash=False)["files"]
    weights.write_bytes(bytes(data[:-10]))
    with pytest.raises(PipelineError, match="model.safetensors has .* bytes"):
        hub.fetch_revision(REPO, "step0", str(directory), offline=True, check_hash=False)


def test_snapshot_path_detects_changed_cache(cache):
    directory, _ = cache
    entry = hub.fetch_revision(REPO, "step0", str(directory), offline=True)
    manifest = {"repo_id": REPO, "cache_dir": str(directory)}
    entry["files"]["config.json"]["size"] += 1
    with pytest.raises(PipelineError, match="step0.*changed since fetch_pythia"):
        hub.snapshot_path(manifest, entry)
    with pytest.raises(PipelineError, match="has left the HF cache"):
        hub.snapshot_path(manifest, {**entry, "commit": "0" * 40})


def test_revision_names_and_offline_setting(monkeypatch):
    assert hub.revision_step("step143000") == 143000
    with pytest.raises(PipelineError, match="main"):
        hub.revision_step("main")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub.offline_mode(True) and not hub.offline_mode(False)
    with pytest.raises(PipelineError, match="offline"):
        hub.offline_mode("sometimes")


def test_tree_listing_is_huggingface_hub_format(cache):
    directory, commits = cache
    from huggingface_hub import get_cached_repo_tree

    files = {f.path: f.size for f in get_cached_repo_tree(REPO, revision="step0", cache_dir=directory)}
    listing = json.loads((directory / "models--local--pythia-tiny" / "trees" / f"{commits['step0']}.json").read_text())
    assert files == {k: v["size"] for k, v in listing["files"].items()}


def test_interrupted_download_offline_is_reported(cache):
    directory, commits = cache
    (directory / "models--local--pythia-tiny" / "snapshots" / commits["step8"] / "model.safetensors").unlink()
    with pytest.raises(PipelineError, match=r"'local/pythia-tiny' revision 'step8' is only partly"):
        hub.fetch_revision(REPO, "step8", str(directory), offline=True)
