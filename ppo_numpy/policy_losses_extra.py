"""The policy losses of verl 0.9.1 beyond the clipped surrogate and CISPO, and TRL 1.16.0's SAPO
(``loss_type=`` of :func:`ppo_numpy.ppo_policy_loss`; docs/conventions.md section 15).

With lr_t = logp_t - logp_old_t (clamped to [-c, c] by ``log_ratio_clamp``), rho_t = exp(lr_t),
A_t the advantage, w_t the importance weights of ``is_weights`` (1 without them) and
``aggregate`` the loss's aggregation mode, each loss is -aggregate(w_t term_t) with the term:

==========  ==================================================================================
sapo        g(rho_t) A_t,  g(rho) = (4 / tau) sigmoid(tau (rho - 1)), tau = tau_pos if A_t > 0
            else tau_neg (SAPO: a smooth gate in place of the clip)
geo_mean    s_i Abar_i, s_i = exp(mean_t lr'_t), lr'_t = lr_t capped at eps_high for A_t > 0 and
            floored at -eps for A_t < 0, Abar_i = mean_t A_t (GMPO: a geometric mean of the
            token ratios); the weight is the row's geometric mean of w_t + 1e-10
gpg         A_t logp_t (GPG: the plain policy gradient)
clip_cov    min(rho_t A_t, clip(rho_t) A_t) (1 - z_t), z_t = 1 for up to ``cov_ratio`` n tokens
            drawn at random among the unclipped ones whose centred covariance lies in
            ``cov_bounds`` (Clip-Cov)
kl_cov      rho_t A_t - kl_cov_coef abs(lr_t) z_t, z_t = 1 for the ``cov_ratio`` n tokens of
            largest covariance (KL-Cov)
dppo_tv     sg(min(rho_t, dppo_ratio_max)) v_t A_t logp_t, v_t = 0 where pi - pi_old leaves
            [-eps, eps_high] in the advantage's direction (DPPO, total variation)
dppo_kl     the same, v_t = 0 where the binary KL of (pi_old, pi) exceeds eps_high (A > 0,
            pi > pi_old) or eps (A <= 0, pi < pi_old) (DPPO, binary KL)
dro         A_t logp_t - (dro_beta / 2) lr_t^2 (DRO: a quadratic penalty on the log-ratio)
==========  ==================================================================================

The covariance of token t is cov_t = (A_t - mean A)(logp_t - mean logp), means over the
response tokens. sg: a constant of the gradient. The functions here are the unchecked kernels
that ``ppo_numpy.policy_loss.objective.policy_loss_forward`` and ``policy_loss_backward`` call
for these loss types; each building block is public with its formula and an example.

Sources: volcengine/verl 0.9.1 ``verl/trainer/ppo/core_algos.py`` (``compute_policy_loss_sapo``,
``_geo_mean``, ``_gpg``, ``_clip_cov``, ``_kl_cov``, ``_dppo_tv``, ``_dppo_kl``, ``_dro``),
``verl/workers/config/actor.py`` (defaults); huggingface/trl 1.16.0
``trl/trainer/grpo_trainer.py`` (``_compute_loss``, ``loss_type="sapo"``).
"""

from __future__ import annotations

import numpy as np

from ._checks import check_bounds, check_int, check_scalar

__all__ = ["DIRECT_LOSS_TYPES", "EXTRA_LOSS_TYPES", "RATIO_LOSS_TYPES", "clip_cov_selection",
           "covariance", "dppo_valid", "gmpo_log_ratio", "kl_cov_selection", "sapo_gate"]

#: the loss types of this module
EXTRA_LOSS_TYPES = ("sapo", "geo_mean", "gpg", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "dro")
#: those whose gradient runs through rho (the objective's chain rho -> log rho -> logp)
RATIO_LOSS_TYPES = ("sapo", "clip_cov", "kl_cov")
#: those whose gradient the module gives in logp directly
DIRECT_LOSS_TYPES = ("geo_mean", "gpg", "dppo_tv", "dppo_kl", "dro")
#: DPPO's divergences
DPPO_DIVERGENCES = {"dppo_tv": "tv", "dppo_kl": "kl"}


