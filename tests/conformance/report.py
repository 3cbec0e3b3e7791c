"""Write ``docs/conformance.md`` from the summaries of ``run.py`` (no torch needed here)."""

from __future__ import annotations

from pathlib import Path

from .stubs import STUBS

#: what running the released code showed, and what the presets do about it now (facts with
#: the version; each is tested in tests/ without torch, see the last column)
DIFFERENCES = [
    ("trl-grpo", "TRL 1.16.0 `GRPOConfig.use_bias_correction_kl` defaults to True: "
     "`_compute_loss` multiplies the per-token k3 by the differentiable ratio coef_1 before "
     "`delta` clamps it; the preset had no such option and the runner switched it off by hand "
     "(`kl-in-loss`: -0.095772 vs TRL's -0.096402)",
     "`use_bias_correction_kl` (default True); compared with both values (the grid)",
     "tests/test_kl_bias_correction.py"),
    ("trl-grpo", "TRL 1.16.0 logs `reward_std` as `nanstd` of every reward of the batch; the "
     "preset logged the mean of the group stds (1.7293 vs 1.6417 on `rollout-close`)",
     "the batch's nanstd, float32; compared now", "tests/test_presets_issue34.py"),
    ("openrlhf-grpo", "OpenRLHF 0.11.2 `PolicyLoss` (`policy_loss_type=\"ppo\"`) clamps the "
     "token log-ratio to [-20, 20] before `exp`; the preset applied no clamp (its `ppo` option "
     "differed on every token with \\|logp - logp_old\\| > 20)",
     "clamp added for `ppo` (not for `gspo`, which the release does not clamp)",
     "tests/test_presets_release.py"),
    ("verl-grpo", "verl 0.9.1 `agg_loss` mode `seq-mean-token-sum-norm` divides the token sum "
     "by the number of sequences times T (`loss_scale_factor` unset); the commits the preset "
     "cited (early 2026) divided by T only. The preset already divided by B' T: it matched "
     "the newer release, not its sources",
     "docstring and sources cite 0.9.1 and state both rules", "tests/test_presets_release.py"),
    ("verl-grpo", "verl 0.9.1 `compute_policy_loss_gspo` aggregates by the `loss_agg_mode` it "
     "is given (`ppo_loss` passes the actor's, token-mean by default); the preset always "
     "used seq-mean-token-mean", "gspo follows `loss_agg_mode`", "tests/test_presets_release.py"),
    ("verl-grpo", "verl 0.9.1 computes the outcome estimators in the dtype of "
     "`token_level_rewards`: float32 from its reward manager, float64 once the float64 KL "
     "penalty is subtracted (`use_kl_in_reward`); the preset computed GRPO in float32 always "
     "and had no float32 tolerance for the others or the clip fractions",
     "GRPO in float64 with `use_kl_in_reward`; float64 tolerance 32 2^-24", "this report"),
    ("trl-grpo", "TRL 1.16.0 logs `clip_ratio/low_min` and `clip_ratio/high_max` as the "
     "smallest and the largest clipped fraction of one sequence (nanmin / nanmax over "
     "sequences); the preset logged the batch means", "min / max over sequences",
     "tests/test_presets_release.py"),
    ("openrlhf-grpo", "OpenRLHF 0.11.2 logs `return` as the sum over every column of the token "
     "rewards, -beta KL at padding included (compute_reward does not mask it)",
     "the padding KL is in `stat/return`", "tests/test_presets_release.py"),
    ("openrlhf", "OpenRLHF 0.11.2 computes the KL and the rewards in float32 "
     "(`compute_approx_kl` casts the log-probs), and the advantage normalisation's mean and "
     "variance of `.float()` advantages; a lone token's advantage is (A - fl32(A)) 1e4, not 0. "
     "Its clip ratio is a token mean (the preset's note described a mean of per-row means)",
     "float64 tolerance rtol 1e-9 + 16 2^-24, atol 16 2^-24 (both OpenRLHF presets); the two "
     "ill-conditioned cases listed as not compared", "this report"),
    ("verl-grpo", "verl 0.9.1 `compute_policy_loss_gspo` writes the sequence ratio as "
     "sg[s_i] pi_t / sg[pi_t]: its gradient at token t is -A_t s_i w_t, where the preset's "
     "(the sequence ratio differentiated) is -(sum_u w_u A_u) s_i / n_i. Equal for advantages "
     "constant along a response; they differ for reinforce_plus_plus and remax",
     "`sequence_gradient=\"token\"` (a policy-loss option: token t's gradient through its "
     "own log-prob) for the preset's gspo; dlogp compared for every estimator",
     "tests/test_presets_release.py"),
    ("verl, openrlhf, trl-0.11", "NaN or inf at padding reach the outputs: the frameworks "
     "multiply padding by the mask (NaN * 0 = NaN). Their own tensors hold finite numbers "
     "there, and finite garbage at padding changes nothing in any of them", "none needed",
     "this report"),
]


