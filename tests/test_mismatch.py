"""A sampling engine that differs from the trainer (issue 27): the bfloat16 rounding, the
mismatched sampler, the correction options of the training loop, ``python -m ppo_numpy
mismatch`` and its figure."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from ppo_numpy.models import BOS, EOS, MLPPolicy, evaluate, sample
from ppo_numpy.models.precision import round_to_bfloat16, round_to_precision
from ppo_numpy.programs import mismatch as program
from ppo_numpy.training import PPOConfig, train
from ppo_numpy.training import loop as loop_module
from ppo_numpy.training.loop import new_run, ppo_iteration

# ---- bfloat16 ---------------------------------------------------------------------------
# hand values: bfloat16 keeps 8 significant bits (7 stored); the spacing in [1, 2) is 2^-7,
# in [2, 4) 2^-6, in [1/16, 1/8) 2^-11
BF16_CASES = [
    (1.0, 1.0),
    (1 + 2**-8, 1.0),                       # a tie: to 1 (even last bit)
    (1 + 3 * 2**-8, 1 + 2**-6),             # a tie: 1 + 2^-7 has an odd last bit, up
    (1 + 2**-8 + 2**-20, 1 + 2**-7),        # above the tie
    (1 + 2**-8 - 2**-20, 1.0),              # below it
    (-(1 + 3 * 2**-8), -(1 + 2**-6)),       # sign-magnitude: the same for negatives
    (3.14159265, 201 / 64),                 # 3.14159 / 2^-6 = 201.06 -> 201
    (0.1, 205 / 128 / 16),                  # 0.1 = 1.6 x 2^-4, 1.6 x 128 = 204.8 -> 205
    (1 / 3, 171 / 128 / 4),                 # 1.333 x 128 = 170.67 -> 171
    (255.5, 256.0),                         # 255.5 = 1.9961 x 2^7: 255.5/2 = 127.75 -> 128
    (0.0, 0.0),
    ((2 - 2**-7) * 2.0**127, (2 - 2**-7) * 2.0**127),   # the largest bfloat16 stays
    (3.4e38, math.inf),                     # above it: rounds to inf
]


@pytest.mark.parametrize("x, expected", BF16_CASES)
def test_bfloat16_rounding_by_hand(x, expected):
    assert round_to_bfloat16(x).item() == expected


def test_bfloat16_bit_pattern_and_special_values():
    rng = np.random.default_rng(0)
    x = rng.normal(size=2000) * 10.0 ** rng.integers(-8, 8, size=2000)
    r = round_to_bfloat16(x)
    f32 = x.astype(np.float32)
    for ri, fi in zip(r[:200], f32[:200]):
        bits = struct.unpack("<I", struct.pack("<f", ri))[0]
        assert bits & 0xFFFF == 0                       # a bfloat16: low 16 bits zero
        # nearest of the two bfloat16 neighbours of the float32 value (plain Python)
        below = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack(
            "<f", fi))[0] & 0xFFFF0000))[0]
        up = struct.unpack("<f", struct.pack("<I", (struct.unpack("<I", struct.pack(
            "<f", below))[0] + 0x10000)))[0]
        assert abs(ri - float(fi)) <= min(abs(float(fi) - below), abs(float(fi) - up))
    # idempotent, and NaN and infinities pass
    np.testing.assert_array_equal(round_to_bfloat16(r), r)
    out = round_to_bfloat16([np.nan, np.inf, -np.inf])
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == -np.inf
    x0 = x.copy()
    round_to_precision(x, "bfloat16")
    np.testing.assert_array_equal(x, x0)  # input unchanged


def test_round_to_precision_formats():
    assert round_to_precision([0.1], "float16").item() == 0.0999755859375  # 1638 / 2^14
    assert round_to_precision([0.1], "float32").item() == 0.10000000149011612
    x = np.array([0.1, 1e300])
    np.testing.assert_array_equal(round_to_precision(x, "float64"), x)
    assert round_to_precision([-1e9], "float16").item() == -math.inf
    with pytest.raises(ValueError, match="precision: unknown precision 'int8'"):
        round_to_precision([1.0], "int8")


# ---- the mismatched sampler ---------------------------------------------------------------
PROMPTS = np.array([[BOS, 3, 4], [BOS, 5, 5], [BOS, 6, 3], [BOS, 4, 4]] * 3)  # (12, 3)


def model(seed=0, K=7):
    return MLPPolicy(K, 3, 4, 8, np.random.default_rng(seed), max_len=20)


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def reference_sampler(m, x, seed, T, precision, tau):
    """The sampler written out: at each position, the trainer's logits of the prefix
    (``evaluate``), the engine's log softmax(round(logits) / tau), Gumbel-max."""
    rng = np.random.default_rng(seed)
    B, K = x.shape[0], m.vocab_size
    y = np.zeros((B, T), dtype=np.int64)
    live = np.ones(B, dtype=bool)
    mask = np.zeros((B, T), dtype=bool)
    logp_r = np.zeros((B, T))
    for t in range(T):
        ev = evaluate(m, x, y, np.ones((B, T)))
        lq = _log_softmax(round_to_precision(ev.logits[:, t], precision) / tau)
        g = rng.gumbel(size=(B, K))
        yt = np.argmax(lq + g, axis=-1)
        y[:, t] = np.where(live, yt, 0)
        mask[:, t] = live
        logp_r[:, t] = np.where(live, lq[np.arange(B), yt], 0.0)
        live = live & (yt != EOS)
        if not live.any():
            break
    return y, mask, logp_r