def check_extra_options(opts) -> None:
    """The fields of :class:`~ppo_numpy.policy_loss.objective.PolicyLossOptions` that these
    losses read, checked (the objective's ``__post_init__`` calls it); raises ValueError
    naming the field."""
    set_ = object.__setattr__
    for name in ("sapo_tau_pos", "sapo_tau_neg", "cov_ratio", "dppo_ratio_max"):
        set_(opts, name, check_scalar(getattr(opts, name), name, low=0, low_open=True,
                                      allow_exact=False))
    set_(opts, "cov_bounds", check_bounds(opts.cov_bounds, "cov_bounds", allow_exact=False))
    set_(opts, "cov_seed", check_int(opts.cov_seed, "cov_seed", low=0))
    set_(opts, "kl_cov_coef", check_scalar(opts.kl_cov_coef, "kl_cov_coef", low=0,
                                           allow_exact=False))
    if opts.dro_beta is not None:
        set_(opts, "dro_beta", check_scalar(opts.dro_beta, "dro_beta", low=0, low_open=True,
                                            allow_exact=False))
    if opts.loss_type not in EXTRA_LOSS_TYPES:
        return
    if opts.loss_type == "dro" and opts.dro_beta is None:
        raise ValueError("dro_beta: loss_type 'dro' needs dro_beta > 0 (verl 0.9.1 "
                         "policy_loss.dro_beta has no default)")
    if opts.dual_clip is not None or opts.delta is not None:
        raise ValueError(f"loss_type: {opts.loss_type!r} takes no dual_clip or delta")
    if opts.importance_level == "sequence" and opts.loss_type != "sapo":
        raise ValueError(f"importance_level: 'sequence' is for loss types 'clip', 'cispo' and "
                         f"'sapo', not {opts.loss_type!r}")


# ---------------------------------------------------------------------------------------
# The building blocks


def sapo_gate(rho, A, tau_pos=1.0, tau_neg=1.05):
    """SAPO's gate g(rho) = (4 / tau) sigmoid(tau (rho - 1)) and its derivative 4 s (1 - s),
    s = sigmoid(tau (rho - 1)), with tau = ``tau_pos`` where A > 0, else ``tau_neg``.

    ``rho`` >= 0 and ``A`` float arrays of one shape (unchecked kernel). At rho = 1 the gate is
    2 / tau and its slope 1, the slope of the unclipped PPO term; far from 1 the slope decays
    like exp(-tau abs(rho - 1)) instead of dropping to 0 at a clip bound.

    >>> g, dg = sapo_gate(np.array([1.0, 1.0]), np.array([1.0, -1.0]), 1.0, 2.0)
    >>> g.tolist(), dg.tolist()
    ([2.0, 1.0], [1.0, 1.0])
    """
    tau = np.where(A > 0, tau_pos, tau_neg)
    s = 1.0 / (1.0 + np.exp(-tau * (rho - 1.0)))
    return s * (4.0 / tau), 4.0 * s * (1.0 - s)


def gmpo_log_ratio(log_ratio, A, eps_low, eps_high):
    """GMPO's token log-ratio lr' = sgn(A) min(sgn(A) lr, sgn(A) clip(lr, -eps_low, eps_high)):
    min(lr, eps_high) for A > 0, max(lr, -eps_low) for A < 0, 0 for A = 0; and where its
    derivative d lr' / d lr is 1 (bool; at a bound the bound counts as inside, as
    ``torch.clamp`` passes the gradient there).

    >>> lr, passes = gmpo_log_ratio(np.array([0.5, 0.5, -0.5, -0.5]),
    ...                             np.array([1.0, -1.0, 1.0, -1.0]), 0.2, 0.3)
    >>> lr.tolist(), passes.tolist()
    ([0.3, 0.5, -0.5, -0.2], [False, True, True, False])
    """
    sgn = np.sign(A)
    clamped = np.clip(log_ratio, -eps_low, eps_high)
    out = sgn * np.minimum(sgn * log_ratio, sgn * clamped)
    passes = ((A > 0) & (log_ratio <= eps_high)) | ((A < 0) & (log_ratio >= -eps_low))
    return out + 0.0, passes


