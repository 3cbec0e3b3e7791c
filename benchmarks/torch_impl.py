"""Baseline (c): the same algorithms on PyTorch CPU tensors (float64), as RLHF trainers write them.

GAE is a reverse Python loop over time on (B,) columns, the form of TRL's PPO
trainer and of verl's ``compute_gae_advantage_return`` (``docs/frameworks.md``
gives the sources); padding carries the next response token's value and
advantage through, as verl does for masked observation tokens. The other
functions are vectorised tensor expressions, and the policy-loss gradient
comes from autograd. Written here for this comparison; checked equal to
ppo_numpy (:func:`check_against_ppo_numpy`) before every run.

PyTorch is optional: :func:`available` says whether it is installed.
"""

from __future__ import annotations

import numpy as np


def available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def as_tensors(batch) -> dict:
    """The batch as float64 CPU tensors sharing memory with the arrays; mask as 0/1 floats."""
    import torch

    out = {name: torch.from_numpy(getattr(batch, name))
           for name in ("scores", "logp", "logp_old", "logp_ref", "values", "rewards",
                        "advantages", "rho")}
    out["mask"] = torch.from_numpy(batch.mask.astype(np.float64))
    return out


def td_errors_torch(rewards, values, gamma, mask):
    import torch

    # V(s_{t+1}): the next column, 0 after the last response token (right padding)
    next_values = torch.cat([values[:, 1:] * mask[:, 1:], torch.zeros_like(values[:, :1])], 1)
    return (rewards + gamma * next_values - values) * mask


def gae_torch(rewards, values, gamma, lam, mask):
    import torch

    B, T = values.shape
    A_next = torch.zeros(B, dtype=values.dtype)
    V_next = torch.zeros(B, dtype=values.dtype)
    columns = [None] * T
    for t in range(T - 1, -1, -1):
        m_t = mask[:, t]
        delta_t = rewards[:, t] + gamma * V_next - values[:, t]
        A_t = delta_t + gamma * lam * A_next
        A_next = A_t * m_t + A_next * (1 - m_t)
        V_next = values[:, t] * m_t + V_next * (1 - m_t)
        columns[t] = A_next
    advantages = torch.stack(columns, dim=1) * mask
    return advantages, (advantages + values) * mask


def kl_shaped_rewards_torch(scores, logp, logp_ref, beta, mask):
    import torch

    rewards = -beta * (logp - logp_ref) * mask
    last = mask.shape[1] - 1 - torch.argmax(mask.flip(1), dim=1)
    rewards[torch.arange(mask.shape[0]), last] += scores
    return rewards


def whiten_torch(x, mask, eps=1e-8):
    import torch

    n = mask.sum()
    mean = (x * mask).sum() / n
    var = (((x - mean) * mask) ** 2).sum() / (n - 1)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def clipped_surrogate_torch(rho, advantages, epsilon, mask):
    import torch

    return torch.min(rho * advantages,
                     torch.clamp(rho, 1 - epsilon, 1 + epsilon) * advantages) * mask


def policy_loss_grad_torch(logp, logp_old, advantages, mask, epsilon):
    """Token-mean loss, the statistics of ``ppo_policy_loss``, and d loss / d logp by autograd."""
    import torch

    logp = logp.detach().requires_grad_(True)
    log_rho = logp - logp_old
    rho = torch.exp(log_rho)
    unclipped = rho * advantages
    term = torch.min(unclipped, torch.clamp(rho, 1 - epsilon, 1 + epsilon) * advantages)
    n = mask.sum()
    loss = -(term * mask).sum() / n
    loss.backward()
    with torch.no_grad():
        valid = mask > 0
        r = rho[valid]
        lr = log_rho[valid]
        stats = {"clipfrac_active": ((term < unclipped).double() * mask).sum() / n,
                 "clipfrac_outside": (((rho < 1 - epsilon) | (rho > 1 + epsilon)).double()
                                      * mask).sum() / n,
                 "approx_kl_k1": (-lr).mean(), "approx_kl_k2": (lr**2 / 2).mean(),
                 "approx_kl_k3": (torch.expm1(lr) - lr).mean(),
                 "ratio_mean": r.mean(), "ratio_min": r.min(), "ratio_max": r.max(),
                 "dual_clipfrac": 0.0}  # no dual clip in this comparison
        stats = {k: float(v) for k, v in stats.items()}
    return float(loss.detach()), stats, logp.grad


def pipeline_torch(t, beta, gamma, lam, epsilon):
    rewards = kl_shaped_rewards_torch(t["scores"], t["logp_old"], t["logp_ref"], beta, t["mask"])
    advantages, returns = gae_torch(rewards, t["values"], gamma, lam, t["mask"])
    advantages = whiten_torch(advantages, t["mask"])
    loss, stats, dlogp = policy_loss_grad_torch(t["logp"], t["logp_old"], advantages, t["mask"],
                                                epsilon)
    return loss, dlogp, returns


def check_against_ppo_numpy(batch) -> None:
    """Raise AssertionError unless every torch version equals ppo_numpy on ``batch``."""
    from benchmarks.core import PARAMS, check_outputs

    p, t = PARAMS, as_tensors(batch)
    A, R = gae_torch(t["rewards"], t["values"], p["gamma"], p["lam"], t["mask"])
    loss, stats, grad = policy_loss_grad_torch(t["logp"], t["logp_old"], t["advantages"],
                                               t["mask"], p["epsilon"])
    pipe = pipeline_torch(t, p["beta"], p["gamma"], p["lam"], p["epsilon"])
    check_outputs("torch", batch, {
        "td_errors": td_errors_torch(t["rewards"], t["values"], p["gamma"], t["mask"]),
        "gae advantages": A,
        "gae returns": R,
        "kl_shaped_rewards": kl_shaped_rewards_torch(t["scores"], t["logp"], t["logp_ref"],
                                                     p["beta"], t["mask"]),
        "whiten": whiten_torch(t["advantages"], t["mask"]),
        "clipped_surrogate": clipped_surrogate_torch(t["rho"], t["advantages"], p["epsilon"],
                                                     t["mask"]),
        "policy loss": loss,
        **{f"policy loss stat {key}": value for key, value in stats.items()},
        "policy loss gradient": grad,
        "pipeline loss": pipe[0],
        "pipeline gradient": pipe[1],
        "pipeline returns": pipe[2],
    })
