"""What a PPO run logs per iteration, and ``metrics.csv`` (one row per iteration).

Floats are written with ``repr`` (the shortest text that reads back to the
same float), so a CSV read back holds exactly the values that were logged and
two runs with the same seed give byte-identical files. Wall-clock time is
printed on the progress line but never written here, for that reason.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np

from .._checks import prepare
from .._npz import BadFileError

#: column -> what it is. Statistics of the update are means over its minibatches.
COLUMNS = {
    "iteration": "PPO iteration, 1-based",
    "score": "mean score of the rollout's responses (the reward model's number)",
    "score_frac": "score / the task's optimum",
    "heldout_accuracy": "share of the task's evaluation prompts whose greedy response "
                        "reaches the optimum, after the update (Task.heldout_accuracy; "
                        "held out from training for add)",
    "kl_ref": "KL(pi_theta || pi_ref): sum over tokens of k1 = logp - logp_ref, mean over "
              "sequences, on the rollout",
    "beta": "beta used for this iteration's rewards",
    "clipfrac": "fraction of tokens where the clipped branch is active (clipfrac_active)",
    "approx_kl_k1": "KL(pi_old || pi_theta) estimate k1 = -log rho, token mean",
    "approx_kl_k3": "KL(pi_old || pi_theta) estimate k3 = (rho - 1) - log rho, token mean",
    "entropy": "policy entropy per token (aggregated with agg)",
    "policy_loss": "clipped surrogate loss (aggregated with agg)",
    "value_loss": "value loss 1/2 (V - R)^2 (aggregated with agg)",
    "explained_variance": "1 - Var(R - V) / Var(R) over the rollout's tokens (values before "
                          "the update)",
    "return_variance": "Var(R) over the rollout's tokens (population variance): the scale "
                       "explained_variance divides by",
    "response_length": "mean number of response tokens, EOS included",
    "eos_frac": "fraction of responses that end with EOS (the rest are truncated)",
    "grad_norm": "global gradient norm before clipping",
    "ratio_first_min": "min of rho on the first minibatch (must be exactly 1)",
    "ratio_first_max": "max of rho on the first minibatch (must be exactly 1)",
    "ratio_first_mean": "mean of rho on the first minibatch (must be exactly 1)",
}


def explained_variance(values, returns, mask=None) -> float:
    """1 - Var(R - V) / Var(R) over the valid tokens (population variances).

    1 when V predicts R exactly, 0 when V is no better than the mean of R,
    negative when worse; NaN when R is constant.

    R = [1, 3, 2] has variance 2/3; R - V = [0, 1, 0] has variance 2/9, so 1 - 1/3:

    >>> round(explained_variance([1.0, 2.0, 2.0], [1.0, 3.0, 2.0]), 12)
    0.666666666667
    """
    (v, R), m = prepare({"values": values, "returns": returns}, mask, exact=False)
    var_R = _population_var(R, m)
    if var_R == 0.0:
        return math.nan
    return 1.0 - _population_var(R - v, m) / var_R


def return_variance(returns, mask=None) -> float:
    """Var(R) over the valid tokens (population variance): the denominator of explained variance.

    >>> round(return_variance([1.0, 3.0, 2.0, 99.0], [1, 1, 1, 0]), 12)
    0.666666666667
    """
    (R,), m = prepare({"returns": returns}, mask, exact=False)
    return _population_var(R, m)


def _population_var(x, m) -> float:
    """Var(x) over the tokens where ``m`` is 1, divisor n; ValueError if there are none."""
    n = int(m.sum())
    if n == 0:
        raise ValueError("mask: no valid token")
    mu = x[m].sum() / n
    return float(((x[m] - mu) ** 2).sum() / n)


def learning_phase_end(score_frac, threshold=0.9) -> int:
    """Number of iterations up to and including the first with ``score_frac >= threshold``.

    All of them when the threshold is never reached.

    >>> learning_phase_end([0.2, 0.5, 0.95, 0.8, 1.0])
    3
    """
    frac = np.asarray(score_frac, dtype=np.float64)
    reached = np.flatnonzero(frac >= threshold)
    return int(reached[0]) + 1 if reached.size else len(frac)


def _nanmedian(x: np.ndarray) -> float:
    """The median of the entries that are not NaN; NaN, without numpy's warning, when there
    are none (a run without a value head, or nothing after the learning phase)."""
    x = x[~np.isnan(x)]
    return float(np.median(x)) if x.size else math.nan


def critic_summary(columns, threshold=0.9, start=5, end=10) -> dict:
    """Is the value head learning? The numbers the demo prints and the dashboard draws.

    ``learning_end``: last iteration of the learning phase (:func:`learning_phase_end`);
    ``ev_learning``: median explained variance over it; ``ev_after``: median afterwards
    (NaN if nothing follows); ``value_loss_start`` / ``value_loss_end``: mean value loss
    over the first ``start`` and last ``end`` iterations, and ``value_loss_drop``
    their ratio; ``return_variance_start`` / ``return_variance_end`` likewise for Var(R).
    Explained variance is ill-conditioned once Var(R) is tiny (every response scores
    the optimum), so the value loss falling, not EV late in the run, says whether the
    critic tracks the returns (``docs/training.md``).
    """
    ev = np.asarray(columns["explained_variance"], dtype=np.float64)
    n = learning_phase_end(columns["score_frac"], threshold)
    out = {"learning_end": n,
           "ev_learning": _nanmedian(ev[:n]),
           "ev_after": _nanmedian(ev[n:])}
    for name in ("value_loss", "return_variance"):
        x = np.asarray(columns[name], dtype=np.float64)
        out[f"{name}_start"] = float(np.mean(x[:start]))
        out[f"{name}_end"] = float(np.mean(x[-end:]))
    out["value_loss_drop"] = out["value_loss_start"] / out["value_loss_end"]
    return out


def critic_vs_constant(columns, fraction=0.5, *, iterations=None) -> dict:
    """Does V beat a constant while the policy learns? Over the first ``fraction`` of a run,
    or its first ``iterations`` (the dashboard reads its learning phase).

    ``value_loss_ratio``: the mean value loss over those iterations divided by the mean of
    Var(R) / 2, the loss of the best constant V (the batch mean of R); below 1, V beats
    it. ``ev_median``: the median explained variance over them. ``iterations``: how many
    (at least 1). Both NaN for a run without a value head (the critic-free algos log NaN).
    The issue 25 criterion (docs/training.md, "What the critic buys").

    Iterations 1-2 of 4: value loss [0.1, 0.3] against Var(R) / 2 = [0.2, 0.2], so
    0.2 / 0.2 = 1; explained variance [0.2, 0.6], median 0.4:

    >>> s = critic_vs_constant({"value_loss": [0.1, 0.3, 9, 9], "return_variance":
    ...                         [0.4, 0.4, 9, 9], "explained_variance": [0.2, 0.6, 9, 9]})
    >>> s["iterations"], round(s["value_loss_ratio"], 12), round(s["ev_median"], 12)
    (2, 1.0, 0.4)
    >>> critic_vs_constant({"value_loss": [0.1, 0.3, 9, 9], "return_variance": [0.4, 0.4, 9, 9],
    ...                     "explained_variance": [0.2, 0.6, 9, 9]}, iterations=1)["ev_median"]
    0.2
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: must be in (0, 1], got {fraction}")
    if iterations is not None and (isinstance(iterations, bool) or not isinstance(
            iterations, (int, np.integer)) or iterations < 1):
        raise ValueError(f"iterations: must be an int >= 1 or None, got {iterations!r}")
    loss = np.asarray(columns["value_loss"], dtype=np.float64)
    var_R = np.asarray(columns["return_variance"], dtype=np.float64)
    ev = np.asarray(columns["explained_variance"], dtype=np.float64)
    if not loss.size or loss.shape != var_R.shape or loss.shape != ev.shape:
        raise ValueError("columns: value_loss, return_variance and explained_variance must be "
                         f"non-empty and of one length, got {loss.shape}, {var_R.shape}, "
                         f"{ev.shape}")
    n = max(1, int(len(loss) * fraction)) if iterations is None else min(int(iterations),
                                                                          len(loss))
    constant = float(np.mean(var_R[:n])) / 2
    ratio = float(np.mean(loss[:n])) / constant if constant > 0 else math.nan
    return {"iterations": n, "value_loss_ratio": ratio, "ev_median": _nanmedian(ev[:n])}


