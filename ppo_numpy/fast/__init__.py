"""fast."""
