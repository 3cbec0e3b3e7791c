"""Step-by-step tables of the objective's formulas for one response, for checking them by hand.

Each table lists, token by token, what a person writes down when working a
formula out on paper, in the order they would write it:

* :func:`gae_table`: t, r~_t, V(s_t), V(s_{t+1}), delta_t, (gamma lambda) * A_hat_{t+1},
  A_hat_t, R_t, backwards in t;
* :func:`clip_table`: rho_t, A_hat_t, clip(rho_t), both products, the min, the active
  branch and the derivative of the min with respect to rho_t;
* :func:`ratio_table`: logp_t - logp_old_t and rho_t = exp(...);
* :func:`rewards_table`: logp_t, logp_ref_t, KL_t, -beta * KL_t, where the score is
  added, r~_t;
* :func:`ppo_tables`: all of them for one response, and its L_PPO;
* :func:`grpo_table`, :func:`rloo_table`: the group baselines of a batch, one row per
  response: score, group mean (or the others' mean), deviation, std, advantage;
* :func:`rollout_is_table`: the rollout correction's importance weights of one response:
  log w_t = logp_old_t - logp_rollout_t, the statistic its level reads, the case of its
  mode and the weight.

The numbers come from the core functions (``td_errors``, ``gae``,
``clipped_surrogate``, ``kl_estimate``, ``kl_shaped_rewards``,
``probability_ratio``, ``aggregate``, ``grpo_advantages``, ``rloo_advantages``).
Only the intermediate steps that the core keeps inside a formula are computed
here from the core's outputs or kernels (``(gamma lambda) * A_hat_{t+1}``,
``clip(rho_t)``, the two products, the active branch, a group's mean and std).

With ``fractions.Fraction`` inputs every rational step is exact and printed
as a fraction (1863/4000); a float parameter such as 0.95 is read as the
number written, 19/20. Steps that need exp or log (rho from log-probabilities,
the k3 estimator) are floats, printed with a leading ``~`` in an exact table.
Floats are printed to 10 significant digits. ``t`` counts from 1 as in
docs/objective.md (array index t - 1).

``python -m ppo_numpy explain`` prints these tables; ``docs/hand-calculations.md``
shows worked examples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .._checks import as_array, is_exact, prepare, scalar_for, zero_like
from ..family.advantages import (
    _check_groups,
    _flat_groups,
    _group_sums,
    grpo_advantages,
    rloo_advantages,
)
from ..mismatch.correction import is_statistic_kernel, rollout_importance_weights
from ..ppo.aggregation import aggregate
from ..ppo.clipping import (
    CASE_NAMES,
    UNCLIPPED,
    at_kink,
    check_dual_clip,
    clip_bounds,
    clip_case,
    clipped_surrogate,
    surrogate_term,
)
from ..ppo.gae import gae
from ..ppo.kl import kl_estimate, kl_shaped_rewards, last_valid_index
from ..ppo.ratio import probability_ratio
from ..ppo.td import next_valid_values, td_errors

PAD = "-"

KL_LABELS = {
    "k1": "KL_t (k1 = logp_t - logp_ref_t)",
    "k2": "KL_t (k2 = (logp_t - logp_ref_t)^2 / 2)",
    "k3": "KL_t (k3 = (r - 1) - log r)",
    "abs": "KL_t (abs = |logp_t - logp_ref_t|)",
}


def format_number(x, exact: bool = False) -> str:
    """One table cell: a Fraction as ``p/q``, a float to 10 significant digits.

    In an exact table (``exact=True``) a finite float is a step that needed exp
    or log and is marked with a leading ``~`` (NaN or inf, an input at padding, is not).

    >>> format_number(Fraction(1863, 4000)), format_number(Fraction(3)), format_number(-0.0)
    ('1863/4000', '3', '0')
    >>> format_number(0.46574999999999994), format_number(0.1065306597126334, exact=True)
    ('0.46575', '~0.1065306597')
    >>> format_number(float("nan"), exact=True)
    'nan'
    """
    if isinstance(x, str):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return str(int(x))
    if isinstance(x, Fraction):
        return str(x)
    text = f"{float(x):.10g}"
    if text == "-0":
        text = "0"
    # NaN or inf can only be an input at padding, shown as given: no step made it
    return "~" + text if exact and np.isfinite(x) else text


@dataclass(frozen=True)
class Table:
    """A titled table of cells with notes, printable as plain text or Markdown.

    ``rows`` hold the raw values (Fraction, float, int, or a string such as
    ``"-"`` at padding); :meth:`column` returns them for checks. Titles and
    notes may put symbols in backticks: Markdown keeps them, plain text drops them.
    """

    title: str
    columns: tuple
    rows: tuple
    notes: tuple = ()
    exact: bool = False

    def column(self, name: str) -> list:
        """The raw values of column ``name``, in row order."""
        if name not in self.columns:
            raise KeyError(f"name: no column {name!r}; columns are {', '.join(self.columns)}")
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def _cells(self) -> list:
        return [[format_number(c, self.exact) for c in row] for row in self.rows]

    def text(self) -> str:
        """Plain text: title, an aligned table with ``|`` between columns, notes."""
        cells = self._cells()
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(self.columns)]
        lines = [self.title.replace("`", ""), ""]
        lines.append(" | ".join(h.rjust(w) for h, w in zip(self.columns, widths)).rstrip())
        lines.append("-+-".join("-" * w for w in widths))
        lines += [" | ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
        return _with_notes(lines, [n.replace("`", "") for n in self.notes])

    def markdown(self) -> str:
        """GitHub Markdown: title paragraph, a table (header in code spans), a list of notes."""

        def esc(s):
            return s.replace("|", "\\|")

        lines = [self.title, ""]
        lines.append("| " + " | ".join(f"`{esc(h)}`" for h in self.columns) + " |")
        lines.append("|" + "|".join("---:" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in self._cells()]
        return _with_notes(lines, self.notes)


def _with_notes(lines: list, notes) -> str:
    """``lines``, then the notes as a list after a blank line (none: no blank line), joined."""
    if notes:
        lines = lines + [""] + ["- " + n for n in notes]
    return "\n".join(lines)


def render(tables, fmt: str = "text") -> str:
    """Several tables, separated by a blank line, as ``"text"`` or ``"markdown"``."""
    if fmt not in ("text", "markdown"):
        raise ValueError(f"fmt: expected 'text' or 'markdown', got {fmt!r}")
    return "\n\n".join(t.text() if fmt == "text" else t.markdown() for t in tables)


def _cell(x):
    """A numpy element as a plain Python number (Fractions unchanged)."""
    return x if isinstance(x, Fraction) else float(x)


def _exact(arr: np.ndarray) -> bool:
    return arr.dtype == object


def _token_rows(m, n_columns: int, cells, pad=lambda i: ()) -> tuple:
    """One row per position: ``(t, *cells(i))`` at a response token (t = i + 1); at padding
    ``t (pad)``, the inputs ``pad(i)`` (none by default) and ``-`` in every other column."""
    heads = ((i + 1, *cells(i)) if m[i] else (f"{i + 1} (pad)", *pad(i)) for i in range(len(m)))
    return tuple(head + (PAD,) * (n_columns - len(head)) for head in heads)


def gae_table(rewards, values, gamma=1.0, lam=0.95, mask=None) -> Table:
    """TD errors, GAE and returns of one response, one row per token, backwards in t.

    Columns: t, r~_t, V(s_t), V(s_{t+1}), delta_t = r~_t + gamma V(s_{t+1}) - V(s_t),
    (gamma lambda) * A_hat_{t+1}, A_hat_t = delta_t + (gamma lambda) A_hat_{t+1},
    R_t = A_hat_t + V(s_t). The first row is t = T, where V(s_{T+1}) = 0 and
    A_hat_{T+1} = 0.

    Parameters
    ----------
    rewards, values : array (T,)
        r~_t and V(s_t) as for :func:`ppo_numpy.gae`; Fractions for exact tables.
    gamma, lam : float in [0, 1]
        Discount and GAE lambda.
    mask : array (T,) of 0/1, optional
        Padding rows are shown with ``-``; the next state of a response token is
        the next response token.

    Returns
    -------
    Table

    Examples
    --------
    The running example, exactly:

    >>> from fractions import Fraction as F
    >>> tab = gae_table([0, 0, 1], [F("0.5"), F("0.6"), F("0.7")], gamma=1, lam=0.95)
    >>> tab.column("t"), [str(a) for a in tab.column("A_hat_t")]
    ([3, 2, 1], ['3/10', '77/200', '1863/4000'])
    >>> [str(c) for c in tab.column("(gamma lambda) * A_hat_{t+1}")]
    ['0', '57/200', '1463/4000']
    """
    delta = td_errors(rewards, values, gamma, mask)
    A, R = gae(rewards, values, gamma, lam, mask)
    (r, v), m = prepare({"rewards": rewards, "values": values}, mask, ranks=(1,))
    exact = _exact(v)
    r_in = as_array(rewards, "rewards", exact=exact)
    v_in = as_array(values, "values", exact=exact)
    gamma_s, lam_s = scalar_for(gamma, v), scalar_for(lam, v)
    gl = gamma_s * lam_s
    v_next = next_valid_values(v, m)
    # (gamma lambda) * A_hat_{t+1}, A_hat_{t+1} = 0 after the last response token
    carry = gl * next_valid_values(A, m)
    columns = ("t", "r~_t", "V(s_t)", "V(s_{t+1})", "delta_t", "(gamma lambda) * A_hat_{t+1}",
               "A_hat_t", "R_t = A_hat_t + V(s_t)")
    # backwards in t; padding rows show their inputs
    rows = _token_rows(m, len(columns), lambda i: (
        _cell(r_in[i]), _cell(v_in[i]), _cell(v_next[i]), _cell(delta[i]), _cell(carry[i]),
        _cell(A[i]), _cell(R[i])), pad=lambda i: (_cell(r_in[i]), _cell(v_in[i])))[::-1]
    title = (f"TD errors and GAE, backwards in t: `gamma = {format_number(gamma_s)}`, "
             f"`lambda = {format_number(lam_s)}`, `gamma lambda = {format_number(gl)}`")
    notes = [
        "`delta_t = r~_t + gamma V(s_{t+1}) - V(s_t)`, with `V(s_{T+1}) = 0` after the last "
        "response token.",
        "`A_hat_t = delta_t + (gamma lambda) A_hat_{t+1}`, starting from `A_hat_{T+1} = 0`: "
        "the first row is t = T.",
        "`R_t = A_hat_t + V(s_t)` is the value head's target.",
    ]
    if not np.all(m):
        notes.append("Padding rows (mask 0) are skipped: the next state of a response token is "
                     "the next response token, and the core returns 0 at padding.")
    notes += _number_notes(exact, any_float=False)
    return Table(title, columns, rows, tuple(notes), exact)


def _number_notes(exact: bool, any_float: bool, what: str = "") -> list:
    if exact and any_float:
        return [f"Exact fractions, except {what}: floats, marked `~`, shown to 10 significant "
                "digits."]
    if exact:
        return ["Exact fractions."]
    return ["Floats, shown to 10 significant digits; Fraction inputs (`--exact`) give exact "
            "fractions."]


def clip_table(rho, advantages, epsilon=0.2, *, epsilon_high=None, dual_clip=None,
               mask=None) -> Table:
    """The clipped surrogate min(rho_t A_hat_t, clip(rho_t, 1 - eps, 1 + eps) A_hat_t), per token.

    Columns: t, rho_t, A_hat_t, clip(rho_t), rho_t * A_hat_t, clip(rho_t) * A_hat_t,
    min (from :func:`ppo_numpy.clipped_surrogate`), with ``dual_clip`` also
    c * A_hat_t and term_t, then the active branch and the derivative of the
    term with respect to rho_t:

    * ``unclipped``: the min takes rho_t A_hat_t (also when both are equal:
      rho_t inside the range, or A_hat_t = 0); derivative A_hat_t;
    * ``clipped``: the min takes the constant clip(rho_t) A_hat_t, strictly
      smaller; derivative 0;
    * ``dual clip``: for A_hat_t < 0 the bound c A_hat_t is strictly larger than
      the min; derivative 0;
    * ``unclipped, at the kink``: rho_t exactly on the bound that binds
      (rho = 1 + eps_high with A > 0, rho = 1 - eps with A < 0, rho = c with
      A < 0 under dual clip). The derivative jumps there; the value printed is
      the one from inside the clip range, A_hat_t, the convention of
      ``ppo_numpy.grads.loss_grads`` (and of PyTorch's ``clamp`` + ``max``, which
      passes the gradient at a bound and splits a tie in half each way).

    Parameters
    ----------
    rho, advantages : array (T,)
        rho_t >= 0 and A_hat_t; Fractions for an exact table.
    epsilon, epsilon_high, dual_clip, mask
        As in :func:`ppo_numpy.clipped_surrogate`.

    Returns
    -------
    Table

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> tab = clip_table([F("1.1"), F("1.5"), F("1.2")], [F(2), F(2), F(2)])
    >>> [str(x) for x in tab.column("min")], tab.column("active")
    (['11/5', '12/5', '12/5'], ['unclipped', 'clipped', 'unclipped, at the kink'])
    >>> [str(x) for x in tab.column("d min / d rho_t")]
    ['2', '0', '2']
    """
    (rho_a, A), m = prepare({"rho": rho, "advantages": advantages}, mask, ranks=(1,),
                            nonnegative={"rho": "ratios"})
    exact = _exact(rho_a)
    lo, hi = clip_bounds(epsilon, epsilon_high, like=rho_a)
    c = check_dual_clip(dual_clip)
    c = None if c is None else scalar_for(c, rho_a)
    # the one case analysis of the surrogate, its statistics and its gradient
    case = clip_case(rho_a, A, lo, hi, c)
    # clip(rho_t, 1 - eps, 1 + eps_high)
    rho_clip = np.minimum(np.maximum(rho_a, lo), hi)
    term_min, term = surrogate_term(rho_a, A, lo, hi), surrogate_term(rho_a, A, lo, hi, c)
    # d term_t / d rho_t: A_t where unclipped, 0 where a constant is taken
    zero = scalar_for(0, rho_a)
    drho = np.where(case == UNCLIPPED, A, zero)
    branch = [CASE_NAMES[k] + (", at the kink" if k == UNCLIPPED and kink else "")
              for k, kink in zip(case, at_kink(rho_a, A, lo, hi, c))]
    grad_name = "d min / d rho_t" if c is None else "d term_t / d rho_t"
    columns = ["t", "rho_t", "A_hat_t", "clip(rho_t)", "rho_t * A_hat_t",
               "clip(rho_t) * A_hat_t", "min"]
    eps_name = "eps" if epsilon_high is None else "eps_high"
    title = (f"Clipped surrogate: clip range `[1 - eps, 1 + {eps_name}] = "
             f"[{format_number(lo)}, {format_number(hi)}]`")
    notes = ["`min = min(rho_t A_hat_t, clip(rho_t) A_hat_t)`, the term PPO maximises "
             "(a loss is its negative)."]
    if c is not None:
        columns += ["c * A_hat_t", "term_t"]
        title += f", dual clip `c = {format_number(c)}`"
        notes.append("`term_t = max(min, c A_hat_t)` where `A_hat_t < 0`, else `min`.")
    columns += ["active", grad_name]

    def cells(i):
        dual = () if c is None else (_cell(c * A[i]), _cell(term[i]))
        return (_cell(rho_a[i]), _cell(A[i]), _cell(rho_clip[i]), _cell(rho_a[i] * A[i]),
                _cell(rho_clip[i] * A[i]), _cell(term_min[i]), *dual, branch[i],
                _cell(drho[i]))

    rows = _token_rows(m, len(columns), cells)
    notes += [
        "active: `unclipped` where the min takes `rho_t A_hat_t` (also when the two are "
        "equal), `clipped` where `clip(rho_t) A_hat_t` is strictly smaller"
        + (", `dual clip` where `c A_hat_t` is strictly larger than the min." if c is not None
           else "."),
        f"`{grad_name}`: `A_hat_t` where `rho_t A_hat_t` is taken, 0 where a constant is "
        "taken. At a kink (rho_t exactly on the bound that binds) the derivative is "
        "one-sided; the one from inside the clip range, `A_hat_t`, is printed.",
    ]
    notes += _number_notes(exact, any_float=False)
    return Table(title, tuple(columns), rows, tuple(notes), exact)


def ratio_table(logp, logp_old, mask=None) -> Table:
    """rho_t = exp(logp_t - logp_old_t) of one response, per token.

    Columns: t, logp_t, logp_old_t, logp_t - logp_old_t (exact for Fractions),
    rho_t (from :func:`ppo_numpy.probability_ratio`, always a float).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> tab = ratio_table([F(0), F("-0.5")], [F(0), F(-1)])
    >>> print(tab.text().splitlines()[5])  # exp(1/2) = 1.6487212707...
    2 |   -1/2 |         -1 |                 1/2 |     ~1.648721271
    """
    rho = probability_ratio(logp, logp_old, mask)
    (lp, lp_old), m = prepare({"logp": logp, "logp_old": logp_old}, mask, ranks=(1,))
    exact = _exact(lp)
    diff = lp - lp_old
    columns = ("t", "logp_t", "logp_old_t", "logp_t - logp_old_t", "rho_t = exp(...)")
    rows = _token_rows(m, len(columns),
                       lambda i: (_cell(lp[i]), _cell(lp_old[i]), _cell(diff[i]), float(rho[i])))
    notes = ["`rho_t = pi_theta(y_t | x, y_<t) / pi_theta_old(y_t | x, y_<t) = "
             "exp(logp_t - logp_old_t)`."]
    notes += _number_notes(exact, any_float=True, what="rho_t (exp is not rational)")
    return Table("Probability ratio", columns, rows, tuple(notes), exact)


def rewards_table(score, logp, logp_ref, beta, mask=None, estimator="k1") -> Table:
    """KL-shaped rewards r~_t = -beta * KL_t + [t == T] * score of one response, per token.

    Columns: t, logp_t, logp_ref_t, KL_t (from :func:`ppo_numpy.kl_estimate`),
    -beta * KL_t and r~_t (from :func:`ppo_numpy.kl_shaped_rewards`), and
    ``score added``: the score at the last response token t = T, blank elsewhere.

    Parameters
    ----------
    score : float
        The reward model's score of the response.
    logp, logp_ref : array (T,)
        Log-probabilities of the sampled tokens under pi_theta and pi_ref.
    beta : float >= 0
    mask : array (T,) of 0/1, optional
        The score goes to the last 1.
    estimator : {"k1", "k2", "k3", "abs"}
        ``k3`` needs exp: its column and the ones after it are floats.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> tab = rewards_table(1, [F(-1), F(-2), F("-0.5")], [F("-1.5"), F("-1.8"), F("-0.6")], 0.1)
    >>> [str(x) for x in tab.column("r~_t")]
    ['-1/20', '1/50', '99/100']
    """
    kl = kl_estimate(logp, logp_ref, estimator, mask)
    penalty = kl_shaped_rewards(0, logp, logp_ref, beta, mask, estimator)
    shaped = kl_shaped_rewards(score, logp, logp_ref, beta, mask, estimator)
    (lp, lp_ref), m = prepare({"logp": logp, "logp_ref": logp_ref}, mask, ranks=(1,))
    exact = _exact(lp)
    s = as_array(score, "scores", exact=_exact(kl))[()]
    last = int(last_valid_index(m))
    columns = ("t", "logp_t", "logp_ref_t", KL_LABELS[estimator], "-beta * KL_t",
               "score added", "r~_t")
    # the score is added at the last response token only
    rows = _token_rows(m, len(columns), lambda i: (
        _cell(lp[i]), _cell(lp_ref[i]), _cell(kl[i]), _cell(penalty[i]),
        _cell(s) if i == last else "", _cell(shaped[i])))
    beta_s = scalar_for(beta, lp)
    title = f"KL-shaped rewards: `beta = {format_number(beta_s)}`, estimator {estimator}"
    notes = [f"`r~_t = -beta KL_t`, plus the score at the last response token (t = {last + 1})."]
    if estimator == "k3":
        notes.append("`k3 = (r - 1) - log r` with `r = exp(logp_ref_t - logp_t) = "
                     "pi_ref / pi_theta`.")
    notes += _number_notes(exact, any_float=not _exact(kl),
                           what="KL_t and what follows from it (k3 needs exp)")
    return Table(title, columns, rows, tuple(notes), exact)


def _to_float(arr: np.ndarray) -> np.ndarray:
    return arr.astype(np.float64) if _exact(arr) else arr


def _mark_floats(tables, exact: bool) -> list:
    """In a chain that started exact, mark the tables that became float with ``~``."""
    if not exact:
        return list(tables)
    note = "Floats, marked `~`, shown to 10 significant digits: an earlier step needed exp."
    return [t if t.exact else dataclasses.replace(t, exact=True, notes=t.notes[:-1] + (note,))
            for t in tables]


def ratio_clip_tables(logp, logp_old, advantages, epsilon=0.2, *, epsilon_high=None,
                      dual_clip=None, mask=None) -> list:
    """:func:`ratio_table`, then :func:`clip_table` of rho_t = exp(logp_t - logp_old_t).

    rho_t is a float, so the clip table is in floats (marked ``~`` when the
    inputs were Fractions).
    """
    ratio = ratio_table(logp, logp_old, mask)
    rho = probability_ratio(logp, logp_old, mask)
    A = _to_float(as_array(advantages, "advantages"))
    clip = clip_table(rho, A, epsilon, epsilon_high=epsilon_high, dual_clip=dual_clip, mask=mask)
    return _mark_floats([ratio, clip], ratio.exact)


def ppo_tables(score, logp_old, logp_ref, values, beta, gamma=1.0, lam=0.95, *, rho=None,
               logp=None, epsilon=0.2, estimator="k1", mask=None) -> list:
    """The whole chain for one response: rewards, GAE, (ratio,) clipped surrogate, L_PPO.

    1. r~_t from the rollout policy's ``logp_old`` and ``logp_ref``
       (:func:`rewards_table`);
    2. delta_t, A_hat_t, R_t from r~_t and ``values`` (:func:`gae_table`);
    3. rho_t: given directly (``rho``, exact for Fractions) or as
       exp(logp - logp_old) (``logp``, a float; :func:`ratio_table`);
    4. the clipped surrogate of rho_t and A_hat_t (:func:`clip_table`);
    5. this response's L_PPO = sum_t min(...) (``aggregate``'s
       ``"seq-mean-token-sum"`` for one sequence) and the token-mean policy loss.

    Exactly one of ``rho`` and ``logp`` must be given. Once a float enters
    (k3, or rho from ``logp``), the later steps are floats, marked ``~`` in an
    exact table.

    Returns
    -------
    list of Table
    """
    if (rho is None) == (logp is None):
        raise ValueError("rho: give exactly one of rho and logp")
    exact = _exact(prepare({"logp_old": logp_old, "logp_ref": logp_ref, "values": values},
                           mask, ranks=(1,))[0][0])
    tables = [rewards_table(score, logp_old, logp_ref, beta, mask, estimator)]
    shaped = kl_shaped_rewards(score, logp_old, logp_ref, beta, mask, estimator)
    v = values
    if exact and not _exact(shaped):
        v = _to_float(as_array(values, "values", exact=True))
    tables.append(gae_table(shaped, v, gamma, lam, mask))
    A = gae(shaped, v, gamma, lam, mask)[0]
    if logp is not None:
        tables.append(ratio_table(logp, logp_old, mask))
        rho = probability_ratio(logp, logp_old, mask)
    rho = as_array(rho, "rho")
    if _exact(rho) != _exact(A):
        rho, A = _to_float(rho), _to_float(A)
    tables.append(clip_table(rho, A, epsilon, mask=mask))
    term = clipped_surrogate(rho, A, epsilon, mask=mask)
    L = aggregate(term, mask, "seq-mean-token-sum")
    loss = -aggregate(term, mask, "token-mean")
    rows = (
        ("L_PPO for this response", "sum_t min(...)", _cell(L)),
        ("policy loss, token-mean", "-(1/T) sum_t min(...)", _cell(loss)),
    )
    notes = ["Over a batch, L_PPO is the mean of this sum over the prompt-response pairs.",
             "T counts response tokens only."]
    notes += _number_notes(exact, any_float=not _exact(term),
                           what="what depends on exp or log")
    tables.append(Table("The objective for this response", ("quantity", "formula", "value"),
                        rows, tuple(notes), exact))
    return _mark_floats(tables, exact)


_I_NOTE = ("`i` counts responses from 1 (array index i - 1); `group` is the prompt id given "
           "for the response.")
_MEAN_NOTE = ("`mean_g(i)` is the mean score of the responses to the same prompt as response "
              "i (equal group ids), itself included.")


def _group_display(scores, groups):
    """Whether the scores are exact, the scores (B,) in the table's arithmetic, each row's
    group index, the group sizes and prompt ids."""
    exact = is_exact(scores)
    s = as_array(scores, "scores", exact=exact)
    return (exact, s, *_check_groups(groups, s.shape[0]))


def grpo_table(scores, groups, *, scale="group", std_eps=1e-6, ddof=1) -> Table:
    """GRPO advantages A_i = (s_i - mean_g(i)) / (std + eps) of a batch, one row per response.

    Columns, in the order they are worked out: i, group (the prompt id), s_i,
    mean_g(i), s_i - mean_g(i), then for ``scale="group"`` or ``"batch"`` the
    variance (divisor n - ddof), std = sqrt(variance), std + eps, and A_i (from
    :func:`ppo_numpy.grpo_advantages`). ``scale="none"`` (Dr. GRPO) stops at the
    deviation, which is A_i.

    With Fraction scores the mean, the deviation and the variance are exact; the std
    needs a square root and is a float, marked ``~``, and so are std + eps and A_i.
    ``scale="none"`` is exact throughout.

    Parameters
    ----------
    scores : array (B,)
        One score per response.
    groups : array of int (B,)
        Prompt id of each response; rows with equal ids are one group.
    scale, std_eps, ddof
        As in :func:`ppo_numpy.grpo_advantages` (every group needs >= 2 responses).

    Returns
    -------
    Table

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> tab = grpo_table([F(1), F(0), F(0), F(1)], [0, 0, 1, 1], scale="none")
    >>> [str(a) for a in tab.column("A_i")]
    ['1/2', '-1/2', '-1/2', '1/2']
    >>> tab = grpo_table([F(1), F(0), F(0), F(1)], [0, 0, 1, 1])
    >>> str(tab.column("variance")[0]), round(tab.column("std")[0], 12)
    ('1/2', 0.707106781187)
    """
    A = grpo_advantages(scores, groups, scale=scale, std_eps=std_eps, ddof=ddof)
    exact, s, inverse, counts, ids = _group_display(scores, groups)
    n = counts if exact else counts.astype(np.float64)
    # mean_g(i) and s_i - mean_g(i), as grpo_advantages computes them
    mean = (_group_sums(s, inverse, len(counts)) / n)[inverse]
    # exactly 0 in a group of equal scores (the float mean may miss them by a rounding)
    dev = np.where(_flat_groups(s, inverse, len(counts)), s * 0, s - mean)
    columns = ["i", "group", "s_i", "mean_g(i)", "s_i - mean_g(i)"]
    notes = [_I_NOTE, _MEAN_NOTE]
    if scale == "none":
        title = "GRPO advantages, scale none (Dr. GRPO): `A_i = s_i - mean_g(i)`"
        # the deviation is A_i: no scaling steps
        steps = [()] * s.shape[0]
    elif scale == "group":
        # variance_g = sum_{j in g} (s_j - mean_g)^2 / (n_g - ddof)
        var = (_group_sums(dev * dev, inverse, len(counts)) / (n - ddof))[inverse]
        title = "GRPO advantages, scale group: `A_i = (s_i - mean_g(i)) / (std_g(i) + eps)`"
        what = "`variance` and `std` are those of the group's scores"
    else:
        B = s.shape[0]
        # the batch's variance: all B scores around the batch mean (not the deviations)
        batch_dev = s - s.sum() / B
        var = np.full(B, (batch_dev * batch_dev).sum() / (B - ddof), dtype=s.dtype)
        title = "GRPO advantages, scale batch: `A_i = (s_i - mean_g(i)) / (std + eps)`"
        what = (f"`variance` and `std` are those of all {B} scores around the batch mean "
                f"{format_number(_cell(s.sum() / B))}, the same on every row")
    if scale != "none":
        title += f", `eps = {format_number(float(std_eps))}`, ddof {ddof}"
        std = np.sqrt(var.astype(np.float64))
        columns += ["variance", "std", "std + eps"]
        steps = [(_cell(v), float(sd), float(sd + std_eps)) for v, sd in zip(var, std)]
        notes += [
            f"{what}, with divisor n - ddof; `std = sqrt(variance)`.",
            "`A_i = (s_i - mean_g(i)) / (std + eps)`: eps is added to the std, outside the "
            "square root; a group of equal scores has deviation 0 and A = 0.",
        ]
    columns.append("A_i")
    rows = tuple((i + 1, int(ids[inverse[i]]), _cell(s[i]), _cell(mean[i]), _cell(dev[i]),
                  *steps[i], _cell(A[i])) for i in range(s.shape[0]))
    notes += _number_notes(exact, any_float=scale != "none",
                           what="`std`, `std + eps` and `A_i` (a square root)")
    return Table(title, tuple(columns), rows, tuple(notes), exact)


def rloo_table(scores, groups) -> Table:
    """RLOO advantages A_i = s_i - (sum_g(i) - s_i) / (n_g(i) - 1), one row per response.

    Columns: i, group (the prompt id), s_i, n_g(i), the sum of the other scores of the
    group, their mean (the leave-one-out baseline b_i), and A_i = s_i - b_i (from
    :func:`ppo_numpy.rloo_advantages`). Exact for Fraction scores.

    Parameters
    ----------
    scores : array (B,)
        One score per response.
    groups : array of int (B,)
        Prompt id of each response; every group needs >= 2 responses.

    Returns
    -------
    Table

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> tab = rloo_table([F(1), F(0), F(0), F(1)], [0, 0, 1, 1])
    >>> [str(b) for b in tab.column("b_i = others' mean")], [str(a) for a in tab.column("A_i")]
    (['0', '1', '1', '0'], ['1', '-1', '-1', '1'])
    """
    A = rloo_advantages(scores, groups)
    exact, s, inverse, counts, ids = _group_display(scores, groups)
    # sum_{j in g(i), j != i} s_j and its mean over the n_g(i) - 1 others
    others = _group_sums(s, inverse, len(counts))[inverse] - s
    k = (counts - 1)[inverse]
    baseline = np.array([o / int(c) for o, c in zip(others, k)], dtype=s.dtype)
    columns = ("i", "group", "s_i", "n_g(i)", "sum of the others", "b_i = others' mean", "A_i")
    rows = tuple((i + 1, int(ids[inverse[i]]), _cell(s[i]), int(counts[inverse[i]]),
                  _cell(others[i]), _cell(baseline[i]), _cell(A[i]))
                 for i in range(s.shape[0]))
    notes = [
        _I_NOTE,
        "`b_i` is the mean score of the *other* responses to the same prompt: it does not "
        "depend on response i (docs/derivations.md, section 10).",
        "`A_i = s_i - b_i = n_g / (n_g - 1) * (s_i - mean_g(i))`.",
    ]
    notes += _number_notes(exact, any_float=False)
    return Table("RLOO advantages: `A_i = s_i - (sum_g(i) - s_i) / (n_g(i) - 1)`", columns, rows,
                 tuple(notes), exact)


ROLLOUT_IS_STATISTIC = {
    "token": "w_t = exp(log w_t)",
    "sequence": "exp(sum_t log w_t)",
    "geometric": "g = exp(mean_t log w_t)",
}


def rollout_is_table(logp_old, logp_rollout, *, level="token", mode="truncate", clip_max=2.0,
                     clip_min=None, log_ratio_bound=None, mask=None) -> Table:
    """The importance weights of :func:`ppo_numpy.rollout_importance_weights` for one response.

    Columns: t, logp_old_t, logp_rollout_t, log w_t = logp_old_t - logp_rollout_t (exact for
    Fractions), the statistic the level compares with the bounds (the token ratio, the exp of
    the response's sum, or OpenRLHF's geometric mean, a float), the case (``inside``,
    ``truncated to ...``, ``masked: above ...``) and the weight w_t (from the core function).

    Parameters
    ----------
    logp_old, logp_rollout : array (T,)
        The trainer's and the inference engine's log-probs of the sampled tokens.
    level, mode, clip_max, clip_min, log_ratio_bound, mask
        As in :func:`ppo_numpy.rollout_importance_weights`.

    Returns
    -------
    Table

    Examples
    --------
    Token ratios 4, 1/2, 1/2 (logp_old - logp_rollout = log 4, -log 2, -log 2):

    >>> import numpy as np
    >>> tab = rollout_is_table(np.log([0.8, 0.2, 0.4]), np.log([0.2, 0.4, 0.8]))
    >>> tab.column("case"), [round(w, 12) for w in tab.column("weight w_t")]
    (['truncated to clip_max = 2', 'inside', 'inside'], [2.0, 0.5, 0.5])
    """
    w = rollout_importance_weights(logp_old, logp_rollout, mask, level=level, mode=mode,
                                   clip_max=clip_max, clip_min=clip_min,
                                   log_ratio_bound=log_ratio_bound)
    (lp_old, lp_roll), m = prepare({"logp_old": logp_old, "logp_rollout": logp_rollout}, mask,
                                   ranks=(1,))
    exact = _exact(lp_old)
    # log w_t = logp_old_t - logp_rollout_t
    log_w = lp_old - lp_roll
    b = log_ratio_bound
    # the statistic the level compares with the bounds, at every token   (T,)
    stat = np.broadcast_to(is_statistic_kernel(_to_float(log_w)[None], m[None], level,
                                               None if b is None else float(b))[0],
                           (1, len(m)))[0]
    hi = np.inf if clip_max is None else float(clip_max)
    lo = -np.inf if clip_min is None else float(clip_min)

    def case(i):
        """(the case's name, the weight: the core's, or the bound itself, exact in an exact
        table, where truncation or the mask put it)."""
        x = stat[i]
        if lo <= x <= hi:
            return "inside", float(w[i])
        name, bound = ("clip_max", clip_max) if x > hi else ("clip_min", clip_min)
        bound = scalar_for(bound, log_w)
        side = "above" if x > hi else "below"
        if mode == "truncate":
            return f"truncated to {name} = {format_number(bound)}", bound
        return f"masked: {side} {name} = {format_number(bound)}", zero_like(log_w)
    stat_name = ROLLOUT_IS_STATISTIC[level]
    columns = ("t", "logp_old_t", "logp_rollout_t", "log w_t = logp_old_t - logp_rollout_t",
               stat_name, "case", "weight w_t")
    rows = _token_rows(m, len(columns), lambda i: (
        _cell(lp_old[i]), _cell(lp_roll[i]), _cell(log_w[i]), float(stat[i]), *case(i)))
    bounds = ", ".join(f"`{name} = {'none' if v is None else format_number(v)}`"
                       for name, v in (("clip_min", clip_min), ("clip_max", clip_max)))
    title = f"Rollout importance weights: level `{level}`, mode `{mode}`, {bounds}"
    notes = ["`w_t = pi_old(y_t) / pi_rollout(y_t) = exp(logp_old_t - logp_rollout_t)`: the "
             "trainer's probability of the sampled token over the inference engine's."]
    if level == "sequence":
        notes.append("Sequence level: one weight per response, `exp(sum_t log w_t)`, at each "
                     "of its tokens.")
    if level == "geometric":
        notes.append("Geometric level (OpenRLHF's sequence gate): the response is kept when "
                     "its geometric mean `g` is inside the bounds, and then keeps its own "
                     "token ratios `exp(log w_t)`, unclamped.")
    elif mode == "truncate":
        notes.append("truncate: `w_t = clip(statistic, clip_min, clip_max)` (TIS).")
    else:
        notes.append("mask: `w_t = statistic` inside the bounds, 0 outside (MIS, IcePop).")
    if b is not None:
        what = "the sum" if level == "sequence" else "each log w_t"
        notes.append(f"log_ratio_bound: {what} clamped to `[-{format_number(b)}, "
                     f"{format_number(b)}]` before exp (verl: 20).")
    notes += _number_notes(exact, any_float=True, what="the statistic and the weight (exp is "
                                                       "not rational)")
    return Table(title, columns, rows, tuple(notes), exact)
