"""The default ``add`` run, as its command line runs it: accuracies, wall and CPU time.

``python -m benchmarks.add_training [--seeds N] [--algo ALGO] [--set FIELD=VALUE ...]
[--blas-threads {1,default}]``

For each seed, ``python -m ppo_numpy train --task add --seed S`` runs in a subprocess
(the task's defaults, ``TASK_DEFAULTS["add"]``: a transformer, 1500 warm-up steps, PPO),
with ``--algo ALGO`` and one ``--field-name VALUE`` flag per ``--set`` when given.
Reported: the held-out greedy exact-match accuracy of the warmed-up reference (the frozen
reference of the run's checkpoint), after the last iteration, and the
mean of the last 10 iterations; the wall-clock and CPU seconds of the whole command; and
the first iteration whose held-out accuracy is >= 0.9, with the elapsed seconds the
progress line printed for it (warm-up included).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ppo_numpy.training.config import ALGOS
from ppo_numpy.training.metrics import read_metrics
from ppo_numpy.training.run import load_state

ROOT = Path(__file__).resolve().parents[1]


def command(seed: int, out: Path, algo: str | None = None, overrides=()) -> list[str]:
    """The ``train`` command line of one run; ``overrides`` are ``FIELD=VALUE`` strings."""
    flags = ["--algo", algo] if algo else []
    for item in overrides:
        name, _, value = item.partition("=")
        flags += ["--" + name.replace("_", "-"), value]
    return [sys.executable, "-m", "ppo_numpy", "train", "--task", "add", "--seed", str(seed),
            *flags, "--out", str(out), "--no-plot"]


def run_seed(seed: int, out: Path, algo: str | None = None, overrides=()) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command(seed, out, algo, overrides), capture_output=True, text=True,
                          cwd=ROOT, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    progress = [line for line in proc.stdout.splitlines() if line.startswith("iter ")]
    acc = read_metrics(out / "metrics.csv")["heldout_accuracy"]
    hit = np.flatnonzero(acc >= 0.9)
    # the frozen reference saved in the run's checkpoint is the warmed-up policy
    state = load_state(out / "checkpoint.npz")
    return {"seed": seed, "warmup": state.task.heldout_accuracy(state.reference),
            "final": float(acc[-1]), "last10": float(acc[-10:].mean()), "wall": wall,
            "cpu": cpu, "iter90": int(hit[0]) + 1 if hit.size else None,
            "wall90": float(re.findall(r"([\d.]+) s$", progress[hit[0]])[0])
            if hit.size else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.add_training",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--algo", choices=ALGOS, default=None,
                        help="passed to train (default: the task's, ppo)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="passed to train as --field-name VALUE, e.g. lr=1e-3")
    parser.add_argument("--blas-threads", choices=("1", "default"), default="default",
                        help="OPENBLAS_NUM_THREADS of the runs (default: the environment's)")
    args = parser.parse_args(argv)
    if args.blas_threads == "1":
        os.environ["OPENBLAS_NUM_THREADS"] = "1"  # read by the subprocesses' NumPy
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    print("command:", " ".join(command(0, Path("DIR"), args.algo, args.set)[1:]), flush=True)
    print("| seed | warm-up accuracy | final | mean of last 10 | iteration at 90% | "
          "s to 90% | wall s | CPU s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            r = run_seed(seed, Path(tmp) / f"seed{seed}", args.algo, args.set)
            print(f"| {r['seed']} | {r['warmup']:.3f} | {r['final']:.3f} | {r['last10']:.3f} | "
                  f"{r['iter90'] or '-'} | {r['wall90'] if r['wall90'] is not None else '-'} | "
                  f"{r['wall']:.1f} | {r['cpu']:.1f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
