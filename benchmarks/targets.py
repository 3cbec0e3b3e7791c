"""``python -m benchmarks.targets``: the speed targets of issue 22, measured side by side.

    python -m benchmarks.targets [--old CHECKOUT] [--quick] [--rounds N] [--write]

One run, against PyTorch on CPU with one intra-op thread (float64), in the forms of
:mod:`benchmarks.grpo` (TRL's, checked equal to ppo_numpy before timing) and
:mod:`benchmarks.torch_impl` (the reverse GAE loop of TRL and verl):

* ``grpo_advantages`` and ``rloo_advantages`` (groups of G = 8, TRL's layouts) against
  TRL's vectorised form; target: at least 1x at every grid size;
* the GSPO loss + gradient (``importance_level="sequence"``) and the GRPO loss + gradient,
  one call of ``policy_loss_and_grad`` (loss, its statistics and d loss / d logp), against
  TRL's form with autograd; targets: at least 1x;
* ``gae`` against one streaming NumPy pass over the same arrays (``rewards - values``) at
  (256, 1024), in this process (warm heap) and in a fresh one (cold, ``benchmarks/cold.py``),
  target at most 10x; and against the torch reverse loop at every grid size, at least 3x;
  not a target, shown beside them: ``gae`` against the floor with the CPU caches emptied
  before each call (:func:`gae_cache_cold`), the condition of a trainer's single call;
* with ``--old CHECKOUT`` (e.g. ``git worktree add --detach /tmp/base f528a68``): one default
  training iteration of that checkout and of this one, in fresh child processes that import
  both (:func:`child_main`), alternating; target: no slower (old / new >= 1). This checkout
  is also timed against itself the same way, as a control: a ratio below 1 by no more than
  the control is from 1 is reported as "within noise" (:func:`training_met`).

Every ratio is the median over the interleaved rounds of the ratio of two samples taken
one just after the other (:func:`benchmarks.timing.paired_ratio`); a ratio above 1 means
ppo_numpy (or the new checkout) is faster, for the GAE floor row the ratio is GAE / floor.
``--write`` puts the section into docs/benchmarks.md (replacing an earlier one; ``python -m
benchmarks`` keeps it when it regenerates the page).
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
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
SECTION = "## Speed targets of issue 22"
FLOOR_AT = (256, 1024)
WARM_ITERATIONS, ITERATIONS = 3, 15


# --- one default training iteration, old checkout against this one ---------------------------


def load_package(checkout: str, name: str):
    """``checkout``/ppo_numpy imported under the top-level name ``name`` (its imports inside
    the package are relative, so each copy uses its own modules)."""
    root = os.path.join(checkout, "ppo_numpy")
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    where = os.path.realpath(module.__file__)
    if not where.startswith(os.path.realpath(checkout) + os.sep):
        raise RuntimeError(f"{name} imported from {where}, not from {checkout}")
    return module


def child_main(spec: dict) -> dict:
    """In a fresh process: both checkouts' ``new_run(PPOConfig())``, warmed up, then
    ``ppo_iteration`` of each in turn (the order alternating), seconds of each call.
    ``spec["new_config"]``: fields of this checkout's ``PPOConfig`` other than its defaults."""
    import importlib as il

    steps, states = {}, {}
    for variant, name in (("old", "ppo_numpy_old"), ("new", "ppo_numpy")):
        load_package(spec[variant], name)
        loop = il.import_module(f"{name}.training.loop")
        fields = spec.get("new_config") or {} if variant == "new" else {}
        config = il.import_module(f"{name}.training.config").PPOConfig(**fields)
        states[variant] = loop.new_run(config)
        steps[variant] = loop.ppo_iteration
    for _ in range(spec["warm"]):
        for variant in steps:
            steps[variant](states[variant])
    times = {variant: [] for variant in steps}
    gc.disable()
    for i in range(spec["iterations"]):
        for variant in ("old", "new") if i % 2 == 0 else ("new", "old"):
            start = time.perf_counter()
            steps[variant](states[variant])
            times[variant].append(time.perf_counter() - start)
    gc.enable()
    return times


