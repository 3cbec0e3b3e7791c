"""Tiny autoregressive toy policies with hand-written gradients."""
