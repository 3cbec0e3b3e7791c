"""The rollout corrections of issue 27 against PyTorch in the forms of verl and TRL.

    python -m benchmarks.rollout_correction [--quick] [--rounds N] [--output docs/benchmarks.md | -]

Over the grid of :mod:`benchmarks.core` (``logp_rollout`` = ``logp_old`` + N(0, 0.3) noise
per token, so some weights cross every bound), in one interleaved run
(:func:`benchmarks.timing.measure_samples`), one intra-op thread, CPU float64:

* ``weights token TIS``: ``rollout_importance_weights(level="token", clip_max=2,
  log_ratio_bound=20)`` against verl 0.9.1's ``compute_rollout_correction_weights`` form
  (``rollout_corr_helper.py``, ``rollout_is="token"``, threshold 2): clamp the log-ratio to
  [-20, 20], exp, times the mask, ``clamp(max=2)``, detach (its metrics, which verl also
  computes in that function, are not timed);
* ``weights sequence mask``: ``level="sequence", mode="mask", clip_max=3`` against TRL 1.16's
  form (``grpo_trainer.py``, ``vllm_importance_sampling_mode="sequence_mask"``): the masked
  sum of the log-ratios, exp, (B, 1), ``masked_fill`` of the weights above 3 with 0;
* ``rejection seq_mean_k1``: ``rollout_rejection_mask(criterion="seq_mean_k1", high=2)``
  against verl's ``compute_rollout_rejection_mask`` form: clamp, k1 = -log w, the masked mean
  per response, kept in [log 1/2, log 2], times the mask;
* ``loss+grad with is_weights``: one call of ``policy_loss_and_grad(..., agg="grpo",
  is_weights=w)`` against TRL's loss (``benchmarks/grpo.py``'s form) with its per-token loss
  multiplied by the (B, T) weight before the mean over each sequence, gradient by autograd.

Every torch form is checked equal to ppo_numpy before timing (:func:`check_against_ppo_numpy`).
A ratio above 1 means ppo_numpy is faster. The section goes at the end of docs/benchmarks.md
(``python -m benchmarks`` keeps everything from its kept sections on).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

from benchmarks.core import GRID, QUICK_GRID
from benchmarks.data import make_batch
from benchmarks.report import ms, ratio
from benchmarks.targets import write_section
from benchmarks.timing import measure_samples, paired_ratio, warm_heap
from ppo_numpy import policy_loss_and_grad, rollout_importance_weights, rollout_rejection_mask

SECTION = "## Rollout corrections (issue 27)"
FUNCTIONS = ("weights token TIS", "weights sequence mask", "rejection seq_mean_k1",
             "loss+grad with is_weights")
EPSILON = 0.2
SAFETY_BOUND = 20.0  # verl's rollout_corr_helper.SAFETY_BOUND


def make_inputs(B: int, T: int, seed: int = 0) -> dict:
    """The batch of :func:`benchmarks.data.make_batch`, its rollout log-probs, A (B,) and the
    token-truncated weights."""
    b = make_batch(B, T, seed=seed)
    rng = np.random.default_rng(seed + 100)
    logp_rollout = b.logp_old + rng.normal(0.0, 0.3, size=(B, T))
    A = rng.normal(0.0, 1.0, size=B)
    A_tok = np.where(b.mask, A[:, None], 0.0)
    w = rollout_importance_weights(b.logp_old, logp_rollout, b.mask, clip_max=2.0,
                                   log_ratio_bound=SAFETY_BOUND)
    return {"batch": b, "logp_rollout": logp_rollout, "A": A, "A_tok": A_tok, "w": w}


def ours(name: str, x: dict):
    """The zero-argument call of ppo_numpy timed for ``name``."""
    b, lr = x["batch"], x["logp_rollout"]
    if name == "weights token TIS":
        return lambda: rollout_importance_weights(b.logp_old, lr, b.mask, clip_max=2.0,
                                                  log_ratio_bound=SAFETY_BOUND)
    if name == "weights sequence mask":
        return lambda: rollout_importance_weights(b.logp_old, lr, b.mask, level="sequence",
                                                  mode="mask", clip_max=3.0)
    if name == "rejection seq_mean_k1":
        return lambda: rollout_rejection_mask(b.logp_old, lr, b.mask, criterion="seq_mean_k1",
                                              high=2.0)
    return lambda: policy_loss_and_grad(b.logp, b.logp_old, x["A_tok"], b.mask, EPSILON,
                                        agg="grpo", is_weights=x["w"])


# --- the frameworks' forms ------------------------------------------------------------------


def _masked_sum(values, mask):
    return (values * mask).sum(dim=-1)


def weights_token_verl(logp_old, logp_rollout, mask, threshold=2.0):
    """verl's token TIS: exp(clamp(log w, +-20)) * mask, clamped above, detached."""
    import torch

    log_ratio = logp_old - logp_rollout
    raw = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)) * mask
    return raw.clamp(max=threshold).detach()