@pytest.mark.parametrize("precision, tau", [("bfloat16", 1.0), ("float16", 1.0),
                                            ("float64", 0.75), ("bfloat16", 1.3)])
def test_mismatched_sampler_draws_from_the_engine_and_records_both_logps(precision, tau):
    m = model()
    r = sample(m, PROMPTS, np.random.default_rng(4), 9, rollout_precision=precision,
               rollout_temperature=tau)
    y, mask, logp_r = reference_sampler(m, PROMPTS, 4, 9, precision, tau)
    np.testing.assert_array_equal(r.responses, y)
    np.testing.assert_array_equal(r.mask, mask)
    np.testing.assert_allclose(r.logp_rollout, logp_r, rtol=0, atol=1e-12)
    # logp_old is the trainer's float64 log-prob at temperature 1, bit for bit
    ev = evaluate(m, PROMPTS, r.responses, r.mask)
    np.testing.assert_array_equal(r.logp_old, ev.logp)
    assert np.all(r.logp_rollout[~r.mask] == 0)
    assert np.any(r.logp_rollout[r.mask] != r.logp_old[r.mask])


def test_float64_sampler_is_todays_bit_for_bit():
    m = model(1)
    plain = sample(m, PROMPTS, np.random.default_rng(9), 9)
    explicit = sample(m, PROMPTS, np.random.default_rng(9), 9, rollout_precision="float64",
                      rollout_temperature=1.0)
    y, mask, logp_r = reference_sampler(m, PROMPTS, 9, 9, "float64", 1.0)
    for r in (plain, explicit):
        np.testing.assert_array_equal(r.responses, y)
        np.testing.assert_array_equal(r.mask, mask)
        assert r.logp_rollout is r.logp_old           # the engine is the trainer
    np.testing.assert_array_equal(explicit.logp_old, plain.logp_old)
    np.testing.assert_allclose(plain.logp_old, logp_r, rtol=0, atol=1e-12)


def test_sampler_bad_options():
    with pytest.raises(ValueError, match="rollout_precision: unknown precision"):
        sample(model(), PROMPTS, np.random.default_rng(0), 3, rollout_precision="fp8")
    with pytest.raises(ValueError, match="rollout_temperature"):
        sample(model(), PROMPTS, np.random.default_rng(0), 3, rollout_temperature=0.0)


# ---- the loop ----------------------------------------------------------------------------
QUICK = dict(task="length", warmup_steps=10, batch_size=16, minibatches=2, epochs=2,
             d_hidden=16, iterations=2)