def training_iteration(old: str, *, rounds: int, iterations=ITERATIONS, warm=WARM_ITERATIONS,
                       new_config=None):
    """``{"old": s, "new": s, "ratio": old / new}``: medians over ``rounds`` fresh children
    (``OPENBLAS_NUM_THREADS=1``, as ``make demo`` runs the loop, cwd in neither checkout);
    ``new_config``: fields of this checkout's ``PPOConfig`` (default: its defaults)."""
    spec = {"old": os.path.realpath(old), "new": ROOT, "iterations": iterations, "warm": warm,
            "new_config": new_config}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OPENBLAS_NUM_THREADS"] = "1"
    per = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as cwd:
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                   json.dumps(spec)], cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=900, check=False)
        if done.returncode:
            raise RuntimeError(f"training child failed:\n{done.stderr}")
        per.append(json.loads(done.stdout.strip().splitlines()[-1]))
    old_t = [x for r in per for x in r["old"]]
    new_t = [x for r in per for x in r["new"]]
    # iteration i of old and of new ran one just after the other in the same child
    ratio = statistics.median(o / n for r in per for o, n in zip(r["old"], r["new"]))
    return {"old": statistics.median(old_t), "new": statistics.median(new_t), "ratio": ratio,
            "commit": _commit(old), "samples": len(old_t)}


def training_met(ratio: float, control: dict | None) -> str:
    """"yes" for old / new >= 1; "within noise" when below 1 by no more than the same checkout
    timed against itself is from 1 (``control``: :func:`training_iteration` of this checkout
    as the old one); else "no"."""
    if ratio >= 1:
        return "yes"
    if control is not None and ratio >= 1 - abs(1 - control["ratio"]):
        return "within noise"
    return "no"


def _commit(checkout: str) -> str:
    try:
        return subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


# --- in this process -------------------------------------------------------------------------


def _timed(candidates: dict, rounds: int, target: float, ours="ours") -> dict:
    """Medians of each candidate and, for each other one, its paired ratio to ``ours``."""
    from benchmarks.timing import measure_samples, paired_ratio

    samples = measure_samples(candidates, rounds=rounds, target=target)
    out = {name: statistics.median(v) for name, v in samples.items()}
    out["ratios"] = {name: paired_ratio(samples, name, ours) for name in samples if name != ours}
    return out


#: the GSPO row of the targets: the statistics TRL's form computes (its clip fractions; ours
#: also the ratio's mean, min and max), not the approx-KL ones (``approx_kl=False``); the
#: default call, with them, is the row "gspo loss+grad, approx-KL stats too"
GSPO_ALL_STATS = "gspo loss+grad, approx-KL stats too"


def one_call(name: str, x):
    """The loss + gradient of ``name`` ("gspo loss+grad", :data:`GSPO_ALL_STATS`, "grpo
    loss+grad") by one call of the fast forms' ``policy_loss_and_grad``
    (:mod:`ppo_numpy.fast.gspo_rowwise`, chosen explicitly: the row-wise form where its rule
    applies, the reference otherwise; loss, statistics, gradient;
    ``approx_kl=False`` for "gspo loss+grad"), checked equal to the two calls of
    :func:`benchmarks.grpo.ours`, which are checked against TRL's form."""
    import numpy as np

    from benchmarks import grpo
    from ppo_numpy.fast.gspo_rowwise import policy_loss_and_grad

    b = x.batch
    level = "sequence" if name.startswith("gspo") else "token"

    approx_kl = name != "gspo loss+grad"

    def call():
        return policy_loss_and_grad(b.logp, b.logp_old, x.A_tok, b.mask, grpo.EPSILON,
                                    agg="grpo", importance_level=level, approx_kl=approx_kl)

    (loss, _), dlogp = grpo.ours("gspo loss+grad" if level == "sequence" else name, x)()
    got_loss, _, got_dlogp = call()
    if not (np.isclose(got_loss, loss, rtol=1e-12, atol=0)
            and np.allclose(got_dlogp, dlogp, rtol=1e-12, atol=1e-15)):
        raise AssertionError(f"{name}: policy_loss_and_grad differs from the two calls")
    return call


