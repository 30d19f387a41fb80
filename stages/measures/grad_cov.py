"""Gradient covariance rank: numerical rank of the covariance of per-example gradients.

Definition: with per-example gradients ``g_1..g_n`` (rows of ``G``; optionally CountSketch-projected),
the gradient covariance is ``C = (G - mean)^T (G - mean) / (n - 1)``. Its eigenvalues are
``s_k^2 / (n - 1)`` for the singular values ``s_k`` of the centred matrix, so no ``P x P`` matrix is
formed (they come from the ``n x n`` Gram matrix of the centred rows). The **gradient covariance rank** is the number of eigenvalues ``lambda_k`` with
``lambda_k > rtol * lambda_max`` (``rtol`` = ``landscape.gradcov_rtol``). It is at most ``n - 1``;
a zero covariance has rank 0.
"""
from __future__ import annotations

import numpy as np
import torch

from stages.measures.grad_rank import singular_values


def covariance_eigenvalues(grads: torch.Tensor) -> np.ndarray:
    """Eigenvalues (descending) of the centred per-example gradient covariance."""
    if grads.shape[0] < 2:
        raise ValueError("the gradient covariance needs at least 2 examples")
    return singular_values(grads, centre=True) ** 2 / (grads.shape[0] - 1)


def gradient_covariance_rank(grads: torch.Tensor, rtol: float = 1e-3) -> int:
    """Count of covariance eigenvalues above ``rtol`` times the largest."""
    eig = covariance_eigenvalues(grads)
    if eig.size == 0 or eig[0] <= 0:
        return 0
    return int((eig > rtol * eig[0]).sum())
