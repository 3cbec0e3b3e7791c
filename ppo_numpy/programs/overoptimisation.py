"""``python -m ppo_numpy overoptimisation``: the over-optimisation experiment of
:mod:`ppo_numpy.reward.overoptimisation` from the command line (``docs/overoptimisation.md``).

Writes ``overoptimisation.csv``, ``overoptimisation.png`` and ``summary.json``. With
``--exercises --json PATH``, instead: the four runs of notebook 12's exercise solutions
(:data:`EXERCISES`), written to one JSON file (``docs/data/overoptimisation_exercises.json``,
which the notebook reads instead of running them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..models import BOS, FIRST_CONTENT, Vocab, sample
from ..reward.overoptimisation import (
    QUICK,
    OveroptimisationConfig,
    run_overoptimisation,
    summarise,
    summary_table,
    write_csv,
)
from ..training.run import ensure_writable
from ..training.tasks import make_task, response_lengths
from ._exercises import exercises_command, json_path, runs_json

#: the runs of notebook 12's exercise solutions, and of its figure's seeds 1 and 2: name ->
#: the fields replaced in the default configuration (200 iterations each, unless given).
#: ``random_half`` is also sampled (:func:`lengths_by_prompt`)
EXERCISES = {
    "more_data": {"n_pairs": 3000, "betas": (0.0,)},
    "random_half": {"random_frac": 0.5, "betas": (0.0,)},
    "seed1": {"seed": 1, "betas": (0.0, 0.1)},
    "small_betas": {"betas": (0.01, 0.02)},
    # the notebook's own run (every beta, 60 iterations) with seeds 1 and 2: its figure is
    # drawn over seeds 0, 1 and 2 (seed 0 runs in the notebook)
    "seed1_60": {"seed": 1, "iterations": 60},
    "seed2_60": {"seed": 2, "iterations": 60},
}
#: the command that writes docs/data/overoptimisation_exercises.json
_EXERCISES_PROGRAM = "python -m ppo_numpy overoptimisation --exercises"
EXERCISES_COMMAND = f"{_EXERCISES_PROGRAM} --json docs/data/overoptimisation_exercises.json"
#: responses sampled per prompt, and the generator's seed, for :func:`lengths_by_prompt`
PER_PROMPT, SAMPLE_SEED = 200, 11


def lengths_by_prompt(result, beta, per_prompt=PER_PROMPT, seed=SAMPLE_SEED) -> dict:
    """What the final policy of ``beta`` answers: ``per_prompt`` responses to each prompt
    ``[BOS, c]`` (c asks for length c - FIRST_CONTENT + 1), sampled with
    ``default_rng(seed)``; per prompt the fraction ending with EOS, the mean length, gold and
    proxy score, and one decoded response; and the fraction ending with EOS over all."""
    task = make_task(result.config.task)
    prompts = np.repeat(np.array([[BOS, c] for c in range(FIRST_CONTENT, task.vocab_size)]),
                        per_prompt, axis=0)
    r = sample(result.policies[beta], prompts, np.random.default_rng(seed),
               task.max_new_tokens)
    n, stopped = response_lengths(r.responses, r.mask)
    proxy = result.reward_model.score(prompts, r.responses, r.mask)
    gold = task.score(prompts, r.responses, r.mask)

    def per(values):
        return [float(v) for v in np.reshape(values, (-1, per_prompt)).mean(axis=1)]

    vocab = Vocab(task.vocab_size)
    return {"per_prompt": per_prompt, "seed": seed,
            "asks_for": list(range(1, task.n_content + 1)),
            "ends_with_eos": per(stopped), "length": per(n), "gold": per(gold),
            "proxy": per(proxy),
            "example": [vocab.decode(r.responses[i]) for i in range(0, len(prompts), per_prompt)],
            "ends_with_eos_all": float(np.mean(stopped))}


def run_exercises(iterations=None, callback=None, names=tuple(EXERCISES)) -> dict:
    """The runs of :data:`EXERCISES` (``iterations``: instead of the default 200, e.g. to
    check the first rows of a stored file): per run its fields, the reward model's held-out
    statistics, :func:`summarise` of its rows (means over the last 10 iterations), the rows,
    its CPU seconds, and for ``random_half`` :func:`lengths_by_prompt` of beta 0. ``names``:
    only these runs."""
    unknown = [n for n in names if n not in EXERCISES]
    if unknown:
        raise ValueError(f"names: unknown run {unknown[0]!r}, expected some of "
                         f"{', '.join(EXERCISES)}")
    runs = {}
    for name in names:
        fields = EXERCISES[name]
        changes = dict(fields) if iterations is None else {**fields, "iterations": iterations}
        config = OveroptimisationConfig().replace(**changes)
        start = time.process_time()
        result = run_overoptimisation(config, callback=callback)
        run = {"config": {k: list(v) if isinstance(v, tuple) else v
                          for k, v in changes.items()},
               "iterations": config.iterations,
               "heldout": result.heldout,
               "summary": {str(b): s for b, s in summarise(result.rows).items()},
               "rows": result.rows}
        if name == "random_half":
            run["lengths_by_prompt"] = lengths_by_prompt(result, 0.0)
        run["cpu_seconds"] = round(time.process_time() - start, 1)
        runs[name] = run
    return runs


def exercises_json(runs, command=EXERCISES_COMMAND) -> str:
    """``runs`` (:func:`run_exercises`) as JSON: the command, this machine's CPU kind (the
    last bits of the numbers depend on it), then the runs, one line per row
    (:func:`~ppo_numpy.programs._exercises.runs_json`). Floats load back exactly."""
    return runs_json(runs, command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy overoptimisation",
        description="Fit a reward model to noisy preference pairs, then train PPO against it "
                    "for several betas, recording the proxy (learned) and the gold (task "
                    "rule) score and the KL to the reference. Writes overoptimisation.csv, "
                    "overoptimisation.png and summary.json to --out.")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="output directory (default: runs/overoptimisation)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (seconds) to check the pipeline, not the effect")
    parser.add_argument("--exercises", action="store_true",
                        help="instead: the four runs of notebook 12's exercise solutions "
                             "(200 iterations each) and its own run with seeds 1 and 2 (60 "
                             "iterations each), or --iterations for all; about 70 CPU "
                             "seconds, "
                             "written to --json; no other setting may be given")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="with --exercises: the JSON file to write (e.g. "
                             "docs/data/overoptimisation_exercises.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    for f in dataclasses.fields(OveroptimisationConfig):
        flag = "--" + f.name.replace("_", "-")
        help_ = f"{f.metadata['help']} (default: {f.default})"
        if f.name == "betas":
            parser.add_argument(flag, dest=f.name, default=None, metavar="B1,B2,...",
                                type=lambda s: tuple(float(v) for v in s.split(",")),
                                help=f"{f.metadata['help']} (default: "
                                     f"{','.join(map(str, f.default))})")
        else:
            parser.add_argument(flag, dest=f.name, default=None, type=type(f.default),
                                choices=f.metadata.get("choices"), help=help_)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(OveroptimisationConfig)
             if getattr(args, f.name) is not None}
    if args.exercises or args.json is not None:
        return _exercises(parser, args, given)
    out = Path("runs/overoptimisation" if args.out is None else args.out)
    try:
        config = (QUICK if args.quick else OveroptimisationConfig()).replace(**given)
        ensure_writable(out)
    except (TypeError, ValueError) as err:  # a bad option, or RunError (a ValueError): --out
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2

    def progress(row):
        if not args.quiet and (row["iteration"] % 25 == 0 or row["iteration"] == 1):
            print(f"beta {row['beta']:g}  iter {row['iteration']:4d}  proxy "
                  f"{row['proxy_score']:.3f}  gold {row['gold_score']:.3f}  "
                  f"KL {row['kl_ref']:.2f}", flush=True)

    print(f"task {config.task!r}, seed {config.seed}: fitting the reward model on "
          f"{config.n_pairs} pairs, then PPO for betas {', '.join(map(str, config.betas))}")
    result = run_overoptimisation(config, callback=progress)
    last = min(10, config.iterations)
    write_csv(result.rows, out / "overoptimisation.csv")
    summary = {"config": dataclasses.asdict(config), "heldout": result.heldout,
               "final": {str(b): s for b, s in result.summary(last).items()}, "last": last}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    from ..plotting.overoptimisation import plot_overoptimisation

    plot_overoptimisation(result.rows, title=f"{config.task}, seed {config.seed}",
                          path=out / "overoptimisation.png")
    print(summary_table(result, last))
    print(f"{result.seconds:.1f} s; outputs in {out}/: overoptimisation.csv, "
          "overoptimisation.png, summary.json")
    return 0


def _exercises(parser, args, given) -> int:
    """``--exercises --json PATH [--iterations N] [--quiet]``."""
    if not args.exercises:
        parser.error("--json: only with --exercises (the normal run writes to --out)")
    other = [f"--{k.replace('_', '-')}" for k in given if k != "iterations"]
    other += [flag for flag, on in (("--quick", args.quick), ("--out", args.out is not None))
              if on]
    if other:
        parser.error(f"--exercises: runs the fixed runs of notebook 12's solutions; only "
                     f"--iterations, --json and --quiet go with it, got {', '.join(other)}")
    path = json_path(parser, args.json)
    iterations = given.get("iterations")
    try:
        if iterations is not None:  # checked as the configuration checks it
            OveroptimisationConfig(iterations=iterations)
    except ValueError as err:
        parser.error(str(err))
    command = exercises_command(_EXERCISES_PROGRAM, iterations, args.json)

    def progress(row):
        if not args.quiet and (row["iteration"] % 50 == 0 or row["iteration"] == 1):
            print(f"  beta {row['beta']:g}  iter {row['iteration']:4d}  gold "
                  f"{row['gold_score']:.3f}", flush=True)

    start = time.process_time()
    runs = run_exercises(iterations, callback=progress)
    path.write_text(exercises_json(runs, command))
    for name, run in runs.items():
        finals = ", ".join(f"beta {b}: gold {s['gold']:.3f}, KL {s['kl_ref']:.2f}"
                           for b, s in run["summary"].items())
        print(f"{name} {run['config']}: held-out gold accuracy "
              f"{run['heldout']['gold_accuracy']:.3f}; {finals} ({run['cpu_seconds']} CPU s)")
    print(f"{time.process_time() - start:.1f} CPU s; wrote {path}")
    return 0


def __getattr__(name):
    # why: the experiment and this command were one module, ppo_numpy.overoptimisation, before
    # the programs moved here; its other names are reached through the old path too
    from ..reward import overoptimisation

    try:
        return getattr(overoptimisation, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


if __name__ == "__main__":
    sys.exit(main())