def group_rows(grid, *, rounds: int, target: float) -> list[dict]:
    """The advantages and losses of :mod:`benchmarks.grpo`, ppo_numpy against TRL's form
    (the losses by one call of ``policy_loss_and_grad``, as a trainer calls them)."""
    from benchmarks import grpo

    grpo.check_against_ppo_numpy()
    rows = []
    for B, T in grid:
        x = grpo.make_inputs(B, T)
        t = grpo.as_tensors(x)
        for name in ("grpo_advantages", "rloo_advantages", "gspo loss+grad", GSPO_ALL_STATS,
                     "grpo loss+grad"):
            ours = grpo.ours(name, x) if name.endswith("advantages") else one_call(name, x)
            trl = grpo.baselines("gspo loss+grad" if name == GSPO_ALL_STATS else name, t)["trl"]
            times = _timed({"ours": ours, "trl": trl}, rounds, target)
            rows.append({"what": name, "B": B, "T": T, "ours": times["ours"],
                         "trl": times["trl"], "ratio": times["ratios"]["trl"]})
    return rows


def gae_rows(grid, *, rounds: int, target: float) -> list[dict]:
    """``gae`` (the default call) against the floor and the torch reverse loop."""
    from benchmarks import core, torch_impl
    from benchmarks.data import make_batch

    core.check_baselines(use_torch=True)
    p = core.PARAMS
    rows = []
    for B, T in grid:
        b = make_batch(B, T)
        t = torch_impl.as_tensors(b)
        times = _timed({
            "ours": lambda b=b: core.gae_sized(b.rewards, b.values, p["gamma"], p["lam"],
                                               b.mask),
            "floor": lambda b=b: b.rewards - b.values,
            "torch": lambda t=t: torch_impl.gae_torch(t["rewards"], t["values"], p["gamma"],
                                                      p["lam"], t["mask"]),
        }, rounds, target)
        rows.append({"B": B, "T": T, "ours": times["ours"], "floor": times["floor"],
                     "torch": times["torch"], "over_floor": 1 / times["ratios"]["floor"],
                     "torch_ratio": times["ratios"]["torch"]})
    return rows


def gae_cache_cold(B: int, T: int, *, rounds: int) -> dict:
    """``gae`` and the floor with the CPU caches emptied before each call
    (:func:`benchmarks.timing.cache_cold_samples`): ``{"gae": s, "floor": s, "ratio": x}``,
    medians and the median paired ratio. Not the target's condition (which times calls
    repeated on the same arrays, warm in the caches): what a trainer's single call sees."""
    from benchmarks import core
    from benchmarks.data import make_batch
    from benchmarks.timing import cache_cold_samples, paired_ratio

    p = core.PARAMS
    b = make_batch(B, T)
    samples = cache_cold_samples({
        "gae": lambda: core.gae_sized(b.rewards, b.values, p["gamma"], p["lam"], b.mask),
        "floor": lambda: b.rewards - b.values,
    }, rounds=rounds)
    return {**{k: statistics.median(v) for k, v in samples.items()},
            "ratio": paired_ratio(samples, "gae", "floor")}


