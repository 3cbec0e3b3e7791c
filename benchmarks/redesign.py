"""``python -m benchmarks.redesign --old PATH``: the redesign of issue 12, old and new side by side.

Times the code of two checkouts in one run: ``--old`` (the code before the redesign,
e.g. a worktree of 2178b48) and ``--new`` (default: this checkout). Each round is a
fresh child process that imports both: the new checkout's package as ``ppo_numpy``, the
old one's as ``ppo_numpy_old`` (:func:`load_package`; the package's own imports are
relative, so each copy uses its own modules; ``__file__`` of each is checked to lie in
its checkout). In the child, after a warm-up, the candidates (old, new, torch) are timed
in interleaved samples (sample j of every candidate taken one after the other; each
sample many calls, about ``--target`` seconds; garbage collection off). Times quoted:
the median of all samples of all rounds. Ratios quoted (old / new, torch / new): the
median over rounds and j of the ratio of the two candidates' sample j, timings taken
milliseconds apart in one process, which the machine's drift affects least.

Three tasks:

* ``training``: one default training iteration, ``ppo_iteration(new_run(PPOConfig()))``
  after ``WARM_ITERATIONS`` warm-up iterations;
* ``pipeline``: KL-shaped rewards -> GAE -> whiten -> policy loss, statistics and
  gradient at (8, 128) and (64, 256). Old: the public functions, as
  ``benchmarks.core.ours_pipeline``. New: the same public functions, and the
  validated-once path (a ``Rollout`` checked once, then the kernels and one
  ``policy_loss_kernel`` for loss, statistics and gradient), with the ``Rollout``
  built inside the timed call (``rollout+kernels``) and outside it (``kernels``);
* ``functions``: ``td_errors``, ``kl_shaped_rewards``, ``whiten`` and
  ``clipped_surrogate``, public functions with their checks, at B T = 65536, 262144
  and 1048576, beside ``benchmarks/torch_impl.py`` in the new child (torch with its
  default intra-op threads and with ``torch.set_num_threads(1)``, interleaved).

Every child runs with ``OPENBLAS_NUM_THREADS=1`` (as ``make demo`` and ``make test``
run the code). ``--write`` puts the tables into docs/benchmarks.md, in the section
that ``python -m benchmarks`` keeps when it regenerates the page.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
SECTION = "## The redesign (issue 12): before and after, side by side"

PIPELINE_GRID = ((8, 128), (64, 256))
FUNCTION_GRID = ((64, 1024), (256, 1024), (256, 4096))
FUNCTIONS = ("td_errors", "kl_shaped_rewards", "whiten", "clipped_surrogate")
WARM_ITERATIONS = 3
ITERATIONS = 15
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1"}


# --------------------------------------------------------------------------- child side

def _load(name: str):
    """benchmarks/<name>.py of *this* checkout, under a private module name: the child's
    ``benchmarks`` package may be the other checkout's."""
    spec = importlib.util.spec_from_file_location(f"_redesign_{name}",
                                                  os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _calls(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def time_candidates(candidates: dict, *, samples: int, target: float) -> dict:
    """Seconds per call of each candidate, a list of ``samples`` interleaved samples each
    (sample j of every candidate is taken in the same pass, one after the other).

    ``candidates`` maps a name to ``fn`` or ``(fn, before)``: ``before()`` runs untimed
    before each sample of ``fn`` (e.g. to set torch's threads)."""
    live = {}
    for name, c in candidates.items():
        fn, before = c if isinstance(c, tuple) else (c, None)
        live[name] = (fn, before or (lambda: None))
    numbers = {}
    for name, (fn, before) in live.items():
        before()
        fn()  # warm
        number = 1
        while True:
            elapsed = _calls(fn, number)
            if elapsed >= target or number >= 10_000:
                break
            number = min(10_000, number * max(2, min(10, int(target / max(elapsed, 1e-9)) + 1)))
        numbers[name] = number
    times = {name: [] for name in live}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(samples):
            for name, (fn, before) in live.items():
                before()
                times[name].append(_calls(fn, numbers[name]) / numbers[name])
    finally:
        if enabled:
            gc.enable()
    return times


def load_package(checkout: str, name: str):
    """``checkout``/ppo_numpy imported under the top-level name ``name`` (its imports inside
    the package are relative, so they resolve within that copy)."""
    root = os.path.join(checkout, "ppo_numpy")
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _training_task(spec, pkgs) -> dict:
    import importlib as il

    states, steps = {}, {}
    for variant, pkg in pkgs.items():
        config = il.import_module(pkg.__name__ + ".training.config")
        loop = il.import_module(pkg.__name__ + ".training.loop")
        states[variant] = loop.new_run(config.PPOConfig())
        steps[variant] = loop.ppo_iteration
    for _ in range(spec.get("warm", WARM_ITERATIONS)):
        for variant in pkgs:
            steps[variant](states[variant])
    ts = {variant: [] for variant in pkgs}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(spec.get("iterations", ITERATIONS)):
            # alternate which version goes first
            for variant in (list(pkgs) if i % 2 == 0 else list(pkgs)[::-1]):
                start = time.perf_counter()
                steps[variant](states[variant])
                ts[variant].append(time.perf_counter() - start)
    finally:
        if enabled:
            gc.enable()
    return {f"{variant}: training iteration": v for variant, v in ts.items()}


def public_pipeline(P, b, p):
    """The pipeline of public functions of package ``P``, as ``benchmarks.core.ours_pipeline``
    writes it."""
    rewards = P.kl_shaped_rewards(b.scores, b.logp_old, b.logp_ref, p["beta"], b.mask)
    advantages, returns = P.gae(rewards, b.values, p["gamma"], p["lam"], b.mask)
    advantages = P.whiten(advantages, b.mask)
    loss, stats = P.ppo_policy_loss(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    dlogp = P.policy_loss_grad(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    return loss, stats, dlogp, returns


def public_pipeline_one_loss(P, b, p):
    """The public pipeline with the loss and its gradient from one call
    (``policy_loss_and_grad``, new code only)."""
    rewards = P.kl_shaped_rewards(b.scores, b.logp_old, b.logp_ref, p["beta"], b.mask)
    advantages, returns = P.gae(rewards, b.values, p["gamma"], p["lam"], b.mask)
    advantages = P.whiten(advantages, b.mask)
    loss, stats, dlogp = P.policy_loss_and_grad(b.logp, b.logp_old, advantages, b.mask,
                                                p["epsilon"])
    return loss, stats, dlogp, returns


def make_rollout(P, b):
    return P.rollout.Rollout(mask=b.mask, logp=b.logp, logp_old=b.logp_old,
                             logp_ref=b.logp_ref, values=b.values, scores=b.scores)


def kernel_pipeline(P, r, p, opts):
    """The validated-once pipeline on a checked ``Rollout`` ``r``: kernels, one PolicyLoss."""
    kl = P.kl.kl_estimate_kernel(r.logp_old, r.logp_ref, "k1")
    rewards = P.kl.kl_shaped_rewards_kernel(r.scores, kl, r.mask, float(p["beta"]))
    # gae_kernel makes its values argument the returns: give it its own copy
    advantages, returns = P.gae_module.gae_kernel(rewards, r.values.copy(), float(p["gamma"]),
                                                  float(p["lam"]), r.mask)
    advantages = P.whitening.whiten_kernel(advantages, r.mask)
    out = P.objective.policy_loss_kernel(r.logp, r.logp_old, advantages, r.mask, opts)
    return out.loss, out.stats(), out.dlogp, returns


def _same(x, y) -> bool:
    import numpy as np

    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y))
    x, y = np.asarray(x), np.asarray(y)
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


class _Modules:
    """The submodules the kernel pipeline uses, of package ``pkg``."""

    def __init__(self, pkg):
        import importlib as il

        self.pkg = pkg
        for attr, mod in (("rollout", "rollout"), ("kl", "kl"), ("gae_module", "gae"),
                          ("whitening", "whitening"), ("objective", "objective"),
                          ("loss_options", "loss_options")):
            setattr(self, attr, il.import_module(f"{pkg.__name__}.{mod}"))


def _pipeline_task(spec, pkgs) -> dict:
    data = _load("data")
    p = spec["params"]
    out = {}
    for B, T in spec["grid"]:
        b = data.make_batch(B, T)
        want = public_pipeline(pkgs["old"], b, p)
        cands = {}
        for variant, P in pkgs.items():
            if not _same(public_pipeline(P, b, p), want):
                raise AssertionError(f"({B}, {T}): {variant}'s pipeline differs from old's")
            cands[f"{variant}: pipeline ({B}, {T}) public"] = lambda P=P, b=b: public_pipeline(
                P, b, p)
        new = pkgs["new"]
        if not _same(public_pipeline_one_loss(new, b, p), want):
            raise AssertionError(f"({B}, {T}): the one-call public pipeline differs from old's")
        cands[f"new: pipeline ({B}, {T}) public, one loss call"] = (
            lambda b=b, new=new: public_pipeline_one_loss(new, b, p))
        M = _Modules(new)
        opts = M.loss_options.PolicyLossOptions(epsilon=p["epsilon"])
        r = make_rollout(M, b)
        if not _same(kernel_pipeline(M, r, p, opts), want):
            raise AssertionError(f"({B}, {T}): the kernel pipeline differs from old's")
        cands[f"new: pipeline ({B}, {T}) rollout+kernels"] = (
            lambda b=b, o=opts, M=M: kernel_pipeline(M, make_rollout(M, b), p, o))
        cands[f"new: pipeline ({B}, {T}) kernels"] = lambda r=r, o=opts, M=M: kernel_pipeline(
            M, r, p, o)
        out.update(time_candidates(cands, samples=spec["samples"], target=spec["target"]))
    return out


def _functions_task(spec, pkgs) -> dict:
    data = _load("data")
    p = spec["params"]
    ti = None
    if spec.get("torch"):
        ti = _load("torch_impl")
        if not ti.available():
            ti = None
    if ti is not None:
        import torch

        default_threads = torch.get_num_threads()
    out = {}
    for B, T in spec["grid"]:
        b = data.make_batch(B, T)
        t = ti.as_tensors(b) if ti is not None else None
        for name in spec["functions"]:
            cands = {}
            for variant, P in pkgs.items():
                cands[f"{variant}: {name} ({B}, {T})"] = {
                    "td_errors": lambda P=P, b=b: P.td_errors(b.rewards, b.values, p["gamma"],
                                                         b.mask),
                    "kl_shaped_rewards": lambda P=P, b=b: P.kl_shaped_rewards(
                        b.scores, b.logp, b.logp_ref, p["beta"], b.mask),
                    "whiten": lambda P=P, b=b: P.whiten(b.advantages, b.mask),
                    "clipped_surrogate": lambda P=P, b=b: P.clipped_surrogate(
                        b.rho, b.advantages, p["epsilon"], mask=b.mask),
                }[name]
            if ti is not None:
                fn = {
                    "td_errors": lambda t=t: ti.td_errors_torch(t["rewards"], t["values"],
                                                            p["gamma"], t["mask"]),
                    "kl_shaped_rewards": lambda t=t: ti.kl_shaped_rewards_torch(
                        t["scores"], t["logp"], t["logp_ref"], p["beta"], t["mask"]),
                    "whiten": lambda t=t: ti.whiten_torch(t["advantages"], t["mask"]),
                    "clipped_surrogate": lambda t=t: ti.clipped_surrogate_torch(
                        t["rho"], t["advantages"], p["epsilon"], t["mask"]),
                }[name]
                cands[f"torch: {name} ({B}, {T})"] = (
                    fn, lambda: torch.set_num_threads(default_threads))
                cands[f"torch 1 thread: {name} ({B}, {T})"] = (
                    fn, lambda: torch.set_num_threads(1))
            out.update(time_candidates(cands, samples=spec["samples"], target=spec["target"]))
    if ti is not None:
        out["torch default threads"] = default_threads
    return out


def _cold_pipeline_task(spec, pkgs) -> dict:
    """The public pipeline of the one version this child imported, in a process whose heap
    was never warmed (``child_main`` skips ``warm_heap`` for this task): each call pays
    the page faults glibc's default thresholds give (``benchmarks/timing.py``)."""
    data = _load("data")
    p = spec["params"]
    (variant, P), = pkgs.items()
    cands = {}
    for B, T in spec["grid"]:
        b = data.make_batch(B, T)
        cands[f"{variant}: pipeline ({B}, {T}) public"] = (
            lambda P=P, b=b: public_pipeline(P, b, p))
    return time_candidates(cands, samples=spec["samples"], target=spec["target"])


TASKS = {"training": _training_task, "pipeline": _pipeline_task, "functions": _functions_task,
         "pipeline-cold": _cold_pipeline_task}


def child_main(spec: dict) -> dict:
    """Run one task in this process: the new checkout's package as ``ppo_numpy``, the old
    one's as ``ppo_numpy_old``, each checked to come from its checkout."""
    pkgs, files = {}, {}
    for variant, name in (("old", "ppo_numpy_old"), ("new", "ppo_numpy")):
        if spec.get("only", variant) != variant:
            continue
        checkout = os.path.realpath(spec[variant])
        pkg = load_package(checkout, name)
        where = os.path.realpath(pkg.__file__)
        if not where.startswith(checkout + os.sep):
            raise RuntimeError(f"{name} imported from {where}, not from {checkout}")
        pkgs[variant], files[variant] = pkg, where
    if spec["task"] != "pipeline-cold":
        _load("timing").warm_heap()
    return {"files": files, "times": TASKS[spec["task"]](spec, pkgs)}


# -------------------------------------------------------------------------- parent side

def run_child(spec: dict, *, timeout=900) -> dict:
    """Run :func:`child_main` in a fresh interpreter (cwd: a directory of neither checkout)."""
    import tempfile

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(CHILD_ENV)
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                               json.dumps(spec)], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"child {spec['task']} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def side_by_side(task: str, old: str, new: str, *, rounds: int, spec: dict,
                 progress=None) -> dict:
    """``{"old": {name: s}, "new": {...}, "torch": ..., "files": ...}``: the median over
    ``rounds`` fresh child processes, each timing old and new interleaved."""
    per = []
    files = {}
    for i in range(rounds):
        if task == "pipeline-cold":
            # one version per child, the order alternating from round to round
            times = {}
            for only in ("old", "new") if i % 2 == 0 else ("new", "old"):
                result = run_child({**spec, "task": task, "old": old, "new": new,
                                    "only": only})
                files.update(result["files"])
                times.update(result["times"])
        else:
            result = run_child({**spec, "task": task, "old": old, "new": new})
            files, times = result["files"], result["times"]
        per.append(times)
        if progress:
            progress(f"{task}: round {i + 1}/{rounds}")
    out = {"files": files, "rounds": rounds, "per_round": per,
           **{k: spec[k] for k in ("grid", "functions", "iterations", "warm") if k in spec}}
    for key in per[0]:
        variant, _, name = key.partition(": ")
        if not name:
            out[key] = per[0][key]
            continue
        # the median of every sample of every round
        out.setdefault(variant, {})[name] = statistics.median(x for r in per for x in r[key])
    return out


