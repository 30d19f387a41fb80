"""Gradient covariance rank: numerical rank of the covariance of per-example gradients.

Definition: with per-example gradients ``g_1..g_n`` (rows of ``G``; optionally CountSketch-projected),
the gradient covariance is ``C = (G - mean)^T (G - mean) / (n - 1)``. Its eigenvalues are
``s_k^2 / (n - 1)`` for the singular values ``s_k`` of the centred matrix, so no ``P x P`` matrix is
formed (they come from the ``n x n`` Gram matrix of the centred rows, see
:func:`stages.measures.grad_rank.gram_matrix`). The **gradient covariance rank** is the number of
eigenvalues ``lambda_k`` with ``lambda_k > rtol * lambda_max`` (``rtol`` = ``landscape.grad.cov_rtol``).
A zero covariance has rank 0.

**Saturation**: the rank is at most ``n - 1`` (:func:`covariance_rank_cap`). With ``n`` samples far
fewer than parameters the cap is reached whenever the gradients' spread is not confined to fewer
than ``n - 1`` directions at the ``rtol`` level; a value at the cap says only "at least ``n - 1``",
so the stage flags it (``gradcov_saturated``) and the events leave its precursor verdict undetermined.
"""
from __future__ import annotations

import numpy as np
import torch

from stages.measures.grad_rank import gram_matrix


def covariance_rank_cap(n_samples: int) -> int:
    """Largest possible gradient covariance rank: ``n - 1``."""
    return max(int(n_samples) - 1, 0)


def covariance_eigenvalues(grads: torch.Tensor | None = None, centred_gram: np.ndarray | None = None,
                           n_samples: int | None = None) -> np.ndarray:
    """Eigenvalues (descending) of the centred per-example gradient covariance, from ``grads`` or
    from the Gram matrix of the centred gradients (``n_samples`` rows)."""
    if centred_gram is None:
        if grads.shape[0] < 2:
            raise ValueError("the gradient covariance needs at least 2 examples")
        centred_gram, n_samples = gram_matrix(grads, centre=True), grads.shape[0]
    n = int(n_samples if n_samples is not None else centred_gram.shape[0])
    if n < 2:
        raise ValueError("the gradient covariance needs at least 2 examples")
    eig = np.linalg.eigvalsh((centred_gram + centred_gram.T) / 2)[::-1]
    return np.clip(eig, 0.0, None) / (n - 1)


def gradient_covariance_rank(grads: torch.Tensor | None = None, rtol: float = 1e-3,
                             centred_gram: np.ndarray | None = None) -> int:
    """Count of covariance eigenvalues above ``rtol`` times the largest."""
    eig = covariance_eigenvalues(grads, centred_gram)
    if eig.size == 0 or eig[0] <= 0:
        return 0
    return int((eig > rtol * eig[0]).sum())
