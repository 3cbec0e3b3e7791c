"""How long one diagnosis takes on a preset's default cases (docs/oracle.md, issue 23).

    python -m benchmarks.diagnose_speed [--repeats 3]

Per preset: a candidate with one convention planted (the preset run with its first
registered switch flipped: named by a single switch) and one with a bug that is no
convention (dlogp 1.5 times too large: every single switch and every pair is tried), each
diagnosed on the preset's default cases (seed 0, probes 8); the median of ``--repeats``
runs, and the number of settings tried.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ppo_numpy.oracle.diagnose import diagnose
from ppo_numpy.oracle.group_cases import cases_for
from ppo_numpy.oracle.presets import PRESETS
from ppo_numpy.oracle.switches import switches_for


def candidates(preset, cases):
    switches = switches_for(preset, cases)

    def bug(case):
        out = dict(preset(case))
        out["dlogp"] = out["dlogp"] * 1.5
        return out

    if not switches:  # (a preset with no registered switch)
        return {"dlogp x 1.5": bug}
    param, (alts, _) = next(iter(switches.items()))

    def planted(case):
        return preset(case, **{param: alts[0]})

    return {f"{param}={alts[0]!r}": planted, "dlogp x 1.5": bug}


def measure(repeats: int) -> list:
    rows = []
    for name, preset in PRESETS.items():
        cases = cases_for(preset, 0)
        for label, candidate in candidates(preset, cases).items():
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                d = diagnose(candidate, preset, cases)
                times.append(time.perf_counter() - start)
            rows.append((name, len(cases), label, d.tried, statistics.median(times)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print("| preset | cases | planted | settings tried | median s |")
    print("|---|---|---|---|---|")
    for name, n, label, tried, t in measure(args.repeats):
        print(f"| `{name}` | {n} | {label} | {tried} | {t:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