def paired_ratio(res, a: str, b: str) -> float | None:
    """Median over rounds and samples of a's sample / b's sample taken just after or before
    it in the same child (``a``, ``b``: keys such as ``"old: whiten (64, 1024)"``)."""
    ratios = [x / y for r in res["per_round"] if a in r and b in r
              for x, y in zip(r[a], r[b])]
    return statistics.median(ratios) if ratios else None


def measure_all(old: str, new: str, *, rounds=5, samples=15, target=0.005,
                pipeline_grid=PIPELINE_GRID, function_grid=FUNCTION_GRID, functions=FUNCTIONS,
                iterations=ITERATIONS, warm=WARM_ITERATIONS, use_torch=True,
                tasks=("training", "pipeline", "pipeline-cold", "functions"), progress=None):
    from benchmarks.core import PARAMS

    common = {"params": PARAMS, "samples": samples, "target": target}
    specs = {
        "training": {**common, "iterations": iterations, "warm": warm},
        "pipeline": {**common, "grid": [list(g) for g in pipeline_grid]},
        "pipeline-cold": {**common, "grid": [list(g) for g in pipeline_grid]},
        "functions": {**common, "grid": [list(g) for g in function_grid],
                      "functions": list(functions), "torch": use_torch},
    }
    return {task: side_by_side(task, old, new, rounds=rounds, spec=specs[task],
                               progress=progress) for task in tasks}


