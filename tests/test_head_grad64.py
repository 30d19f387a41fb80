"""The tied head's weight gradient summed in float64 (stages.models.gpt.TiedHeadGrad64): the same
bits whatever order the answer tokens are summed in, where float32 changes most of them; the same
logits and input gradient as the plain head; used by the CPU training update."""
import torch
import torch.nn.functional as F

import stages.training.loop as loop
from stages.models import GPT, model_config
from stages.models.gpt import TiedHeadGrad64
from stages.training.loop import answer_logits, make_optimizer, update

K, D, V = 2048, 128, 19  # copy-easy's product: 2048 answer tokens, d_model 128, vocabulary 19


def _operands():
    g = torch.Generator().manual_seed(0)
    return torch.randn(K, D, generator=g), torch.randn(V, D, generator=g) * 0.02, torch.randn(K, V, generator=g) / K


def _weight_grad(fn, h, w, dlogits):
    h, w = h.clone().requires_grad_(), w.clone().requires_grad_()
    fn(h, w).backward(dlogits)
    return h.grad, w.grad


def test_weight_gradient_does_not_depend_on_the_summation_order():
    h, w, dlogits = _operands()
    order = torch.randperm(K, generator=torch.Generator().manual_seed(1))
    _, grad64 = _weight_grad(TiedHeadGrad64.apply, h, w, dlogits)
    _, grad64_permuted = _weight_grad(TiedHeadGrad64.apply, h[order], w, dlogits[order])
    assert torch.equal(grad64, grad64_permuted)
    assert torch.equal(grad64, (dlogits.double().T @ h.double()).float())  # rounded once
    # float32 (the plain head) changes most entries when the order changes: the test has teeth
    _, grad32 = _weight_grad(F.linear, h, w, dlogits)
    _, grad32_permuted = _weight_grad(F.linear, h[order], w, dlogits[order])
    assert int((grad32 != grad32_permuted).sum()) > V * D // 2
    torch.testing.assert_close(grad64, grad32, rtol=1e-4, atol=1e-7)


def test_forward_and_input_gradient_are_the_plain_heads():
    h, w, dlogits = _operands()
    h3, dl3 = h.view(16, K // 16, D), dlogits.view(16, K // 16, V)  # [batch, positions, d] as in the model
    assert torch.equal(TiedHeadGrad64.apply(h3, w), F.linear(h3, w))
    grad_h64, _ = _weight_grad(TiedHeadGrad64.apply, h3, w, dl3)
    grad_h32, _ = _weight_grad(F.linear, h3, w, dl3)
    assert torch.equal(grad_h64, grad_h32)


def test_the_cpu_update_sums_the_head_gradient_in_float64(monkeypatch):
    torch.manual_seed(0)
    model = GPT(model_config("p405k", vocab_size=11, block_size=7))
    batch = torch.randint(0, 11, (6, 8), generator=torch.Generator().manual_seed(1))
    logits = answer_logits(model, batch, 4, head_grad64=True)
    assert type(logits.grad_fn).__name__ == "TiedHeadGrad64Backward"
    assert torch.equal(logits, answer_logits(model, batch, 4))
    seen = []
    plain = loop.answer_loss
    monkeypatch.setattr(loop, "answer_loss", lambda *a, **k: seen.append(k.get("head_grad64")) or plain(*a, **k))
    update(model, make_optimizer(model, 1e-3, 0.0, (0.9, 0.98)), batch, 4, 1.0)
    assert seen == [True]
