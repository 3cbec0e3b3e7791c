"""Speed of the toy training loop: seconds per PPO iteration and tokens per second.

``python -m benchmarks.training [--json PATH]`` prints the table;
:func:`markdown` gives the section of docs/benchmarks.md (with the demo's time
to 90 % of the optimum, measured by ``benchmarks/train_speed.py``).
``python -m benchmarks`` runs both in a child process with
``OPENBLAS_NUM_THREADS=1``, the environment ``make demo`` gives the loop.

The real loop runs (``ppo_numpy.training.loop.ppo_iteration`` from a warmed-up
``new_run``); its phases are timed by wrapping, for the duration of the
measurement only, the functions the loop calls:

* rollout (step 1): ``sample``, response tokens sampled per second;
* update (step 4): ``ppo_loss_and_grads``, ``global_norm``, ``clip_grad_norm``
  and ``Adam.step``; tokens per second = response tokens of every minibatch of
  every epoch (K times the batch's tokens) per second of update;
* the rest (steps 2, 3, 5: reference log-probs, scores, KL-shaped rewards,
  GAE, whitening, KL controller, metrics) is the iteration minus both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace

SIZES = (1, 4, 16)  # multiples of the default batch size


class _PhaseTimer:
    """Wraps callables so that their time and the tokens they see add up per phase."""

    def __init__(self):
        self.seconds = {"rollout": 0.0, "update": 0.0}
        self.tokens = {"rollout": 0, "update": 0}

    def wrap(self, fn, phase, count=None):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            self.seconds[phase] += time.perf_counter() - start
            if count is not None:
                self.tokens[phase] += int(count(args, out))
            return out

        return timed


def iteration_speed(batch_size: int, iterations: int, seed: int = 0) -> dict:
    """Median seconds per iteration and per phase over ``iterations`` timed iterations."""
    from ppo_numpy.training import PPOConfig
    from ppo_numpy.training import loop as L

    config = replace(PPOConfig(seed=seed), batch_size=batch_size)
    state = L.new_run(config)
    names = ("sample", "ppo_loss_and_grads", "global_norm", "clip_grad_norm")
    saved = {name: getattr(L, name) for name in names}
    saved_step = state.optimizer.step
    rows = []
    try:
        for _ in range(iterations):
            timer = _PhaseTimer()
            L.sample = timer.wrap(saved["sample"], "rollout", lambda a, out: out.mask.sum())
            L.ppo_loss_and_grads = timer.wrap(saved["ppo_loss_and_grads"], "update",
                                              lambda a, out: a[1]["mask"].sum())
            L.global_norm = timer.wrap(saved["global_norm"], "update")
            L.clip_grad_norm = timer.wrap(saved["clip_grad_norm"], "update")
            state.optimizer.step = timer.wrap(saved_step, "update")
            start = time.perf_counter()
            L.ppo_iteration(state)
            total = time.perf_counter() - start
            rows.append({"total": total, **{f"{k}_s": v for k, v in timer.seconds.items()},
                         **{f"{k}_tokens": v for k, v in timer.tokens.items()}})
    finally:
        for name, fn in saved.items():
            setattr(L, name, fn)
        state.optimizer.step = saved_step

    def med(key):
        return statistics.median(r[key] for r in rows)

    rollout_tps = statistics.median(r["rollout_tokens"] / r["rollout_s"] for r in rows)
    update_tps = statistics.median(r["update_tokens"] / r["update_s"] for r in rows)
    return {"batch_size": batch_size, "iterations": iterations, "seconds": med("total"),
            "rollout_s": med("rollout_s"), "update_s": med("update_s"),
            "other_s": statistics.median(r["total"] - r["rollout_s"] - r["update_s"]
                                         for r in rows),
            "rollout_tokens": med("rollout_tokens"), "update_tokens": med("update_tokens"),
            "rollout_tps": rollout_tps, "update_tps": update_tps}


def speed_table(iterations=(10, 5, 3), progress=None) -> list[dict]:
    from ppo_numpy.training import PPOConfig

    base = PPOConfig().batch_size
    out = []
    for factor, n in zip(SIZES, iterations):
        row = iteration_speed(base * factor, n)
        row["factor"] = factor
        out.append(row)
        if progress is not None:
            progress(row)
    return out


def markdown(rows, demo=None) -> list[str]:
    from ppo_numpy.training import PPOConfig

    c = PPOConfig()
    lines = [
        f"The default run of `make demo` (`PPOConfig()`: task `{c.task}`, {c.model} policy, "
        f"B = {c.batch_size}, K = {c.epochs} epochs x {c.minibatches} minibatches), timed "
        "from a warmed-up start (`benchmarks/training.py`): median over the timed "
        "iterations.",
        "",
        "| batch | B | iterations timed | s / iteration | rollout s | update s | other s "
        "| rollout tokens / s | update tokens / s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        label = "default" if r["factor"] == 1 else f"{r['factor']}x"
        lines.append(
            f"| {label} | {r['batch_size']} | {r['iterations']} | {r['seconds']:.3f} "
            f"| {r['rollout_s']:.3f} | {r['update_s']:.3f} | {r['other_s']:.3f} "
            f"| {r['rollout_tps']:,.0f} | {r['update_tps']:,.0f} |")
    lines += [
        "",
        "Rollout tokens are the response tokens sampled; update tokens count each response "
        "token once per epoch (forward and backward). 'other' is reference log-probs, "
        "scores, KL-shaped rewards, GAE, whitening and bookkeeping.",
    ]
    if demo is not None:
        runs = demo["runs"]
        lines += [
            "",
            f"Time for `make demo` to reach 90 % of the optimal score "
            f"(`benchmarks/train_speed.py`, {len(runs)} seeds, measured from the call to "
            "`train`, warm-up and file writing included):",
            "",
            "| seed | iteration at 90 % | wall s to 90 % | CPU s to 90 % | wall s, whole run |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in runs:
            it = "-" if r["iteration_90"] is None else str(r["iteration_90"])
            wall = "-" if r["wall_90"] is None else f"{r['wall_90']:.1f}"
            cpu = "-" if r["cpu_90"] is None else f"{r['cpu_90']:.1f}"
            lines.append(f"| {r['seed']} | {it} | {wall} | {cpu} | {r['wall_total']:.1f} |")
        med_wall, med_cpu = demo["median_wall_90"], demo["median_cpu_90"]
        lines += ["", f"Median: {'-' if med_wall is None else f'{med_wall:.1f}'} s wall, "
                      f"{'-' if med_cpu is None else f'{med_cpu:.1f}'} s CPU; "
                      f"{demo['reached']} of {len(runs)} seeds reached 90 %."]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.training",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON to PATH")
    args = parser.parse_args(argv)
    rows = speed_table(progress=lambda r: print(
        f"training B={r['batch_size']}: {r['seconds']:.3f} s / iteration", file=sys.stderr))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    print("\n".join(markdown(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
