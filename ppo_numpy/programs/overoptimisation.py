"""``python -m ppo_numpy overoptimisation``: the over-optimisation experiment of
:mod:`ppo_numpy.reward.overoptimisation` from the command line (``docs/overoptimisation.md``).

Writes ``overoptimisation.csv``, ``overoptimisation.png`` and ``summary.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from ..reward.overoptimisation import (
    QUICK,
    OveroptimisationConfig,
    run_overoptimisation,
    summary_table,
    write_csv,
)
from ..training.run import ensure_writable


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy overoptimisation",
        description="Fit a reward model to noisy preference pairs, then train PPO against it "
                    "for several betas, recording the proxy (learned) and the gold (task "
                    "rule) score and the KL to the reference. Writes overoptimisation.csv, "
                    "overoptimisation.png and summary.json to --out.")
    parser.add_argument("--out", metavar="DIR", default="runs/overoptimisation",
                        help="output directory (default: runs/overoptimisation)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (seconds) to check the pipeline, not the effect")
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
    out = Path(args.out)
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
