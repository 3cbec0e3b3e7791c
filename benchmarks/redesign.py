"""``python -m benchmarks.redesign --old PATH``: the redesign of issue 12, old and new side by side.

Times the code of two checkouts in one run: ``--old`` (the code before the redesign,
e.g. a worktree of 2178b48) and ``--new`` (default: this checkout). Two versions of
``ppo_numpy`` cannot share one interpreter, so each measurement runs in a child
process whose ``sys.path`` starts with that checkout (the child reports
``ppo_numpy.__file__``, and the run stops if it is not inside the checkout). Rounds
alternate: old child, new child, new child, old child, ... (the order flips every
round). Each child warms up, then times every candidate of its task in-process in
interleaved samples (each sample many calls, about ``--target`` seconds; garbage
collection off) and reports the median of its samples; the figure quoted is the
median over rounds of those medians, and old / new is the ratio of the two medians
of the same run.

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
    """Median seconds per call of each candidate, ``samples`` interleaved samples each.

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
    return {name: statistics.median(v) for name, v in times.items()}


def _training_task(spec) -> dict:
    from ppo_numpy.training.config import PPOConfig
    from ppo_numpy.training.loop import new_run, ppo_iteration

    state = new_run(PPOConfig())
    for _ in range(spec.get("warm", WARM_ITERATIONS)):
        ppo_iteration(state)
    ts = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(spec.get("iterations", ITERATIONS)):
            start = time.perf_counter()
            ppo_iteration(state)
            ts.append(time.perf_counter() - start)
    finally:
        if enabled:
            gc.enable()
    return {"training iteration": statistics.median(ts)}


def public_pipeline(b, p):
    """The pipeline of public functions, as ``benchmarks.core.ours_pipeline`` writes it."""
    from ppo_numpy import gae, kl_shaped_rewards, policy_loss_grad, ppo_policy_loss, whiten

    rewards = kl_shaped_rewards(b.scores, b.logp_old, b.logp_ref, p["beta"], b.mask)
    advantages, returns = gae(rewards, b.values, p["gamma"], p["lam"], b.mask)
    advantages = whiten(advantages, b.mask)
    loss, stats = ppo_policy_loss(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    dlogp = policy_loss_grad(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    return loss, stats, dlogp, returns


def make_rollout(b):
    from ppo_numpy.rollout import Rollout

    return Rollout(mask=b.mask, logp=b.logp, logp_old=b.logp_old, logp_ref=b.logp_ref,
                   values=b.values, scores=b.scores)


def kernel_pipeline(r, p, opts):
    """The validated-once pipeline on a checked ``Rollout`` ``r``: kernels, one PolicyLoss."""
    from ppo_numpy.gae import gae_kernel
    from ppo_numpy.kl import kl_estimate_kernel, kl_shaped_rewards_kernel
    from ppo_numpy.objective import policy_loss_kernel
    from ppo_numpy.whitening import whiten_kernel

    kl = kl_estimate_kernel(r.logp_old, r.logp_ref, "k1")
    rewards = kl_shaped_rewards_kernel(r.scores, kl, r.mask, float(p["beta"]))
    # gae_kernel makes its values argument the returns: give it its own copy
    advantages, returns = gae_kernel(rewards, r.values.copy(), float(p["gamma"]),
                                     float(p["lam"]), r.mask)
    advantages = whiten_kernel(advantages, r.mask)
    out = policy_loss_kernel(r.logp, r.logp_old, advantages, r.mask, opts)
    return out.loss, out.stats(), out.dlogp, returns


def _same(x, y) -> bool:
    import numpy as np

    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y))
    x, y = np.asarray(x), np.asarray(y)
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


def _pipeline_task(spec) -> dict:
    data = _load("data")
    p = spec["params"]
    out = {}
    for B, T in spec["grid"]:
        b = data.make_batch(B, T)
        cands = {f"pipeline ({B}, {T}) public": lambda b=b: public_pipeline(b, p)}
        if spec["variant"] == "new":
            from ppo_numpy.loss_options import PolicyLossOptions

            opts = PolicyLossOptions(epsilon=p["epsilon"])
            r = make_rollout(b)
            if not _same(kernel_pipeline(r, p, opts), public_pipeline(b, p)):
                raise AssertionError(f"({B}, {T}): the kernel pipeline differs from the "
                                     "public one")
            cands[f"pipeline ({B}, {T}) rollout+kernels"] = (
                lambda b=b, o=opts: kernel_pipeline(make_rollout(b), p, o))
            cands[f"pipeline ({B}, {T}) kernels"] = lambda r=r, o=opts: kernel_pipeline(r, p, o)
        out.update(time_candidates(cands, samples=spec["samples"], target=spec["target"]))
    return out


