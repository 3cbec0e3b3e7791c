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
       "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0,
       "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05,
       # the vLLM correction and the off-policy mask (GRPOConfig), the third policy's
       # conventions TRL takes
       "use_vllm": None, "vllm_importance_sampling_correction": True,
       "vllm_importance_sampling_mode": "sequence_mask", "vllm_importance_sampling_clip_min": None,
       "vllm_importance_sampling_clip_max": 3.0, "off_policy_mask_threshold": None,
       "is_log_ratio_bound": None, "is_sequence_weight": "product", "rejection": "weight",
       "masked_weights": "zero", "is_weights_on_kl": False,
       "off_policy_mask_logps": "sampling-current", "kl_gradient": None}
VERL = {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "loss_agg_mode": "token-mean",
        "loss_mode": "vanilla", "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
        "clip_ratio_c": 3.0, "use_kl_loss": False, "kl_loss_coef": 0.001,
        "kl_loss_type": "low_var_kl", "use_kl_in_reward": False, "kl_penalty": "kl",
        "kl_coef": 0.001, "std_ddof": 1, "std_eps": 1e-6, "std_eps_placement": "std",
        "singleton": "raw", "log_ratio_clamp": 20.0, "cispo_clip": "range",
        "log_ratio_max": 10.0, "gdpo_reward_weights": None, "tau_pos": 1.0, "tau_neg": 1.05,
        # algorithm.rollout_correction, and the third policy's conventions verl takes
        "rollout_is": None, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False,
        "rollout_rs": None, "rollout_rs_threshold": None, "bypass_mode": False,
        "rollout_loss_type": "ppo_clip", "is_log_ratio_bound": 20.0,
        "is_sequence_weight": "product", "rejection": "mask", "masked_weights": "zero",
        "is_weights_on_kl": False, "is_weights_detach": True, "gmpo_weight_mean": "geometric",
        "sequence_gradient": "token", "kl_gradient": None}
OPENRLHF = {"advantage_estimator": "group_norm", "init_kl_coef": 0.01, "kl_estimator": "k1",
            "use_kl_loss": False, "epsilon": 0.2, "epsilon_high": None, "dual_clip": None,
            "policy_loss_type": "ppo", "std_ddof": 1, "std_eps": 1e-9,
            "std_eps_placement": "std", "log_ratio_clamp": 20.0,
            # --algo.advantage.is_correction_*, and the conventions OpenRLHF takes
            "is_correction_level": "off", "is_correction_mode": "mask",
            "is_correction_gating": "ratio", "is_correction_threshold": (0.5, 5.0),
            "is_log_ratio_bound": None, "is_sequence_weight": "geometric-mean",
            "masked_weights": "zero", "is_weights_on_kl": False, "sequence_gradient": "sequence",
            "kl_unbiased_gradient": False, "kl_is_bound": 10.0, "kl_gradient": None}


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
    n_i = np.maximum(m.sum(axis=1, keepdims=True), 1)  # (a row without a token: weights 0)
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


def kl_form_terms(form, kl, dkl, logp, ref, logp_old, clamp=None, bound=10.0):
    """(value, d value / d logp) per token of the KL term in another framework's gradient
    form (the convention ``kl_gradient``; ``kl``, ``dkl``: the estimate and its own
    derivative): "ratio" (TRL) KL_t rho_t both differentiated, rho_t = exp(the token
    log-ratio, clamped to [-clamp, clamp] where the loss clamps it); "straight_through" (verl's
    "+") the value with d = logp - ref; "importance" (OpenRLHF) the value with min(rho, bound)
    d, rho unclamped and held."""
    if form == "plain":
        return kl, dkl
    if form == "ratio":
        lr, dlr = _log_ratio(logp, logp_old, clamp)
        rho = np.exp(lr)
        return kl * rho, rho * dkl + kl * rho * dlr
    if form == "straight_through":
        return kl, logp - ref
    if form == "importance":
        return kl, np.minimum(np.exp(logp - logp_old), bound) * (logp - ref)
    raise NotImplementedError(f"kl_gradient={form!r}")


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


# ---------------------------------------------------------------------------------------
# The third policy: each framework's sampler/trainer correction, from its code


def _rollout(case, m, p):
    """logp_rollout zeroed at padding (as given under the plain bug "unmasked"), or None when
    the case has none."""
    x = case["inputs"]
    if x.get("logp_rollout") is None:
        return None
    raw = np.asarray(x["logp_rollout"], dtype=np.float64)
    return raw if p.get("bug") == "unmasked" else np.where(m == 1, raw, 0.0)


def _log_w(p, logp_old, rollout, m):
    """log w_t = (logp_old_t - logp_rollout_t) on the mask. Two plain bugs that the tests
    plant with ``bug=``: "unmasked" (the mask forgotten: whatever the padding holds, NaN
    included, enters), "inverted" (log pi_rollout / pi_old: the weight upside down)."""
    bug = p.get("bug")
    if bug == "unmasked":
        return logp_old - rollout
    if bug == "inverted":
        return (rollout - logp_old) * m
    return (logp_old - rollout) * m


