"""Baseline (a): each formula as a straightforward scalar Python loop over lists.

Inputs are lists of rows (lists of floats) and mask rows (lists of bools),
converted before timing; outputs are lists of rows, 0.0 at padding. The
formulas and conventions are those of ``ppo_numpy`` (checked equal to it in
:func:`check_against_ppo_numpy` before every run).
"""

from __future__ import annotations

import math


def td_errors_loop(rewards, values, gamma, mask):
    out = []
    for r, v, m in zip(rewards, values, mask):
        row = [0.0] * len(r)
        v_next = 0.0
        for t in range(len(r) - 1, -1, -1):
            if m[t]:
                # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
                row[t] = r[t] + gamma * v_next - v[t]
                v_next = v[t]
        out.append(row)
    return out


def gae_loop(rewards, values, gamma, lam, mask):
    advantages, returns = [], []
    for r, v, m in zip(rewards, values, mask):
        A_row, R_row = [0.0] * len(r), [0.0] * len(r)
        v_next = 0.0
        A_next = 0.0
        for t in range(len(r) - 1, -1, -1):
            if m[t]:
                delta = r[t] + gamma * v_next - v[t]
                # A_t = delta_t + gamma lam A_{t+1}
                A_next = delta + gamma * lam * A_next
                A_row[t] = A_next
                R_row[t] = A_next + v[t]
                v_next = v[t]
        advantages.append(A_row)
        returns.append(R_row)
    return advantages, returns


def kl_shaped_rewards_loop(scores, logp, logp_ref, beta, mask):
    out = []
    for score, lp, lr, m in zip(scores, logp, logp_ref, mask):
        row = [0.0] * len(lp)
        last = -1
        for t in range(len(lp)):
            if m[t]:
                # r~_t = -beta (logp_t - logp_ref_t)   (k1)
                row[t] = -beta * (lp[t] - lr[t])
                last = t
        row[last] += score
        out.append(row)
    return out


def whiten_loop(x, mask, eps=1e-8):
    total, n = 0.0, 0
    for row, m in zip(x, mask):
        for t in range(len(row)):
            if m[t]:
                total += row[t]
                n += 1
    mean = total / n
    square = 0.0
    for row, m in zip(x, mask):
        for t in range(len(row)):
            if m[t]:
                square += (row[t] - mean) ** 2
    scale = 1.0 / math.sqrt(square / (n - 1) + eps)
    return [[(row[t] - mean) * scale if m[t] else 0.0 for t in range(len(row))]
            for row, m in zip(x, mask)]


def clipped_surrogate_loop(rho, advantages, epsilon, mask):
    lo, hi = 1.0 - epsilon, 1.0 + epsilon
    out = []
    for p, a, m in zip(rho, advantages, mask):
        row = [0.0] * len(p)
        for t in range(len(p)):
            if m[t]:
                # min(rho A, clip(rho, 1 - eps, 1 + eps) A)
                row[t] = min(p[t] * a[t], min(max(p[t], lo), hi) * a[t])
        out.append(row)
    return out


def policy_loss_grad_loop(logp, logp_old, advantages, mask, epsilon):
    """Token-mean loss, the statistics of ``ppo_policy_loss`` and d loss / d logp."""
    lo, hi = 1.0 - epsilon, 1.0 + epsilon
    n = sum(sum(1 for b in m if b) for m in mask)
    total = clip_active = outside = k1 = k2 = k3 = rho_sum = 0.0
    rho_min, rho_max = math.inf, -math.inf
    grad = []
    for lp, lo_, a, m in zip(logp, logp_old, advantages, mask):
        row = [0.0] * len(lp)
        for t in range(len(lp)):
            if not m[t]:
                continue
            log_rho = lp[t] - lo_[t]
            rho = math.exp(log_rho)
            unclipped = rho * a[t]
            term = min(unclipped, min(max(rho, lo), hi) * a[t])
            total += term
            clip_active += term < unclipped
            outside += rho < lo or rho > hi
            k1 -= log_rho
            k2 += log_rho * log_rho / 2
            k3 += math.expm1(log_rho) - log_rho
            rho_sum += rho
            rho_min, rho_max = min(rho_min, rho), max(rho_max, rho)
            inside = rho <= hi if a[t] > 0 else rho >= lo
            # d loss / d logp = -(1/n) [inside] A rho
            row[t] = -a[t] * rho / n if inside else 0.0
        grad.append(row)
    stats = {"clipfrac_active": clip_active / n, "clipfrac_outside": outside / n,
             "approx_kl_k1": k1 / n, "approx_kl_k2": k2 / n, "approx_kl_k3": k3 / n,
             "ratio_mean": rho_sum / n, "ratio_min": rho_min, "ratio_max": rho_max,
             "dual_clipfrac": 0.0}  # no dual clip in this comparison
    return -total / n, stats, grad


def pipeline_loop(scores, logp, logp_old, logp_ref, values, mask, beta, gamma, lam, epsilon):
    rewards = kl_shaped_rewards_loop(scores, logp_old, logp_ref, beta, mask)
    advantages, returns = gae_loop(rewards, values, gamma, lam, mask)
    advantages = whiten_loop(advantages, mask)
    loss, stats, dlogp = policy_loss_grad_loop(logp, logp_old, advantages, mask, epsilon)
    return loss, dlogp, returns


def check_against_ppo_numpy(batch) -> None:
    """Raise AssertionError unless every loop equals ppo_numpy on ``batch`` (rtol 1e-9)."""
    from benchmarks.core import PARAMS, check_outputs

    p, L = PARAMS, as_lists(batch)
    A, R = gae_loop(L["rewards"], L["values"], p["gamma"], p["lam"], L["mask"])
    loss, stats, grad = policy_loss_grad_loop(L["logp"], L["logp_old"], L["advantages"],
                                              L["mask"], p["epsilon"])
    pipe = pipeline_loop(L["scores"], L["logp"], L["logp_old"], L["logp_ref"], L["values"],
                         L["mask"], p["beta"], p["gamma"], p["lam"], p["epsilon"])
    check_outputs("scalar loop", batch, {
        "td_errors": td_errors_loop(L["rewards"], L["values"], p["gamma"], L["mask"]),
        "gae advantages": A,
        "gae returns": R,
        "kl_shaped_rewards": kl_shaped_rewards_loop(L["scores"], L["logp"], L["logp_ref"],
                                                    p["beta"], L["mask"]),
        "whiten": whiten_loop(L["advantages"], L["mask"]),
        "clipped_surrogate": clipped_surrogate_loop(L["rho"], L["advantages"], p["epsilon"],
                                                    L["mask"]),
        "policy loss": loss,
        **{f"policy loss stat {key}": value for key, value in stats.items()},
        "policy loss gradient": grad,
        "pipeline loss": pipe[0],
        "pipeline gradient": pipe[1],
        "pipeline returns": pipe[2],
    })


def as_lists(batch, rows=None) -> dict:
    """The batch's arrays as Python lists (the first ``rows`` rows if given)."""
    sl = slice(None) if rows is None else slice(0, rows)
    return {"scores": batch.scores[sl].tolist(), "logp": batch.logp[sl].tolist(),
            "logp_old": batch.logp_old[sl].tolist(), "logp_ref": batch.logp_ref[sl].tolist(),
            "values": batch.values[sl].tolist(), "rewards": batch.rewards[sl].tolist(),
            "advantages": batch.advantages[sl].tolist(), "rho": batch.rho[sl].tolist(),
            "mask": batch.mask[sl].tolist()}
