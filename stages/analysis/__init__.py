"""Event detection on measured trajectories and cross-scale statistics."""
