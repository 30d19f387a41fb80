"""File formats and crash-safe writing."""