def _bounded(value, low, high):
    """min(max(value, low), high), a bound None being none."""
    return np.clip(value, -np.inf if low is None else low, np.inf if high is None else high)


def trl_vllm_ratio(p, logp_old, rollout, m):
    """TRL 1.16.0 _generate_and_score_completions: exp((logp_old - logp_rollout) * mask), its
    sum over the response for the sequence_* modes (the geometric mean with
    is_sequence_weight="geometric-mean"), clamped (truncate) or zeroed (mask) outside
    [clip_min, clip_max]; (B, T), one value per row at the sequence level."""
    mode = p["vllm_importance_sampling_mode"]
    lo, hi = p["vllm_importance_sampling_clip_min"], p["vllm_importance_sampling_clip_max"]
    # GRPOConfig.__post_init__ refuses these configurations
    if lo is not None and hi is not None and lo >= hi:
        raise ValueError("trl: vllm_importance_sampling_clip_min must be < _clip_max")
    if mode.endswith("truncate") and lo is None and hi is None:
        raise ValueError("trl: a *_truncate mode needs vllm_importance_sampling_clip_min or _max")
    diff = _log_w(p, logp_old, rollout, m)
    if mode.startswith("sequence"):
        diff = diff.sum(axis=1, keepdims=True)
        if p["is_sequence_weight"] == "geometric-mean":
            diff = diff / m.sum(axis=1, keepdims=True)
    if p["is_log_ratio_bound"] is not None:
        diff = np.clip(diff, -p["is_log_ratio_bound"], p["is_log_ratio_bound"])
    ratio = np.exp(diff) * np.ones_like(m)
    if mode.endswith("truncate"):
        return _bounded(ratio, lo, hi)
    outside = (ratio < (-np.inf if lo is None else lo)) | (ratio > (np.inf if hi is None else hi))
    return np.where(outside, 0.0, ratio)


def trl_off_policy_keep(p, A_i, logp, logp_old, sampling, m):
    """TRL 1.16.0 get_off_policy_mask: keep a response with A >= 0 or whose mean of
    sampling - current (logp_rollout under vLLM, else logp_old; the current log-probs)
    is at most the threshold; (B, 1) of 0/1."""
    which = p["off_policy_mask_logps"]
    if sampling is None or which == "old-current":
        sampling = logp_old
    current = logp_old if which == "sampling-old" else logp
    mean = ((sampling - current) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1)
    return ((A_i >= 0) | (mean <= p["off_policy_mask_threshold"])).astype(float)[:, None]


def verl_threshold(spec):
    """verl's rollout_is_threshold: a number truncates (TIS), "a_b" masks outside [a, b]."""
    if isinstance(spec, str) and "_" in spec:
        a, b = spec.split("_")
        return "mask", float(a), float(b)
    return "truncate", None, float(spec)


def verl_is_weights(p, logp_old, rollout, m):
    """verl 0.9.1 compute_rollout_correction_weights: exp of the log-ratio (token) or of its
    masked sum (sequence; the mean under is_sequence_weight="geometric-mean") clamped to
    [-20, 20], times the mask, truncated or IcePop-masked, divided by the batch mean with
    rollout_is_batch_normalize; None without rollout_is."""
    level = p["rollout_is"]
    if level is None or p["rollout_is_threshold"] is None:
        return None
    log_ratio = _log_w(p, logp_old, rollout, m)
    if level == "sequence":
        log_ratio = log_ratio.sum(axis=1, keepdims=True)
        if p["is_sequence_weight"] == "geometric-mean":
            log_ratio = log_ratio / m.sum(axis=1, keepdims=True)
    if p["is_log_ratio_bound"] is not None:
        log_ratio = np.clip(log_ratio, -p["is_log_ratio_bound"], p["is_log_ratio_bound"])
    raw = np.exp(log_ratio) * m
    how, low, high = verl_threshold(p["rollout_is_threshold"])
    if how == "truncate":
        w = np.minimum(raw, high)
    else:
        w = np.where((raw >= low) & (raw <= high), raw, 0.0)
    if p["rollout_is_batch_normalize"]:
        if level == "token":
            mean = w.sum() / m.sum()
        else:
            seq = (w * m).sum(axis=1) / m.sum(axis=1)
            mean = seq.sum() / np.count_nonzero(m.sum(axis=1))
        if mean > 1e-8:
            w = w / mean
    return w