#: median explained variance from which V counts as predicting the returns (issue 25)
EV_PREDICTING = 0.5


def critic_verdict(summary) -> tuple[str, str]:
    """Two sentences on a :func:`critic_vs_constant` summary: does V beat a constant (its
    loss against Var(R) / 2), and is it predicting (its median explained variance)?

    >>> loss, ev = critic_verdict({"iterations": 40, "value_loss_ratio": 0.31,
    ...                            "ev_median": 0.73})
    >>> loss
    'V beats a constant: loss 0.31x Var(R) / 2 (iterations 1-40)'
    >>> ev
    'V is predicting: median 0.73 (iterations 1-40)'
    >>> critic_verdict({"iterations": 40, "value_loss_ratio": 1.04, "ev_median": -0.02})[1]
    'V is not predicting: no better than a constant, median -0.02 (iterations 1-40)'
    """
    n, ratio, ev = summary["iterations"], summary["value_loss_ratio"], summary["ev_median"]
    span = f"(iterations 1-{n})"
    if ratio != ratio:  # NaN: no value head
        return "no value loss: no critic", "no value head: nothing to explain"
    loss = (f"V beats a constant: loss {ratio:.2f}x Var(R) / 2 {span}" if ratio < 1 else
            f"V does not beat a constant: loss {ratio:.2f}x Var(R) / 2 {span}")
    if ev >= EV_PREDICTING:
        words = f"V is predicting: median {ev:.2f} {span}"
    elif ev > 0:
        words = f"V predicts a little: median {ev:.2f} {span}"
    else:
        words = f"V is not predicting: no better than a constant, median {ev:.2f} {span}"
    return loss, words


