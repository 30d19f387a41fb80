"""Mixed precision: ``precision: auto | fp32 | bf16`` for training and extraction.

``auto`` is bf16 autocast on a CUDA device with bf16 support for models of at least
``AUTO_BF16_MIN_PARAMS`` parameters (p11m and larger), fp32 otherwise, so CPU runs and the small
presets keep their exact fp32 numerics. Autocast only changes the matmul/attention compute dtype:
parameters, optimiser state, losses, saved checkpoints and extracted hidden states stay float32.
"""
from __future__ import annotations

import torch

from stages.errors import PipelineError
from stages.params import PRECISIONS  # noqa: F401  declared once, checked by the schema
AUTO_BF16_MIN_PARAMS = 10_000_000


def resolve_precision(name: str, device: torch.device, n_params: int, key: str = "precision") -> str:
    """``fp32`` or ``bf16`` for a model of ``n_params`` parameters on ``device``; ``name`` is one of
    :data:`PRECISIONS` (the schema checked it)."""
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if name == "auto":
        return "bf16" if cuda_bf16 and n_params >= AUTO_BF16_MIN_PARAMS else "fp32"
    if name == "bf16" and device.type == "cuda" and not cuda_bf16:
        raise PipelineError(f"'{key}' is 'bf16' but CUDA device {device} does not support bfloat16")
    return name


def autocast(device: torch.device, precision: str):
    """Context manager: bf16 autocast on ``device`` when ``precision`` is ``bf16``, else a no-op."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
