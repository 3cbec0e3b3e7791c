"""Gradient-check and timing report of the toy policies: ``python -m ppo_numpy gradient-report``.

1. For the bigram and the MLP policy, every coordinate of every parameter tensor
   is checked against centered finite differences (float64, h = 1e-5) of
   :func:`ppo_loss_and_grads`, for every loss term and aggregation mode, on a
   padded batch whose ratios and value offsets sit away from the kinks. The
   worst relative error (see :mod:`ppo_numpy.grads.gradcheck`) per parameter is printed.
2. The median wall time of one forward + backward at B = 64, T = 16.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

from ..grads.gradcheck import gradcheck
from ..models.bigram import BigramPolicy
from ..models.loss import ppo_loss_and_grads
from ..models.mlp import MLPPolicy
from ..models.sampling import sample
from ..models.vocab import BOS
from ..ppo.aggregation import MODES

EPS, EPS_HIGH, DUAL, VCLIP, TEMP = 0.2, 0.28, 1.8, 0.2, 0.8

TERMS = {
    "policy": dict(c_v=0.0, c_H=0.0),
    "policy+eps_high+dual+clamp": dict(c_v=0.0, c_H=0.0, epsilon_high=EPS_HIGH, dual_clip=DUAL,
                                       log_ratio_clamp=2.0),
    "value": dict(c_v=1.0, c_H=0.0, zero_advantages=True),
    "value clipped": dict(c_v=1.0, c_H=0.0, value_clip=VCLIP, zero_advantages=True),
    "entropy": dict(c_v=0.0, c_H=1.0, zero_advantages=True),
    "kl k1": dict(c_v=0.0, kl_coef=1.0, kl_estimator="k1", zero_advantages=True),
    "kl k2": dict(c_v=0.0, kl_coef=1.0, kl_estimator="k2", zero_advantages=True),
    "kl k3": dict(c_v=0.0, kl_coef=1.0, kl_estimator="k3", zero_advantages=True),
    "combined": dict(c_v=0.7, c_H=0.05, value_clip=VCLIP, epsilon_high=EPS_HIGH,
                     dual_clip=DUAL, kl_coef=0.1),
}


def _push_away(x, points, gap):
    x = x.copy()
    for p in points:
        near = np.abs(x - p) < gap
        x[near] = p + np.where(x[near] >= p, 3 * gap, -3 * gap)
    return x


def check_batch(model, rng, B=5, T=6):
    """A sampled batch with padding whose ratios, value offsets and ties avoid every kink."""
    prompts = np.column_stack([np.full(B, BOS), BOS + 2 + np.arange(B) % 4])
    r = sample(model, prompts, rng, T, TEMP)
    log_rho = _push_away(rng.uniform(-0.8, 0.8, (B, T)),
                         np.log([1 - EPS, 1 + EPS, 1 + EPS_HIGH, DUAL]), 1e-3)
    dv = _push_away(rng.uniform(-0.5, 0.5, (B, T)), [-VCLIP, VCLIP], 1e-3)
    returns = rng.normal(0.0, 1.0, (B, T))
    mid = r.values - dv / 2 + np.clip(dv, -VCLIP, VCLIP) / 2
    returns = np.where(np.abs(returns - mid) < 1e-3, returns + 0.01, returns)
    return {"prompts": prompts, "responses": r.responses, "mask": r.mask,
            "logp_old": r.logp - log_rho, "old_values": r.values - dv,
            "advantages": _push_away(rng.normal(0.0, 1.0, (B, T)), [0.0], 1e-2),
            "returns": returns, "logp_ref": r.logp + rng.normal(0.0, 0.4, (B, T))}


def worst_errors(model, batch):
    """{param: (worst relative error, agg, term)} over every term and aggregation mode."""
    worst = {}
    for term, opts in TERMS.items():
        opts = dict(opts)
        b = batch
        if opts.pop("zero_advantages", False):
            b = dict(batch, advantages=np.zeros_like(batch["advantages"]))
        for agg in MODES:
            kw = dict(epsilon=EPS, agg=agg, temperature=TEMP, **opts)
            if agg == "seq-mean-token-sum-norm":
                kw["norm"] = 4.0
            _, grads, _ = ppo_loss_and_grads(model, b, **kw)
            report = gradcheck(lambda p, b=b, kw=kw: ppo_loss_and_grads(model, b, params=p,
                                                                         **kw)[0],
                               model.params, grads)
            for name, c in report.items():
                if name not in worst or c.rel_error > worst[name][0]:
                    worst[name] = (c.rel_error, agg, term)
    return worst


def median_time(fn, repeats):
    """Median wall time of one call of ``fn`` over ``repeats`` calls (timeit: perf_counter,
    garbage collection off while timing)."""
    return float(np.median(timeit.repeat(fn, repeat=repeats, number=1)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppo_numpy gradient-report",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50, help="timing repeats (median)")
    parser.add_argument("--skip-gradcheck", action="store_true")
    args = parser.parse_args(argv)

    if not args.skip_gradcheck:
        models = {
            "BigramPolicy(7)": BigramPolicy(7, np.random.default_rng(0)),
            "MLPPolicy(7, context=3, d_embed=4, d_hidden=6, max_len=8)":
                MLPPolicy(7, 3, 4, 6, np.random.default_rng(0), max_len=8),
        }
        print(f"worst relative error per parameter, every coordinate, {len(TERMS)} loss terms x "
              f"{len(MODES)} aggregation modes, temperature {TEMP}, float64, h = 1e-5")
        for label, model in models.items():
            batch = check_batch(model, np.random.default_rng(1))
            print(f"\n{label}: B x T = {batch['mask'].shape}, "
                  f"{int(batch['mask'].sum())} response tokens")
            for name, (err, agg, term) in worst_errors(model, batch).items():
                shape = str(model.params[name].shape)
                print(f"  {name:6s} {shape:9s} {err:.2e}   ({term}, {agg})")

    B, P, T = 64, 4, 16
    model = MLPPolicy(16, 4, 16, 64, np.random.default_rng(0), max_len=32)
    rng = np.random.default_rng(1)
    prompts = np.column_stack([np.full(B, BOS), rng.integers(3, 16, (B, P - 1))])
    r = sample(model, prompts, rng, T)
    batch = {"prompts": prompts, "responses": r.responses, "mask": r.mask, "logp_old": r.logp,
             "old_values": r.values, "advantages": rng.normal(size=(B, T)),
             "returns": rng.normal(size=(B, T))}
    tokens = np.concatenate([prompts, r.responses], axis=1)[:, :-1]
    G = rng.normal(size=(B, P + T - 1, 16))

    def model_only():
        logits, values, cache = model.forward(tokens)
        model.backward(cache, G, values)

    def full_loss():
        ppo_loss_and_grads(model, batch, c_v=0.5, c_H=0.01, value_clip=0.2)

    def rollout():
        sample(model, prompts, np.random.default_rng(2), T)

    print(f"\ntiming, {model!r}")
    print(f"  B = {B}, prompt P = {P}, response T = {T}; median of {args.repeats} repeats")
    n = args.repeats
    print(f"  model forward + backward (B, P+T-1):  {1e3 * median_time(model_only, n):.2f} ms")
    print(f"  ppo_loss_and_grads (eval + 4 terms):  {1e3 * median_time(full_loss, n):.2f} ms")
    print(f"  sample (T = {T} steps):               "
          f"{1e3 * median_time(rollout, max(3, n // 10)):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
