"""GPU path pieces that can be checked on a CPU: precision choice, bf16 autocast, chunked RankMe."""
import numpy as np
import pytest
import torch

from stages.errors import PipelineError
from stages.pipeline.extract import hidden_at
from stages.measures.rankme import rankme, rankme_batched
from stages.models import GPT, model_config
from stages.params import TrainSettings, validate_params
from stages.pipeline.train import resolve_train_params
from stages.training import loop
from stages.training.loop import train
from stages.training.precision import AUTO_BF16_MIN_PARAMS, resolve_precision

CPU = torch.device("cpu")


def test_fp32_is_the_cpu_default(repo_params):
    hp = resolve_train_params(validate_params(repo_params), "mod", "hard")
    for n_params in (4e5, AUTO_BF16_MIN_PARAMS, 151e6):
        assert resolve_precision(hp.precision, CPU, int(n_params)) == "fp32"
        assert resolve_precision(repo_params["extract"].get("precision", "auto"), CPU, int(n_params)) == "fp32"


def test_explicit_choices_and_bad_name(repo_params):
    assert resolve_precision("bf16", CPU, 1000) == "bf16"
    assert resolve_precision("fp32", CPU, 10**9) == "fp32"
    with pytest.raises(PipelineError, match="unknown train.defaults.precision 'half'"):
        validate_params({**repo_params, "train": {"defaults": {**_defaults(), "precision": "half"}, "tasks": {}}})


def _defaults():
    return {"steps": 4, "lr": 1e-3, "weight_decay": 0.0, "batch_size": 8, "warmup": 0, "schedule": "constant",
            "betas": [0.9, 0.98], "grad_clip": 1.0, "device": "cpu", "n_checkpoints": 3,
            "log_fraction": 0.5, "log_until": 0.1, "eval_batch_size": 16}


def _tiny_model():
    torch.manual_seed(0)
    return GPT(model_config("p405k", vocab_size=12, block_size=7))


def test_bf16_autocast_trains_on_cpu(tmp_path, monkeypatch):
    seen = []
    real = loop.answer_logits

    def spy(model, seq, prompt_len):
        out = real(model, seq, prompt_len)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(loop, "answer_logits", spy)
    gen = torch.Generator().manual_seed(0)
    seq = torch.randint(0, 12, (32, 8), generator=gen)
    model = _tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    cfg = TrainSettings.model_validate({**_defaults(), "steps": 3, "lr": 1e-2})
    history = train(model, cfg, seq, seq[:16], prompt_len=4, out_dir=tmp_path / "run", seed=0, checkpoints=[0, 3],
                    precision="bf16", progress=False)
    assert [h["step"] for h in history] == [0, 3]
    assert all(np.isfinite(h["test_loss"]) and np.isfinite(h["batch_loss"] if h["step"] else 0) for h in history)
    assert torch.bfloat16 in seen                                   # the forward ran under autocast
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_fp32_training_is_unchanged_by_the_precision_field(tmp_path):
    seq = torch.randint(0, 12, (32, 8), generator=torch.Generator().manual_seed(1))
    runs = []
    for i, kwargs in enumerate(({}, {"precision": "fp32"})):
        model = _tiny_model()
        cfg = TrainSettings.model_validate({**_defaults(), "steps": 2, "lr": 1e-2})
        train(model, cfg, seq, seq[:16], prompt_len=4, out_dir=tmp_path / f"r{i}", seed=0, checkpoints=[0, 2],
              progress=False, **kwargs)
        runs.append([p.detach() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_hidden_states_stay_float32_under_bf16():
    model = _tiny_model().eval()
    seq = torch.randint(0, 12, (10, 8), generator=torch.Generator().manual_seed(2))
    fp32 = hidden_at(model, seq, [3], batch_size=4)
    bf16 = hidden_at(model, seq, [3], batch_size=4, precision="bf16")
    assert fp32.dtype == bf16.dtype == np.float32 and fp32.shape == bf16.shape == (3, 10, 128)
    assert np.allclose(fp32, bf16, atol=0.1, rtol=0.05)


def test_chunked_rankme_equals_one_call():
    z = torch.randn(7, 40, 16, generator=torch.Generator().manual_seed(3))
    whole = rankme_batched(z)
    for chunk in (1, 2, 3, 7, 100):
        assert torch.equal(rankme_batched(z, chunk=chunk), whole)
    assert torch.equal(rankme_batched(z, device="cpu"), whole)
    assert whole.dtype == torch.float64
    assert abs(float(whole[0]) - rankme(z[0])) < 1e-4
    assert rankme_batched(z[:0]).shape == (0,)
