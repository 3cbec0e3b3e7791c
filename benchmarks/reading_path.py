"""``python -m benchmarks.reading_path [LABEL=]CHECKOUT ...``: the reading path of five
public functions, counted in each checkout.

The reading path of a public function is the set of the package's functions that run
when it is called with its defaults: the functions a reader has to open to see what it
computes. It is measured, not estimated: each call runs in a fresh process for each
checkout under ``sys.setprofile``, and every Python function whose code lives in that
checkout's ``ppo_numpy/`` is recorded once (file and qualified name).

Two counts are reported, and the functions of the second are listed:

- **traced**: every package function that ran;
- **to read**: without the input checks (the functions in ``_validation.py``, and those
  named ``check_*`` or ``_check*``) and without code written inside another function's
  body (``<lambda>``, comprehensions, nested functions: read where they are written).

The calls (:data:`CALLS`) use a batch of four responses with padding, the defaults of
each function, and, for ``gae``, a small and a large batch (the default path may depend
on the size). ``--code-lines`` adds the code lines of each checkout
(:mod:`benchmarks.code_lines`); ``--write`` puts the section into ``docs/benchmarks.md``
under :data:`SECTION`.

``--route PRESET`` measures instead the route of the log-probs through one preset's policy
loss (issue 35): the preset is called on its first oracle case, and the calls made inside
its call of the policy-loss kernel (the first function named in :data:`ROUTE_ENTRIES` that a
preset module calls) are recorded in the order they run. On the functions to read of that
sequence (input checks and inline code left out, as above), each function's module in turn:

- **modules**: the modules visited; **stays**: the runs of consecutive calls in one module;
- **returns**: stays minus modules, the times the route comes back to a module it had left;
- **climbs**: the steps from one stay to the next whose module sits *above* the one it
  leaves in the import order (imports it, directly or through others:
  :mod:`benchmarks.imports`; inside an import circle every step between its modules climbs);
- **functions**: the distinct functions to read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

SECTION = "## Reading paths of issue 22"

#: ``label: (module, function, kind of inputs)``; the inputs are built by :func:`inputs`;
#: module ``None``: the package's public name (found in every layout of the package)
CALLS = {
    "ppo_policy_loss": (None, "ppo_policy_loss", "policy"),
    "clipped_surrogate": (None, "clipped_surrogate", "surrogate"),
    "value_loss": (None, "value_loss", "value"),
    "gae, (4, 8)": (None, "gae", "gae-small"),
    "gae, (256, 1024)": (None, "gae", "gae-large"),
    "kl_shaped_rewards": (None, "kl_shaped_rewards", "kl"),
}

CHECK_FILES = {"_validation.py", "_checks.py"}
#: the names of the policy-loss kernel a preset calls (the route starts at its call)
ROUTE_ENTRIES = ("policy_loss_kernel",)
ROUTE_SECTION = "## The route of the log-probs through a preset's policy loss (issue 35)"
INLINE = ("<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


def inputs(kind: str):
    """The positional arguments of one call (NumPy only; seed 0)."""
    import numpy as np

    rng = np.random.default_rng(0)
    B, T = (256, 1024) if kind == "gae-large" else (4, 8)
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, size=B)[:, None]
    mask = mask.astype(np.float64)
    x = lambda: rng.normal(size=(B, T)) * mask  # noqa: E731
    if kind == "policy":
        return (x() * 0.1, x() * 0.1, x(), mask)
    if kind == "surrogate":
        return (np.exp(x() * 0.1), x())
    if kind == "value":
        return (x(), x(), x(), mask)
    if kind.startswith("gae"):
        return (x(), x(), 1.0, 0.95, mask)
    if kind == "kl":
        return (rng.normal(size=B), x() * 0.1, x() * 0.1, 0.05, mask)
    raise ValueError(f"kind: unknown {kind!r}")


def kind_of(rel_file: str, qualname: str) -> str:
    """``"check"``, ``"inline"`` or ``"read"`` for one traced function."""
    name = qualname.rsplit(".", 1)[-1]
    if os.path.basename(rel_file) in CHECK_FILES or name.startswith(("check_", "_check")):
        return "check"
    if name in INLINE or "<locals>" in qualname:
        return "inline"
    return "read"


def trace(fn, args, root: str) -> list[tuple[str, str]]:
    """``[(file relative to root, qualified name)]`` of the functions under ``root`` that
    run in ``fn(*args)``, in the order they first run."""
    seen: dict[tuple[str, str], None] = {}
    prefix = os.path.realpath(root) + os.sep

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(prefix):
                seen.setdefault((os.path.relpath(code.co_filename, root), code.co_qualname))

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return list(seen)


def measure_calls(checkout: str, calls: dict, args=None, name: str | None = None) -> dict:
    """In this process: ``{label: [[file, qualified name, kind], ...]}`` of each call of
    ``calls`` (``label: (module, function, kind of inputs)``) in ``checkout``'s package,
    imported under ``name``; ``args(kind)`` gives the positional arguments (default
    :func:`inputs`)."""
    import importlib

    from benchmarks.targets import load_package

    args = args or inputs
    name = name or f"ppo_numpy_read_{next(_names)}"
    checkout = os.path.abspath(checkout)
    load_package(checkout, name)
    root = os.path.realpath(os.path.join(checkout, "ppo_numpy"))
    out = {}
    for label, (module, function, kind) in calls.items():
        fn = getattr(importlib.import_module(name if module is None else f"{name}.{module}"),
                     function)
        call_args = args(kind)
        fn(*call_args)  # a first call outside the trace: imports and caches are not reading
        out[label] = [[f, q, kind_of(f, q)] for f, q in trace(fn, call_args, root)]
    return out


_names = itertools.count()


def child_main(checkout: str) -> dict:
    """In a fresh process: the traces of :data:`CALLS` in ``checkout``."""
    return measure_calls(checkout, CALLS, name="ppo_numpy_read")


def measure(checkout: str) -> dict:
    """:func:`child_main` of ``checkout`` run in a fresh interpreter."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=here)
    done = subprocess.run([sys.executable, "-m", "benchmarks.reading_path", "--child", checkout],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def trace_route(fn, args, root: str, entries=ROUTE_ENTRIES) -> list[tuple[str, str]]:
    """``[(file, qualified name)]`` of every call, in order, made under ``root`` inside the
    first call of a function named in ``entries`` from a module of ``oracle/presets/``
    (the entry itself first)."""
    prefix = os.path.realpath(root) + os.sep
    calls, depth = [], [None]  # depth[0]: the entry frame once found

    def profile(frame, event, arg):
        code = frame.f_code
        if not code.co_filename.startswith(prefix):
            return
        rel = os.path.relpath(code.co_filename, root)
        if event == "call":
            if depth[0] is None:
                caller = frame.f_back
                if (code.co_name in entries and caller is not None and os.sep.join(
                        ("oracle", "presets")) in caller.f_code.co_filename):
                    depth[0] = frame
                    calls.append((rel, code.co_qualname))
            elif depth[0] is not False:
                calls.append((rel, code.co_qualname))
        elif event == "return" and frame is depth[0]:
            depth[0] = False

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return calls


def route_child(checkout: str, preset: str) -> dict:
    """In a fresh process: the route of ``preset`` in ``checkout`` (module docstring) and the
    package's import graph."""
    import importlib

    from benchmarks.imports import import_graph
    from benchmarks.targets import load_package

    checkout = os.path.abspath(checkout)
    name = "ppo_numpy_route"
    load_package(checkout, name)
    presets = importlib.import_module(f"{name}.oracle.presets")
    cases = importlib.import_module(f"{name}.oracle.group_cases")
    preset, overrides = parse_preset(preset)
    p = presets.get_preset(preset)
    case = cases.cases_for(p)[0]
    p(case, **overrides)  # a first call outside the trace: imports and caches are not reading
    root = os.path.realpath(os.path.join(checkout, "ppo_numpy"))
    calls = trace_route(lambda c: p(c, **overrides), (case,), root)
    graph = {os.path.relpath(k, "ppo_numpy"): sorted(os.path.relpath(v, "ppo_numpy")
                                                     for v in vs)
             for k, vs in import_graph(checkout).items()}
    return {"calls": [[f, q, kind_of(f, q)] for f, q in calls], "graph": graph}


def parse_preset(text: str) -> tuple[str, dict]:
    """``"trl-grpo:loss_type='vespo',beta=0.04"`` -> ``("trl-grpo", {...})`` (Python
    literals after each ``=``)."""
    import ast

    name, _, rest = text.partition(":")
    overrides = {}
    if rest:
        call = ast.parse(f"f({rest})", mode="eval").body
        overrides = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return name, overrides


def route_counts(route: dict) -> dict:
    """The figures of one route (module docstring) and its sequence of stays."""
    from benchmarks.imports import above

    graph = {k: set(v) for k, v in route["graph"].items()}
    read = [(f, q) for f, q, k in route["calls"] if k == "read"]
    stays = [f for i, (f, _) in enumerate(read) if i == 0 or read[i - 1][0] != f]
    climbs = sum(above(graph, b, a) for a, b in zip(stays, stays[1:]))
    modules = len(set(stays))
    return {"modules": modules, "stays": len(stays), "returns": len(stays) - modules,
            "climbs": climbs, "functions": len(set(read)), "sequence": stays,
            "read": list(dict.fromkeys(read))}


def route_measure(checkout: str, preset: str) -> dict:
    """:func:`route_child` of ``checkout`` run in a fresh interpreter."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=here)
    done = subprocess.run([sys.executable, "-m", "benchmarks.reading_path", "--route-child",
                           preset, checkout], capture_output=True, text=True, env=env,
                          check=True)
    return json.loads(done.stdout)


def route_section(results: dict[str, dict[str, dict]]) -> list[str]:
    """The markdown section of ``--route``: per preset (``{preset: {label: route}}``) a row per
    checkout, then each one's modules in turn and functions to read."""
    presets = list(results)
    labels = list(results[presets[0]])
    out = [ROUTE_SECTION, "",
           "Measured with `python -m benchmarks.reading_path "
           + " ".join(f'--route "{p}"' for p in presets) + " "
           + " ".join(f"{lab}=<checkout of {lab}>" for lab in labels) + " --write` "
           "(`benchmarks/reading_path.py`): the preset runs with these parameters on its first "
           "oracle case; the calls inside its call of the policy-loss kernel are recorded in "
           "order, input checks and inline code left out. *stays*: runs of consecutive calls "
           "in one module; *returns*: stays minus modules (coming back to a module left); "
           "*climbs*: steps to a module above the one left in the import order "
           "(`benchmarks/imports.py`, imports inside functions included); *functions*: "
           "distinct functions to read.", "",
           "| preset | checkout | modules | stays | returns | climbs | functions |",
           "|---|---|---:|---:|---:|---:|---:|"]
    figures = {p: {lab: route_counts(results[p][lab]) for lab in labels} for p in presets}
    for p in presets:
        for lab in labels:
            c = figures[p][lab]
            out.append(f"| `{p}` | {lab} | {c['modules']} | {c['stays']} | {c['returns']} | "
                       f"{c['climbs']} | {c['functions']} |")
    for p in presets:
        for lab in labels:
            seq = [os.path.splitext(f)[0].replace(os.sep, ".")
                   for f in figures[p][lab]["sequence"]]
            out += ["", f"`{p}`, {lab}: " + " -> ".join(seq) + "; to read: "
                    + ", ".join(f"`{f}:{q}`" for f, q in figures[p][lab]["read"])]
    return out


def counts(traced: list) -> dict:
    """``{"traced": n, "traced files": n, "read": n, "read files": n}`` of one trace."""
    read = [(f, q) for f, q, k in traced if k == "read"]
    return {"traced": len(traced), "traced files": len({f for f, _, _ in traced}),
            "read": len(read), "read files": len({f for f, _ in read})}


def section(results: dict[str, dict]) -> list[str]:
    """The markdown section: a table with a column per checkout, then the functions to read
    in the last checkout."""
    labels = list(results)
    out = [SECTION, "",
           "Measured with `python -m benchmarks.reading_path "
           + " ".join(f"{lab}=<checkout of {lab}>" for lab in labels)
           + " --code-lines [--exclude ENTRY ...] --write` "
           "(`benchmarks/reading_path.py`): each public function is called once with its "
           "defaults on a batch of four padded responses (and `gae` also on (256, 1024)), "
           "in a fresh process per checkout, under `sys.setprofile`; every function of the "
           "checkout's `ppo_numpy/` that runs is recorded. *traced* counts them all; "
           "*to read* leaves out input checks (`_validation.py`, functions named "
           "`check_*` or `_check*`) and code written inside another function's body "
           "(lambdas, comprehensions, nested functions). Cells: functions in files. This "
           "counts what runs; a reading of the code that also follows the branches not "
           "taken (as issue 22's first table did) can only count more.", "",
           "| public function | " + " | ".join(f"{lab}: traced | {lab}: to read"
                                                for lab in labels) + " |",
           "|---|" + "---:|---:|" * len(labels)]
    for call in CALLS:
        cells = []
        for lab in labels:
            c = counts(results[lab][call])
            cells += [f"{c['traced']} in {c['traced files']}", f"{c['read']} in {c['read files']}"]
        out.append(f"| `{call}` | " + " | ".join(cells) + " |")
    last = labels[-1]
    out += ["", f"The functions to read in {last}:", ""]
    for call in CALLS:
        names = [f"`{f}:{q}`" for f, q, k in results[last][call] if k == "read"]
        out.append(f"- `{call}`: " + ", ".join(names))
    return out


def _checkouts(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        label, _, path = item.rpartition("=")
        out[label or path] = path
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.reading_path",
                                description=__doc__.split("\n")[0])
    p.add_argument("checkouts", nargs="*", metavar="[LABEL=]CHECKOUT")
    p.add_argument("--write", action="store_true", help="put the section into "
                                                          "docs/benchmarks.md")
    p.add_argument("--list", action="store_true",
                   help="print every traced function with its kind (check, inline, read)")
    p.add_argument("--code-lines", action="store_true",
                   help="add the table of benchmarks.code_lines for the same checkouts")
    p.add_argument("--exclude", action="append", default=[],
                   help="with --code-lines: a top-level entry left out of a second total")
    p.add_argument("--route", metavar="PRESET[:KEY=VALUE,...]", action="append",
                   help="the route of the log-probs through this preset's policy loss, "
                        "with these parameters (Python literals)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--route-child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child_main(args.child)))
        return 0
    if args.route_child:
        print(json.dumps(route_child(args.route_child[1], args.route_child[0])))
        return 0
    if args.route:
        if not args.checkouts:
            p.error("give at least one checkout")
        from benchmarks.targets import show

        results = {preset: {label: route_measure(path, preset)
                            for label, path in _checkouts(args.checkouts).items()}
                   for preset in args.route}
        show(route_section(results), args.write, ROUTE_SECTION)
        return 0
    if args.list:
        for label, path in _checkouts(args.checkouts).items():
            for call, traced in measure(path).items():
                print(f"{label} {call}:")
                print("".join(f"    {k:6} {f}:{q}\n" for f, q, k in traced))
        return 0
    if not args.checkouts:
        p.error("give at least one checkout")
    checkouts = _checkouts(args.checkouts)
    results = {label: measure(path) for label, path in checkouts.items()}
    lines = section(results)
    if args.code_lines:
        from benchmarks import code_lines

        lines += ["", *code_lines.section(checkouts, args.exclude)]
    from benchmarks.targets import show

    show(lines, args.write, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