def gae_cold(B: int, T: int) -> dict | None:
    """benchmarks/cold.py in a fresh interpreter: ``{"gae": s, "floor": s, "ratio": x}``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "benchmarks.cold", str(B), str(T)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode:
        print(done.stderr, file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the section -----------------------------------------------------------------------------


def _ms(s):
    from benchmarks.report import ms

    return ms(s)


def _x(r):
    from benchmarks.report import ratio

    return ratio(r)


def markdown(results: dict, *, command: str, machine: list[str]) -> list[str]:
    """The section of docs/benchmarks.md, as lines."""
    adv, gae_r, cold, train = (results.get(k) for k in ("groups", "gae", "cold", "training"))
    cache_cold = results.get("cache_cold")
    out = [SECTION, "", "Measured in one run of", "", "```bash", command, "```", ""]
    out += [f"{line}" for line in machine] + [""]
    out += ["Each ratio: the median over interleaved rounds of the ratio of two samples taken "
            "one just after the other (`benchmarks/timing.py`; module docstring of "
            "`benchmarks/targets.py`). torch: CPU float64, one intra-op thread; TRL's forms "
            "are those of `benchmarks/grpo.py` and the GAE loop that of "
            "`benchmarks/torch_impl.py`, each checked equal to ppo_numpy before timing. "
            "Above 1x: ppo_numpy is faster (for GAE / floor: how many streaming passes GAE "
            "costs).", "", "| target | measured | met |", "|---|---|---|"]

    def per_size(name, key, ok):
        rs = [r for r in adv if r["what"] == name]
        text = ", ".join(f"({r['B']}, {r['T']}) {_x(r[key])}" for r in rs)
        return text, all(ok(r[key]) for r in rs)

    for name, label, goal in (("grpo_advantages", "`grpo_advantages`", ">= 1x TRL's form"),
                              ("rloo_advantages", "`rloo_advantages`", ">= 1x TRL's form"),
                              ("gspo loss+grad", "GSPO loss + gradient (`approx_kl=False`: "
                               "the clip statistics TRL's form computes)", ">= 1x TRL + autograd"),
                              ("grpo loss+grad", "GRPO loss + gradient", ">= 1x TRL + autograd")):
        if adv:
            text, met = per_size(name, "ratio", lambda x: x >= 1)
            out.append(f"| {label} {goal}, every size | {text} | {'yes' if met else 'no'} |")
    if gae_r:
        at = [r for r in gae_r if (r["B"], r["T"]) == FLOOR_AT]
        if at:
            r = at[0]
            text = f"{_x(r['over_floor'])} ({_ms(r['ours'])} ms vs {_ms(r['floor'])} ms)"
            met = r["over_floor"] <= 10
            if cold:
                text += (f"; cold, a fresh process: {_x(cold['ratio'])} ({_ms(cold['gae'])} ms "
                         f"vs {_ms(cold['floor'])} ms)")
                met = met and cold["ratio"] <= 10
            out.append(f"| `gae` <= 10x one streaming pass at {FLOOR_AT}, warm and cold "
                       f"| {text} | {'yes' if met else 'no'} |")
        text = ", ".join(f"({r['B']}, {r['T']}) {_x(r['torch_ratio'])}" for r in gae_r)
        met = all(r["torch_ratio"] >= 3 for r in gae_r)
        out.append(f"| `gae` >= 3x the torch reverse loop, every size | {text} "
                   f"| {'yes' if met else 'no'} |")
    if train:
        control = train.get("control")
        text = (f"{train['ratio']:.3f}x ({_ms(train['old'])} -> {_ms(train['new'])} ms, "
                f"{train['samples']} iterations each)")
        if control is not None:
            text += (f"; this checkout against itself, measured the same way: "
                     f"{control['ratio']:.3f}x")
        out.append(f"| one default training iteration no slower than {train['commit']} "
                   f"(old / new) | {text} | {training_met(train['ratio'], control)} |")
    if cache_cold:
        c = cache_cold
        out.append(f"| (not a target) `gae` against the floor at {FLOOR_AT} with the CPU caches "
                   f"emptied before each call (a 64 MiB read; `gae_cache_cold`): the inputs "
                   f"come from main memory, as in a trainer | {_x(c['ratio'])} "
                   f"({_ms(c['gae'])} ms vs {_ms(c['floor'])} ms) | - |")
    if adv and any(r["what"] == GSPO_ALL_STATS for r in adv):
        text, _ = per_size(GSPO_ALL_STATS, "ratio", lambda x: x >= 1)
        out.append(f"| (not a target) the default call, with the approx-KL statistics k1, k2, "
                   f"k3 (an exp per token: a scalar call on CPUs without AVX-512) | {text} | - |")
    if adv:
        out += ["", "| function | B | T | ppo_numpy ms | TRL-form torch ms | TRL / ppo_numpy |",
                "|---|---:|---:|---:|---:|---:|"]
        out += [f"| {r['what']} | {r['B']} | {r['T']} | {_ms(r['ours'])} | {_ms(r['trl'])} "
                f"| {_x(r['ratio'])} |" for r in adv]
    if gae_r:
        out += ["", "`gae(rewards, values, 1.0, 0.95, mask, method=...)` with the form the "
                "callers' size rule picks (`ppo_numpy/fast/gae_blocked.py` `use_blocked`: the "
                "recursion below 32768 entries, the blocked form from there on; "
                "`benchmarks.core.gae_sized`):", "",
                "| B | T | gae ms | floor ms | gae / floor | torch loop ms | torch / gae |",
                "|---:|---:|---:|---:|---:|---:|---:|"]
        out += [f"| {r['B']} | {r['T']} | {_ms(r['ours'])} | {_ms(r['floor'])} "
                f"| {_x(r['over_floor'])} | {_ms(r['torch'])} | {_x(r['torch_ratio'])} |"
                for r in gae_r]
    return out + [""]


def show(lines: list[str], write: bool, section: str) -> None:
    """Print the section's ``lines``; with ``write``, also put it into :data:`DOC`."""
    print("\n".join(lines))
    if write:
        write_section(DOC, lines, section=section)


