"""The row functions of the landscape measures: for every measure registered in
:data:`stages.measures.registry.LANDSCAPE`, the function of the same name maps one
:class:`Checkpoint` to that measure's columns of the checkpoint's row (see stages/pipeline/landscape.py
for the columns). :func:`measure_checkpoint` calls those that ``landscape.measures`` requests.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from stages.measures.grad_cov import covariance_rank_cap, gradient_covariance_rank
from stages.measures.grad_rank import effective_rank_cap, gradient_effective_rank, gram_matrix
from stages.measures.hessian import hessian_top_eigenvalues_repeated
from stages.measures.llc import estimate_llc
from stages.measures.per_example import per_example_gradients
from stages.measures.registry import LANDSCAPE
from stages.params import Landscape
from stages.training.loop import answer_loss


@dataclass
class Checkpoint:
    """One checkpoint as a row function sees it: the model, the seeded sample tensors ``data``
    (``grad``, ``hessian``, ``llc``), the prompt length and the ``landscape`` settings ``p``."""

    model: torch.nn.Module
    data: dict
    prompt_len: int
    p: Landscape

    def loss(self, model: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return answer_loss(model, rows, self.prompt_len)

    @cached_property
    def grads(self) -> torch.Tensor:
        """The per-example gradients of the ``grad`` sample, computed once for both gradient measures."""
        p = self.p
        return per_example_gradients(self.model, self.data["grad"], self.prompt_len, chunk=p.grad.chunk,
                                     sketch_dim=p.grad.sketch_dim, seed=p.seed)


def grad_erank(c: Checkpoint) -> dict:
    return {"grad_erank": gradient_effective_rank(gram=gram_matrix(c.grads)),
            "grad_erank_cap": effective_rank_cap(c.grads.shape[0], c.grads.shape[1])}


def gradcov_rank(c: Checkpoint) -> dict:
    rank = gradient_covariance_rank(rtol=c.p.grad.cov_rtol, centred_gram=gram_matrix(c.grads, centre=True))
    cap = covariance_rank_cap(c.grads.shape[0])
    return {"gradcov_rank": rank, "gradcov_cap": cap, "gradcov_saturated": bool(rank >= cap)}


def hessian(c: Checkpoint) -> dict:
    h = c.p.hessian
    vals, spread = hessian_top_eigenvalues_repeated(
        c.model, lambda m: c.loss(m, c.data["hessian"]), k=h.k, tol=h.tol, maxiter=h.maxiter, seed=c.p.seed,
        repeats=h.repeats)
    row = {f"hessian_top{i + 1}": float(v) for i, v in enumerate(vals)}
    row["hessian_top1_spread"] = spread
    floor = h.tol * abs(float(vals[0]))
    row["hessian_top1_noise"] = float(np.nanmax([spread, floor])) if np.isfinite(vals[0]) else float("nan")
    return row


def llc(c: Checkpoint) -> dict:
    s = c.p.llc
    res = estimate_llc(c.model, c.loss, c.data["llc"], lr=s.lr, gamma=s.gamma,
                       nbeta=None if s.nbeta == "auto" else s.nbeta, chains=s.chains, draws=s.draws,
                       burn_in=s.burn_in, batch_size=s.batch_size, seed=c.p.seed, max_drift=s.max_drift)
    return dict(llc=res.llc, llc_std=res.llc_std, llc_chain_min=res.chain_min, llc_chain_max=res.chain_max,
                **{f"llc_chain{i}": v for i, v in enumerate(res.per_chain)},
                llc_drift=res.drift, llc_stationary=res.stationary, init_loss=res.init_loss)


def measure_checkpoint(model, data: dict, prompt_len: int, p: Landscape) -> dict:
    """The row of one checkpoint: the columns of every measure ``p.measures`` requests, in registration order."""
    c = Checkpoint(model, data, prompt_len, p)
    row: dict = {}
    for name in LANDSCAPE:
        if name in p.measures:
            row.update(globals()[name](c))
    return row
