"""What every framework runner shares: torch conversions, the random cases, the option
combinations, and running :func:`ppo_numpy.oracle.compare.compare` into a summary.

Imports torch: only ``make conformance`` (``.venv-conformance``) imports this module.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from ppo_numpy.oracle.cases import (
    ROLLOUT_CASES,
    generate_cases,
    random_case,
    random_params,
    rollout_log_probs,
)
from ppo_numpy.oracle.compare import compare, error_ratio
from ppo_numpy.oracle.group_cases import generate_group_cases, group_inputs
from ppo_numpy.oracle.presets import get_preset

#: random cases per preset (the issue asks for at least 1,000)
N_RANDOM = 1000
#: at most this many option combinations on each of the oracle's own cases
MAX_GRID_ON_ORACLE_CASES = 12


def tensor(x, *, grad=False, dtype=torch.float64):
    t = torch.tensor(np.asarray(x), dtype=dtype)
    return t.requires_grad_(True) if grad else t


def numpy(t) -> np.ndarray:
    return t.detach().to(torch.float64).numpy().copy()


def item(t) -> float:
    return float(t.detach().item()) if hasattr(t, "detach") else float(t)


def grad_of(loss, x) -> np.ndarray:
    """d loss / d x by autograd of the framework's own loss tensor (0 where x does not enter)."""
    (g,) = torch.autograd.grad(loss, x, allow_unused=True)
    return np.zeros(tuple(x.shape)) if g is None else numpy(g)


def params_of(preset_name: str, case: dict) -> dict:
    """The preset's parameters updated by the case's: what both sides are asked to compute."""
    return {**get_preset(preset_name).parameters, **case.get("params", {})}


# ---------------------------------------------------------------------------------------
# Options: every value of every option, as a full grid when small, else random combinations