def verl_keep(p, logp_old, rollout, m):
    """verl 0.9.1 compute_rollout_rejection_mask: every criterion of rollout_rs must keep a
    token; the log-ratio clamped to [-20, 20]; k1 = -log w, k2 = (log w)^2 / 2, k3 = e^(log w)
    - 1 - log w; a k1 criterion keeps log(low) <= stat <= log(high) (low = 1/high for one
    number), k2 and k3 stat <= high. (B, T) of 0/1, or None without rollout_rs."""
    if p["rollout_rs"] is None:
        return None
    criteria = [c.strip() for c in p["rollout_rs"].split(",") if c.strip()]
    spec = p["rollout_rs_threshold"]
    parts = [str(spec)] if not isinstance(spec, str) else [t.strip() for t in spec.split(",")]
    if len(parts) == 1:
        parts = parts * len(criteria)
    lw = np.clip(_log_w(p, logp_old, rollout, m), -20.0, 20.0)
    keep = m.copy()
    for criterion, part in zip(criteria, parts):
        where, est = criterion.rsplit("_", 1)
        stat = {"k1": -lw, "k2": lw * lw / 2, "k3": np.exp(lw) - 1 - lw}[est] * m
        if where == "seq_sum":
            stat = stat.sum(axis=1, keepdims=True)
        elif where == "seq_mean":
            stat = stat.sum(axis=1, keepdims=True) / m.sum(axis=1, keepdims=True)
        elif where == "seq_max":
            stat = np.where(m == 1, stat, -np.inf).max(axis=1, keepdims=True)
        if est == "k1":
            low, high = (float(t) for t in part.split("_")) if "_" in part else \
                (1.0 / float(part), float(part))
            ok = (stat >= np.log(low)) & (stat <= np.log(high))
        else:
            ok = stat <= float(part)
        keep = keep * ok
    return keep


def openrlhf_coefficient(p, logp_old, rollout, m):
    """OpenRLHF 0.11.2 PolicyLoss's correction coefficient (B, T), or None (level off): the
    token ratio exp(logp_old - logp_rollout) (bounded by is_log_ratio_bound where set),
    clamped to [low, high] (mode clip) or kept where the unit's statistic is in [low, high]
    (mask): the token ratio, or per response its geometric mean (the product with
    is_sequence_weight="product"), or a divergence of p = pi_rollout and q = pi_old (both
    clamped to [1e-6, 1 - 1e-6]): binary_kl, tv, the response's mean at the seq level."""
    level, gating = p["is_correction_level"], p["is_correction_gating"]
    spec = p["is_correction_threshold"]
    low, high = (0.0, float(spec)) if np.isscalar(spec) else (float(spec[0]), float(spec[-1]))
    # PolicyLoss.__init__ refuses these configurations
    if p["is_correction_mode"] == "clip" and (level == "seq" or gating != "ratio"):
        raise ValueError("openrlhf: is_correction_mode=clip needs level token and gating ratio")
    if gating != "ratio" and level != "off" and low > 0:
        raise ValueError("openrlhf: a divergence gate takes an upper bound only")
    if level == "off":
        return None
    lr = _log_w(p, logp_old, rollout, m)
    if p["is_log_ratio_bound"] is not None:
        lr = np.clip(lr, -p["is_log_ratio_bound"], p["is_log_ratio_bound"])
    ratio = np.exp(lr)
    if p["is_correction_mode"] == "clip":
        return np.clip(ratio, max(low, 0.0), high) * m
    if gating == "ratio":
        stat = ratio
        if level == "seq":
            total = lr.sum(axis=1, keepdims=True)
            stat = np.exp(total if p["is_sequence_weight"] == "product"
                          else total / m.sum(axis=1, keepdims=True))
    else:
        pr = np.clip(np.exp(rollout), 1e-6, 1 - 1e-6)
        q = np.clip(np.exp(logp_old), 1e-6, 1 - 1e-6)
        stat = (pr * np.log(pr / q) + (1 - pr) * np.log((1 - pr) / (1 - q)) if gating == "binary_kl"
                else np.abs(pr - q))
        if level == "seq":
            stat = (stat * m).sum(axis=1, keepdims=True) / m.sum(axis=1, keepdims=True)
    return np.where((stat >= low) & (stat <= high), ratio, 0.0) * m


# ---------------------------------------------------------------------------------------
# The three frameworks' losses


def _sapo(rho, A, tau_pos, tau_neg):
    """SAPO's -g(rho) A, g = (4 / tau) sigmoid(tau (rho - 1)), tau by the sign of A (float32
    numbers, as the frameworks' tensors hold them), and d/drho."""
    tau = np.where(A > 0, float(np.float32(tau_pos)), float(np.float32(tau_neg)))
    sig = 1 / (1 + np.exp(-tau * (rho - 1)))
    return -sig * 4 / tau * A, -4 * sig * (1 - sig) * A


