"""Linear probes: multinomial logistic regression (scikit-learn), scored by held-out accuracy.

One estimator for every model size: features are standardised with the training rows' statistics
and fed to ``LogisticRegression`` (L2 penalty, lbfgs, softmax over the classes seen in training),
with the same fixed settings whether the hidden width ``d`` is above or below the number of
training rows ``n``.
"""
from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

TOL = 1e-4  # lbfgs stops when the largest gradient entry of the (row-averaged) objective is below this
# BLAS threads of one fit. The probe's matrices are small (a few hundred rows x the hidden width):
# a multi-threaded OpenBLAS spends more time handing work between threads than computing, and next
# to torch's OpenMP threads a fit took 12x longer with 2 threads than with 1 (benchmarks/machine_limits.py).
# One thread also makes the fit independent of the machine's thread settings.
BLAS_THREADS = 1


def make_probe(n_train: int, C: float = 10.0, max_iter: int = 50) -> Pipeline:
    """The unfitted probe: ``StandardScaler`` then ``LogisticRegression``.

    ``C`` is the inverse L2 strength per training row: the probe minimises
    ``mean log-loss + ||W||^2 / (2 C)`` (intercepts unpenalised), i.e. scikit-learn's
    ``C / n_train``, so one ``C`` means the same penalty whatever the probe-set size. Nothing here
    depends on the feature width. lbfgs is deterministic, and with three or more classes it fits
    the multinomial (softmax) model (scikit-learn's default for lbfgs; two classes give the
    equivalent binary model).
    """
    if n_train < 1:
        raise ValueError(f"probe needs at least one training row, got {n_train}")
    if not (C > 0 and np.isfinite(C)):
        raise ValueError(f"probe C must be a positive finite number, got {C!r}")
    if max_iter < 1:
        raise ValueError(f"probe max_iter must be a positive integer, got {max_iter!r}")
    return Pipeline([
        ("scale", StandardScaler()),
        ("logreg", LogisticRegression(C=C / n_train, solver="lbfgs", tol=TOL, max_iter=int(max_iter),
                                      random_state=0)),
    ])


def probe_accuracy(x: np.ndarray, y: np.ndarray, train_mask: np.ndarray, C: float = 10.0,
                   max_iter: int = 50) -> float:
    """Fit the probe of :func:`make_probe` on ``x[train_mask]`` and return accuracy on the rest.

    A test row whose class never appears in the training rows counts as a miss; if the training
    rows hold a single class, that class is predicted for every test row. ``max_iter`` caps the
    lbfgs iterations (and so the time per fit): a probe that hits the cap is scored as it stands,
    and the ``ConvergenceWarning`` scikit-learn would emit is silenced, inside this call only, so
    one probe per (checkpoint, layer) does not flood the logs.

    Raises ``ValueError`` when ``x`` holds a non-finite value, when ``train_mask`` is not a boolean
    mask with one entry per row, or when either side of the split is empty.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    train_mask = np.asarray(train_mask)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"probe needs features (rows, dims) and one label per row, got {x.shape} and {y.shape}")
    if train_mask.dtype != bool or train_mask.shape != (len(x),):
        raise ValueError(f"probe train_mask must be a boolean mask of {len(x)} rows, "
                         f"got dtype {train_mask.dtype} and shape {train_mask.shape}")
    if not np.isfinite(x).all():
        bad = np.unique(np.nonzero(~np.isfinite(x))[0])
        raise ValueError(f"probe features hold non-finite values (NaN or inf) in {len(bad)} of {len(x)} rows "
                         f"(first: row {bad[0]})")
    test_mask = ~train_mask
    if train_mask.sum() == 0 or test_mask.sum() == 0:
        raise ValueError("probe needs rows on both sides of the split")
    xtr, ytr, xte, yte = x[train_mask], y[train_mask], x[test_mask], y[test_mask]
    classes = np.unique(ytr)
    if len(classes) == 1:  # logistic regression needs two classes; the only sensible guess is the one seen
        return float((yte == classes[0]).mean())
    probe = make_probe(len(xtr), C, max_iter)
    with warnings.catch_warnings(), threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        probe.fit(xtr, ytr)
    return float((probe.predict(xte) == yte).mean())


def split_mask(samples: np.ndarray, train_fraction: float) -> np.ndarray:
    """Deterministic split by probe-set row: the first ``train_fraction`` of samples train."""
    unique = np.unique(samples)
    cut = unique[int(round(train_fraction * len(unique)))] if train_fraction < 1 else unique[-1] + 1
    return samples < cut
