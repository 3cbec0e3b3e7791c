"""``python -m ppo_numpy COMMAND ...``: one entry point, one module per command.

Each command lives in its own module, which defines ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "demo": ("ppo_numpy.demo", "the main job: train the default task (see `make demo`)"),
    "walkthrough": ("ppo_numpy.walkthrough", "the running example of docs/objective.md"),
    "train": ("ppo_numpy.training.cli", "train a toy policy by PPO on a toy task"),
    "explain": ("ppo_numpy.explain.cli", "step-by-step hand-calculation tables"),
    "oracle": ("ppo_numpy.oracle.cli", "framework presets, golden cases, comparisons"),
    "overoptimisation": ("ppo_numpy.overoptimisation", "learned reward model vs gold score"),
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
