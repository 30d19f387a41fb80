"""RankMe (Garrido et al., 2023): the exponential of the entropy of the normalised singular values.

    p_k = s_k / sum(s) + eps,   RankMe(Z) = exp(-sum_k p_k log p_k),   eps = 1e-7

computed on the raw (uncentred) embedding matrix ``Z`` of shape ``[n_samples, dim]``. It is a
smooth effective rank: ``r`` equal non-zero singular values give ``r``.
"""
from __future__ import annotations

import numpy as np
import torch

EPS = 1e-7


def rankme_from_singular_values(s) -> float:
    s = np.asarray(s, dtype=np.float64)
    total = s.sum()
    if total <= 0:
        return 1.0
    p = s / total + EPS
    return float(np.exp(-(p * np.log(p)).sum()))


def rankme(z) -> float:
    """RankMe of one matrix (numpy array or torch tensor, rows are samples)."""
    if isinstance(z, torch.Tensor):
        s = torch.linalg.svdvals(z.detach().to(torch.float64)).cpu().numpy()
    else:
        s = np.linalg.svd(np.asarray(z, dtype=np.float64), compute_uv=False)
    return rankme_from_singular_values(s)


def rankme_batched(z: torch.Tensor) -> torch.Tensor:
    """RankMe of a stack ``[batch, n, d]`` in one call, on ``z``'s device (float32 SVD, float64 entropy)."""
    s = torch.linalg.svdvals(z.float()).double()
    p = s / s.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny) + EPS
    return torch.exp(-(p * p.log()).sum(dim=-1))
