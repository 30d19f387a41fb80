"""Landscape measures (issue 4) against exact or known answers; each test takes seconds."""
import numpy as np
import pytest
import torch
from torch.func import functional_call

from stages.measures.grad_cov import covariance_eigenvalues, covariance_rank_cap, gradient_covariance_rank
from stages.measures.grad_rank import GRAM_BLOCK, gradient_effective_rank, gram_matrix
from stages.measures.hessian import hessian_top_eigenvalues_repeated
from stages.measures.llc import default_nbeta, estimate_llc, is_stationary, trace_drift
from stages.measures.per_example import CountSketch, per_example_gradients
from stages.models.gpt import GPT, GPTConfig
from stages.training.loop import answer_loss

PROMPT_LEN = 2


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread is many times faster than several on a busy CI box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_gpt(seed=0, d_model=4):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=4, block_size=3, n_layer=1, n_head=1, d_model=d_model)).eval()


def tiny_batch(n=16, seed=0):
    return torch.randint(0, 4, (n, 4), generator=torch.Generator().manual_seed(seed))


def test_lanczos_matches_exact_hessian_of_tiny_model():
    model, seq = tiny_gpt(d_model=2), tiny_batch()  # 92 parameters
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()

    def loss_of(flat):
        parts, off = {}, 0
        for n, s in zip(names, shapes):
            k = int(np.prod(s))
            parts[n] = flat[off:off + k].view(s).float()
            off += k
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            logits = functional_call(model, parts, (seq[:, :-1],))[:, PROMPT_LEN - 1:]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 4), seq[:, PROMPT_LEN:].reshape(-1))

    exact = torch.autograd.functional.hessian(loss_of, flat0).numpy()
    exact_top = np.sort(np.linalg.eigvalsh((exact + exact.T) / 2))[::-1][:3]
    top = hessian_top_eigenvalues_repeated(model, lambda m: answer_loss(m, seq, PROMPT_LEN), k=3, tol=0, seed=0, repeats=1)[0]
    np.testing.assert_allclose(top, exact_top, rtol=1e-3, atol=1e-5)
    again = hessian_top_eigenvalues_repeated(model, lambda m: answer_loss(m, seq, PROMPT_LEN), k=3, tol=0, seed=0, repeats=1)[0]
    np.testing.assert_array_equal(top, again)
    best, spread = hessian_top_eigenvalues_repeated(model, lambda m: answer_loss(m, seq, PROMPT_LEN), k=3, tol=0,
                                                    seed=0, repeats=3)
    np.testing.assert_allclose(best, exact_top, rtol=1e-3, atol=1e-5)  # converged from every start vector
    assert 0 <= spread < 1e-3 * exact_top[0]
    one, nan_spread = hessian_top_eigenvalues_repeated(model, lambda m: answer_loss(m, seq, PROMPT_LEN), k=1,
                                                       tol=0, seed=0, repeats=1)
    assert one[0] == pytest.approx(exact_top[0], rel=1e-3) and np.isnan(nan_spread)


def test_repeats_keep_the_largest_ritz_value_per_rank():
    from stages.measures import hessian

    runs = iter([np.array([5.0, 1.0]), np.array([9.0, np.nan])])
    original = hessian.top_eigenvalues
    hessian.top_eigenvalues = lambda *a, **k: next(runs)
    try:
        model = tiny_gpt(d_model=2)
        best, spread = hessian_top_eigenvalues_repeated(model, lambda m: answer_loss(m, tiny_batch(), PROMPT_LEN),
                                                        k=2, repeats=2)
    finally:
        hessian.top_eigenvalues = original
    np.testing.assert_array_equal(best, [9.0, 1.0])  # NaN (unconverged) never wins
    assert spread == 4.0


def test_per_example_gradients_match_a_loop_and_sketch_keeps_geometry():
    model, seq = tiny_gpt(), tiny_batch(6)
    grads = per_example_gradients(model, seq, PROMPT_LEN, chunk=4)
    for i in range(len(seq)):
        model.zero_grad()
        answer_loss(model, seq[i:i + 1], PROMPT_LEN).backward()
        ref = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        torch.testing.assert_close(grads[i], ref, atol=1e-6, rtol=1e-4)
    sketch = CountSketch(50_000, 4096, seed=1)
    x = torch.randn(3, 50_000, generator=torch.Generator().manual_seed(2))
    y = sketch(x)
    assert y.shape == (3, 4096)
    gram, sketched = (x @ x.T).numpy(), (y @ y.T).numpy()
    np.testing.assert_allclose(np.diag(sketched), np.diag(gram), rtol=0.1)  # norms kept
    assert np.abs(sketched - gram).max() < 4 * 50_000 / 4096**0.5  # inner products within 4 sd


