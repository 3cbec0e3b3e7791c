"""The gradient checker itself: it must agree with known derivatives and catch wrong ones."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.grads.gradcheck import cmp, gradcheck, numerical_grad


def test_numerical_grad_of_known_functions():
    # f = sum x^3 + prod(y): df/dx = 3 x^2, df/dy_i = prod_{j != i} y_j
    x = np.array([[0.5, -1.0], [2.0, 3.0]])
    y = np.array([2.0, -3.0, 0.5])

    def f(p):
        return float((p["x"] ** 3).sum() + np.prod(p["y"]))

    params = {"x": x, "y": y}
    np.testing.assert_allclose(numerical_grad(f, params, "x"), 3 * x**2, rtol=1e-9)
    np.testing.assert_allclose(numerical_grad(f, params, "y"), [-1.5, 1.0, -6.0], rtol=1e-9)
    # only the requested coordinates, the others NaN
    g = numerical_grad(f, params, "x", coords=[(1, 0)])
    assert g[1, 0] == pytest.approx(12.0, rel=1e-9) and np.isnan(g).sum() == 3


def test_params_are_not_modified():
    x = np.array([1.0, 2.0])
    numerical_grad(lambda p: float(np.sin(p["x"]).sum()), {"x": x}, "x")
    np.testing.assert_array_equal(x, [1.0, 2.0])


def test_gradcheck_accepts_right_and_rejects_wrong_gradients():
    # f(W, b) = sum tanh(W u + b), u fixed: dW = (1 - t^2) u^T, db = 1 - t^2
    rng = np.random.default_rng(0)
    u = rng.normal(size=3)
    W, b = rng.normal(size=(4, 3)), rng.normal(size=4)

    def f(p):
        return float(np.tanh(p["W"] @ u + p["b"]).sum())

    t = np.tanh(W @ u + b)
    right = {"W": np.outer(1 - t**2, u), "b": 1 - t**2}
    report = gradcheck(f, {"W": W, "b": b}, right)
    assert all(c.close for c in report.values()), [str(c) for c in report.values()]
    assert max(c.rel_error for c in report.values()) < 1e-9
    # one wrong coordinate (relative change 1e-4) is caught and located
    wrong = {"W": right["W"].copy(), "b": right["b"]}
    wrong["W"][2, 1] *= 1.0001
    report = gradcheck(f, {"W": W, "b": b}, wrong)
    assert not report["W"].close and report["W"].worst_index == (2, 1)
    assert report["b"].close
    # a transposed-shape gradient is a shape error
    with pytest.raises(ValueError, match="grads"):
        gradcheck(f, {"W": W, "b": b}, {"W": right["W"].T, "b": right["b"]})


def test_gradcheck_subset_of_coordinates_needs_a_generator():
    p = {"x": np.arange(10.0)}

    def f(q):
        return float((q["x"] ** 2).sum())

    g = {"x": 2 * p["x"]}
    with pytest.raises(TypeError, match="rng"):
        gradcheck(f, p, g, n_coords=3)
    report = gradcheck(f, p, g, n_coords=3, rng=np.random.default_rng(0))
    assert report["x"].n_checked == 3 and report["x"].close


def test_cmp_report():
    r = cmp("W", [1.0, 2.0], [1.0, 2.0])
    assert r.exact and r.close and r.max_abs_diff == 0.0 and r.rel_error == 0.0
    r = cmp("W", [1.0, -4.0], [1.0, -4.0 + 8e-6])
    assert not r.exact and not r.close and r.worst_index == (1,)
    assert r.rel_error == pytest.approx(2e-6, rel=1e-6)
    assert r.max_abs_diff == pytest.approx(8e-6, rel=1e-6)
    assert "W" in str(r) and "close: False" in str(r) and "worst at (1,)" in str(r)
    # zeros on both sides are exact; a non-zero against zero is not close
    assert cmp("z", [0.0, 0.0], [0.0, 0.0]).close
    assert not cmp("z", [0.0, 1e-3], [0.0, 0.0]).close
    # NaN in numeric means "not checked"
    assert cmp("p", [1.0, 5.0], [1.0, np.nan]).n_checked == 1
    with pytest.raises(ValueError, match="shape"):
        cmp("s", [1.0], [1.0, 2.0])


def test_bad_step_and_coordinate_count_are_named():
    p = {"x": np.arange(3.0)}

    def f(q):
        return float(q["x"].sum())

    for h in (0.0, -1e-5):
        with pytest.raises(ValueError, match=r"^h: must be > 0"):
            numerical_grad(f, p, "x", h=h)
    with pytest.raises(ValueError, match=r"^n_coords: must be an integer >= 1"):
        gradcheck(f, p, {"x": np.ones(3)}, n_coords=0, rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"^n_coords: must be an integer"):
        gradcheck(f, p, {"x": np.ones(3)}, n_coords=1.5, rng=np.random.default_rng(0))
