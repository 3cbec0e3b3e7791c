"""examples/torch_ppo.py against the oracle: values and autograd gradients, float64 to bfloat16.

Skipped when PyTorch is not installed (CI runs without it).
"""

import ast
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ppo_numpy.oracle.cases import generate_cases  # noqa: E402
from ppo_numpy.oracle.compare import compare  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = load("check_torch_ppo")
torch_ppo = check.torch_ppo


@pytest.fixture(scope="module")
def cases():
    return generate_cases(0)


def test_the_example_does_not_import_ppo_numpy():
    tree = ast.parse((EXAMPLES / "torch_ppo.py").read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert imported and not [m for m in imported if m.split(".")[0] == "ppo_numpy"]


@pytest.mark.parametrize("config", list(check.CONFIGS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_values_and_gradients_match_the_oracle(cases, dtype, config):
    report = check.check(dtype, config)
    assert report.passed, str(report)
    # every case is compared but the one whitening cannot take, every output on each
    whitens = check.CONFIGS[config].get("whiten_advantages", False)
    assert list(report.rejected) == (["one-valid-token"] if whitens else [])
    assert len(report.cases) == len(cases) - len(report.rejected)
    assert len(report.rows) == len(report.cases) * len(check.OUTPUTS)


@pytest.mark.parametrize("config", list(check.CONFIGS))
def test_bfloat16_values_match_the_oracle(config):
    """Values only (see check_torch_ppo.BF16_OUTPUTS for why)."""
    report = check.check("bfloat16", config)
    assert report.passed, str(report)
    assert len(report.rows) == len(report.cases) * len(check.BF16_OUTPUTS)


def test_a_different_convention_is_caught(cases):
    """eps 0.1 instead of 0.2 and no value clipping show up in exactly the outputs they touch."""
    config = check.CONFIGS["whiten-token-mean-vclip"]
    wrong = check.candidate_for("float64", {**config, "epsilon": 0.1, "value_clip": None})
    report = compare(wrong, check.reference_for(config), cases[:8], "float64",
                     outputs=check.OUTPUTS)
    failed = {r.output for r in report.failures}
    assert {"policy_loss", "dlogp", "stat/clipfrac_active", "value_loss", "dvalues"} <= failed
    assert not failed & {"rewards", "advantages", "returns", "stat/ratio_mean"}


def test_autograd_gradient_is_the_derivative_of_the_loss():
    """The example's dlogp and dvalues by centred differences of its own losses (float64)."""
    case = generate_cases(0, ["random-3"])[0]
    p = {**check.PRESET.defaults, **case["params"], **check.CONFIGS["whiten-token-mean-vclip"]}
    kwargs = dict(gamma=p["gamma"], lam=p["lam"], beta=p["beta"], eps=p["epsilon"],
                  value_clip=p["value_clip"], whiten_advantages=True, loss_agg="token-mean")
    out = torch_ppo.run(case["inputs"], **kwargs)
    h = 1e-6
    for name, loss, grad in (("logp", "policy_loss", "dlogp"),
                             ("values", "value_loss", "dvalues")):
        for b, t in [(0, 0), (1, 2), (2, 1)]:
            moved = []
            for sign in (1, -1):
                inputs = dict(case["inputs"])
                inputs[name] = inputs[name].copy()
                inputs[name][b, t] += sign * h
                moved.append(torch_ppo.run(inputs, **kwargs)[loss])
            numeric = (moved[0] - moved[1]) / (2 * h)
            assert abs(numeric - out[grad][b, t]) <= 1e-6 * max(1.0, abs(numeric)), (name, b, t)


def test_torch_tensors_are_accepted_as_outputs():
    import torch

    from ppo_numpy.oracle.compare import assert_matches

    case = generate_cases(0, ["right-padding"])[0]
    expected = check.PRESET(case)
    actual = {"advantages": torch.tensor(expected["advantages"], requires_grad=True),
              "returns": torch.tensor(expected["returns"]).to(torch.bfloat16),
              "policy_loss": torch.tensor(expected["policy_loss"])}
    report = assert_matches(actual, expected, "bfloat16", case=case, outputs=list(actual))
    assert {r.output for r in report.rows} == {"advantages", "returns", "policy_loss"}
    assert report.max_errors()["advantages"] == (0.0, 0.0)
    assert 0 < report.max_errors()["returns"][0] < 2**-8 * 4


def test_to_bfloat16_agrees_with_torch():
    import numpy as np
    import torch

    from ppo_numpy.oracle.compare import to_bfloat16

    x = np.random.default_rng(0).normal(0.0, 3.0, 20000)
    # just above a bf16 midpoint by less than float32 can hold: both round twice, to even
    x = np.concatenate([x, [1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1 + 3 * 2**-8 - 2**-40,
                            np.nan, np.inf, 3.4e38]])
    theirs = torch.tensor(x).to(torch.bfloat16).float().numpy()
    assert np.array_equal(to_bfloat16(x), theirs, equal_nan=True)
