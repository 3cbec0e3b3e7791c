"""``python -m ppo_numpy COMMAND ...``: one entry point, one module per command.

Each command is a module of :mod:`ppo_numpy.programs`, which defines ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "demo": ("ppo_numpy.programs.demo", "the main job: train the default task (see `make demo`)"),
    "walkthrough": ("ppo_numpy.programs.walkthrough", "the running example of docs/objective.md"),
    "train": ("ppo_numpy.programs.train", "train a toy policy by PPO on a toy task"),
    "explain": ("ppo_numpy.programs.explain", "step-by-step hand-calculation tables"),
    "oracle": ("ppo_numpy.programs.oracle", "framework presets, golden cases, comparisons"),
    "overoptimisation": ("ppo_numpy.programs.overoptimisation",
                         "learned reward model vs gold score"),
    "mismatch": ("ppo_numpy.programs.mismatch",
                 "a sampler that is not the trainer: the mismatch and its corrections"),
    "critic": ("ppo_numpy.programs.critic",
               "what the critic buys: PPO at several lambdas against GRPO, RLOO, V = 0"),
    "accumulation": ("ppo_numpy.programs.accumulation",
                     "gradient accumulation (train --micro-batches) against the one-pass run"),
    "gradient-report": ("ppo_numpy.programs.gradient_report",
                        "finite-difference check and timing of the toy policies' gradients"),
}


def usage() -> str:
    lines = ["usage: python -m ppo_numpy COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<18} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`python -m ppo_numpy COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"ppo_numpy: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