# rows: dicts with the figures of one table line

def training_rows(res) -> list[dict]:
    o, n = res["old"]["training iteration"], res["new"]["training iteration"]
    x = paired_ratio(res, "old: training iteration", "new: training iteration")
    return [{"what": "one default training iteration", "old": o, "new": n,
             "speedup": x, "met": x >= 1 / 0.85}]


def pipeline_rows(res) -> list[dict]:
    rows = []
    for B, T in res.get("grid", PIPELINE_GRID):
        o = res["old"][f"pipeline ({B}, {T}) public"]
        for kind in ("public", "public, one loss call", "rollout+kernels", "kernels"):
            n = res["new"].get(f"pipeline ({B}, {T}) {kind}")
            if n is not None:
                x = paired_ratio(res, f"old: pipeline ({B}, {T}) public",
                                 f"new: pipeline ({B}, {T}) {kind}")
                rows.append({"B": B, "T": T, "new path": kind, "old": o, "new": n,
                             "speedup": x, "met": x >= 1.5})
    return rows


def cold_rows(res) -> list[dict]:
    """Old and new each in its own processes: the ratio of the medians (no pairing)."""
    rows = []
    for B, T in res.get("grid", PIPELINE_GRID):
        o, n = res["old"][f"pipeline ({B}, {T}) public"], res["new"][f"pipeline ({B}, {T}) public"]
        rows.append({"B": B, "T": T, "old": o, "new": n, "speedup": o / n, "met": o / n >= 1.5})
    return rows


