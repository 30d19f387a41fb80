"""The tied head's gradient products on one CPU thread, so that no split of their work can change their bits.

The head's weight gradient is one matrix product per update, ``dlogits^T @ hidden``: a small output
(vocab x d_model, 19 x 128 for copy-easy) summed over every answer token of the batch (K = 2048 for
copy-easy). On the pinned CPU code paths it gives the same bits at 1 to 16 threads (MKL splits the
output and sums each entry over K in one order). Yet fresh-clone runs have twice written a
copy-easy-s0 whose first update differs from the committed one in this product alone: in the
gradient rows of tokens 9-18 only (measured: a 1-ulp perturbation of the whole product changes
entries of every row after Adam's step), by 1 to 49 ulps, i.e. summed in another order (README,
"CPU code paths"). What made those processes sum it in another order could not be reproduced on
demand; a second thread taking a block of the output with another kernel fits what was measured.

On one thread there is no split to choose: the bits are the 1-thread bits, which are the committed
ones (the train stages wrote the same checkpoints with and without this). That it removes the other
order is a hypothesis that only repeated fresh-clone runs test (scripts/check_reproducible.sh).
The two products through the head (weight and input gradients) are a few million multiply-adds
each, nothing beside the rest of the update, which keeps ``runtime.threads``.

:func:`head_grad_on_one_thread` does this by hooking the head module: its backward pre-hook (the
gradient of the logits is ready) sets one thread, its backward hook (the gradient of the head's
input is computed, so is the weight's: one autograd node computes both) restores the count.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def head_grad_on_one_thread(head: torch.nn.Module, enabled: bool = True):
    """Within the block, every backward through ``head`` computes its gradients on one CPU thread.

    Hooks must be in place when the forward runs (module backward hooks wrap its outputs), so the
    forward and the backward both belong inside the block. The thread count in effect when the
    backward reaches the head is restored after it, and on leaving the block in any case (an
    exception between the two hooks included). ``enabled=False`` (a GPU run) is a no-op.
    """
    if not enabled:
        yield
        return
    saved: list[int] = []

    def one_thread(module, grad_output):
        saved.append(torch.get_num_threads())
        torch.set_num_threads(1)

    def restore(module, grad_input, grad_output):
        if saved:
            torch.set_num_threads(saved.pop())

    pre = head.register_full_backward_pre_hook(one_thread)
    post = head.register_full_backward_hook(restore)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
        if saved:
            torch.set_num_threads(saved[0])
