"""``python -m ppo_numpy oracle``: list presets and cases, export and verify golden files.

    python -m ppo_numpy oracle list
    python -m ppo_numpy oracle export DIR --preset NAME [--seed S] [--cases NAME ...]
    python -m ppo_numpy oracle verify DIR
    python -m ppo_numpy oracle compare FILE.py:FUNCTION --preset NAME [--dtype D] [--cases ...]
                                   [--outputs ... | --omit ...] [--param NAME=VALUE ...]
    python -m ppo_numpy oracle diagnose FILE.py:FUNCTION --preset NAME [--dtype D] [--cases ...]
                                   [--outputs ... | --omit ...] [--param NAME=VALUE ...]
                                   [--step]

``verify`` exits 0 verified, 1 not verified, 2 when DIR is missing or a file in
it is damaged (one line ``oracle verify: error: <file>: <what>`` on stderr).
``compare`` compares a candidate ``case -> outputs`` (a function in a Python file, or
``package.module:function``) with a preset; ``diagnose`` does too and names the
conventions that explain each failing output. Both exit 0 when every output matches,
1 when one does not, 2 on bad input (one line ``oracle compare: error: <what>``): an
unknown preset, case or parameter, a candidate that cannot be loaded or returns something
that is not a dict of numbers, a preset that rejects every case. ``--param beta=0.04``
sets a preset parameter on every case (the candidate sees it in ``case["params"]``); the
value is read as a Python literal (``0.04``, ``None``, ``True``, ``'k3'``), else kept as
the string; a number written with an underscore (``0.5_5``: the number 0.55 or verl's
bounds string "0.5_5"?) is an error naming both readings (quote it for the string).
``--cases`` takes case names and the words ``random``, ``edge``, ``rollout`` (every case
with the sampler's log-probs) and, for a critic-free preset, ``preset``. A candidate raises
NotImplementedError("option=value") on a case it does not implement: the case is listed,
not compared, and the report ends with the coverage. ``--step`` (compare, diagnose) takes
the cases of one optimizer step over ranks and micro-batches instead
(``ppo_numpy.oracle.group_cases.step_cases``: the first cases, each with a ``"layout"``):
the candidate returns the step's outputs too, and the diagnosis tries the ``normaliser``.
See ``docs/oracle.md`` for the file format and how to check your own code.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..oracle.cases import EDGE_CASES, N_RANDOM, generate_cases
from ..oracle.cases import PRESET_CASES as PPO_PRESET_CASES
from ..oracle.group_cases import (
    PRESET_CASES,
    SELECTIONS,
    cases_for,
    generate_group_cases,
    step_cases,
)
from ..oracle.presets import DEFAULT_PRESET, PRESETS, get_preset


def cmd_list(args) -> int:
    print("presets (--preset NAME):")
    for name, preset in PRESETS.items():
        mark = " (default)" if name == DEFAULT_PRESET else ""
        print(f"  {name:<22} {preset.description}{mark}")
    print(f"\ncases (--cases NAME ...; 'random' = random-0 ... random-{N_RANDOM - 1}, "
          "'edge' = every edge case, 'rollout' = the cases with logp_rollout, by name only):")
    for case in generate_cases(args.seed, [f"random-{k}" for k in range(N_RANDOM)]):
        print(f"  {case['name']:<22} {case['description']}")
    for case in generate_cases(args.seed, list(EDGE_CASES)):
        params = ", ".join(f"{k}={v:g}" for k, v in case["params"].items())
        print(f"  {case['name']:<22} {case['description']}" + (f" [{params}]" if params else ""))
    _list_preset_cases(PPO_PRESET_CASES, generate_cases, args.seed)
    print("\ncases of the critic-free presets (trl-grpo, verl-grpo, openrlhf-grpo; --cases "
          "also takes " + "; ".join(f"'{w}' = {what}" for w, what in SELECTIONS.items())
          + "):")
    for case in generate_group_cases(args.seed):
        print(f"  {case['name']:<22} {case['description']}")
    _list_preset_cases(PRESET_CASES, generate_group_cases, args.seed)
    return 0


def _list_preset_cases(table, generate, seed) -> None:
    """The cases of one preset each (``PRESET_CASES``), with that preset's parameters."""
    for name, (_, by_preset) in table.items():
        for preset, params in by_preset.items():
            case = generate(seed, [name], preset=preset)[0]
            values = ", ".join(f"{k}={v!r}" for k, v in params.items())
            print(f"  {name:<22} {case['description']} [{preset}: {values}]")


