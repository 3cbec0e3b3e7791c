"""``python -m ppo_numpy accumulation``: gradient accumulation against the one-pass run.

The default training run (or ``--task``, ``--iterations``) in one pass per minibatch, and the
same run with each minibatch cut into ``--micro-batches`` K micro-batches whose gradients
are added, each normalised ``global`` (the minibatch's counts) or ``micro-batch-mean`` (its
own token mean / K: the 2024 gradient-accumulation bug), from one warm-up, in lockstep
(:func:`ppo_numpy.training.compare_accumulation.compare_accumulation`). Prints one row per run: how
far its parameters are from the one-pass run's after the first and the last iteration
(relative to the largest entry of each array, and in units in the last place of it), how far
its logged numbers are, its final score and CPU seconds: the table of docs/training.md,
"Gradient accumulation". Run with one BLAS thread (``OPENBLAS_NUM_THREADS=1``).
"""

from __future__ import annotations

import argparse

from ..training.compare_accumulation import compare_accumulation
from ..training.config import config_for_task
from ..training.tasks import TASKS


def table(results: dict) -> str:
    """The markdown table of :func:`compare_accumulation`'s results."""
    lines = ["| run | parameters, iteration 1 | parameters, last | ulps, last | logged numbers "
             "| final score | CPU s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, r in results.items():
        lines.append(f"| {label} | {r['drift'][0]:.2g} | {r['drift'][-1]:.2g} | "
                     f"{r['param_ulps']:.3g} | {r['row_rel']:.2g} | {r['final_score']:.3f} | "
                     f"{r['cpu_seconds']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy accumulation",
        description="Gradient accumulation against the one-pass run: the default training "
                    "run with each minibatch in K micro-batches, normalised globally or by "
                    "each micro-batch's own mean, from one warm-up.")
    parser.add_argument("--task", default="length", choices=tuple(TASKS),
                        help="toy task (default length)")
    parser.add_argument("--iterations", type=int, default=80, help="per run (default 80)")
    parser.add_argument("--micro-batches", type=int, default=4,
                        help="K, must divide the minibatch's rows (default 4)")
    args = parser.parse_args(argv)
    try:
        config = config_for_task(task=args.task, iterations=args.iterations,
                                 micro_batches=args.micro_batches)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    print(table(compare_accumulation(config, args.micro_batches)))
    return 0
