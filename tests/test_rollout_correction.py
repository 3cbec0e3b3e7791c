"""The rollout correction (ppo_numpy.mismatch.correction): importance weights and rejection masks
for the mismatch between the sampler's and the trainer's log-probs, and ``is_weights=`` in the
policy loss.

Expected values are hand calculations written here, and plain loops over tokens transcribed
from the formulas of TRL 1.16 (``GRPOTrainer._generate_and_score_completions``), verl 0.9.1
(``rollout_corr_helper.compute_rollout_correction_weights``,
``compute_rollout_rejection_mask``) and OpenRLHF 0.11.2 (``models/loss.py``, ``PolicyLoss``);
gradients against centered finite differences of the loss (float64, relative error < 1e-6).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ppo_numpy import (
    Rollout,
    policy_loss_and_grad,
    policy_loss_grad,
    ppo_policy_loss,
    rollout_importance_weights,
    rollout_rejection_mask,
)
from ppo_numpy.mismatch.correction import CRITERIA, SAFETY_BOUND
from tests._helpers import FAST, assert_close, assert_same, finite, padded_batches, show

# ratios pi_old / pi_rollout [4, 1/2, 1/2] (product 1, geometric mean 1), a one-token
# response with ratio 8, and a response of two tokens with ratios [5/2, 5/2]
P_OLD = [[0.8, 0.2, 0.4], [0.8, 0.5, 0.5], [0.75, 0.75, 0.5]]
P_ROLL = [[0.2, 0.4, 0.8], [0.1, 0.5, 0.5], [0.3, 0.3, 0.5]]
MASK = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=bool)
LP_OLD = np.log(P_OLD)
LP_ROLL = np.log(P_ROLL)


def weights(**kw):
    return rollout_importance_weights(LP_OLD, LP_ROLL, MASK, **kw)


# ----------------------------------------------------------------- hand-computed weights

HAND = {
    # token ratios [4, 1/2, 1/2], [8], [5/2, 5/2]
    "token truncate max 2 (verl TIS)": (dict(), [[2, .5, .5], [2, 0, 0], [2, 2, 0]]),
    "token truncate [0.5, 5] (OpenRLHF clip)": (dict(clip_min=0.5, clip_max=5.0),
                                                [[4, .5, .5], [5, 0, 0], [2.5, 2.5, 0]]),
    "token truncate no bounds": (dict(clip_max=None), [[4, .5, .5], [8, 0, 0], [2.5, 2.5, 0]]),
    "token mask max 3 (TRL token_mask)": (dict(mode="mask", clip_max=3.0),
                                          [[0, .5, .5], [0, 0, 0], [2.5, 2.5, 0]]),
    "token mask [0.6, 5] (IcePop)": (dict(mode="mask", clip_min=0.6, clip_max=5.0),
                                     [[4, 0, 0], [0, 0, 0], [2.5, 2.5, 0]]),
    # sequence ratios 4 * 1/4 = 1, 8, 25/4
    "sequence truncate max 3 (TRL sequence_truncate)": (
        dict(level="sequence", clip_max=3.0), [[1, 1, 1], [3, 0, 0], [3, 3, 0]]),
    "sequence mask max 3 (TRL sequence_mask)": (
        dict(level="sequence", mode="mask", clip_max=3.0), [[1, 1, 1], [0, 0, 0], [0, 0, 0]]),
    "sequence mask max 7": (dict(level="sequence", mode="mask", clip_max=7.0),
                            [[1, 1, 1], [0, 0, 0], [6.25, 6.25, 0]]),
    # geometric means 1, 8, 5/2: survivors keep their token ratios
    "geometric [0.5, 5] (OpenRLHF seq)": (
        dict(level="geometric", mode="mask", clip_min=0.5, clip_max=5.0),
        [[4, .5, .5], [0, 0, 0], [2.5, 2.5, 0]]),
    "geometric [0.5, 2]": (dict(level="geometric", mode="mask", clip_min=0.5, clip_max=2.0),
                           [[4, .5, .5], [0, 0, 0], [0, 0, 0]]),
    # TIS max 2: [2, .5, .5], [2], [2, 2]: token mean 9/6 = 3/2
    "token truncate, batch normalized": (
        dict(batch_normalize=True),
        [[4 / 3, 1 / 3, 1 / 3], [4 / 3, 0, 0], [4 / 3, 4 / 3, 0]]),
    # sequence TIS max 3: weights 1, 3, 3, mean over responses 7/3
    "sequence truncate, batch normalized": (
        dict(level="sequence", clip_max=3.0, batch_normalize=True),
        [[3 / 7, 3 / 7, 3 / 7], [9 / 7, 0, 0], [9 / 7, 9 / 7, 0]]),
    # log-ratio bound 1: token log-ratios [log 4 -> 1, log 1/2, log 1/2], [log 8 -> 1]
    "token, log-ratio bound 1": (
        dict(clip_max=None, log_ratio_bound=1.0),
        [[math.e, .5, .5], [math.e, 0, 0], [2.5, 2.5, 0]]),
    # the sequence sum is bounded: log 1 = 0, log 8 -> 1, log 25/4 -> 1
    "sequence, log-ratio bound 1": (
        dict(level="sequence", clip_max=None, log_ratio_bound=1.0),
        [[1, 1, 1], [math.e, 0, 0], [math.e, math.e, 0]]),
}


@pytest.mark.parametrize("case", HAND)
def test_weights_by_hand(case):
    kw, want = HAND[case]
    got = weights(**kw)
    assert_close(got, want, rtol=1e-12, atol=1e-12, case=case)
    assert got.dtype == np.float64 and got.shape == MASK.shape
    assert np.all(got[~MASK] == 0)


def test_one_response_of_shape_T():
    got = rollout_importance_weights(LP_OLD[0], LP_ROLL[0], level="sequence", clip_max=None)
    assert got.shape == (3,)
    assert_close(got, [1, 1, 1])


# ------------------------------------------------ the frameworks' formulas, as plain loops

def rows_of(lp_old, lp_roll, mask):
    """Per row, the list of the response tokens' log-ratios (padding skipped)."""
    return [[lp_old[i][t] - lp_roll[i][t] for t in range(len(mask[i])) if mask[i][t]]
            for i in range(len(mask))]


