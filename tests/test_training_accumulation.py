"""Gradient accumulation in training: ``train --micro-batches K`` (issue 37, item 5).

* one micro-batch through the accumulation path is the one-pass update, bit for bit;
* with the global normaliser every token has the one-pass weight, so the accumulated
  gradient is the one-pass gradient to the rounding of its sums; with the micro-batch mean
  it is (1/K) sum_k of each micro-batch's own gradient (the hand form), and differs;
* the accumulated gradient against finite differences of the summed micro-batch losses;
* the statistics of an update from its micro-batches', by hand;
* a short run: the global normaliser stays within rounding of the one-pass run, the
  micro-batch mean does not; the configuration's checks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ppo_numpy import gradcheck
from ppo_numpy.models import BigramPolicy
from ppo_numpy.models.loss import loss_and_grads_kernel
from ppo_numpy.models.sampling import sample
from ppo_numpy.policy_loss.objective import PolicyLossOptions
from ppo_numpy.training.accumulation import accumulated_loss_and_grads, combined_stats
from ppo_numpy.training.compare_accumulation import compare_accumulation
from ppo_numpy.training.config import PPOConfig
from ppo_numpy.training.tasks import make_task
from tests._helpers import assert_same

KEYWORDS = dict(c_v=0.5, c_H=0.01, value_clip=None)


def _batch(seed=0, rows=8):
    """A minibatch of a bigram policy's own samples, with advantages and returns drawn at
    random (nonzero everywhere: every token pulls)."""
    rng = np.random.default_rng(seed)
    task = make_task("length")
    policy = BigramPolicy(task.vocab_size, rng)
    rollout = sample(policy, task.sample_prompts(rng, rows), rng, task.max_new_tokens)
    m = rollout.mask
    A = np.where(m, rng.normal(size=m.shape), 0.0)
    R = np.where(m, rng.normal(size=m.shape), 0.0)
    return policy, rollout.replace_trusted(advantages=A, returns=R)


def test_the_responses_have_uneven_lengths():
    # what the comparisons below rely on: micro-batches with different token counts
    _, batch = _batch()
    counts = batch.mask.sum(axis=1).reshape(4, 2).sum(axis=1)
    assert len(set(counts.tolist())) > 1, counts


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "grpo"])
@pytest.mark.parametrize("normaliser", ["global", "micro-batch-mean"])
def test_one_micro_batch_is_the_one_pass_update_bit_for_bit(agg, normaliser):
    # exact equality: the same kernel on the same rows with the divisors it would compute
    # itself (the same floats: D / 1 and D x 1 are D), and a sum of one gradient
    policy, batch = _batch()
    opts = PolicyLossOptions(agg=agg)
    loss, grads, stats = loss_and_grads_kernel(policy, batch, opts, **KEYWORDS)
    loss1, grads1, stats1 = accumulated_loss_and_grads(policy, batch, opts, micro_batches=1,
                                                       normaliser=normaliser, **KEYWORDS)
    assert loss1 == loss and stats1 == stats
    for k in grads:
        assert_same(grads1[k], grads[k])


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_the_global_normaliser_keeps_the_one_pass_gradient(agg):
    policy, batch = _batch()
    opts = PolicyLossOptions(agg=agg)
    loss, grads, _ = loss_and_grads_kernel(policy, batch, opts, **KEYWORDS)
    for K in (2, 4, 8):
        loss_k, grads_k, _ = accumulated_loss_and_grads(policy, batch, opts, micro_batches=K,
                                                        normaliser="global", **KEYWORDS)
        # the same per-token weights; K partial sums of the rows' gradients added in
        # another order: norm-wise within a few units of 2^-52 (it catches one token
        # weighed wrong, which moves the gradient by ~1e-2 of its norm)
        for k in grads:
            err = np.linalg.norm(grads_k[k] - grads[k]) / np.linalg.norm(grads[k])
            assert err < 16 * 2.0**-52, (agg, K, k, err)
        assert abs(loss_k - loss) <= 16 * 2.0**-52 * abs(loss)


def test_the_micro_batch_mean_is_the_mean_of_the_micro_batches_gradients():
    policy, batch = _batch()
    opts = PolicyLossOptions()
    K = 4
    loss_k, grads_k, _ = accumulated_loss_and_grads(policy, batch, opts, micro_batches=K,
                                                    normaliser="micro-batch-mean", **KEYWORDS)
    # by hand: each micro-batch alone, its token mean, then / K
    parts = [loss_and_grads_kernel(policy, batch.rows(np.arange(2 * k, 2 * k + 2)), opts,
                                   **KEYWORDS) for k in range(K)]
    expected = {name: sum(p[1][name] for p in parts) / K for name in grads_k}
    for name in grads_k:
        np.testing.assert_allclose(grads_k[name], expected[name], rtol=1e-13, atol=1e-15)
    assert abs(loss_k - sum(p[0] for p in parts) / K) < 1e-14
    # and it is not the one-pass gradient: the micro-batches hold unequal token counts
    _, grads, _ = loss_and_grads_kernel(policy, batch, opts, **KEYWORDS)
    err = max(np.linalg.norm(grads_k[k] - grads[k]) / np.linalg.norm(grads[k]) for k in grads)
    assert err > 1e-2, err


@pytest.mark.parametrize("normaliser", ["global", "micro-batch-mean"])
def test_accumulated_gradient_matches_finite_differences(normaliser):
    policy, batch = _batch(seed=3)
    opts = PolicyLossOptions(kl_coef=0.0)
    K = 4
    rows = [np.arange(2 * k, 2 * k + 2) for k in range(K)]
    _, grads, _ = accumulated_loss_and_grads(policy, batch, opts, micro_batches=K,
                                             normaliser=normaliser, **KEYWORDS)
    from ppo_numpy.step.normalisers import Normaliser, micro_batch_divisors

    divs = micro_batch_divisors(Normaliser(normaliser), batch.mask, [rows], np.empty(0))[0]

    def summed(params):
        # the losses the K backward passes start from, added
        return sum(loss_and_grads_kernel(policy, batch.rows(r), opts, params=params, divs=dv,
                                         **KEYWORDS)[0] for r, dv in zip(rows, divs))

    report = gradcheck(summed, dict(policy.params), grads)
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, "\n".join(bad)


def test_combined_statistics_by_hand():
    parts = [(3, {"policy_loss": 0.5, "ratio_min": 0.9, "ratio_max": 1.1, "clipfrac_active": 1 / 3,
                  "ratio_mean": 1.0}),
             (1, {"policy_loss": -0.25, "ratio_min": 0.8, "ratio_max": 1.05,
                  "clipfrac_active": 1.0, "ratio_mean": 0.9})]
    out = combined_stats(parts)
    # losses add; min and max over both; token means weighted 3 : 1
    assert out["policy_loss"] == 0.25
    assert out["ratio_min"] == 0.8 and out["ratio_max"] == 1.1
    assert abs(out["clipfrac_active"] - (3 * (1 / 3) + 1 * 1.0) / 4) < 1e-15
    assert abs(out["ratio_mean"] - (3 * 1.0 + 0.9) / 4) < 1e-15
    # rho = 1 exactly in every micro-batch stays exactly 1 (the loop's first-minibatch check)
    ones = combined_stats([(7, {"ratio_mean": 1.0}), (5, {"ratio_mean": 1.0})])
    assert ones["ratio_mean"] == 1.0


def test_a_short_run_global_follows_the_one_pass_run_micro_batch_mean_does_not():
    config = PPOConfig(iterations=3, warmup_steps=20, batch_size=32, minibatches=2, epochs=2)
    table = compare_accumulation(config, micro_batches=4)
    one, glob, mean = table.values()
    assert one["rows_identical"] and one["drift"] == [0.0] * 3
    # rounding only: the parameters within 1e-13 of their largest entries after 3 updates
    # of 2 x 2 minibatches (measured ~1e-15); a token weighed differently moves them ~1e-2
    assert max(glob["drift"]) < 1e-13, glob
    assert glob["row_rel"] < 1e-10, glob
    assert min(mean["drift"]) > 1e-3, mean
    assert mean["row_rel"] > 1e-3


def test_config_checks_and_old_configs_load():
    with pytest.raises(ValueError, match="micro_batches: must divide the minibatch's 16 rows"):
        PPOConfig(micro_batches=3)
    with pytest.raises(ValueError, match="micro_batches: must be > 0"):
        PPOConfig(micro_batches=0)
    with pytest.raises(ValueError, match="normaliser: unknown value 'trl'"):
        PPOConfig(micro_batches=2, normaliser="trl")
    # a configuration written before the fields existed loads with their defaults
    old = json.loads(PPOConfig().to_json())
    del old["micro_batches"], old["normaliser"]
    c = PPOConfig.from_json(json.dumps(old))
    assert (c.micro_batches, c.normaliser) == (1, "global")


def test_the_accumulation_command(capsys):
    from ppo_numpy.__main__ import main

    assert main(["accumulation", "--iterations", "2", "--micro-batches", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | parameters, iteration 1 | parameters, last | ulps")
    assert [line.split(" | ")[0] for line in lines[2:]] == [
        "| one pass", "| global, 2 micro-batches", "| micro-batch-mean, 2 micro-batches"]
    # the one-pass row against itself: every difference 0
    assert lines[2].split(" | ")[1:5] == ["0", "0", "0", "0"]
    with pytest.raises(SystemExit) as err:
        main(["accumulation", "--micro-batches", "3"])
    assert err.value.code == 2
    assert "micro_batches: must divide the minibatch's 16 rows" in capsys.readouterr().err