def trl_grpo(case, **plant):
    p = {**TRL, **case.get("params", {}), **plant}
    logp, logp_old, ref, m, s, groups = _inputs(case)
    rollout = _rollout(case, m, p)
    A_i = group_normalise(s, groups, scale=p["scale_rewards"], eps=p["std_eps"],
                          ddof=p["std_ddof"], placement=p["std_eps_placement"],
                          singleton=p["singleton"], dtype=np.float32)
    A = A_i[:, None] * m
    Ab = A_i[:, None] * np.ones_like(m)
    lr, dlr = _log_ratio(logp, logp_old, p["log_ratio_clamp"])
    eps_high = p["epsilon"] if p["epsilon_high"] is None else p["epsilon_high"]
    n_i = m.sum(axis=1, keepdims=True)
    kind = p["loss_type"]
    # the vLLM ratio and the off-policy mask, before the loss
    vllm = rollout is not None if p["use_vllm"] is None else p["use_vllm"]
    if kind == "vespo" and vllm and p["vllm_importance_sampling_correction"] and \
            p["vllm_importance_sampling_mode"].startswith("sequence"):
        raise ValueError("trl: vespo needs a token-level vLLM importance sampling mode")
    is_ratio = trl_vllm_ratio(p, logp_old, rollout, m) if (
        vllm and p["vllm_importance_sampling_correction"]) else None
    keep = None if p["off_policy_mask_threshold"] is None else trl_off_policy_keep(
        p, A_i, logp, logp_old, rollout if vllm else None, m)
    sequence = p["importance_sampling_level"] == "sequence"
    if sequence:
        lw = (lr * m).sum(axis=1, keepdims=True) / n_i
        rho = np.exp(lw) * np.ones_like(m)
    else:
        rho = np.exp(lr)
    # coef_1 of the level (vespo's too: TRL computes it before the loss type's branch)
    coef_1, level_sequence = rho, sequence
    # each per-token loss l_t with g_t its derivative: in logp_t (token-local: the token
    # level, cispo, vespo) or in log s_i (the sequence ratio: clip, luspo, sapo)
    if kind == "vespo":
        # TRL's get_gamma_weights: phi of the summed token log-ratios (and the logs of the
        # token vLLM ratios), detached; the level is ignored
        sequence = False
        phi = np.zeros(len(s))
        with np.errstate(divide="ignore"):  # (log 0 = -inf, clamped to log 1e-8)
            log_is = np.zeros_like(m) if is_ratio is None else np.clip(
                np.log(is_ratio), np.log(1e-8), 20.0)
        for i in range(len(s)):
            k, lam = ((p["vespo_k_pos"], p["vespo_lambda_pos"]) if A_i[i] >= 0 else
                      (p["vespo_k_neg"], p["vespo_lambda_neg"]))
            lam = max(lam, 1e-4)
            total = sum(min(max(lr[i, t], -20.0), 20.0) for t in range(len(lr[i])) if m[i, t])
            total += float(log_is[i].sum())
            log_w = min(max(total, np.log(1e-8)), 20.0)
            phi[i] = np.exp(lam + k * log_w - lam * np.exp(log_w))
        loss_t, g = -phi[:, None] * Ab * logp, -phi[:, None] * Ab
    elif kind == "cispo":
        w = np.minimum(rho, eps_high) if p["cispo_clip"] == "max" else \
            np.clip(rho, 1 - p["epsilon"], 1 + eps_high)
        loss_t, g = -w * Ab * logp, -w * Ab
        sequence = False
    elif kind == "sapo":
        loss_t, dl_drho = _sapo(rho, Ab, p["sapo_temperature_pos"], p["sapo_temperature_neg"])
        g = dl_drho * rho * (1.0 if sequence else dlr)
    else:
        loss_t, g = _clip_terms(rho, rho * (dlr if not sequence else 1.0), Ab, p["epsilon"],
                                eps_high, p["delta"])
    # the weights on the per-token loss (TRL multiplies by the off-policy mask and the vLLM
    # ratio; vespo's ratio is inside phi), and those the KL term gets (none: TRL adds it
    # after; is_weights_on_kl=True: the same)
    ones = np.ones_like(m)
    W = ones * (keep if keep is not None and p["rejection"] == "weight" else 1.0)
    if is_ratio is not None:
        Wk = W * is_ratio
        W = W if kind == "vespo" else W * is_ratio
    else:
        Wk = W
    Wk = Wk if p["is_weights_on_kl"] else ones
    # the loss's mask
    lm = m.copy()
    if p["masked_weights"] == "drop" and is_ratio is not None:
        lm = lm * (is_ratio != 0)
    if keep is not None and p["rejection"] == "mask":
        lm = lm * keep
    if lm.sum() == 0:
        raise ValueError("trl: the loss's mask has no token")
    mode = {"cispo": "dapo", "vespo": "dapo", "sapo": "grpo"}.get(kind, kind)
    norm = {"dr_grpo": p["max_completion_length"], "dapo": p["num_items_in_batch"]}.get(mode)
    a = aggregate_weights(lm, mode, norm)
    loss = float((a * W * loss_t).sum())
    if sequence:
        # the sequence term's derivative in log s_i, summed over the row's weights, times
        # d log s_i / d logp_t = dlr_t / n_i
        dlogp = (a * W * g).sum(axis=1, keepdims=True) * dlr / n_i * lm
    else:
        dlogp = a * W * g
    if p["beta"] != 0:
        kl_kind = "k3_raw" if p["kl_estimator"] == "k3" else p["kl_estimator"]
        kl, dkl = kl_and_grad(logp, ref, kl_kind)
        if p["kl_gradient"] not in (None, "plain", "ratio"):
            # another framework's form (token-local; TRL clamps no log-ratio)
            kl, dkl = kl_form_terms(p["kl_gradient"], kl, dkl, logp, ref, logp_old)
            loss += p["beta"] * float((a * Wk * kl).sum())
            dlogp = dlogp + p["beta"] * a * Wk * dkl
        elif p["use_bias_correction_kl"] if p["kl_gradient"] is None else \
                p["kl_gradient"] == "ratio":
            # per_token_kl * coef_1 (trl 1.16.0), the ratio differentiated too
            loss += p["beta"] * float((a * Wk * kl * coef_1).sum())
            dlogp = dlogp + p["beta"] * a * Wk * dkl * coef_1
            part = a * Wk * kl * coef_1  # d coef_1 / d logp: coef_1 dlr, or through s_i
            dlogp = dlogp + p["beta"] * ((part.sum(axis=1, keepdims=True) * dlr / n_i * lm)
                                         if level_sequence else part * dlr)
        else:
            loss += p["beta"] * float((a * Wk * kl).sum())
            dlogp = dlogp + p["beta"] * a * Wk * dkl
    return {"advantages": A, "policy_loss": loss, "dlogp": dlogp * lm}


