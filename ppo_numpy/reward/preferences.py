"""Synthetic preference pairs labelled by a task's hidden gold score, with label noise
(notebook ``12_reward_model_overoptimisation``).

Each pair is one prompt x and two responses y_a, y_b drawn from the task's prior
(the distribution the reference policy is warmed up on: the data a real
reward model sees comes from the initial policy), each replaced with
probability ``random_frac`` by a response of the uniform random policy. A
simulated labeller who knows the gold score g (the task's rule) picks y_a with
the Bradley-Terry probability

    p(y_a > y_b) = sigma((g(x, y_a) - g(x, y_b)) / tau)

so close calls are often labelled the wrong way round and equal gold scores are
a coin flip; ``tau = 0`` labels by the gold order (ties still a coin flip).
Responses the data never covers (e.g. what the prior never says) leave the
reward model guessing there: that is where a policy can over-optimise it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_int, check_scalar
from ..models.base import check_rng

FIELDS = ("prompts", "chosen", "chosen_mask", "rejected", "rejected_mask", "gold_chosen",
          "gold_rejected")


@dataclass(frozen=True)
class PreferencePairs:
    """n labelled pairs: ``prompts (n, P)``; ``chosen``, ``rejected`` int (n, T) with their
    masks float64 (n, T) (the labeller preferred ``chosen``); their gold scores (n,)."""

    prompts: np.ndarray
    chosen: np.ndarray
    chosen_mask: np.ndarray
    rejected: np.ndarray
    rejected_mask: np.ndarray
    gold_chosen: np.ndarray
    gold_rejected: np.ndarray

    def __len__(self) -> int:
        return int(self.prompts.shape[0])

    def take(self, index) -> PreferencePairs:
        """The pairs at ``index`` (a slice or an int array), as new arrays."""
        return PreferencePairs(**{f: np.array(getattr(self, f)[index]) for f in FIELDS})

    def split(self, n_first: int) -> tuple[PreferencePairs, PreferencePairs]:
        """(the first ``n_first`` pairs, the rest): e.g. training and held-out pairs."""
        if not 0 < n_first < len(self):
            raise ValueError(f"n_first: must be in 1 .. {len(self) - 1}, got {n_first}")
        return self.take(slice(0, n_first)), self.take(slice(n_first, None))

    @property
    def label_agrees_with_gold(self) -> np.ndarray:
        """Per pair: +1 the label agrees with the gold order, -1 it contradicts it, 0 a gold tie."""
        return np.sign(self.gold_chosen - self.gold_rejected)


def _responses(task, prompts, rng, random_frac):
    """Prior responses, each replaced by a random-policy one with probability random_frac."""
    y, m = task.sample_prior(prompts, rng)
    if random_frac == 0.0:
        return y, m
    y_rand, m_rand = task.sample_random(prompts, rng)
    use = rng.random(prompts.shape[0]) < random_frac  # (n,)
    return np.where(use[:, None], y_rand, y), np.where(use[:, None], m_rand, m)


def make_preference_pairs(task, rng, n_pairs, *, tau=0.1, random_frac=0.0) -> PreferencePairs:
    """Draw ``n_pairs`` prompts, two responses each, and a noisy label for each pair.

    Parameters
    ----------
    task : :class:`ppo_numpy.training.tasks.Task`
        Gives the prompts, the prior, the random policy and the hidden gold score.
    rng : np.random.Generator
    n_pairs : int >= 1
    tau : float >= 0
        Labeller temperature: p(y_a > y_b) = sigma((g_a - g_b) / tau). Default 0.1
        (on tasks scored in steps of 1/5, one step is labelled right with
        probability sigma(2) = 0.88). 0: noiseless except for ties.
    random_frac : float in [0, 1]
        Probability that a response comes from the random policy instead of the
        prior. Default 0.

    Returns
    -------
    PreferencePairs

    Examples
    --------
    >>> from ppo_numpy.training.tasks import make_task
    >>> pairs = make_preference_pairs(make_task("reverse"), np.random.default_rng(0), 500, tau=0)
    >>> len(pairs), pairs.chosen.shape
    (500, (500, 5))
    >>> bool(np.all(pairs.gold_chosen >= pairs.gold_rejected))
    True
    """
    check_rng(rng)
    n_pairs = check_int(n_pairs, "n_pairs")
    tau = check_scalar(tau, "tau", low=0, allow_exact=False)
    random_frac = check_scalar(random_frac, "random_frac", low=0, high=1, allow_exact=False)
    x = task.sample_prompts(rng, n_pairs)
    y_a, m_a = _responses(task, x, rng, random_frac)
    y_b, m_b = _responses(task, x, rng, random_frac)
    g_a, g_b = task.score(x, y_a, m_a), task.score(x, y_b, m_b)
    if tau == 0.0:
        p_a = np.where(g_a > g_b, 1.0, np.where(g_a < g_b, 0.0, 0.5))
    else:
        # p(y_a > y_b) = sigma((g_a - g_b) / tau)
        p_a = np.exp(-np.logaddexp(0.0, -(g_a - g_b) / tau))
    a_wins = rng.random(x.shape[0]) < p_a  # (n,)
    w = a_wins[:, None]
    return PreferencePairs(
        prompts=x,
        chosen=np.where(w, y_a, y_b), chosen_mask=np.where(w, m_a, m_b),
        rejected=np.where(w, y_b, y_a), rejected_mask=np.where(w, m_b, m_a),
        gold_chosen=np.where(a_wins, g_a, g_b), gold_rejected=np.where(a_wins, g_b, g_a),
    )