def weights_sequence_mask_trl(logp_old, logp_rollout, mask, clip_max=3.0):
    """TRL's sequence_mask: exp of the masked sum of log w, (B, 1), 0 above clip_max."""
    import torch

    log_ratio = (logp_old - logp_rollout) * mask
    is_ratio = torch.exp(log_ratio.sum(dim=-1, keepdim=True))
    return is_ratio.masked_fill(is_ratio > clip_max, 0.0)


def rejection_seq_mean_k1_verl(logp_old, logp_rollout, mask, upper=2.0):
    """verl's seq_mean_k1: the masked mean of k1 = -clamp(log w) in [log 1/upper, log upper]."""
    import math

    import torch

    log_ratio_safe = torch.clamp(logp_old - logp_rollout, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    token_k1 = -log_ratio_safe
    seq = _masked_sum(token_k1, mask) / (mask.sum(dim=-1) + 1e-8)
    keep = (seq >= math.log(1.0 / upper)) & (seq <= math.log(upper))
    return keep.unsqueeze(-1).to(mask.dtype) * mask


def loss_with_weights_trl(logp, logp_old, advantages, mask, is_ratio, epsilon=EPSILON):
    """TRL's loss_type "grpo" with the vLLM correction: the per-token loss times the weight,
    the mean over each sequence's tokens, then over sequences; d loss / d logp by autograd."""
    import torch

    logp = logp.detach().requires_grad_(True)
    coef_1 = torch.exp(logp - logp_old)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    A = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * A, coef_2 * A)
    per_token_loss = per_token_loss * is_ratio
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    loss.backward()
    return float(loss.detach()), logp.grad


def as_tensors(x: dict) -> dict:
    import torch

    b = x["batch"]
    return {"logp": torch.from_numpy(b.logp), "logp_old": torch.from_numpy(b.logp_old),
            "logp_rollout": torch.from_numpy(x["logp_rollout"]),
            "mask": torch.from_numpy(b.mask.astype(np.float64)),
            "A": torch.from_numpy(x["A"]), "w": torch.from_numpy(x["w"])}


def baseline(name: str, t: dict):
    """The zero-argument torch call of the framework's form for ``name``."""
    args = (t["logp_old"], t["logp_rollout"], t["mask"])
    if name == "weights token TIS":
        return lambda: weights_token_verl(*args)
    if name == "weights sequence mask":
        return lambda: weights_sequence_mask_trl(*args)
    if name == "rejection seq_mean_k1":
        return lambda: rejection_seq_mean_k1_verl(*args)
    return lambda: loss_with_weights_trl(t["logp"], t["logp_old"], t["A"], t["mask"], t["w"])


FRAMEWORK = {"weights token TIS": "verl", "weights sequence mask": "TRL",
             "rejection seq_mean_k1": "verl", "loss+grad with is_weights": "TRL"}


def _same(label, got, want):
    got = np.asarray(got.detach().numpy() if hasattr(got, "detach") else got, dtype=float)
    want = np.asarray(want, dtype=float)
    got = np.broadcast_to(got, want.shape) if got.shape[-1:] == (1,) else got
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-12):
        raise AssertionError(f"{label}: the torch form differs from ppo_numpy")