def _verl_aggregation(lm, mode, count_mask):
    """verl 0.9.1's agg_loss with the trainer's counts: token-mean divides by the tokens of
    the batch's mask ``count_mask``, the seq-means average over every row B (a row without a
    token adds 0)."""
    B, T = lm.shape
    n_i = np.maximum(lm.sum(axis=1, keepdims=True), 1)
    if mode == "token-mean":
        return lm / count_mask.sum()
    return {"seq-mean-token-mean": lm / (B * n_i), "seq-mean-token-sum": lm / B,
            "seq-mean-token-sum-norm": lm / (B * T)}[mode]


def verl_grpo(case, **plant):
    p = {**VERL, **case.get("params", {}), **plant}
    logp, logp_old, ref, m0, s, groups = _inputs(case)
    rollout = _rollout(case, m0, p)
    B, T = m0.shape
    last = m0.sum(axis=1).astype(int) - 1
    rewards = np.zeros_like(m0)
    rewards[np.arange(B), last] = s
    if p["use_kl_in_reward"]:
        kind = {"low_var_kl": "k3"}.get(p["kl_penalty"], p["kl_penalty"])
        rewards = rewards - p["kl_coef"] * kl_and_grad(logp_old, ref, kind)[0] * m0
    # the rollout correction: decoupled (weights and rejection of logp_old against
    # logp_rollout, the rejection replacing the response mask) or bypass (old := rollout,
    # the correction of the current log-probs inside the loss)
    bypass = bool(p["bypass_mode"])
    m, w = m0, None
    if rollout is not None and not bypass:
        w = verl_is_weights(p, logp_old, rollout, m0)
        keep = verl_keep(p, logp_old, rollout, m0)
        if keep is not None and p["rejection"] == "weight":
            w = (np.ones_like(m0) if w is None else w) * keep
        elif keep is not None:
            m = m0 * keep
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
    elif p["adv_estimator"] == "rloo":  # s - the mean of the others; one alone keeps its score
        A_i = np.zeros(B)
        for i in range(B):
            others = [seq[j] for j in range(B) if groups[j] == groups[i] and j != i]
            A_i[i] = seq[i] - (sum(others) / len(others) if others else 0.0)
    else:
        raise NotImplementedError(f"adv_estimator={p['adv_estimator']!r}")
    A = A_i[:, None] * m
    if bypass:
        return _verl_bypass(p, case, logp, rollout, ref, m0, A)
    # the loss's mask: without the tokens whose weight was masked, under "drop"
    lm = m if w is None or p["masked_weights"] == "zero" else m * (w != 0)
    if lm.sum() == 0:
        raise ValueError("verl: the loss's mask has no token")
    low, high = p["clip_ratio_low"], p["clip_ratio_high"]
    mode = p["loss_mode"]
    a = _verl_aggregation(lm, p["loss_agg_mode"], lm)
    W = np.ones_like(m) if w is None else w
    if mode == "gspo":
        lw = ((logp - logp_old) * lm).sum(axis=1, keepdims=True) / \
            np.maximum(lm.sum(axis=1, keepdims=True), 1)
        lw = lw * np.ones_like(m)
        cap = np.inf if p["log_ratio_max"] is None else p["log_ratio_max"]
        rho = np.exp(np.minimum(lw, cap))
        drho = np.where(lw <= cap, rho, 0.0)  # the token's own logp, the rest detached
        pg1, pg2 = -A * rho, -A * np.clip(rho, 1 - low, 1 + high)
        loss_t = np.maximum(pg1, pg2)
        dloss_t = np.where(pg1 >= pg2, -A * drho,
                           np.where((rho > 1 - low) & (rho < 1 + high), -A * drho, 0.0))
        if p["sequence_gradient"] == "sequence":
            # s_i differentiated: each token gets the row's mean of the weighted terms
            n = np.maximum(lm.sum(axis=1, keepdims=True), 1)
            W = (W * lm).sum(axis=1, keepdims=True) / n * lm
        loss = float((a * W * loss_t).sum())
        dlogp = a * W * dloss_t
        lr_logged = logp - logp_old
    elif mode == "geo_mean":
        loss, dlogp = _verl_gmpo(p, logp, logp_old, A, lm, w)
        lr_logged = logp - logp_old
    else:
        lr, dlr = _log_ratio(logp, logp_old, p["log_ratio_clamp"])
        rho = np.exp(lr)
        if mode == "cispo":
            c = np.clip(rho, 1 - low, 1 + high) if p["cispo_clip"] == "range" else \
                np.minimum(rho, high)
            loss_t, dloss_t = -c * A * logp, -c * A
        elif mode == "sapo":
            loss_t, dl_drho = _sapo(rho, A, p["tau_pos"], p["tau_neg"])
            dloss_t = dl_drho * rho * dlr
            a = _verl_aggregation(lm, "seq-mean-token-mean", lm)
        elif mode == "gpg":
            loss_t, dloss_t = -A * logp, -A
        elif mode == "vanilla":
            loss_t, dloss_t = _clip_terms(rho, rho * dlr, A, low, high)
            dual = -A * p["clip_ratio_c"]
            bounded = (A < 0) & (dual < loss_t)
            loss_t = np.where(bounded, dual, loss_t)
            dloss_t = np.where(bounded, 0.0, dloss_t)
        else:
            raise NotImplementedError(f"loss_mode={mode!r}")
        loss = float((a * W * loss_t).sum())
        dlogp = a * W * dloss_t
        lr_logged = lr
    # the logged mean of -(log-ratio) over the loss's tokens (clamped as the loss clamps it)
    ppo_kl = float((-lr_logged * lm).sum() / lm.sum())
    if p["use_kl_loss"]:
        name = p["kl_loss_type"].removesuffix("+")
        kind = {"low_var_kl": "k3"}.get(name, name)
        kl, dkl = kl_and_grad(logp, ref, kind)
        if p["kl_gradient"] is not None:
            # another framework's form in place of verl's (the convention kl_gradient)
            if mode != "vanilla" and p["kl_gradient"] == "ratio":
                raise NotImplementedError(f"kl_gradient='ratio' with loss_mode={mode!r}")
            kl, dkl = kl_form_terms(p["kl_gradient"], kl, dkl, logp, ref, logp_old,
                                    p["log_ratio_clamp"])
        elif p["kl_loss_type"].endswith("+"):
            # verl 0.9.1 kl_penalty: k2 - sg(k2) + sg(kl), the gradient k2's
            dkl = logp - ref
        ak = _verl_aggregation(lm, p["loss_agg_mode"], lm)
        Wk = W if (p["is_weights_on_kl"] and w is not None) else np.ones_like(m)
        loss += p["kl_loss_coef"] * float((ak * Wk * kl).sum())
        dlogp = dlogp + p["kl_loss_coef"] * ak * Wk * dkl
    out = {"advantages": A, "policy_loss": loss, "dlogp": dlogp * lm}
    if mode != "gpg":  # (verl 0.9.1 logs no ppo_kl for gpg)
        out["stat/actor/ppo_kl"] = ppo_kl
    return out


