"""Gradient effective rank: RankMe of the per-example gradient matrix.

For per-example gradients ``G`` (``[n, P]``, or its ``[n, k]`` CountSketch projection, see
:mod:`stages.measures.per_example`), the gradient effective rank is the RankMe entropy effective
rank (:mod:`stages.measures.rankme`) of ``G``'s singular values: ``exp(H(p))`` with
``p_k = s_k / sum(s)``. It counts how many directions the examples' gradients spread over; ``r``
orthogonal gradients of equal norm give ``r``. At most ``min(n, P)``.
"""
from __future__ import annotations

import numpy as np
import torch

from stages.measures.rankme import rankme_from_singular_values


def singular_values(grads: torch.Tensor, centre: bool = False) -> np.ndarray:
    """Singular values (descending) of ``G`` (``[n, P]``, ``n << P``) from its ``n x n`` Gram matrix in
    float64: ``s = sqrt(eig(G G^T))``, far cheaper than an SVD of the wide matrix."""
    g = grads.detach().to(torch.float64)
    if centre:
        g = g - g.mean(dim=0, keepdim=True)
    eig = torch.linalg.eigvalsh(g @ g.T).cpu().numpy()[::-1]
    return np.sqrt(np.clip(eig, 0.0, None))


def gradient_effective_rank(grads: torch.Tensor) -> float:
    """RankMe effective rank of the (uncentred) per-example gradient matrix ``[n, P]``."""
    return rankme_from_singular_values(singular_values(grads))
