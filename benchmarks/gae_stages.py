"""``python -m benchmarks.gae_stages``: where the time of ``gae`` goes at (256, 1024), in
units of one streaming pass.

Issue 22 asks for ``gae`` within 10 streaming passes (``rewards - values``, the floor of
``benchmarks/targets.py``). This times the call with the callers' size rule (the blocked form
at this size, :func:`benchmarks.core.gae_sized`) and the functions its blocked form
runs on a right-padded batch, each in the same interleaved rounds as the floor
(:func:`benchmarks.timing.measure_samples`; paired medians), and prints each as
milliseconds and as passes:

- the mask analysis (``right_padded_lengths``, and the padding ``~mask``);
- the TD errors (``_td_errors_right_padded``: two adds, the row ends, the zeros at padding);
- the suffix sums (``_suffix_sums``), and inside them the one product ``d @ W`` with the
  (C, C) power matrix;
- the returns ``A + V`` with zeros at padding, and the finiteness read of ``gae`` (on the
  (B, T / C) block sums);
- that call, ``gae(rewards, values, 1.0, 0.95, mask, method="blocked")``;
- with ``--old CHECKOUT``, that checkout's default call too (its package imported under
  another name), and this checkout's time over it, paired in the same rounds.

The stages are the package's own functions called on the same arrays, not copies of them.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks.data import make_batch
from benchmarks.timing import measure_samples, paired_ratio, rerun_with_one_blas_thread, warm_heap

SECTION = "## Where the time of gae goes (issue 22)"
#: the row of the call by the size rule (which ``--old`` compares with another checkout's
#: default call: before issue 35 ``gae`` applied the size rule itself)
DEFAULT_CALL = "gae, the call by the size rule"


def candidates(B: int = 256, T: int = 1024, out: np.ndarray | None = None) -> dict:
    """``{name: zero-argument callable}``: the floor, each stage, and the call by the size rule. The
    stages write into ``out`` ((2, B, T): the advantages, the returns), a new array if None."""
    from benchmarks.core import gae_sized
    from ppo_numpy.fast.gae_blocked import (
        BLOCK,
        _matmul,
        _power_matrix,
        _suffix_sums,
        _td_errors_right_padded,
        right_padded_lengths,
    )

    b = make_batch(B, T, seed=0)
    r, v, m = b.rewards, b.values, np.asarray(b.mask, dtype=bool)
    padding = ~m
    lengths = right_padded_lengths(m)
    if lengths is None:
        raise ValueError("the batch is not right-padded: the stages timed here are its path")
    out = np.empty((2, B, T)) if out is None else out
    delta = _td_errors_right_padded(r, v, 1.0, lengths, padding, np.empty((B, T))).copy()
    W = _power_matrix(0.95, BLOCK)
    d = delta.reshape(-1, BLOCK)
    scratch = np.empty((B, T))

    def returns():
        np.add(out[0], v, out=out[1])
        np.copyto(out[1], 0.0, where=padding)

    def suffix_sums():
        np.copyto(scratch, delta)  # _suffix_sums writes into its input
        return _suffix_sums(scratch, 0.95, BLOCK, out[0])[1]

    def mask_analysis():
        return ~m, right_padded_lengths(m)

    first = suffix_sums()

    return {
        "floor": lambda: r - v,
        "mask analysis": mask_analysis,
        "TD errors": lambda: _td_errors_right_padded(r, v, 1.0, lengths, padding, out[1]),
        "copy of delta (part of the suffix-sums row)": lambda: np.copyto(scratch, delta),
        "suffix sums": suffix_sums,
        "the product d @ W alone": lambda: _matmul(d, W, out[0].reshape(-1, BLOCK)),
        "returns A + V, 0 at padding": returns,
        "finiteness read (the block sums)": lambda: np.isfinite(first.sum()),
        DEFAULT_CALL: lambda: gae_sized(b.rewards, b.values, 1.0, 0.95, b.mask),
    }


def commit_of(checkout: str) -> str:
    """``checkout``'s short commit, else its path."""
    import subprocess

    done = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or checkout


def rows(rounds: int = 15, target: float = 0.02, old: str | None = None) -> list[dict]:
    """``[{"stage", "ms", "passes"}]``: median milliseconds, and the median over the rounds of
    each stage's sample over the floor's sample of the same round. With ``old`` (a
    checkout), one more row, its default call, with ``"over_old"``: this checkout's
    call over it, paired the same way."""
    import statistics

    warm_heap()
    c = candidates()
    if old is not None:
        from benchmarks.targets import load_package

        old_gae = load_package(old, "ppo_numpy_old").gae
        b = make_batch(256, 1024, seed=0)
        c[f"gae of {commit_of(old)}, the default call"] = \
            lambda: old_gae(b.rewards, b.values, 1.0, 0.95, b.mask)
    samples = measure_samples(c, rounds=rounds, target=target)
    out = [{"stage": name, "ms": statistics.median(s) * 1e3,
            "passes": paired_ratio(samples, name, "floor")} for name, s in samples.items()]
    if old is not None:
        out[-1].update(old=commit_of(old),
                       over_old=paired_ratio(samples, DEFAULT_CALL, out[-1]["stage"]))
    return out


def markdown(table: list[dict]) -> list[str]:
    out = ["| stage | ms | streaming passes |", "|---|---:|---:|"]
    out += [f"| {r['stage']} | {r['ms']:.3f} | {r['passes']:.1f} |" for r in table]
    out += [f"\nThis checkout's call over {r['old']}'s default call, paired in the same rounds: "
            f"{r['over_old']:.3f}." for r in table if "over_old" in r]
    return out


def section(table: list[dict]) -> list[str]:
    """The markdown section for ``docs/benchmarks.md``: the command, the machine, the table."""
    from benchmarks.machine import describe

    old = next((f" --old <checkout of {r['old']}>" for r in table if "old" in r), "")
    return [SECTION, "", "Measured with", "", "```bash",
            f".venv/bin/python -m benchmarks.gae_stages{old} --write", "```", "",
            *[f"- {line}" for line in describe()], "",
            "Each stage is the package function the blocked form of `gae` runs on a "
            "right-padded (256, 1024) batch, timed in the same interleaved rounds as the "
            "floor `rewards - values`; *streaming passes*: the median over the rounds of the "
            "stage's time over the floor's time in the same round "
            "(`benchmarks/gae_stages.py`). The suffix sums include a copy of their input "
            "(they write into it), shown on its own row.", "", *markdown(table)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gae_stages",
                                description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--write", action="store_true", help="put the section into "
                                                          "docs/benchmarks.md")
    p.add_argument("--old", metavar="CHECKOUT",
                   help="also time that checkout's default call (e.g. a git worktree)")
    args = p.parse_args(argv)
    code = rerun_with_one_blas_thread("benchmarks.gae_stages",
                                      sys.argv[1:] if argv is None else argv)
    if code is not None:
        return code
    lines = section(rows(args.rounds, old=args.old))
    from benchmarks.targets import show

    show(lines, args.write, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