def _verl_gmpo(p, logp, logp_old, A, lm, w):
    """verl 0.9.1 compute_policy_loss_geo_mean: per response -Abar_i s_i c_i, s_i =
    exp(mean_t lr'_t), lr'_t the log-ratio clipped to [-low, high] on the side of sgn(A)
    (sgn(A) min(sgn(A) lr, sgn(A) clamp(lr))), c_i the geometric mean of the token weights
    + 1e-10 (their arithmetic mean with gmpo_weight_mean="arithmetic"); torch.mean over the
    rows. Returns (loss, dlogp)."""
    B = lm.shape[0]
    n = np.maximum(lm.sum(axis=1, keepdims=True), 1)
    lr = logp - logp_old
    sgn = np.sign(A)
    lrc = np.clip(lr, -p["clip_ratio_low"], p["clip_ratio_high"])
    lr_min = sgn * np.minimum(sgn * lr, sgn * lrc)
    passes = (sgn * lr <= sgn * lrc).astype(float)  # d lr' / d lr (1 on the unclipped side)
    s_i = np.exp((lr_min * lm).sum(axis=1, keepdims=True) / n)
    A_bar = (A * lm).sum(axis=1, keepdims=True) / n
    if w is None:
        c = np.ones((B, 1))
    elif p["gmpo_weight_mean"] == "arithmetic":
        c = (w * lm).sum(axis=1, keepdims=True) / n
    else:
        c = np.exp((np.log(w + 1e-10) * lm).sum(axis=1, keepdims=True) / n)
    loss = float(np.mean(-A_bar * s_i * c))
    dlogp = -A_bar * s_i * c / B * passes * lm / n
    return loss, dlogp


