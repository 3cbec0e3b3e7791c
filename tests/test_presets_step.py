"""The presets' optimizer step over ranks and micro-batches (issue 37, items 2, 3 and 7).

* every preset with a policy loss gives ``step/losses`` and ``step/dlogp`` (and, with a value
  head, ``step/value_losses`` and ``step/dvalues``) for a case with a ``"layout"``, and no
  ``step/...`` output without one;
* the step's weights by hand on a batch whose ratios are 1 (each token's term is its
  advantage): verl's global token count and TRL's per-micro-batch ``grpo`` rule;
* ``step/dlogp`` and ``step/dvalues`` against centered finite differences of the summed
  micro-batch losses, the KL term in the loss included;
* the diagnosis names a candidate's normaliser and says how far its step is from the
  full-batch gradient (``full_batch_deviation`` by hand);
* bad input: each error names the layout entry.
"""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy import gradcheck
from ppo_numpy.oracle.diagnose import diagnose, full_batch_deviation
from ppo_numpy.oracle.group_cases import step_cases
from ppo_numpy.oracle.presets import PRESETS, Preset, get_preset
from ppo_numpy.oracle.switches import switches_for

#: the presets with a value head (PPO): their step has the value loss too
PPO = [n for n, p in PRESETS.items() if "values" in p.input_names]


def _without_step(case: dict) -> dict:
    return {k: v for k, v in case.items() if k not in ("layout", "steps_per_generation")}


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_gives_the_step_on_a_layout_and_nothing_without(name):
    preset = get_preset(name)
    cases = step_cases(preset, n_base=1)
    assert cases, f"{name}: no step case"
    for case in cases:
        out = preset(case)
        M = sum(len(rank) for rank in case["layout"])
        B, T = case["inputs"]["mask"].shape
        assert out["step/losses"].shape == (M,), (name, case["name"])
        assert out["step/dlogp"].shape == (B, T), (name, case["name"])
        if name in PPO:
            assert out["step/value_losses"].shape == (M,), (name, case["name"])
            assert out["step/dvalues"].shape == (B, T), (name, case["name"])
        # the gradient is 0 at padding
        m = np.asarray(case["inputs"]["mask"]) == 1
        assert np.all(out["step/dlogp"][~m] == 0.0), (name, case["name"])
        plain = preset(_without_step(case))
        assert not [k for k in plain if k.startswith("step/")], (name, sorted(plain))
        # the one-batch outputs are the same with and without a layout (exact: the same
        # calls on the same arrays; the step is computed beside them)
        for key, value in plain.items():
            np.testing.assert_array_equal(out[key], value, err_msg=f"{name} {key}")


# ---- the weights by hand ----


def _ratio_one_case(layout) -> dict:
    """4 responses of 3, 1, 2 and 2 tokens (N = 8) in two groups of two, scores 1, 0, 1, 0;
    logp = logp_old = logp_ref, so rho = 1 and each token's term is its advantage A_i
    (no clip is active, no KL)."""
    m = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=np.float64)
    logp = np.where(m == 1, -0.7, 0.0)
    return {"name": "ratio-one", "layout": layout,
            "inputs": {"logp": logp, "logp_old": logp.copy(), "logp_ref": logp.copy(),
                       "scores": np.array([1.0, 0.0, 1.0, 0.0]),
                       "groups": np.array([0.0, 0.0, 1.0, 1.0]),
                       "baseline_scores": np.zeros(4), "mask": m}}


LAYOUT = [[[0], [1]], [[2, 3]]]  # rank 0: two micro-batches; rank 1: one; P = 2


def test_verl_grpo_step_by_hand():
    # verl 0.9.1 agg_loss, token-mean: loss_{r,k} = -sum_{t in (r,k)} A_t / N * P, with
    # N = 8 the step's tokens (all-reduced) and P = 2 ranks. A = (a, -a, a, -a) by group.
    out = get_preset("verl-grpo")(_ratio_one_case(LAYOUT))
    a = out["advantages"][0, 0]
    assert a > 0 and np.all(out["advantages"][1:, 0] == [-a, a, -a])
    expected = [-3 * a / 8 * 2, a / 8 * 2, -(2 * a - 2 * a) / 8 * 2]
    np.testing.assert_allclose(out["step/losses"], expected, rtol=1e-15, atol=1e-16)
    # d/dlogp_t: -A_t P / N, then / P (the ranks averaged): -A_t / 8, the full-batch weight
    m = out["advantages"] != 0
    np.testing.assert_allclose(out["step/dlogp"], np.where(m, -out["advantages"] / 8, 0.0),
                               rtol=1e-15)


