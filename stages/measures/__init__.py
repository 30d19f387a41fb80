"""Geometric and probing measures of hidden states and of the loss landscape."""