def _verl_bypass(p, case, logp, rollout, ref, m, A):
    """verl 0.9.1 compute_policy_loss_bypass_mode: old := logp_rollout; the weights and the
    rejection of the current logp against logp_rollout (no gradient), the loss over the kept
    tokens with the trainer's token count of the whole response mask; ppo_clip: the vanilla
    loss, no weights; reinforce: -A w logp; the KL loss over the response mask."""
    w = verl_is_weights(p, logp, rollout, m)
    keep = verl_keep(p, logp, rollout, m)
    keep = m if keep is None else keep
    ppo_w = np.ones_like(m)
    if p["rejection"] == "weight":
        w = (np.ones_like(m) if w is None else w) * keep
        ppo_w, keep = keep, m
    count = m
    reinforce = p["rollout_loss_type"] == "reinforce"
    if reinforce and w is not None and p["masked_weights"] == "drop":
        keep = keep * (w != 0)
        count = keep
    a = _verl_aggregation(keep, p["loss_agg_mode"], count)
    Ak = A * keep
    if reinforce:
        W = np.ones_like(m) if w is None else w
        loss = float((a * -Ak * W * logp).sum())
        dlogp = a * -Ak * W
        if not p["is_weights_detach"] and w is not None:
            # w = min(exp(clamp(logp - rollout)), c) or IcePop's, differentiated where it is
            # its ratio: dw/dlogp = w (token); at the sequence level every token of the row
            lrr = (logp - rollout) * m
            if p["rollout_is"] == "sequence":
                lrr = lrr.sum(axis=1, keepdims=True)
            free = (np.abs(lrr) <= 20.0) & np.isclose(w, np.exp(np.clip(lrr, -20, 20)) * m,
                                                     rtol=0, atol=0)
            term = a * -Ak * logp
            if p["rollout_is"] == "sequence":
                dlogp = dlogp + term.sum(axis=1, keepdims=True) * np.where(free, w, 0.0) * m
            else:
                dlogp = dlogp + term * np.where(free, w, 0.0)
        ppo_kl = float(((rollout - logp) * keep).sum() / max(keep.sum(), 1e-8))
    else:
        lr, dlr = _log_ratio(logp, rollout, p["log_ratio_clamp"])
        rho = np.exp(lr)
        loss_t, dloss_t = _clip_terms(rho, rho * dlr, Ak, p["clip_ratio_low"],
                                      p["clip_ratio_high"])
        dual = -Ak * p["clip_ratio_c"]
        bounded = (Ak < 0) & (dual < loss_t)
        loss_t = np.where(bounded, dual, loss_t)
        dloss_t = np.where(bounded, 0.0, dloss_t)
        W = ppo_w
        loss = float((a * W * loss_t).sum())
        dlogp = a * W * dloss_t
        ppo_kl = float((-lr * keep).sum() / max(keep.sum(), 1e-8))
    if p["use_kl_loss"]:
        name = p["kl_loss_type"].removesuffix("+")
        kind = {"low_var_kl": "k3"}.get(name, name)
        kl, dkl = kl_and_grad(logp, ref, kind)
        if p["kl_gradient"] is not None:
            # (old := logp_rollout in bypass mode, for the KL's ratio too)
            kl, dkl = kl_form_terms(p["kl_gradient"], kl, dkl, logp, ref, rollout,
                                    p["log_ratio_clamp"])
        elif p["kl_loss_type"].endswith("+"):
            dkl = logp - ref
        ak = _verl_aggregation(m, p["loss_agg_mode"], m)
        Wk = w if (reinforce and w is not None and p["is_weights_on_kl"]) else np.ones_like(m)
        loss += p["kl_loss_coef"] * float((ak * Wk * kl * m).sum())
        dlogp = dlogp + p["kl_loss_coef"] * ak * Wk * dkl
    return {"advantages": A, "policy_loss": loss, "dlogp": dlogp * m,
            "stat/actor/ppo_kl": ppo_kl}


