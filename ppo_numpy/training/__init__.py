"""End-to-end PPO on toy prompt -> response tasks (``docs/training.md``).

=====================================  ==========================================
what                                   where
=====================================  ==========================================
toy tasks, rule-based scores, priors   ``tasks``: TASKS, make_task
hyperparameters (one dataclass)        ``config``: PPOConfig
supervised warm-up -> pi_ref           ``warmup``: cross_entropy_and_grads, warm_up
one PPO iteration (steps 1-5)          ``loop``: new_run, ppo_iteration
runs, checkpoints, resume, sweeps      ``run``: train, resume, beta_sweep
what is logged, metrics.csv            ``metrics``: COLUMNS, read_metrics
beta controllers (fixed, adaptive)     ``kl_controllers``
``python -m ppo_numpy train``          ``ppo_numpy.programs.train``
=====================================  ==========================================
"""

from .config import PPOConfig
from .loop import RatioNotOneError, new_run, ppo_iteration
from .metrics import COLUMNS, read_metrics
from .run import SWEEP_CONFIG, RunError, beta_sweep, resume, train
from .tasks import TASKS, make_task

__all__ = [
    "COLUMNS",
    "SWEEP_CONFIG",
    "TASKS",
    "PPOConfig",
    "RatioNotOneError",
    "RunError",
    "beta_sweep",
    "make_task",
    "new_run",
    "ppo_iteration",
    "read_metrics",
    "resume",
    "train",
]
