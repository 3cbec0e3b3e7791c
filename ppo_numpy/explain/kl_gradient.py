"""The KL term's gradient step by step for one categorical distribution (``python -m ppo_numpy
explain kl-gradient``): the tables a person writes to find, by hand, which KL's gradient each
estimator, placement and form has in expectation (:mod:`ppo_numpy.grads.kl_exact`).

1. the tokens: pi, pi_ref (and pi_old), d = log pi - log pi_ref, r = pi_ref / pi, rho = pi /
   pi_old and grad_z log pi(y) = e_y - pi;
2. the four estimates of each token and their derivatives;
3. the two targets: KL(pi || pi_ref) and KL(pi_ref || pi), their values and gradients;
4. every estimator x placement x form sampled from pi_theta (and 5., from pi_old): the
   derivative c(y) = d term / d logp(y) of each token, E_q[value], E_q[c(y) (e_y - pi)] and
   which target it equals, with the gaps.

The numbers come from :func:`ppo_numpy.grads.kl_exact.enumerate_responses`,
:func:`~ppo_numpy.grads.kl_exact.per_response_terms`, :func:`~ppo_numpy.grads.kl_exact.term_kernel`
and :func:`~ppo_numpy.grads.kl_exact.targets_kernel`; with Fraction input every rational step is
a fraction, and a step through a log is a float marked ``~``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..grads.kl_exact import (
    PLACEMENTS,
    _check_gamma,
    enumerate_responses,
    gradient_of,
    per_response_terms,
    targets_kernel,
    term_kernel,
)
from ..ppo.kl import ESTIMATORS
from ..ppo.kl_gradient import FORMS, OPENRLHF_IS_BOUND, check_is_bound, estimator_terms
from .tables import Table, format_number

__all__ = ["FRAMEWORK_FORMS", "kl_gradient_tables"]

#: each framework's KL in the loss as a row of the table (defaults of the released versions)
FRAMEWORK_FORMS = {
    ("k3", "ratio"): "TRL 1.16 (beta > 0; use_bias_correction_kl=True, its default)",
    ("k3", "plain"): "verl 0.9.1 kl_loss_type=low_var_kl (its default; clamped to 10); "
                     "TRL 1.16 use_bias_correction_kl=False; OpenRLHF 0.11.2 kl.estimator=k3",
    ("k3", "straight_through"): "verl 0.9.1 kl_loss_type=k3+",
    ("k3", "importance"): "OpenRLHF 0.11.2 --algo.kl.unbiased_gradient (bound 10)",
    ("k2", "plain"): "verl 0.9.1 kl_loss_type=mse (k2); OpenRLHF 0.11.2 kl.estimator=k2",
    ("k1", "plain"): "verl 0.9.1 kl_loss_type=kl (k1); OpenRLHF 0.11.2 kl.estimator=k1 "
                     "(its default)",
}

GRAD_LABEL = "e_y - pi"


def _cell(x):
    """An entry of an enumeration as a table cell (Fractions and ints kept exact)."""
    if isinstance(x, (Fraction, int, np.integer)) and not isinstance(x, bool):
        return Fraction(int(x)) if isinstance(x, (int, np.integer)) else x
    return float(x)


def _z(k: int) -> str:
    return f"z[{k + 1}]"


def kl_gradient_tables(pi, pi_ref, pi_old=None, *, bound=OPENRLHF_IS_BOUND) -> list:
    """The tables of ``explain kl-gradient`` for a categorical pi_theta, pi_ref (and pi_old).

    Parameters
    ----------
    pi, pi_ref : probabilities (K,)
        pi_theta and the reference; Fractions for exact tables. Each sums to 1, every entry
        > 0 (:func:`ppo_numpy.grads.kl_exact.enumerate_responses`).
    pi_old : probabilities (K,), optional
        The sampler; adds the table of the terms sampled from it.
    bound : float >= 1 or None
        The ``importance`` form's bound on pi / pi_old. Default 10 (OpenRLHF's).

    Returns
    -------
    list of Table

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> tabs = kl_gradient_tables([F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)])
    >>> tabs[0].column("r = pi_ref / pi")
    [Fraction(2, 1), Fraction(2, 3)]
    >>> on = tabs[3]
    >>> [(e, f, g) for e, p, f, g in zip(on.column("estimator"), on.column("placement"),
    ...  on.column("form"), on.column("gradient of")) if e == "k3" and p == "loss"]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('k3', 'plain', 'KL(ref||pi)'), ('k3', 'ratio', 'KL(pi||ref)'),
     ('k3', 'straight_through', 'KL(pi||ref)'), ('k3', 'importance', 'KL(pi||ref)')]
    """
    bound = check_is_bound(bound)
    e_theta = enumerate_responses(pi, pi_ref)
    if e_theta.T != 1:
        raise ValueError(f"pi: explain kl-gradient takes one categorical distribution (K,), got "
                         f"{e_theta.T} positions")
    exact = e_theta.exact
    e_old = None if pi_old is None else enumerate_responses(pi, pi_ref, pi_old)
    targets = targets_kernel(e_theta)
    tables = [_tokens_table(e_theta if e_old is None else e_old),
              _estimates_table(e_theta),
              _targets_table(targets, e_theta.K, exact)]
    gamma = _check_gamma(1, exact)
    for name, e in (("pi_theta", e_theta), ("pi_old", e_old)):
        if e is not None:
            tables.append(_terms_table(e, name, targets, gamma, bound))
    return tables


def _tokens_table(e) -> Table:
    K = e.K
    p, p_ref, d, rm1 = (x[:, 0] for x in (e.p, e.p_ref, e.d, e.rm1))
    columns = ["y", "pi", "pi_ref"]
    if not e.on_policy:
        columns.append("pi_old")
    columns += ["d = log pi - log pi_ref", "r = pi_ref / pi"]
    if not e.on_policy:
        columns.append("rho = pi / pi_old")
    columns += [f"{GRAD_LABEL}: {_z(k)}" for k in range(K)]
    rows = []
    for y in range(K):
        cells = [y + 1, _cell(p[y]), _cell(p_ref[y])]
        if not e.on_policy:
            cells.append(_cell(e.p_old[y, 0]))
        cells += [_cell(d[y]), _cell(rm1[y] + 1)]
        if not e.on_policy:
            cells.append(_cell(e.rho[y, 0]))
        cells += [_cell(x) for x in e.score[y, 0]]
        rows.append(tuple(cells))
    notes = ["`grad_z log pi(y) = e_y - pi` for `pi = softmax(z)`: the gradient of each "
             "sampled token's log-probability with respect to the logits.",
             "`d` needs a log: a float (marked `~` in an exact table) unless pi = pi_ref."]
    return Table("Step 1: the tokens", tuple(columns), tuple(rows), tuple(notes), e.exact)


def _estimates_table(e) -> Table:
    columns = ["y", "k1 = d", "k2 = d^2 / 2", "k3 = (r - 1) + d", "abs = |d|", "k1' = 1",
               "k2' = d", "k3' = 1 - r", "abs' = sign(d)"]
    terms = {est: estimator_terms(e.d[:, 0], e.rm1[:, 0], est) for est in ESTIMATORS}
    rows = tuple((y + 1, *(_cell(terms[est][0][y]) for est in ESTIMATORS),
                  *(_cell(terms[est][1][y]) for est in ESTIMATORS)) for y in range(e.K))
    notes = ["The estimators of KL(pi || pi_ref) from the one sampled token y "
             "(`ppo_numpy.kl_estimate`) and their derivatives `k' = dk / d logp(y)` "
             "(`ppo_numpy.kl_estimate_grad`).",
             "E_pi[k1] = E_pi[k3] = KL(pi || pi_ref) (step 3); E_pi[k2] and E_pi[abs] are not."]
    return Table("Step 2: the estimates and their derivatives", tuple(columns), rows,
                 tuple(notes), e.exact)


def _targets_table(targets, K, exact) -> Table:
    columns = ("target", "value", *(f"d/d{_z(k)}" for k in range(K)))
    rows = (("KL(pi||ref) = sum_y pi (log pi - log pi_ref)", _cell(targets.kl_reverse),
             *(_cell(x) for x in targets.dkl_reverse)),
            ("KL(ref||pi) = sum_y pi_ref (log pi_ref - log pi)", _cell(targets.kl_forward),
             *(_cell(x) for x in targets.dkl_forward)))
    notes = ["`grad KL(pi || pi_ref) = sum_y pi(y) d(y) (e_y - pi)` (a log: a float); "
             "`grad KL(pi_ref || pi) = pi - pi_ref` (rational: exact with fractions)."]
    return Table("Step 3: the two targets and their gradients with respect to the logits",
                 columns, rows, tuple(notes), exact)


def _terms_table(e, sampler, targets, gamma, bound) -> Table:
    K = e.K
    columns = ("placement", "estimator", "form", *(f"c({y + 1})" for y in range(K)),
               "E[value]", *(f"E[d/d{_z(k)}]" for k in range(K)), "gradient of",
               "gap to grad KL(pi||ref)", "gap to grad KL(ref||pi)")
    rows = []
    for placement in PLACEMENTS:
        for estimator in ESTIMATORS:
            for form in FORMS if placement == "loss" else (None,):
                _, c = per_response_terms(e, estimator, placement, form, gamma, bound)
                value, grad = term_kernel(e, estimator, placement, form, gamma, bound)
                name, gap_rev, gap_fwd = gradient_of(grad, targets)
                rows.append((placement, estimator, "-" if form is None else form,
                             *(_cell(x) for x in c[:, 0]), _cell(value),
                             *(_cell(x) for x in grad), name, _cell(gap_rev), _cell(gap_fwd)))
    q = "pi" if sampler == "pi_theta" else "pi_old"
    rho = "1 (in value)" if sampler == "pi_theta" else "pi / pi_old"
    bound_text = "none" if bound is None else format_number(bound)
    notes = [
        f"Sampled from `{q}`, rho = {rho}. `c(y) = d term / d logp(y)`: loss plain `k'`; "
        "ratio `rho (k' + k)` (the value `k rho`); straight_through `d` (k2's); importance "
        f"`min(rho, {bound_text}) d`; reward `rho k_old(y)` (the reward -k of the sampling "
        "policy is a constant; for one token the return is the reward).",
        f"`E[value] = sum_y {q}(y) value(y)` (the reward's: its penalty k_old); `E[d/dz] = "
        f"sum_y {q}(y) c(y) (e_y - pi)` (step 1's last columns).",
        "gradient of: the target (step 3) whose gradient it equals, exactly with fractions, "
        "else within 1e-10 of the largest entry; the gaps are max_k |E[d/dz_k] - target_k|.",
    ]
    if sampler == "pi_theta":
        notes.append("The frameworks' KL in the loss: " + "; ".join(
            f"{est} {form}: {where}" for (est, form), where in FRAMEWORK_FORMS.items()) + ".")
    title = f"Step {4 if sampler == 'pi_theta' else 5}: every KL term sampled from `{q}`"
    return Table(title, columns, tuple(rows), tuple(notes), e.exact)
