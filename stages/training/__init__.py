"""Optimisation: checkpoint and learning-rate schedules, the training loop, evaluation."""
