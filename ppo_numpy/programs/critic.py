"""``python -m ppo_numpy critic``: what the critic buys, PPO against the critic-free family.

Each variant is trained on each task and random seed with the same rollout budget (B = 64
sampled responses per iteration; GRPO and RLOO as 8 prompts x G = 8):

* PPO with GAE at lambda 0, 0.5, 0.9, 0.95, 1 (the learned critic, ``value_hidden``);
* PPO with the value fixed at 0: REINFORCE with whitened returns-to-go, which is exactly
  ``--algo reinforce_plus_plus --group-size 1`` (64 prompts, advantages
  ``whiten(G_t)``: GAE with V = 0 at lambda 1, whitened as PPO whitens; no value loss);
* GRPO and RLOO, G = 8.

For every run: the iteration and the number of sampled responses at which the rollout's
mean score first reaches 90% of the optimum (warm-up excluded: it samples the prior, not
the policy), the final score (mean of the last 10 iterations), CPU seconds of this
process to 90% and in total (from the call to ``train``, warm-up included), and, for the
runs with a critic, :func:`~ppo_numpy.training.metrics.critic_vs_constant` over the
first half. ``--json PATH`` writes every run; ``--figure PATH`` draws
:func:`ppo_numpy.plotting.training.plot_critic_comparison`. The table printed is the one
in docs/training.md, section "What the critic buys". Run with one BLAS thread
(``OPENBLAS_NUM_THREADS=1``), as ``make demo`` does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from ..models.sampling import evaluate_kernel, sample
from ..training import train
from ..training.config import config_for_task
from ..training.loop import new_run, ppo_iteration
from ..training.metrics import critic_vs_constant, explained_variance, history_to_columns
from ..training.value_ceiling import monte_carlo_values, returns_to_go, shaped_rewards

#: label -> the fields that make the variant (over the task's settings)
VARIANTS = {
    "PPO, GAE lambda 0": {"lam": 0.0},
    "PPO, GAE lambda 0.5": {"lam": 0.5},
    "PPO, GAE lambda 0.9": {"lam": 0.9},
    "PPO, GAE lambda 0.95": {"lam": 0.95},
    "PPO, GAE lambda 1": {"lam": 1.0},
    "PPO, V = 0 (REINFORCE, whitened returns)": {"algo": "reinforce_plus_plus",
                                                 "group_size": 1},
    "GRPO, G = 8": {"algo": "grpo"},
    "RLOO, G = 8": {"algo": "rloo"},
}

#: task -> the settings of its comparison. target: beta 0.01, since at the default 0.05
#: the KL penalty holds every algo below 90% of the optimum (docs/training.md)
TASK_SETTINGS = {"target": {"beta": 0.01}, "length": {}}


def run_one(config) -> dict:
    """Train ``config``; the run's iterations and responses to 90%, final score, CPU s."""
    start = time.process_time()
    reached = {}

    def callback(row):
        if not reached and row["score_frac"] >= 0.9:
            reached.update(iteration=row["iteration"], cpu=time.process_time() - start)

    history = train(config, callback=callback, plot=False)
    cpu_total = time.process_time() - start
    columns = history_to_columns(history)
    critic = critic_vs_constant(columns)
    iteration = reached.get("iteration")
    return {
        "seed": config.seed,
        "iteration_90": iteration,
        "responses_90": None if iteration is None else iteration * config.batch_size,
        "cpu_90": reached.get("cpu"),
        "cpu_total": cpu_total,
        "final": statistics.fmean(float(s) for s in columns["score_frac"][-10:]),
        "value_loss_ratio": critic["value_loss_ratio"],
        "ev_median": critic["ev_median"],
        "score_frac": [float(s) for s in columns["score_frac"]],
    }


def compare(tasks, seeds, variants=VARIANTS, iterations=80) -> dict:
    """``{task: {label: [run, ...]}}``, one :func:`run_one` per random seed."""
    results = {}
    for task in tasks:
        results[task] = {}
        for label, fields in variants.items():
            runs = []
            for seed in seeds:
                config = config_for_task(task=task, seed=seed, iterations=iterations,
                                         **TASK_SETTINGS.get(task, {}), **fields)
                runs.append(run_one(config))
            results[task][label] = runs
    return results