def test_trl_grpo_rule_by_hand():
    # TRL 1.16.0, loss_type grpo: each micro-batch's mean over its rows of each row's token
    # mean, / K (current_gradient_accumulation_steps, the same on every rank)
    trl = get_preset("trl-grpo")
    m = np.asarray(_ratio_one_case(LAYOUT)["inputs"]["mask"]) == 1
    full = trl(_without_step(_ratio_one_case(LAYOUT)), loss_type="grpo")
    a = full["advantages"][0, 0]  # (TRL's float32 advantage; the weights below are exact)
    # the full batch: -A_i / n_i / B with n = (3, 1, 2, 2), B = 4
    full_rows = np.array([-a / 3 / 4, a / 4, -a / 2 / 4, a / 2 / 4])
    np.testing.assert_allclose(full["dlogp"], np.where(m, full_rows[:, None], 0.0), rtol=1e-15)

    # one rank, micro-batches of 3 rows and 1 row (K = 2): losses -(a - a + a) / 3 / 2 and
    # a / 1 / 2; row weights -A_i / n_i / B_k / K: not the full batch's
    out = trl(_ratio_one_case([[[0, 1, 2], [3]]]), loss_type="grpo")
    np.testing.assert_allclose(out["step/losses"], [-a / 6, a / 2], rtol=1e-15)
    rows = np.array([-a / 3 / 3 / 2, a / 3 / 2, -a / 2 / 3 / 2, a / 2 / 2])
    np.testing.assert_allclose(out["step/dlogp"], np.where(m, rows[:, None], 0.0), rtol=1e-15)
    assert not np.allclose(out["step/dlogp"], full["dlogp"])

    # two ranks of two one-row micro-batches: B_k = 1, K = 2, P = 2: -A_i / n_i / 1 / 2 / 2,
    # the full batch's weights (equal row counts keep the full-batch gradient)
    out = trl(_ratio_one_case([[[0], [1]], [[2], [3]]]), loss_type="grpo")
    np.testing.assert_allclose(out["step/losses"], [-a / 2, a / 2, -a / 2, a / 2], rtol=1e-15)
    np.testing.assert_allclose(out["step/dlogp"], full["dlogp"], rtol=1e-15)


# ---- finite differences of the summed micro-batch losses ----


def test_openrlhf_step_kl_statistic_by_hand():
    # OpenRLHF 0.11.2 with --algo.kl.use_loss: training_step logs its KL loss as "kl", each
    # micro-batch's aggregate_loss with the step's counts, S_k / (N / K) * P (S_k the
    # micro-batch's summed k1 KL logp - logp_ref), and ppo_train weights each by its tokens
    # n_k over the step's N. Responses of 3, 1, 2 and 2 tokens (N = 8), one per micro-batch,
    # P = K = 2; per-token KL d: S = (0.5, 1, 1, -0.25). Exact: dyadic values throughout.
    m = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=np.float64)
    d = np.array([[0.5, 0.25, -0.25], [1.0, 0, 0], [0.5, 0.5, 0], [-0.5, 0.25, 0]])
    logp = np.where(m == 1, -0.75, 0.0)

    def case(layout):
        return {"name": "kl-statistic", "layout": layout,
                "inputs": {"logp": logp, "logp_old": logp.copy(), "logp_ref": logp - d,
                           "values": 0.25 * m, "old_values": 0.25 * m,
                           "scores": np.array([1.0, 0.0, 1.0, 0.0]), "mask": m}}

    openrlhf = get_preset("openrlhf")
    out = openrlhf(case([[[0], [1]], [[2], [3]]]), use_kl_loss=True, beta=0.05)
    # the micro-batches' KL losses S_k / 4 * 2 = (0.25, 0.5, 0.5, -0.125); weighted by
    # n = (3, 1, 2, 2): (0.75 + 0.5 + 1 - 0.25) / 8 = 0.25, not the token mean 2.25 / 8
    assert out["step/stat/kl"] == 0.25
    assert out["stat/kl"] == 2.25 / 8
    # one rank, one micro-batch: the step's KL loss is the token mean
    one = openrlhf(case([[[0, 1, 2, 3]]]), use_kl_loss=True, beta=0.05)
    assert one["step/stat/kl"] == 2.25 / 8
    # without the KL loss nothing is logged for the step as "kl"
    assert "step/stat/kl" not in openrlhf(case([[[0], [1]], [[2], [3]]]))

