"""RankMe (Garrido et al., 2023): the exponential of the entropy of the normalised singular values.

    p_k = s_k / sum(s) + eps,   RankMe(Z) = exp(-sum_k p_k log p_k),   eps = 1e-7

computed on the raw (uncentred) embedding matrix ``Z`` of shape ``[n_samples, dim]``. It is a
smooth effective rank: ``r`` equal non-zero singular values give ``r``.

Raw RankMe counts the mean state as a direction: when one shared direction dominates every sample
(``mean_dominance`` near 1), raw RankMe drops even if the states still vary in many directions.
**Centred RankMe** is RankMe of ``Z - mean(Z)``, the geometry of the variation across samples
alone. ``mean_dominance = |mean(Z)| / sqrt(mean_i |z_i|^2)`` (in [0, 1]; 1 = every sample equals
the mean) tells which of the two a change in raw RankMe comes from. A layer whose states do not
vary across samples (``variance_share = 1 - mean_dominance^2 <= CONSTANT_SHARE``, e.g. the
embedding of a fixed ``=`` token) has no centred geometry: its centred RankMe is NaN.
"""
from __future__ import annotations

import math

import numpy as np
import torch

EPS = 1e-7
CONSTANT_SHARE = 1e-6  # variance share at or below which a layer's states count as input-independent


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


def rankme_batched(z: torch.Tensor, device: torch.device | str | None = None, chunk: int | None = None,
                   centre: bool = False, portable: bool = False) -> torch.Tensor:
    """RankMe of a stack ``[batch, n, d]`` (float32 SVD, float64 entropy), computed on ``device``
    (default: ``z``'s) in chunks of ``chunk`` matrices, by default as many as fit ``CHUNK_BYTES``, so
    GPU memory stays bounded however many layers/checkpoints are stacked. Each matrix's value does
    not depend on the chunking. ``centre`` subtracts each matrix's mean row first (centred RankMe).
    ``portable`` (``runtime.cpu_paths: portable``) takes the entropy as a product of powers, off MKL's
    vector math (whose ``exp`` and ``log`` bits differ by CPU vendor; stages/numerics.py).
    Returns a float64 tensor on ``device``."""
    device = torch.device(device) if device is not None else z.device
    if z.dim() != 3:
        raise ValueError(f"rankme_batched expects [batch, n, d], got shape {tuple(z.shape)}")
    if chunk is None:
        chunk = max(1, CHUNK_BYTES // max(1, z.shape[1] * z.shape[2] * 4))
    out = []
    for start in range(0, z.shape[0], chunk):
        part = z[start:start + chunk].to(device=device, dtype=torch.float32)
        if centre:
            part = part - part.mean(dim=1, keepdim=True)
        s = torch.linalg.svdvals(part).double()
        p = s / s.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny) + EPS
        if portable:  # exp(-sum p ln p) as prod p^-p: pow runs on torch's own kernels
            out.append(torch.pow(p, -p).prod(dim=-1))
        else:
            out.append(torch.exp(-(p * p.log()).sum(dim=-1)))
    return torch.cat(out) if out else torch.empty(0, dtype=torch.float64, device=device)


def mean_dominance(z: torch.Tensor) -> torch.Tensor:
    """``|mean(Z)| / sqrt(mean_i |z_i|^2)`` of each matrix of a stack ``[batch, n, d]`` (float64);
    0 for an all-zero matrix."""
    z = z.to(torch.float64)
    mean_norm = z.mean(dim=1).norm(dim=-1)
    rms = torch.linalg.vector_norm(z, dim=(1, 2)) / math.sqrt(z.shape[1])  # not .sqrt(): MKL's vector math
    return torch.where(rms > 0, mean_norm / rms.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(rms))


def varies(dominance) -> np.ndarray:
    """Whether states vary across samples: variance share ``1 - dominance^2`` above CONSTANT_SHARE."""
    d = np.asarray(dominance, dtype=np.float64)
    return (1.0 - d * d) > CONSTANT_SHARE


def geometry(stack: torch.Tensor, device=None, chunk: int | None = None, portable: bool = False) -> dict[str, np.ndarray]:
    """Per matrix of ``stack`` ``[batch, n, d]``: ``rankme`` (raw), ``rankme_centred`` (NaN where the
    states do not vary), ``mean_dominance`` and ``varies`` (numpy arrays of length ``batch``).
    ``portable``: as :func:`rankme_batched`'s."""
    raw = rankme_batched(stack, device=device, chunk=chunk, portable=portable).cpu().numpy()
    centred = rankme_batched(stack, device=device, chunk=chunk, centre=True, portable=portable).cpu().numpy()
    dominance = mean_dominance(stack).cpu().numpy()
    varying = varies(dominance)
    return {"rankme": raw, "rankme_centred": np.where(varying, centred, np.nan),
            "mean_dominance": dominance, "varies": varying}
