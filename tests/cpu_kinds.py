"""Run the numeric tests again as a narrower CPU kind than this machine is (``make
test-cpu-kinds``).

The last bits of a float result depend on the machine's kind: NumPy picks the SIMD loops of
``exp``, ``log``, ``tanh`` and of its reductions by the CPU features it finds at import
(``numpy.show_runtime()``: ``X86_V3`` is AVX2 with FMA, ``X86_V4`` AVX-512, ``AVX512_ICL`` and
``AVX512_SPR`` later AVX-512 extensions), and OpenBLAS picks its matrix kernel by the CPU
(``Haswell`` for AVX2, ``SkylakeX`` for AVX-512, ``Nehalem`` for SSE only) and splits a product
over its threads. Both can be told to act as an older CPU: NumPy leaves out the dispatch
targets named in ``NPY_DISABLE_CPU_FEATURES`` (it cannot leave out its baseline, ``X86_V2``),
and OpenBLAS takes the kernel named in ``OPENBLAS_CORETYPE``. So one machine shows the kinds
below its own, and a test that holds on one kind only fails here instead of on a newcomer's
machine (issue 33: two tests held on AVX2 and failed on AVX-512).

``KINDS`` lists the kinds, widest first. The target runs the test files under each kind
narrower than this machine (``narrower_kinds``), each with the features and kernel it ran
under printed first; on a machine with nothing to turn off it says so and exits 0.

    python -m tests.cpu_kinds            # run every narrower kind (make test-cpu-kinds)
    python -m tests.cpu_kinds --list     # name the kinds, which one this machine is, and stop
    python -m tests.cpu_kinds --drift    # how far the stored long runs' reruns drift, per kind

``--drift`` reruns, under this machine's kind and each narrower one, what the tests rerun of
the stored long runs (the first iterations of each run of ``docs/data/*_exercises.json``, the
first version's 40-iteration training run), and prints the worst difference of each from the
stored numbers, relative to each number (``tests._helpers.RERUN_RTOL`` is set from it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the test files that compute no number: the site in a browser (and the words of the docs),
#: left out of the narrower runs (they take a minute and read no CPU kind)
NOT_NUMERIC = ("test_docs_site.py", "test_docs_links.py", "test_wording.py",
               "test_notebook_wording.py")
#: and the tests that hold a notebook's stated run time against its run: a wall clock, which
#: two BLAS threads per worker on a loaded machine stretch (notebook 12: 110 s for about 15)
NOT_NUMERIC_TESTS = "states_its_run_time"


@dataclass(frozen=True)
class Kind:
    """A CPU kind as NumPy and OpenBLAS see it.

    ``level`` is NumPy's dispatch target the kind has at most (``X86_V4`` AVX-512, ``X86_V3``
    AVX2, ``X86_V2`` the baseline); ``disable`` the targets turned off to act as it;
    ``coretype`` the OpenBLAS kernel; ``threads`` OpenBLAS's thread count.
    """

    name: str
    level: str
    disable: tuple[str, ...]
    coretype: str
    threads: int

    def environment(self) -> dict:
        env = {"OPENBLAS_CORETYPE": self.coretype, "OPENBLAS_NUM_THREADS": str(self.threads)}
        if self.disable:
            env["NPY_DISABLE_CPU_FEATURES"] = " ".join(self.disable)
        return env


_AVX512 = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
KINDS = (
    Kind("AVX-512 (x86-64-v4), OpenBLAS SkylakeX, 1 thread", "X86_V4", (), "SkylakeX", 1),
    Kind("AVX2 (x86-64-v3), OpenBLAS Haswell, 1 thread", "X86_V3", _AVX512, "Haswell", 1),
    Kind("SSE4.2 (x86-64-v2), OpenBLAS Nehalem, 2 threads", "X86_V2",
         ("X86_V3",) + _AVX512, "Nehalem", 2),
)


def machine_level(features: dict | None = None) -> str:
    """This machine's widest dispatch target of ``KINDS`` (``X86_V2`` if neither wider one)."""
    if features is None:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    for level in ("X86_V4", "X86_V3"):
        if features.get(level):
            return level
    return "X86_V2"


def narrower_kinds(level: str) -> list[Kind]:
    """The kinds of ``KINDS`` below ``level`` (none below the baseline ``X86_V2``)."""
    order = [k.level for k in KINDS]
    if level not in order:
        raise ValueError(f"level: expected one of {order}, got {level!r}")
    return [k for k in KINDS if order.index(k.level) > order.index(level)]


def test_files() -> list[str]:
    """Every test file of ``tests/`` but those in ``NOT_NUMERIC``."""
    return sorted(f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")
                  if p.name not in NOT_NUMERIC)


