"""family."""