def scatter(per_token, mask):
    """Per-row lists of token values -> a (B, T) list with 0 at padding."""
    out = []
    for vals, row in zip(per_token, mask):
        it = iter(vals)
        out.append([next(it) if m else 0.0 for m in row])
    return out


def verl_weights(lp_old, lp_roll, mask, level, threshold, lower=None, normalize=False):
    """verl 0.9.1 compute_rollout_correction_weights: clamp the log-ratio (token) or its sum
    (sequence) to [-20, 20], exp; a single threshold truncates from above (TIS), a
    "lower_upper" one keeps [lower, upper] and zeroes the rest (IcePop); batch normalization
    divides by the token mean (token) or the mean over responses (sequence)."""
    out = []
    for lrs in rows_of(lp_old, lp_roll, mask):
        if level == "token":
            raw = [math.exp(min(max(x, -20.0), 20.0)) for x in lrs]
        else:
            s = min(max(sum(lrs), -20.0), 20.0)
            raw = [math.exp(s)] * len(lrs)
        if lower is None:
            out.append([min(v, threshold) for v in raw])
        else:
            out.append([v if lower <= v <= threshold else 0.0 for v in raw])
    if normalize:
        if level == "token":
            tokens = [v for r in out for v in r]
            mean = sum(tokens) / len(tokens)
        else:
            seqs = [r[0] for r in out if r]
            mean = sum(seqs) / len(seqs)
        if mean > 1e-8:
            out = [[v / mean for v in r] for r in out]
    return scatter(out, mask)


def trl_weights(lp_old, lp_roll, mask, mode, clip_min=None, clip_max=3.0):
    """TRL 1.16 vllm_importance_sampling_mode: exp of the token log-ratio (token_*) or of its
    sum over the response (sequence_*), no bound; *_truncate clamps to [clip_min, clip_max],
    *_mask zeroes outside it (None: no bound)."""
    lo = -math.inf if clip_min is None else clip_min
    hi = math.inf if clip_max is None else clip_max
    out = []
    for lrs in rows_of(lp_old, lp_roll, mask):
        if mode.startswith("sequence"):
            raw = [math.exp(sum(lrs))] * len(lrs)
        else:
            raw = [math.exp(x) for x in lrs]
        if mode.endswith("truncate"):
            out.append([min(max(v, lo), hi) for v in raw])
        else:
            out.append([v if lo <= v <= hi else 0.0 for v in raw])
    return scatter(out, mask)


def openrlhf_weights(lp_old, lp_roll, mask, level, mode, low=0.5, high=5.0):
    """OpenRLHF 0.11.2 PolicyLoss with is_correction_gating="ratio": the statistic is the
    token ratio (token) or exp of the mean token log-ratio (seq); clip clamps the token
    statistic to [low, high]; mask keeps the unclamped token ratio where the unit's
    statistic is in [low, high]."""
    out = []
    for lrs in rows_of(lp_old, lp_roll, mask):
        token_is = [math.exp(x) for x in lrs]
        if level == "seq":
            g = math.exp(sum(lrs) / len(lrs))
            out.append([w if low <= g <= high else 0.0 for w in token_is])
        elif mode == "clip":
            out.append([min(max(w, low), high) for w in token_is])
        else:
            out.append([w if low <= w <= high else 0.0 for w in token_is])
    return scatter(out, mask)


def random_batch(seed, B=6, T=7, spread=0.6):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, size=B)
    lengths[0] = 1  # a one-token response
    mask = np.arange(T)[None, :] < lengths[:, None]
    lp_old = -rng.uniform(0.05, 3.0, (B, T))
    lp_roll = lp_old + rng.normal(0.0, spread, (B, T))
    return lp_old, lp_roll, mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("icepop", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_verl_rollout_is(seed, level, icepop, normalize):
    lp_old, lp_roll, mask = random_batch(seed)
    lower = 0.5 if icepop else None
    want = verl_weights(lp_old.tolist(), lp_roll.tolist(), mask.tolist(), level, 2.0, lower,
                        normalize)
    got = rollout_importance_weights(lp_old, lp_roll, mask, level=level,
                                     mode="mask" if icepop else "truncate", clip_max=2.0,
                                     clip_min=lower, batch_normalize=normalize,
                                     log_ratio_bound=SAFETY_BOUND)
    assert_close(got, want, rtol=1e-13, atol=1e-15, lp_old=lp_old, lp_roll=lp_roll, mask=mask)


def test_verl_safety_bound_against_no_bound():
    # a log-ratio of 30: verl's weight is exp(20) before truncation; with batch normalization
    # and no truncation the bound decides every weight of the batch
    lp_old = np.array([[0.0, -1.0]])
    lp_roll = np.array([[-30.0, -1.0]])
    kw = dict(clip_max=None, batch_normalize=True)
    want = verl_weights(lp_old.tolist(), lp_roll.tolist(), [[1, 1]], "token", math.inf,
                        normalize=True)
    got = rollout_importance_weights(lp_old, lp_roll, log_ratio_bound=20.0, **kw)
    assert_close(got, want, rtol=1e-13)
    unbounded = rollout_importance_weights(lp_old, lp_roll, **kw)
    assert_close(unbounded, [[2 * math.exp(30) / (math.exp(30) + 1), 2 / (math.exp(30) + 1)]])
    assert got[0, 1] > 1e3 * unbounded[0, 1]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate",
                                  "sequence_mask"])
