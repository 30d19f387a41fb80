"""Rotary tables off MKL's vector math (stages/pythia/rotary.py): known values, what is patched."""
import numpy as np
import torch

from stages.pythia import suite
from stages.pythia.rotary import pin_rotary

CFG = {"hidden_size": 64, "layers": 2, "heads": 4, "seq_len": 32}


def rotary_of(model):
    return [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]


def test_tables_are_float64_cos_and_sin_of_the_float32_angles_rounded_once():
    model = suite.build_model(suite.build_tokenizer(), CFG, 0)  # built pinned
    (rot,) = rotary_of(model)
    positions = torch.arange(32)[None]
    cos, sin = rot(torch.zeros(1, 32, 16), positions)
    freqs = (positions[..., None].float() * rot.inv_freq.float()).numpy()
    angles = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
    assert np.array_equal(cos.numpy(), np.cos(angles).astype(np.float32))
    assert np.array_equal(sin.numpy(), np.sin(angles).astype(np.float32))
    assert cos.dtype == torch.float32 and cos.shape == (1, 32, rot.inv_freq.numel() * 2)
    # the stock forward: the same angles, cos/sin within one float32 rounding
    stock_cos, stock_sin = type(rot).forward(rot, torch.zeros(1, 32, 16), positions)
    assert torch.allclose(cos, stock_cos, rtol=0, atol=1.2e-7) and torch.allclose(sin, stock_sin, rtol=0, atol=1.2e-7)
    # and the half-precision path casts as the stock one does
    assert rot(torch.zeros(1, 32, 16, dtype=torch.bfloat16), positions)[0].dtype == torch.bfloat16


def test_only_default_rotary_embeddings_are_patched():
    model = suite.build_model(suite.build_tokenizer(), CFG, 0)
    assert pin_rotary(model) == 1  # one shared table per model (patched again: same forward)
    (rot,) = rotary_of(model)
    rot.rope_type = "dynamic"  # rescales its frequencies inside the stock forward: left alone
    del rot.forward
    assert pin_rotary(model) == 0 and "forward" not in vars(rot)
    assert pin_rotary(torch.nn.Linear(2, 2)) == 0
