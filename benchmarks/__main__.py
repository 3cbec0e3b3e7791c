"""``python -m benchmarks``: time the core functions and write docs/benchmarks.md.

Options: ``--quick`` (two small grid points, few rounds, no training: a smoke
run of a few seconds, printed to stdout unless ``--output`` is given),
``--output PATH`` (``-`` for stdout), ``--no-torch``, ``--no-cold``,
``--no-training``, ``--no-grpo`` (the group advantages and GRPO loss section of
:mod:`benchmarks.grpo`), ``--demo-seeds N``, ``--rounds N``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small grid, few rounds (smoke run)")
    p.add_argument("--output", default=None,
                   help=f"Markdown file to write, '-' for stdout (default: {DOC}; "
                        "stdout with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per median (default 7)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch column")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads (default 1, as NumPy's elementwise "
                        "operations; 0 keeps torch's default)")
    p.add_argument("--no-cold", action="store_true",
                   help="skip the fresh-process (cold heap) GAE measurement")
    p.add_argument("--no-training", action="store_true",
                   help="skip the training-loop section (skipped with --quick)")
    p.add_argument("--no-grpo", action="store_true",
                   help="skip the group advantages and GRPO loss section (benchmarks/grpo.py)")
    p.add_argument("--demo-seeds", type=int, default=3,
                   help="seeds of the make-demo time-to-90%% run (default 3; 0 skips it)")
    return p


def _cold(B: int, T: int) -> dict | None:
    """Run benchmarks.cold in a fresh interpreter; None if it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.cold", str(B), str(T)],
                              capture_output=True, text=True, check=True, env=env, cwd=ROOT,
                              timeout=300)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return None


def _child(module: str, *args: str, env_extra=None, timeout=1800) -> dict | list | None:
    """Run ``python -m module *args --json FILE`` in a child process; its JSON, or None."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        try:
            subprocess.run([sys.executable, "-m", module, *args, "--json", path], cwd=ROOT,
                           env=env, check=True, timeout=timeout, stdout=subprocess.DEVNULL)
            with open(path) as f:
                return json.load(f)
        except (subprocess.SubprocessError, OSError, ValueError) as err:
            print(f"{module} failed: {err}", file=sys.stderr)
            return None


# the environment make demo gives the training loop (Makefile)
DEMO_ENV = {"OPENBLAS_NUM_THREADS": "1"}


def _training(demo_seeds: int):
    """(lines of the training section, demo timings), or (None, None) if they fail."""
    from benchmarks import training

    print("training loop (child process, OPENBLAS_NUM_THREADS=1) ...", file=sys.stderr)
    rows = _child("benchmarks.training", env_extra=DEMO_ENV)
    if rows is None:
        return None, None
    demo = None
    if demo_seeds > 0:
        print(f"make demo to 90% over {demo_seeds} seeds ...", file=sys.stderr)
        result = _child("benchmarks.train_speed", "--seeds", str(demo_seeds), "--task-seeds",
                        "0", env_extra=DEMO_ENV)
        demo = None if result is None else result["demo"]
    lines = training.markdown(rows, demo)
    lines += ["", "Both measured in a child process with `OPENBLAS_NUM_THREADS=1`, as "
              "`make demo` runs the loop (see the Makefile)."]
    return lines, demo


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def _command(args) -> str:
    parts = [".venv/bin/python -m benchmarks"]
    if args.quick:
        parts.append("--quick")
    if args.rounds is not None:
        parts.append(f"--rounds {args.rounds}")
    if args.no_torch:
        parts.append("--no-torch")
    if args.torch_threads != 1:
        parts.append(f"--torch-threads {args.torch_threads}")
    if args.no_cold:
        parts.append("--no-cold")
    if args.no_training:
        parts.append("--no-training")
    if args.no_grpo:
        parts.append("--no-grpo")
    if args.demo_seeds != 3:
        parts.append(f"--demo-seeds {args.demo_seeds}")
    command = " ".join(parts)
    return command + ("   # = make bench" if command.endswith("benchmarks") else "")


#: sections of docs/benchmarks.md that this command does not write: it keeps the page from the
#: first of them to the end as it is (the speed targets of ``benchmarks/targets.py``, the
#: sections written by hand, the redesign's figures of issue 12)
KEPT = ("## Speed targets of issue 22", "## Transformer policy (issue 17)",
        "## The add task", "## The redesign (issue 12)")


def _kept(path: str) -> str:
    """The part of ``path`` from the first heading of :data:`KEPT` to the end, kept as it is
    when this page is regenerated; "" if there is none."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    starts = [i for i in (text.find("\n" + h) for h in KEPT) if i >= 0]
    return text[min(starts):] if starts else ""


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from benchmarks import core, machine, report, torch_impl
    from benchmarks.timing import warm_heap

    start = time.perf_counter()
    load_start = _load()
    use_torch = torch_impl.available() and not args.no_torch
    grid = core.QUICK_GRID if args.quick else core.GRID
    rounds = args.rounds or (3 if args.quick else 7)
    target = 0.002 if args.quick else 0.02
    if use_torch and args.torch_threads > 0:
        import torch

        torch.set_num_threads(args.torch_threads)
    warm_heap()

    def progress(row):
        print(f"{row.function:>18} ({row.B:>3}, {row.T:>4}): ppo_numpy {report.ms(row.ours):>7} ms"
              f"  floor x{row.ours / row.floor:6.1f}"
              + (f"  torch/ppo_numpy {row.torch / row.ours:6.1f}" if row.torch else ""),
              file=sys.stderr, flush=True)

    rows = core.run_grid(grid, rounds=rounds, target=target, use_torch=use_torch,
                         progress=progress)
    cold = blas_lines = None
    if not args.quick and not args.no_cold:
        cold = _cold(256, 1024)
    if not args.quick:
        from benchmarks import blas

        blas_lines = blas.markdown([blas.products(rounds=rounds),
                                    blas.products(busy=os.cpu_count() or 1,
                                                  rounds=2 * rounds + 1)])
    grpo_rows = None
    if not args.no_grpo:
        from benchmarks import grpo

        grpo_rows = grpo.run_grid(grid, rounds=rounds, target=target, use_torch=use_torch)
    training = demo = None
    if not args.quick and not args.no_training:
        training, demo = _training(args.demo_seeds)
    lines = machine.describe()
    lines.append(f"Load average (1 min): {load_start} at the start of the run, {_load()} at "
                 "the end")
    text = report.render(rows, machine=lines, command=_command(args),
                         rounds=rounds, target=target, elapsed=time.perf_counter() - start,
                         cold=cold, training=training, demo=demo, blas=blas_lines,
                         date=datetime.date.today().isoformat() + " ")
    if grpo_rows is not None:
        text = text.rstrip("\n") + "\n\n" + "\n".join(
            grpo.markdown(grpo_rows, command=_command(args), rounds=rounds, target=target))
    output = args.output if args.output is not None else ("-" if args.quick else DOC)
    if output == "-":
        sys.stdout.write(text)
    else:
        kept = _kept(output)
        with open(output, "w") as f:
            f.write(text.rstrip("\n") + "\n" + kept if kept else text)
        print(f"wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