@pytest.mark.parametrize("clip_min", [None, 0.7])
def test_trl_vllm_importance_sampling(seed, mode, clip_min):
    lp_old, lp_roll, mask = random_batch(seed, spread=0.4)
    want = trl_weights(lp_old.tolist(), lp_roll.tolist(), mask.tolist(), mode, clip_min, 3.0)
    level, our_mode = mode.split("_")
    got = rollout_importance_weights(lp_old, lp_roll, mask, level=level, mode=our_mode,
                                     clip_max=3.0, clip_min=clip_min)
    assert_close(got, want, rtol=1e-13, atol=1e-15, lp_old=lp_old, lp_roll=lp_roll, mask=mask)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("level, mode, ours", [
    ("token", "clip", dict(level="token", mode="truncate")),
    ("token", "mask", dict(level="token", mode="mask")),
    ("seq", "mask", dict(level="geometric", mode="mask")),
])
def test_openrlhf_is_correction(seed, level, mode, ours):
    lp_old, lp_roll, mask = random_batch(seed, spread=1.0)
    # the third response's log-ratios are 2 to 3, their geometric mean > e^2 > 5: dropped
    lp_roll[2] = lp_old[2] - 2.5 - np.linspace(-0.5, 0.5, lp_old.shape[1])
    want = openrlhf_weights(lp_old.tolist(), lp_roll.tolist(), mask.tolist(), level, mode)
    got = rollout_importance_weights(lp_old, lp_roll, mask, clip_min=0.5, clip_max=5.0, **ours)
    assert_close(got, want, rtol=1e-13, atol=1e-15, lp_old=lp_old, lp_roll=lp_roll, mask=mask)
    # the batch crosses the band: some tokens keep their ratio, some are dropped or clamped
    # (compared to rounding: the ratio is exp of the log-ratio either way)
    w = np.asarray(want)[mask]
    raw = np.exp(lp_old - lp_roll)[mask]
    kept = np.isclose(w, raw, rtol=1e-13, atol=0.0)
    assert np.any(kept) and not np.all(kept)


# ------------------------------------------------------------------------ the properties

LEVEL_MODES = [("token", "truncate"), ("token", "mask"), ("sequence", "truncate"),
               ("sequence", "mask"), ("geometric", "mask")]


@pytest.mark.parametrize("level, mode", LEVEL_MODES)
@pytest.mark.parametrize("normalize", [False, True])
def test_identical_policies_give_weight_one(level, mode, normalize):
    lp_old, _, mask = random_batch(7)
    w = rollout_importance_weights(lp_old, lp_old, mask, level=level, mode=mode, clip_max=2.0,
                                   clip_min=0.5, batch_normalize=normalize)
    assert_same(w, mask.astype(float))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("extra", [dict(), dict(importance_level="sequence"),
                                   dict(loss_type="cispo"), dict(dual_clip=3.0)])
def test_weights_of_identical_policies_change_no_loss(agg, extra):
    lp_old, _, mask = random_batch(8)
    rng = np.random.default_rng(8)
    logp = lp_old + rng.normal(0, 0.3, lp_old.shape)
    A = rng.normal(0, 1, lp_old.shape)
    w = rollout_importance_weights(lp_old, lp_old, mask, level="sequence")
    base = policy_loss_and_grad(logp, lp_old, A, mask, agg=agg, **extra)
    with_w = policy_loss_and_grad(logp, lp_old, A, mask, agg=agg, is_weights=w, **extra)
    assert with_w[0] == base[0] and with_w[1] == base[1]
    assert_same(with_w[2], base[2])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_mask_mode_never_exceeds_truncate_support(seed, level):
    lp_old, lp_roll, mask = random_batch(seed, spread=1.0)
    kw = dict(level=level, clip_min=0.6, clip_max=1.8)
    masked = rollout_importance_weights(lp_old, lp_roll, mask, mode="mask", **kw)
    truncated = rollout_importance_weights(lp_old, lp_roll, mask, mode="truncate", **kw)
    assert not np.any((masked != 0) & (truncated == 0))
    # where a weight survives the mask it is inside the bounds, so truncation leaves it
    kept = masked != 0
    assert_same(masked[kept], truncated[kept])
    assert np.count_nonzero(kept) < np.count_nonzero(truncated)


@pytest.mark.parametrize("mode", ["truncate", "mask"])
@pytest.mark.parametrize("normalize", [False, True])
def test_sequence_level_equals_token_level_for_one_token_responses(mode, normalize):
    rng = np.random.default_rng(3)
    lp_old = -rng.uniform(0.1, 2.0, (8, 1))
    lp_roll = lp_old + rng.normal(0, 0.8, (8, 1))
    kw = dict(mode=mode, clip_min=0.5, clip_max=1.5, batch_normalize=normalize)
    tok = rollout_importance_weights(lp_old, lp_roll, level="token", **kw)
    seq = rollout_importance_weights(lp_old, lp_roll, level="sequence", **kw)
    assert_same(seq, tok)
    if mode == "mask":
        geo = rollout_importance_weights(lp_old, lp_roll, level="geometric", **kw)
        assert_same(geo, tok)


