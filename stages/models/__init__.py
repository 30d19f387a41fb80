"""Decoder-only transformers and their size presets."""
from stages.models.gpt import GPT, GPTConfig
from stages.models.presets import PRESETS, model_config

__all__ = ["GPT", "GPTConfig", "PRESETS", "model_config"]
