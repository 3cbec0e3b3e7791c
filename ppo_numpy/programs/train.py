"""``python -m ppo_numpy train``: train a toy policy by PPO, or resume a run.

Every field of :class:`~ppo_numpy.training.config.PPOConfig` is an option
(``--help`` lists them with their symbol and default). Exit status: 0 done,
2 bad arguments, refused output directory or a damaged file to resume from
(one line ``...: error: <file>: <what>``), 130 interrupted (the checkpoint
of the last finished iteration is kept; ``--resume DIR`` continues).

With ``--exercises --json PATH``, instead: the runs of notebook 10's exercise solutions,
and of its figures with seeds 1 and 2 (:data:`EXERCISES`), written to one JSON file
(``docs/data/training_exercises.json``, which the notebook reads instead of running them).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from .._npz import BadFileError
from .._renames import CONFIG_FIELDS, RenamedOption
from ..training.config import (
    TASK_ALGO_DEFAULTS,
    TASK_DEFAULTS,
    PPOConfig,
    config_for_task,
    field_kind,
)
from ..training.run import SWEEP_CONFIG, RunError, beta_sweep, resume, train
from ..training.tasks import TASKS, make_task
from ._exercises import exercises_command, json_path, runs_json

#: the runs of notebook 10's exercise solutions (and, below, of its figures' other seeds):
#: name -> the fields replaced in
#: :data:`~ppo_numpy.training.run.SWEEP_CONFIG` (40 iterations each). ``betas``: one
#: :func:`~ppo_numpy.training.run.beta_sweep` over them (one shared warm-up)
EXERCISES = {
    "sweep": {"betas": (0.02, 0.1, 0.2)},
    "adaptive": {"kl_controller": "adaptive", "kl_target": 4.0},
    "epochs_16": {"epochs": 16},
}
#: the runs notebook 10's figures compare, again with seeds 1 and 2 (seed 0 runs in the
#: notebook itself): each comparison drawn over three seeds, their mean and spread
SEED_RUNS = {"sweep": {"betas": (0.0, 0.05, 0.5)}, "lr_x10": {"lr": 3e-2},
             "c_v_0": {"c_v": 0.0}, "value_hidden_64": {"value_hidden": 64}}
EXERCISES.update({f"{name}_seed{seed}": {**fields, "seed": seed}
                  for seed in (1, 2) for name, fields in SEED_RUNS.items()})
_EXERCISES_PROGRAM = "python -m ppo_numpy train --exercises"
#: the command that writes docs/data/training_exercises.json
EXERCISES_COMMAND = f"{_EXERCISES_PROGRAM} --json docs/data/training_exercises.json"


def run_exercises(iterations=None, callback=None, names=tuple(EXERCISES)) -> dict:
    """The runs of :data:`EXERCISES` (``iterations``: instead of SWEEP_CONFIG's 40, e.g. to
    check the first rows of a stored file): per run its fields, its iterations, every row
    (for ``sweep`` the rows of each beta in turn, told apart by their ``beta``) and its CPU
    seconds (warm-up included). ``names``: only these runs."""
    unknown = [n for n in names if n not in EXERCISES]
    if unknown:
        raise ValueError(f"names: unknown run {unknown[0]!r}, expected some of "
                         f"{', '.join(EXERCISES)}")
    base = SWEEP_CONFIG if iterations is None else SWEEP_CONFIG.replace(iterations=iterations)
    runs = {}
    for name in names:
        fields = dict(EXERCISES[name])
        start = time.process_time()
        if "betas" in fields:
            others = {k: v for k, v in fields.items() if k != "betas"}
            histories = beta_sweep(fields["betas"], base.replace(**others), callback=callback)
            rows = [row for history in histories.values() for row in history]
        else:
            rows = train(base.replace(**fields), callback=callback, plot=False)
        runs[name] = {"config": {k: list(v) if isinstance(v, tuple) else v
                                 for k, v in fields.items()},
                      "iterations": base.iterations,
                      "cpu_seconds": round(time.process_time() - start, 1),
                      "rows": rows}
    return runs


def exercises_json(runs, command=EXERCISES_COMMAND) -> str:
    """``runs`` (:func:`run_exercises`) as JSON: the command, this machine's CPU kind (the
    last bits of the numbers depend on it), then the runs, one line per row
    (:func:`~ppo_numpy.programs._exercises.runs_json`). Floats load back exactly."""
    return runs_json(runs, command)


def _parse_optional(kind):
    def parse(text):
        if text.lower() == "none":
            return None
        return kind(text)

    parse.__name__ = f"{kind.__name__} or none"
    return parse


def build_parser() -> argparse.ArgumentParser:
    tasks = "\n".join(f"  {name:<8} {cls.summary}" for name, cls in TASKS.items())
    tasks += "".join(f"\n\ndefaults of task {name} (options override them): "
                     + ", ".join(f"{k}={v}" for k, v in fields.items())
                     for name, fields in TASK_DEFAULTS.items())
    tasks += "".join(f"\n\ndefaults of task {name} with --algo {algo}: "
                     + ", ".join(f"{k}={v}" for k, v in fields.items())
                     for (name, algo), fields in TASK_ALGO_DEFAULTS.items())
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy train",
        description="Train a toy policy by PPO on a toy task: warm-up on the task's prior "
                    "(the frozen reference), then PPO iterations. Writes metrics.csv, "
                    "checkpoint.npz and dashboard.png to --out.",
        epilog=f"tasks:\n{tasks}\n\nexit status: 0 done, 2 bad arguments, 130 interrupted "
               "(resume with --resume DIR)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run = parser.add_argument_group("output")
    run.add_argument("--out", metavar="DIR", help="output directory "
                     "(default: runs/TASK-seedS)")
    run.add_argument("--resume", metavar="DIR", help="continue the run saved in DIR (its "
                     "configuration is used; --iterations may extend it; any other option "
                     "must match the checkpoint)")
    run.add_argument("--force", action="store_true",
                     help="overwrite a previous run in --out")
    run.add_argument("--no-plot", action="store_true", help="do not write dashboard.png")
    run.add_argument("--quiet", action="store_true", help="no progress line per iteration")
    run.add_argument("--exercises", action="store_true",
                     help="instead: the runs of notebook 10's exercise solutions (a beta "
                          "sweep over 0.02, 0.1, 0.2; the adaptive controller with KL target "
                          "4; 16 epochs) and of its figures with seeds 1 and 2 (a beta sweep "
                          "over 0, 0.05, 0.5; lr x 10; c_V = 0; value_hidden 64); 40 "
                          "iterations each, or --iterations; about 60 CPU seconds), written "
                          "to --json; no other option may be given")
    run.add_argument("--json", metavar="PATH", default=None,
                     help="with --exercises: the JSON file to write (e.g. "
                          "docs/data/training_exercises.json)")
    hyper = parser.add_argument_group("configuration (PPOConfig fields; symbol, default)")
    for f in dataclasses.fields(PPOConfig):
        kind, optional = field_kind(f)
        symbol = f.metadata["symbol"]
        help_ = f"{f.metadata['help']}{f' [{symbol}]' if symbol else ''} (default: {f.default})"
        flag = "--" + f.name.replace("_", "-")
        flags = (flag, "--policy") if f.name == "model" else (flag,)
        # not set unless given (SUPPRESS), so that "none" is an option the user gave (a
        # checkpoint checks the given ones)
        if kind is bool:
            hyper.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=help_)
        else:
            hyper.add_argument(*flags, dest=f.name, default=argparse.SUPPRESS,
                               type=_parse_optional(kind) if optional else kind,
                               choices=f.metadata.get("choices"), help=help_,
                               metavar=f.name.upper() if not f.metadata.get("choices") else None)
    # the old names of renamed fields (--eps, --grpo-eps): the same value, with a warning
    kinds = {f.name: field_kind(f)[0] for f in dataclasses.fields(PPOConfig)}
    for old, new in CONFIG_FIELDS.items():
        new_flag = "--" + new.replace("_", "-")
        hyper.add_argument("--" + old.replace("_", "-"), dest=new, default=argparse.SUPPRESS,
                           type=kinds[new], action=RenamedOption, new_option=new_flag,
                           metavar=new.upper(), help=f"deprecated: {new_flag}")
    return parser


def _progress(quiet):
    start = time.perf_counter()

    def report(row):
        if quiet:
            return
        print(f"iter {row['iteration']:4d}  score {row['score']:.3f} "
              f"({100 * row['score_frac']:5.1f}%)  KL {row['kl_ref']:7.3f}  "
              f"clipfrac {row['clipfrac']:.3f}  greedy acc {row['heldout_accuracy']:.3f}  "
              f"{time.perf_counter() - start:6.1f} s",
              flush=True)

    return report


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(PPOConfig)
             if hasattr(args, f.name)}

    if args.exercises or args.json is not None:
        return _exercises(parser, args, given)

    def fail(message):
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 2

    try:
        if args.resume is not None:
            if args.out is not None or args.force:
                return fail("--resume DIR continues the run in DIR: do not give --out or "
                            "--force with it")
            out = Path(args.resume)
            print(f"resuming the run in {out}")
            history = resume(out, given, callback=_progress(args.quiet),
                                    plot=not args.no_plot)
        else:
            try:
                config = config_for_task(**given)
            except (TypeError, ValueError) as err:
                return fail(str(err))
            out = Path(args.out or f"runs/{config.task}-seed{config.seed}")
            task = make_task(config.task)
            print(f"task {config.task!r}: optimum {task.optimum:g}, random policy "
                  f"{float(task.random_score()):.3f}; warming up the reference on the prior "
                  f"({config.warmup_steps} steps)")
            history = train(config, out, callback=_progress(args.quiet),
                                   force=args.force, plot=not args.no_plot)
    except (RunError, BadFileError) as err:
        return fail(str(err))
    except KeyboardInterrupt:
        if (out / "checkpoint.npz").exists():
            print(f"\ninterrupted; the checkpoint of the last finished iteration is in {out}."
                  f"\ncontinue with: python -m ppo_numpy train --resume {out}", file=sys.stderr)
        else:
            print("\ninterrupted during the warm-up; nothing to resume", file=sys.stderr)
        return 130
    if history:
        last = history[-1]
        print(f"done: {last['iteration']} iterations, score {last['score']:.3f} "
              f"({100 * last['score_frac']:.1f}% of the optimum), KL to reference "
              f"{last['kl_ref']:.3f}")
    print(f"outputs in {out}/:")
    for name in ("metrics.csv", "checkpoint.npz", "config.json", "dashboard.png"):
        if (out / name).exists():
            print(f"  {out / name}")
    return 0


def _exercises(parser, args, given) -> int:
    """``--exercises --json PATH [--iterations N] [--quiet]``."""
    if not args.exercises:
        parser.error("--json: only with --exercises (a training run writes to --out)")
    other = [f"--{k.replace('_', '-')}" for k in given if k != "iterations"]
    other += [flag for flag, on in (("--force", args.force), ("--no-plot", args.no_plot),
                                    ("--out", args.out is not None),
                                    ("--resume", args.resume is not None)) if on]
    if other:
        parser.error(f"--exercises: runs the fixed runs of notebook 10's solutions; only "
                     f"--iterations, --json and --quiet go with it, got {', '.join(sorted(other))}")
    path = json_path(parser, args.json)
    iterations = given.get("iterations")
    if iterations is not None and iterations < 1:
        parser.error(f"iterations: must be >= 1 with --exercises, got {iterations}")
    command = exercises_command(_EXERCISES_PROGRAM, iterations, args.json)

    def progress(row):
        if not args.quiet and (row["iteration"] % 10 == 0 or row["iteration"] == 1):
            print(f"  beta {row['beta']:.4f}  iter {row['iteration']:3d}  score "
                  f"{row['score']:.3f}  KL {row['kl_ref']:.2f}", flush=True)

    start = time.process_time()
    runs = run_exercises(iterations, callback=progress)
    path.write_text(exercises_json(runs, command))
    for name, run in runs.items():
        last = [r for r in run["rows"] if r["iteration"] == run["iterations"]]
        finals = ", ".join(f"beta {r['beta']:.4g}: score {r['score']:.3f}, KL {r['kl_ref']:.2f}"
                           for r in last)
        print(f"{name} {run['config']}: at iteration {run['iterations']} {finals} "
              f"({run['cpu_seconds']} CPU s)")
    print(f"{time.process_time() - start:.1f} CPU s; wrote {path}")
    return 0
