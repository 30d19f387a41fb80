"""Local learning coefficient (LLC) by localised SGLD around a checkpoint (Lau et al., 2023).

Sampling follows devinterp's ``SGLD`` optimiser exactly (the tests cross-check the two): from the
checkpoint ``w*``, each chain repeats, on a fresh minibatch of ``batch_size`` examples,

    w <- w - (lr / 2) * (nbeta * grad L_batch(w) + gamma * (w - w*)) + sqrt(lr) * N(0, I)

where ``L_batch`` is the mean answer loss on the minibatch, ``nbeta`` the inverse temperature
(default ``m / log m`` for minibatch size ``m``, devinterp's ``default_nbeta``) and ``gamma`` the
localisation strength. The minibatch loss of every step after ``burn_in`` is recorded (computed in
the same forward pass as the gradient, before the update) and, per chain,

    llc_chain = nbeta * (mean recorded loss - L(w*))

with ``L(w*)`` the mean loss of the checkpoint over the whole sample. ``llc`` is the mean over
chains; ``llc_std`` their standard deviation (``ddof=0``), ``per_chain`` the values themselves.
Chains are seeded: the minibatches and the noise are functions of ``(seed, chain)``, so results
are deterministic.

**Calibration check** (devinterp's guidance: after burn-in the loss trace must be stationary, with
no trend and no blow-up): :func:`trace_drift` fits a least-squares line to the chain-averaged loss
trace over the kept draws (those after ``burn_in``, whose mean makes the estimate) and returns the
fitted change across them divided by the standard deviation of the residuals about the line.
:func:`is_stationary` is ``True`` when every recorded loss is finite and ``|drift| <= max_drift``
(``landscape.llc.max_drift``, default 2.5); :func:`estimate_llc`'s ``stationary`` also requires
every chain's estimate to be at most ``d / 2`` for ``d`` sampled parameters (the LLC never exceeds
half the dimension; a sampler that escaped the localisation, e.g. with ``lr * gamma / 2 > 2``,
oscillates with growing amplitude and exceeds it long before any trend shows). Pure noise gives a
drift of standard deviation ``sqrt(12 / n)`` for ``n`` kept draws (0.74 for the default 22); the
minibatch sequence, the same at every checkpoint, adds a common offset (+1 to +2 on the early
checkpoints with 40 draws, 16 burnt in, whose kept mean was if anything above the long-chain
reference), hence 2.5 rather than 2. A trend over only the second half of the kept draws had no
power at this budget (-1.0 to +0.2 on a chain still 6-17% below equilibrium, where the whole kept
window gave +1.9 to +3.0).

**Calibration** (``params.yaml: landscape.llc``) on the checkpoints of mod-hard-p405k-s0 (0.4M
parameters), 2 chains, minibatch 32 (``nbeta = 32 / log 32 = 9.2``), against a reference of 80
draws with 40 burnt in:

* ``gamma = 300``: the estimate is on a plateau in the step size (lr 3e-4, 1e-3 and 2e-3 agree
  within 4% from initialisation, 1.6, to the end of training, 55) and positive at
  initialisation. ``gamma`` 3000 or 10000 gave negative values at step 0 (lr <= 3e-4) and a strong
  dependence on the step size (15.7 / 18.7 / 32.4 at the acquisition step for lr 1e-4 / 3e-4 /
  1e-3); ``gamma = 100`` needs lr >= 3e-3 to equilibrate within the burn-in, which doubles to
  triples the spread of the chains. lr 1e-3 with ``gamma = 10000`` diverged (non-finite losses).
* ``lr = 1e-3``: the loss equilibrates within about 10 draws. The default 32 draws with 10 burnt in
  agree with the reference within 2% from step 149 on (within 0.21 before, where the LLC is 1.6 to
  3.5); on all 64 checkpoints every chain is positive (1.78 at step 0), every trace passes the
  stationarity check (drift -0.15 to 1.57), and the chain spread ``llc_std`` is a median 0.6% (at
  most 3.3%) of the value from step 100 on. It stays finite at the loss spike of step 1000 (top Hessian
  eigenvalue 1080).
* The previous setting (lr 1e-4, gamma 1000, 16 draws, no burn-in, minibatch 64) averaged the
  climb to equilibrium into the estimate: -0.38 at step 0.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch


@dataclass
class LLCResult:
    llc: float
    llc_std: float
    init_loss: float
    per_chain: list[float]
    loss_trace: np.ndarray  # [chains, draws] minibatch losses (burn-in included)
    burn_in: int = 0
    drift: float = float("nan")  # trace_drift of loss_trace
    stationary: bool = False     # is_stationary of loss_trace
    settings: dict = field(default_factory=dict)

    @property
    def chain_min(self) -> float:
        return float(min(self.per_chain))

    @property
    def chain_max(self) -> float:
        return float(max(self.per_chain))


def default_nbeta(batch_size: int) -> float:
    """``m / log m``, devinterp's default inverse temperature for minibatch size ``m``."""
    return batch_size / math.log(batch_size) if batch_size > 1 else 1.0