#: NumPy 2.4's dispatch targets on x86-64 (``numpy.show_runtime()``'s "found")
TARGETS = ("X86_V2", "X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR")
_SHOW = ("from ppo_numpy._machine import cpu_kind; k = cpu_kind(); "
         f"print('  NumPy dispatches:', ' '.join(f for f in {TARGETS!r} "
         "if f in k['cpu_features'])); "
         "print('  OpenBLAS kernel:', k['openblas_core'])")


def run(kind: Kind, files: list[str], workers: str) -> int:
    """Print the kind and what NumPy and OpenBLAS report under it, then run pytest."""
    env = {**os.environ, **kind.environment()}
    print(f"== {kind.name}", flush=True)
    for key, value in kind.environment().items():
        print(f"  {key}={value}")
    subprocess.run([sys.executable, "-c", _SHOW], env=env, cwd=ROOT, check=True)
    sys.stdout.flush()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
           "--dist", "loadfile", "-k", f"not {NOT_NUMERIC_TESTS}", *files]
    return subprocess.run(cmd, env=env, cwd=ROOT).returncode


def drift_here() -> dict:
    """The worst relative difference (floor ``RERUN_ATOL``) of each stored long run's rerun,
    on this process's kind: {source: (worst, where)}."""
    import csv
    import json

    from ppo_numpy.programs import overoptimisation, train
    from ppo_numpy.training import PPOConfig
    from ppo_numpy.training import train as train_run
    from tests._helpers import RERUN_RTOL, row_drift

    out = {}
    for program, k, file in ((overoptimisation, 5, "overoptimisation_exercises.json"),
                             (train, 3, "training_exercises.json")):
        stored = json.loads((ROOT / "docs" / "data" / file).read_text())
        for name in program.EXERCISES:
            old = stored["runs"][name]
            fresh = json.loads(program.exercises_json(
                program.run_exercises(iterations=k, names=(name,))))["runs"][name]
            pairs = [(fresh.get("heldout", {}), old.get("heldout", {}))]
            key = (lambda r: (r["beta"], r["iteration"])) if "beta" in old["rows"][0] else None
            if key:
                index = {key(r): r for r in old["rows"]}
                pairs += [(r, index[key(r)]) for r in fresh["rows"]]
            else:
                n, runs = old["iterations"], len(old["rows"]) // old["iterations"]
                pairs += [(fresh["rows"][j * k + i], old["rows"][j * n + i])
                          for j in range(runs) for i in range(k)]
            worst = max(((row_drift(a, b), a.get("iteration", "fit")) for a, b in pairs),
                        key=lambda w: w[0])
            out[f"{file}: {name} ({k} it.)"] = (
                worst[0] * RERUN_RTOL, f"iteration {worst[1]}")
    v1 = ROOT / "tests" / "data" / "v1"
    config = PPOConfig(**{"value_hidden": 0, **json.loads((v1 / "config.json").read_text())})
    history = train_run(config, plot=False)
    with open(v1 / "metrics.csv", newline="") as f:
        old = list(csv.DictReader(f))
    worst = max(((abs(float(new[c]) - float(t)) / max(abs(float(t)), 1e-12), r["iteration"])
                 for new, r in zip(history, old) for c, t in r.items()), key=lambda w: w[0])
    out["v1 training run (40 it.)"] = (worst[0], f"iteration {worst[1]}")
    return out


def drift(kinds: list[Kind]) -> int:
    """Print ``drift_here`` under each kind, each in a fresh process."""
    for kind in kinds:
        env = {**os.environ, **kind.environment()}
        print(f"== {kind.name}", flush=True)
        code = ("import json; from tests.cpu_kinds import drift_here; "
                "print(json.dumps(drift_here()))")
        res = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                             capture_output=True, text=True, check=True)
        for source, (worst, where) in json.loads(res.stdout.splitlines()[-1]).items():
            print(f"  {worst:9.2e}  {source}, worst at {where}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cpu_kinds", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="name the kinds and stop")
    parser.add_argument("--drift", action="store_true",
                        help="the stored long runs' reruns against the stored numbers, per kind")
    parser.add_argument("--workers", default=os.environ.get("TEST_WORKERS", "auto"),
                        help="pytest-xdist workers (0: one process)")
    args = parser.parse_args(argv)
    level = machine_level()
    own = next(k for k in KINDS if k.level == level)
    narrower = narrower_kinds(level)
    print(f"this machine: {own.name.split(',')[0]} (NumPy's widest target {level})")
    if not narrower:
        print("nothing to turn off: x86-64-v2 is NumPy's baseline; no narrower kind to run")
        return 0
    if args.drift:
        return drift([own, *narrower])
    print("narrower kinds:", "; ".join(k.name for k in narrower))
    if args.list:
        return 0
    failed = [k.name for k in narrower if run(k, test_files(), args.workers) != 0]
    print("failed under: " + "; ".join(failed) if failed else
          f"passed under every narrower kind ({len(narrower)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