def _functions_task(spec) -> dict:
    from ppo_numpy import clipped_surrogate, kl_shaped_rewards, td_errors, whiten

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
        ours = {
            "td_errors": lambda b=b: td_errors(b.rewards, b.values, p["gamma"], b.mask),
            "kl_shaped_rewards": lambda b=b: kl_shaped_rewards(b.scores, b.logp, b.logp_ref,
                                                               p["beta"], b.mask),
            "whiten": lambda b=b: whiten(b.advantages, b.mask),
            "clipped_surrogate": lambda b=b: clipped_surrogate(b.rho, b.advantages,
                                                               p["epsilon"], mask=b.mask),
        }
        for name in spec["functions"]:
            cands = {f"{name} ({B}, {T})": ours[name]}
            if ti is not None:
                t = ti.as_tensors(b)
                fn = {
                    "td_errors": lambda t=t: ti.td_errors_torch(t["rewards"], t["values"],
                                                                p["gamma"], t["mask"]),
                    "kl_shaped_rewards": lambda t=t: ti.kl_shaped_rewards_torch(
                        t["scores"], t["logp"], t["logp_ref"], p["beta"], t["mask"]),
                    "whiten": lambda t=t: ti.whiten_torch(t["advantages"], t["mask"]),
                    "clipped_surrogate": lambda t=t: ti.clipped_surrogate_torch(
                        t["rho"], t["advantages"], p["epsilon"], t["mask"]),
                }[name]
                cands[f"{name} ({B}, {T}) torch"] = (
                    fn, lambda: torch.set_num_threads(default_threads))
                cands[f"{name} ({B}, {T}) torch 1 thread"] = (
                    fn, lambda: torch.set_num_threads(1))
            out.update(time_candidates(cands, samples=spec["samples"], target=spec["target"]))
    if ti is not None:
        out["torch default threads"] = default_threads
    return out


TASKS = {"training": _training_task, "pipeline": _pipeline_task, "functions": _functions_task}


def child_main(spec: dict) -> dict:
    """Run one task in this process (whose ``sys.path`` starts with ``spec["checkout"]``)."""
    checkout = os.path.realpath(spec["checkout"])
    sys.path.insert(0, checkout)
    import ppo_numpy

    where = os.path.realpath(ppo_numpy.__file__)
    if not where.startswith(checkout + os.sep):
        raise RuntimeError(f"ppo_numpy imported from {where}, not from {checkout}")
    data = _load("timing")
    data.warm_heap()
    return {"ppo_numpy": where, "times": TASKS[spec["task"]](spec)}


# -------------------------------------------------------------------------- parent side

