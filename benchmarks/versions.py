"""``python -m benchmarks.versions LABEL=CHECKOUT ... [--torch] [--write]``: this checkout
against older ones, side by side in one run (issue 35's speed targets).

* **pipeline** at (8, 128) and (64, 256): shaped rewards -> GAE -> whitening -> the policy
  loss with its statistics and its gradient (``benchmarks.core.ours_pipeline``'s calls, each
  checkout's public functions; this checkout with GAE's fast form chosen explicitly,
  ``method="blocked"``, the older ones with their defaults), every checkout imported in this
  process under its own name (:func:`benchmarks.targets.load_package`) and timed in
  interleaved rounds on the same batch; checked to give the same loss first (to 1e-9);
* **training iteration**: one default ``ppo_iteration`` of each older checkout against this
  one in fresh child processes that import both, alternating
  (:func:`benchmarks.targets.training_iteration`);
* with ``--torch`` (an environment with PyTorch, e.g. ``.venv-conformance``): the GRPO and
  GSPO loss + gradient against TRL's torch form with autograd (one intra-op thread) at every
  grid size
  (:func:`benchmarks.targets.group_rows`: one call of the fast forms' ``policy_loss_and_grad``).

Every ratio is the median over the rounds of old / new of two samples taken one just after
the other (above 1: this checkout is faster). The machine line (CPU, NumPy's SIMD targets,
BLAS, the load) is printed with the table; ``--write`` puts the section into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys

SECTION = "## Speed against the first version and the restructure (issue 35)"
PIPELINE_GRID = ((8, 128), (64, 256))
GROUP_GRID = ((8, 128), (64, 256), (64, 1024), (256, 1024), (256, 4096))


def pipeline(pkg, b, p, fast=False):
    """``benchmarks.core.ours_pipeline`` with the public functions of the package ``pkg``;
    ``fast``: GAE's fast form chosen explicitly (``method="blocked"``), as a caller that
    needs the speed does (the other steps have none)."""
    rewards = pkg.kl_shaped_rewards(b.scores, b.logp_old, b.logp_ref, p["beta"], b.mask)
    kw = {"method": "blocked"} if fast else {}
    advantages, returns = pkg.gae(rewards, b.values, p["gamma"], p["lam"], b.mask, **kw)
    advantages = pkg.whiten(advantages, b.mask)
    loss, stats = pkg.ppo_policy_loss(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    dlogp = pkg.policy_loss_grad(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    return loss, dlogp, returns


def pipeline_rows(checkouts: dict, *, rounds: int, target: float) -> list[dict]:
    """Per grid size: each checkout's median seconds and old / new against the last one."""
    import statistics

    from benchmarks.core import PARAMS
    from benchmarks.data import make_batch
    from benchmarks.targets import load_package
    from benchmarks.timing import measure_samples, paired_ratio, warm_heap

    pkgs = {label: load_package(path, f"ppo_numpy_v_{i}")
            for i, (label, path) in enumerate(checkouts.items())}
    new = list(checkouts)[-1]
    warm_heap()
    rows = []
    for B, T in PIPELINE_GRID:
        b = make_batch(B, T)
        fast = {label: label == new for label in pkgs}
        losses = {label: pipeline(pkg, b, PARAMS, fast[label])[0]
                  for label, pkg in pkgs.items()}
        for label, loss in losses.items():
            if abs(loss - losses[new]) > 1e-9 * max(1.0, abs(loss)):
                raise AssertionError(f"pipeline loss of {label}: {loss} vs {losses[new]}")
        samples = measure_samples({label: (lambda pkg=pkg, f=fast[label], b=b: pipeline(
            pkg, b, PARAMS, f)) for label, pkg in pkgs.items()}, rounds=rounds,
                                  target=target)
        rows.append({"B": B, "T": T,
                     "ms": {k: 1e3 * statistics.median(v) for k, v in samples.items()},
                     "ratio": {k: paired_ratio(samples, k, new) for k in samples if k != new}})
    return rows


def machine_line() -> str:
    """The machine (``benchmarks.machine.describe``), NumPy's SIMD targets in use and the load
    average when the run ended."""
    import numpy as np

    from benchmarks.machine import describe

    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        simd = ", ".join(k for k in __cpu_dispatch__ if __cpu_features__.get(k))
    except ImportError:  # pragma: no cover
        simd = "?"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return "; ".join(describe()) + f"; NumPy {np.__version__} SIMD targets in use: {simd}; " \
        f"load average {load:.1f} at the end"


