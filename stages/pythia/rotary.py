"""Rotary position tables that do not depend on the CPU's vendor.

transformers' rotary embeddings (GPT-NeoX, Llama, ...) take ``cos`` and ``sin`` of their float32
angles with torch, which on the CPU sends them to MKL's vector math (VML), whose kernels give other
bits on an AMD CPU than on an Intel one under every MKL setting (stages/numerics.py).
:func:`pin_rotary` gives each default rotary embedding of a model a forward that computes the same
float32 angles, takes their cosine and sine in float64 with numpy (whose loops stages/numerics.py
pins) and rounds them to float32: within a float32 rounding of the stock tables, and the same bits on
any x86 CPU. Off the CPU the stock forward runs.
"""
from __future__ import annotations

import types

import numpy as np
import torch


def _forward(self, x: torch.Tensor, position_ids: torch.Tensor):
    if x.device.type != "cpu":
        return type(self).forward(self, x, position_ids)
    freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
    angles = torch.cat((freqs, freqs), dim=-1).numpy().astype(np.float64)
    cos = torch.from_numpy(np.cos(angles).astype(np.float32)) * self.attention_scaling
    sin = torch.from_numpy(np.sin(angles).astype(np.float32)) * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def pin_rotary(model: torch.nn.Module) -> int:
    """Give every default-type rotary embedding in ``model`` the vendor-neutral forward; return how many.
    Other rope types (dynamic, YaRN, ...) rescale their frequencies inside the stock forward and keep it."""
    count = 0
    for module in model.modules():
        if (type(module).__name__.endswith("RotaryEmbedding") and hasattr(module, "inv_freq")
                and getattr(module, "rope_type", "default") == "default"):
            module.forward = types.MethodType(_forward, module)
            count += 1
    return count
