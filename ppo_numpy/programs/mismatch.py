"""``python -m ppo_numpy mismatch``: a sampler that is not the trainer, and its corrections.

The sampling engine draws the responses from the policy's logits rounded to a lower
precision (``--precision``) and/or at another temperature (``--rollout-temperature``),
while the loss uses the trainer's float64 log-probs at temperature 1 (``PPOConfig``'s
``rollout_precision``, ``rollout_temperature``). Two measurements:

* the mismatch itself (:func:`mismatch_rows`): on the warmed-up policy of seed 0 and one
  batch of ``--batch`` prompts per setting, the k1 estimate of KL(pi_rollout || pi_old)
  per token (the mean of logp_rollout - logp_old over the sampled tokens, which come from
  pi_rollout), the spread of the token weights w_t = pi_old / pi_rollout (standard
  deviation, 1% and 99% quantiles, min, max) and of the sequence weights prod_t w_t;
* training (:func:`compare`): one task, the mismatched sampler, each correction of
  :data:`VARIANTS` (none, TIS, MIS, the sequence mask, OpenRLHF's gate) and the
  run without mismatch, seeds 0 .. N-1. Per run: the sampler's score per iteration (the
  logged ``score_frac``: of responses drawn by the sampler), the *trainer's* score /
  optimum every ``EVAL_EVERY`` iterations (its own T = 1 float64 samples of
  ``EVAL_PROMPTS`` prompts, from a generator of its own, so the run is unchanged), the
  mismatch of each iteration's rollout (k1 KL per token, token-weight std), and the share
  of response tokens whose weight the correction changed (truncated or zeroed).

``--json PATH`` writes every run (docs/data/mismatch_comparison.json, which notebook 15
reads); ``--figure PATH`` draws :func:`ppo_numpy.plotting.mismatch.plot_mismatch_comparison`.
The tables printed are those of docs/training.md, "A sampler that is not the trainer".
Run with one BLAS thread (``OPENBLAS_NUM_THREADS=1``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from ..mismatch.correction import rollout_importance_weights
from ..models.precision import PRECISIONS
from ..models.sampling import sample
from ..training.config import config_for_task, rollout_is_options
from ..training.loop import new_run, ppo_iteration

#: label -> the fields of the variant (over the task's settings and the mismatch); the
#: label names the framework setting it is (docs/conventions.md, section 14)
VARIANTS = {
    "no mismatch (sampler = trainer)": {"rollout_precision": "float64",
                                        "rollout_temperature": 1.0},
    "bfloat16 sampler at T = 1, no correction": {"rollout_precision": "bfloat16",
                                                 "rollout_temperature": 1.0},
    "no correction": {"rollout_correction": "none"},
    "TIS: token_truncate, max 2 (verl rollout_is=token)": {
        "rollout_correction": "token_truncate", "rollout_clip_max": 2.0},
    "MIS: token_mask, [0.5, 2] (verl threshold \"0.5_2.0\")": {
        "rollout_correction": "token_mask", "rollout_clip_min": 0.5, "rollout_clip_max": 2.0},
    "sequence_mask, max 3 (TRL's default)": {
        "rollout_correction": "sequence_mask", "rollout_clip_max": 3.0},
    "geometric_mask, [0.5, 5] (OpenRLHF seq)": {
        "rollout_correction": "geometric_mask", "rollout_clip_min": 0.5,
        "rollout_clip_max": 5.0},
}

#: the settings whose mismatch :func:`mismatch_rows` measures by default
SETTINGS = (("bfloat16", 1.0), ("float16", 1.0), ("float64", 1.1), ("float64", 0.9),
            ("float64", 0.75), ("bfloat16", 0.75))
EVAL_EVERY = 10
EVAL_PROMPTS = 256


def mismatch_stats(logp_old, logp_rollout, mask) -> dict:
    """The mismatch of one rollout: k1 KL(pi_rollout || pi_old) per token, the token weights'
    std, 1% / 99% quantiles, min, max, the sequence weights' std and 1% / 99% quantiles.

    >>> s = mismatch_stats(np.log([[0.5, 0.25]]), np.log([[0.25, 0.25]]), np.array([[1, 1]]) > 0)
    >>> bool(round(s["kl_k1"], 12) == round(-np.log(2) / 2, 12)), s["w_max"], s["seq_w_q99"]
    (True, 2.0, 2.0)
    """
    m = np.asarray(mask, dtype=bool)
    log_w = np.where(m, logp_old - logp_rollout, 0.0)  # (B, T)
    w = np.exp(log_w[m])
    seq = np.exp(log_w.sum(axis=1)[m.any(axis=1)])
    return {"kl_k1": float(-log_w[m].mean()), "w_std": float(w.std()),
            "w_q01": float(np.quantile(w, 0.01)), "w_q99": float(np.quantile(w, 0.99)),
            "w_min": float(w.min()), "w_max": float(w.max()),
            "seq_w_std": float(seq.std()), "seq_w_q01": float(np.quantile(seq, 0.01)),
            "seq_w_q99": float(np.quantile(seq, 0.99)), "tokens": int(m.sum())}


def mismatch_rows(task="length", settings=SETTINGS, batch=1024, seed=0) -> list[dict]:
    """:func:`mismatch_stats` of each (precision, temperature) in ``settings``, on the
    warmed-up policy of ``seed`` and ``batch`` prompts (the same prompts and Gumbel noise
    for every setting)."""
    state = new_run(config_for_task(task=task, seed=seed))
    prompts = state.task.sample_prompts(np.random.default_rng(1000 + seed), batch)
    rows = []
    for precision, temperature in settings:
        r = sample(state.policy, prompts, np.random.default_rng(2000 + seed),
                   state.task.max_new_tokens, rollout_precision=precision,
                   rollout_temperature=temperature)
        rows.append({"precision": precision, "rollout_temperature": temperature,
                     **mismatch_stats(r.logp_old, r.logp_rollout, r.mask)})
    return rows


def trainer_score(state, rng) -> float:
    """The trainer's own score / optimum: its float64 samples at temperature 1."""
    x = state.task.sample_prompts(rng, EVAL_PROMPTS)
    r = sample(state.policy, x, rng, state.task.max_new_tokens)
    return float(np.mean(state.task.score(x, r.responses, r.mask))) / state.task.optimum


