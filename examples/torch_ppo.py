"""The PPO math of ppo_numpy, written again in PyTorch the way trainers usually write it.

An independent implementation (it does not import ppo_numpy) that
``tests/test_torch_example.py`` checks against the oracle: outputs, and the
gradients autograd computes for them. Copy it as a template for checking
your own trainer (``docs/oracle.md``, "Check your own code in five minutes").

    rewards      r~_t = -beta KL_t + [t == last] score          (KL from the rollout logp_old)
    advantages   GAE by the reverse loop over response tokens, optionally whitened
    returns      R_t = A_t + V_old(s_t)                          (before whitening)
    policy_loss  max(-A rho, -A clip(rho, 1 - eps, 1 + eps)), token mean or
                 sum over tokens and mean over sequences
    value_loss   1/2 token mean of max((V - R)^2, (V_clip - R)^2), or of (V - R)^2

Run ``python examples/torch_ppo.py`` to print the outputs of one small batch.
"""

from __future__ import annotations

import torch


def masked_mean(x, mask):
    return (x * mask).sum() / mask.sum()


def masked_whiten(x, mask, eps=1e-8, shift_mean=True):
    mean = masked_mean(x, mask)
    centred = (x - mean) * mask
    # unbiased variance (divide by n - 1), eps inside the square root
    var = (centred**2).sum() / (mask.sum() - 1)
    whitened = centred * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


def kl_penalty(logp, logp_ref, estimator="k1"):
    log_ratio = logp - logp_ref
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    if estimator == "abs":
        return log_ratio.abs()
    raise ValueError(f"unknown KL estimator {estimator!r}")


def compute_rewards(scores, logp_old, logp_ref, mask, beta, estimator="k1"):
    rewards = -beta * kl_penalty(logp_old, logp_ref, estimator) * mask
    # the score goes to each row's last response token
    T = mask.shape[1]
    positions = torch.arange(T, device=mask.device).expand_as(mask)
    last = torch.where(mask.bool(), positions, -1).max(dim=1).values
    rows = torch.arange(mask.shape[0], device=mask.device)
    rewards[rows, last] = rewards[rows, last] + scores
    return rewards


def compute_gae(rewards, values, mask, gamma, lam):
    B, T = rewards.shape
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros(B, dtype=rewards.dtype, device=rewards.device)
    next_value = torch.zeros_like(last_gae)
    for t in reversed(range(T)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        # padding (also holes inside a response) carries the next token's values through
        last_gae = torch.where(m.bool(), delta + gamma * lam * last_gae, last_gae)
        next_value = torch.where(m.bool(), values[:, t], next_value)
        advantages[:, t] = last_gae * m
    returns = (advantages + values) * mask
    return advantages, returns


def policy_loss_fn(logp, logp_old, advantages, mask, eps, loss_agg="token-mean"):
    ratio = torch.exp(logp - logp_old)
    pg_losses = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - eps, 1.0 + eps)
    per_token = torch.max(pg_losses, pg_losses2)
    if loss_agg == "token-mean":
        loss = masked_mean(per_token, mask)
    elif loss_agg == "seq-mean-token-sum":
        loss = (per_token * mask).sum(dim=1).mean()
    else:
        raise ValueError(f"unknown loss aggregation {loss_agg!r}")
    with torch.no_grad():
        log_ratio = (logp - logp_old) * mask
        stats = {
            "clipfrac_active": masked_mean((pg_losses2 > pg_losses).to(logp.dtype), mask),
            "approx_kl_k1": masked_mean(-log_ratio, mask),
            "approx_kl_k3": masked_mean(torch.expm1(log_ratio) - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def value_loss_fn(values, old_values, returns, mask, clip=None):
    vf_losses1 = (values - returns) ** 2
    if clip is None:
        return 0.5 * masked_mean(vf_losses1, mask)
    values_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    vf_losses2 = (values_clipped - returns) ** 2
    return 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), mask)


def ppo_step(logp, logp_old, logp_ref, values, old_values, scores, mask, *, gamma=1.0,
             lam=0.95, beta=0.05, eps=0.2, value_clip=0.2, kl_estimator="k1",
             whiten_advantages=True, loss_agg="token-mean"):
    """Rewards, GAE, whitening and both losses; gradients flow to logp and values only."""
    with torch.no_grad():
        rewards = compute_rewards(scores, logp_old, logp_ref, mask, beta, kl_estimator)
        advantages, returns = compute_gae(rewards, old_values, mask, gamma, lam)
        if whiten_advantages:
            advantages = masked_whiten(advantages, mask)
    policy_loss, stats = policy_loss_fn(logp, logp_old, advantages, mask, eps, loss_agg)
    value_loss = value_loss_fn(values, old_values, returns, mask, value_clip)
    return {"rewards": rewards, "advantages": advantages, "returns": returns,
            "policy_loss": policy_loss, "value_loss": value_loss, **stats}


def run(inputs, dtype=torch.float64, **hyperparameters):
    """Run :func:`ppo_step` on NumPy arrays; return NumPy outputs with autograd's gradients.

    ``inputs`` holds logp, logp_old, logp_ref, values, old_values (B, T),
    scores (B,) and mask (B, T). Padding may hold NaN: it is zeroed before
    any arithmetic, as a trainer's masked_fill would. Outputs are float64
    NumPy arrays and floats; ``dlogp`` and ``dvalues`` are the gradients of
    the policy and value losses, ``stat/<name>`` the statistics.
    """
    mask = torch.as_tensor(inputs["mask"]).to(dtype)
    valid = mask.bool()

    def tensor(name, requires_grad=False):
        x = torch.as_tensor(inputs[name]).to(dtype)
        x = x.masked_fill(~valid, 0.0) if x.shape == mask.shape else x
        return x.requires_grad_(requires_grad)

    logp = tensor("logp", requires_grad=True)
    values = tensor("values", requires_grad=True)
    out = ppo_step(logp, tensor("logp_old"), tensor("logp_ref"), values, tensor("old_values"),
                   tensor("scores"), mask, **hyperparameters)
    (dlogp,) = torch.autograd.grad(out["policy_loss"], logp)
    (dvalues,) = torch.autograd.grad(out["value_loss"], values)
    out.update(dlogp=dlogp, dvalues=dvalues)

    def numpy(x):
        return x.detach().to(torch.float64).numpy()

    stat_names = ("clipfrac_active", "approx_kl_k1", "approx_kl_k3", "ratio_mean")
    result = {}
    for name, value in out.items():
        key = f"stat/{name}" if name in stat_names else name
        result[key] = float(value.detach()) if value.ndim == 0 else numpy(value)
    return result


if __name__ == "__main__":
    import numpy as np

    mask = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    example = {
        "logp": np.array([[-1.0, -2.0, -0.5], [-0.3, -1.2, np.nan]]),
        "logp_old": np.array([[-1.1, -1.8, -0.5], [-0.4, -1.0, np.nan]]),
        "logp_ref": np.array([[-1.2, -2.1, -0.6], [-0.3, -1.1, np.nan]]),
        "values": np.array([[0.5, 0.6, 0.7], [0.1, 0.3, np.nan]]),
        "old_values": np.array([[0.4, 0.6, 0.8], [0.2, 0.2, np.nan]]),
        "scores": np.array([1.0, -0.5]),
        "mask": mask,
    }
    for key, value in run(example).items():
        print(f"{key:<22} {np.round(value, 6).tolist()}")