@pytest.mark.parametrize("level, mode", LEVEL_MODES)
def test_padded_batch_equals_its_rows_one_by_one(level, mode):
    lp_old, lp_roll, mask = random_batch(11, spread=0.7)
    kw = dict(level=level, mode=mode, clip_min=0.5, clip_max=2.0, log_ratio_bound=1.5)
    batch = rollout_importance_weights(lp_old, lp_roll, mask, **kw)
    for i in range(mask.shape[0]):
        n = int(mask[i].sum())
        row = rollout_importance_weights(lp_old[i, :n], lp_roll[i, :n], **kw)
        assert_same(batch[i, :n], row, row=i)
    for criterion in CRITERIA:
        high = 1.3 if criterion.endswith("k1") else 0.3
        keep = rollout_rejection_mask(lp_old, lp_roll, mask, criterion=criterion, high=high)
        for i in range(mask.shape[0]):
            n = int(mask[i].sum())
            row = rollout_rejection_mask(lp_old[i, :n], lp_roll[i, :n], criterion=criterion,
                                         high=high)
            assert keep[i, :n].tolist() == row.tolist(), (criterion, i)


def test_garbage_at_padding_changes_nothing_and_inputs_stay():
    lp_old, lp_roll, mask = random_batch(5)
    dirty_old, dirty_roll = lp_old.copy(), lp_roll.copy()
    dirty_old[~mask] = np.nan
    dirty_roll[~mask] = np.where(np.arange((~mask).sum()) % 2, np.inf, 1e300)
    keep_old, keep_roll = dirty_old.copy(), dirty_roll.copy()
    for level, mode in LEVEL_MODES:
        kw = dict(level=level, mode=mode, clip_min=0.5, batch_normalize=True)
        assert_same(rollout_importance_weights(dirty_old, dirty_roll, mask, **kw),
                    rollout_importance_weights(lp_old, lp_roll, mask, **kw))
    for criterion in CRITERIA:
        high = 1.5 if criterion.endswith("k1") else 0.5
        assert np.array_equal(
            rollout_rejection_mask(dirty_old, dirty_roll, mask, criterion=criterion, high=high),
            rollout_rejection_mask(lp_old, lp_roll, mask, criterion=criterion, high=high))
    np.testing.assert_array_equal(dirty_old, keep_old)
    np.testing.assert_array_equal(dirty_roll, keep_roll)


# --------------------------------------------------------------------- rejection masks

def verl_rejection(lp_old, lp_roll, mask, criterion, upper, lower=None):
    """verl 0.9.1 compute_rollout_rejection_mask for one criterion: the log-ratio clamped to
    [-20, 20]; k1 = -x, k2 = x^2 / 2, k3 = exp(x) - 1 - x; per token or the response's sum,
    mean (sum / (count + 1e-8)) or max; k1 kept in [log lower, log upper] (lower = 1/upper
    by default), k2 and k3 kept <= upper; the response mask multiplied in."""
    if criterion.endswith("k1") and lower is None:
        lower = 1.0 / upper
    out = []
    for lrs in rows_of(lp_old, lp_roll, mask):
        xs = [min(max(x, -20.0), 20.0) for x in lrs]
        est = criterion[-2:]
        stat = [(-x if est == "k1" else x * x / 2 if est == "k2" else math.exp(x) - 1 - x)
                for x in xs]
        if criterion.startswith("seq_sum"):
            stat = [sum(stat)] * len(stat)
        elif criterion.startswith("seq_mean"):
            stat = [sum(stat) / (len(stat) + 1e-8)] * len(stat)
        elif criterion.startswith("seq_max"):
            stat = [max(stat)] * len(stat)
        if est == "k1":
            out.append([math.log(lower) <= s <= math.log(upper) for s in stat])
        else:
            out.append([s <= upper for s in stat])
    return [[bool(v) for v in row] for row in scatter(out, mask)]


THRESHOLDS = {"k1": (1.5, None), "k1_band": (2.0, 0.7), "k2": (0.08, None), "k3": (0.08, None)}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("criterion", CRITERIA)
def test_rejection_mask_against_verl(seed, criterion):
    lp_old, lp_roll, mask = random_batch(seed, spread=0.4)
    lp_roll[1, 0] = lp_old[1, 0] + 25.0  # past the safety bound
    keys = ["k1", "k1_band"] if criterion.endswith("k1") else [criterion[-2:]]
    for key in keys:
        high, low = THRESHOLDS[key]
        want = verl_rejection(lp_old.tolist(), lp_roll.tolist(), mask.tolist(), criterion,
                              high, low)
        got = rollout_rejection_mask(lp_old, lp_roll, mask, criterion=criterion, low=low,
                                     high=high)
        assert got.dtype == bool and not np.any(got[~mask])
        assert got.tolist() == want, (criterion, key, show(lp_old=lp_old, lp_roll=lp_roll))


def test_rejection_mask_by_hand():
    # token log-ratios x: [log 4, -log 2, -log 2], [log 8], [log 5/2, log 5/2]
    def keep(criterion, **kw):
        return rollout_rejection_mask(LP_OLD, LP_ROLL, MASK, criterion=criterion,
                                      **kw).astype(int).tolist()

    # k1 = -x in [log(1/3), log 3]: -log 4 < -log 3 out, log 2 in, -log 8 out, -log 2.5 in
    assert keep("token_k1", high=3.0) == [[0, 1, 1], [0, 0, 0], [1, 1, 0]]
    # low and high bound pi_rollout / pi_old = 1/w: with low = 0.24 the token of w = 4
    # (1/w = 0.25) is kept too
    assert keep("token_k1", low=0.24, high=3.0) == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    # sums of k1: 0, -log 8, -2 log 2.5 = -log 6.25
    assert keep("seq_sum_k1", high=7.0) == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    assert keep("seq_sum_k1", high=6.0) == [[1, 1, 1], [0, 0, 0], [0, 0, 0]]
    # means of k1: 0, -log 8, -log 2.5
    assert keep("seq_mean_k1", high=3.0) == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    # k2 = x^2/2: (log 4)^2/2 = 0.961, (log 2)^2/2 = 0.240, (log 8)^2/2 = 2.162,
    # (log 2.5)^2/2 = 0.420
    assert keep("token_k2", high=0.5) == [[0, 1, 1], [0, 0, 0], [1, 1, 0]]
    assert keep("seq_max_k2", high=1.0) == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    # sums 1.441, 2.162, 0.840; means 0.480, 2.162, 0.420
    assert keep("seq_sum_k2", high=1.0) == [[0, 0, 0], [0, 0, 0], [1, 1, 0]]
    assert keep("seq_mean_k2", high=0.45) == [[0, 0, 0], [0, 0, 0], [1, 1, 0]]
    # k3 = w - 1 - x: 3 - log 4 = 1.614, -1/2 + log 2 = 0.193, 7 - log 8 = 4.921,
    # 1.5 - log 2.5 = 0.584
    assert keep("token_k3", high=0.5) == [[0, 1, 1], [0, 0, 0], [0, 0, 0]]
    assert keep("seq_max_k3", high=1.7) == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    # sum 2.0, mean 0.667 for the first response
    assert keep("seq_sum_k3", high=2.1) == [[1, 1, 1], [0, 0, 0], [1, 1, 0]]
    assert keep("seq_mean_k3", high=0.6) == [[0, 0, 0], [0, 0, 0], [1, 1, 0]]


