"""The sampler/trainer mismatch: the inference engine's log-probs against the trainer's, the
importance weights and the rejection that correct for it (``correction``; notebook 15,
docs/conventions.md section 14)."""
