import numpy as np
import pytest
import torch

from stages.measures.rankme import EPS, rankme, rankme_batched, rankme_from_singular_values


def matrix_with_spectrum(s, n=64, d=32, seed=0):
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(n, n)))
    v, _ = np.linalg.qr(rng.normal(size=(d, d)))
    sigma = np.zeros((n, d))
    sigma[: len(s), : len(s)] = np.diag(s)
    return u @ sigma @ v.T


@pytest.mark.parametrize("r", [1, 2, 5, 16, 32])
def test_equal_singular_values_give_their_count(r):
    z = matrix_with_spectrum(np.full(r, 3.0))
    assert rankme(z) == pytest.approx(r, rel=1e-4)


def test_matches_formula_on_known_spectrum():
    s = np.array([4.0, 2.0, 1.0, 1.0])
    full = np.concatenate([s, np.zeros(28)])  # a 64x32 matrix has 32 singular values; zeros add eps terms
    p = full / full.sum() + EPS
    expected = np.exp(-(p * np.log(p)).sum())
    assert rankme(matrix_with_spectrum(s)) == pytest.approx(expected, rel=1e-6)
    assert rankme_from_singular_values(full) == pytest.approx(expected, rel=1e-12)
    assert 1 < expected < 4


def test_scale_invariant_and_bounded():
    z = np.random.default_rng(1).normal(size=(100, 20))
    assert rankme(z) == pytest.approx(rankme(z * 1000), rel=1e-6)
    assert 1 <= rankme(z) <= 20


def test_batched_matches_single_and_torch():
    rng = np.random.default_rng(2)
    stack = np.stack([matrix_with_spectrum(rng.uniform(0.1, 5, size=k)) for k in (3, 10, 32)])
    batched = rankme_batched(torch.as_tensor(stack)).numpy()
    single = [rankme(torch.as_tensor(m)) for m in stack]
    assert np.allclose(batched, single, rtol=1e-4)
    # portable mode's product of powers (runtime.cpu_paths): the same entropy to float64 rounding
    portable = rankme_batched(torch.as_tensor(stack), portable=True).numpy()
    assert np.allclose(portable, batched, rtol=1e-12, atol=0)


def test_zero_matrix_is_rank_one_not_nan():
    assert rankme_from_singular_values(np.zeros(5)) == 1.0
    assert torch.isfinite(rankme_batched(torch.zeros(1, 4, 3))).all()
