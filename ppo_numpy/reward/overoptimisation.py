"""Over-optimising a learned reward model: why the KL penalty exists
(``python -m ppo_numpy overoptimisation``; notebook ``12_reward_model_overoptimisation``;
``docs/overoptimisation.md``).

With a rule-based score the KL penalty only slows learning down. Here the score
PPO maximises is a *proxy*: a :class:`~ppo_numpy.reward.RewardModel` fitted by the
Bradley-Terry loss to a few hundred noisy preference pairs, labelled by the
task's rule (the *gold* score) on responses of the task's prior, the
distribution the reference policy is warmed up on. The experiment

1. draws the pairs and fits the reward model; measures it on held-out pairs;
2. calibrates it (an affine map) so proxy and gold have the same mean and spread
   on fresh prior responses;
3. warms up the policy once (the frozen reference pi_ref), then, for each beta,
   runs PPO from that same start with the proxy as the score, recording per
   iteration the proxy and the gold score of the rollout's responses and the
   KL to the reference.

With beta too small the proxy keeps rising while the gold score peaks and falls:
the policy has found responses the reward model never saw and misjudges (on the
``length`` task, runs of content tokens the reward model credits token by token,
while the gold score pays only for stopping at the right length). A moderate
beta keeps pi_theta near pi_ref, where the proxy is trustworthy.

Randomness: the reward model's data and initialisation come from
``np.random.default_rng([seed, 1])``; PPO from ``default_rng(seed)`` as in
:func:`ppo_numpy.training.train`. Same configuration, same numbers, bit for bit.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from .._checks import check_int, check_scalar
from ..training.config import PPOConfig
from ..training.loop import fork_run, new_run, ppo_iteration
from ..training.metrics import format_value, read_rows
from ..training.tasks import TASKS, make_task
from . import RewardModel, evaluate_reward_model, fit_reward_model, make_preference_pairs


def _f(default, help_, **extra):
    return field(default=default, metadata={"help": help_, **extra})


@dataclass(frozen=True)
class OveroptimisationConfig:
    """The experiment's settings; the defaults are the reported experiment."""

    task: str = _f("length", "toy task whose rule is the gold score", choices=tuple(TASKS))
    seed: int = _f(0, "seed of the whole experiment")
    # 1. preference data and the reward model
    n_pairs: int = _f(300, "training preference pairs")
    n_heldout: int = _f(1000, "held-out preference pairs (accuracy only)")
    tau: float = _f(0.2, "labeller temperature: p(a > b) = sigma((gold_a - gold_b) / tau)")
    random_frac: float = _f(0.0, "fraction of pair responses from the random policy "
                                 "instead of the prior")
    d_hidden: int = _f(16, "reward model hidden width H")
    rm_steps: int = _f(300, "full-batch Adam steps on the Bradley-Terry loss")
    rm_lr: float = _f(0.02, "reward model learning rate")
    weight_decay: float = _f(1e-4, "L2 penalty on the reward model's weights")
    n_calibration: int = _f(2000, "prior responses used to calibrate the proxy to the gold "
                                  "scale")
    # 3. PPO against the proxy (other hyperparameters: PPOConfig's defaults)
    betas: tuple = _f((0.0, 0.03, 0.1, 0.3), "KL coefficients, one PPO run each")
    iterations: int = _f(200, "PPO iterations per beta")
    batch_size: int = _f(64, "PPO prompts per iteration (B)")
    warmup_steps: int = _f(150, "warm-up steps of the reference on the prior")

    def __post_init__(self):
        for name in ("n_pairs", "n_heldout", "d_hidden", "rm_steps", "n_calibration",
                     "iterations", "batch_size"):
            check_int(getattr(self, name), name)
        check_scalar(self.tau, "tau", low=0, allow_exact=False)
        check_scalar(self.random_frac, "random_frac", low=0, high=1, allow_exact=False)
        check_scalar(self.rm_lr, "rm_lr", low=0, low_open=True, allow_exact=False)
        check_scalar(self.weight_decay, "weight_decay", low=0, allow_exact=False)
        betas = tuple(self.betas)
        if not betas or any(isinstance(b, bool) or not isinstance(b, (int, float))
                            or not math.isfinite(b) or b < 0 for b in betas):
            raise ValueError(f"betas: need at least one finite beta >= 0, got {self.betas!r}")
        if len(set(betas)) != len(betas):
            raise ValueError(f"betas: repeated value in {self.betas!r}")
        object.__setattr__(self, "betas", tuple(float(b) for b in betas))
        # the remaining checks (task, seed, warmup_steps) are PPOConfig's
        self.ppo_config()

    def ppo_config(self, beta: float | None = None) -> PPOConfig:
        """The :class:`PPOConfig` of the PPO runs (``beta``: the first of ``betas``)."""
        # value_hidden=0: the critic of the first version (a linear head on the policy's
        # features), the one docs/overoptimisation.md was measured with (issue 25 made a
        # critic layer of its own the training default)
        return PPOConfig(task=self.task, seed=self.seed, iterations=self.iterations,
                         batch_size=self.batch_size, warmup_steps=self.warmup_steps,
                         beta=self.betas[0] if beta is None else beta, value_hidden=0)

    def replace(self, **changes) -> OveroptimisationConfig:
        return dataclasses.replace(self, **changes)