def write_section(path: str, lines: list[str], section: str = SECTION) -> None:
    """Replace the section headed ``section`` in ``path`` (from its heading to the next
    ``## ``), or put it before the sections ``python -m benchmarks`` keeps (at the end if
    there are none)."""
    from benchmarks.__main__ import _kept

    with open(path) as f:
        text = f.read()
    body = "\n".join(lines).rstrip("\n") + "\n"
    start = text.find("\n" + section + "\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start + 1] + body + ("\n" + text[end + 1:] if end >= 0 else "")
    else:
        kept = _kept(path)
        head = text[:len(text) - len(kept)].rstrip("\n")
        text = head + "\n\n" + body + ("\n" + kept.lstrip("\n") if kept else "")
    with open(path, "w") as f:
        f.write(text)


def _parser():
    p = argparse.ArgumentParser(prog="python -m benchmarks.targets",
                                description=__doc__.split("\n")[0])
    p.add_argument("--old", help="a checkout to time one training iteration against")
    p.add_argument("--quick", action="store_true", help="two small grid points, few rounds")
    p.add_argument("--rounds", type=int, default=None, help="rounds per median (default 9)")
    p.add_argument("--training-rounds", type=int, default=5,
                   help="fresh child processes for the training iteration (default 5)")
    p.add_argument("--write", action="store_true", help=f"put the section into {DOC}")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.child:
        print(json.dumps(child_main(json.loads(args.child))))
        return 0
    import torch

    from benchmarks import core, machine
    from benchmarks.timing import warm_heap

    torch.set_num_threads(1)
    warm_heap()
    grid = core.QUICK_GRID if args.quick else core.GRID
    rounds = args.rounds or (3 if args.quick else 9)
    target = 0.002 if args.quick else 0.02
    load = os.getloadavg()[0]
    results = {"groups": group_rows(grid, rounds=rounds, target=target),
               "gae": gae_rows(grid, rounds=rounds, target=target)}
    if not args.quick:
        results["cold"] = gae_cold(*FLOOR_AT)
        results["cache_cold"] = gae_cache_cold(*FLOOR_AT, rounds=101)
    if args.old:
        kw = {"rounds": 2 if args.quick else args.training_rounds,
              "iterations": 4 if args.quick else ITERATIONS}
        results["training"] = training_iteration(args.old, **kw)
        # the noise of the comparison: this checkout against itself, the same way
        results["training"]["control"] = training_iteration(ROOT, **kw)
    parts = [".venv/bin/python -m benchmarks.targets"]
    parts += [f"--old {args.old}"] if args.old else []
    parts += ["--quick"] if args.quick else []
    parts += [f"--rounds {args.rounds}"] if args.rounds else []
    parts += ["--write"] if args.write else []
    about = [f"- {line}" for line in machine.describe()] + [
        f"- Load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
        f"{time.strftime('%Y-%m-%d')}"]
    lines = markdown(results, command=" ".join(parts), machine=about)
    if args.write:
        write_section(DOC, lines)
        print(f"wrote the section to {os.path.relpath(DOC)}", file=sys.stderr)
    else:
        sys.stdout.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, ROOT)
    raise SystemExit(main())