def cmd_export(args) -> int:
    from ..oracle.golden import export

    try:
        preset = get_preset(args.preset or DEFAULT_PRESET)
        cases = cases_for(preset, args.seed, args.cases)
    except ValueError as err:
        print(f"oracle export: {err}", file=sys.stderr)
        return 2
    path = export(args.directory, preset, cases, seed=args.seed)
    entries = json.loads(path.read_text())["cases"]
    rejected = [e["name"] for e in entries if "rejected" in e]
    print(f"wrote {len(entries)} cases of preset {preset.name!r} (seed {args.seed}) to "
          f"{path.parent}")
    if rejected:
        print(f"  rejected by the preset (inputs kept, no expected outputs): "
              f"{', '.join(rejected)}")
    return 0


def cmd_verify(args) -> int:
    from ..oracle.golden import bit_identical, verify

    try:
        report, problems = verify(args.directory, args.preset)
        same, total = bit_identical(args.directory, args.preset)
    except (FileNotFoundError, ValueError) as err:
        # a missing or damaged file (BadFileError: "<file>: <what>"), an unknown --preset
        print(f"oracle verify: error: {err}", file=sys.stderr)
        return 2
    print(report)
    print(f"bit-identical: {same} of {total} stored outputs")
    for p in problems:
        print(f"PROBLEM: {p}")
    ok = report.passed and not problems
    print("verified" if ok else "NOT verified")
    return 0 if ok else 1