#: a tiny configuration for tests and a first look (a few seconds)
QUICK = OveroptimisationConfig(n_pairs=60, n_heldout=60, rm_steps=20, n_calibration=100,
                               betas=(0.0, 0.1), iterations=3, batch_size=16, warmup_steps=10)

#: column of overoptimisation.csv -> what it is (one row per beta and iteration)
COLUMNS = {
    "beta": "KL coefficient of the run",
    "iteration": "PPO iteration, 1-based",
    "proxy_score": "mean learned (calibrated) reward of the rollout's responses: what PPO "
                   "maximises",
    "gold_score": "mean gold score (the task's rule) of the same responses",
    "kl_ref": "KL(pi_theta || pi_ref): sum over tokens of k1, mean over sequences, on the "
              "rollout",
    "sqrt_kl": "sqrt(max(kl_ref, 0)), the x axis of Gao et al. (2023)",
    "response_length": "mean number of response tokens, EOS included",
    "eos_frac": "fraction of responses that end with EOS (the rest are truncated)",
}


class _ProxyAndGold:
    """The score function PPO gets: returns the proxy, remembers both means of each call."""

    def __init__(self, proxy, gold):
        self.proxy, self.gold = proxy, gold
        self.last = None

    def __call__(self, prompts, responses, mask):
        proxy = self.proxy(prompts, responses, mask)
        gold = self.gold(prompts, responses, mask)
        self.last = (float(np.mean(proxy)), float(np.mean(gold)))
        return proxy


@dataclass
class OveroptimisationResult:
    """What :func:`run_overoptimisation` measured."""

    config: OveroptimisationConfig
    reward_model: RewardModel
    fit_history: list
    heldout: dict
    rows: list
    seconds: float
    #: the frozen reference and each beta's final policy, to sample from
    reference: object = None
    policies: dict = field(default_factory=dict)

    def runs(self) -> dict:
        """``{beta: {column: float64 array over iterations}}``."""
        return rows_by_beta(self.rows)

    def summary(self, last: int = 10) -> dict:
        return summarise(self.rows, last)


def fit_proxy(config: OveroptimisationConfig):
    """Steps 1-2: preference pairs, the fitted and calibrated reward model, its history and
    held-out statistics: ``(model, history, heldout)``."""
    task = make_task(config.task)
    rng = np.random.default_rng([config.seed, 1])
    pairs = make_preference_pairs(task, rng, config.n_pairs + config.n_heldout,
                                  tau=config.tau, random_frac=config.random_frac)
    train_pairs, heldout_pairs = pairs.split(config.n_pairs)
    model = RewardModel(task.vocab_size, task.prompt_length, task.max_new_tokens,
                        config.d_hidden, rng)
    history = fit_reward_model(model, train_pairs, steps=config.rm_steps, lr=config.rm_lr,
                               weight_decay=config.weight_decay, heldout=heldout_pairs)
    x = task.sample_prompts(rng, config.n_calibration)
    y, m = task.sample_prior(x, rng)
    model.calibrate(x, y, m, task.score(x, y, m))
    return model, history, evaluate_reward_model(model, heldout_pairs)


