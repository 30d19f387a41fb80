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


CHUNK_BYTES = 1 << 30  # float32 input per batched SVD call; the SVD workspace is of the same order


def rankme_batched(z: torch.Tensor, device: torch.device | str | None = None, chunk: int | None = None) -> torch.Tensor:
    """RankMe of a stack ``[batch, n, d]`` (float32 SVD, float64 entropy), computed on ``device``
    (default: ``z``'s) in chunks of ``chunk`` matrices, by default as many as fit ``CHUNK_BYTES``, so
    GPU memory stays bounded however many layers/checkpoints are stacked. Each matrix's value does
    not depend on the chunking. Returns a float64 tensor on ``device``."""
    device = torch.device(device) if device is not None else z.device
    if z.dim() != 3:
        raise ValueError(f"rankme_batched expects [batch, n, d], got shape {tuple(z.shape)}")
    if chunk is None:
        chunk = max(1, CHUNK_BYTES // max(1, z.shape[1] * z.shape[2] * 4))
    out = []
    for start in range(0, z.shape[0], chunk):
        part = z[start:start + chunk].to(device=device, dtype=torch.float32)
        s = torch.linalg.svdvals(part).double()
        p = s / s.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny) + EPS
        out.append(torch.exp(-(p * p.log()).sum(dim=-1)))
    return torch.cat(out) if out else torch.empty(0, dtype=torch.float64, device=device)