def check_against_ppo_numpy(B: int = 16, T: int = 12, seed: int = 1) -> None:
    """Raise AssertionError unless every torch form equals ppo_numpy on a small batch."""
    x = make_inputs(B, T, seed=seed)
    t = as_tensors(x)
    m = x["batch"].mask
    for name in FUNCTIONS[:3]:
        want = ours(name, x)()
        got = baseline(name, t)()
        if name == "weights sequence mask":
            got = got * t["mask"]  # TRL's (B, 1) weight meets the mask in the loss
        _same(name, got, np.asarray(want, dtype=float) * m)
    loss, _, dlogp = ours(FUNCTIONS[3], x)()
    got_loss, got_grad = baseline(FUNCTIONS[3], t)()
    _same("loss with is_weights", got_loss, loss)
    _same("gradient with is_weights", got_grad, dlogp)
    # the weights crossed their bounds: the check tells truncation and masking from none
    raw = np.exp(x["batch"].logp_old - x["logp_rollout"])[m]
    if not (np.any(raw > 2) or np.any(raw < 0.5)):
        raise AssertionError("the benchmark's rollout log-probs cross no bound")


def run_grid(grid=GRID, *, rounds=7, target=0.02, progress=None) -> list[dict]:
    check_against_ppo_numpy()
    rows = []
    for B, T in grid:
        x = make_inputs(B, T)
        t = as_tensors(x)
        for name in FUNCTIONS:
            samples = measure_samples({"ours": ours(name, x), "torch": baseline(name, t)},
                                      rounds=rounds, target=target)
            row = {"what": name, "B": B, "T": T, "ours": statistics.median(samples["ours"]),
                   "torch": statistics.median(samples["torch"]),
                   "ratio": paired_ratio(samples, "torch", "ours")}
            rows.append(row)
            if progress:
                progress(row)
    return rows


def markdown(rows, *, command: str, rounds: int, load: str = "") -> list[str]:
    out = [SECTION, "", "Measured in one run of", "", "```bash", command, "```", ""]
    out += [load, ""] if load else []
    out += ["`benchmarks/rollout_correction.py` (its docstring names the framework code each "
            "torch form follows; each is checked equal to ppo_numpy before timing). torch: CPU "
            "float64, one intra-op thread. Each ratio: the median over "
            f"{rounds} interleaved rounds of torch's sample / ppo_numpy's sample taken one "
            "just after the other; above 1x ppo_numpy is faster.", "",
            "| function | torch form | B | T | ppo_numpy ms | torch ms | torch / ppo_numpy |",
            "|---|---|---:|---:|---:|---:|---:|"]
    out += [f"| {r['what']} | {FRAMEWORK[r['what']]} | {r['B']} | {r['T']} | {ms(r['ours'])} "
            f"| {ms(r['torch'])} | {ratio(r['ratio'])} |" for r in rows]
    return out + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rollout_correction",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="two small grid points, few rounds")
    p.add_argument("--rounds", type=int, default=None, help="rounds per median (default 7)")
    p.add_argument("--output", default="-", help="'-' (default) prints the section; a path "
                   "puts it into that Markdown file (docs/benchmarks.md)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    warm_heap()
    rounds = args.rounds or (3 if args.quick else 7)
    target = 0.002 if args.quick else 0.02
    load0 = os.getloadavg()[0]

    def progress(r):
        print(f"{r['what']:>26} ({r['B']:>3}, {r['T']:>4}): ppo_numpy {ms(r['ours']):>8} ms  "
              f"torch / ppo_numpy {ratio(r['ratio'])}", file=sys.stderr, flush=True)

    rows = run_grid(QUICK_GRID if args.quick else GRID, rounds=rounds, target=target,
                    progress=progress)
    load = (f"Load average (1 min) on the machine's {os.cpu_count()} cores: {load0:.1f} at the "
            f"start of this run, {os.getloadavg()[0]:.1f} at the end.")
    parts = ["OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.rollout_correction"]
    parts += ["--quick"] if args.quick else []
    parts += [f"--rounds {args.rounds}"] if args.rounds is not None else []
    parts += [f"--output {args.output}"] if args.output != "-" else []
    lines = markdown(rows, command=" ".join(parts), rounds=rounds, load=load)
    if args.output == "-":
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        write_section(args.output, lines, section=SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
