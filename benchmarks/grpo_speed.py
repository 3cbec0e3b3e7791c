"""PPO with GAE against the critic-free algos: iterations and seconds to 90% of the optimum.

``python -m benchmarks.grpo_speed [--tasks length,target] [--algos ppo,grpo]
[--seeds 3] [--set field=value ...] [--json PATH]``

Each (task, algo, seed) is one ``train(PPOConfig(task=..., algo=..., seed=..., **set))``
without an output directory; the time to 90% is measured as in
``benchmarks/train_speed.py`` (:func:`~benchmarks.train_speed.time_to_90`: from the
call to ``train``, warm-up included, to the end of the first iteration whose rollout
mean score is >= 0.9 * optimum; wall-clock and CPU seconds of this process). Every
algo samples the same number of responses per iteration (``batch_size``; the
critic-free ones B / G prompts x G), so an iteration costs about the same.
One BLAS thread, as ``make demo`` (the script re-runs itself with
``OPENBLAS_NUM_THREADS=1``). The table printed is the one in docs/training.md,
section "Critic-free runs".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

from benchmarks.timing import rerun_with_one_blas_thread
from ppo_numpy.training import TASKS, PPOConfig
from ppo_numpy.training.config import ALGOS, field_kind

from .train_speed import time_to_90


def _parse_set(items):
    """``["beta=0.01", "group_size=4"]`` -> typed ``{field: value}``."""
    kinds = {f.name: field_kind(f) for f in dataclasses.fields(PPOConfig)}
    out = {}
    for item in items:
        name, _, text = item.partition("=")
        if name not in kinds:
            raise SystemExit(f"--set {item}: unknown field {name!r}")
        kind, optional = kinds[name]
        out[name] = (None if optional and text.lower() == "none"
                     else text.lower() in ("1", "true", "yes") if kind is bool else kind(text))
    return out


def compare(tasks, algos, seeds, overrides) -> list[dict]:
    rows = []
    for task in tasks:
        for algo in algos:
            runs = [time_to_90(PPOConfig(task=task, algo=algo, seed=s, **overrides))
                    for s in seeds]
            reached = [r for r in runs if r["iteration_90"] is not None]
            rows.append({"task": task, "algo": algo, "runs": runs,
                         "reached": len(reached), "seeds": len(runs),
                         **{k: _median_of(reached, k) for k in ("iteration_90", "wall_90",
                                                                 "cpu_90")},
                         "final": statistics.median(r["final"] for r in runs),
                         "final_kl": statistics.median(r["final_kl"] for r in runs)})
            print(_line(rows[-1]), flush=True)
    return rows


def _median_of(runs, key):
    return statistics.median(r[key] for r in runs) if runs else None


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def _line(r) -> str:
    per_seed = ", ".join(_fmt(x["iteration_90"], "d") for x in r["runs"])
    return (f"| {r['task']} | {r['algo']} | {r['reached']}/{r['seeds']} | {per_seed} | "
            f"{_fmt(r['iteration_90'], 'g')} | {_fmt(r['wall_90'], '.1f')} | "
            f"{_fmt(r['cpu_90'], '.1f')} | {r['final']:.3f} | {r['final_kl']:.2f} |")


HEADER = ("| task | algo | seeds at 90% | iteration at 90% (each run) | median iteration | "
          "median wall s | median CPU s | final (median) | KL to ref (final) |\n"
          "|---|---|---:|---|---:|---:|---:|---:|---:|")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.grpo_speed",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--algos", default=",".join(ALGOS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="PPOConfig fields for every run, e.g. beta=0.01 iterations=150")
    parser.add_argument("--json", metavar="PATH")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    code = rerun_with_one_blas_thread("benchmarks.grpo_speed", argv)
    if code is not None:
        return code
    overrides = _parse_set(args.set)
    print(f"OPENBLAS_NUM_THREADS=1, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; overrides {overrides or 'none'}")
    print(HEADER, flush=True)
    rows = compare(args.tasks.split(","), args.algos.split(","), range(args.seeds), overrides)
    if args.json:
        Path(args.json).write_text(json.dumps({"overrides": overrides, "rows": rows},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