def test_gradient_effective_rank_of_known_rank():
    basis = torch.linalg.qr(torch.randn(200, 7, generator=torch.Generator().manual_seed(0)))[0].T  # 7 orthonormal rows
    assert gradient_effective_rank(3.0 * basis) == pytest.approx(7, rel=1e-4)  # RankMe's eps
    repeated = torch.cat([basis[:2]] * 5)  # 10 rows spanning 2 equal-strength directions
    assert gradient_effective_rank(repeated) == pytest.approx(2, rel=1e-4)


def test_gradient_covariance_rank_of_known_rank():
    gen = torch.Generator().manual_seed(0)
    mean = 5.0 * torch.randn(1, 300, generator=gen)  # a shared mean direction does not count
    grads = mean + torch.randn(40, 4, generator=gen) @ torch.randn(4, 300, generator=gen)
    assert gradient_covariance_rank(grads, rtol=1e-6) == 4
    assert gradient_covariance_rank(mean.repeat(10, 1)) == 0
    eig = covariance_eigenvalues(grads)
    # float32 block products accumulated in float64 (grad_rank.gram_matrix): ~1e-7 relative
    np.testing.assert_allclose(eig.sum(), torch.var(grads.double(), dim=0).sum().item(), rtol=1e-6)
    exact = covariance_eigenvalues(grads.double())  # float64 input stays float64
    np.testing.assert_allclose(exact.sum(), torch.var(grads.double(), dim=0).sum().item(), rtol=1e-10)
    assert covariance_rank_cap(40) == 39 and gradient_covariance_rank(grads) <= covariance_rank_cap(40)


def test_blocked_float32_gram_matches_float64():
    gen = torch.Generator().manual_seed(3)
    grads = 2.0 + torch.randn(12, 3 * GRAM_BLOCK + 17, generator=gen)  # several blocks and a ragged one
    exact = (grads.double() @ grads.double().T).numpy()
    np.testing.assert_allclose(gram_matrix(grads), exact, rtol=1e-6)
    centred = grads.double() - grads.double().mean(0, keepdim=True)
    np.testing.assert_allclose(gram_matrix(grads, centre=True), (centred @ centred.T).numpy(),
                               atol=1e-6 * np.abs(exact).max())
    assert gradient_effective_rank(grads) == pytest.approx(gradient_effective_rank(gram=exact), rel=1e-6)


class Quadratic(torch.nn.Module):
    """L(w) = 0.5 * sum(a_i w_i^2): a regular minimum in d dimensions, so LLC = d / 2."""

    def __init__(self, a):
        super().__init__()
        self.a = torch.tensor(a)
        self.w = torch.nn.Parameter(torch.zeros(len(a)))


def test_llc_of_a_regular_quadratic_is_half_the_dimension():
    model = Quadratic([1.0, 1.5, 2.0, 3.0])
    loss = lambda m, rows: 0.5 * (m.a * m.w**2).sum()  # noqa: E731
    data = torch.zeros(8, 1)
    res = estimate_llc(model, loss, data, lr=2e-4, gamma=0.0, nbeta=100.0, chains=4, draws=3000, burn_in=500,
                       batch_size=8, seed=0)
    assert res.llc == pytest.approx(2.0, rel=0.12)
    assert model.w.detach().abs().sum() == 0  # the checkpoint is left untouched
    again = estimate_llc(model, loss, data, lr=2e-4, gamma=0.0, nbeta=100.0, chains=4, draws=3000, burn_in=500,
                         batch_size=8, seed=0)
    assert again.llc == res.llc
    assert default_nbeta(64) == pytest.approx(64 / np.log(64))
    assert len(res.per_chain) == 4 and res.chain_min <= res.llc <= res.chain_max
    assert res.llc_std == pytest.approx(np.std(res.per_chain))
    assert res.stationary  # equilibrated long before the last half of the kept draws


