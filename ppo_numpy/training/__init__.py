"""End-to-end PPO on toy prompt -> response tasks (``docs/training.md``).

``tasks`` (the toy tasks and their rule-based scores), ``config`` (the
``PPOConfig`` dataclass), ``metrics`` (what is logged, ``metrics.csv``).
"""