def option_combinations(options: dict, rng: np.random.Generator, n: int) -> list:
    """``n`` combinations of ``options`` ({name: [values]}) that cover every value of every
    option: the full grid in a random order, cycled (when it has at most ``n`` entries), else
    combinations in which option k takes its values in turn (value j at draws j, j + len,
    ...), the others drawn at random."""
    names = list(options)
    if not names:
        return [{} for _ in range(n)]
    # (the grid's size first: the full product of many options does not fit in memory)
    if math.prod(len(options[k]) for k in names) <= n:
        grid = list(itertools.product(*(options[k] for k in names)))
        order = rng.permutation(len(grid))
        return [dict(zip(names, grid[order[i % len(grid)]])) for i in range(n)]
    out = []
    for i in range(n):
        combo = {}
        lead = names[i % len(names)]
        for k in names:
            values = options[k]
            j = (i // len(names)) % len(values) if k == lead else int(rng.integers(len(values)))
            combo[k] = values[j]
        out.append(combo)
    return out


# ---------------------------------------------------------------------------------------
# Random cases


#: the scales of the random cases' rollout mismatch |logp_rollout - logp_old|
ROLLOUT_SCALES = (1e-3, 1e-2, 0.05, 0.2, 0.6, 1.5)


def garbage_at_padding(rng, inputs: dict, names) -> dict:
    """Finite garbage (N(0, 5^2)) at every padding position of the (B, T) inputs ``names``:
    what a framework's own tensors hold there (log-probs of pad tokens, value-head outputs);
    a framework that lets padding into a masked quantity shows it."""
    m = inputs["mask"] == 1
    out = dict(inputs)
    for n in names:
        if n in inputs:
            out[n] = np.where(m, inputs[n], rng.normal(0.0, 5.0, size=m.shape))
    return out


def ties_at_clip_bounds(rng, inputs: dict, eps: float, value_clip: float | None) -> dict:
    """Put a few response tokens exactly on the clip bounds: logp = logp_old + log(1 +- eps)
    (rho within rounding of the bound) and, with a value head, V = V_old +- value_clip. The
    comparison's probes count them as kinks (``n_kinks``), reported apart."""
    out = dict(inputs)
    m = inputs["mask"] == 1
    pick = m & (rng.random(m.shape) < 0.3)
    sign = rng.choice([-1.0, 1.0], size=m.shape)
    log_bound = np.where(sign > 0, math.log1p(eps), math.log1p(-eps))
    out["logp"] = np.where(pick, inputs["logp_old"] + log_bound, inputs["logp"])
    if value_clip is not None and "values" in inputs:
        pick_v = m & (rng.random(m.shape) < 0.3)
        out["values"] = np.where(pick_v, inputs["old_values"] + sign * value_clip,
                                 inputs["values"])
    return out


def random_ppo_cases(rng, n: int, *, eps=0.2, value_clip=0.2, garbage=True) -> list:
    """``n`` random PPO cases (:func:`ppo_numpy.oracle.cases.random_case`, random gamma and
    lambda): every other one with finite garbage at padding, every fifth with ties at the
    clip bounds, every seventh without padding."""
    cases = []
    for i in range(n):
        case = random_case(rng, name=f"conf-random-{i}", params=random_params(rng),
                           padded=i % 7 != 0)
        inputs = case["inputs"]
        if i % 5 == 1:
            inputs = ties_at_clip_bounds(rng, inputs, eps, value_clip)
            case["name"] += "-ties"
        if i % 3 != 0:
            # the inference engine's log-probs (the rollout correction's input)
            scale = ROLLOUT_SCALES[(i // 3) % len(ROLLOUT_SCALES)]
            inputs["logp_rollout"] = rollout_log_probs(rng, inputs["logp_old"],
                                                       inputs["mask"], scale)
            case["name"] += "-rollout"
        if garbage and i % 2 == 0:
            inputs = garbage_at_padding(rng, inputs, ("logp", "logp_old", "logp_ref", "values",
                                                     "old_values", "logp_rollout"))
            case["name"] += "-garbage"
        case["inputs"] = inputs
        cases.append(case)
    return cases


def random_group_cases(rng, n: int, *, eps=0.2, equal_sizes=False, garbage=True) -> list:
    """``n`` random critic-free cases: P prompts with G responses each (G in 2..5; a group of
    one in about one case in six, or with ``equal_sizes`` every group of one size, one in
    about one case in six), rows in a random order in one case in three, 0/1 scores (in
    every other batch of more than 3 rows) or normal ones, never all equal; garbage at
    padding and ties at the clip bounds as in :func:`random_ppo_cases`."""
    cases = []
    for i in range(n):
        P = int(rng.integers(1, 4))
        T = int(rng.integers(2, 13))
        if equal_sizes:
            # (one response per prompt in about one case in six: n_samples_per_prompt 1)
            G = 1 if i % 6 == 3 else int(rng.integers(2, 6))
            # (a batch of one response whitens nothing but the KL's variance, or a variance
            # of 0 whose float32 rounding the eps 1e-8 multiplies by 1e4: two rows at least)
            P = max(P, 2) if G == 1 else P
            sizes = np.full(P, G)
        else:
            if i % 6 == 3:
                P = max(P, 2)  # (two rows at least: see below)
            sizes = rng.integers(2, 6, size=P)
            if i % 6 == 3:
                sizes[0] = 1  # a group of one
        groups = np.repeat(np.arange(P), sizes)
        if i % 3 == 2:
            groups = rng.permutation(groups)
        lengths = rng.integers(1, T + 1, size=groups.size)
        inputs = group_inputs(rng, groups, lengths, T, binary=i % 2 == 0 and groups.size > 3)
        s = inputs["scores"]
        # why: whitening scores whose spread is small next to their mean loses
        # log10(|mean| / std) digits in a framework's float32 statistics (OpenRLHF's), which
        # no fixed tolerance covers: the random batches are kept well conditioned (equal
        # scores, and tiny variances, are the oracle's edge cases, reported apart)
        if np.all(s == s[0]):
            s[0] = 1.0 - s[0]
        elif np.std(s) < 0.3 * np.max(np.abs(s)):
            inputs["scores"] = s - np.mean(s)
        inputs["reward_components"] = reward_components(np.random.default_rng([i, 27]),
                                                        groups)
        name = f"conf-group-{i}"
        if i % 5 == 1:
            inputs = ties_at_clip_bounds(rng, inputs, eps, None)
            name += "-ties"
        if i % 3 != 0:
            # the inference engine's log-probs, from a bf16-like mismatch to one far beyond
            # every correction's threshold (the rollout correction's input)
            scale = ROLLOUT_SCALES[(i // 3) % len(ROLLOUT_SCALES)]
            inputs["logp_rollout"] = rollout_log_probs(rng, inputs["logp_old"],
                                                       inputs["mask"], scale)
            name += "-rollout"
        if garbage and i % 2 == 0:
            inputs = garbage_at_padding(rng, inputs, ("logp", "logp_old", "logp_ref",
                                                     "logp_rollout"))
            name += "-garbage"
        cases.append({"name": name, "description": "random groups", "inputs": inputs,
                      "params": {}})
    return cases


def reward_components(rng, groups) -> np.ndarray:
    """Three reward components per response (verl's gdpo), (B, 3): a 0/1 one, a normal one,
    one in [0, 10], drawn from a generator of their own (so that the other inputs are the
    cases' of before).

    Why the ordered draw: in a group of two each component's GRPO is +-c_k, so the weighted
    sum of components that order the pair differently cancels to the eps-level differences
    of the c_k; when every group has at most two responses the whole batch can cancel, and
    the whitening then divides float32 rounding by a spread of the same size (no tolerance
    covers it). There the three components are increasing in one draw u_i (they order
    every pair alike); with a group of three or more they are independent."""
    B = groups.size
    if np.max(np.unique(groups, return_counts=True)[1]) <= 2:
        u = rng.random(B)
        return np.stack([(u > 0.5).astype(np.float64), 3.0 * u - 1.5,
                         np.round(10.0 * u, 2)], axis=1)
    return np.stack([(rng.random(B) < 0.5).astype(np.float64), rng.normal(0.0, 1.0, B),
                     np.round(rng.uniform(0.0, 10.0, B), 2)], axis=1)


def with_options(cases: list, combos: list) -> list:
    """Each case once per combination (its own params kept, the options added)."""
    out = []
    for case, combo in zip(cases, combos):
        params = {**case.get("params", {}), **combo}
        tag = ",".join(f"{k}={v}" for k, v in combo.items())
        out.append({**case, "name": f"{case['name']}[{tag}]" if tag else case["name"],
                    "params": params})
    return out


def oracle_cases(preset_name: str, options: dict, rng, seed: int = 0) -> list:
    """The oracle's own cases for the preset, each with up to
    :data:`MAX_GRID_ON_ORACLE_CASES` option combinations covering every value; then the
    cases that carry the preset's own parameters (``PRESET_CASES``: the KL term in its
    gradient forms with tokens beyond the frameworks' bounds, the corrections switched on),
    once each with those parameters (a grid would overwrite them)."""
    preset = get_preset(preset_name)
    # (the PPO presets' rollout-correction cases are made by name: ROLLOUT_CASES)
    groups = "groups" in preset.input_names
    base = (generate_group_cases(seed) if groups
            else generate_cases(seed) + generate_cases(seed, list(ROLLOUT_CASES)))
    own = (generate_group_cases if groups else generate_cases)(seed, ["preset"],
                                                               preset=preset_name)
    n = min(MAX_GRID_ON_ORACLE_CASES, max(1, math.prod(len(v) for v in options.values())))
    out = []
    for case in base:
        out += with_options([case] * n, option_combinations(options, rng, n))
    return out + own


# ---------------------------------------------------------------------------------------
# Running the comparison


def run_preset(preset_name: str, candidate, options: dict, *, seed: int, n_random: int,
               random_cases) -> dict:
    """Compare ``candidate`` (the framework's code) with the preset on the oracle's cases
    (options over a small grid each) and ``n_random`` random cases (one option combination
    each); a summary dict for the report."""
    rng = np.random.default_rng([seed, sum(map(ord, preset_name))])
    cases = oracle_cases(preset_name, options, rng, seed)
    n_oracle = len(cases)
    rand = random_cases(rng, n_random)
    cases += with_options(rand, option_combinations(options, rng, len(rand)))
    report = compare(candidate, preset_name, cases, "float64")
    return summarise(preset_name, report, n_oracle, len(rand))


def summarise(preset_name: str, report, n_oracle: int, n_random: int) -> dict:
    rows = report.rows
    outputs = {}
    for r in rows:
        o = outputs.setdefault(r.output, {"comparisons": 0, "failed": 0, "kinks": 0,
                                          "tie_cases": 0, "max_abs": 0.0, "max_rel": 0.0,
                                          "worst_ratio": 0.0, "worst_case": ""})
        o["comparisons"] += 1
        o["failed"] += 0 if r.passed else 1
        o["kinks"] += r.n_kinks
        o["tie_cases"] += 1 if "-ties" in r.case else 0
        # (the errors where the tolerance alone decides: not at the kinks the probes bracket,
        # not in a tie mismatch, which are counted apart)
        plain = r.n_kinks == 0 and (r.passed or "-ties" not in r.case)
        if plain and np.isfinite(r.max_abs_err):
            o["max_abs"] = max(o["max_abs"], float(r.max_abs_err))
        if plain and np.isfinite(r.max_rel_err):
            o["max_rel"] = max(o["max_rel"], float(r.max_rel_err))
        ratio = _ratio(r) if plain else 0.0
        if ratio >= o["worst_ratio"]:
            o["worst_ratio"], o["worst_case"] = ratio, r.case
    failures = sorted(report.failures, key=_ratio, reverse=True)
    return {
        "preset": preset_name, "passed": report.passed,
        "cases": n_oracle + n_random, "oracle_cases": n_oracle, "random_cases": n_random,
        "rejected": len(report.rejected),
        "rejected_names": sorted({_base(n) for n in report.rejected}),
        "comparisons": len(rows), "outputs": outputs,
        "not_returned": {o: len(v) for o, v in sorted(report.unchecked.items())},
        "failures": [r.describe() for r in failures[:3]],
        "failed_outputs": sorted({r.output for r in failures}),
        "tolerance": (report.tolerance.rtol, report.tolerance.atol),
    }


def _base(name: str) -> str:
    return name.split("[", 1)[0]


def _ratio(r) -> float:
    return error_ratio(r)
