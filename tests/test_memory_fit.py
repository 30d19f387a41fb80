"""A model size that does not fit its device stops before training, in one line naming the size and the
estimate (stages/training/memory.py); the estimate's parts are exact for known shapes."""
import pytest

from stages import paths

from stages.pipeline import generate, train
from stages.config import load_typed_params
from stages.errors import PipelineError
from stages.training import memory


def test_estimate_parts_for_known_shapes():
    est = memory.train_bytes(n_params=1000, n_layer=2, d_model=8, n_head=2, context=4, batch=3, answer_len=1,
                             vocab=10, precision="fp32")
    per_layer = 4 * 3 * 8 * (34 + 5 * 2 * 4 / 8)  # T * B * d * (34 + 5 h T / d), 16-bit bytes
    assert est["state"] == 16_000 and est["activations"] == int(2 * per_layer * 2)  # 2 layers, fp32 = 2x
    assert est["logits"] == 3 * 3 * 1 * 10 * 4
    assert est["total"] == int(1.2 * (16_000 + est["activations"] + est["logits"])) + memory.OVERHEAD
    half = memory.train_bytes(1000, 2, 8, 2, 4, 3, 1, 10, "bf16")
    assert half["activations"] * 2 == est["activations"] and half["state"] == est["state"]


def test_a_size_that_does_not_fit_stops_before_training(workdir, monkeypatch):
    generate.main(["--task", "copy", "--level", "easy"])
    monkeypatch.setattr(memory, "available_bytes", lambda device: 100 * 2**20)  # 100 MiB free
    params = load_typed_params()
    with pytest.raises(PipelineError) as exc:
        train.run("copy", "easy", "p405k", 0, params, progress=False)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("model 'p405k' does not fit cpu: training run copy-easy-p405k-s0 needs an estimated ")
    assert message.endswith(", 0.10 GiB free; use smaller grid.models or train.defaults.batch_size")
    assert not paths.checkpoint_dir("copy-easy-p405k-s0").exists()
    assert not any(paths.DATA.joinpath("checkpoints").glob(".*partial")) if paths.DATA.joinpath("checkpoints").exists() else True


def test_a_size_that_fits_trains(workdir, monkeypatch):
    generate.main(["--task", "copy", "--level", "easy"])
    monkeypatch.setattr(memory, "available_bytes", lambda device: 64 * 2**30)
    manifest = train.run("copy", "easy", "p405k", 0, load_typed_params(), progress=False)
    assert manifest["model_name"] == "p405k" and paths.checkpoint_dir("copy-easy-p405k-s0").is_dir()