def test_config_checks_the_rollout_options():
    with pytest.raises(ValueError, match="rollout_clip_min: must be <= rollout_clip_max"):
        PPOConfig(rollout_clip_min=3.0, rollout_clip_max=2.0)
    with pytest.raises(ValueError, match="rollout_temperature: must be > 0"):
        PPOConfig(rollout_temperature=0.0)
    with pytest.raises(ValueError, match="rollout_clip_max: must be > 0"):
        PPOConfig(rollout_clip_max=0.0)
    with pytest.raises(ValueError, match="rollout_correction: unknown value 'tis'"):
        PPOConfig(rollout_correction="tis")
    with pytest.raises(ValueError, match="rollout_precision: unknown value"):
        PPOConfig(rollout_precision="float8")


def test_no_mismatch_with_a_correction_changes_nothing_bit_for_bit():
    # the engine is the trainer: w = exp(0) = 1 exactly, and 1 x surrogate is the surrogate
    base = train(PPOConfig(**QUICK), plot=False)
    for correction in ("token_truncate", "sequence_mask", "geometric_mask"):
        other = train(PPOConfig(**QUICK, rollout_correction=correction), plot=False)
        assert json.dumps(other) == json.dumps(base), correction


def _captured(config, monkeypatch):
    """The is_weights of every minibatch and the rollouts of one iteration of ``config``."""
    calls, rollouts = [], []
    kernel = loop_module.loss_and_grads_kernel

    def spy(policy, minibatch, opts, **kw):
        calls.append((minibatch, kw.get("is_weights")))
        return kernel(policy, minibatch, opts, **kw)

    monkeypatch.setattr(loop_module, "loss_and_grads_kernel", spy)
    state = new_run(config)
    state.on_rollout = rollouts.append
    ppo_iteration(state)
    return calls, rollouts[0]


@pytest.mark.parametrize("correction, clip_min, clip_max", [
    ("token_truncate", None, 1.05), ("token_mask", 0.95, 1.05), ("sequence_mask", None, 1.1),
    ("sequence_truncate", 0.9, 1.1)])
def test_the_weights_reach_the_loss(monkeypatch, correction, clip_min, clip_max):
    config = PPOConfig(**QUICK, rollout_temperature=0.7, rollout_correction=correction,
                       rollout_clip_min=clip_min, rollout_clip_max=clip_max)
    calls, rollout = _captured(config, monkeypatch)
    assert len(calls) == config.epochs * config.minibatches
    lo = -math.inf if clip_min is None else clip_min
    changed = 0
    for minibatch, w in calls:
        # each minibatch's rows of the rollout, found by their log-probs
        for i in range(minibatch.B):
            row = int(np.flatnonzero((rollout.logp_old == minibatch.logp_old[i]).all(axis=1))[0])
            m = rollout.mask[row]
            log_w = [a - b for a, b, keep in zip(rollout.logp_old[row],
                                                 rollout.logp_rollout[row], m) if keep]
            if correction.startswith("sequence"):
                log_w = [sum(log_w)] * len(log_w)
            for t, lw in enumerate(log_w):     # a plain loop over the response tokens
                raw = math.exp(lw)
                if correction.endswith("truncate"):
                    expected = min(max(raw, lo), clip_max)
                else:
                    expected = raw if lo <= raw <= clip_max else 0.0
                assert w[i, t] == pytest.approx(expected, rel=1e-12)
                changed += expected != raw
            assert np.all(w[i, len(log_w):] == 0)
    assert changed > 0  # the bounds were crossed: the test can tell the modes apart


def test_no_correction_passes_no_weights(monkeypatch):
    calls, rollout = _captured(PPOConfig(**QUICK, rollout_temperature=0.7), monkeypatch)
    assert all(w is None for _, w in calls)
    assert np.any(rollout.logp_rollout != rollout.logp_old)