def run_overoptimisation(config: OveroptimisationConfig | None = None,
                         callback=None) -> OveroptimisationResult:
    """Run the experiment (module docstring); ``callback(row)`` after every PPO iteration."""
    config = OveroptimisationConfig() if config is None else config
    if not isinstance(config, OveroptimisationConfig):
        raise TypeError(f"config: expected an OveroptimisationConfig, got "
                        f"{type(config).__name__}")
    t0 = time.perf_counter()
    model, history, heldout = fit_proxy(config)
    start = new_run(config.ppo_config())
    rows, policies = [], {}
    for beta in config.betas:
        # every beta starts from the same warmed-up policy, reference and generator state
        state = fork_run(start, config.ppo_config(beta))
        recorder = _ProxyAndGold(model.score, state.task.score)
        state.score_fn = recorder
        for _ in range(config.iterations):
            metrics = ppo_iteration(state)
            proxy, gold = recorder.last
            row = {"beta": beta, "iteration": metrics["iteration"], "proxy_score": proxy,
                   "gold_score": gold, "kl_ref": metrics["kl_ref"],
                   "sqrt_kl": math.sqrt(max(metrics["kl_ref"], 0.0)),
                   "response_length": metrics["response_length"],
                   "eos_frac": metrics["eos_frac"]}
            rows.append(row)
            if callback is not None:
                callback(row)
        policies[beta] = state.policy
    return OveroptimisationResult(config, model, history, heldout, rows,
                                  time.perf_counter() - t0, start.reference, policies)


def rows_by_beta(rows) -> dict:
    """``{beta: {column: float64 array}}`` from the rows (or ``read_csv``)."""
    out = {}
    for beta in dict.fromkeys(float(r["beta"]) for r in rows):
        mine = [r for r in rows if float(r["beta"]) == beta]
        out[beta] = {c: np.array([float(r[c]) for r in mine]) for c in COLUMNS if c != "beta"}
    return out


def summarise(rows, last: int = 10) -> dict:
    """Per beta: means over the last ``last`` iterations of proxy, gold and KL, and the
    largest gold score of any ``last``-iteration window (the peak): ``{beta: dict}``."""
    check_int(last, "last")
    out = {}
    for beta, c in rows_by_beta(rows).items():
        k = min(last, len(c["gold_score"]))
        window = np.convolve(c["gold_score"], np.ones(k) / k, mode="valid")
        out[beta] = {"proxy": float(c["proxy_score"][-k:].mean()),
                     "gold": float(c["gold_score"][-k:].mean()),
                     "kl_ref": float(c["kl_ref"][-k:].mean()),
                     "gold_peak": float(window.max()),
                     "gold_peak_iteration": int(c["iteration"][int(window.argmax()) + k - 1])}
    return out


def write_csv(rows, path) -> None:
    """overoptimisation.csv: :data:`COLUMNS`, floats as ``repr`` (exact round trip)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows([format_value(r[c]) for c in COLUMNS] for r in rows)


def read_csv(path) -> list[dict]:
    """The rows of an overoptimisation.csv (header checked: a
    :class:`~ppo_numpy._npz.BadFileError`, a ValueError, if it differs)."""
    return [{c: int(v) if c == "iteration" else float(v) for c, v in zip(COLUMNS, r)}
            for r in read_rows(path, COLUMNS, "an overoptimisation.csv")]


def summary_table(result: OveroptimisationResult, last: int = 10) -> str:
    """The printed report: the reward model's held-out accuracy and the per-beta finals."""
    h = result.heldout
    held = [row["heldout_bt_loss"] for row in result.fit_history]
    best = int(np.argmin(held))
    lines = [f"reward model: held-out accuracy {h['accuracy']:.3f} against the noisy labels, "
             f"{h['gold_accuracy']:.3f} against the gold order (chance 0.5; the labels "
             f"themselves agree with the gold order on {h['label_gold_accuracy']:.3f} of the "
             "held-out pairs whose gold scores differ: the ceiling label noise sets)",
             f"  Bradley-Terry loss after the fit: held-out {held[-1]:.3f}, training "
             f"{result.fit_history[-1]['bt_loss']:.3f} (log 2 = 0.693 is a constant reward; "
             f"held-out lowest {held[best]:.3f} at step {result.fit_history[best]['step']})"
             + (": it overfits its training pairs, confident and wrong on some new ones"
                if held[-1] > math.log(2) else ""),
             f"PPO against the proxy, mean of the last {last} iterations:",
             f"  {'beta':>6} {'proxy':>7} {'gold':>7} {'KL':>7} {'gold peak (iteration)':>22}"]
    for beta, s in result.summary(last).items():
        lines.append(f"  {beta:6g} {s['proxy']:7.3f} {s['gold']:7.3f} {s['kl_ref']:7.2f} "
                     f"{s['gold_peak']:14.3f} ({s['gold_peak_iteration']:4d})")
    return "\n".join(lines)