def run_one(config) -> dict:
    """Train ``config`` and measure, per iteration, the mismatch and the correction's effect."""
    state = new_run(config)
    correction = rollout_is_options(config)
    trace = {"kl_k1": [], "w_std": [], "changed": []}

    def observe(rollout):
        s = mismatch_stats(rollout.logp_old, rollout.logp_rollout, rollout.mask)
        trace["kl_k1"].append(s["kl_k1"])
        trace["w_std"].append(s["w_std"])
        changed = 0.0
        if correction is not None:
            m = rollout.mask
            log_w = np.where(m, rollout.logp_old - rollout.logp_rollout, 0.0)
            if correction["level"] == "sequence":
                log_w = np.broadcast_to(log_w.sum(axis=1, keepdims=True), log_w.shape)
            w = rollout_importance_weights(rollout.logp_old, rollout.logp_rollout, m,
                                           **correction)
            # truncated or zeroed: more than rounding away from the raw weight
            changed = float(np.mean(~np.isclose(w[m], np.exp(log_w[m]), rtol=1e-9, atol=0)))
        trace["changed"].append(changed)

    state.on_rollout = observe
    eval_rng = np.random.default_rng(10_000 + config.seed)
    evals, at = [trainer_score(state, eval_rng)], [0]
    history = []
    while state.iteration < config.iterations:
        history.append(ppo_iteration(state))
        if state.iteration % EVAL_EVERY == 0 or state.iteration == config.iterations:
            evals.append(trainer_score(state, eval_rng))
            at.append(state.iteration)
    return {"seed": config.seed,
            "score_frac": [row["score_frac"] for row in history],
            "heldout_accuracy": [row["heldout_accuracy"] for row in history],
            "eval_iterations": at, "trainer_score_frac": evals, **trace}


def compare(task="length", precision="float64", rollout_temperature=0.75, seeds=(0, 1, 2),
            iterations=80, variants=None) -> dict:
    """The comparison: ``{"task", "precision", "rollout_temperature", "iterations",
    "eval_every", "variants": {label: {"fields": ..., "runs": [run_one(...), ...]}}}``."""
    variants = VARIANTS if variants is None else variants
    out = {"task": task, "precision": precision, "rollout_temperature": rollout_temperature,
           "iterations": iterations, "eval_every": EVAL_EVERY, "eval_prompts": EVAL_PROMPTS,
           "variants": {}}
    for label, fields in variants.items():
        merged = {"rollout_precision": precision, "rollout_temperature": rollout_temperature,
                  **fields}
        runs = [run_one(config_for_task(task=task, seed=seed, iterations=iterations, **merged))
                for seed in seeds]
        out["variants"][label] = {"fields": merged, "runs": runs}
    return out


