"""``make demo``: train the default task by PPO and show the three forces at work.

The reward pulls the policy towards higher scores, the KL penalty pulls it
back towards the frozen reference, clipping keeps each step small. The demo
warms up a reference on the ``length`` task's prior (responses of a random
length), runs PPO with the default :class:`~ppo_numpy.training.PPOConfig`,
prints a progress line every few iterations, a few responses before and
after, and where the outputs (metrics.csv, checkpoint, dashboard.png) are.
``python -m ppo_numpy walkthrough`` prints the running example of docs/objective.md instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .._machine import cpu_kind, simd_kind
from .._npz import BadFileError
from ..models.sampling import sample
from ..models.vocab import Vocab
from ..training import PPOConfig, make_task, train
from ..training.metrics import critic_summary, history_to_columns
from ..training.run import RunError, load_state

DEFAULT_OUT = Path("runs") / "demo"


def fresh_dir(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``, ... : the first that holds no run yet."""
    candidate, k = base, 1
    while candidate.exists() and any(candidate.iterdir()):
        k += 1
        candidate = base.with_name(f"{base.name}-{k}")
    return candidate


def show_responses(title, model, task, seed=123, n=4):
    """Print ``n`` sampled responses to fixed prompts, with their scores."""
    vocab = Vocab(task.vocab_size)
    rng = np.random.default_rng(seed)
    prompts = task.sample_prompts(rng, n)
    r = sample(model, prompts, rng, task.max_new_tokens)
    scores = task.score(prompts, r.responses, r.mask)
    print(title)
    for x, y, s in zip(prompts, r.responses, scores):
        print(f"  {vocab.decode(x):>10} -> {vocab.decode(y):<28} score {s:.2f}")


#: held-out explained variance of the best function of (prompt token, position) on the
#: warmed-up policy's rollouts: how much of the return a state can predict
#: (docs/training.md, "Why the value head's explained variance is often <= 0")
EV_CEILING = {"length": 0.20}


def describe_critic(critic: dict, task: str) -> str:
    """What the value head's two panels of the dashboard show, in words, with the numbers."""
    n = critic["learning_end"]
    lines = [
        f"the value head (critic): value loss {critic['value_loss_start']:.3g} -> "
        f"{critic['value_loss_end']:.3g} ({critic['value_loss_drop']:.0f}x lower, first 5 "
        "-> last 10 iterations),",
        f"  falling with the variance of the returns, Var(R) "
        f"{critic['return_variance_start']:.3g} -> {critic['return_variance_end']:.3g}: "
        "V follows the returns as the policy improves.",
        f"  Explained variance: median {critic['ev_learning']:.2f} while learning "
        f"(iterations 1-{n})" + (f"; a state predicts little of its return here (the best "
                                 f"possible is about {EV_CEILING[task]:.1f})."
                                 if task in EV_CEILING else "."),
    ]
    if critic["ev_after"] == critic["ev_after"]:      # not NaN: iterations after the phase
        lines.append(
            "  Afterwards nearly every response scores the optimum, Var(R) is tiny and "
            f"explained variance\n  is noise (median {critic['ev_after']:.2f}, dips far "
            "below 0): expected, not a fault.")
    return "\n".join(lines)


def describe_health(history: list, optimum: float) -> str:
    """One verdict line per check a newcomer reads on the dashboard (notebook 10's table)."""
    last = history[-10:]
    kl = np.mean([r["kl_ref"] for r in last])
    clip = np.mean([r["clipfrac"] for r in last])
    score = np.mean([r["score"] for r in last])
    exact = all(r["ratio_first_min"] == r["ratio_first_max"] == 1.0 for r in history)
    return "\n".join([
        "is it healthy? (means of the last 10 iterations)",
        f"  score {score:.3f} of {optimum:g}: " + ("yes, above 90%" if score >= 0.9 * optimum
                                                   else "below 90% of the optimum"),
        f"  KL to pi_ref {kl:.2f} nats per response, held by beta: the policy stays near "
        "the reference",
        f"  clip fraction {clip:.3f}: " + ("small steps (0.05-0.3 is usual)"
                                           if 0.05 <= clip <= 0.3
                                           else "outside the usual 0.05-0.3"),
        "  rho = 1 exactly on every first minibatch: "
        + ("yes" if exact else "NO, logp_old is stale"),
    ])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy demo",
        description="Train the default task by PPO (the main job); print where the dashboard is.")
    parser.add_argument("--out", metavar="DIR", help=f"output directory (default: "
                        f"{DEFAULT_OUT}, or {DEFAULT_OUT}-2, ... if it already holds a run)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    try:
        config = PPOConfig(seed=args.seed)
    except ValueError as err:
        parser.error(str(err))
    task = make_task(config.task)
    out = Path(args.out) if args.out else fresh_dir(DEFAULT_OUT)

    print(f"PPO on the toy task {config.task!r}: {task.summary}.")
    print(f"  optimum {task.optimum:g}; a random policy scores {float(task.random_score()):.3f}.")
    print(f"  1. warm-up: {config.warmup_steps} supervised steps on the prior (random lengths) "
          "-> frozen reference pi_ref")
    print(f"  2. PPO: {config.iterations} iterations of B = {config.batch_size} responses, "
          f"K = {config.epochs} epochs x {config.minibatches} minibatches, "
          f"epsilon = {config.epsilon}, beta = {config.beta}")
    start = time.perf_counter()
    reached = []

    def progress(row):
        seconds = time.perf_counter() - start
        if not reached and row["score_frac"] >= 0.9:
            reached.append((row["iteration"], seconds))
        if row["iteration"] == 1 or row["iteration"] % 10 == 0:
            print(f"iter {row['iteration']:4d}  score {row['score']:.3f} "
                  f"({100 * row['score_frac']:5.1f}%)  KL to pi_ref {row['kl_ref']:6.3f}  "
                  f"clipfrac {row['clipfrac']:.3f}  {seconds:5.1f} s", flush=True)

    try:
        history = train(config, out, callback=progress)
        state = load_state(out / "checkpoint.npz")
    except (RunError, BadFileError) as err:
        print(f"python -m ppo_numpy demo: error: {err}", file=sys.stderr)
        return 2
    print()
    show_responses("the reference pi_ref (after the warm-up):", state.reference, task)
    show_responses("the trained policy:", state.policy, task)
    first, last = history[0], history[-1]
    print()
    print(f"score: random policy {float(task.random_score()):.3f}, after the warm-up "
          f"{first['score']:.3f}, after PPO {last['score']:.3f}; "
          f"KL to the reference {last['kl_ref']:.3f} nats per response")
    if reached:
        it, seconds = reached[0]
        print(f"90% of the optimum first reached at iteration {it}, {seconds:.1f} s "
              "after the start (warm-up included)")
    else:
        print("90% of the optimum was not reached")
    kind = cpu_kind()
    print(f"CPU kind: {simd_kind(kind['cpu_features'])} (NumPy {kind['numpy']}, OpenBLAS "
          f"{kind['openblas_core']} kernels); README.md gives these numbers per CPU kind")
    print()
    print(describe_health(history, task.optimum))
    print(describe_critic(critic_summary(history_to_columns(history)), config.task))
    print(f"metrics: {out / 'metrics.csv'}\ndashboard: {out / 'dashboard.png'}")
    return 0
