import pytest
import torch

from stages.errors import PipelineError
from stages.models import GPT, PRESETS, model_config
from stages.models.presets import PAPER_SIZES
from stages.training.schedule import checkpoint_steps, lr_at


@pytest.mark.parametrize("steps,n", [(1000, 64), (1500, 256), (10, 11), (50, 7), (3000, 2)])
def test_checkpoint_schedule(steps, n):
    s = checkpoint_steps(steps, n)
    assert len(s) == n == len(set(s)) and s == sorted(s)
    assert s[0] == 0 and s[-1] == steps


def test_checkpoints_are_log_spaced_early():
    s = checkpoint_steps(1000, 64, log_fraction=0.5, log_until=0.1)
    early = [x for x in s if x <= 100]
    assert len(early) >= 25 and early[:5] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("steps,n", [(10, 12), (4, 6), (1, 64)])
def test_more_checkpoints_than_steps_is_clamped_with_one_warning_line(steps, n, capsys):
    assert checkpoint_steps(steps, n, key="train (run copy-easy-p405k-s0)") == list(range(steps + 1))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: 'train (run copy-easy-p405k-s0).n_checkpoints'")
    assert f"is {n}, more checkpoints than steps" in err and f"using {steps + 1}" in err
    checkpoint_steps(steps, steps + 1)
    assert capsys.readouterr().err == ""  # exactly steps + 1: no warning


def test_lr_schedules():
    assert lr_at(0, 1.0, 100, 10, "constant") == pytest.approx(0.1)
    assert lr_at(50, 1.0, 100, 10, "constant") == 1.0
    assert lr_at(100, 1.0, 100, 0, "cosine") == pytest.approx(0.0)
    assert lr_at(50, 1.0, 100, 0, "linear", 0.1) == pytest.approx(0.55)


def test_presets_span_paper_sizes():
    assert len(PAPER_SIZES) == 6 and set(PRESETS) - set(PAPER_SIZES) == {"p100k"}  # the paper's six and one proxy
    with torch.device("meta"):
        counts = {n: GPT(model_config(n, 30, 32)).num_params() for n in PRESETS}
    assert abs(counts["p405k"] - 405e3) / 405e3 < 0.1
    assert abs(counts["p151m"] - 151e6) / 151e6 < 0.1
    assert list(counts.values()) == sorted(counts.values())


def test_unknown_model_name():
    with pytest.raises(PipelineError, match="unknown model 'huge'"):
        model_config("huge", 10, 8)


def test_hidden_states_every_layer():
    model = GPT(model_config("p405k", 20, 8))
    logits, states = model(torch.randint(0, 20, (3, 8)), hidden_states=True)
    assert logits.shape == (3, 8, 20) and len(states) == 3 and states[0].shape == (3, 8, 128)
