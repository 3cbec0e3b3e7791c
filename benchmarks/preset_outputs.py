"""``python -m benchmarks.preset_outputs record FILE`` / ``compare FILE``: every preset's outputs
on the oracle's cases, recorded once and compared after a change.

A restructure of the package must leave the presets' outputs as they were (issue 35): this
tool records, for every preset, every case it takes (``ppo_numpy.oracle.group_cases.cases_for``,
seed 0) and every *variant* of its parameters (the defaults; each alternative of each
convention switch ``ppo_numpy.oracle.switches.switches_for`` lists; each loss type of the
critic-free presets), every output array and number, or the error message when the call
raises. ``compare`` runs the same calls on the checkout it is run in and prints, per output
name, the largest difference in units of the last place (ulps) over every case and variant,
and every run whose error (or absence of one) changed.

The file is an ``.npz`` of two entries: ``values``, every output's numbers one after the
other (float64), and ``index``, JSON: NumPy's version and the CPU dispatch targets in use (so
that a comparison on another CPU kind can say so), then per output its key
``preset|variant|case|output`` and shape in order, and the errors (``preset|variant|case|error``
-> the exception's message).

``compare --old CHECKOUT`` records another checkout's outputs first (in a fresh process with
that checkout's ``ppo_numpy`` first on the path; FILE is then written, not read): e.g. the
commit before a restructure, ``mkdir /tmp/before && git archive aaf2c15 | tar -x -C /tmp/before``.

``compare --max-ulps K`` exits 1 when an output differs by more than K ulps or an error
changed; the default 0 asks for the same bits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

#: the parameter of the critic-free presets that names the loss type, and its values
LOSS_PARAMS = {
    "trl-grpo": ("loss_type", ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "luspo", "vespo",
                               "sapo")),
    "verl-grpo": ("loss_mode", ("vanilla", "gspo", "cispo", "sapo", "geo_mean", "gpg",
                                "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "dro")),
    "openrlhf-grpo": ("policy_loss_type", ("ppo", "gspo")),
}
#: extra parameters a loss type needs to run at all (verl's dro has no default beta)
NEEDS = {("verl-grpo", "dro"): {"dro_beta": 0.1}}
#: GSPO at the sequence level in TRL: the importance level is its own switch
SEQUENCE_VARIANTS = {"trl-grpo": ("importance_sampling_level", "sequence")}


def variants(preset, cases) -> list[tuple[str, dict]]:
    """``[(label, overrides)]``: the defaults, each switch's alternatives, each loss type."""
    from ppo_numpy.oracle.switches import switches_for

    out = [("defaults", {})]
    for param, (alternatives, _) in sorted(switches_for(preset, cases).items()):
        for value in alternatives:
            out.append((f"{param}={value!r}", {param: value}))
    if preset.name in LOSS_PARAMS:
        param, values = LOSS_PARAMS[preset.name]
        for value in values:
            extra = NEEDS.get((preset.name, value), {})
            out.append((f"{param}={value!r}", {param: value, **extra}))
            if preset.name in SEQUENCE_VARIANTS:
                key, level = SEQUENCE_VARIANTS[preset.name]
                out.append((f"{param}={value!r},{key}={level!r}",
                            {param: value, key: level, **extra}))
    return out


def run_all(presets=None) -> dict:
    """``{key: array or str}`` of every preset x variant x case (module docstring)."""
    from ppo_numpy.oracle.group_cases import cases_for
    from ppo_numpy.oracle.presets import PRESETS

    out = {}
    for name in presets or PRESETS:
        preset = PRESETS[name]
        cases = cases_for(preset)
        for label, overrides in variants(preset, cases):
            for case in cases:
                key = f"{name}|{label}|{case['name']}"
                try:
                    result = preset(case, **overrides)
                except (ValueError, TypeError) as e:
                    out[f"{key}|error"] = f"{type(e).__name__}: {e}"
                    continue
                for k, v in result.items():
                    out[f"{key}|{k}"] = np.asarray(v, dtype=np.float64)
    return out


def machine() -> dict:
    """NumPy's version and the CPU dispatch targets it uses (``tests.cpu_kinds``' reading)."""
    from numpy._core._multiarray_umath import __cpu_features__ as found

    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__ as dispatch
    except ImportError:  # pragma: no cover
        dispatch = []
    return {"numpy": np.__version__, "dispatch": sorted(k for k in dispatch if found.get(k))}


