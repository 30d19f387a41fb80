"""GELU and log-softmax whose second derivatives run on torch's own kernels, not on MKL's vector math.

Autograd's double backward of ``gelu`` and of ``log_softmax`` (a Hessian-vector product, the
landscape stage) calls ``torch.exp``, which on the CPU goes to MKL's vector math (VML), whose kernels
give other bits on an AMD CPU than on an Intel one (stages/numerics.py). Here the forward and first
backward are the very kernels torch runs for ``F.gelu`` and ``F.cross_entropy`` (the same bits: a
training update is unchanged), and the second derivatives are written with ``exp2`` and ``softmax``,
whose CPU kernels are torch's own:

* GELU ``g(x) = x Phi(x)``: ``g'`` is ATen's ``gelu_backward``; ``g''(x) = (2 - x^2) phi(x)`` with
  ``phi(x) = 2^(-x^2 / (2 ln 2)) / sqrt(2 pi)``.
* log-softmax ``y = x - logsumexp(x)``: its backward ``b = u - p sum(u)`` with ``p = softmax(x)`` is
  ATen's ``_log_softmax_backward_data``; differentiated again, ``d/du = v - sum(v p)`` and
  ``d/dp = -v sum(u)``, and ``p``'s own derivative is ``softmax``'s.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_HALF_LOG2E = 0.5 / math.log(2.0)


def _gelu_second(x: torch.Tensor) -> torch.Tensor:
    """``d^2/dx^2 (x Phi(x)) = (2 - x^2) phi(x)``, with the Gaussian density through ``exp2``."""
    x2 = x * x
    return (2.0 - x2) * torch.exp2(-x2 * _HALF_LOG2E) * _INV_SQRT_2PI


class _GeluGrad(torch.autograd.Function):
    """``gelu_backward(u, x) = u g'(x)``, differentiable in ``u`` and ``x``."""
    generate_vmap_rule = True  # per-example gradients (stages/measures/per_example.py) run under vmap

    @staticmethod
    def forward(u, x):
        return torch.ops.aten.gelu_backward(u, x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, v):
        u, x = ctx.saved_tensors
        return _GeluGrad.apply(v, x), v * u * _gelu_second(x)


class _Gelu(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return F.gelu(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, u):
        (x,) = ctx.saved_tensors
        return _GeluGrad.apply(u, x)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact (erf) GELU: the bits of ``F.gelu`` and of its gradient; second derivative off VML."""
    return _Gelu.apply(x)


class GELU(nn.Module):
    """``nn.GELU()`` (exact) through :func:`gelu`."""

    def forward(self, x):
        return gelu(x)


class _LogSoftmaxGrad(torch.autograd.Function):
    """``u - softmax(x) sum(u)`` over the last dim (ATen's kernel, from ``y = log_softmax(x)``),
    differentiable in ``u`` and ``x``."""
    generate_vmap_rule = True

    @staticmethod
    def forward(u, y, x):
        return torch.ops.aten._log_softmax_backward_data(u, y, -1, y.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        u, _, x = inputs
        ctx.save_for_backward(u, x)

    @staticmethod
    def backward(ctx, v):
        u, x = ctx.saved_tensors
        p = torch.softmax(x, dim=-1)
        d_u = v - (v * p).sum(dim=-1, keepdim=True)
        d_p = -v * u.sum(dim=-1, keepdim=True)
        d_x = p * (d_p - (d_p * p).sum(dim=-1, keepdim=True))  # softmax's vector-Jacobian product
        return d_u, None, d_x


class _LogSoftmax(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.log_softmax(x, dim=-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output, inputs[0])

    @staticmethod
    def backward(ctx, u):
        y, x = ctx.saved_tensors
        return _LogSoftmaxGrad.apply(u, y, x)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """``F.cross_entropy`` over ``[N, C]`` logits (its bits and its gradient's); second derivative off VML."""
    return F.nll_loss(_LogSoftmax.apply(logits), target, reduction=reduction)