def dppo_valid(logp, logp_old, A, eps_low, eps_high, divergence="tv"):
    """DPPO's trust region per token (bool, True: the token keeps its gradient).

    With p = exp(logp), p_old = exp(logp_old):

    * ``"tv"``: p - p_old <= eps_high where A > 0, p - p_old >= -eps_low where A <= 0;
    * ``"kl"``: the binary KL  D = p_old (logp_old - logp)
      + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8)),  D <= eps_high or p <= p_old
      where A > 0, D <= eps_low or p >= p_old where A <= 0 (verl 0.9.1's 1e-8).

    The region is one-sided: a token moving against its advantage is always kept.
    ``logp`` and ``logp_old`` must be log-probabilities (<= 0) for ``"kl"``.

    >>> dppo_valid(np.log([0.5, 0.8, 0.5]), np.log([0.2, 0.7, 0.8]), np.array([1.0, 1.0, -1.0]),
    ...            0.2, 0.2).tolist()
    [False, True, False]
    """
    p, p_old = np.exp(logp), np.exp(logp_old)
    if divergence == "tv":
        return np.where(A > 0, p - p_old <= eps_high, p - p_old >= -eps_low)
    kl = p_old * (logp_old - logp) + (1.0 - p_old) * np.log((1.0 - p_old + 1e-8)
                                                              / (1.0 - p + 1e-8))
    return np.where(A > 0, (kl <= eps_high) | (p <= p_old), (kl <= eps_low) | (p >= p_old))


def covariance(logp, A, m, *, eps=0.0):
    """cov_t = (A_t - mean A)(logp_t - mean logp), the means over the response tokens ``m``
    (divided by n + ``eps``: verl's ``masked_mean`` has eps 1e-8, Clip-Cov uses it, KL-Cov's
    plain mean does not); 0 at padding.

    >>> covariance(np.array([-1.0, -2.0, -3.0]), np.array([1.0, 0.0, -1.0]),
    ...            np.ones(3, bool)).tolist()
    [1.0, 0.0, 1.0]
    """
    n = np.count_nonzero(m)
    mean_A = np.where(m, A, 0.0).sum() / (n + eps)
    mean_logp = np.where(m, logp, 0.0).sum() / (n + eps)
    return np.where(m, (A - mean_A) * (logp - mean_logp), 0.0)


def clip_cov_selection(cov, m, clipped, ratio, bounds, seed=0):
    """Clip-Cov's tokens whose loss is dropped (bool, the shape of ``cov``), verl 0.9.1's rule:

    * the candidates: response tokens not clipped (``clipped`` False: the clipped branch of
      the surrogate is not active) with low < cov_t < high (strict), in row-major order
      (``torch.nonzero``'s);
    * k = max(int(ratio * n), 1), n the number of response tokens (Python's float product
      and truncation);
    * the first min(k, len) candidates of a uniform random permutation of them:
      ``np.random.default_rng(seed).permutation(len)`` here, ``torch.randperm`` in verl (the
      same rule, another generator: equal selections need equal permutations).

    >>> cov = np.array([[2.0, 0.5, 3.0, 4.0]])
    >>> clip_cov_selection(cov, np.ones((1, 4), bool), np.array([[0, 0, 0, 1]], bool), 0.5,
    ...                    (1.0, 5.0)).tolist()  # candidates 0 and 2, k = 2: both
    [[True, False, True, False]]
    """
    low, high = bounds
    candidates = np.flatnonzero(m & ~clipped & (cov > low) & (cov < high))
    k = max(int(ratio * int(np.count_nonzero(m))), 1)
    chosen = candidates[np.random.default_rng(seed).permutation(len(candidates))[:k]]
    out = np.zeros(cov.size, bool)
    out[chosen] = True
    return out.reshape(cov.shape)