def test_rejection_k2_exact_by_fractions():
    # log-ratios 1/2 and -3/10 (as differences of exact decimals): k2 = 1/8 and 9/200
    lp_old = np.array([[0.0, -1.0]])
    lp_roll = np.array([[-0.5, -0.7]])
    k2 = [Fraction(1, 2) ** 2 / 2, Fraction(3, 10) ** 2 / 2]
    assert k2 == [Fraction(1, 8), Fraction(9, 200)]
    for high, want in [(0.13, [1, 1]), (0.1, [0, 1]), (0.04, [0, 0])]:
        got = rollout_rejection_mask(lp_old, lp_roll, criterion="token_k2", high=high)
        assert got.astype(int).tolist() == [want], high
    # the mean 17/200 = 0.085
    assert sum(k2) / 2 == Fraction(17, 200)
    for high, want in [(0.09, True), (0.08, False)]:
        got = rollout_rejection_mask(lp_old, lp_roll, criterion="seq_mean_k2", high=high)
        assert got.tolist() == [[want, want]], high


def test_rejection_safety_bound_caps_the_statistic():
    # x = 30 is read as 20: k2 = 200 exactly, kept by high = 200 (verl's clamp)
    got = rollout_rejection_mask([[0.0]], [[-30.0]], criterion="token_k2", high=200.0)
    assert got.tolist() == [[True]]
    assert not rollout_rejection_mask([[0.0]], [[-30.0]], criterion="token_k2",
                                      high=199.9).any()


def test_rejection_all_padding_row_is_false():
    got = rollout_rejection_mask(np.zeros((2, 2)), np.zeros((2, 2)), [[1, 1], [0, 0]],
                                 criterion="seq_max_k3", high=1.0)
    assert got.tolist() == [[True, True], [False, False]]


# ------------------------------------------------------------------------- bad input

BAD_WEIGHTS = [
    (dict(clip_min=3.0, clip_max=2.0), ValueError, "clip_min: must be <= clip_max"),
    (dict(clip_max=-1.0), ValueError, "clip_max: must be > 0"),
    (dict(clip_max=0.0), ValueError, "clip_max: must be > 0"),
    (dict(clip_min=-0.1), ValueError, "clip_min: must be >= 0"),
    (dict(clip_max=float("nan")), ValueError, "clip_max: must be finite"),
    (dict(clip_min=float("nan")), ValueError, "clip_min: must be finite"),
    (dict(log_ratio_bound=0.0), ValueError, "log_ratio_bound: must be > 0"),
    (dict(log_ratio_bound=float("nan")), ValueError, "log_ratio_bound: must be finite"),
    (dict(level="seq"), ValueError, "level: unknown level 'seq'; valid ones are token, "
                                    "sequence, geometric"),
    (dict(mode="clip"), ValueError, "mode: unknown mode 'clip'; valid ones are truncate, mask"),
    (dict(level="geometric"), ValueError, "mode: level='geometric'"),
    (dict(batch_normalize=1), TypeError, "batch_normalize: expected True or False"),
    (dict(clip_max="2"), TypeError, "clip_max: expected a real number"),
]


@pytest.mark.parametrize("kw, err, msg", BAD_WEIGHTS)
def test_weights_bad_options(kw, err, msg):
    with pytest.raises(err, match="^" + msg.replace("(", r"\(").replace(")", r"\)")):
        weights(**kw)


def test_weights_bad_arrays():
    with pytest.raises(ValueError, match="logp_rollout: shape"):
        rollout_importance_weights(LP_OLD, LP_ROLL[:, :2], MASK)
    bad = LP_ROLL.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="logp_rollout: non-finite value nan at valid position"):
        rollout_importance_weights(LP_OLD, bad, MASK)
    with pytest.raises(TypeError, match="logp_old"):
        rollout_importance_weights([["a"]], [[0.0]])


BAD_REJECTION = [
    (dict(criterion="token_k4", high=1.0), ValueError,
     "criterion: unknown rejection criterion 'token_k4'; valid ones are token_k1"),
    (dict(criterion="seq_max_k1", high=1.0), ValueError,
     "criterion: unknown rejection criterion 'seq_max_k1'"),
    (dict(criterion="token_k2"), ValueError, "high: criterion 'token_k2' needs a threshold"),
    (dict(criterion="token_k2", high=0.0), ValueError, "high: must be > 0"),
    (dict(criterion="token_k2", high=float("nan")), ValueError, "high: must be finite"),
    (dict(criterion="token_k2", low=0.1, high=1.0), ValueError,
     "low: criterion 'token_k2' takes an upper bound only"),
    (dict(criterion="token_k1", low=3.0, high=2.0), ValueError, "low: must be <= high"),
    (dict(criterion="token_k1", high=0.5), ValueError,
     "high: a k1 criterion with one bound keeps"),
    (dict(criterion="seq_sum_k1", low=-1.0, high=2.0), ValueError, "low: must be > 0"),
    (dict(criterion="seq_sum_k1", low=float("nan"), high=2.0), ValueError,
     "low: must be finite"),
]