def test_stationarity_check_flat_noisy_trace_passes_drifting_trace_fails():
    rng = np.random.default_rng(0)
    flat = 1.0 + 0.1 * rng.standard_normal((2, 200))
    assert abs(trace_drift(flat, burn_in=40)) < 1.0 and is_stationary(flat, burn_in=40)
    drifting = flat + np.linspace(0, 1.0, 200)  # climbs 10 noise sds over the run
    assert trace_drift(drifting, burn_in=40) > 2.0 and not is_stationary(drifting, burn_in=40)
    assert trace_drift(flat[:, ::-1] - np.linspace(0, 1.0, 200), burn_in=40) < -2.0  # falling trends count too
    # a burn-in climb (equilibration) followed by a plateau is stationary once burnt in
    climb = flat + np.where(np.arange(200) < 50, np.arange(200) / 50.0, 1.0)
    assert is_stationary(climb, burn_in=60)
    assert not is_stationary(climb[:, :50], burn_in=0)  # cut during the climb: the last half still rises
    blown = flat.copy()
    blown[1, 150] = np.nan  # a diverged chain
    assert not is_stationary(blown, burn_in=40) and np.isnan(trace_drift(blown, burn_in=40))
    assert np.isnan(trace_drift(flat[:, :6], burn_in=3))  # fewer than 4 kept draws


def test_llc_flags_a_diverging_sampler():
    model = Quadratic([1.0, 1.5, 2.0, 3.0])
    loss = lambda m, rows: 0.5 * (m.a * m.w**2).sum()  # noqa: E731
    data = torch.zeros(8, 1)
    ok = estimate_llc(model, loss, data, lr=2e-3, gamma=10.0, nbeta=10.0, chains=2, draws=400, burn_in=100,
                      batch_size=8, seed=0)
    assert ok.stationary and np.isfinite(ok.drift)
    blown = estimate_llc(model, loss, data, lr=2e-3, gamma=2000.0, nbeta=10.0, chains=2, draws=400, burn_in=100,
                         batch_size=8, seed=0)  # lr * gamma / 2 = 2: each step overshoots, the amplitude grows
    assert np.isfinite(blown.loss_trace).all() and blown.chain_max > 2  # above d / 2 = 2
    assert not blown.stationary
    overflow = estimate_llc(model, loss, data, lr=2e-3, gamma=5000.0, nbeta=10.0, chains=2, draws=400, burn_in=100,
                            batch_size=8, seed=0)  # lr * gamma / 2 = 5: the losses overflow
    assert not np.isfinite(overflow.loss_trace).all() and not overflow.stationary


def test_llc_matches_devinterp_sgld():
    sgld = pytest.importorskip("devinterp.optim.sgld")
    import copy
    import warnings

    model, data = tiny_gpt(), tiny_batch(32)
    loss = lambda m, rows: answer_loss(m, rows, PROMPT_LEN)  # noqa: E731
    kw = dict(lr=1e-3, gamma=50.0, nbeta=default_nbeta(8))
    ours = estimate_llc(model, loss, data, chains=2, draws=15, batch_size=8, seed=0, **kw)

    with torch.no_grad():
        init = float(loss(model, data))
    per_chain = []
    for chain in range(2):
        sampler = copy.deepcopy(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = sgld.SGLD(sampler.parameters(), lr=kw["lr"], localization=kw["gamma"], nbeta=kw["nbeta"])
        gen = torch.Generator().manual_seed(chain)  # estimate_llc seeds chain c with seed * 1_000_003 + c
        rng = np.random.default_rng([0, chain])
        losses = []
        for _ in range(15):
            idx = torch.as_tensor(rng.choice(len(data), size=8, replace=False))
            opt.zero_grad()
            value = loss(sampler, data[idx])
            value.backward()
            losses.append(float(value.detach()))
            opt.step(noise_generator=gen)
        per_chain.append(kw["nbeta"] * (np.mean(losses) - init))
    np.testing.assert_allclose(ours.per_chain, per_chain, rtol=1e-5, atol=1e-6)
    assert ours.llc == pytest.approx(np.mean(per_chain), rel=1e-5)


def test_unconverged_lanczos_reports_nan_not_a_guess():
    from scipy.sparse.linalg import aslinearoperator

    from stages.measures.hessian import top_eigenvalues

    diag = np.linspace(1.0, 1.001, 400)  # clustered spectrum: one restart cannot converge 3 values
    vals = top_eigenvalues(aslinearoperator(np.diag(diag)), k=3, tol=1e-12, maxiter=1, ncv=8)
    assert len(vals) == 3 and np.isnan(vals).any()
    ok = vals[~np.isnan(vals)]
    assert np.all((ok >= 1.0) & (ok <= 1.001))