def markdown(checkouts, pipe, training, group, command, machine, section=SECTION) -> list[str]:
    labels = list(checkouts)
    new = labels[-1]
    old = labels[:-1]
    out = [section, "", f"Measured with `{command}` on {machine}.", "",
           "| what | " + " | ".join(f"{lab} (ms)" for lab in labels) + " | "
           + " | ".join(f"{lab} / {new}" for lab in old) + " | target met |",
           "|---|" + "---:|" * (len(labels) + len(old)) + "---|"]
    for r in pipe:
        ok = "yes" if all(r["ratio"][k] >= 1 for k in old) else "no"
        out.append(f"| pipeline ({r['B']}, {r['T']}) | "
                   + " | ".join(f"{r['ms'][k]:.3g}" for k in labels) + " | "
                   + " | ".join(f"{r['ratio'][k]:.2f}x" for k in old) + f" | {ok} |")
    if training:
        cells_ms = [f"{1e3 * training[k]['old']:.3g}" for k in old]
        new_ms = statistics_median([training[k]["new"] for k in old])
        ok = "yes" if all(training[k]["ratio"] >= 1 for k in old) else "no"
        out.append("| training iteration | " + " | ".join(cells_ms)
                   + f" | {1e3 * new_ms:.3g} | "
                   + " | ".join(f"{training[k]['ratio']:.3f}x" for k in old) + f" | {ok} |")
    if group:
        out += ["", "GRPO and GSPO loss + gradient of this checkout against TRL's torch form "
                "with autograd (one call of the fast forms' `policy_loss_and_grad`; "
                "above 1: ppo_numpy is faster):", "",
                "| what | (B, T) | ppo_numpy (ms) | TRL + autograd (ms) | TRL / ppo_numpy |",
                "|---|---|---:|---:|---:|"]
        for r in group:
            if r["what"].endswith("advantages"):
                continue
            out.append(f"| {r['what']} | ({r['B']}, {r['T']}) | {1e3 * r['ours']:.3g} | "
                       f"{1e3 * r['trl']:.3g} | {r['ratio']:.2f}x |")
    return out


def statistics_median(values):
    import statistics

    return statistics.median(values)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.versions",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("checkouts", nargs="+", metavar="LABEL=CHECKOUT",
                   help="older checkouts; this checkout is added last as HEAD")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--training-rounds", type=int, default=3)
    p.add_argument("--target", type=float, default=0.05, help="seconds per sample")
    p.add_argument("--torch", action="store_true", help="also the GRPO/GSPO rows against TRL")
    p.add_argument("--no-training", action="store_true")
    p.add_argument("--training-only", action="store_true", help="no pipeline rows")
    p.add_argument("--new-config", action="append", default=[], metavar="FIELD=VALUE",
                   help="the training iteration of this checkout with these PPOConfig fields "
                        "(Python literals), e.g. value_hidden=0: 2178b48's model")
    p.add_argument("--write", action="store_true")
    p.add_argument("--kind", help="the CPU kind, added to the section's title (e.g. AVX2: a "
                                  "second section beside the first)")
    args = p.parse_args(argv)
    from benchmarks.targets import ROOT, show, training_iteration

    checkouts = {}
    for item in args.checkouts:
        label, _, path = item.rpartition("=")
        checkouts[label or path] = os.path.abspath(path)
    checkouts["HEAD"] = ROOT
    import ast

    new_config = {k: ast.literal_eval(v) for k, _, v in
                  (item.partition("=") for item in args.new_config)} or None
    pipe = [] if args.training_only else pipeline_rows(checkouts, rounds=args.rounds,
                                                       target=args.target)
    training = None
    if not args.no_training:
        training = {label: training_iteration(path, rounds=args.training_rounds,
                                              new_config=new_config)
                    for label, path in checkouts.items() if label != "HEAD"}
    group = None
    if args.torch:
        import torch

        from benchmarks.targets import group_rows

        # one intra-op thread, as the targets of issue 22 time TRL's form (benchmarks.targets)
        torch.set_num_threads(1)
        group = group_rows(GROUP_GRID, rounds=args.rounds, target=args.target)
    command = "python -m benchmarks.versions " + " ".join(
        f"{lab}=<checkout of {lab}>" for lab in checkouts if lab != "HEAD") + (
        " --torch" if args.torch else "") + (
        f" --training-rounds {args.training_rounds}" if args.training_rounds != 3 else ""
    ) + "".join(
        f" --new-config {item}" for item in args.new_config) + (
        " --training-only" if args.training_only else "") + (
        f" --kind {args.kind}, with NPY_DISABLE_CPU_FEATURES=\"X86_V4 AVX512_ICL AVX512_SPR\" "
        "OPENBLAS_CORETYPE=Haswell" if args.kind == "AVX2" else "")
    section = SECTION if args.kind is None else f"{SECTION}, {args.kind}"
    if new_config:
        section += ", " + ", ".join(args.new_config)
    show(markdown(checkouts, pipe, training, group, command, machine_line(), section),
         args.write, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