def _median(values):
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else None


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def summary_rows(results) -> list[dict]:
    """One row per (task, variant): medians over the seeds (over those that reached 90%
    for the iterations, responses and CPU seconds to 90%)."""
    rows = []
    for task, by_variant in results.items():
        for label, runs in by_variant.items():
            rows.append({
                "task": task, "variant": label,
                "reached": sum(r["iteration_90"] is not None for r in runs), "seeds": len(runs),
                "iterations_each": [r["iteration_90"] for r in runs],
                **{k: _median(r[k] for r in runs) for k in
                   ("iteration_90", "responses_90", "cpu_90", "cpu_total", "final",
                    "value_loss_ratio", "ev_median")},
            })
    return rows


def markdown_table(rows) -> str:
    lines = ["| task | variant | seeds at 90% | iteration at 90% (each seed) | median "
             "iteration | median responses | median CPU s to 90% | final (median) | "
             "value loss / (Var(R)/2), first half | median EV, first half |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        each = ", ".join("-" if i is None else str(i) for i in r["iterations_each"])
        lines.append(
            f"| {r['task']} | {r['variant']} | {r['reached']}/{r['seeds']} | {each} | "
            f"{_fmt(r['iteration_90'], 'g')} | {_fmt(r['responses_90'], 'g')} | "
            f"{_fmt(r['cpu_90'], '.2f')} | {_fmt(r['final'], '.3f')} | "
            f"{_fmt(r['value_loss_ratio'], '.2f')} | {_fmt(r['ev_median'], '.2f')} |")
    return "\n".join(lines)


#: item 1 of issue 25: the knobs tried on the first version's critic (value_hidden 0)
KNOBS = {
    "v1 critic (value_hidden 0, c_V 0.5, lr 3e-3)": {},
    "c_V 2": {"c_v": 2.0},
    "c_V 8": {"c_v": 8.0},
    "lr 1e-3": {"lr": 1e-3},
    "lr 1e-2": {"lr": 1e-2},
    "value clip 0.2": {"value_clip": 0.2},
    "no whitening": {"whiten_advantages": False},
    "lambda 1": {"lam": 1.0},
    "no gradient clipping": {"max_grad_norm": None},
    "context 4": {"context": 4},
    "own critic layer (value_hidden 64)": {"value_hidden": 64},
}

CAUSE_TASKS = ("length", "reverse", "sort", "target")


def knob_rows(tasks=CAUSE_TASKS, seeds=(0, 1), knobs=KNOBS) -> list[dict]:
    """Each knob over the v1 critic, the default run of each task otherwise: the first
    half's value loss / (Var(R) / 2) and median explained variance, the final score,
    and the median gradient norm (is clipping at 1 active?); medians over ``seeds``."""
    rows = []
    for label, fields in knobs.items():
        for task in tasks:
            runs = []
            for seed in seeds:
                config = config_for_task(task=task, seed=seed,
                                         **{"value_hidden": 0, **fields})
                c = history_to_columns(train(config, plot=False))
                runs.append({**critic_vs_constant(c),
                             "final": statistics.fmean(c["score_frac"][-10:]),
                             "grad_norm": statistics.median(c["grad_norm"])})
            rows.append({"knob": label, "task": task,
                         **{k: statistics.median(r[k] for r in runs)
                            for k in ("value_loss_ratio", "ev_median", "final", "grad_norm")}})
    return rows


def ceiling_rows(tasks=CAUSE_TASKS, seed=0, at=(0, 10, 20, 30, 40), batch=64, n=64,
                 critics=(0, 64)) -> list[dict]:
    """At iterations ``at`` of the default run of each task, on one fresh batch of
    ``batch`` rollouts: the explained variance of V^pi (by :func:`monte_carlo_values`,
    ``n`` continuations per state: the ceiling), and of the learned V, both against the
    Monte Carlo returns R_t = sum_{s >= t} r~_s; for each ``value_hidden`` in ``critics``."""
    rows = []
    for task in tasks:
        for hidden in critics:
            state = new_run(config_for_task(task=task, seed=seed, value_hidden=hidden))
            rng = np.random.default_rng(1000 + seed)  # the measurement's own generator
            for k in range(max(at) + 1):
                if k in at:
                    x = state.task.sample_prompts(rng, batch)
                    r = sample_rollout(state, x, rng)
                    beta = state.kl_controller.value
                    R = returns_to_go(shaped_rewards(state.policy, state.reference,
                                                     state.task, x, r.responses, r.mask,
                                                     beta))
                    V = monte_carlo_values(state.policy, state.reference, state.task, x,
                                           r.responses, r.mask, beta, rng, n)
                    rows.append({"task": task, "value_hidden": hidden, "iteration": k,
                                 "ev_true_value": explained_variance(V, R, r.mask),
                                 "ev_learned": explained_variance(r.old_values, R, r.mask)})
                if k < max(at):
                    ppo_iteration(state)
    return rows


def sample_rollout(state, prompts, rng):
    """A rollout of ``state``'s policy on ``prompts`` (the loop's step 1)."""
    return sample(state.policy, prompts, rng, state.task.max_new_tokens)


def readout_rows(tasks=CAUSE_TASKS, seed=0, iteration=20, batch=2048) -> list[dict]:
    """What a linear value head on the policy's features h can reach: least squares of
    the Monte Carlo return R_t on [h_t, 1] over ``batch`` rollouts of the v1 critic's run
    after ``iteration`` iterations, scored (explained variance) on ``batch`` others;
    also on the MLP's raw window x_t, and the learned V on the same rollouts."""
    rows = []
    for task in tasks:
        state = new_run(config_for_task(task=task, seed=seed, value_hidden=0))
        for _ in range(iteration):
            ppo_iteration(state)
        rng = np.random.default_rng(7)

        def features(rng=rng, state=state):
            x = state.task.sample_prompts(rng, batch)
            r = sample_rollout(state, x, rng)
            ev = evaluate_kernel(state.policy, x, r.responses, r.mask, 1.0)
            R = returns_to_go(shaped_rewards(state.policy, state.reference, state.task, x,
                                             r.responses, r.mask, state.kl_controller.value))
            P, T, m = x.shape[1], r.responses.shape[1], r.mask
            at = slice(P - 1, P - 1 + T)  # the positions whose outputs predict y_t
            return ev.cache["h"][:, at][m], ev.cache["x"][:, at][m], R[m], r.old_values[m]

        (h1, x1, R1, _), (h2, x2, R2, v2) = features(), features()
        rows.append({"task": task, "ev_learned": explained_variance(v2, R2),
                     "ev_linear_on_h": linear_readout_ev(h1, R1, h2, R2),
                     "ev_linear_on_window": linear_readout_ev(x1, R1, x2, R2)})
    return rows


def criterion_rows(tasks=("length", "target", "reverse", "sort", "add"), seeds=(0, 1, 2),
                   **fields) -> list[dict]:
    """Issue 25's criterion on the default run of each task (``python -m ppo_numpy train
    --task T``, its task defaults): :func:`critic_vs_constant` over the first half, and the
    final score, per random seed."""
    rows = []
    for task in tasks:
        for seed in seeds:
            c = history_to_columns(train(config_for_task(task=task, seed=seed, **fields),
                                         plot=False))
            rows.append({"task": task, "seed": seed, **critic_vs_constant(c),
                         "final": statistics.fmean(c["score_frac"][-10:])})
    return rows


def linear_readout_ev(F1, R1, F2, R2) -> float:
    """Explained variance on (F2, R2) of the least-squares fit R ~ [F, 1] w on (F1, R1)."""
    A1, A2 = np.c_[F1, np.ones(len(F1))], np.c_[F2, np.ones(len(F2))]
    w = np.linalg.lstsq(A1, R1, rcond=None)[0]
    return explained_variance(A2 @ w, R2)


def causes(seeds=(0, 1)) -> str:
    """The three measurements of docs/training.md, "Why the critic was no better than a
    constant", as markdown tables."""
    out = ["| task | value_hidden | iteration | EV of the true value V^pi (ceiling) | "
           "EV of the learned V |", "|---|---:|---:|---:|---:|"]
    for r in ceiling_rows():
        out.append(f"| {r['task']} | {r['value_hidden']} | {r['iteration']} | "
                   f"{r['ev_true_value']:.2f} | {r['ev_learned']:.2f} |")
    out += ["", "| task | EV of the learned V (v1) | best linear head on the policy's h | "
            "linear on the window x |", "|---|---:|---:|---:|"]
    for r in readout_rows():
        out.append(f"| {r['task']} | {r['ev_learned']:.2f} | {r['ev_linear_on_h']:.2f} | "
                   f"{r['ev_linear_on_window']:.2f} |")
    out += ["", "| knob (over the v1 critic) | task | value loss / (Var(R)/2), first half | "
            "median EV, first half | final score / optimum | median grad norm |",
            "|---|---|---:|---:|---:|---:|"]
    for r in knob_rows(seeds=seeds):
        out.append(f"| {r['knob']} | {r['task']} | {r['value_loss_ratio']:.2f} | "
                   f"{r['ev_median']:.2f} | {r['final']:.3f} | {r['grad_norm']:.2f} |")
    return "\n".join(out)


def results_json(results) -> str:
    """``results`` as compact JSON (docs/data/critic_comparison.json): scores to 6 digits,
    CPU seconds to 3; one line per run."""
    def run(r):
        out = {k: (round(v, 3) if k.startswith("cpu") and v is not None else v)
               for k, v in r.items()}
        out["score_frac"] = [round(x, 6) for x in r["score_frac"]]
        return json.dumps(out, separators=(",", ":"))

    lines = []
    for task, by_variant in results.items():
        variants = [json.dumps(label) + ": [\n" + ",\n".join(run(r) for r in runs) + "]"
                    for label, runs in by_variant.items()]
        lines.append(json.dumps(task) + ": {\n" + ",\n".join(variants) + "}")
    return "{\n" + ",\n".join(lines) + "}\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy critic",
        description="PPO with GAE at several lambdas, PPO with V = 0, GRPO and RLOO, side by "
                    "side: iterations, responses and CPU seconds to 90%% of the optimum.")
    parser.add_argument("--tasks", default="target,length",
                        help="comma-separated tasks (default target,length)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    parser.add_argument("--iterations", type=int, default=80, help="per run (default 80)")
    parser.add_argument("--json", metavar="PATH", help="write every run there")
    parser.add_argument("--figure", metavar="PATH", help="save the comparison figure (PNG)")
    parser.add_argument("--causes", action="store_true",
                        help="instead: the measurements of why the v1 critic was no better "
                             "than a constant (docs/training.md)")
    parser.add_argument("--criterion", action="store_true",
                        help="instead: value loss / (Var(R)/2) and median explained variance "
                             "over the first half of the default run of each of --tasks, "
                             "seeds 0 .. N-1")
    args = parser.parse_args(argv)
    if args.criterion:
        print("| task | seed | value loss / (Var(R)/2), first half | median EV, first half | "
              "final score / optimum |\n|---|---:|---:|---:|---:|")
        for r in criterion_rows(args.tasks.split(","), range(args.seeds)):
            print(f"| {r['task']} | {r['seed']} | {r['value_loss_ratio']:.2f} | "
                  f"{r['ev_median']:.2f} | {r['final']:.3f} |", flush=True)
        return 0
    if args.causes:
        print(causes())
        return 0
    tasks = [t for t in args.tasks.split(",") if t]
    if args.seeds < 1 or args.iterations < 1:
        parser.error("--seeds and --iterations must be >= 1")
    try:
        results = compare(tasks, range(args.seeds), iterations=args.iterations)
    except ValueError as err:
        parser.error(str(err))
    print(markdown_table(summary_rows(results)))
    if args.json:
        Path(args.json).write_text(results_json(results))
    if args.figure:
        from ..plotting.training import plot_critic_comparison

        plot_critic_comparison(results, path=args.figure)
    return 0
