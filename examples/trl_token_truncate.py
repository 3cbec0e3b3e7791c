"""TRL 1.16's GRPO loss with the vLLM correction in its token_truncate mode only, written in
plain NumPy: a candidate that covers part of a framework (docs/oracle.md, "Check an
implementation that covers part of a framework").

It implements the dapo loss at the token level without a KL term, and, on a batch vLLM
generated (a case with ``logp_rollout``), the token weights exp(logp_old - logp_rollout)
truncated to [clip_min, clip_max]; on any other setting it raises NotImplementedError
("option=value"), and the oracle lists that case instead of comparing it.

    python -m ppo_numpy oracle compare examples/trl_token_truncate.py:step --preset trl-grpo \\
        --dtype float32 --outputs advantages policy_loss dlogp
"""

from __future__ import annotations

import numpy as np

from ppo_numpy.oracle.coverage import implements
from ppo_numpy.oracle.presets import get_preset

#: TRL 1.16's GRPOConfig defaults, as the preset reads them (the case's params override them)
DEFAULTS = get_preset("trl-grpo").parameters


def step(case, *, with_clip_min=True):
    """advantages, policy_loss and dlogp of one batch (``with_clip_min=False``: the lower
    bound of the weights forgotten, a mistake for the diagnosis to name)."""
    p = {**DEFAULTS, **case["params"]}
    x = case["inputs"]
    # what this implements; anything else is said, not guessed
    implements(p, loss_type=("dapo",), importance_sampling_level=("token",), beta=(0.0,),
               delta=(None,), scale_rewards=("group",), off_policy_mask_threshold=(None,),
               num_items_in_batch=(None,))
    vllm = x.get("logp_rollout") is not None  # (vLLM generated the batch: its log-probs)
    if vllm:
        implements(p, vllm_importance_sampling_correction=(True,),
                   vllm_importance_sampling_mode=("token_truncate",))
    m = np.asarray(x["mask"]) == 1
    logp, logp_old = (np.where(m, np.asarray(x[k], dtype=np.float64), 0.0)
                      for k in ("logp", "logp_old"))
    # A_i = (s_i - mean_g) / (std_g + 1e-4), torch.std (n - 1) of the group, in float32
    s = np.asarray(x["scores"], dtype=np.float32)
    groups = np.asarray(x["groups"])
    A = np.zeros(len(s))
    for g in np.unique(groups):
        rows = groups == g
        if rows.sum() > 1:  # (a group of one: advantage 0)
            A[rows] = (s[rows] - s[rows].mean()) / (s[rows].std(ddof=1) + np.float32(1e-4))
    A = np.where(m, A[:, None], 0.0)
    # the clipped surrogate, token level: -min(rho A, clip(rho, 1 - eps, 1 + eps_high) A)
    eps = p["epsilon"]
    eps_high = eps if p["epsilon_high"] is None else p["epsilon_high"]
    rho = np.exp(logp - logp_old)
    clipped = np.clip(rho, 1 - eps, 1 + eps_high)
    unclipped = rho * A <= clipped * A
    term = np.where(unclipped, rho, clipped) * A
    # d term / d logp: rho A on the unclipped branch, and inside the clip range
    dterm = np.where(unclipped | ((rho > 1 - eps) & (rho < 1 + eps_high)), rho * A, 0.0)
    # vLLM's token weights, truncated (a bound None is none)
    w = np.ones_like(rho)
    if vllm:
        lo = p["vllm_importance_sampling_clip_min"] if with_clip_min else None
        hi = p["vllm_importance_sampling_clip_max"]
        logp_rollout = np.where(m, np.asarray(x["logp_rollout"], dtype=np.float64), 0.0)
        w = np.clip(np.exp(logp_old - logp_rollout), -np.inf if lo is None else lo,
                    np.inf if hi is None else hi)
    # dapo: the sum over the batch's tokens divided by their number
    n = m.sum()
    loss = -float(np.sum(np.where(m, w * term, 0.0)) / n)
    dlogp = np.where(m, -w * dterm / n, 0.0)
    return {"advantages": A, "policy_loss": loss, "dlogp": dlogp}


def step_without_clip_min(case):
    return step(case, with_clip_min=False)
