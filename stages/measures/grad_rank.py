"""Gradient effective rank: RankMe of the per-example gradient matrix.

For per-example gradients ``G`` (``[n, P]``, or its ``[n, k]`` CountSketch projection, see
:mod:`stages.measures.per_example`), the gradient effective rank is the RankMe entropy effective
rank (:mod:`stages.measures.rankme`) of ``G``'s singular values: ``exp(H(p))`` with
``p_k = s_k / sum(s)``. It counts how many directions the examples' gradients spread over; ``r``
orthogonal gradients of equal norm give ``r``. At most ``min(n, P)`` (:func:`effective_rank_cap`).

The singular values come from the ``n x n`` Gram matrix ``G G^T`` (:func:`gram_matrix`), never
from an SVD of the wide matrix. For float32 gradients the Gram matrix is formed from float32
products over column blocks of ``GRAM_BLOCK`` parameters, accumulated in float64: ten times
cheaper than a float64 product on one CPU thread, with a relative error of order 1e-7 of the
largest eigenvalue (far below the ``cov_rtol`` threshold and RankMe's ``eps``). Float64 gradients
are multiplied in float64. The stage forms the Gram matrices once per checkpoint and passes them
to both gradient measures.
"""
from __future__ import annotations

import numpy as np
import torch

from stages.measures.rankme import rankme_from_singular_values

GRAM_BLOCK = 1 << 15  # parameters per float32 block product


def gram_matrix(grads: torch.Tensor, centre: bool = False) -> np.ndarray:
    """``G G^T`` (float64 numpy, ``[n, n]``) of ``grads`` ``[n, P]``; ``centre`` subtracts the mean
    row first (the Gram matrix of the centred gradients)."""
    g = grads.detach()
    if g.dtype == torch.float64:
        if centre:
            g = g - g.mean(dim=0, keepdim=True)
        return (g @ g.T).cpu().numpy()
    g = g.to(torch.float32)
    out = torch.zeros(g.shape[0], g.shape[0], dtype=torch.float64, device=g.device)
    for start in range(0, g.shape[1], GRAM_BLOCK):
        block = g[:, start:start + GRAM_BLOCK]
        if centre:  # the mean accumulated in float64: identical rows centre to exactly zero
            block = block - torch.mean(block, dim=0, keepdim=True, dtype=torch.float64).float()
        out += (block @ block.T).double()
    return out.cpu().numpy()


def singular_values_from_gram(gram: np.ndarray) -> np.ndarray:
    """Singular values (descending) of ``G`` from its Gram matrix: ``sqrt(eig(G G^T))``."""
    eig = np.linalg.eigvalsh((gram + gram.T) / 2)[::-1]
    return np.sqrt(np.clip(eig, 0.0, None))


def effective_rank_cap(n_samples: int, n_columns: int) -> int:
    """Largest possible gradient effective rank: ``min(samples, columns of G)``."""
    return int(min(n_samples, n_columns))


def gradient_effective_rank(grads: torch.Tensor | None = None, gram: np.ndarray | None = None) -> float:
    """RankMe effective rank of the (uncentred) per-example gradient matrix ``[n, P]``, or of the
    matrix whose (uncentred) Gram matrix is ``gram``."""
    if gram is None:
        gram = gram_matrix(grads)
    return rankme_from_singular_values(singular_values_from_gram(gram))
