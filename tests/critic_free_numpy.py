"""Independent NumPy transcriptions of the three critic-free losses, for the oracle's tests.

Written from the frameworks' formulas (trl 1.16.0 ``trl/trainer/grpo_trainer.py``,
verl 0.9.1 ``verl/trainer/ppo/core_algos.py``, openrlhf 0.11.2 ``openrlhf/models/loss.py``
and ``openrlhf/trainer/ppo_utils/experience_maker.py``) with plain loops over groups and
hand-derived gradients, without calling ppo_numpy: the diagnosis tests plant conventions
into these (``tests/test_oracle_planted.py``). Each takes a case and ``**plant``, overrides
of the framework's parameters, named as the presets name them, and returns
``advantages`` (B, T), ``policy_loss`` and ``dlogp`` (B, T), d policy_loss / d logp (and
verl's logged ``stat/actor/ppo_kl``, where its log-ratio clamp shows: :data:`OUTPUTS`).
"""

from __future__ import annotations

import numpy as np

OUTPUTS = {name: ["advantages", "policy_loss", "dlogp"]
           for name in ("trl-grpo", "verl-grpo", "openrlhf-grpo")}
OUTPUTS["verl-grpo"] = OUTPUTS["verl-grpo"] + ["stat/actor/ppo_kl"]

