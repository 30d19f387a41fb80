"""Linear probes: ridge regression onto one-hot labels, scored by held-out accuracy."""
from __future__ import annotations

import numpy as np


def probe_accuracy(x: np.ndarray, y: np.ndarray, train_mask: np.ndarray, ridge: float = 1e-2) -> float:
    """Fit a ridge classifier on ``x[train_mask]`` and return accuracy on the rest.

    Features are standardised with the training statistics; the penalty is scaled by the number
    of training rows so ``ridge`` is comparable across probe sizes.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    test_mask = ~train_mask
    if train_mask.sum() == 0 or test_mask.sum() == 0:
        raise ValueError("probe needs rows on both sides of the split")
    xtr, ytr = x[train_mask], y[train_mask]
    mean, std = xtr.mean(axis=0), xtr.std(axis=0)
    std[std < 1e-8] = 1.0
    xtr = (xtr - mean) / std
    xte = (x[test_mask] - mean) / std
    classes, codes = np.unique(ytr, return_inverse=True)
    targets = np.eye(len(classes))[codes]
    xtr1 = np.hstack([xtr, np.ones((len(xtr), 1))])
    xte1 = np.hstack([xte, np.ones((len(xte), 1))])
    n, d = xtr1.shape
    penalty = ridge * n * np.eye(d)
    penalty[-1, -1] = 0.0  # no penalty on the bias
    if d <= n:
        w = np.linalg.solve(xtr1.T @ xtr1 + penalty + 1e-9 * np.eye(d), xtr1.T @ targets)
    else:  # dual form when there are more features than rows
        k = xtr1 @ xtr1.T + ridge * n * np.eye(n)
        w = xtr1.T @ np.linalg.solve(k, targets)
    pred = classes[np.argmax(xte1 @ w, axis=1)]
    return float((pred == y[test_mask]).mean())


def split_mask(samples: np.ndarray, train_fraction: float) -> np.ndarray:
    """Deterministic split by probe-set row: the first ``train_fraction`` of samples train."""
    unique = np.unique(samples)
    cut = unique[int(round(train_fraction * len(unique)))] if train_fraction < 1 else unique[-1] + 1
    return samples < cut