FD = [
    ("verl", {}),
    ("verl", {"use_kl_loss": True, "beta": 0.1, "loss_agg_mode": "seq-mean-token-mean"}),
    ("trl", {}),
    ("openrlhf", {}),
    ("openrlhf", {"use_kl_loss": True, "beta": 0.05, "loss_agg_mode": "seq-mean-token-mean"}),
    ("deepspeed-chat", {}),
    ("seed", {}),
    ("verl-grpo", {"use_kl_loss": True, "kl_loss_coef": 0.1}),
    ("trl-grpo", {"beta": 0.04}),
    ("trl-grpo", {"loss_type": "grpo", "beta": 0.04}),
    ("openrlhf-grpo", {"use_kl_loss": True, "init_kl_coef": 0.05}),
]


@pytest.mark.parametrize("name, params", FD, ids=lambda x: x if isinstance(x, str) else
                         ",".join(x) or "defaults")
def test_step_gradients_match_finite_differences(name, params):
    """step/dlogp (and step/dvalues) = (1 / P) d/dx sum_{r,k} L_{r,k}: each rank's backward
    adds its micro-batches' gradients, DDP averages the ranks."""
    preset = get_preset(name)
    case = next(c for c in step_cases(preset, n_base=1) if len(c["layout"]) == 2)
    case = {**case, "params": {**case.get("params", {}), **params}}
    P = len(case["layout"])
    out = preset(case)

    def summed(key, what):
        def f(q):
            c = {**case, "inputs": {**case["inputs"], what: q[what]}}
            return float(np.sum(preset(c)[key])) / P
        return f

    rng = np.random.default_rng(37)
    x = np.asarray(case["inputs"]["logp"], dtype=np.float64)
    report = gradcheck(summed("step/losses", "logp"), {"logp": x},
                       {"logp": out["step/dlogp"]}, h=1e-6, n_coords=12, rng=rng)
    assert report["logp"].close, f"{name} {params}: {report['logp']}"
    if name in PPO:
        v = np.asarray(case["inputs"]["values"], dtype=np.float64)
        report = gradcheck(summed("step/value_losses", "values"), {"values": v},
                           {"values": out["step/dvalues"]}, h=1e-6, n_coords=12, rng=rng)
        assert report["values"].close, f"{name} {params}: {report['values']}"


# ---- the normaliser in the diagnosis ----


def test_full_batch_deviation_by_hand():
    from ppo_numpy.oracle.compare import TOLERANCES

    tol = TOLERANCES["float64"]
    mask = np.array([[1, 1, 0]])
    # |2 - 4| / max|full| = 2 / 4; the padding (9 vs 0) is not read
    equal, dev = full_batch_deviation(np.array([[1.0, 2.0, 9.0]]), np.array([[1.0, 4.0, 0.0]]),
                                      mask, tol)
    assert (equal, dev) == (False, 0.5)
    assert full_batch_deviation(np.array([[1.0, 4.0, 9.0]]), np.array([[1.0, 4.0, 0.0]]),
                                mask, tol) == (True, 0.0)


@pytest.mark.parametrize("name", ["verl-grpo", "verl"])
def test_the_diagnosis_names_a_candidates_normaliser(name):
    preset = get_preset(name)
    cases = step_cases(preset, n_base=1)

    def candidate(case):
        # the transformers bug: each micro-batch's own mean / K
        return preset(case, normaliser="micro-batch-mean")

    d = diagnose(candidate, preset, cases)
    text = d.summary()
    assert "normaliser='micro-batch-mean'" in text, text
    assert ("each micro-batch's loss in a step of several: yours is the micro-batch's own "
            "mean divided by its rank's number of micro-batches") in text, text
    # the preset's own step keeps the full-batch gradient; the candidate's does not
    assert f"is the full-batch gradient on 0 of {len(cases)} case(s)" in text, text
    assert f"{name}'s own step/dlogp is the full-batch gradient on {len(cases)} of " \
           f"{len(cases)} case(s); largest deviation 0 times" in text, text
    assert all(c.candidate[1] > 0.1 for c in d.step), d.step


