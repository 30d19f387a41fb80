"""The tied head's gradient products run on one CPU thread during a training update
(stages/training/head_grad.py), every other product on runtime.threads, and the thread count always
comes back."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stages.models import GPT, model_config
from stages.training.head_grad import head_grad_on_one_thread
from stages.training.loop import answer_loss, make_optimizer, update

ROOT = Path(__file__).resolve().parents[1]
VOCAB, BATCH, PROMPT, LENGTH = 11, 6, 4, 8  # 6 sequences x 4 answer positions: 24 rows in each product


def _model_and_batch():
    torch.manual_seed(0)
    model = GPT(model_config("p405k", vocab_size=VOCAB, block_size=LENGTH - 1))
    batch = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(1))
    return model, batch


UPDATE = f"""
import torch
from stages.runtime import pin_threads
from stages.models import GPT, model_config
from stages.training.loop import make_optimizer, update
pin_threads(2)
torch.manual_seed(0)
model = GPT(model_config("p405k", vocab_size={VOCAB}, block_size={LENGTH - 1}))
batch = torch.randint(0, {VOCAB}, ({BATCH}, {LENGTH}), generator=torch.Generator().manual_seed(1))
update(model, make_optimizer(model, 1e-3, 0.0, (0.9, 0.98)), batch, {PROMPT}, 1.0)
"""


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="MKL's verbose log names each product's threads")
def test_update_runs_the_head_gradient_products_on_one_thread():
    """MKL's log of one update: the two backward products through the head (weight gradient
    128 x 11 over the 24 answer rows, input gradient 128 x 24 over the vocabulary) on 1 thread; the
    head's forward product and every other product on the 2 threads set."""
    env = {**os.environ, "MKL_VERBOSE": "1"}
    log = subprocess.run([sys.executable, "-c", UPDATE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    calls = re.findall(r"SGEMM\((\w),(\w),(\d+),(\d+),(\d+),.*NThr:(\d+)", log)
    assert calls, log[-2000:]
    head = sorted((ta, tb, int(m), int(n), int(k), int(t)) for ta, tb, m, n, k, t in calls
                  if str(VOCAB) in (m, n, k))
    assert head == [("N", "N", 128, 24, VOCAB, 1), ("N", "T", 128, VOCAB, 24, 1), ("T", "N", VOCAB, 24, 128, 2)]
    assert {int(t) for *_, m, n, k, t in calls if str(VOCAB) not in (m, n, k)} == {2}


def test_thread_count_comes_back_after_an_update():
    model, batch = _model_and_batch()
    torch.set_num_threads(2)
    update(model, make_optimizer(model, 1e-3, 0.0, (0.9, 0.98)), batch, PROMPT, 1.0)
    assert torch.get_num_threads() == 2
    assert not model.head._backward_pre_hooks and not model.head._backward_hooks  # hooks removed


def test_thread_count_comes_back_when_the_backward_fails_inside_the_head():
    """A hook that raises after the one-thread hook (so the restoring hook never runs): the block's
    exit restores the count."""
    model, batch = _model_and_batch()
    torch.set_num_threads(2)
    seen = []

    def fail(module, grad_output):
        seen.append(torch.get_num_threads())
        raise RuntimeError("planted failure in the head's backward")

    with pytest.raises(RuntimeError, match="planted failure"):
        with head_grad_on_one_thread(model.head):
            model.head.register_full_backward_pre_hook(fail)
            answer_loss(model, batch, PROMPT).backward()
    assert seen == [1]  # it ran on one thread when it failed
    assert torch.get_num_threads() == 2


def test_disabled_leaves_the_backward_alone():
    """A GPU run: no hooks, so the head's backward runs with the thread count as it is."""
    model, batch = _model_and_batch()
    torch.set_num_threads(2)
    seen = []
    with head_grad_on_one_thread(model.head, enabled=False):
        assert not model.head._backward_pre_hooks
        model.head.register_full_backward_pre_hook(lambda m, g: seen.append(torch.get_num_threads()))
        answer_loss(model, batch, PROMPT).backward()
    assert seen == [2]