def load_candidate(spec: str):
    """The callable named by ``FILE.py:NAME`` or ``package.module:NAME``; ValueError if not."""
    import importlib.util  # binds importlib too (import_module below)
    from pathlib import Path

    path, sep, attr = spec.rpartition(":")
    if not sep or not path or not attr:
        raise ValueError(f"candidate {spec!r}: expected FILE.py:FUNCTION or "
                         "package.module:FUNCTION")
    if path.endswith(".py"):
        file = Path(path)
        if not file.is_file():
            raise ValueError(f"candidate {spec!r}: {path}: no such file")
        module_spec = importlib.util.spec_from_file_location(file.stem, file)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, str(file.resolve().parent))
        try:
            module_spec.loader.exec_module(module)
        except Exception as err:
            raise ValueError(f"candidate {spec!r}: importing {path} raised "
                             f"{type(err).__name__}: {err}") from None
        finally:
            sys.path.pop(0)
    else:
        try:
            module = importlib.import_module(path)
        except ImportError as err:
            raise ValueError(f"candidate {spec!r}: cannot import {path} ({err})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"candidate {spec!r}: {path} has no function {attr!r}")
    return fn


def parse_params(items, preset) -> dict:
    """``--param NAME=VALUE`` items as a dict; ValueError for a name ``preset`` lacks (with
    the closest names) or an item without ``=``."""
    import ast
    import difflib

    params = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--param {item!r}: expected NAME=VALUE")
        if name not in preset.parameters:
            close = difflib.get_close_matches(name, list(preset.parameters), n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise ValueError(f"--param {name}: preset {preset.name!r} has no parameter "
                             f"{name!r}{hint}; valid ones are {', '.join(preset.parameters)}")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        if _digit_separated(text, value):
            # why: Python reads 0.5_5 as 0.55 (a digit separator), where verl's
            # rollout_is_threshold reads "0.5_5" as the bounds [0.5, 5]: neither reading
            # may be picked silently
            raise ValueError(f"--param {name}={text}: ambiguous value: the number {value!r} "
                             f"(Python's digit separator '_') or the string {text!r}; write "
                             f"{name}={value!r} for the number or {name}='{text}' (quoted) "
                             f"for the string")
        params[name] = value
    return params


def _digit_separated(text: str, value) -> bool:
    """``text`` is a number written with an underscore (``0.5_5``, ``1_000``), which
    ``ast.literal_eval`` reads as a number and a preset may read as a string."""
    return ("_" in text and isinstance(value, (int, float, complex))
            and not isinstance(value, bool))


def _run_candidate(args, command: str):
    """The comparison or diagnosis of ``args``, or the one error line (exit 2)."""
    from ..oracle.compare import compare
    from ..oracle.diagnose import diagnose

    preset = get_preset(args.preset or DEFAULT_PRESET)
    candidate = load_candidate(args.candidate)
    params = parse_params(args.param, preset)
    if args.step and args.cases:
        raise ValueError("--step takes the step's own cases (step_cases); give no --cases")
    cases = (step_cases(preset, args.seed) if args.step
             else cases_for(preset, args.seed, args.cases))
    if args.probes < 0:
        raise ValueError(f"--probes must be >= 0, got {args.probes}")
    if command == "diagnose":
        result = diagnose(candidate, preset, cases, args.dtype, outputs=args.outputs,
                          probes=args.probes, pairs=not args.no_pairs, params=params,
                          omit=args.omit)
        report = result.report
    else:
        result = report = compare(candidate, preset, cases, args.dtype, outputs=args.outputs,
                                  probes=args.probes, params=params, omit=args.omit)
    if report.rejected and not report.rows and not report.unchecked and \
            not report.not_implemented:
        first = next(iter(report.rejected.values()))
        raise ValueError(f"preset {preset.name!r} rejected every case ({first})")
    return result, report


def cmd_candidate(args) -> int:
    command = args.command
    try:
        result, report = _run_candidate(args, command)
    except (TypeError, ValueError) as err:
        print(f"oracle {command}: error: {err}", file=sys.stderr)
        return 2
    print(result)
    passed = result.passed if command == "diagnose" else report.passed and bool(report.rows)
    return 0 if passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy oracle",
        description="Framework presets, golden cases and comparisons (docs/oracle.md).")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="the presets and the cases")
    p.add_argument("--seed", type=int, default=0, help="seed of the cases shown (default 0)")
    p.set_defaults(run=cmd_list)
    p = sub.add_parser("export", help="write golden files: .npz per case + manifest.json")
    p.add_argument("directory", help="output directory (created if missing)")
    p.add_argument("--preset", default=None, help="preset name (default: the default preset)")
    p.add_argument("--seed", type=int, default=0, help="seed of the cases (default 0)")
    p.add_argument("--cases", nargs="+", default=None, metavar="NAME",
                   help="only these cases: case names, random-K, or the words 'random', "
                        "'edge', 'rollout' (the cases with logp_rollout) and, for a critic-free "
                        "preset, 'preset' (`oracle list`)")
    p.set_defaults(run=cmd_export)
    p = sub.add_parser("verify", help="reload golden files and recompute them")
    p.add_argument("directory", help="a directory written by `oracle export`")
    p.add_argument("--preset", default=None,
                   help="recompute with this preset instead of the manifest's")
    p.set_defaults(run=cmd_verify)
    for command, what in (("compare", "compare a candidate with a preset, output by output"),
                          ("diagnose", "compare a candidate with a preset and name the "
                                       "conventions that explain its differences")):
        p = sub.add_parser(command, help=what)
        p.add_argument("candidate", help="FILE.py:FUNCTION or package.module:FUNCTION, a "
                                         "function case -> outputs (docs/oracle.md)")
        p.add_argument("--preset", default=None,
                       help="preset name (default: the default preset)")
        p.add_argument("--dtype", default="float64",
                       choices=("float64", "float32", "bfloat16"),
                       help="the precision the candidate computes in (default float64)")
        p.add_argument("--seed", type=int, default=0, help="seed of the cases (default 0)")
        p.add_argument("--cases", nargs="+", default=None, metavar="NAME",
                       help="only these cases: case names, random-K, or the words 'random', "
                            "'edge', 'rollout' (the cases with logp_rollout) and, for a "
                            "critic-free preset, 'preset' (`oracle list`)")
        p.add_argument("--outputs", nargs="+", default=None, metavar="NAME",
                       help="compare only these outputs (default: every output the preset "
                            "produces, which the candidate must return)")
        p.add_argument("--omit", nargs="+", default=None, metavar="NAME",
                       help="leave out these outputs of the preset (not compared, not "
                            "required; the report says which)")
        p.add_argument("--param", action="append", default=None, metavar="NAME=VALUE",
                       help="a preset parameter on every case, e.g. --param beta=0.04 "
                            "(repeatable; the value is a Python literal or a string)")
        p.add_argument("--probes", type=int, default=8,
                       help="perturbed reference runs per case for kinks (default 8)")
        p.add_argument("--step", action="store_true",
                       help="the cases of one optimizer step over ranks and micro-batches "
                            "(each with a 'layout'; the step's outputs compared, the "
                            "normaliser diagnosed)")
        if command == "diagnose":
            p.add_argument("--no-pairs", action="store_true", help="try single switches only")
        p.set_defaults(run=cmd_candidate)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "seed", 0) < 0:
        print("oracle: --seed must be >= 0", file=sys.stderr)
        return 2
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