def _note(n: str) -> str:
    if n in ("CLIP_COV_DRAW", "KL_COV_TIES"):
        # (the text lives next to the code that acts on it)
        from . import verl_runner
        return getattr(verl_runner, n)
    return n


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.2g}"


def write_report(path: Path, summaries: dict, errors: dict, specs: dict, not_run: dict,
                 elapsed: float, *, stubbed, python, torch_version, n_random,
                 nan_padding=None, step=None) -> None:
    L = []
    add = L.append
    add("# Conformance: every preset against its framework's released code")
    add("")
    add("Written by `make conformance` (`tests/conformance/run.py`); do not edit by hand. "
        "Each preset of `ppo_numpy.oracle.presets` is run next to the framework's own "
        "functions, from the released package, on the same inputs: the oracle's cases "
        "(`generate_cases`, `generate_group_cases`, with the options on a small grid) and "
        f"{n_random} random cases per preset, each with one combination of the framework's "
        "options (every value of every option is taken). Gradients are autograd of the "
        "framework's own loss tensor, compared with the preset's `dlogp` and `dvalues`. The "
        "comparison is `ppo_numpy.oracle.compare.compare` in float64 with the preset's own "
        "tolerance ([oracle.md](oracle.md#the-comparison)): masks, probes for kinks, rejected "
        "cases. What each framework does is in [frameworks.md](frameworks.md).")
    add("")
    add(f"Run: Python {python}, torch {torch_version} (CPU), {elapsed:.0f} s for the "
        "comparisons. Install: `requirements-conformance.txt` into `.venv-conformance`, the "
        "frameworks with `--no-deps`, legacy TRL into `.venv-conformance/trl-0.11.4` (run "
        "in a subprocess with that directory first on `sys.path`).")
    add("")
    add("## Summary")
    add("")
    add("| preset | framework | version | cases | comparisons | worst error / allowed | "
        "tie mismatches | result |")
    add("|---|---|---|---|---|---|---|---|")
    for name, spec in specs.items():
        if name in errors:
            add(f"| `{name}` | {spec['framework']} | {spec['package'].split('==')[1]} | - | - "
                f"| - | - | **FAILED**: {errors[name]} |")
            continue
        s = summaries.get(name)
        if s is None:
            continue
        worst = max((o["worst_ratio"] for o in s["outputs"].values()), default=0.0)
        add(f"| `{name}` | {spec['framework']} | {s['version']} | {s['cases']} | "
            f"{s['comparisons']} | {_fmt(worst)} | {s['tie_mismatches']} of "
            f"{s['tie_comparisons']} | {'passed' if s['passed'] else '**FAILED**'} |")
    for name, why in not_run.items():
        add(f"| `{name}` | - | - | - | - | - | - | not run: {why} |")
    add("")
    add("\"Worst error / allowed\": the largest error of any output over the error the "
        "tolerance allows there (at most 1 to pass), and the max errors per output below, are "
        "over the comparisons without kinks; at a kink (a clip decided within rounding, "
        "counted per output) the framework's value must lie in the range the preset takes "
        "under tiny perturbations of the inputs instead. \"Tie mismatches\": in the random cases "
        "with tokens placed exactly on a clip bound (`-ties`), comparisons of gradients and "
        "clip statistics that differ: torch splits the gradient of `min`/`max` at a tie and "
        "which side of the bound a tied ratio falls on is one rounding; they are counted "
        "here, not failed (every other output of those cases must match).")
    add("")
    add("## The presets' defaults are the frameworks' (read from the releases)")
    add("")
    add("Each runner builds the framework's own configuration from the installed release "
        "with its defaults and sets only the options a case sets "
        "(`tests/conformance/framework_config.py`): TRL's `GRPOConfig()`, verl's trainer "
        "file `verl/trainer/config/_generated_ppo_trainer.yaml` through its "
        "`omega_conf_to_dataclass` (ActorConfig, PolicyLossConfig, AlgoConfig, "
        "RolloutCorrectionConfig), OpenRLHF's `cli/train_ppo_ray.py` parser defaults. Every "
        "preset default is compared with the framework's, read at run time (a difference "
        "fails the preset), and one run per preset sets nothing on either side but the "
        "preset's defining option (the critic-free presets' estimator).")
    add("")
    add("| preset | option | preset default | framework field | framework default | "
        "equal |")
    add("|---|---|---|---|---|---|")
    for name, s in summaries.items():
        for o, mine, where, theirs, same in s.get("default_pairs", []):
            add(f"| `{name}` | `{o}` | `{mine}` | `{where}` | `{theirs}` | "
                f"{'yes' if same else '**no**'} |")
    add("")
    add("A changed default fails the preset. Checked once per framework (issue 34), each file "
        "restored after: TRL's `trl/trainer/grpo_config.py` `epsilon` default 0.2 -> 0.25 "
        "gives `conformance: FAILED: trl-grpo: default epsilon: preset 0.2, "
        "GRPOConfig.epsilon 0.25 in the installed release`; verl's "
        "`_generated_ppo_trainer.yaml` actor `clip_ratio_c` 3.0 -> 2.5 fails `verl` and "
        "`verl-grpo` (`default dual_clip: preset 3.0, actor_rollout_ref.actor.clip_ratio_c 2.5`); "
        "OpenRLHF's `train_ppo_ray.py` `--actor.eps_clip` default 0.2 -> 0.25 fails "
        "`openrlhf` and `openrlhf-grpo` (`default epsilon: preset 0.2, --actor.eps_clip 0.25`). "
        "Each time the nothing-set run failed too (12 of 17, 3 of 26 and 2 of 16, 17 of 24 "
        "and 10 of 16 cases). `tests/test_conformance_mechanism.py` tests the mechanism "
        "without the frameworks.")
    add("")
    add("Nothing set on either side (the oracle's own cases):")
    add("")
    for name, s in summaries.items():
        run = s.get("defaults_run")
        if run:
            failed = ", ".join(run["failed"]) or "none"
            add(f"* `{name}`: {run['cases']} cases, failed: {failed}")
    add("")
    add("## Config coverage")
    add("")
    add("Every field of the frameworks' configuration objects that their loss, advantage and "
        "statistics code read in this run (recorded at run time: "
        "`framework_config.Recorder`), mapped to a preset option or pinned at the "
        "framework's default with the reason (`tests/conformance/coverage.py`). A field "
        "read, unmapped and unlisted fails the suite. Where they are read:")
    add("")
    from .coverage import READ_IN, table_lines
    for name, where in READ_IN.items():
        add(f"* `{name}`: {where}")
    add("")
    L.extend(table_lines(summaries))
    add("")
    add("## Differences from the releases, found by running them")
    add("")
    add("| preset | what the release does | the preset now | test |")
    add("|---|---|---|---|")
    for preset, fact, now, test in DIFFERENCES:
        add(f"| `{preset}` | {fact} | {now} | {test} |")
    add("")
    for name, spec in specs.items():
        s = summaries.get(name)
        add(f"## `{name}`: {spec['framework']} {spec['package'].split('==')[1]}")
        add("")
        if s is None:
            add(f"**FAILED**: {errors.get(name, 'not run')}")
            add("")
            continue
        add("Functions called: " + ", ".join(f"`{f}`" for f in spec["functions"]) + ".")
        add("")
        add("Options covered: " + "; ".join(
            f"`{k}` " + ", ".join(f"`{v!r}`" for v in vals) for k, vals in spec["options"].items())
            + ".")
        add("")
        rej = (f" {s['rejected']} rejected by the preset (a layout the framework cannot "
               f"express: {', '.join(s['rejected_names'][:6])}"
               f"{', ...' if len(s['rejected_names']) > 6 else ''})." if s["rejected"] else "")
        add(f"Cases: {s['oracle_cases']} oracle cases x options, {s['random_cases']} random; "
            f"{s['comparisons']} output comparisons; tolerance rtol {s['tolerance'][0]:.3g}, "
            f"atol {s['tolerance'][1]:.3g}.{rej}"
            + (f" Inputs rounded to float32 values: {', '.join(s['input_rounding'])} (the "
               "framework stores them in float32)." if s["input_rounding"] else ""))
        add("")
        add("| output | comparisons | failed | max abs err | max rel err | worst / allowed | "
            "kinks | tie mismatches |")
        add("|---|---|---|---|---|---|---|---|")
        for o, row in s["outputs"].items():
            add(f"| `{o}` | {row['comparisons']} | {row['failed']} | {_fmt(row['max_abs'])} | "
                f"{_fmt(row['max_rel'])} | {_fmt(row['worst_ratio'])} | {row['kinks']} | "
                f"{row['tie_mismatches']} |")
        add("")
        notes = [_note(n) for n in spec["not_compared"]]
        notes += [f"the oracle's case {why}" if why.startswith("garbage") else
                  f"the oracle's case `{case}`: {why}" for case, why in s["excluded"].items()]
        why = spec.get("partial_outputs", {})
        notes += [(f"`{o}`: not returned by the framework's code in {n} cases: "
                   f"{_note(why[o])}" if o in why else f"`{o}`: not compared in {n} cases "
                   "(above)") if o in s["outputs"] else
                  f"`{o}`: not returned by the framework's functions (above)"
                  for o, n in s["not_returned"].items()]
        add("Not compared:")
        add("")
        for n in notes:
            add(f"* {n}")
        add("")
    if nan_padding is not None:
        add("## NaN at `logp_rollout`'s padding: verl 0.9.1 against the docs' table")
        add("")
        add("verl-grpo's pipeline on the group case `rollout-nan-padding` for each "
            "`loss_agg_mode` and correction (`tests/conformance/nan_padding.py`): verl's loss, "
            "the claim of docs/conventions.md (section 14, \"NaN at padding\"), and where the "
            "loss is finite every output against the preset's. "
            + (f"**{len(nan_padding['failures'])} contradicted**." if nan_padding["failures"]
               else "Every cell as the table says."))
        add("")
        add("| loss_agg_mode | correction | the docs say | verl's loss | the preset |")
        add("|---|---|---|---|---|")
        for mode, column, claim, loss, same in nan_padding["rows"]:
            add(f"| `{mode}` | {column} | {claim} | {loss:.6g} | {same or '-'} |")
        add("")
    if step is not None:
        from .step_distributed import WORLD, table_lines

        add(f"## One optimizer step on {WORLD} ranks: torch.distributed, gloo")
        add("")
        add(f"`tests/conformance/step_distributed.py` starts {WORLD} processes (gloo on the "
            "loopback address, a free port; started, joined and, past a time limit, "
            "terminated by the run) that each run their micro-batches of uneven layouts "
            "through the frameworks' released code, with the global counts from real "
            "collectives (all-reduce of the loss mask for verl's `batch_num_tokens`, "
            "all-gather of TRL's `num_items_in_batch`), backward, and average the gradients "
            "by all-reduce. First the normalisers against `ppo_numpy.policy_step` (verl "
            "0.9.1's `agg_loss`, TRL 1.16.0's `_compute_loss`); then the presets' own step "
            "outputs (`tests/conformance/step_presets.py`): verl 0.9.1's `ppo_loss` and "
            "`value_loss` for `verl-grpo` and `verl`, with the metrics reduced as its workers "
            "reduce them, TRL 1.16.0's `_compute_loss` with a distributed accelerator for "
            "both of `trl-grpo`'s rules, and OpenRLHF 0.11.2's `PolicyLoss` with the counts "
            "of its `iter_grad_accum_global_norm` for `openrlhf-grpo` and `openrlhf` (with "
            "`training_step`'s KL loss and the critic's `ValueLoss`), against the presets' "
            "`step/losses`, `step/dlogp`, "
            "`step/value_losses`, `step/dvalues` and `step/stat/...`. "
            + (f"**{len(step['failures'])} differences** (listed at the end of the run)."
               if step["failures"] else "Every one matches (relative 1e-12; the statistics "
               "4 2^-24; OpenRLHF's float32 KL loss within the bound derived from 2^-24, "
               "`step_presets.float32_slack`).")
            + f" {step['seconds']:.0f} s.")
        add("")
        L.extend(table_lines(step))
        add("")
    elif "step" in errors:
        add("## One optimizer step: torch.distributed, gloo")
        add("")
        add(f"**FAILED**: {errors['step']}")
        add("")
    add("## Stubs")
    add("")
    add("The frameworks are installed without their dependencies; the modules below are "
        "replaced by empty stand-ins (`tests/conformance/stubs.py`, the one list) so that the "
        "modules holding the functions import. Imported as stubs in this run: "
        + ", ".join(f"`{n}`" for n in stubbed) + ".")
    add("")
    add("| module | why |")
    add("|---|---|")
    for n in stubbed:
        add(f"| `{n}` | {STUBS[n]} |")
    add("")
    Path(path).write_text("\n".join(L), encoding="utf-8")