def test_the_normaliser_switch_only_with_a_layout():
    preset = get_preset("verl-grpo")
    with_layout = step_cases(preset, n_base=1)
    assert "normaliser" in switches_for(preset, with_layout)
    assert "normaliser" not in switches_for(preset, [_without_step(c) for c in with_layout])


# ---- bad input: the errors name the layout entry ----


@pytest.mark.parametrize("layout, match", [
    ([[[0, 1], [2]], [[3, 4]]], r"layout: rows 5 of the batch's 6 are in no micro-batch"),
    ([[[0, 1], [2]], [[1, 3, 4, 5]]], r"layout\[1\]\[0\]\[0\]: row 1 is repeated "
                                      r"\(also at layout\[0\]\[0\]\[1\]\)"),
    ([[[0, 1, 2], []], [[3, 4, 5]]], r"layout\[0\]\[1\]: an empty micro-batch"),
    ([[[0, 1, 2], [9]], [[3, 4, 5]]], r"layout\[0\]\[1\]"),
])
def test_a_bad_layout_names_its_entry(layout, match):
    preset = get_preset("verl")
    case = step_cases(preset, n_base=1)[0]
    before = {k: np.array(v, copy=True) for k, v in case["inputs"].items()}
    with pytest.raises(ValueError, match=match):
        preset({**case, "layout": layout})
    for k, v in before.items():  # inputs untouched
        np.testing.assert_array_equal(case["inputs"][k], v)


def test_a_layout_on_a_preset_without_a_policy_loss():
    values_only = Preset(name="values-only", description="a value head alone", defaults={},
                         sources=(), pipeline=lambda x, p: {"values": x.values})
    case = step_cases(get_preset("verl"), n_base=1)[0]
    assert "values" in values_only(_without_step(case))
    with pytest.raises(ValueError, match=r"layout: preset 'values-only' has no policy loss"):
        values_only(case)


def test_openrlhf_grpos_unbiased_kl_with_gspo_against_the_rollout_is_refused_over_layouts():
    # OpenRLHF weighs its KL gradient against logp_old while GSPO's ratio is taken against
    # logp_rollout (conventions.md section 18): the step does not reproduce the two at once
    from ppo_numpy.oracle.group_cases import generate_group_cases

    preset = get_preset("openrlhf-grpo")
    case = generate_group_cases(0, ["rollout-kl-gradient-form"], preset="openrlhf-grpo")[0]
    assert "dlogp" in preset(case)
    B = case["inputs"]["mask"].shape[0]
    with pytest.raises(ValueError, match=r"layout: openrlhf-grpo's unbiased KL gradient"):
        preset({**case, "layout": [[list(range(B))]]})
    # without the unbiased gradient the same case runs over the layout
    plain = {**case, "params": {**case["params"], "kl_unbiased_gradient": False}}
    assert "step/dlogp" in preset({**plain, "layout": [[list(range(B))]]})


def test_steps_per_generation_needs_trl_grpo_and_a_layout():
    case = step_cases(get_preset("verl"), n_base=1)[0]
    with pytest.raises(ValueError, match=r"steps_per_generation: TRL's GRPOConfig option; "
                                         r"preset 'verl' has none"):
        get_preset("verl")({**case, "steps_per_generation": 1})
    group = _without_step(step_cases(get_preset("trl-grpo"), n_base=1)[0])
    with pytest.raises(ValueError, match=r"steps_per_generation: a step needs a layout"):
        get_preset("trl-grpo")({**group, "steps_per_generation": 1})


def test_docs_table_is_the_normaliser_table():
    from pathlib import Path

    from ppo_numpy.oracle.switches import normaliser_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "conventions.md").read_text()
    assert normaliser_table() in doc


# ---- properties over random layouts ----


def _random_layout(rng, B: int, P: int, K: int) -> list:
    """The rows shuffled and cut into P ranks of K non-empty micro-batches of uneven sizes."""
    rows = rng.permutation(B)
    cuts = np.sort(rng.choice(np.arange(1, B), size=P * K - 1, replace=False))
    parts = [p.tolist() for p in np.split(rows, cuts)]
    return [parts[r * K:(r + 1) * K] for r in range(P)]


