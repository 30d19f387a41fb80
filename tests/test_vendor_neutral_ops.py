"""GELU and cross-entropy with second derivatives off MKL's vector math (stages/models/vendor_neutral_ops.py):
the stock bits to first order, exact derivatives to second order."""
import math

import pytest
import torch
import torch.nn.functional as F

from stages.models.vendor_neutral_ops import _gelu_second, cross_entropy, gelu


def hvp(f, x, v):
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    return torch.autograd.grad((g * v).sum(), x)[0]


def test_first_order_bits_are_the_stock_ones():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 300, generator=g, requires_grad=True)
    u = torch.randn(64, 300, generator=g)
    assert torch.equal(gelu(x), F.gelu(x))
    assert torch.equal(torch.autograd.grad(gelu(x), x, u)[0], torch.autograd.grad(F.gelu(x), x, u)[0])
    logits = torch.randn(64, 19, generator=g, requires_grad=True)
    target = torch.randint(0, 19, (64,), generator=g)
    for reduction in ("mean", "sum", "none"):
        ours, stock = cross_entropy(logits, target, reduction), F.cross_entropy(logits, target, reduction=reduction)
        assert torch.equal(ours, stock)
        w = torch.ones_like(ours)
        assert torch.equal(torch.autograd.grad(ours, logits, w)[0], torch.autograd.grad(stock, logits, w)[0])


def test_gelu_second_derivative_known_values():
    # g''(x) = (2 - x^2) phi(x): 2 phi(0) at 0, zero at +-sqrt(2), -2 phi(2) at 2
    x = torch.tensor([0.0, math.sqrt(2.0), -2.0], dtype=torch.float64)
    phi = lambda t: math.exp(-t * t / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    assert _gelu_second(x).tolist() == pytest.approx([2 * phi(0), 0.0, -2 * phi(2)], abs=1e-15)


def test_derivatives_to_second_order_are_exact():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 10, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(gelu, (x,)) and torch.autograd.gradgradcheck(gelu, (x,))
    logits = torch.randn(5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 3, 6, 3, 1])
    loss = lambda z: cross_entropy(z, target)  # noqa: E731
    assert torch.autograd.gradcheck(loss, (logits,)) and torch.autograd.gradgradcheck(loss, (logits,))
    # against autograd's own second derivatives of the stock ops (float64: equal to rounding)
    v = torch.randn(5, 7, generator=g, dtype=torch.float64)
    assert torch.allclose(hvp(loss, logits, v), hvp(lambda z: F.cross_entropy(z, target), logits, v), atol=1e-15)
    w = torch.randn(4, 10, generator=g, dtype=torch.float64)
    assert torch.allclose(hvp(lambda z: gelu(z).pow(2).sum(), x, w), hvp(lambda z: F.gelu(z).pow(2).sum(), x, w),
                          rtol=1e-12, atol=1e-14)


def test_per_example_gradients_under_vmap():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 8, generator=g, requires_grad=True)
    per_row = torch.func.vmap(torch.func.grad(lambda r: gelu(r).sum()))(x.detach())
    assert torch.equal(per_row, torch.autograd.grad(F.gelu(x).sum(), x)[0])


def test_the_model_picks_its_operators_by_mode():
    """Native (``GPT(cfg)``): torch's stock GELU and cross-entropy. Portable (``portable_ops=True``): the
    ones above. The same weights, the same training update to the bit, and Hessian-vector products equal
    to float rounding."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from stages.models import vendor_neutral_ops
    from stages.models.gpt import GPT, GPTConfig
    from stages.training.loop import answer_loss, make_optimizer, update

    cfg = GPTConfig(vocab_size=19, block_size=16, n_layer=2, n_head=4, d_model=32)
    models = []
    for portable in (False, True):
        torch.manual_seed(0)
        models.append(GPT(cfg, portable_ops=portable))
    native, portable = models
    assert type(native.blocks[0].mlp[1]) is torch.nn.GELU
    assert type(portable.blocks[0].mlp[1]) is vendor_neutral_ops.GELU
    batch = torch.randint(0, 19, (8, 16), generator=torch.Generator().manual_seed(1))
    for model in models:
        opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.98))
        update(model, opt, batch, 8, 1.0)
    for (name, a), (_, b) in zip(native.state_dict().items(), portable.state_dict().items()):
        assert torch.equal(a, b), name
    v = [torch.randn(p.shape, generator=torch.Generator().manual_seed(2)) for p in native.parameters()]

    def hvp_of(model):
        params = list(model.parameters())
        with sdpa_kernel(SDPBackend.MATH):  # as stages/measures/hessian.py: fused attention has no double backward
            grads = torch.autograd.grad(answer_loss(model, batch, 8), params, create_graph=True)
            return torch.autograd.grad(sum((g * w).sum() for g, w in zip(grads, v)), params)

    for a, b in zip(hvp_of(native), hvp_of(portable)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