def function_rows(res) -> list[dict]:
    rows = []
    for name in res.get("functions", FUNCTIONS):
        for B, T in res.get("grid", FUNCTION_GRID):
            key = f"{name} ({B}, {T})"
            t_def = res.get("torch", {}).get(key)
            t_one = res.get("torch 1 thread", {}).get(key)
            x_def = paired_ratio(res, f"torch: {key}", f"new: {key}")
            x_one = paired_ratio(res, f"torch 1 thread: {key}", f"new: {key}")
            rows.append({"function": name, "B": B, "T": T, "old": res["old"][key],
                         "new": res["new"][key],
                         "speedup": paired_ratio(res, f"old: {key}", f"new: {key}"),
                         "torch": t_def, "torch1": t_one, "torch/new": x_def,
                         "torch1/new": x_one,
                         # like with like, as benchmarks/core.py has always timed torch (the
                         # 0.5-0.9x the issue quotes): one intra-op thread, NumPy's one core
                         "met": None if x_one is None else x_one >= 1.0})
    return rows


def _ms(s):
    return "–" if s is None else f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.2f}"


def _x(r):
    return "–" if r is None else f"{r:.2f}x"


def _yes(ok):
    return "–" if ok is None else "yes" if ok else "no"


def markdown(results, *, command, machine, old, new) -> list[str]:
    out = [SECTION, "",
           "Written by `benchmarks/redesign.py` (not by `python -m benchmarks`, which keeps "
           "this section as it is when it regenerates the page above). Reproduce with:", "",
           "```bash", command, "```", "",
           f"Old: {old}; new: {new}. " + " ".join(machine), "",
           "Method: a round is one fresh child process "
           "that imports both checkouts (new as `ppo_numpy`, old as `ppo_numpy_old`, each "
           "checked by its `__file__`), warms up, and times old, new and torch in "
           "interleaved samples (sample j of each candidate one after the other, each "
           "sample many calls). Times: the median of all samples of all rounds. Ratios: "
           "the median over all (round, j) of old's sample j / new's sample j (torch's / "
           "new's), so each ratio compares timings taken milliseconds apart in one process. "
           "`OPENBLAS_NUM_THREADS=1` in every child. A ratio > 1 means the new code is "
           "faster.", "",
           "Why here: `python -m benchmarks` (`make bench`) writes the page above this "
           "heading and keeps this section as it is (`benchmarks/__main__.py`, `_kept`), "
           "since these figures need the old checkout, which `make bench` does not have. "
           "The checkouts: `git worktree add --detach /work/wt/old 2178b48` (and, for the "
           "code-lines table, `1e331a3`, the redesign alone, `95b143e`, the features "
           "built on it, and `32aa162`, before the second clean-up, the same way: "
           "`/tmp/wt-1e331a3`, `/tmp/wt-95`, `/tmp/wt-32`).", "",
           *targets(results), ""]
    if "training" in results:
        out += ["### One default training iteration", "",
                f"`new_run(PPOConfig())` of each version, {results['training'].get('warm')} "
                f"warm-up iterations each, then {results['training'].get('iterations')} "
                "`ppo_iteration` calls of each, alternating (median per child). "
                "Target: at least 15 % faster "
                "(old / new >= 1.18).", "",
                "| | old ms | new ms | old / new | met |", "|---|---:|---:|---:|---|"]
        for r in training_rows(results["training"]):
            out.append(f"| {r['what']} | {_ms(r['old'])} | {_ms(r['new'])} "
                       f"| {_x(r['speedup'])} | {_yes(r['met'])} |")
        out.append("")
    if "pipeline" in results:
        out += ["### Full pipeline", "",
                "KL-shaped rewards (k1) -> GAE -> whiten -> policy loss, its statistics and "
                "its gradient. Old: the public functions (`benchmarks.core.ours_pipeline`). "
                "New `public`: the same calls on the new code. New `rollout+kernels`: a "
                "`Rollout` built and checked in the call, then `kl_estimate_kernel`, "
                "`kl_shaped_rewards_kernel`, `gae_kernel`, `whiten_kernel` and one "
                "`policy_loss_kernel` (loss, statistics and gradient from one object); "
                "`kernels`: the same with the `Rollout` built once outside the timed call. "
                "Outputs of the new paths are checked bit-identical to each other before "
                "timing. Target: old / new >= 1.5.", "",
                "| B | T | new path | old ms | new ms | old / new | met |",
                "|---:|---:|---|---:|---:|---:|---|"]
        for r in pipeline_rows(results["pipeline"]):
            out.append(f"| {r['B']} | {r['T']} | {r['new path']} | {_ms(r['old'])} "
                       f"| {_ms(r['new'])} | {_x(r['speedup'])} | {_yes(r['met'])} |")
        out.append("")
    if "pipeline-cold" in results:
        out += ["### Full pipeline in a cold process", "",
                "The public pipeline as above, but each round runs old and new in separate "
                "fresh child processes (the order alternating) that never warm the heap: "
                "at (64, 256) every array is 128 KiB, glibc's default mmap threshold, and "
                "the memory a call frees goes back to the system, so the next call pays page "
                "faults (the page's method: `warm_heap`). Ratio: median old / median new.", "",
                "| B | T | old ms | new ms | old / new | met |", "|---:|---:|---:|---:|---:|---|"]
        for r in cold_rows(results["pipeline-cold"]):
            out.append(f"| {r['B']} | {r['T']} | {_ms(r['old'])} | {_ms(r['new'])} "
                       f"| {_x(r['speedup'])} | {_yes(r['met'])} |")
        out.append("")
    if "functions" in results:
        threads = results["functions"].get("torch default threads")
        out += ["### Core functions against PyTorch on CPU", "",
                "Public functions with their checks (as `python -m benchmarks` calls them) "
                "against `benchmarks/torch_impl.py` on float64 CPU tensors, torch timed in "
                f"the same child with its default {threads} intra-op threads and with "
                "`torch.set_num_threads(1)` (NumPy's elementwise operations use one core), "
                "interleaved. Target: no slower than torch at B T >= 65536 "
                "(met: torch / new >= 1 with torch on one thread, as `benchmarks/core.py` "
                "times it and as the issue's 0.5-0.9x were measured: NumPy's elementwise "
                "operations run on one core; with its default threads torch uses both "
                "cores of this machine).", "",
                "| function | B | T | old ms | new ms | old / new | torch ms "
                f"({threads} threads) | torch / new | torch ms (1 thread) | torch 1 / new "
                "| met |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in function_rows(results["functions"]):
            out.append(f"| {r['function']} | {r['B']} | {r['T']} | {_ms(r['old'])} "
                       f"| {_ms(r['new'])} | {_x(r['speedup'])} | {_ms(r['torch'])} "
                       f"| {_x(r['torch/new'])} | {_ms(r['torch1'])} | {_x(r['torch1/new'])} "
                       f"| {_yes(r['met'])} |")
        out.append("")
    return out


def targets(results) -> list[str]:
    """The issue's measurable targets, each with this run's figure (paired ratios)."""
    out = ["### Targets of issue 12", "", "| target | measured in this run | met |",
           "|---|---|---|"]
    if "training" in results:
        (r,) = training_rows(results["training"])
        out.append(f"| one default training iteration at least 15 % faster (old / new >= "
                   f"1.18) | {_x(r['speedup'])} ({_ms(r['old'])} -> {_ms(r['new'])} ms) "
                   f"| {_yes(r['met'])} |")
    if "pipeline" in results:
        rows = pipeline_rows(results["pipeline"])
        for kind, what in (("public", "public functions (loss and gradient: two calls)"),
                           ("public, one loss call",
                            "public functions, `policy_loss_and_grad` (one call)"),
                           ("rollout+kernels", "validated once: Rollout + kernels")):
            sel = [r for r in rows if r["new path"] == kind]
            text = ", ".join(f"({r['B']}, {r['T']}) {_x(r['speedup'])}" for r in sel)
            out.append(f"| full pipeline at least 1.5x faster, {what} | {text} "
                       f"| {_yes(all(r['met'] for r in sel))} |")
    if "pipeline-cold" in results:
        sel = cold_rows(results["pipeline-cold"])
        text = ", ".join(f"({r['B']}, {r['T']}) {_x(r['speedup'])}" for r in sel)
        out.append(f"| the same, public functions (two calls), in cold processes | {text} "
                   f"| {_yes(all(r['met'] for r in sel))} |")
    if "functions" in results:
        rows = function_rows(results["functions"])
        for name in results["functions"].get("functions", FUNCTIONS):
            sel = [r for r in rows if r["function"] == name]
            if sel[0]["torch/new"] is None:
                continue
            text = "; ".join(f"({r['B']}, {r['T']}) {_x(r['torch/new'])} / "
                             f"{_x(r['torch1/new'])}" for r in sel)
            out.append(f"| `{name}` no slower than torch at B T >= 65536 (torch / new, "
                       f"default threads / 1 thread; met: 1 thread) | {text} "
                       f"| {_yes(all(r['met'] for r in sel))} |")
    return out


def write_section(lines: list[str], path: str = DOC) -> None:
    """Replace (or append) this section of ``path``: from its heading to the file's end."""
    with open(path) as f:
        text = f.read()
    head = text.split("\n" + SECTION, 1)[0].rstrip("\n")
    with open(path, "w") as f:
        f.write(head + "\n\n" + "\n".join(lines).rstrip("\n") + "\n")


def _machine() -> list[str]:
    try:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    return [f"Machine: {os.cpu_count()} logical cores (nproc), load average (1, 5, 15 min) "
            f"{load} at the start of the run."]


def _commit(path: str) -> str:
    """The short commit of a checkout, with "+ changes" if its ppo_numpy/ differs from it."""
    try:
        head = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "ppo_numpy"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return head + (" + uncommitted changes" if dirty else "")


def redesign_net(totals: dict, features: str) -> list[str]:
    """The paragraph of ``--features FROM..TO``: new's total less the lines the features added
    as they landed (TO - FROM), against old's.

    Features added 20 - 12 = 8 lines; new without them is 17 - 8 = 9, one below old's 10:

    >>> text = redesign_net({"old": 10, "a": 12, "b": 20, "new": 17}, "a..b")[0]
    >>> "17 - 8 = 9, against old's 10: the redesign's net is -1 (it removes more" in text
    True
    """
    start, _, end = features.partition("..")
    if start not in totals or end not in totals:
        raise SystemExit(f"--features: {features!r} must name two labels of --lines")
    added = totals[end] - totals[start]
    net = totals["new"] - added - totals["old"]
    verdict = "it removes more than it adds" if net < 0 else "it does not remove more than it adds"
    return [f"Features merged after the redesign added {added:+d} lines as they landed "
            f"({start} -> {end}). New without them: {totals['new']} - {added} = "
            f"{totals['new'] - added}, against old's {totals['old']}: the redesign's net is "
            f"{net:+d} ({verdict}). The features' own lines were cut too since they landed, "
            "so this is the redesign's share only if those cuts are counted as its own."]


def _parser():
    p = argparse.ArgumentParser(prog="python -m benchmarks.redesign",
                                description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="checkout of the code before the redesign")
    p.add_argument("--new", default=ROOT, help="checkout of the new code (default: this one)")
    p.add_argument("--rounds", type=int, default=5, help="child processes per task")
    p.add_argument("--samples", type=int, default=15, help="in-process samples per child")
    p.add_argument("--target", type=float, default=0.005, help="seconds per sample")
    p.add_argument("--lines", action="append", default=[], metavar="LABEL=CHECKOUT",
                   help="another checkout in the code-lines table (old and new are in it)")
    p.add_argument("--exclude", action="append", default=[], metavar="ENTRY",
                   help="a top-level entry of ppo_numpy/ left out of the table's second total")
    p.add_argument("--features", default=None, metavar="FROM..TO",
                   help="two labels of --lines: what came between them is features merged "
                        "after the redesign, taken off new's total to give the redesign's net")
    p.add_argument("--tasks", default="training,pipeline,pipeline-cold,functions")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--json", default=None, help="also write the raw results here")
    p.add_argument("--from-json", default=None, metavar="FILE",
                   help="no measuring: the tables of the results a --json run wrote")
    p.add_argument("--write", action="store_true",
                   help=f"put the tables into {os.path.relpath(DOC, ROOT)}")
    return p


def main(argv=None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child_main(json.loads(sys.argv[2]))))
        return 0
    args = _parser().parse_args(argv)
    old, new = os.path.realpath(args.old), os.path.realpath(args.new)
    if args.from_json:
        # the tables of a run measured before (its --json), rendered again
        with open(args.from_json) as f:
            results = json.load(f)
        machine = results.pop("machine")
        commits = results.pop("commits")
    else:
        machine = _machine()
        commits = {"old": _commit(old), "new": _commit(new)}
        start = time.perf_counter()
        tasks = tuple(t for t in args.tasks.split(",") if t)
        results = measure_all(old, new, rounds=args.rounds, samples=args.samples,
                              target=args.target, use_torch=not args.no_torch, tasks=tasks,
                              progress=lambda s: print(s, file=sys.stderr, flush=True))
        try:
            end_load = f"{os.getloadavg()[0]:.1f}"
        except OSError:
            end_load = "unknown"
        machine.append(f"1-min load {end_load} at the end; "
                       f"{time.perf_counter() - start:.0f} s.")
    parts = [".venv/bin/python -m benchmarks.redesign", f"--old {args.old}"]
    if args.new != ROOT:
        parts.append(f"--new {args.new}")
    for flag, value, default in (("--rounds", args.rounds, 5), ("--samples", args.samples, 15),
                                 ("--target", args.target, 0.005)):
        if value != default:
            parts.append(f"{flag} {value}")
    if args.tasks != "training,pipeline,pipeline-cold,functions":
        parts.append(f"--tasks {args.tasks}")
    if args.no_torch:
        parts.append("--no-torch")
    parts += [f"--lines {x}" for x in args.lines] + [f"--exclude {x}" for x in args.exclude]
    if args.features:
        parts.append(f"--features {args.features}")
    if args.write:
        parts.append("--write")
    lines = markdown(results, command=" ".join(parts), machine=machine,
                     old=f"`{old}` ({commits['old']})", new=f"`{new}` ({commits['new']})")
    from benchmarks import code_lines

    checkouts = {"old": old}
    for item in args.lines:
        label, _, path = item.rpartition("=")
        checkouts[label or path] = path
    checkouts["new"] = new
    lines += ["### Code lines", "", *code_lines.section(checkouts, args.exclude), ""]
    totals = {r["entry"]: r for r in code_lines.table(checkouts, args.exclude)}["total"]
    labels = list(checkouts)
    lines += ["Totals: " + "; ".join(
        f"{a} -> {b} {totals[b] - totals[a]:+d} ({totals[a]} -> {totals[b]})"
        for a, b in zip(labels, labels[1:])) + ".", ""]
    if args.features:
        lines += [*redesign_net(totals, args.features), ""]
    if args.exclude:
        lines += [f"The second total leaves out {', '.join(f'`{e}`' for e in args.exclude)}: "
                  "given with `--exclude` as modules of features merged after the redesign "
                  "(`git log` says which), whose lines are not the redesign's. Features "
                  "merged into modules that existed before change those rows too; the "
                  "redesign alone is the commit before the merges against the old "
                  "checkout.", ""]
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**results, "machine": machine, "commits": commits}, f, indent=1)
    if args.write:
        write_section(lines)
        print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        # a child: this file run as a script; its directory is not a place to import from
        sys.path = [p for p in sys.path if os.path.realpath(p) != HERE]
        print(json.dumps(child_main(json.loads(sys.argv[2]))))
        raise SystemExit(0)
    raise SystemExit(main())