def save(path: str, results: dict) -> None:
    """``results`` of :func:`run_all` in the file format of the module docstring."""
    arrays = [(k, v) for k, v in results.items() if not isinstance(v, str)]
    index = {"machine": machine(), "outputs": [(k, list(v.shape)) for k, v in arrays],
             "errors": {k: v for k, v in results.items() if isinstance(v, str)}}
    values = np.concatenate([v.ravel() for _, v in arrays]) if arrays else np.zeros(0)
    np.savez_compressed(path, values=values, index=np.array(json.dumps(index)))


def record(path: str, presets=None) -> int:
    results = run_all(presets)
    save(path, results)
    n_err = sum(isinstance(v, str) for v in results.values())
    print(f"recorded {len(results)} outputs ({n_err} errors) to {path}")
    return 0


def ulps(got: np.ndarray, want: np.ndarray) -> float:
    """The largest |got - want| in units of the last place of ``want`` (NaN = NaN, equal
    infinities 0; a NaN against a number, or a shape change, is infinite)."""
    if got.shape != want.shape:
        return float("inf")
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if same.all():
        return 0.0
    bad = ~same
    if (np.isnan(got[bad]) | np.isnan(want[bad]) | np.isinf(got[bad])
            | np.isinf(want[bad])).any():
        return float("inf")
    return float(np.max(np.abs(got[bad] - want[bad]) / np.spacing(np.abs(want[bad]))))


def compare_results(stored: dict, now: dict) -> tuple[dict, list]:
    """``({output name: (largest ulps, where)}, [changed runs])`` of two result sets."""
    worst, changed = {}, []
    for key in sorted(set(stored) | set(now)):
        a, b = stored.get(key), now.get(key)
        if key.endswith("|error") or isinstance(a, str) or isinstance(b, str):
            if a != b if (isinstance(a, str) and isinstance(b, str)) else True:
                changed.append(f"{key}: {a!r} -> {b!r}")
            continue
        if a is None or b is None:
            changed.append(f"{key}: {'missing now' if b is None else 'new'}")
            continue
        u = ulps(b, a)
        name = key.rsplit("|", 1)[1]
        if u > worst.get(name, (0.0, ""))[0] or name not in worst:
            worst[name] = max(worst.get(name, (0.0, "")), (u, key), key=lambda t: t[0])
    return worst, changed


def load(path: str) -> tuple[dict, dict]:
    """``(machine, results)`` of a file :func:`save` wrote."""
    with np.load(path) as z:
        index = json.loads(str(z["index"]))
        values = z["values"]
    out, at = {}, 0
    for key, shape in index["outputs"]:
        size = int(np.prod(shape, dtype=np.int64))
        out[key] = values[at:at + size].reshape(shape)
        at += size
    out.update(index["errors"])
    return index["machine"], out


def record_other(checkout: str, path: str, presets=None) -> None:
    """:func:`record` run on another checkout's package (module docstring)."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
    cmd = [sys.executable, os.path.abspath(__file__), "record", path]
    for name in presets or ():
        cmd += ["--preset", name]
    subprocess.run(cmd, env=env, check=True, cwd=os.path.abspath(checkout))


def compare(path: str, max_ulps: float = 0.0, presets=None, old=None) -> int:
    if old is not None:
        record_other(old, path, presets)
    meta, stored = load(path)
    if presets:
        stored = {k: v for k, v in stored.items() if k.split("|", 1)[0] in presets}
    now = run_all(presets)
    here = machine()
    if here != meta:
        print(f"note: recorded on {meta}, compared on {here}: exp/log may round otherwise")
    worst, changed = compare_results(stored, now)
    n = sum(not k.endswith("|error") for k in now)
    print(f"{len(now)} runs' outputs compared ({n} values/arrays)")
    differ = {k: v for k, v in worst.items() if v[0] > 0}
    if not differ:
        print("every output bit for bit the same")
    else:
        print("| output | largest ulps | where |\n|---|---:|---|")
        for name, (u, key) in sorted(differ.items()):
            print(f"| {name} | {u:.3g} | {key} |")
    for line in changed:
        print("changed:", line)
    bad = changed or any(u > max_ulps for u, _ in worst.values())
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.preset_outputs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("record", "compare"))
    parser.add_argument("file")
    parser.add_argument("--max-ulps", type=float, default=0.0)
    parser.add_argument("--preset", action="append", help="only this preset (repeatable)")
    parser.add_argument("--old", metavar="CHECKOUT",
                        help="record FILE from this checkout first, then compare")
    args = parser.parse_args(argv)
    if args.action == "record":
        return record(args.file, args.preset)
    return compare(args.file, args.max_ulps, args.preset, args.old)


if __name__ == "__main__":
    sys.exit(main())
