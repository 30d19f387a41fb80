"""Six model sizes spanning the paper's 405K..151M parameters, and one smaller proxy.

``p100k`` (2 layers, width 64, ~0.1M parameters) is NOT one of the paper's sizes: it is a cheap proxy
below p405k for scale studies on a CPU (studies/scale, docs/scale.md). :data:`PAPER_SIZES` lists the
paper's six; the paper's grid (studies/paper) uses those only.

The count is dominated by ``12 * n_layer * d_model**2``; embeddings add ``(vocab + block) * d``
with the small vocabularies of the algorithmic tasks, so every task stays within a few percent
of the nominal size.
"""
from __future__ import annotations

from stages.config import MODEL_NAMES, choose
from stages.models.gpt import GPTConfig

PRESETS: dict[str, dict] = {
    "p100k": {"n_layer": 2, "d_model": 64, "n_head": 4},   # proxy: not one of the paper's sizes
    "p405k": {"n_layer": 2, "d_model": 128, "n_head": 4},
    "p3m": {"n_layer": 4, "d_model": 256, "n_head": 4},
    "p11m": {"n_layer": 6, "d_model": 384, "n_head": 6},
    "p25m": {"n_layer": 8, "d_model": 512, "n_head": 8},
    "p71m": {"n_layer": 10, "d_model": 768, "n_head": 12},
    "p151m": {"n_layer": 12, "d_model": 1024, "n_head": 16},
}
if tuple(PRESETS) != MODEL_NAMES:  # the schema's grid validation (stages/params.py) reads the names there
    raise ImportError(f"stages.config.MODEL_NAMES {MODEL_NAMES} differs from the presets {tuple(PRESETS)}")
PROXY_SIZES = ("p100k",)
PAPER_SIZES = tuple(name for name in PRESETS if name not in PROXY_SIZES)
NOMINAL = {"p100k": 100e3, "p405k": 405e3, "p3m": 3.2e6, "p11m": 10.7e6, "p25m": 25.3e6, "p71m": 71e6, "p151m": 151e6}


def model_config(name: str, vocab_size: int, block_size: int, dropout: float = 0.0) -> GPTConfig:
    preset = PRESETS[choose(name, PRESETS, "model")]
    return GPTConfig(vocab_size=vocab_size, block_size=block_size, dropout=dropout, **preset)
