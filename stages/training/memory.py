"""Will a training run fit its device? An estimate of its peak memory, checked before training starts.

``train_bytes`` counts what a training update of :mod:`stages.training.loop` holds at its peak:

* weights, gradients and AdamW's two moments, all fp32 (bf16 autocast keeps fp32 master weights):
  ``16 * n_params`` bytes;
* the activations autograd saves for the backward pass, per layer ``T * B * d * (34 + 5 * h * T / d)``
  bytes in 16-bit precision (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", eq. 2, without sequence parallelism), twice that in fp32; T = the model's
  context, B = the batch, d = width, h = heads;
* the answer logits and their gradient: ``3 * B * answer_len * vocab * 4`` bytes;

plus a fixed allowance for the CUDA context and allocator (``OVERHEAD``) and a margin (``MARGIN``).
It is an estimate to stop a run that cannot fit, not a measurement: ``benchmarks/gpu_check.py``
measures the peak of a real burst. ``check_fits`` compares it with the free memory of the device
(CUDA: ``torch.cuda.mem_get_info``; CPU: ``MemAvailable`` of /proc/meminfo where there is one) and
stops with one line naming the model size and the estimate.
"""
from __future__ import annotations

import torch

from stages.errors import PipelineError

OVERHEAD = 512 * 2**20   # CUDA context, allocator fragmentation, evaluation buffers
MARGIN = 1.2             # the estimate times this must fit


def train_bytes(n_params: int, n_layer: int, d_model: int, n_head: int, context: int, batch: int,
                answer_len: int, vocab: int, precision: str) -> dict[str, int]:
    """``{"state", "activations", "logits", "total"}`` bytes of one training update (see the module)."""
    state = 16 * n_params
    per_layer_16bit = context * batch * d_model * (34 + 5 * n_head * context / d_model)
    activations = int(n_layer * per_layer_16bit * (1 if precision == "bf16" else 2))
    logits = 3 * batch * answer_len * vocab * 4
    total = int(MARGIN * (state + activations + logits)) + OVERHEAD
    return {"state": state, "activations": activations, "logits": logits, "total": total}


def available_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` in bytes, or None where it cannot be read."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_fits(model_name: str, estimate: dict[str, int], device: torch.device, batch: int, context: int,
               what: str = "training") -> None:
    """Raise a one-line :class:`PipelineError` when ``estimate["total"]`` exceeds the free memory of ``device``."""
    free = available_bytes(device)
    if free is None or estimate["total"] <= free:
        return
    raise PipelineError(
        f"model '{model_name}' does not fit {device}: {what} needs an estimated {gib(estimate['total'])} "
        f"(weights, gradients and AdamW {gib(estimate['state'])}, activations of a {batch} x {context}-token "
        f"batch {gib(estimate['activations'])}, with margin and {gib(OVERHEAD)} overhead), {gib(free)} free; "
        "use smaller grid.models or train.defaults.batch_size")