def summary_rows(results) -> list[dict]:
    """One row per variant: means over the random seeds (and each run's final trainer score)."""
    rows = []
    for label, v in results["variants"].items():
        runs = v["runs"]
        rows.append({
            "variant": label,
            "final_trainer": [r["trainer_score_frac"][-1] for r in runs],
            "final_sampler": statistics.fmean(statistics.fmean(r["score_frac"][-10:])
                                              for r in runs),
            "mid_trainer": statistics.fmean(r["trainer_score_frac"][len(r["eval_iterations"])
                                                                  // 2] for r in runs),
            "mid_iteration": runs[0]["eval_iterations"][len(runs[0]["eval_iterations"]) // 2],
            "kl_k1": statistics.fmean(statistics.fmean(r["kl_k1"]) for r in runs),
            "w_std": statistics.fmean(statistics.fmean(r["w_std"]) for r in runs),
            "changed": statistics.fmean(statistics.fmean(r["changed"]) for r in runs),
        })
    return rows


def markdown_table(rows) -> str:
    lines = ["| variant | trainer's score / optimum at the end (seeds) | mean | "
             "trainer's, mid-run (iteration) | sampler's, last 10 | KL(pi_rollout \\|\\| "
             "pi_old) per token | std of w_t | tokens whose weight was changed |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        each = ", ".join(f"{x:.3f}" for x in r["final_trainer"])
        lines.append(
            f"| {r['variant']} | {each} | {statistics.fmean(r['final_trainer']):.3f} | "
            f"{r['mid_trainer']:.3f} ({r['mid_iteration']}) | {r['final_sampler']:.3f} | "
            f"{r['kl_k1']:.2e} | {r['w_std']:.3f} | {100 * r['changed']:.1f}% |")
    return "\n".join(lines)


def mismatch_table(rows) -> str:
    lines = ["| sampler | KL(pi_rollout \\|\\| pi_old) per token (k1) | std of w_t | w_t 1% - 99% "
             "| w_t min - max | std of prod_t w_t | prod_t w_t 1% - 99% |",
             "|---|---:|---:|---|---|---:|---|"]
    for r in rows:
        lines.append(
            f"| {r['precision']}, T = {r['rollout_temperature']:g} | {r['kl_k1']:.2e} | "
            f"{r['w_std']:.2e} | {r['w_q01']:.4f} - {r['w_q99']:.4f} | "
            f"{r['w_min']:.3f} - {r['w_max']:.3f} | {r['seq_w_std']:.2e} | "
            f"{r['seq_w_q01']:.4f} - {r['seq_w_q99']:.4f} |")
    return "\n".join(lines)


def results_json(results, mismatch=None) -> str:
    """``results`` (and the ``mismatch`` rows) as JSON, numbers to 6 significant digits, one
    line per run."""
    def short(x):
        if isinstance(x, float):
            return float(f"{x:.6g}")
        if isinstance(x, list):
            return [short(v) for v in x]
        if isinstance(x, dict):
            return {k: short(v) for k, v in x.items()}
        return x

    head = {k: v for k, v in results.items() if k != "variants"}
    head["mismatch"] = short(mismatch or [])
    variants = []
    for label, v in results["variants"].items():
        runs = ",\n".join(json.dumps(short(r), separators=(",", ":")) for r in v["runs"])
        variants.append(f"{json.dumps(label)}: {{\"fields\": {json.dumps(v['fields'])}, "
                        f"\"runs\": [\n{runs}]}}")
    body = json.dumps(head)[:-1]
    return body + ", \"variants\": {\n" + ",\n".join(variants) + "}}\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ppo_numpy mismatch",
        description="A sampler that is not the trainer: the mismatch it makes, and PPO "
                    "trained with no correction, TIS, MIS, the sequence mask and OpenRLHF's "
                    "gate, side by side.")
    parser.add_argument("--task", default="length", help="toy task (default length)")
    parser.add_argument("--precision", default="float64", choices=PRECISIONS,
                        help="the sampler's logits precision (default float64)")
    parser.add_argument("--rollout-temperature", type=float, default=0.75,
                        help="the sampler's temperature (the trainer's is 1; default 0.75)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--iterations", type=int, default=80, help="per run (default 80)")
    parser.add_argument("--batch", type=int, default=1024,
                        help="prompts of the mismatch measurement (default 1024)")
    parser.add_argument("--json", metavar="PATH", help="write every run there")
    parser.add_argument("--figure", metavar="PATH", help="save the comparison figure (PNG)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.iterations < 1 or args.batch < 1:
        parser.error("--seeds, --iterations and --batch must be >= 1")
    if not args.rollout_temperature > 0:
        parser.error("--rollout-temperature must be > 0")
    try:
        rows = mismatch_rows(args.task, batch=args.batch)
        print(mismatch_table(rows), flush=True)
        results = compare(args.task, args.precision, args.rollout_temperature,
                          range(args.seeds), args.iterations)
    except ValueError as err:
        parser.error(str(err))
    print()
    print(markdown_table(summary_rows(results)))
    if args.json:
        Path(args.json).write_text(results_json(results, rows))
    if args.figure:
        from ..plotting.mismatch import plot_mismatch_comparison

        plot_mismatch_comparison(json.loads(results_json(results, rows)), path=args.figure)
    return 0