def kl_cov_selection(cov, m, ratio):
    """KL-Cov's tokens that get the abs(log-ratio) penalty (bool): the k = max(1, int(n * ratio))
    response tokens of largest cov_t (``torch.topk``), ties broken by the lower row-major index
    (``torch.topk`` leaves the order of ties unspecified: docs/conventions.md section 15).

    >>> kl_cov_selection(np.array([[0.5, 2.0, 2.0, 9.0]]), np.array([[1, 1, 1, 0]], bool),
    ...                  0.5).tolist()  # n = 3, k = 1; the padded 9.0 is not a token
    [[False, True, False, False]]
    """
    valid = np.flatnonzero(m)
    k = max(1, int(len(valid) * ratio))
    order = np.argsort(-cov.reshape(-1)[valid], kind="stable")[:k]
    out = np.zeros(cov.size, bool)
    out[valid[order]] = True
    return out.reshape(cov.shape)


# ---------------------------------------------------------------------------------------
# The loss types in the objective's forward and backward


def extra_surrogate(logp, logp_old, log_rho, rho, A, m, opts, is_weights):
    """The term of ``opts.loss_type`` (unweighted), the weights that multiply it and the
    intermediates its gradient and statistics need: ``(surrogate, weights, extra)``
    (unchecked kernel: the arrays of ``policy_loss_forward``, 0 at padding)."""
    kind, lo, hi = opts.loss_type, 1 - opts.epsilon, 1 + _eps_high(opts)
    extra = {}
    weights = is_weights
    if kind == "sapo":
        # g(rho_t) A_t, g the smooth gate
        gate, extra["dgate"] = sapo_gate(rho, A, opts.sapo_tau_pos, opts.sapo_tau_neg)
        surrogate = gate * A
    elif kind == "geo_mean":
        # s_i Abar_i,  log s_i = mean_t lr'_t over the response
        lr_gm, extra["passes"] = gmpo_log_ratio(log_rho, A, opts.epsilon, _eps_high(opts))
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        s = np.exp(np.where(m, lr_gm, 0.0).sum(axis=-1, keepdims=True) / n)
        A_bar = np.where(m, A, 0.0).sum(axis=-1, keepdims=True) / n
        extra.update(s=s, A_bar=A_bar, n=n)
        surrogate = np.where(m, s * A_bar, 0.0)
        if is_weights is not None:
            # the row's weight: the geometric mean of w_t + 1e-10 (verl's), at each token
            row = np.exp(np.where(m, np.log(is_weights + 1e-10), 0.0).sum(axis=-1,
                                                                            keepdims=True) / n)
            weights = np.where(m, row, 0.0)
    elif kind == "gpg":
        surrogate = A * logp
    elif kind == "clip_cov":
        ppo = np.minimum(rho * A, np.clip(rho, lo, hi) * A)
        # the clipped branch active: verl's pg_losses2 > pg_losses1
        extra["clipped"] = np.clip(rho, lo, hi) * A < rho * A
        cov = covariance(logp, A, m, eps=1e-8)
        extra["selected"] = clip_cov_selection(cov, m, extra["clipped"], opts.cov_ratio,
                                               opts.cov_bounds, opts.cov_seed)
        surrogate = np.where(extra["selected"], 0.0, ppo)
    elif kind == "kl_cov":
        extra["selected"] = kl_cov_selection(covariance(logp, A, m), m, opts.cov_ratio)
        surrogate = rho * A - opts.kl_cov_coef * np.abs(log_rho) * extra["selected"]
    elif kind in DPPO_DIVERGENCES:
        if kind == "dppo_kl" and (np.any(logp[m] > 0) or np.any(logp_old[m] > 0)):
            raise ValueError("logp: loss_type 'dppo_kl' reads exp(logp) and exp(logp_old) as "
                             "probabilities; got a log-probability > 0 at a response token")
        # sg(min(rho_t, c)) v_t A_t logp_t
        valid = dppo_valid(logp, logp_old, A, opts.epsilon, _eps_high(opts),
                           DPPO_DIVERGENCES[kind])
        extra["valid"] = valid & m
        extra["weight"] = np.minimum(rho, opts.dppo_ratio_max) * extra["valid"]
        surrogate = extra["weight"] * A * logp
    else:  # dro
        surrogate = A * logp - 0.5 * opts.dro_beta * np.square(log_rho)
    return np.where(m, surrogate, 0.0), weights, extra