@pytest.mark.parametrize("kw, err, msg", BAD_REJECTION)
def test_rejection_bad_options(kw, err, msg):
    with pytest.raises(err, match="^" + msg):
        rollout_rejection_mask(LP_OLD, LP_ROLL, MASK, **kw)


# ------------------------------------------------------------- is_weights in the loss

def token_loop_loss(logp, logp_old, A, mask, w, eps=0.2):
    """-token-mean of w_t min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t), a plain loop."""
    total, n = 0.0, 0
    for i in range(len(mask)):
        for t in range(len(mask[i])):
            if mask[i][t]:
                rho = math.exp(logp[i][t] - logp_old[i][t])
                clipped = min(max(rho, 1 - eps), 1 + eps)
                total += w[i][t] * min(rho * A[i][t], clipped * A[i][t])
                n += 1
    return -total / n


def gspo_loop_loss(logp, logp_old, A, mask, w, eps=0.2):
    """GSPO with per-token weights, seq-mean-token-mean: each token t of response i
    contributes w_t min(s_i A_t, clip(s_i) A_t), s_i = exp(mean_t log rho_t)."""
    rows = []
    for i in range(len(mask)):
        idx = [t for t in range(len(mask[i])) if mask[i][t]]
        s = math.exp(sum(logp[i][t] - logp_old[i][t] for t in idx) / len(idx))
        c = min(max(s, 1 - eps), 1 + eps)
        rows.append(sum(w[i][t] * min(s * A[i][t], c * A[i][t]) for t in idx) / len(idx))
    return -sum(rows) / len(rows)


def loss_batch(seed):
    lp_old, lp_roll, mask = random_batch(seed, spread=0.3)
    rng = np.random.default_rng(seed + 100)
    logp = lp_old + rng.uniform(-0.5, 0.5, lp_old.shape)
    A = rng.normal(0, 1, lp_old.shape)
    w = rollout_importance_weights(lp_old, lp_roll, mask, clip_max=1.5)
    return logp, lp_old, A, mask, w


def test_is_weights_by_hand():
    # rho = [1.5, 0.5, 1.1], A = [2, -1, 1]: terms [2.4, -0.8, 1.1], weights [1/2, 1, 2]
    loss, stats = ppo_policy_loss(np.log([1.5, 0.5, 1.1]), [0.0] * 3, [2.0, -1.0, 1.0],
                                  is_weights=[0.5, 1.0, 2.0])
    assert loss == pytest.approx(-(1.2 - 0.8 + 2.2) / 3, rel=1e-14)
    # the statistics are of the unweighted surrogate: two of three clipped
    assert stats["clipfrac_active"] == pytest.approx(2 / 3)
    d = policy_loss_grad(np.log([1.5, 0.5, 1.1]), [0.0] * 3, [2.0, -1.0, 1.0],
                         is_weights=[0.5, 1.0, 2.0])
    assert_close(d, [0.0, 0.0, -2 * 1.1 / 3], rtol=1e-14)


@pytest.mark.parametrize("seed", range(3))
def test_is_weights_loss_against_loops(seed):
    logp, lp_old, A, mask, w = loss_batch(seed)
    args = (logp.tolist(), lp_old.tolist(), A.tolist(), mask.tolist(), w.tolist())
    loss, _ = ppo_policy_loss(logp, lp_old, A, mask, is_weights=w)
    assert loss == pytest.approx(token_loop_loss(*args), rel=1e-12)
    loss, _ = ppo_policy_loss(logp, lp_old, A, mask, agg="seq-mean-token-mean",
                              importance_level="sequence", is_weights=w)
    assert loss == pytest.approx(gspo_loop_loss(*args), rel=1e-12)


def central_difference(f, x, mask, h=1e-6):
    g = np.zeros_like(x)
    for idx in zip(*np.nonzero(mask)):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (f(xp) - f(xm)) / (2 * h)
    return g


FD_OPTIONS = {
    "clip token-mean": dict(),
    "clip seq-mean-token-mean, clip-higher": dict(agg="seq-mean-token-mean", epsilon_high=0.28),
    "dual clip seq-mean-token-sum": dict(agg="seq-mean-token-sum", dual_clip=1.5),
    "gspo token-mean": dict(importance_level="sequence"),
    "gspo seq-mean-token-mean": dict(importance_level="sequence", agg="seq-mean-token-mean"),
    "kl term": dict(kl_coef=0.1),
}


