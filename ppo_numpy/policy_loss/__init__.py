"""policy_loss."""
