"""Top Hessian eigenvalues of the answer loss by Lanczos on Hessian-vector products.

The Hessian of the mean answer loss on a fixed batch, with respect to all trainable parameters,
is never formed: a :class:`scipy.sparse.linalg.LinearOperator` applies it to a vector by double
backpropagation (``d/dw <grad L(w), v>``), and ``scipy.sparse.linalg.eigsh(which='LA')`` (implicitly
restarted Lanczos, ARPACK) returns the ``k`` algebraically largest eigenvalues. The start vector is
seeded, so results are deterministic.

**Repeats.** Lanczos can stop on a Ritz value that satisfies the tolerance but belongs to a lower
eigenvalue when the top ones are close or the start vector barely overlaps the top eigenvector
(seen as a top eigenvalue of 1018.7 with one thread count and 579.6 with another at the same
checkpoint). :func:`hessian_top_eigenvalues_repeated` runs Lanczos from ``repeats`` seeded start
vectors on the same Hessian and keeps, per rank, the largest value (the ``i``-th Ritz value never
exceeds the ``i``-th eigenvalue, so the largest is the best estimate); ``spread`` (largest minus
smallest top value over the repeats) measures the solver's own variability.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh
from torch.nn.attention import SDPBackend, sdpa_kernel


def hvp_operator(loss_fn: Callable[[], torch.Tensor], params: list[torch.Tensor]) -> LinearOperator:
    """``LinearOperator`` ``v -> H v`` for the Hessian of ``loss_fn()`` in ``params``."""
    with sdpa_kernel(SDPBackend.MATH):  # fused CPU/GPU attention kernels have no double backward
        loss = loss_fn()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    flat_grad = torch.cat([g.reshape(-1) for g in grads])
    n = flat_grad.numel()
    dtype, device = flat_grad.dtype, flat_grad.device

    def matvec(v):
        vec = torch.as_tensor(np.asarray(v).reshape(-1), dtype=dtype, device=device)
        hv = torch.autograd.grad(flat_grad @ vec, params, retain_graph=True, allow_unused=True)
        out = torch.cat([(h if h is not None else torch.zeros_like(p)).reshape(-1) for h, p in zip(hv, params)])
        return out.detach().cpu().double().numpy()

    return LinearOperator((n, n), matvec=matvec, dtype=np.float64)


def top_eigenvalues(operator: LinearOperator, k: int = 1, tol: float = 1e-3, maxiter: int | None = None,
                    seed: int = 0, ncv: int = 8) -> np.ndarray:
    """``k`` largest (algebraic) eigenvalues, descending; ``ncv`` Lanczos vectors per restart
    (at least ``2k + 2``). If ARPACK stops after ``maxiter`` restarts before all ``k`` converged,
    the converged ones are returned and the rest are NaN (never an unconverged guess)."""
    n = operator.shape[0]
    if not 1 <= k < n:
        raise ValueError(f"k must lie in [1, {n - 1}], got {k}")
    v0 = np.random.default_rng(seed).standard_normal(n)
    try:
        vals = eigsh(operator, k=k, which="LA", tol=tol, maxiter=maxiter, v0=v0, return_eigenvectors=False,
                     ncv=min(n, max(2 * k + 2, ncv)))
    except ArpackNoConvergence as exc:
        vals = np.asarray(exc.eigenvalues, dtype=float)
    out = np.full(k, np.nan)
    out[:len(vals)] = np.sort(vals)[::-1]
    return out


def hessian_top_eigenvalues_repeated(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module], torch.Tensor],
                                     k: int = 1, tol: float = 1e-3, maxiter: int | None = None, seed: int = 0,
                                     repeats: int = 2) -> tuple[np.ndarray, float]:
    """``(top-k eigenvalues, spread of the top one)`` over ``repeats`` start vectors (seeds ``seed``,
    ``seed + 1``, ...) on one Hessian; see the module docstring. Spread is NaN when fewer than two
    repeats converged."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    operator = hvp_operator(lambda: loss_fn(model), params)
    runs = np.array([top_eigenvalues(operator, k=k, tol=tol, maxiter=maxiter, seed=seed + r) for r in range(repeats)])
    best = np.fmax.reduce(runs, axis=0)  # per rank, the largest converged value (NaN only if none converged)
    top = runs[:, 0][~np.isnan(runs[:, 0])]
    spread = float(top.max() - top.min()) if len(top) >= 2 else float("nan")
    return best, spread
