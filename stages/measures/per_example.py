"""Per-example gradients of the answer loss, flattened into a matrix ``G`` of shape ``[n, P]``.

Computed with ``torch.func`` (``functional_call`` + ``vmap`` + ``grad``) in chunks of examples.
With ``sketch_dim > 0`` every row is compressed by a seeded CountSketch (each parameter
coordinate goes to one of ``sketch_dim`` buckets with a random sign; a sparse Johnson-Lindenstrauss
projection that preserves inner products in expectation), so memory is ``n * sketch_dim`` however
large the model is, and the hashing itself needs only ``O(P)`` memory instead of a dense
``P x sketch_dim`` Gaussian matrix.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel


def named_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Trainable parameters by name (tied weights appear once)."""
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in named_params(model).values())


def per_example_loss_fn(model: torch.nn.Module, prompt_len: int):
    """``f(params, seq_row) -> scalar answer loss`` for one sequence, for use under ``vmap``."""

    def loss(params, row):
        logits = functional_call(model, params, (row[None, :-1],), {"start": prompt_len - 1})[0]
        return F.cross_entropy(logits, row[prompt_len:])

    return loss


class CountSketch:
    """Seeded sparse random projection ``R^P -> R^k``: ``y[h(i)] += s(i) x[i]``."""

    def __init__(self, dim_in: int, dim_out: int, seed: int = 0, device="cpu"):
        gen = torch.Generator().manual_seed(seed)
        self.bucket = torch.randint(0, dim_out, (dim_in,), generator=gen).to(device)
        self.sign = (torch.randint(0, 2, (dim_in,), generator=gen) * 2 - 1).to(device, torch.float32)
        self.dim_out = dim_out

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(rows.shape[0], self.dim_out, dtype=rows.dtype, device=rows.device)
        return out.index_add_(1, self.bucket, rows * self.sign.to(rows.dtype))


def per_example_gradients(model: torch.nn.Module, seq: torch.Tensor, prompt_len: int, chunk: int = 32,
                          sketch_dim: int = 0, seed: int = 0, progress_bar=None) -> torch.Tensor:
    """``[n, P]`` (or ``[n, sketch_dim]``) matrix of per-example answer-loss gradients at ``model``'s weights."""
    model.eval()
    params = named_params(model)
    loss = per_example_loss_fn(model, prompt_len)
    g_fn = vmap(grad(loss), in_dims=(None, 0))
    total = sum(p.numel() for p in params.values())
    sketch = CountSketch(total, sketch_dim, seed, seq.device) if sketch_dim else None
    rows = []
    # The math attention backend decomposes into batched ops that vmap handles natively; the fused
    # kernels fall back to a slow per-example loop (and warn).
    with warnings.catch_warnings(), sdpa_kernel(SDPBackend.MATH):
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        for start in range(0, len(seq), chunk):
            grads = g_fn(params, seq[start:start + chunk])
            flat = torch.cat([grads[n].reshape(grads[n].shape[0], -1) for n in params], dim=1)
            rows.append(sketch(flat) if sketch is not None else flat)
    return torch.cat(rows).detach()
