"""Pythia branch: hub checkpoints (or a local GPT-NeoX suite), evaluation sets, per-revision measures."""
