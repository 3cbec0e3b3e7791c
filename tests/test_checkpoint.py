"""Checkpoints: bit-exact round trips, no pickle, clear errors for wrong names or shapes."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.models import (
    BOS,
    Adam,
    MLPPolicy,
    load_checkpoint,
    ppo_loss_and_grads,
    sample,
    save_checkpoint,
)


def model():
    return MLPPolicy(7, 3, 4, 6, np.random.default_rng(0), max_len=10)


def test_round_trip_is_bit_exact(tmp_path):
    m = model()
    opt = Adam(m.params, lr=1e-2)
    opt.step({k: np.full_like(v, 0.1) for k, v in m.params.items()})
    extra = {"iteration": 7, "beta": 0.05, "task": "copy",
             "rng_state": np.arange(4, dtype=np.uint64)}
    path = tmp_path / "run.npz"
    save_checkpoint(path, m.params, opt.state_dict(), extra)
    ck = load_checkpoint(path, expected_params=m.params)
    for k, v in m.params.items():
        assert ck["params"][k].dtype == v.dtype and ck["params"][k].shape == v.shape
        assert ck["params"][k].tobytes() == v.tobytes()
    for k, v in opt.state_dict().items():
        assert ck["optimizer_state"][k].tobytes() == v.tobytes(), k
    assert int(ck["extra"]["iteration"]) == 7 and str(ck["extra"]["task"]) == "copy"
    assert ck["extra"]["rng_state"].dtype == np.uint64


def test_resumed_training_equals_uninterrupted_training(tmp_path):
    prompts = np.tile([BOS, 3], (4, 1))

    def update(m, opt, seed):
        r = sample(m, prompts, np.random.default_rng(seed), 5)
        batch = {"prompts": prompts, "responses": r.responses, "mask": r.mask,
                 "logp_old": r.logp, "old_values": r.values,
                 "advantages": np.where(r.mask == 1, 1.0, 0.0), "returns": r.values + 0.5}
        opt.step(ppo_loss_and_grads(m, batch)[1])

    a = model()
    opt_a = Adam(a.params, lr=1e-2)
    for s in range(4):
        update(a, opt_a, s)
    b = model()
    opt_b = Adam(b.params, lr=1e-2)
    for s in range(2):
        update(b, opt_b, s)
    save_checkpoint(tmp_path / "half.npz", b.params, opt_b.state_dict())
    c = model()
    ck = load_checkpoint(tmp_path / "half.npz", expected_params=c.params)
    for k in c.params:
        c.params[k][...] = ck["params"][k]
    opt_c = Adam(c.params, lr=1e-2)
    opt_c.load_state_dict(ck["optimizer_state"])
    for s in range(2, 4):
        update(c, opt_c, s)
    for k in a.params:
        np.testing.assert_array_equal(c.params[k], a.params[k])


def test_wrong_names_or_shapes_are_errors_not_partial_loads(tmp_path):
    m = model()
    path = tmp_path / "p.npz"
    save_checkpoint(path, {k: v for k, v in m.params.items() if k != "b1"})
    with pytest.raises(ValueError, match=r"missing \['b1'\]"):
        load_checkpoint(path, expected_params=m.params)
    save_checkpoint(path, dict(m.params, extra_w=np.zeros(2)))
    with pytest.raises(ValueError, match=r"unexpected \['extra_w'\]"):
        load_checkpoint(path, expected_params=m.params)
    save_checkpoint(path, dict(m.params, W1=np.zeros((3, 3))))
    with pytest.raises(ValueError, match="W1: stored"):
        load_checkpoint(path, expected_params=m.params)
    save_checkpoint(path, dict(m.params, W1=m.params["W1"].astype(np.float32)))
    with pytest.raises(ValueError, match="float32"):
        load_checkpoint(path, expected_params=m.params)


def test_no_pickle_and_bad_paths(tmp_path):
    with pytest.raises(TypeError, match="pickle"):
        save_checkpoint(tmp_path / "x.npz", {"W": np.array([object()])})
    with pytest.raises(TypeError, match="extra"):
        save_checkpoint(tmp_path / "x.npz", {"W": np.zeros(2)}, extra={"f": {"a": 1}})
    with pytest.raises(ValueError, match="path"):
        save_checkpoint(tmp_path / "x.pt", {"W": np.zeros(2)})
    with pytest.raises(FileNotFoundError, match="path"):
        load_checkpoint(tmp_path / "missing.npz")
    np.savez(tmp_path / "plain.npz", W=np.zeros(2))
    with pytest.raises(ValueError, match="not a ppo_numpy checkpoint"):
        load_checkpoint(tmp_path / "plain.npz")
    # an archive holding a pickled object cannot be read (allow_pickle=False)
    np.savez(tmp_path / "obj.npz", **{"format/version": np.array(1),
                                      "params/W": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="pickle"):
        load_checkpoint(tmp_path / "obj.npz")
