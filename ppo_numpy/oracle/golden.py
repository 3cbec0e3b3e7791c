"""Golden files: the oracle's cases and expected outputs, for code that cannot import ppo_numpy.

``python -m ppo_numpy oracle export DIR --preset NAME`` writes

    DIR/manifest.json         what every case is, its parameters, the expected scalars,
                              tolerances by dtype, the preset and the ppo_numpy version
    DIR/cases/<name>.npz      one file per case: the inputs under their own names
                              (logp, logp_old, ...) and the expected arrays under
                              "expected/<name>" (rewards, advantages, returns, dlogp, dvalues)

Nothing but NumPy and ``json`` is needed to read them (``docs/oracle.md`` has
a ten-line loader). :func:`load` reads them back into case dicts and
:func:`verify` recomputes every expected output with the named preset.

Format version 1. Manifest keys: ``format``, ``format_version``,
``ppo_numpy_version``, ``numpy_version``, ``preset`` (name, description,
defaults, conventions (the switches of ``Preset.conventions``; absent in manifests
written before them), sources), ``seed``, ``input_names``, ``per_token_outputs``,
``conventions``, ``tolerances`` ({dtype: {rtol, atol}}: the preset's own where its
framework's arithmetic implies one, see :func:`~ppo_numpy.oracle.compare.tolerance_for`),
``tolerance_note`` (why), ``cases``. Each case
has ``name``, ``description``, ``file``, ``shape`` [B, T], ``overrides`` (the
case's own parameters), ``params`` (the preset's defaults updated by the
overrides: everything needed to recompute it; with the convention switches since they
exist) and either ``expected_arrays``
(names) with ``expected_scalars`` ({name: number}) or ``rejected`` (the
preset's ValueError message: a conforming implementation refuses this input
too, or at least must not be compared on it). Scalars are JSON numbers,
written with Python's shortest round-trip repr (read back bit for bit);
a non-finite one is the string "nan", "inf" or "-inf", which ``float()``
reads.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import numpy as np

from .._npz import BadFileError, load_npz, savez_reproducible
from .._npz import entry as npz_entry
from .cases import INPUT_NAMES
from .compare import TOLERANCES, ComparisonReport, compare_outputs, tolerance_for
from .group_cases import cases_for
from .presets import PRESETS, as_preset
from .presets._common import GROUP_INPUT_NAMES, OPTIONAL_INPUT_NAMES, PER_RESPONSE_NAMES

FORMAT = "ppo_numpy.oracle.golden"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CONVENTIONS = {
    "layout": "arrays are (B, T) batch-major, scores (B,); mask 1 = response token",
    "padding": "inputs may hold NaN or inf where mask is 0; compare per-token outputs only "
               "where mask is 1",
    "values": "values = the value head being trained; old_values = values at rollout time",
    "gradients": "dlogp = d policy_loss / d logp, dvalues = d value_loss / d values; "
                 "advantages and returns are constants (no gradient through them)",
    "rejected": "a case with 'rejected' is one the preset refuses (ValueError); it has no "
                "expected outputs",
}


def _parameters(preset) -> dict:
    """Every parameter of ``preset``: its defaults and its convention switches."""
    return {**preset.defaults, **getattr(preset, "conventions", {})}


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return _number(float(x))
    if x is None or isinstance(x, str):
        return x
    return str(x)


def _number(v: float):
    return v if np.isfinite(v) else ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf"))


def _safe_name(name: str) -> str:
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise ValueError(f"cases: case name {name!r} cannot be used as a file name")
    return name


def export(directory, preset, cases=None, *, seed: int = 0) -> Path:
    """Write the golden files of ``preset`` on ``cases`` into ``directory``; return the manifest.

    Parameters
    ----------
    directory : path
        Created if missing. Existing files of the same names are overwritten.
    preset : Preset or str
        A preset object of :mod:`ppo_numpy.oracle.presets` (or its name).
    cases : list of case dicts, optional
        Default: :func:`generate_cases` with ``seed`` (every random and edge case).
    seed : int
        Seed of the default cases; recorded in the manifest.
    """
    from .. import __version__

    preset = as_preset(preset)
    if cases is None:
        cases = cases_for(preset, seed)
    input_names = getattr(preset, "input_names", INPUT_NAMES)
    root = Path(directory)
    (root / "cases").mkdir(parents=True, exist_ok=True)
    entries = []
    per_token = set()
    for case in cases:
        name = _safe_name(case["name"])
        if any(other["name"] == name for other in entries):
            raise ValueError(f"cases: two cases are named {name!r}")
        inputs = {n: np.asarray(case["inputs"][n], dtype=np.float64) for n in input_names}
        # the optional inputs a case carries (reward_components), stored beside the others
        inputs.update({n: np.asarray(case["inputs"][n], dtype=np.float64)
                       for n in OPTIONAL_INPUT_NAMES if case["inputs"].get(n) is not None})
        overrides = dict(case.get("params", {}))
        entry = {"name": name, "description": case.get("description", ""),
                 "file": f"cases/{name}.npz", "shape": list(inputs["mask"].shape),
                 "overrides": _jsonable(overrides),
                 "params": _jsonable({**_parameters(preset), **overrides})}
        arrays = dict(inputs)
        try:
            outputs = preset({"name": name, "inputs": inputs, "params": overrides})
        except ValueError as err:
            entry["rejected"] = f"{type(err).__name__}: {err}"
        else:
            entry["expected_arrays"], entry["expected_scalars"] = [], {}
            for out, value in outputs.items():
                value = np.asarray(value, dtype=np.float64)
                if value.ndim == 0:
                    entry["expected_scalars"][out] = _number(float(value))
                else:
                    entry["expected_arrays"].append(out)
                    arrays[f"expected/{out}"] = value
                    if value.shape == inputs["mask"].shape:
                        per_token.add(out)
        savez_reproducible(root / entry["file"], arrays)
        entries.append(entry)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "ppo_numpy_version": __version__,
        "numpy_version": np.__version__,
        "preset": {"name": preset.name, "description": preset.description,
                   "defaults": _jsonable(preset.defaults),
                   "conventions": _jsonable(getattr(preset, "conventions", {})),
                   "sources": _jsonable(preset.sources)},
        "seed": int(seed),
        "input_names": list(input_names),
        "per_token_outputs": sorted(per_token),
        "conventions": CONVENTIONS,
        "tolerances": {d: {"rtol": t.rtol, "atol": t.atol}
                       for d, t in ((d, tolerance_for(preset, d)) for d in TOLERANCES)},
        "tolerance_note": getattr(preset, "tolerance_note", "") or
        "the oracle's table by dtype (docs/oracle.md, The comparison)",
        "cases": entries,
    }
    path = root / MANIFEST
    path.write_text(json.dumps(manifest, indent=1, allow_nan=False) + "\n")
    return path


def read_manifest(directory) -> dict:
    """The manifest of a golden directory, after checking its format, version and structure.

    A missing manifest is a FileNotFoundError; one that is not valid JSON, of
    another format or version, or whose structure differs from what
    :func:`export` writes (see the module docstring) is a
    :class:`~ppo_numpy._npz.BadFileError` (a ValueError) naming the file and
    the offending key, e.g. ``cases[3].expected_scalars``.
    """
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (no {MANIFEST} in {str(directory)!r})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise BadFileError(path, f"not UTF-8 text ({err})") from None
    except json.JSONDecodeError as err:
        raise BadFileError(path, f"not valid JSON ({err})") from None
    if not isinstance(manifest, dict):
        raise BadFileError(path, f"expected a JSON object at the top level, got "
                                 f"{_json_type(manifest)}")
    if manifest.get("format") != FORMAT:
        raise BadFileError(path, f"not a ppo_numpy golden manifest (format "
                                 f"{manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BadFileError(path, f"format version {manifest.get('format_version')!r}, this "
                                 f"ppo_numpy reads version {FORMAT_VERSION}")
    _check_manifest(path, manifest)
    return manifest


def _json_type(x) -> str:
    """What ``x``, read by ``json.loads``, is called in JSON."""
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, (int, float)):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string"}.get(type(x), "null")


def _check_manifest(path, manifest: dict) -> None:
    """The keys :func:`load` and :func:`verify` read, with their JSON types; BadFileError."""

    def check(value, kind, label):
        if not isinstance(value, kind):  # kind is dict, list or str: never a bool
            wanted = {dict: "an object", list: "an array", str: "a string"}[kind]
            raise BadFileError(path, f"{label}: expected {wanted}, got {_json_type(value)}")
        return value

    def need(obj, key, kind, where):
        label = f"{where}.{key}" if where else key
        if key not in obj:
            raise BadFileError(path, f"{label}: missing")
        return check(obj[key], kind, label)

    def strings(obj, key, where):
        label = f"{where}.{key}" if where else key
        for k, v in enumerate(need(obj, key, list, where)):
            check(v, str, f"{label}[{k}]")
        return obj[key]

    names = strings(manifest, "input_names", "")
    required = GROUP_INPUT_NAMES if "groups" in names else INPUT_NAMES
    missing = [n for n in required if n not in names]
    if missing:
        raise BadFileError(path, f"input_names: missing {', '.join(missing)}")
    preset = need(manifest, "preset", dict, "")
    need(preset, "name", str, "preset")
    need(preset, "defaults", dict, "preset")
    seen = set()
    for k, case in enumerate(need(manifest, "cases", list, "")):
        where = f"cases[{k}]"
        check(case, dict, where)
        name = need(case, "name", str, where)
        if name in seen:
            raise BadFileError(path, f"{where}.name: two cases are named {name!r}")
        seen.add(name)
        need(case, "description", str, where)
        file = PurePosixPath(need(case, "file", str, where))
        if file.is_absolute() or ".." in file.parts or "\\" in str(file) or not file.parts:
            raise BadFileError(path, f"{where}.file: {str(file)!r} is not a path inside the "
                                     "golden directory")
        shape = need(case, "shape", list, where)
        if len(shape) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                      for n in shape):
            raise BadFileError(path, f"{where}.shape: expected [B, T], two integers >= 0, got "
                                     f"{shape!r}")
        need(case, "overrides", dict, where)
        need(case, "params", dict, where)
        if "rejected" in case:
            need(case, "rejected", str, where)
            continue
        strings(case, "expected_arrays", where)
        for out, v in need(case, "expected_scalars", dict, where).items():
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not number and v not in ("nan", "inf", "-inf"):
                raise BadFileError(path, f"{where}.expected_scalars[{out!r}]: expected a "
                                         f"number or \"nan\", \"inf\", \"-inf\", got {v!r}")


def load(directory) -> tuple:
    """Read golden files back: ``(manifest, cases)``.

    Each case is a dict with ``name``, ``description``, ``inputs`` (float64
    arrays), ``params`` (the overrides, as :func:`generate_cases` makes them,
    so ``preset(case)`` recomputes it), ``effective_params``, ``expected``
    (arrays and floats; empty for a rejected case) and ``rejected`` (None or
    the preset's error message). A damaged or incomplete file is a
    :class:`~ppo_numpy._npz.BadFileError` naming it (see :func:`read_manifest`).
    """
    root = Path(directory)
    manifest = read_manifest(root)
    cases = []
    for entry in manifest["cases"]:
        path = root / entry["file"]
        data = load_npz(path)
        B, T = entry["shape"]
        inputs = {n: npz_entry(path, data, n, "f",
                               shape=(B,) if n in PER_RESPONSE_NAMES else (B, T))
                  for n in manifest["input_names"]}
        for n in OPTIONAL_INPUT_NAMES:
            if n in data:
                arr = npz_entry(path, data, n, "f")
                if arr.ndim != 2 or arr.shape[0] != B:
                    raise BadFileError(path, f"{n}: expected shape ({B}, K), got {arr.shape}")
                inputs[n] = arr
        expected = {n: npz_entry(path, data, f"expected/{n}", "f")
                    for n in entry.get("expected_arrays", [])}
        expected.update({k: float(v) for k, v in entry.get("expected_scalars", {}).items()})
        cases.append({"name": entry["name"], "description": entry["description"],
                      "inputs": inputs, "params": dict(entry["overrides"]),
                      "effective_params": dict(entry["params"]), "expected": expected,
                      "rejected": entry.get("rejected")})
    return manifest, cases


def _load_with_preset(directory, preset) -> tuple:
    """``(manifest, cases, preset)``: :func:`load`, and ``preset`` resolved or (``None``) the
    one the manifest names; BadFileError if unknown."""
    manifest, cases = load(directory)
    if preset is None:
        preset = manifest["preset"]["name"]
        if preset not in PRESETS:
            raise BadFileError(Path(directory) / MANIFEST, f"preset.name: unknown preset "
                               f"{preset!r}; valid ones are {', '.join(PRESETS)}")
    return manifest, cases, as_preset(preset)


def _recompute(directory, preset, case, k):
    """``preset(case)``, or the ValueError with which the preset rejects the case; a TypeError
    (a parameter of the wrong type) is the manifest's fault (BadFileError)."""
    try:
        return preset(case)
    except TypeError as err:
        raise BadFileError(Path(directory) / MANIFEST, f"cases[{k}].overrides: {err}") from None
    except ValueError as err:
        return err


def verify(directory, preset=None) -> tuple:
    """Reload golden files and recompute every case with the preset: ``(report, problems)``.

    ``report`` compares the stored expected outputs with a fresh computation
    (float64 tolerance). ``problems`` lists what else disagrees: the preset's
    defaults or a case's effective parameters changed since the export, a
    rejected case that the preset now accepts, a golden without an output
    the preset returns. All is well when ``report.passed and not problems``.

    Parameters
    ----------
    directory : path
        Written by :func:`export`.
    preset : Preset or str, optional
        Default: the preset named in the manifest.
    """
    manifest, cases, preset = _load_with_preset(directory, preset)
    report = ComparisonReport("float64", TOLERANCES["float64"],
                              title=f"preset {preset.name!r} now vs golden files")
    problems = []
    if manifest["preset"]["defaults"] != _jsonable(preset.defaults):
        problems.append(f"preset {preset.name!r}: defaults changed since the export: "
                        f"{manifest['preset']['defaults']} -> {_jsonable(preset.defaults)}")
    # a manifest written before the convention switches existed has no "conventions": the
    # preset's conventions then are the ones its code had, and the outputs say if not
    stored = manifest["preset"].get("conventions")
    conventions = _jsonable(getattr(preset, "conventions", {}))
    if isinstance(stored, dict) and stored != conventions:
        problems.append(f"preset {preset.name!r}: conventions changed since the export: "
                        f"{stored} -> {conventions}")
    for k, case in enumerate(cases):
        name = case["name"]
        # before the convention switches, params were the defaults and the overrides
        base = _parameters(preset) if isinstance(stored, dict) else preset.defaults
        if case["effective_params"] != _jsonable({**base, **case["params"]}):
            problems.append(f"{name}: effective parameters differ from the preset's defaults "
                            "updated by the case's overrides")
        outputs = _recompute(directory, preset, case, k)
        if isinstance(outputs, ValueError):
            report.rejected[name] = f"{type(outputs).__name__}: {outputs}"
            if case["rejected"] is None:
                problems.append(f"{name}: the preset now rejects it ({outputs})")
            continue
        if case["rejected"] is not None:
            problems.append(f"{name}: rejected at export ({case['rejected']}), accepted now")
            continue
        missing = sorted(set(outputs) - set(case["expected"]))
        if missing:
            problems.append(f"{name}: no expected value for {', '.join(missing)}")
        report.extend(compare_outputs(outputs, case["expected"], dtype="float64", case=case,
                                      outputs=list(case["expected"])))
    return report, problems


def bit_identical(directory, preset=None) -> tuple:
    """``(n_identical, n_outputs)``: stored outputs a fresh computation reproduces bit for bit."""
    manifest, cases, preset = _load_with_preset(directory, preset)
    same = total = 0
    for k, case in enumerate(cases):
        if case["rejected"] is not None:
            continue
        outputs = _recompute(directory, preset, case, k)
        if isinstance(outputs, ValueError):
            # rejected now, accepted at export (verify lists it): none of its outputs is
            # reproduced
            outputs = {}
        for k, e in case["expected"].items():
            total += 1
            a = np.asarray(outputs.get(k, np.nan), dtype=np.float64)
            same += bool(a.shape == np.shape(e) and np.array_equal(a, e, equal_nan=True))
    return same, total
