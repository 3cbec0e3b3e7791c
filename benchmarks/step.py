"""One optimizer step across ranks and micro-batches (issue 37): ``policy_step`` against the
one-batch call.

    python -m benchmarks.step [--quick] [--rounds N] [--output docs/benchmarks.md | -]

A (64, 256) batch (:func:`benchmarks.data.make_batch`, lengths 128 to 256) in 2 ranks x 4
micro-batches of 8 rows (``step_layout(64, 2, 4)``), in one interleaved run
(:func:`benchmarks.timing.measure_samples`): ``policy_step`` with three normalisers (the global
token mean, TRL's ``grpo`` rule, verl's ``seq-mean-token-mean`` with ``global_batch_size``),
``step_weights`` of the global token mean, and the one-batch call ``policy_loss_and_grad``
(token mean) they are measured against. Then the presets' step outputs (issue 37, item 2):
``verl-grpo`` (groups of 8) and ``verl`` (PPO, with the value loss) called on the case with
the same layout (``step/losses``, ``step/dlogp``, ``step/dvalues`` and the step's statistics
beside the one-batch outputs), each also against the same preset's call without a layout.
``policy_step`` with one micro-batch (no layout) is timed too: the price of the step's
bookkeeping (the exact full-batch check included) on its own. The section goes at the end
of docs/benchmarks.md (after the sections ``python -m benchmarks`` keeps, so a regeneration
keeps it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

from benchmarks.data import make_batch
from benchmarks.report import ms, ratio
from benchmarks.targets import write_section
from benchmarks.timing import measure_samples, paired_ratio, warm_heap
from ppo_numpy import Normaliser, policy_loss_and_grad, policy_step, step_layout, step_weights
from ppo_numpy._machine import simd_kind
from ppo_numpy.oracle.presets import get_preset

SECTION = "## One step across ranks and micro-batches (issue 37)"
SHAPE = (64, 256)
RANKS, MICRO_BATCHES = 2, 4
#: the presets timed with and without the layout, and the size of verl-grpo's groups
PRESETS = ("verl-grpo", "verl")
GROUP = 8
#: a preset's call with the layout -> its call without (the second ratio of the table)
OWN_REFERENCE = {f"{name} preset, {RANKS} x {MICRO_BATCHES} layout":
                 f"{name} preset, no layout" for name in PRESETS}


def preset_case(b, layout=None) -> dict:
    """The benchmark batch as a case of the presets: ``verl-grpo``'s groups of
    :data:`GROUP` rows, the old values the values moved by the batch's rewards."""
    B = b.mask.shape[0]
    inputs = {"logp": b.logp, "logp_old": b.logp_old, "logp_ref": b.logp_ref,
              "values": b.values, "old_values": b.values + b.rewards, "scores": b.scores,
              "groups": (np.arange(B) // GROUP).astype(np.float64),
              "baseline_scores": np.zeros(B), "mask": b.mask.astype(np.float64)}
    case = {"name": "benchmark", "inputs": inputs}
    return case if layout is None else {**case, "layout": layout}


def calls(B: int, T: int) -> dict:
    """name -> the zero-argument call timed (the first is the one-batch reference)."""
    b = make_batch(B, T)
    layout = step_layout(B, RANKS, MICRO_BATCHES)
    args = (b.logp, b.logp_old, b.advantages, b.mask)
    verl = Normaliser("verl", "seq-mean-token-mean", global_batch_size=B)
    return {
        "one-batch call (policy_loss_and_grad)": lambda: policy_loss_and_grad(*args),
        "policy_step, no layout": lambda: policy_step(*args),
        "policy_step, global token mean": lambda: policy_step(*args, layout),
        "policy_step, TRL grpo": lambda: policy_step(*args, layout, Normaliser("trl", "grpo")),
        "policy_step, verl seq-mean-token-mean": lambda: policy_step(*args, layout, verl),
        "step_weights, global token mean": lambda: step_weights(b.mask, layout),
        **preset_calls(b, layout),
    }


def preset_calls(b, layout) -> dict:
    """Each preset of :data:`PRESETS` on the batch without a layout and with ``layout``."""
    out = {}
    for name in PRESETS:
        preset = get_preset(name)
        plain, step = preset_case(b), preset_case(b, layout)
        out[f"{name} preset, no layout"] = lambda p=preset, c=plain: p(c)
        out[f"{name} preset, {RANKS} x {MICRO_BATCHES} layout"] = lambda p=preset, c=step: p(c)
    return out


def run(shape=SHAPE, *, rounds=7, target=0.02) -> list[dict]:
    """One row per call: its median seconds and its paired ratio to the one-batch call."""
    fns = calls(*shape)
    samples = measure_samples(fns, rounds=rounds, target=target)
    ref = next(iter(fns))
    return [{"what": name, "seconds": statistics.median(samples[name]),
             "ratio": paired_ratio(samples, name, ref),
             "own": (paired_ratio(samples, name, OWN_REFERENCE[name])
                     if name in OWN_REFERENCE else None)} for name in fns]


def markdown(rows, *, command: str, rounds: int, shape=SHAPE, load: str = "",
             machine: str = "") -> list[str]:
    B, T = shape
    out = [SECTION, "", "Measured in one run of", "", "```bash", command, "```", ""]
    out += [machine, ""] if machine else []
    out += [load, ""] if load else []
    out += [f"`benchmarks/step.py`: a ({B}, {T}) batch in {RANKS} ranks x {MICRO_BATCHES} "
            f"micro-batches of {B // (RANKS * MICRO_BATCHES)} rows. Each ratio: the median "
            f"over {rounds} interleaved rounds of the call's sample / the one-batch call's "
            "sample taken one just after the other; for a preset with the layout, also / the "
            "same preset's call without one (its step outputs computed beside the one-batch "
            "outputs).", "",
            "| call | ms (median) | / one-batch call | / the preset without a layout |",
            "|---|---:|---:|---:|"]
    out += [f"| {r['what']} | {ms(r['seconds'])} | {ratio(r['ratio'])} | "
            f"{'-' if r.get('own') is None else ratio(r['own'])} |" for r in rows]
    return out + [""]


def machine_line() -> str:
    """The machine kind: the CPU model and the SIMD kind NumPy runs."""
    from benchmarks.machine import _cpu_model

    return (f"Machine: {_cpu_model()}, {os.cpu_count()} logical cores; NumPy's SIMD kind "
            f"{simd_kind()}.")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.step",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a (16, 32) batch, few rounds")
    p.add_argument("--rounds", type=int, default=None, help="rounds per median (default 7)")
    p.add_argument("--output", default="-", help="'-' (default) prints the section; a path "
                   "puts it into that Markdown file (docs/benchmarks.md)")
    args = p.parse_args(argv)
    warm_heap()
    rounds = args.rounds or (3 if args.quick else 7)
    shape = (16, 32) if args.quick else SHAPE
    load0 = os.getloadavg()[0]
    rows = run(shape, rounds=rounds, target=0.002 if args.quick else 0.02)
    load = (f"Load average (1 min) on the machine's {os.cpu_count()} cores: {load0:.1f} at the "
            f"start of this run, {os.getloadavg()[0]:.1f} at the end.")
    parts = ["OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.step"]
    parts += ["--quick"] if args.quick else []
    parts += [f"--rounds {args.rounds}"] if args.rounds is not None else []
    parts += [f"--output {args.output}"] if args.output != "-" else []
    lines = markdown(rows, command=" ".join(parts), rounds=rounds, shape=shape, load=load,
                     machine=machine_line())
    if args.output == "-":
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        write_section(args.output, lines, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
