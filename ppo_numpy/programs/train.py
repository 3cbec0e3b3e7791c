"""``python -m ppo_numpy train``: train a toy policy by PPO, or resume a run.

Every field of :class:`~ppo_numpy.training.config.PPOConfig` is an option
(``--help`` lists them with their symbol and default). Exit status: 0 done,
2 bad arguments, refused output directory or a damaged file to resume from
(one line ``...: error: <file>: <what>``), 130 interrupted (the checkpoint
of the last finished iteration is kept; ``--resume DIR`` continues).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from .._npz import BadFileError
from ..training.config import (
    TASK_ALGO_DEFAULTS,
    TASK_DEFAULTS,
    PPOConfig,
    config_for_task,
    field_kind,
)
from ..training.run import RunError, resume, train
from ..training.tasks import TASKS, make_task


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
