"""Adam, SGD and gradient clipping: hand-computed steps and quadratics with a known minimum."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.models import SGD, Adam, clip_grad_norm
from ppo_numpy.models.optim import global_norm

# f(x, Y) = 1/2 sum a (x - x*)^2 + 1/2 sum b (Y - Y*)^2, minimum at (x*, Y*)
A = np.array([1.0, 4.0, 0.5])
B = np.array([[2.0, 1.0], [3.0, 0.25]])
X_STAR = np.array([1.5, -2.0, 0.25])
Y_STAR = np.array([[0.0, 3.0], [-1.0, 2.0]])


def quadratic_grads(p):
    return {"x": A * (p["x"] - X_STAR), "Y": B * (p["Y"] - Y_STAR)}


def start():
    return {"x": np.zeros(3), "Y": np.ones((2, 2))}


@pytest.mark.parametrize("make, steps", [
    (lambda p: SGD(p, lr=0.2), 300),
    (lambda p: SGD(p, lr=0.1, momentum=0.9), 400),
    (lambda p: Adam(p, lr=0.05), 2000),
])
def test_converges_to_the_known_minimum_of_a_quadratic(make, steps):
    p = start()
    opt = make(p)
    for _ in range(steps):
        opt.step(quadratic_grads(p))
    np.testing.assert_allclose(p["x"], X_STAR, atol=1e-6)
    np.testing.assert_allclose(p["Y"], Y_STAR, atol=1e-6)


def test_adam_first_two_steps_by_hand():
    # g1 = 2: m1 = 0.2, v1 = 0.004; m^ = 2, v^ = 4 -> x1 = 1 - 0.1 * 2 / (2 + 1e-8)
    # g2 = -1: m2 = 0.9*0.2 - 0.1 = 0.08, v2 = 0.999*0.004 + 0.001 = 0.004996
    #          m^ = 0.08 / 0.19, v^ = 0.004996 / 0.001999
    p = {"x": np.array([1.0])}
    opt = Adam(p, lr=0.1)
    opt.step({"x": np.array([2.0])})
    x1 = 1.0 - 0.1 * 2.0 / (2.0 + 1e-8)
    assert p["x"][0] == pytest.approx(x1, rel=1e-15)
    opt.step({"x": np.array([-1.0])})
    m_hat, v_hat = 0.08 / 0.19, 0.004996 / 0.001999
    assert p["x"][0] == pytest.approx(x1 - 0.1 * m_hat / (np.sqrt(v_hat) + 1e-8), rel=1e-12)
    assert opt.t == 2


def test_sgd_is_x_minus_lr_g_and_updates_in_place():
    x = np.array([1.0, 2.0])
    p = {"x": x}
    SGD(p, lr=0.5).step({"x": np.array([2.0, -4.0])})
    assert p["x"] is x
    np.testing.assert_array_equal(x, [0.0, 4.0])


@pytest.mark.parametrize("make", [lambda p: Adam(p, lr=0.05),
                                  lambda p: SGD(p, lr=0.1, momentum=0.9)])
def test_state_dict_resumes_bit_for_bit(make):
    p = start()
    opt = make(p)
    for _ in range(5):
        opt.step(quadratic_grads(p))
    saved_p = {k: v.copy() for k, v in p.items()}
    state = opt.state_dict()
    for _ in range(5):
        opt.step(quadratic_grads(p))
    # a fresh optimiser on the saved parameters, loaded with the saved state
    q = {k: v.copy() for k, v in saved_p.items()}
    opt2 = make(q)
    opt2.load_state_dict(state)
    for _ in range(5):
        opt2.step(quadratic_grads(q))
    for k in p:
        np.testing.assert_array_equal(q[k], p[k])
    # state_dict returns copies
    state["t"] = np.array(99)
    assert opt.t == 10


def test_load_state_dict_rejects_wrong_names_and_shapes():
    opt = Adam(start(), lr=0.1)
    state = opt.state_dict()
    with pytest.raises(ValueError, match="missing"):
        opt.load_state_dict({k: v for k, v in state.items() if k != "m/x"})
    with pytest.raises(ValueError, match="m/x"):
        opt.load_state_dict(dict(state, **{"m/x": np.zeros(4)}))
    with pytest.raises(ValueError, match="unexpected"):
        opt.load_state_dict(dict(state, extra=np.array(1.0)))


def test_clip_grad_norm_by_hand():
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    clipped, norm = clip_grad_norm(g, 2.5)
    assert norm == 5.0
    np.testing.assert_allclose(clipped["a"], [1.5, 0.0], rtol=1e-15)
    np.testing.assert_allclose(clipped["b"], [[2.0]], rtol=1e-15)
    assert global_norm(clipped) == pytest.approx(2.5, rel=1e-15)
    np.testing.assert_array_equal(g["a"], [3.0, 0.0])  # input not modified
    same, norm = clip_grad_norm(g, 5.0)  # exactly at the bound: unchanged
    np.testing.assert_array_equal(same["b"], g["b"])
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(g, 0.0)


@pytest.mark.parametrize("call, err, match", [
    (lambda: Adam(start(), lr=0.0), ValueError, "lr"),
    (lambda: Adam(start(), lr=0.1, betas=(0.9, 1.0)), ValueError, "betas"),
    (lambda: SGD(start(), lr=0.1, momentum=1.0), ValueError, "momentum"),
    (lambda: SGD({"x": [1.0]}, lr=0.1), TypeError, "params"),
    (lambda: Adam(start(), lr=0.1).step({"x": np.zeros(3)}), ValueError, "missing"),
    (lambda: Adam(start(), lr=0.1).step({"x": np.zeros(2), "Y": np.zeros((2, 2))}),
     ValueError, "x"),
    (lambda: SGD(start(), lr=0.1).step({"x": np.full(3, np.nan), "Y": np.zeros((2, 2))}),
     ValueError, "NaN"),
])
def test_bad_input_names_the_argument(call, err, match):
    with pytest.raises(err, match=match):
        call()
