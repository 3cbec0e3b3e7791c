"""Time to 90% of the optimum for the default ``make demo`` run, and every task's scores.

``python -m benchmarks.train_speed [--seeds N] [--task-seeds M] [--json PATH]
[--blas-threads {1,default}]``

Measured with one BLAS thread, as ``make demo`` runs (``OPENBLAS_NUM_THREADS=1``;
the script re-runs itself in a subprocess with that setting);
``--blas-threads default`` keeps the environment as it is.

1. The demo's configuration (``PPOConfig()``, the ``length`` task) is trained
   with ``train(config, out_dir)``, as ``make demo`` does (metrics.csv and a
   checkpoint written every iteration, dashboard at the end), once per seed.
   Time to 90% is measured from the call to ``train`` (warm-up included) to the
   end of the first iteration whose rollout mean score is >= 0.9 * optimum:
   wall-clock seconds and CPU seconds of this process (``time.process_time``,
   which a busy shared machine inflates less). Medians over the seeds.
2. Every task with the default configuration otherwise: the random policy's
   exact expected score, the score of the first rollout (the warmed-up
   reference), and the mean score of the last 10 iterations, medians over seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import rerun_with_one_blas_thread
from ppo_numpy.training import TASKS, PPOConfig, make_task, train
from ppo_numpy.training.config import config_for_task


def time_to_90(config: PPOConfig, out_dir=None) -> dict:
    """Train ``config``; return when 90% was first reached and the final score."""
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    reached = {}

    def callback(row):
        if not reached and row["score_frac"] >= 0.9:
            reached.update(iteration=row["iteration"],
                           wall=time.perf_counter() - start_wall,
                           cpu=time.process_time() - start_cpu)

    history = train(config, out_dir, callback=callback)
    return {
        "seed": config.seed,
        "iteration_90": reached.get("iteration"),
        "wall_90": reached.get("wall"),
        "cpu_90": reached.get("cpu"),
        "wall_total": time.perf_counter() - start_wall,
        "cpu_total": time.process_time() - start_cpu,
        "initial": history[0]["score"],
        "final": statistics.fmean(r["score"] for r in history[-10:]),
        "final_kl": statistics.fmean(r["kl_ref"] for r in history[-10:]),
    }


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def demo_speed(seeds) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            runs.append(time_to_90(PPOConfig(seed=seed), Path(tmp) / f"seed{seed}"))
    return {"runs": runs,
            "median_wall_90": _median(r["wall_90"] for r in runs),
            "median_cpu_90": _median(r["cpu_90"] for r in runs),
            "median_iteration_90": _median(r["iteration_90"] for r in runs),
            "reached": sum(r["iteration_90"] is not None for r in runs)}


def task_scores(seeds) -> dict:
    out = {}
    for name in TASKS:
        # a task's own defaults (TASK_DEFAULTS: add trains a transformer), as the CLI does
        runs = [time_to_90(config_for_task(task=name, seed=s)) for s in seeds]
        out[name] = {"random": float(make_task(name).random_score()),
                     "initial": _median(r["initial"] for r in runs),
                     "final": _median(r["final"] for r in runs),
                     "final_kl": _median(r["final_kl"] for r in runs),
                     "cpu_total": _median(r["cpu_total"] for r in runs)}
    return out


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_speed",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the demo run (default 5)")
    parser.add_argument("--task-seeds", type=int, default=3,
                        help="seeds per task for the score table (default 3; 0 skips it)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--blas-threads", choices=("1", "default"), default="1",
                        help="OPENBLAS_NUM_THREADS for the measurement (default 1, as make demo)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.blas_threads == "1":
        code = rerun_with_one_blas_thread("benchmarks.train_speed", argv)
        if code is not None:
            return code
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    config = PPOConfig()
    print(f"default demo run: task {config.task!r}, {config.iterations} iterations, "
          f"seeds 0..{args.seeds - 1}")
    demo = demo_speed(range(args.seeds))
    print("| seed | iteration at 90% | wall s to 90% | CPU s to 90% | wall s total | final |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in demo["runs"]:
        print(f"| {r['seed']} | {_fmt(r['iteration_90'], 'd')} | {_fmt(r['wall_90'])} | "
              f"{_fmt(r['cpu_90'])} | {r['wall_total']:.1f} | {r['final']:.3f} |")
    print(f"median time to 90%: {_fmt(demo['median_wall_90'])} s wall, "
          f"{_fmt(demo['median_cpu_90'])} s CPU (iteration {_fmt(demo['median_iteration_90'], 'g')}"
          f"); {demo['reached']}/{args.seeds} seeds reached 90%")
    result = {"demo": demo}
    if args.task_seeds > 0:
        tasks = task_scores(range(args.task_seeds))
        result["tasks"] = tasks
        print(f"\nevery task, default configuration, median over {args.task_seeds} seeds "
              "(final = mean of the last 10 iterations):")
        print("| task | random policy | after warm-up | final | KL to ref (final) | CPU s |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, t in tasks.items():
            print(f"| {name} | {t['random']:.3f} | {t['initial']:.3f} | {t['final']:.3f} | "
                  f"{t['final_kl']:.2f} | {t['cpu_total']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