def run_child(spec: dict, *, timeout=900) -> dict:
    """Run :func:`child_main` in a fresh interpreter, cwd = the checkout; its result."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(CHILD_ENV)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                           json.dumps(spec)], cwd=spec["checkout"], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"child {spec['task']} in {spec['checkout']} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def side_by_side(task: str, old: str, new: str, *, rounds: int, spec: dict,
                 progress=None) -> dict:
    """``{"old": {name: median s}, "new": {...}, "files": ...}`` over ``rounds`` rounds of
    one old and one new child each, the order alternating."""
    per = {"old": [], "new": []}
    files = {}
    for i in range(rounds):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for variant in order:
            s = {**spec, "task": task, "variant": variant,
                 "checkout": old if variant == "old" else new,
                 "torch": spec.get("torch", False) and variant == "new"}
            result = run_child(s)
            files[variant] = result["ppo_numpy"]
            per[variant].append(result["times"])
        if progress:
            progress(f"{task}: round {i + 1}/{rounds}")
    out = {"files": files, "rounds": rounds}
    for variant, results in per.items():
        out[variant] = {k: statistics.median(r[k] for r in results) for k in results[0]}
    return out


def measure_all(old: str, new: str, *, rounds=7, samples=5, target=0.01,
                pipeline_grid=PIPELINE_GRID, function_grid=FUNCTION_GRID, functions=FUNCTIONS,
                iterations=ITERATIONS, use_torch=True, tasks=("training", "pipeline",
                                                              "functions"), progress=None):
    from benchmarks.core import PARAMS

    common = {"params": PARAMS, "samples": samples, "target": target}
    specs = {
        "training": {**common, "iterations": iterations},
        "pipeline": {**common, "grid": [list(g) for g in pipeline_grid]},
        "functions": {**common, "grid": [list(g) for g in function_grid],
                      "functions": list(functions), "torch": use_torch},
    }
    return {task: side_by_side(task, old, new, rounds=rounds, spec=specs[task],
                               progress=progress) for task in tasks}


# rows: dicts with the figures of one table line

def training_rows(res) -> list[dict]:
    o, n = res["old"]["training iteration"], res["new"]["training iteration"]
    return [{"what": "one default training iteration", "old": o, "new": n,
             "speedup": o / n, "target": 1 / 0.85, "met": o / n >= 1 / 0.85}]


def pipeline_rows(res, grid=PIPELINE_GRID) -> list[dict]:
    rows = []
    for B, T in grid:
        o = res["old"][f"pipeline ({B}, {T}) public"]
        for kind in ("public", "rollout+kernels", "kernels"):
            n = res["new"].get(f"pipeline ({B}, {T}) {kind}")
            if n is not None:
                rows.append({"B": B, "T": T, "new path": kind, "old": o, "new": n,
                             "speedup": o / n, "met": o / n >= 1.5})
    return rows


def function_rows(res, grid=FUNCTION_GRID, functions=FUNCTIONS) -> list[dict]:
    rows = []
    for name in functions:
        for B, T in grid:
            key = f"{name} ({B}, {T})"
            new = res["new"][key]
            t_def = res["new"].get(f"{key} torch")
            t_one = res["new"].get(f"{key} torch 1 thread")
            rows.append({"function": name, "B": B, "T": T, "old": res["old"][key], "new": new,
                         "speedup": res["old"][key] / new, "torch": t_def, "torch1": t_one,
                         "torch/new": None if t_def is None else t_def / new,
                         "torch1/new": None if t_one is None else t_one / new,
                         "met": None if t_def is None else min(t_def, t_one) / new >= 1.0})
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
           f"Old: `{old}`; new: `{new}`. " + " ".join(machine), "",
           "Method: each figure is the median over rounds; a round runs one child process "
           "per version (order alternating), each importing its own checkout's `ppo_numpy` "
           "(checked by `ppo_numpy.__file__`), warming up, and timing its candidates in "
           "interleaved in-process samples (median of the samples). `OPENBLAS_NUM_THREADS=1` "
           "in every child. Ratios are old / new (or torch / new) from the same run: "
           "> 1 means the new code is faster.", ""]
    if "training" in results:
        out += ["### One default training iteration", "",
                "`new_run(PPOConfig())`, 3 warm-up iterations, then the median of "
                f"{ITERATIONS} `ppo_iteration` calls per child. Target: at least 15 % faster "
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
    if "functions" in results:
        threads = results["functions"]["new"].get("torch default threads")
        out += ["### Core functions against PyTorch on CPU", "",
                "Public functions with their checks (as `python -m benchmarks` calls them) "
                "against `benchmarks/torch_impl.py` on float64 CPU tensors, torch timed in "
                f"the new child with its default {threads} intra-op threads and with "
                "`torch.set_num_threads(1)` (NumPy's elementwise operations use one core), "
                "interleaved. Target: no slower than torch at B T >= 65536 "
                "(met: torch / new >= 1 for both thread settings).", "",
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


def _parser():
    p = argparse.ArgumentParser(prog="python -m benchmarks.redesign",
                                description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="checkout of the code before the redesign")
    p.add_argument("--new", default=ROOT, help="checkout of the new code (default: this one)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--samples", type=int, default=5, help="in-process samples per child")
    p.add_argument("--target", type=float, default=0.01, help="seconds per sample")
    p.add_argument("--tasks", default="training,pipeline,functions")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--json", default=None, help="also write the raw results here")
    p.add_argument("--write", action="store_true",
                   help=f"put the tables into {os.path.relpath(DOC, ROOT)}")
    return p


def main(argv=None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child_main(json.loads(sys.argv[2]))))
        return 0
    args = _parser().parse_args(argv)
    old, new = os.path.realpath(args.old), os.path.realpath(args.new)
    machine = _machine()
    start = time.perf_counter()
    tasks = tuple(t for t in args.tasks.split(",") if t)
    results = measure_all(old, new, rounds=args.rounds, samples=args.samples,
                          target=args.target, use_torch=not args.no_torch, tasks=tasks,
                          progress=lambda s: print(s, file=sys.stderr, flush=True))
    try:
        end_load = f"{os.getloadavg()[0]:.1f}"
    except OSError:
        end_load = "unknown"
    machine.append(f"1-min load {end_load} at the end; {time.perf_counter() - start:.0f} s.")
    parts = [".venv/bin/python -m benchmarks.redesign", f"--old {args.old}"]
    if args.new != ROOT:
        parts.append(f"--new {args.new}")
    for flag, value, default in (("--rounds", args.rounds, 7), ("--samples", args.samples, 5),
                                 ("--target", args.target, 0.01)):
        if value != default:
            parts.append(f"{flag} {value}")
    if args.tasks != "training,pipeline,functions":
        parts.append(f"--tasks {args.tasks}")
    if args.no_torch:
        parts.append("--no-torch")
    if args.write:
        parts.append("--write")
    lines = markdown(results, command=" ".join(parts), machine=machine, old=old, new=new)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.write:
        write_section(lines)
        print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        # a child: this file run as a script, cwd = the checkout timed
        sys.path = [p for p in sys.path if os.path.realpath(p) != HERE]
        print(json.dumps(child_main(json.loads(sys.argv[2]))))
        raise SystemExit(0)
    raise SystemExit(main())
