"""grads."""