def openrlhf_grpo(case, **plant):
    p = {**OPENRLHF, **case.get("params", {}), **plant}
    logp, logp_old, ref, m, s, groups = _inputs(case)
    rollout = _rollout(case, m, p)
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
    gspo = p["policy_loss_type"] == "gspo"
    corrected = rollout is not None and p["is_correction_level"] != "off"
    # the correction: a coefficient on each token's loss (ppo), or, for gspo, the sequence
    # ratio taken against logp_rollout
    w = openrlhf_coefficient(p, logp_old, rollout, m) if corrected else None
    w = None if gspo else w
    lm = m if w is None or p["masked_weights"] == "zero" else m * (w != 0)
    if lm.sum() == 0:
        raise ValueError("openrlhf: masked_weights='drop' leaves the loss no token")
    W = np.ones_like(m) if w is None else w
    n_i = np.maximum(lm.sum(axis=1, keepdims=True), 1)
    if gspo:
        old = rollout if corrected else logp_old
        lw = ((logp - old) * lm).sum(axis=1, keepdims=True) / n_i
        rho = np.exp(lw) * np.ones_like(m)
        loss_t, g = _clip_terms(rho, rho, A, p["epsilon"], eps_high)
        if p["dual_clip"] is not None:  # (PolicyLoss applies it to either ratio)
            dual = -p["dual_clip"] * A
            bounded = (A < 0) & (dual < loss_t)
            loss_t, g = np.where(bounded, dual, loss_t), np.where(bounded, 0.0, g)
        a = aggregate_weights(lm, "seq-mean-token-mean")
        loss = float((a * loss_t * lm).sum())
        if p["sequence_gradient"] == "token":
            dlogp = a * g * lm
        else:
            dlogp = (a * g * lm).sum(axis=1, keepdims=True) / n_i * lm
    else:
        lr, dlr = _log_ratio(logp, logp_old, p["log_ratio_clamp"])
        rho = np.exp(lr)
        loss_t, dloss_t = _clip_terms(rho, rho * dlr, A, p["epsilon"], eps_high)
        if p["dual_clip"] is not None:
            dual = -p["dual_clip"] * A
            bounded = (A < 0) & (dual < loss_t)
            loss_t = np.where(bounded, dual, loss_t)
            dloss_t = np.where(bounded, 0.0, dloss_t)
        a = aggregate_weights(lm, "token-mean")
        loss = float((a * W * loss_t * lm).sum())
        dlogp = a * W * dloss_t * lm
    if p["use_kl_loss"]:
        kind = "k3" if p["kl_estimator"] == "k3" else p["kl_estimator"]
        kl, dkl = kl_and_grad(logp, ref, kind)
        kl, dkl = np.clip(kl, -10, 10), np.where(np.abs(kl) <= 10, dkl, 0.0)
        if p["kl_unbiased_gradient"] and p["kl_gradient"] is None:
            # openrlhf 0.11.2 compute_approx_kl: sg(kl) + w k2 - sg(w k2), the weight
            # w = min(pi / pi_old, KL_IS_WEIGHT_CLIP) held
            w_is = np.exp(logp - logp_old)
            if p["kl_is_bound"] is not None:
                w_is = np.minimum(w_is, p["kl_is_bound"])
            dkl = w_is * (logp - ref)
        seq_ratio = None
        if p["kl_gradient"] == "ratio" and gspo:
            # TRL's form at GSPO's level: KL_t s_i, s_i GSPO's sequence ratio (against the
            # rollout's log-probs where corrected), d s_i / d logp_t = s_i / n_i
            seq_ratio = np.exp(((logp - old) * lm).sum(axis=1, keepdims=True) / n_i)
        elif p["kl_gradient"] is not None:
            # another framework's form in place of OpenRLHF's (the convention kl_gradient;
            # its PPO loss clamps the log-ratio to [-20, 20])
            kl, dkl = kl_form_terms(p["kl_gradient"], kl, dkl, logp, ref, logp_old,
                                    p["log_ratio_clamp"])
        wt = aggregate_weights(lm, "token-mean")
        if seq_ratio is not None:
            Wk = W if p["is_weights_on_kl"] else np.ones_like(m)
            part = wt * Wk * kl * seq_ratio * lm
            loss += p["init_kl_coef"] * float(part.sum())
            dlogp = dlogp + p["init_kl_coef"] * (wt * Wk * dkl * seq_ratio * lm + part.sum(
                axis=1, keepdims=True) / n_i * lm)
            return {"advantages": A, "policy_loss": loss, "dlogp": dlogp}
        Wk = W if p["is_weights_on_kl"] else np.ones_like(m)
        loss += p["init_kl_coef"] * float((wt * Wk * kl * lm).sum())
        dlogp = dlogp + p["init_kl_coef"] * wt * Wk * dkl * lm
    return {"advantages": A, "policy_loss": loss, "dlogp": dlogp}


CANDIDATES = {"trl-grpo": trl_grpo, "verl-grpo": verl_grpo, "openrlhf-grpo": openrlhf_grpo}
DTYPES = {"trl-grpo": "float32", "verl-grpo": "float32", "openrlhf-grpo": "float64"}
"""The dtype each is compared in: TRL and verl compute the group advantages in float32."""
