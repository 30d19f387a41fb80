"""``GPT.forward(start=k)``: the last block and the head only for positions k.., the same numbers as
the full forward's slice (float rounding aside), with dropout and gradients too."""
import pytest
import torch

from stages.models import GPT
from stages.models.gpt import GPTConfig
from stages.training.loop import answer_logits, answer_loss


def model(n_layer=2, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=23, block_size=16, n_layer=n_layer, n_head=4, d_model=32, dropout=dropout))


@pytest.mark.parametrize("n_layer", [1, 2, 3])
@pytest.mark.parametrize("start", [1, 5, 15])
def test_logits_equal_the_full_forward_slice(n_layer, start):
    m = model(n_layer).eval()
    idx = torch.randint(0, 23, (7, 16), generator=torch.Generator().manual_seed(1))
    full = m(idx)
    part = m(idx, start=start)
    assert part.shape == (7, 16 - start, 23)
    torch.testing.assert_close(part, full[:, start:], rtol=1e-5, atol=1e-5)
    assert torch.equal(m(idx, start=0), full)  # start 0 is the full forward, bit for bit


def test_gradients_equal_the_full_forward():
    m = model()
    seq = torch.randint(0, 23, (9, 14), generator=torch.Generator().manual_seed(2))
    prompt_len = 6

    def grads(loss_fn):
        m.zero_grad()
        loss_fn().backward()
        return {n: p.grad.clone() for n, p in m.named_parameters()}

    full = lambda: torch.nn.functional.cross_entropy(  # noqa: E731
        m(seq[:, :-1])[:, prompt_len - 1:].reshape(-1, 23), seq[:, prompt_len:].reshape(-1))
    a, b = grads(full), grads(lambda: answer_loss(m, seq, prompt_len))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6)
    assert answer_logits(m, seq, prompt_len).shape == (9, 14 - prompt_len, 23)


def test_dropout_masks_the_same_shapes():
    m = model(dropout=0.5).train()
    idx = torch.randint(0, 23, (4, 12))
    assert m(idx, start=3).shape == (4, 9, 23)  # dropout on the sliced path runs


def test_bad_start_and_hidden_states():
    m = model()
    idx = torch.randint(0, 23, (2, 8))
    for bad in (-1, 8, 9):
        with pytest.raises(ValueError, match="start"):
            m(idx, start=bad)
    with pytest.raises(ValueError, match="hidden_states"):
        m(idx, hidden_states=True, start=2)
