"""Logistic-regression probes (stages/measures/probes.py): known answers, one estimator at every width."""
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from stages.measures import probes
from stages.measures.probes import make_probe, probe_accuracy, split_mask


def separable(n_per_class: int, k: int, d: int, seed: int = 0):
    """Class means drawn with sd 3 per feature, noise sd 1: linearly separable with a wide margin
    at any width (the signal is spread over all features, as in hidden states)."""
    rng = np.random.default_rng(seed)
    y = np.tile(np.arange(k), n_per_class)
    x = 3.0 * rng.normal(size=(k, d))[y] + rng.normal(size=(len(y), d))
    return x, y


def alternate(n: int) -> np.ndarray:
    return np.arange(n) % 2 == 0


def first_half(n: int) -> np.ndarray:
    return np.arange(n) < n // 2


@pytest.mark.parametrize("d", [8, 200])  # d < n_train and d > n_train (60 training rows)
def test_separable_data_is_probed_perfectly(d):
    x, y = separable(n_per_class=30, k=4, d=d)
    assert probe_accuracy(x, y, first_half(len(y))) == 1.0


def test_independent_labels_score_chance():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 100)  # balanced: 100 per class, 50 per class on each side
    x = rng.normal(size=(400, 16))
    acc = probe_accuracy(x, y, alternate(400))
    assert abs(acc - 0.25) < 0.08
    assert acc == 0.23  # exact for this seed (46 of 200): a changed estimator changes it


def test_same_estimator_whatever_the_width(monkeypatch):
    made = []

    def recording(*args, **kwargs):
        made.append(make_probe(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(probes, "make_probe", recording)
    for d in (8, 200):  # 60 training rows: d < n, then d > n
        x, y = separable(n_per_class=30, k=4, d=d)
        probe_accuracy(x, y, first_half(len(y)), C=3.0, max_iter=40)
    assert len(made) == 2
    for probe, d in zip(made, (8, 200)):
        assert isinstance(probe, Pipeline)
        assert [type(step) for _, step in probe.steps] == [StandardScaler, LogisticRegression]
        assert probe[-1].coef_.shape == (4, d)  # fitted, one row per class (softmax)
    params = [{k: v for k, v in p.get_params().items() if "__" in k} for p in made]
    assert params[0] == params[1]
    lr = made[0][-1]
    assert (lr.solver, lr.tol, lr.max_iter, lr.fit_intercept) == ("lbfgs", probes.TOL, 40, True)
    assert lr.C == pytest.approx(3.0 / 60)  # per-row C: scikit-learn's C / n_train


def test_make_probe_scales_c_by_training_rows_only():
    assert make_probe(100, C=5.0, max_iter=7)[-1].C == pytest.approx(0.05)
    assert make_probe(10, C=5.0, max_iter=7)[-1].C == pytest.approx(0.5)
    with pytest.raises(ValueError):
        make_probe(10, C=0.0)
    with pytest.raises(ValueError):
        make_probe(0)


def test_class_seen_only_in_test_is_a_miss():
    x, y = separable(n_per_class=30, k=3, d=6)
    train = first_half(len(y)) & (y != 2)  # class 2 is never trained on
    acc = probe_accuracy(x, y, train)
    test_y = y[~train]
    assert acc == pytest.approx((test_y != 2).sum() / len(test_y))  # all of classes 0, 1 right; all of 2 wrong
    assert acc == pytest.approx(30 / 60)


def test_single_training_class_is_predicted():
    x, y = separable(n_per_class=10, k=2, d=4)
    train = (y == 1) & first_half(len(y))  # 5 rows, all class 1
    acc = probe_accuracy(x, y, train)
    assert acc == pytest.approx((y[~train] == 1).mean()) == pytest.approx(5 / 15)


def test_deterministic():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(300, 24)), rng.integers(0, 10, 300)
    mask = alternate(300)
    assert probe_accuracy(x, y, mask) == probe_accuracy(x.copy(), y.copy(), mask.copy())


def test_convergence_warning_stays_inside():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(200, 32)), rng.integers(0, 5, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        acc = probe_accuracy(x, y, alternate(200), max_iter=1)  # cannot converge in one step
    assert 0.0 <= acc <= 1.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_features_raise(bad):
    x, y = separable(n_per_class=5, k=2, d=3)
    x[7, 1] = bad
    with pytest.raises(ValueError, match="non-finite"):
        probe_accuracy(x, y, alternate(len(y)))


def test_empty_side_of_split_raises():
    x, y = separable(n_per_class=5, k=2, d=3)
    with pytest.raises(ValueError, match="both sides"):
        probe_accuracy(x, y, np.ones(len(y), dtype=bool))
    with pytest.raises(ValueError, match="both sides"):
        probe_accuracy(x, y, np.zeros(len(y), dtype=bool))


def test_mask_must_be_boolean_per_row():
    x, y = separable(n_per_class=5, k=2, d=3)
    with pytest.raises(ValueError, match="boolean"):
        probe_accuracy(x, y, alternate(len(y)).astype(int))
    with pytest.raises(ValueError, match="boolean"):
        probe_accuracy(x, y, alternate(len(y) + 1))


def test_split_mask_takes_first_fraction_of_samples():
    samples = np.repeat(np.arange(10), 2)  # two rows (positions) per sample
    mask = split_mask(samples, 0.5)
    assert mask.tolist() == (samples < 5).tolist()
    assert split_mask(samples, 1.0).all()


def test_fit_runs_on_one_blas_thread_and_restores_the_limit(monkeypatch):
    """Small probe matrices are 12x slower on two OpenBLAS threads next to torch's OpenMP pool
    (benchmarks/machine_limits.py): the fit must see one BLAS thread, and the caller's setting comes back."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    seen = []
    real_fit = Pipeline.fit

    def recording_fit(self, *args, **kwargs):
        seen.append(blas_threads())
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "fit", recording_fit)
    x, y = separable(n_per_class=30, k=4, d=8)
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        assert probe_accuracy(x, y, first_half(len(y))) == 1.0
        assert blas_threads() == before
    assert seen == [{probes.BLAS_THREADS}] and probes.BLAS_THREADS == 1
