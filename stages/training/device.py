"""``device: auto`` picks CUDA when present, else the CPU."""
from __future__ import annotations

import torch

from stages.errors import PipelineError


def resolve_device(name: str = "auto", key: str = "device") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(name, str) or not (name == "cpu" or name.startswith("cuda")):
        raise PipelineError(f"unknown {key} '{name}' (choose from: auto, cpu, cuda, cuda:N)")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise PipelineError(f"'{key}' is '{name}' but no CUDA device is available")
    return torch.device(name)