#: the presets whose framework divides by the step's global counts (its normaliser keeps the
#: full-batch gradient), and those that take each micro-batch's own mean
GLOBAL = [("seed", {}), ("verl", {}), ("verl", {"loss_agg_mode": "seq-mean-token-mean"}),
          ("openrlhf", {}),
          ("openrlhf", {"use_kl_loss": True, "beta": 0.05, "loss_agg_mode": "seq-mean-token-mean"}),
          ("verl-grpo", {"use_kl_loss": True, "kl_loss_coef": 0.1}),
          ("openrlhf-grpo", {}), ("trl-grpo", {}), ("trl-grpo", {"loss_type": "grpo"})]


@pytest.mark.parametrize("name, params", GLOBAL, ids=lambda x: x if isinstance(x, str) else
                         ",".join(x) or "defaults")
def test_a_global_normaliser_keeps_the_full_batch_gradient_under_any_layout(name, params):
    # verl's, OpenRLHF's and TRL's dapo counts are the step's: every token weighs what it
    # weighs on one rank with one micro-batch, whatever the layout (TRL's grpo rule only for
    # micro-batches of equal row counts: one row each here). Tolerance: the same weights
    # reached by other divisions (N / P * P), a few ulps of the largest entry. (The reference
    # is the step of one micro-batch, not the one-batch dlogp: verl's seq-mean-token-mean
    # divides each row by n_i + 1e-8 in its trainer, which the one-batch output leaves out,
    # 2.5e-9 relative, inside that output's float32 tolerance.)
    preset = get_preset(name)
    base = _without_step(step_cases(preset, n_base=1)[0])
    base = {**base, "params": {**base.get("params", {}), **params}}
    B = base["inputs"]["mask"].shape[0]
    one = preset({**base, "layout": [[list(range(B))]]})
    full = {"dlogp": one["step/dlogp"], **({"dvalues": one["step/dvalues"]}
                                           if "step/dvalues" in one else {})}
    np.testing.assert_allclose(full["dlogp"], preset(base)["dlogp"], rtol=1e-8, atol=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        P, K = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        if params.get("loss_type") == "grpo":
            layout = [[[int(i)] for i in rows] for rows in
                      np.split(rng.permutation(B)[:B - B % P], P)]
            layout[-1] += [[int(i)] for i in rng.permutation(B)[B - B % P:]] if B % P else []
            if len({len(r) for r in layout}) > 1:
                continue
        else:
            layout = _random_layout(rng, B, P, K)
        out = preset({**base, "layout": layout})
        scale = float(np.abs(full["dlogp"]).max())
        np.testing.assert_allclose(out["step/dlogp"], full["dlogp"], rtol=0,
                                   atol=8 * 2.0**-52 * scale, err_msg=f"{name} {layout}")
        if "dvalues" in full:
            scale = float(np.abs(full["dvalues"]).max())
            np.testing.assert_allclose(out["step/dvalues"], full["dvalues"], rtol=0,
                                       atol=8 * 2.0**-52 * scale, err_msg=f"{name} {layout}")


@pytest.mark.parametrize("name", ["trl", "trl-0.11", "deepspeed-chat"])
def test_a_micro_batch_mean_does_not_on_uneven_token_counts(name):
    # each micro-batch's own token mean / K: a token of a short micro-batch weighs more
    preset = get_preset(name)
    base = _without_step(step_cases(preset, n_base=1)[0])
    B = base["inputs"]["mask"].shape[0]
    full = preset(base)
    out = preset({**base, "layout": [[[0], list(range(1, B))]]})
    assert np.abs(out["step/dlogp"] - full["dlogp"]).max() > 1e-3 * np.abs(full["dlogp"]).max()


def test_cli_diagnose_step_names_the_normaliser(tmp_path, capsys):
    from ppo_numpy.programs.oracle import main

    (tmp_path / "mine.py").write_text(
        "from ppo_numpy.oracle.presets import get_preset\n\n\n"
        "def step(case):\n"
        "    return get_preset('verl-grpo')(case, normaliser='micro-batch-mean')\n")
    rc = main(["diagnose", f"{tmp_path / 'mine.py'}:step", "--preset", "verl-grpo", "--step",
               "--no-pairs", "--probes", "0"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "with normaliser='micro-batch-mean' on every case" in out
    assert "group-random-0/2x2" in out and "the candidate's step/dlogp is the full-batch " \
        "gradient on 0 of 6 case(s)" in out
    assert main(["diagnose", "ppo_numpy:gae", "--step", "--cases", "random-0"]) == 2
    assert "--step takes the step's own cases" in capsys.readouterr().err