@pytest.mark.parametrize("name", FD_OPTIONS)
@pytest.mark.parametrize("seed", range(2))
def test_is_weights_gradient_finite_differences(name, seed):
    logp, lp_old, A, mask, w = loss_batch(seed)
    # weights that vary along each response (token-level truncation)
    assert any(len(set(w[i][mask[i]].round(12))) > 1 for i in range(len(mask)))
    kw = dict(FD_OPTIONS[name], is_weights=w)
    ref = lp_old - 0.2
    if "kl_coef" in kw:
        kw["logp_ref"] = ref
    loss, _, d = policy_loss_and_grad(logp, lp_old, A, mask, **kw)
    if kw.get("importance_level") == "sequence":
        # verl's per-token form: w_t times the derivative of the unweighted loss at t (not
        # the derivative of the weighted loss value)
        plain = {k: v for k, v in kw.items() if k != "is_weights"}
        num = w * central_difference(lambda x: ppo_policy_loss(x, lp_old, A, mask, **plain)[0],
                                     logp, mask)
    else:
        num = central_difference(lambda x: ppo_policy_loss(x, lp_old, A, mask, **kw)[0], logp,
                                 mask)
    scale = np.abs(num).max()
    assert scale > 1e-3
    rel = np.abs(d - num).max() / scale
    assert rel < 1e-6, f"{name}: rel err {rel:.2e}\n{show(d=d, num=num)}"
    assert_same(d, policy_loss_grad(logp, lp_old, A, mask, **kw))
    # and the weights change the gradient
    d0 = policy_loss_grad(logp, lp_old, A, mask, **FD_OPTIONS[name],
                          **({"logp_ref": ref} if "kl_coef" in kw else {}))
    assert np.abs(d - d0).max() > 1e-4


@pytest.mark.parametrize("cispo_clip", ["range", "max"])
def test_cispo_gradient_with_is_weights(cispo_clip):
    # CISPO's gradient is not the derivative of its loss value (its weight is a constant);
    # by hand, token-mean: d loss / d logp_t = -(1/n) is_w_t c_t A_t, c_t its bounded ratio
    logp, lp_old, A, mask, w = loss_batch(0)
    d = policy_loss_grad(logp, lp_old, A, mask, loss_type="cispo", epsilon_high=0.28,
                         cispo_clip=cispo_clip, is_weights=w)
    rho = np.exp(logp - lp_old)
    c = np.clip(rho, 0.8, 1.28) if cispo_clip == "range" else np.minimum(rho, 0.28)
    assert_close(d, np.where(mask, -w * c * A / mask.sum(), 0.0), rtol=1e-13, atol=1e-16)


def test_gspo_with_token_weights_is_verls_per_token_form():
    # one response, log rho = [0.1, -0.1] (s = 1, unclipped), A = 1, weights [2, 0],
    # token-mean: loss = -(2 s + 0 s) / 2 = -s. verl 0.9.1 writes the ratio at token t as
    # sg(s) pi_t / sg(pi_t): d loss / d logp_t = -w_t s / 2 = [-1, 0], the token of weight 0
    # gets nothing. (The derivative of the loss value, TRL's form, is -(d s / d logp_t) =
    # -s / 2 at both tokens: the row mean of the weights, 1, times -s / 2.)
    d = policy_loss_grad([0.1, -0.1], [0.0, 0.0], [1.0, 1.0], importance_level="sequence",
                         is_weights=[2.0, 0.0])
    assert_close(d, [-1.0, 0.0], rtol=1e-14)
    row_mean = policy_loss_grad([0.1, -0.1], [0.0, 0.0], [1.0, 1.0], importance_level="sequence",
                                is_weights=[1.0, 1.0])
    assert_close(row_mean, [-0.5, -0.5], rtol=1e-14)


def test_is_weights_large_gspo_batch_takes_readable_form():
    # the fast per-response form is skipped with is_weights: its numbers equal the readable
    rng = np.random.default_rng(0)
    B, T = 256, 80
    mask = np.arange(T)[None, :] < rng.integers(1, T + 1, B)[:, None]
    lp_old = -rng.uniform(0.1, 2.0, (B, T))
    logp = lp_old + rng.normal(0, 0.05, (B, T))
    A = np.repeat(rng.normal(0, 1, (B, 1)), T, axis=1)
    w = rng.uniform(0.5, 1.5, (B, T))
    loss, stats, d = policy_loss_and_grad(logp, lp_old, A, mask, importance_level="sequence",
                                          is_weights=w)
    assert_same(d, policy_loss_grad(logp, lp_old, A, mask, importance_level="sequence",
                                    is_weights=w))
    assert loss == ppo_policy_loss(logp, lp_old, A, mask, importance_level="sequence",
                                   is_weights=w)[0]


def test_is_weights_bad_input_and_padding():
    logp, lp_old, A, mask, w = loss_batch(0)
    with pytest.raises(ValueError, match="is_weights: shape"):
        ppo_policy_loss(logp, lp_old, A, mask, is_weights=w[:, :2])
    bad = w.copy()
    bad[0, 0] = -1.0
    with pytest.raises(ValueError, match="is_weights: importance weights must be >= 0"):
        policy_loss_grad(logp, lp_old, A, mask, is_weights=bad)
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="is_weights: non-finite value inf"):
        policy_loss_and_grad(logp, lp_old, A, mask, is_weights=bad)
    dirty = w.copy()
    dirty[~mask] = np.nan
    keep = dirty.copy()
    assert_same(policy_loss_and_grad(logp, lp_old, A, mask, is_weights=dirty)[2],
                policy_loss_and_grad(logp, lp_old, A, mask, is_weights=w)[2])
    np.testing.assert_array_equal(dirty, keep)


def test_rollout_carries_logp_rollout():
    r = Rollout(mask=[[1, 0]], logp_old=[[-1.0, 0.0]], logp_rollout=[[-1.2, float("nan")]])
    assert r.logp_rollout.tolist() == [[-1.2, 0.0]]
    with pytest.raises(ValueError, match="logp_rollout: shape"):
        Rollout(mask=[[1, 0]], logp_rollout=[[-1.0]])
    with pytest.raises(ValueError, match="logp_rollout: non-finite value nan at valid"):
        Rollout(mask=[[1, 0]], logp_rollout=[[float("nan"), 0.0]])


# -------------------------------------------- docs/conventions.md, section 14: worked numbers