def trace_drift(trace, burn_in: int = 0) -> float:
    """Fitted change of the chain-averaged loss over the draws after ``burn_in``, in units of the
    residual standard deviation (see the module docstring). ``nan`` when fewer than 4 draws are
    kept or one is not finite; ``+-inf`` when the trace is exactly linear with a slope."""
    trace = np.atleast_2d(np.asarray(trace, dtype=float))
    window = trace[:, burn_in:].mean(axis=0)
    n = len(window)
    if n < 4 or not np.isfinite(window).all():
        return float("nan")
    t = np.arange(n, dtype=float)
    slope, intercept = np.polyfit(t, window, 1)
    resid = window - (slope * t + intercept)
    sigma = float(resid.std(ddof=2))
    change = float(slope * (n - 1))
    if sigma == 0:
        return 0.0 if change == 0 else math.copysign(float("inf"), change)
    return change / sigma


def is_stationary(trace, burn_in: int = 0, max_drift: float = 2.5) -> bool:
    """``True`` when every loss of ``trace`` is finite and ``|trace_drift| <= max_drift``."""
    trace = np.asarray(trace, dtype=float)
    if not np.isfinite(trace).all():
        return False
    drift = trace_drift(trace, burn_in)
    return bool(np.isfinite(drift) and abs(drift) <= max_drift)


def sgld_step(params: list[torch.Tensor], anchors: list[torch.Tensor], lr: float, nbeta: float, gamma: float,
              generator: torch.Generator) -> None:
    """One in-place SGLD update of ``params`` (gradients already in ``.grad``); same order of noise
    draws and arithmetic as ``devinterp.optim.SGLD.step`` with ``weight_decay=0``."""
    with torch.no_grad():
        for p, p0 in zip(params, anchors):
            dw = p.grad * nbeta if p.grad is not None else torch.zeros_like(p)
            if gamma != 0:
                dw.add_(p - p0, alpha=gamma)
            noise = torch.normal(mean=0.0, std=1.0, size=dw.size(), device=dw.device, generator=generator)
            p.add_(dw, alpha=-0.5 * lr)
            p.add_(noise, alpha=lr**0.5)


def estimate_llc(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
                 data: torch.Tensor, *, lr: float = 1e-4, gamma: float = 100.0, nbeta: float | None = None,
                 chains: int = 2, draws: int = 50, burn_in: int = 0, batch_size: int = 64, seed: int = 0,
                 max_drift: float = 2.5, eval_batch_size: int = 1024,
                 progress: Callable[[], None] | None = None) -> LLCResult:
    """LLC of ``model`` (left untouched) for ``loss_fn(model, rows)`` (mean loss of rows of ``data``)."""
    if draws <= burn_in:
        raise ValueError(f"draws ({draws}) must exceed burn_in ({burn_in})")
    batch_size = min(batch_size, len(data))
    nbeta = default_nbeta(batch_size) if nbeta is None else float(nbeta)
    base = copy.deepcopy(model).eval()
    with torch.no_grad():
        init = sum(float(loss_fn(base, data[s:s + eval_batch_size])) * len(data[s:s + eval_batch_size])
                   for s in range(0, len(data), eval_batch_size)) / len(data)
    anchors = [p.detach().clone() for p in base.parameters()]
    trace = np.zeros((chains, draws))
    for chain in range(chains):
        sampler = copy.deepcopy(base)
        params = list(sampler.parameters())
        gen = torch.Generator(device=data.device).manual_seed(seed * 1_000_003 + chain)
        rng = np.random.default_rng([seed, chain])
        for step in range(draws):
            idx = torch.as_tensor(rng.choice(len(data), size=batch_size, replace=False), device=data.device)
            sampler.zero_grad(set_to_none=True)
            loss = loss_fn(sampler, data[idx])
            loss.backward()
            trace[chain, step] = float(loss.detach())
            sgld_step(params, anchors, lr, nbeta, gamma, gen)
            if progress is not None:
                progress()
    with np.errstate(invalid="ignore", over="ignore"):  # a diverged chain gives inf / NaN, flagged below
        per_chain = nbeta * (trace[:, burn_in:].mean(axis=1) - init)
        llc, llc_std = float(per_chain.mean()), float(per_chain.std())
    dim = sum(p.numel() for p in anchors)
    stationary = is_stationary(trace, burn_in, max_drift) and bool(np.all(per_chain <= dim / 2))
    return LLCResult(llc=llc, llc_std=llc_std, init_loss=init,
                     per_chain=[float(v) for v in per_chain], loss_trace=trace, burn_in=burn_in,
                     drift=trace_drift(trace, burn_in), stationary=stationary,
                     settings={"lr": lr, "gamma": gamma, "nbeta": nbeta, "chains": chains, "draws": draws,
                               "burn_in": burn_in, "batch_size": batch_size})