def test_a_mismatched_run_changes_the_update_and_the_correction_changes_it_again():
    a = train(PPOConfig(**QUICK), plot=False)
    b = train(PPOConfig(**QUICK, rollout_temperature=0.7), plot=False)
    c = train(PPOConfig(**QUICK, rollout_temperature=0.7, rollout_correction="token_truncate",
                        rollout_clip_max=1.05), plot=False)
    assert a[-1]["policy_loss"] != b[-1]["policy_loss"] != c[-1]["policy_loss"]


def test_train_cli_takes_the_rollout_options(capsys, tmp_path):
    from ppo_numpy.programs import train as cli

    code = cli.main(["--task", "length", "--warmup-steps", "10", "--batch-size", "16",
                     "--minibatches", "2", "--epochs", "2", "--d-hidden", "16", "--no-plot",
                     "--iterations", "1", "--rollout-precision", "bfloat16",
                     "--rollout-temperature", "0.8", "--rollout-correction", "token_mask",
                     "--rollout-clip-min", "0.5", "--rollout-clip-max", "none",
                     "--max-grad-norm", "none", "--quiet", "--out", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["rollout_precision"], saved["rollout_temperature"],
            saved["rollout_correction"], saved["rollout_clip_min"],
            saved["rollout_clip_max"]) == ("bfloat16", 0.8, "token_mask", 0.5, None)
    # "none" is an option given, also for a field whose default is not None
    assert saved["max_grad_norm"] is None


# ---- python -m ppo_numpy mismatch -----------------------------------------------------------
def test_mismatch_stats_by_hand():
    # w = [2, 1/2, 1] on one response of 3 tokens and [4] on a one-token response
    lp_old = np.log([[0.5, 0.25, 0.5], [0.8, 0.1, 0.1]])
    lp_roll = np.log([[0.25, 0.5, 0.5], [0.2, 0.3, 0.3]])
    mask = np.array([[1, 1, 1], [1, 0, 0]], dtype=bool)
    s = program.mismatch_stats(lp_old, lp_roll, mask)
    # k1 = mean of -log w = -(log 2 - log 2 + 0 + log 4) / 4
    assert s["kl_k1"] == pytest.approx(-math.log(4) / 4, rel=1e-12)
    w = [2.0, 0.5, 1.0, 4.0]
    assert s["w_std"] == pytest.approx(math.sqrt(sum((x - 1.875) ** 2 for x in w) / 4))
    # w = exp(log p_old - log p_roll): two logs and an exp, each within 1 ulp on every CPU
    # kind, and a subtraction: within 4 ulps of 1/2 and 4 (a wrong weight, 1/w, is off by a
    # factor)
    assert s["w_min"] == pytest.approx(0.5, rel=8 * 2**-53)  # 4 ulps: ulp(x) = 2**-52 x here
    assert s["w_max"] == pytest.approx(4.0, rel=8 * 2**-53)
    assert s["tokens"] == 4
    # sequence weights 1 and 4: std 1.5
    assert s["seq_w_std"] == pytest.approx(1.5, rel=1e-12)


@pytest.fixture(scope="module")
def small_results():
    variants = {"no correction": {"rollout_correction": "none", "warmup_steps": 10},
                "TIS": {"rollout_correction": "token_truncate", "rollout_clip_max": 1.05,
                        "warmup_steps": 10}}
    return program.compare("length", "bfloat16", 0.7, seeds=(0, 1), iterations=3,
                           variants=variants)


def test_mismatch_program_output_schema(small_results):
    data = json.loads(program.results_json(small_results, [{"precision": "bfloat16",
                                                            "kl_k1": 0.1234567891}]))
    assert set(data) == {"task", "precision", "rollout_temperature", "iterations",
                         "eval_every", "eval_prompts", "mismatch", "variants"}
    assert data["mismatch"] == [{"precision": "bfloat16", "kl_k1": 0.123457}]
    assert list(data["variants"]) == ["no correction", "TIS"]
    for v in data["variants"].values():
        assert v["fields"]["rollout_precision"] == "bfloat16"
        assert [r["seed"] for r in v["runs"]] == [0, 1]
        for r in v["runs"]:
            assert set(r) == {"seed", "score_frac", "heldout_accuracy", "eval_iterations",
                              "trainer_score_frac", "kl_k1", "w_std", "changed"}
            assert r["eval_iterations"] == [0, 3]
            assert len(r["trainer_score_frac"]) == 2
            for key in ("score_frac", "heldout_accuracy", "kl_k1", "w_std", "changed"):
                assert len(r[key]) == 3
    tis = data["variants"]["TIS"]["runs"][0]
    assert all(0 < c < 1 for c in tis["changed"])          # clip 1.05 truncates some tokens
    assert data["variants"]["no correction"]["runs"][0]["changed"] == [0, 0, 0]
    # the same seed and sampler: the first rollout (before any update) is the same
    assert tis["kl_k1"][0] == data["variants"]["no correction"]["runs"][0]["kl_k1"][0]
    rows = program.summary_rows(small_results)
    assert [r["variant"] for r in rows] == ["no correction", "TIS"]
    assert "| TIS |" in program.markdown_table(rows)


def test_mismatch_figure_draws_each_seed_the_means_and_the_spread(small_results):
    from ppo_numpy.plotting.mismatch import plot_mismatch_comparison

    data = json.loads(program.results_json(small_results))
    fig = plot_mismatch_comparison(data)
    variants = list(data["variants"].values())
    final, *small, low = fig.axes
    assert len(small) == len(variants) == 2
    first_mean = None
    for k, v in enumerate(variants):
        runs = v["runs"]
        # two seeds here: the final scores one dot each, their mean as a tick
        last = [r["trainer_score_frac"][-1] for r in runs]
        dots, tick = final.lines[2 * k], final.lines[2 * k + 1]
        np.testing.assert_array_equal(dots.get_xdata(), last)
        np.testing.assert_array_equal(dots.get_ydata(), [k, k])
        np.testing.assert_allclose(tick.get_xdata(), [sum(last) / 2], rtol=1e-12)
        # the small panel: the mean over the seeds, the band from the lowest to the highest
        curves = np.array([r["trainer_score_frac"] for r in runs])
        mean = small[k].lines[-1]
        np.testing.assert_allclose(mean.get_xdata(), [0, 3])
        np.testing.assert_allclose(mean.get_ydata(), [(a + b) / 2 for a, b in curves.T],
                                   rtol=1e-12)
        (band,) = small[k].collections
        edge = band.get_paths()[0].vertices[:, 1]
        assert np.isclose(edge.min(), curves.min()) and np.isclose(edge.max(), curves.max())
        # the first variant's mean, dashed, on every other panel
        if k == 0:
            first_mean = mean.get_ydata()
            assert len(small[k].lines) == 1
        else:
            np.testing.assert_array_equal(small[k].lines[0].get_ydata(), first_mean)
            assert small[k].lines[0].get_linestyle() == "--"
        np.testing.assert_allclose(low.lines[k].get_ydata(),
                                   [sum(r["kl_k1"][j] for r in runs) / 2 for j in range(3)],
                                   rtol=1e-12)
    assert "seeds" in final.get_title() and "band" in final.get_title()
    # why k1 can be negative is said where it is drawn
    assert "not >= 0" in low.get_title() and "below 0" in low.get_title()
    with pytest.raises(ValueError, match="results: no variant"):
        plot_mismatch_comparison({"variants": {}})


def test_the_stored_comparison_is_the_programs_schema():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "data" / "mismatch_comparison.json"
    data = json.loads(path.read_text())
    assert list(data["variants"]) == list(program.VARIANTS)
    for label, v in data["variants"].items():
        assert [r["seed"] for r in v["runs"]] == [0, 1, 2], label
        assert all(len(r["score_frac"]) == data["iterations"] for r in v["runs"])


def test_mismatch_command_refuses_bad_arguments(capsys):
    for argv in (["--seeds", "0"], ["--rollout-temperature", "0"], ["--precision", "int8"]):
        with pytest.raises(SystemExit) as exc:
            program.main(argv)
        assert exc.value.code == 2, argv
    assert "--rollout-temperature must be > 0" in capsys.readouterr().err