DOCS = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs" / "conventions.md"
D_OLD = np.log([[0.8, 0.2, 0.5], [0.8, 0.5, 0.5], [0.75, 0.75, 0.5]])
D_ROLL = np.log([[0.2, 0.5, 0.8], [0.1, 0.5, 0.5], [0.3, 0.3, 0.5]])
D_MASK = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=bool)
N12 = 12 / 9.025  # verl TIS weights 2, 0.4, 0.625, 2, 2, 2: token mean 9.025 / 6
DOC_ROWS = [
    # (setting as the docs name it, keywords, the weights by hand, row by row)
    ("TRL `sequence_mask` (the default), clip_max 3",
     dict(level="sequence", mode="mask", clip_max=3.0), [[1, 1, 1], [0], [0, 0]]),
    ("TRL `token_truncate`, clip_max 3", dict(level="token", mode="truncate", clip_max=3.0),
     [[3, 0.4, 0.625], [3], [2.5, 2.5]]),
    ("verl `rollout_is=token`, threshold 2", dict(clip_max=2.0, log_ratio_bound=20.0),
     [[2, 0.4, 0.625], [2], [2, 2]]),
    ("verl `rollout_is=sequence`, threshold 2",
     dict(level="sequence", clip_max=2.0, log_ratio_bound=20.0), [[1, 1, 1], [2], [2, 2]]),
    ('verl `rollout_is=token`, threshold `"0.5_5"` (IcePop)',
     dict(mode="mask", clip_min=0.5, clip_max=5.0, log_ratio_bound=20.0),
     [[4, 0, 0.625], [0], [2.5, 2.5]]),
    ("verl `rollout_is=token`, threshold 2, `rollout_is_batch_normalize`",
     dict(clip_max=2.0, log_ratio_bound=20.0, batch_normalize=True),
     [[N12, 0.4 * N12 / 2, 0.625 * N12 / 2], [N12], [N12, N12]]),
    ("OpenRLHF `token`, `clip`, [0.5, 5]", dict(clip_min=0.5, clip_max=5.0),
     [[4, 0.5, 0.625], [5], [2.5, 2.5]]),
    ("OpenRLHF `token`, `mask`, [0.5, 5]", dict(mode="mask", clip_min=0.5, clip_max=5.0),
     [[4, 0, 0.625], [0], [2.5, 2.5]]),
    ("OpenRLHF `seq`, `mask`, [0.5, 5]",
     dict(level="geometric", mode="mask", clip_min=0.5, clip_max=5.0),
     [[4, 0.4, 0.625], [0], [2.5, 2.5]]),
]


def test_docs_worked_numbers():
    text = DOCS.read_text()
    A = np.ones((3, 3))
    for name, kw, hand in DOC_ROWS:
        w = rollout_importance_weights(D_OLD, D_ROLL, D_MASK, **kw)
        got = [w[i][D_MASK[i]].tolist() for i in range(3)]
        for g, h in zip(got, hand):
            assert_close(g, h, rtol=1e-12, atol=1e-15, setting=name)
        # at rho = 1 and A = 1 the token-mean loss is minus the token mean of the weights
        loss = ppo_policy_loss(D_OLD, D_OLD, A, D_MASK, is_weights=w)[0]
        assert loss == pytest.approx(-sum(map(sum, hand)) / 6, rel=1e-12), name
        cells = " / ".join(", ".join(f"{x:.4g}" for x in row) for row in got)
        line = f"| {name} | {cells} | {loss:.6f} |"
        assert line in text, f"docs/conventions.md section 14 lacks or differs from:\n{line}"
    # verl's rejection: seq_mean_k1, threshold 2, keeps the first response only
    keep = rollout_rejection_mask(D_OLD, D_ROLL, D_MASK, criterion="seq_mean_k1", high=2.0)
    assert keep.tolist() == [[True] * 3, [False] * 3, [False] * 3]
    w = rollout_importance_weights(D_OLD, D_ROLL, D_MASK, clip_max=2.0, log_ratio_bound=20.0)
    replaced = ppo_policy_loss(D_OLD, D_OLD, A, keep, is_weights=w)[0]
    zeroed = ppo_policy_loss(D_OLD, D_OLD, A, D_MASK, is_weights=w * keep)[0]
    assert replaced == pytest.approx(-(2 + 0.4 + 0.625) / 3, rel=1e-12)
    assert zeroed == pytest.approx(-(2 + 0.4 + 0.625) / 6, rel=1e-12)
    assert f"= {replaced:.6f}" in text and f": {zeroed:.6f}." in text


# --------------------------------------------- properties over padded batches (hypothesis)


@FAST
@given(padded_batches([finite(-4.0, 0.0), finite(-4.0, 0.0)]),
       st.sampled_from(LEVEL_MODES), st.sampled_from(CRITERIA))
def test_any_placement_and_garbage_equals_rows_one_by_one(pb, level_mode, criterion):
    level, mode = level_mode
    lp_old, lp_roll = pb.arrays
    kw = dict(level=level, mode=mode, clip_min=0.5, clip_max=2.0)
    w = rollout_importance_weights(lp_old, lp_roll, pb.mask, **kw)
    high = 1.5 if criterion.endswith("k1") else 0.2
    keep = rollout_rejection_mask(lp_old, lp_roll, pb.mask, criterion=criterion, high=high)
    assert np.all(w[pb.mask == 0] == 0) and not np.any(keep[pb.mask == 0])
    # equal to rounding: a row's sum of log-ratios (sequence and geometric levels) is added
    # in another order when its padding sits elsewhere, which can move exp of it by an ulp
    for i, (row_old, row_roll) in enumerate(pb.rows):
        assert_close(pb.valid(w, i), rollout_importance_weights(row_old, row_roll, **kw),
                     rtol=1e-13, atol=0.0, row=i)
        assert (pb.valid(keep, i).tolist() == rollout_rejection_mask(
            row_old, row_roll, criterion=criterion, high=high).tolist()), (criterion, i)