def extra_drho(f, dsurrogate, A, opts):
    """d loss / d rho of a :data:`RATIO_LOSS_TYPES` loss and the part of d loss / d log rho
    that does not run through rho (KL-Cov's abs(log rho)), given d loss / d surrogate."""
    kind = opts.loss_type
    if kind == "sapo":
        return dsurrogate * f.extra["dgate"] * A, 0.0
    if kind == "clip_cov":
        # the clipped branch and the dropped tokens pass nothing
        return dsurrogate * np.where(f.extra["clipped"] | f.extra["selected"], 0.0, A), 0.0
    # kl_cov: rho A - coef |log rho| z   (d |x| / dx = sign(x), 0 at 0 as in torch)
    return (dsurrogate * A,
            -dsurrogate * opts.kl_cov_coef * np.sign(f.log_rho) * f.extra["selected"])


def extra_dlogp(f, dsurrogate, A, m, opts):
    """d loss / d logp of a :data:`DIRECT_LOSS_TYPES` loss, given d loss / d surrogate
    (the log-ratio clamp's mask included)."""
    kind = opts.loss_type
    if kind == "gpg":
        return dsurrogate * A
    if kind in DPPO_DIVERGENCES:
        # the weight sg(min(rho, c)) v is a constant
        return dsurrogate * f.extra["weight"] * A
    clamp_passes = 1.0
    if opts.log_ratio_clamp is not None:
        clamp_passes = np.abs(f.log_ratio) <= opts.log_ratio_clamp
    if kind == "dro":
        return dsurrogate * (A - opts.dro_beta * f.log_rho * clamp_passes)
    # geo_mean: d (s_i Abar_i) / d logp_u = Abar_i s_i [lr'_u passes] / n_i, summed over the row
    e = f.extra
    row = dsurrogate.sum(axis=-1, keepdims=True)
    return np.where(m & e["passes"], row * e["A_bar"] * e["s"] / e["n"], 0.0) * clamp_passes


def extra_stats(f, A, m, opts) -> dict:
    """The statistics of these losses that replace or add to ``policy_loss_stats``'s: the
    fraction whose gradient the loss's own rule cuts (``clipfrac_active``) and the loss's
    own fractions (token fractions over the response tokens)."""
    n = np.count_nonzero(m)

    def frac(flags):
        return float(np.count_nonzero(flags & m) / n)

    kind = opts.loss_type
    out = {"clipfrac_active": 0.0}
    if kind == "geo_mean":
        outside = (f.log_rho < -opts.epsilon) | (f.log_rho > _eps_high(opts))
        out.update(clipfrac_active=frac(~f.extra["passes"] & (A != 0)),
                   clipfrac_high=frac(outside & (A > 0)), clipfrac_low=frac(outside & (A < 0)))
    elif kind == "clip_cov":
        out.update(clipfrac_active=frac(f.extra["clipped"]),
                   cov_selected_frac=frac(f.extra["selected"]))
    elif kind == "kl_cov":
        out.update(cov_selected_frac=frac(f.extra["selected"]),
                   approx_kl_abs=float(np.where(m, np.abs(f.log_rho), 0.0).sum() / n))
    elif kind in DPPO_DIVERGENCES:
        out.update(clipfrac_active=frac(~f.extra["valid"]),
                   dppo_masked_frac=frac(~f.extra["valid"]),
                   dppo_truncated_frac=frac((f.rho > opts.dppo_ratio_max) & f.extra["valid"]))
    return out


def _eps_high(opts):
    return opts.epsilon if opts.epsilon_high is None else opts.epsilon_high


