"""One name per symbol (docs/conventions.md): the clip width is ``epsilon``, the epsilon added to
a standard deviation (or to the variance under its root) is ``std_eps``. The old spellings of
the contract (``eps=`` of six public functions, the ``PPOConfig`` fields ``eps`` and
``grpo_eps``, config files and checkpoints that hold them, ``train --eps``/``--grpo-eps``,
``explain --eps``/``--eps-high``) keep working with a DeprecationWarning that names the new
spelling; giving both spellings is a TypeError.

The expected values are hand calculations (whiten, GRPO) or the new spelling's result: the
claim under test is that the old name reaches the same parameter.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ppo_numpy
from ppo_numpy.programs import explain, train
from ppo_numpy.training.config import PPOConfig

ROOT = Path(__file__).resolve().parents[1]
S, G = [1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1]  # two groups of two: mean 1/2, std (ddof 1) 0.7071
MASK = np.ones((4, 2))

#: public function -> (its arguments, the new keyword's value); every one took eps= before
CALLS = {
    # var([0, 2]) = 1 (ddof 0); std_eps = 3 inside the root: (x - 1) / 2 = [-0.5, 0.5]
    "whiten": (([0.0, 2.0],), dict(ddof=0), 3.0),
    "grpo_advantages": ((S, G), {}, 0.5),
    "grpo_passk_advantages": (([1.0, 0.5, 0.0], [0, 0, 0]), {}, 0.5),
    "gdpo_advantages": (([[1.0, 0.0], [0.0, 4.0], [1.0, 1.0], [0.0, 2.0]], G, MASK), {}, 0.5),
    "reinforce_plus_plus_advantages": (([[0.0, 1.0], [0.0, -1.0]], None), {}, 0.5),
    "reinforce_plus_plus_baseline_advantages": ((S, G, MASK), {}, 0.5),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_eps_is_std_eps_with_a_warning_naming_it(name):
    fn = getattr(ppo_numpy, name)
    args, kw, value = CALLS[name]
    want = fn(*args, **kw, std_eps=value)
    with pytest.warns(DeprecationWarning, match=rf"^{name}: eps= is deprecated, use std_eps="):
        got = fn(*args, **kw, eps=value)
    np.testing.assert_array_equal(got, want)
    # a different std_eps gives other numbers: the old name did reach the parameter
    assert not np.array_equal(fn(*args, **kw, std_eps=value / 10), want)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="pass std_eps= alone"):
        fn(*args, **kw, eps=value, std_eps=value / 2)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'epz'"):
        fn(*args, **kw, epz=value)


def test_the_new_names_by_hand():
    # whiten: sqrt(1 + 3) = 2
    np.testing.assert_array_equal(ppo_numpy.whiten([0.0, 2.0], ddof=0, std_eps=3.0), [-0.5, 0.5])
    # GRPO: (1 - 1/2) / (sqrt(1/2) + 1/2) for the best of each group
    a = 0.5 / (np.sqrt(0.5) + 0.5)
    np.testing.assert_allclose(ppo_numpy.grpo_advantages(S, G, std_eps=0.5), [a, -a, -a, a],
                               rtol=1e-15, atol=0)
    with pytest.raises(ValueError, match=r"^std_eps: must be >= 0"):
        ppo_numpy.whiten([0.0, 2.0], std_eps=-1.0)
    with pytest.raises(ValueError, match="std_eps is 0, so the advantage is 0 / 0; pass "
                                         "std_eps > 0"):
        ppo_numpy.grpo_advantages([1.0, 1.0], [0, 0], std_eps=0)


def test_config_fields_epsilon_and_grpo_std_eps_take_their_old_names():
    new = PPOConfig(epsilon=0.1, grpo_std_eps=1e-4)
    with pytest.warns(DeprecationWarning, match=r"^PPOConfig: eps is deprecated, use epsilon"):
        old = PPOConfig(eps=0.1, grpo_std_eps=1e-4)
    assert old == new
    with pytest.warns(DeprecationWarning, match=r"grpo_eps is deprecated, use grpo_std_eps"):
        assert PPOConfig(epsilon=0.1, grpo_eps=1e-4) == new
    with pytest.warns(DeprecationWarning, match=r"^PPOConfig: eps is deprecated"):
        assert new.eps == 0.1
    with pytest.warns(DeprecationWarning, match=r"^PPOConfig: grpo_eps is deprecated"):
        assert new.grpo_eps == 1e-4
    with pytest.warns(DeprecationWarning, match=r"^PPOConfig.replace: eps is deprecated"):
        assert PPOConfig().replace(eps=0.1, grpo_std_eps=1e-4) == new
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="give epsilon alone"):
        PPOConfig(eps=0.1, epsilon=0.2)
    # the old names are not fields: a new config file writes the new ones only
    written = json.loads(new.to_json())
    assert written["epsilon"] == 0.1 and "eps" not in written and "grpo_eps" not in written


def test_a_config_file_with_the_old_names_loads_with_a_warning():
    # tests/data/v1/config.json, written by 2178b48, names the clip width eps
    text = (ROOT / "tests" / "data" / "v1" / "config.json").read_text()
    assert json.loads(text)["eps"] == 0.2
    data = json.loads(text)
    with pytest.warns(DeprecationWarning, match=r"^config file: eps is deprecated, use epsilon"):
        loaded = PPOConfig.from_json(json.dumps({**data, "value_hidden": 0}))
    assert loaded.epsilon == 0.2
    with pytest.warns(DeprecationWarning, match=r"^PPOConfig: eps is deprecated"):
        assert PPOConfig(**{**data, "value_hidden": 0}) == loaded


def test_train_flags_eps_and_grpo_eps_set_the_new_fields():
    parser = train.build_parser()
    new = parser.parse_args(["--epsilon", "0.1", "--grpo-std-eps", "1e-4"])
    with pytest.warns(DeprecationWarning) as record:
        old = parser.parse_args(["--eps", "0.1", "--grpo-eps", "1e-4"])
    messages = [str(w.message) for w in record]
    assert any("--eps is deprecated, use --epsilon" in m for m in messages), messages
    assert any("--grpo-eps is deprecated, use --grpo-std-eps" in m for m in messages), messages
    assert (old.epsilon, old.grpo_std_eps) == (new.epsilon, new.grpo_std_eps) == (0.1, 1e-4)
    assert not hasattr(old, "eps") and not hasattr(old, "grpo_eps")


@pytest.mark.parametrize("new_argv, old_argv, message, shows", [
    (["clip", "--rho", "1.1,1.5,0.5", "--advantages", "1,1,-1", "--epsilon", "0.3",
      "--epsilon-high", "0.4"],
     ["clip", "--rho", "1.1,1.5,0.5", "--advantages", "1,1,-1", "--eps", "0.3",
      "--eps-high", "0.4"], "--eps is deprecated, use --epsilon", "= [0.7, 1.4]"),
    (["ppo", "--score", "1", "--logp-old", "-1,-2", "--logp-ref", "-1.5,-1.8", "--values",
      "0.5,0.6", "--beta", "0.1", "--rho", "1.1,1.5", "--epsilon", "0.1", "--exact"],
     ["ppo", "--score", "1", "--logp-old", "-1,-2", "--logp-ref", "-1.5,-1.8", "--values",
      "0.5,0.6", "--beta", "0.1", "--rho", "1.1,1.5", "--eps", "0.1", "--exact"],
     "--eps is deprecated, use --epsilon", "= [9/10, 11/10]"),
    (["grpo", "--scores", "1,0,0,1", "--groups", "0,0,1,1", "--std-eps", "0.5"],
     ["grpo", "--scores", "1,0,0,1", "--groups", "0,0,1,1", "--eps", "0.5"],
     "--eps is deprecated, use --std-eps", "eps = 0.5,"),
])
def test_explain_old_options_print_the_same_tables(new_argv, old_argv, message, shows):
    want = explain.render_command(new_argv)
    assert shows in want  # the value given, not the default (0.2, 1e-6), is in the table
    with pytest.warns(DeprecationWarning) as record:
        assert explain.render_command(old_argv) == want
    messages = [str(w.message) for w in record]
    assert all(w.category is DeprecationWarning for w in record)
    assert any(message in m for m in messages), messages
    if "--eps-high" in old_argv:
        assert any("--eps-high is deprecated, use --epsilon-high" in m for m in messages)