TRL = {"loss_type": "dapo", "scale_rewards": "group", "importance_sampling_level": "token",
       "epsilon": 0.2, "epsilon_high": None, "delta": None, "beta": 0.0,
       "use_bias_correction_kl": True, "max_completion_length": 512,
       "num_items_in_batch": None, "std_ddof": 1,
       "std_eps": 1e-4, "std_eps_placement": "std", "singleton": "zero",
       "kl_estimator": "k3", "log_ratio_clamp": None, "cispo_clip": "max",
       "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}
VERL = {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "loss_agg_mode": "token-mean",
        "loss_mode": "vanilla", "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
        "clip_ratio_c": 3.0, "use_kl_loss": False, "kl_loss_coef": 0.001,
        "kl_loss_type": "low_var_kl", "use_kl_in_reward": False, "kl_penalty": "kl",
        "kl_coef": 0.001, "std_ddof": 1, "std_eps": 1e-6, "std_eps_placement": "std",
        "singleton": "raw", "log_ratio_clamp": 20.0, "cispo_clip": "range",
        "log_ratio_max": 10.0, "gdpo_reward_weights": None}
OPENRLHF = {"advantage_estimator": "group_norm", "init_kl_coef": 0.01, "kl_estimator": "k1",
            "use_kl_loss": False, "epsilon": 0.2, "epsilon_high": None, "dual_clip": None,
            "policy_loss_type": "ppo", "std_ddof": 1, "std_eps": 1e-9,
            "std_eps_placement": "std", "log_ratio_clamp": 20.0, "kl_unbiased_gradient": False,
            "kl_is_bound": 10.0}


def _inputs(case):
    x = case["inputs"]
    m = np.asarray(x["mask"], dtype=np.float64)
    on = m == 1
    get = {k: np.where(on, np.asarray(x[k], dtype=np.float64), 0.0)
           for k in ("logp", "logp_old", "logp_ref")}
    return get["logp"], get["logp_old"], get["logp_ref"], m, np.asarray(x["scores"], float), \
        np.asarray(x["groups"]).astype(int)


def group_normalise(s, groups, *, scale, eps, ddof, placement, singleton, dtype=np.float64):
    """(s_i - mean) / (std + eps) or / sqrt(var + eps), one group at a time, in ``dtype``
    (TRL's and verl's reward tensors are float32)."""
    s = np.asarray(s, dtype=dtype)
    eps = dtype(eps)
    A = np.zeros(len(s))
    var_all = sum((v - s.mean()) ** 2 for v in s) / (len(s) - ddof)
    for g in sorted(set(groups.tolist())):
        rows = [i for i in range(len(s)) if groups[i] == g]
        vals = [s[i] for i in rows]
        n = len(vals)
        if n == 1:
            mean, var = (s[rows[0]], dtype(1)) if singleton == "zero" else (dtype(0), dtype(1))
        else:
            mean = sum(vals) / n
            var = sum((v - mean) ** 2 for v in vals) / (n - ddof)
        if scale == "batch":
            var = var_all
        for i in rows:
            centred = 0.0 if all(v == vals[0] for v in vals) and n > 1 else s[i] - mean
            if scale == "none":
                A[i] = centred
                continue
            denom = np.sqrt(var + eps) if placement == "var" else np.sqrt(var) + eps
            with np.errstate(invalid="ignore", divide="ignore"):
                A[i] = centred / denom
    return A


def kl_and_grad(logp, ref, kind):
    """Per-token KL(pi || ref) estimate of ``kind`` and its derivative in logp."""
    d = logp - ref
    if kind in ("k1", "kl"):
        return d, np.ones_like(d)
    if kind in ("k2", "mse"):
        return 0.5 * d * d, d
    if kind == "abs":
        return np.abs(d), np.sign(d)
    # k3 = exp(ref - logp) - (ref - logp) - 1, d/dlogp = 1 - exp(ref - logp)
    if kind == "k3_raw":
        return np.exp(-d) + d - 1, 1 - np.exp(-d)
    # verl's low_var_kl / k3 and OpenRLHF's k3: the log-ratio to [-20, 20] (verl) and the
    # estimate clamped to [-10, 10]
    kl = np.clip(-d, -20, 20)
    raw = np.exp(kl) - kl - 1
    grad = np.where((np.abs(d) <= 20) & (np.abs(raw) <= 10), 1 - np.exp(-d), 0.0)
    return np.clip(raw, -10, 10), grad


def aggregate_weights(m, mode, norm=None):
    """The weight w_t of each token in a loss sum_t w_t l_t."""
    B, T = m.shape
    n_i = m.sum(axis=1, keepdims=True)
    if mode in ("token-mean", "bnpo"):
        return m / m.sum()
    if mode in ("seq-mean-token-mean", "grpo"):
        return m / (B * n_i)
    if mode == "seq-mean-token-sum":
        return m / B
    if mode == "seq-mean-token-sum-norm":
        return m / (B * T)
    if mode == "dr_grpo":
        return m / (B * (T if norm is None else norm))
    if mode == "luspo":  # TRL: (per_token_loss * mask).sum(-1).mean()
        return m / B
    if mode == "dapo":
        return m / (m.sum() if norm is None else norm)
    raise ValueError(mode)


def _log_ratio(logp, logp_old, clamp):
    lr = logp - logp_old
    if clamp is None:
        return lr, np.ones_like(lr)
    return np.clip(lr, -clamp, clamp), (np.abs(lr) <= clamp).astype(float)


def _clip_terms(rho, drho, A, low, high, delta=None):
    """-min(rho' A, clip(rho) A) with rho' = min(rho, delta), and its derivative in logp given
    drho = d rho / d logp."""
    coef1 = rho if delta is None else np.minimum(rho, delta)
    dcoef1 = drho if delta is None else np.where(rho < delta, drho, 0.0)
    coef2 = np.clip(rho, 1 - low, 1 + high)
    dcoef2 = np.where((rho > 1 - low) & (rho < 1 + high), drho, 0.0)
    unclipped = coef1 * A <= coef2 * A
    loss = -np.where(unclipped, coef1 * A, coef2 * A)
    dloss = -np.where(unclipped, dcoef1 * A, dcoef2 * A)
    return loss, dloss


def trl_grpo(case, **plant):
    p = {**TRL, **case.get("params", {}), **plant}
    logp, logp_old, ref, m, s, groups = _inputs(case)
    A_i = group_normalise(s, groups, scale=p["scale_rewards"], eps=p["std_eps"],
                          ddof=p["std_ddof"], placement=p["std_eps_placement"],
                          singleton=p["singleton"], dtype=np.float32)
    A = A_i[:, None] * m
    Ab = A_i[:, None] * np.ones_like(m)
    lr, dlr = _log_ratio(logp, logp_old, p["log_ratio_clamp"])
    eps_high = p["epsilon"] if p["epsilon_high"] is None else p["epsilon_high"]
    n_i = m.sum(axis=1, keepdims=True)
    sequence = p["importance_sampling_level"] == "sequence"
    if sequence:
        lw = (lr * m).sum(axis=1, keepdims=True) / n_i
        rho = np.exp(lw) * np.ones_like(m)
    else:
        rho = np.exp(lr)
    # coef_1 of the level (vespo's too: TRL computes it before the loss type's branch)
    coef_1, level_sequence = rho, sequence
    vespo = p["loss_type"] == "vespo"
    if vespo:
        # TRL's get_gamma_weights: phi of the summed token log-ratios, detached; the level
        # is ignored
        sequence = False
        phi = np.zeros(len(s))
        for i in range(len(s)):
            k, lam = ((p["vespo_k_pos"], p["vespo_lambda_pos"]) if A_i[i] >= 0 else
                      (p["vespo_k_neg"], p["vespo_lambda_neg"]))
            lam = max(lam, 1e-4)
            total = sum(min(max(lr[i, t], -20.0), 20.0) for t in range(len(lr[i])) if m[i, t])
            log_w = min(max(total, np.log(1e-8)), 20.0)
            phi[i] = np.exp(lam + k * log_w - lam * np.exp(log_w))
        loss_t, dloss_t = -phi[:, None] * Ab * logp, -phi[:, None] * Ab
    elif p["loss_type"] == "cispo":
        w = np.minimum(rho, eps_high) if p["cispo_clip"] == "max" else \
            np.clip(rho, 1 - p["epsilon"], 1 + eps_high)
        loss_t, dloss_t = -w * Ab * logp, -w * Ab
    else:
        # d rho / d logp: rho at the token level; at the sequence level it goes to every
        # token of the row through the mean, rho / n_i (added below)
        loss_t, g = _clip_terms(rho, rho * (dlr if not sequence else 1.0), Ab, p["epsilon"],
                                eps_high, p["delta"])
        dloss_t = g
    kl_ratio_part = None
    if p["beta"] != 0:
        kind = "k3_raw" if p["kl_estimator"] == "k3" else p["kl_estimator"]
        kl, dkl = kl_and_grad(logp, ref, kind)
        if p["use_bias_correction_kl"]:
            # per_token_kl * coef_1 (trl 1.16.0): the ratio's own gradient is added below
            kl_ratio_part = kl * coef_1
            kl, dkl = kl * coef_1, dkl * coef_1
        loss_t, dloss_t = loss_t + p["beta"] * kl, dloss_t + p["beta"] * dkl
    mode = {"cispo": "dapo", "vespo": "dapo"}.get(p["loss_type"], p["loss_type"])
    norm = {"dr_grpo": p["max_completion_length"], "dapo": p["num_items_in_batch"]}.get(mode)
    w = aggregate_weights(m, mode, norm)
    loss = float((w * loss_t * m).sum())
    extra = 0.0
    if kl_ratio_part is not None:
        # d coef_1 / d logp_t: coef_1 dlr_t (token); coef_1 dlr_t / n_i (sequence, every
        # token of the row gets the row's weighted sum)
        if level_sequence:
            extra = (w * kl_ratio_part * m).sum(axis=1, keepdims=True) * dlr / n_i * m
        else:
            extra = w * kl_ratio_part * dlr * m
        extra = p["beta"] * extra
    if sequence and p["loss_type"] not in ("cispo", "vespo"):
        # the clip term's derivative in lw, summed over the row's weights, times dlw/dlogp_t
        clip_part = g
        kl_part = dloss_t - g
        row = (w * clip_part * m).sum(axis=1, keepdims=True)
        dlogp = (row * dlr / n_i) * m + w * kl_part * m
    else:
        dlogp = w * dloss_t * m
    return {"advantages": A, "policy_loss": loss, "dlogp": dlogp + extra}


def verl_grpo(case, **plant):
    p = {**VERL, **case.get("params", {}), **plant}
    logp, logp_old, ref, m, s, groups = _inputs(case)
    B, T = m.shape
    last = m.sum(axis=1).astype(int) - 1
    rewards = np.zeros_like(m)
    rewards[np.arange(B), last] = s
    if p["use_kl_in_reward"]:
        kind = {"low_var_kl": "k3"}.get(p["kl_penalty"], p["kl_penalty"])
        rewards = rewards - p["kl_coef"] * kl_and_grad(logp_old, ref, kind)[0] * m
    # verl 0.9.1's token_level_rewards: float32 scores, promoted to float64 by the KL penalty
    dtype = np.float64 if p["use_kl_in_reward"] else np.float32
    seq = rewards.astype(dtype).sum(axis=1)
    if p["adv_estimator"] == "grpo":
        A_i = group_normalise(seq, groups, scale="group" if p["norm_adv_by_std_in_grpo"]
                              else "none", eps=p["std_eps"], ddof=p["std_ddof"],
                              placement=p["std_eps_placement"], singleton=p["singleton"],
                              dtype=dtype)
    elif p["adv_estimator"] == "gdpo":
        # GRPO per reward component (the reward function's, float32: no KL), weighted,
        # summed, then whitened over the tokens (masked_whiten: ddof 1, rsqrt(var + 1e-8))
        comps = case["inputs"].get("reward_components")
        comps = s[:, None] if comps is None else np.asarray(comps, dtype=np.float64)
        weights = p["gdpo_reward_weights"] or [1.0] * comps.shape[1]
        S = np.zeros(B)
        for k in range(comps.shape[1]):
            S += weights[k] * group_normalise(comps[:, k], groups, scale="group",
                                              eps=p["std_eps"], ddof=p["std_ddof"],
                                              placement=p["std_eps_placement"],
                                              singleton=p["singleton"], dtype=np.float32)
        tokens = [S[i] for i in range(B) for t in range(T) if m[i, t]]
        mean = sum(tokens) / len(tokens)
        var = sum((v - mean) ** 2 for v in tokens) / (len(tokens) - 1)
        A_i = (S - mean) / np.sqrt(var + 1e-8)
    else:  # rloo: s - the mean of the others; a group of one keeps its score
        A_i = np.zeros(B)
        for i in range(B):
            others = [seq[j] for j in range(B) if groups[j] == groups[i] and j != i]
            A_i[i] = seq[i] - (sum(others) / len(others) if others else 0.0)
    A = A_i[:, None] * m
    low, high = p["clip_ratio_low"], p["clip_ratio_high"]
    mode = p["loss_mode"]
    if mode == "gspo":
        lw = ((logp - logp_old) * m).sum(axis=1, keepdims=True) / m.sum(axis=1, keepdims=True)
        lw = lw * np.ones_like(m)
        cap = np.inf if p["log_ratio_max"] is None else p["log_ratio_max"]
        rho = np.exp(np.minimum(lw, cap))
        drho = np.where(lw <= cap, rho, 0.0)  # the token's own logp, the rest detached
        pg1, pg2 = -A * rho, -A * np.clip(rho, 1 - low, 1 + high)
        loss_t = np.maximum(pg1, pg2)
        dloss_t = np.where(pg1 >= pg2, -A * drho,
                           np.where((rho > 1 - low) & (rho < 1 + high), -A * drho, 0.0))
    else:
        lr, dlr = _log_ratio(logp, logp_old, p["log_ratio_clamp"])
        rho = np.exp(lr)
        if mode == "cispo":
            w = np.clip(rho, 1 - low, 1 + high) if p["cispo_clip"] == "range" else \
                np.minimum(rho, high)
            loss_t, dloss_t = -w * A * logp, -w * A
        else:
            loss_t, dloss_t = _clip_terms(rho, rho * dlr, A, low, high)
            dual = -A * p["clip_ratio_c"]
            bounded = (A < 0) & (dual < loss_t)
            loss_t = np.where(bounded, dual, loss_t)
            dloss_t = np.where(bounded, 0.0, dloss_t)
    # verl 0.9.1's compute_policy_loss_gspo aggregates by loss_agg_mode, as the others do
    w = aggregate_weights(m, p["loss_agg_mode"])
    loss = float((w * loss_t * m).sum())
    dlogp = w * dloss_t * m
    # the logged mean of -(log-ratio), clamped as the loss clamps it (GSPO: not clamped)
    lr_logged = logp - logp_old if mode == "gspo" else _log_ratio(logp, logp_old,
                                                                  p["log_ratio_clamp"])[0]
    ppo_kl = float((-lr_logged * m).sum() / m.sum())
    if p["use_kl_loss"]:
        name = p["kl_loss_type"].removesuffix("+")
        kind = {"low_var_kl": "k3"}.get(name, name)
        kl, dkl = kl_and_grad(logp, ref, kind)
        if p["kl_loss_type"].endswith("+"):
            # verl 0.9.1 kl_penalty: k2 - sg(k2) + sg(kl), the gradient k2's
            dkl = logp - ref
        wk = aggregate_weights(m, p["loss_agg_mode"])
        loss += p["kl_loss_coef"] * float((wk * kl * m).sum())
        dlogp = dlogp + p["kl_loss_coef"] * wk * dkl * m
    return {"advantages": A, "policy_loss": loss, "dlogp": dlogp, "stat/actor/ppo_kl": ppo_kl}


def openrlhf_grpo(case, **plant):
    p = {**OPENRLHF, **case.get("params", {}), **plant}
    logp, logp_old, ref, m, s, groups = _inputs(case)
    B, T = m.shape
    est = p["advantage_estimator"]
    if est == "group_norm":
        r = group_normalise(s, groups, scale="group", eps=p["std_eps"], ddof=p["std_ddof"],
                            placement=p["std_eps_placement"], singleton="zero")
    else:
        r = np.zeros(B)
        for i in range(B):
            mates = [s[j] for j in range(B) if groups[j] == groups[i]]
            if est == "rloo":
                r[i] = s[i] - (sum(mates) - s[i]) / (len(mates) - 1)
            else:  # dr_grpo: s - the group mean
                r[i] = s[i] - sum(mates) / len(mates)
    r = np.clip(r, -10.0, 10.0)
    last = m.sum(axis=1).astype(int) - 1
    rewards = np.zeros_like(m)
    rewards[np.arange(B), last] = r
    if not p["use_kl_loss"] and p["init_kl_coef"] > 0:
        # (OpenRLHF's compute_approx_kl clamps every estimator to [-10, 10])
        kl = np.clip(kl_and_grad(logp_old, ref, p["kl_estimator"])[0], -10, 10)
        rewards = rewards - p["init_kl_coef"] * kl * m
    # returns-to-go with gamma 1: A_t = sum of the row's rewards from t on
    A = np.cumsum(rewards[:, ::-1], axis=1)[:, ::-1] * m
    eps_high = p["epsilon"] if p["epsilon_high"] is None else p["epsilon_high"]
    n_i = m.sum(axis=1, keepdims=True)
    gspo = p["policy_loss_type"] == "gspo"
    if gspo:
        lw = ((logp - logp_old) * m).sum(axis=1, keepdims=True) / n_i
        rho = np.exp(lw) * np.ones_like(m)
        loss_t, g = _clip_terms(rho, rho, A, p["epsilon"], eps_high)
        if p["dual_clip"] is not None:  # (PolicyLoss applies it to either ratio)
            dual = -p["dual_clip"] * A
            bounded = (A < 0) & (dual < loss_t)
            loss_t, g = np.where(bounded, dual, loss_t), np.where(bounded, 0.0, g)
        w = aggregate_weights(m, "seq-mean-token-mean")
        row = (w * g * m).sum(axis=1, keepdims=True)
        loss = float((w * loss_t * m).sum())
        dlogp = row / n_i * m
    else:
        lr, dlr = _log_ratio(logp, logp_old, p["log_ratio_clamp"])
        rho = np.exp(lr)
        loss_t, dloss_t = _clip_terms(rho, rho * dlr, A, p["epsilon"], eps_high)
        if p["dual_clip"] is not None:
            dual = -p["dual_clip"] * A
            bounded = (A < 0) & (dual < loss_t)
            loss_t = np.where(bounded, dual, loss_t)
            dloss_t = np.where(bounded, 0.0, dloss_t)
        w = aggregate_weights(m, "token-mean")
        loss = float((w * loss_t * m).sum())
        dlogp = w * dloss_t * m
    if p["use_kl_loss"]:
        kind = "k3" if p["kl_estimator"] == "k3" else p["kl_estimator"]
        kl, dkl = kl_and_grad(logp, ref, kind)
        kl, dkl = np.clip(kl, -10, 10), np.where(np.abs(kl) <= 10, dkl, 0.0)
        if p["kl_unbiased_gradient"]:
            # openrlhf 0.11.2 compute_approx_kl: sg(kl) + w k2 - sg(w k2), the weight
            # w = min(pi / pi_old, KL_IS_WEIGHT_CLIP) held
            w_is = np.exp(logp - logp_old)
            if p["kl_is_bound"] is not None:
                w_is = np.minimum(w_is, p["kl_is_bound"])
            dkl = w_is * (logp - ref)
        wt = aggregate_weights(m, "token-mean")
        loss += p["init_kl_coef"] * float((wt * kl * m).sum())
        dlogp = dlogp + p["init_kl_coef"] * wt * dkl * m
    return {"advantages": A, "policy_loss": loss, "dlogp": dlogp}


CANDIDATES = {"trl-grpo": trl_grpo, "verl-grpo": verl_grpo, "openrlhf-grpo": openrlhf_grpo}
DTYPES = {"trl-grpo": "float32", "verl-grpo": "float32", "openrlhf-grpo": "float64"}
"""The dtype each is compared in: TRL and verl compute the group advantages in float32."""
