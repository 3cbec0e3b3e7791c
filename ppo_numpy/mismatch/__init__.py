"""mismatch."""