def format_value(x) -> str:
    """``repr`` of a float (exact round trip), ``str`` of an int."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    return repr(float(x))


class MetricsWriter:
    """Appends rows to ``metrics.csv``, flushing each one (a run killed mid-way keeps them)."""

    def __init__(self, path, keep_rows: int = 0):
        """Open ``path``; ``keep_rows > 0`` keeps the first that many existing data rows (a
        resume, which has read and checked those rows before: the file holds them)."""
        self.path = Path(path)
        kept = read_rows(self.path)[:keep_rows] if keep_rows else []
        # header and kept rows go to a temporary file first: a kill while rewriting
        # never loses the rows a resume needs
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(COLUMNS)
            writer.writerows(kept)
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", newline="")
        self._csv = csv.writer(self._file, lineterminator="\n")

    def write(self, row: dict) -> None:
        self._csv.writerow([format_value(row[c]) for c in COLUMNS])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_rows(path, columns=COLUMNS, kind="a metrics.csv of this version") -> list[list[str]]:
    """The data rows of a metrics.csv (or of another CSV whose header is ``columns``), as
    strings (header checked).

    A file that cannot be decoded or parsed, or whose header differs, is a
    :class:`~ppo_numpy._npz.BadFileError` (a ValueError) naming it (and saying it is not
    ``kind``).
    """
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise BadFileError(path, f"not a readable CSV file ({err})") from None
    if not rows or tuple(rows[0]) != tuple(columns):
        raise BadFileError(path, f"not {kind} (header differs)")
    return rows[1:]


def read_metrics(path) -> dict[str, np.ndarray]:
    """metrics.csv as ``{column: float64 array}`` (``iteration`` as int64)."""
    rows = read_rows(path)
    out = {}
    for j, name in enumerate(COLUMNS):
        dtype = np.int64 if name == "iteration" else np.float64
        out[name] = np.array([r[j] for r in rows], dtype=dtype)
    return out


def history_to_columns(history: list[dict]) -> dict[str, np.ndarray]:
    """A list of per-iteration rows (as :func:`~ppo_numpy.training.train` returns) as columns."""
    return {name: np.array([row[name] for row in history]) for name in COLUMNS}
