"""How long one diagnosis takes on a preset's default cases (docs/oracle.md, issue 23).

    python -m benchmarks.diagnose_speed [--repeats 3]

Per preset: a candidate with one convention planted (the preset run with its first
registered switch flipped: named by a single switch) and one with a bug that is no
convention (dlogp 1.5 times too large: every single switch and every pair is tried), each
diagnosed on the preset's default cases (seed 0, probes 8); the median of ``--repeats``
runs, and the number of settings tried. For a preset with the third policy's switches
(issue 36) also its first such switch planted, and the importance weight inverted (the
preset on the cases with logp_rollout mirrored about logp_old: pi_rollout / pi_old, a bug
that is no convention).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from ppo_numpy.oracle.diagnose import diagnose
from ppo_numpy.oracle.group_cases import cases_for
from ppo_numpy.oracle.presets import PRESETS
from ppo_numpy.oracle.switches import SWITCHES, switches_for


def candidates(preset, cases):
    switches = switches_for(preset, cases)

    def bug(case):
        out = dict(preset(case))
        out["dlogp"] = out["dlogp"] * 1.5
        return out

    if not switches:  # (a preset with no registered switch)
        return {"dlogp x 1.5": bug}
    out = {}
    third = [p for p in switches if SWITCHES[p].kind == "third policy"]
    for param in [next(iter(switches))] + third[:1]:
        value = switches[param][0][0]
        out[f"{param}={value!r}"] = _planted(preset, param, value)
    out["dlogp x 1.5"] = bug
    if third:
        def inverted(case):
            x = case["inputs"]
            if "logp_rollout" not in x:
                return preset(case)
            mirrored = 2 * np.asarray(x["logp_old"]) - np.asarray(x["logp_rollout"])
            return preset({**case, "inputs": {**x, "logp_rollout": mirrored}})

        out["weights inverted"] = inverted
    return out


def _planted(preset, param, value):
    def planted(case):
        return preset(case, **{param: value})
    return planted


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
    print(f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, median of "
          f"{args.repeats})")
    print("| preset | cases | planted | settings tried | median s |")
    print("|---|---|---|---|---|")
    for name, n, label, tried, t in measure(args.repeats):
        print(f"| `{name}` | {n} | {label} | {tried} | {t:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
