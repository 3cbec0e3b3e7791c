"""The tools behind issue 33 (every test holds on every CPU kind): ``tests/cpu_kinds.py`` (the
narrower kinds ``make test-cpu-kinds`` runs), ``tests/exact_comparisons.py`` (the audit's
finder) and ``tests._helpers.row_drift`` (a stored run against its rerun on another kind)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest

from tests import cpu_kinds, exact_comparisons
from tests._helpers import RERUN_ATOL, RERUN_RTOL, row_drift, same_row

# ---------------------------------------------------------------- the kinds


@pytest.mark.parametrize("features, level, narrower", [
    # an AVX-512 machine runs the AVX2 and the SSE4.2 kinds; an AVX2 one the SSE4.2 kind
    ({"X86_V2": True, "X86_V3": True, "X86_V4": True}, "X86_V4", ["X86_V3", "X86_V2"]),
    ({"X86_V2": True, "X86_V3": True, "X86_V4": False}, "X86_V3", ["X86_V2"]),
    # NumPy's baseline: nothing below it
    ({"X86_V2": True}, "X86_V2", []),
])
def test_the_narrower_kinds_of_each_machine(features, level, narrower):
    assert cpu_kinds.machine_level(features) == level
    assert [k.level for k in cpu_kinds.narrower_kinds(level)] == narrower


def test_a_kind_turns_off_the_targets_above_it_and_names_its_kernel():
    avx2, sse = cpu_kinds.KINDS[1], cpu_kinds.KINDS[2]
    assert avx2.environment() == {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
                                  "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}
    assert sse.environment()["NPY_DISABLE_CPU_FEATURES"].split() == [
        "X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]
    assert sse.environment()["OPENBLAS_NUM_THREADS"] == "2"
    with pytest.raises(ValueError, match="level: expected one of"):
        cpu_kinds.narrower_kinds("AVX2")


def test_a_narrower_kind_is_what_numpy_and_openblas_then_report():
    # the environment reaches NumPy's dispatch and OpenBLAS's kernel choice: NumPy no longer
    # finds X86_V3 (AVX2), OpenBLAS names the Nehalem kernel
    env = {**__import__("os").environ, **cpu_kinds.KINDS[2].environment()}
    code = ("from ppo_numpy._machine import cpu_kind; k = cpu_kind(); "
            "print('X86_V3' in k['cpu_features'], k['openblas_core'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "False"
    assert out[1] in ("Nehalem", "None")  # None: a NumPy whose OpenBLAS does not say


def test_the_narrower_runs_leave_out_only_the_files_that_compute_no_number():
    files = cpu_kinds.test_files()
    assert "tests/test_td_gae.py" in files and "tests/test_notebooks.py" in files
    assert not any(f.endswith(cpu_kinds.NOT_NUMERIC) for f in files)
    assert len(files) > 70


def test_the_target_says_so_where_there_is_nothing_to_turn_off(monkeypatch, capsys):
    monkeypatch.setattr(cpu_kinds, "machine_level", lambda: "X86_V2")
    assert cpu_kinds.main([]) == 0
    assert "nothing to turn off" in capsys.readouterr().out


# ---------------------------------------------------------------- the audit's finder


def test_the_finder_names_each_kind_of_exact_comparison(tmp_path):
    f = tmp_path / "test_sample.py"
    f.write_text(textwrap.dedent("""
        import numpy as np, pytest
        def test_a(x, y):
            assert x == -2.0
            assert [0.5, 1.0] != y
            assert x == 2            # an integer: not a float literal
            np.testing.assert_array_equal(x, y)
            assert np.array_equal(x, y)
            np.testing.assert_allclose(x, y, rtol=1e-15)
            np.testing.assert_allclose(x, y, rtol=1e-15, atol=1e-12)   # an absolute floor
            np.testing.assert_allclose(x, y, rtol=1e-9)                # a tolerance
            assert x == pytest.approx(y, rel=1e-14)
            assert x.tobytes() == y.tobytes()
    """))
    found = exact_comparisons.sites([f])
    assert [(s.test, s.kind) for s in found] == [
        ("test_a", "== float"), ("test_a", "== float"), ("test_a", "assert_array_equal"),
        ("test_a", "array_equal"), ("test_a", "assert_allclose rel 1e-15"),
        ("test_a", "approx rel 1e-14"), ("test_a", "tobytes")]
    assert [s.line for s in found] == [4, 5, 7, 8, 9, 12, 13]


# ---------------------------------------------------------------- stored rows


def test_row_drift_by_hand():
    old = {"iteration": 3, "kl": 0.5, "score": 1.0, "note": "x"}
    # |0.5000001 - 0.5| / (1e-12 + 1e-6 * 0.5) = 1e-7 / 5.00001e-7 = 0.199999...
    assert row_drift({**old, "kl": 0.5000001}, old) == pytest.approx(0.2, rel=1e-5)
    assert row_drift(dict(old), old) == 0.0
    assert same_row({**old, "kl": 0.5 * (1 + 0.9 * RERUN_RTOL)}, old, exact=False)
    assert not same_row({**old, "kl": 0.5 * (1 + 1.1 * RERUN_RTOL)}, old, exact=False)
    assert not same_row({**old, "kl": 0.5 * (1 + 1e-15)}, old, exact=True)
    # 0 in the stored row: the absolute floor
    assert row_drift({"kl": RERUN_ATOL / 2}, {"kl": 0.0}) == pytest.approx(0.5)
    # what is not a rounding difference never passes
    assert row_drift({**old, "note": "y"}, old) == math.inf
    assert row_drift({"kl": 0.5}, old) == math.inf                    # other keys
    assert row_drift({**old, "kl": math.nan}, old) == math.inf        # NaN against a number
    assert row_drift({"kl": math.nan}, {"kl": math.nan}) == 0.0       # NaN where NaN was
    assert row_drift({"kl": math.inf}, {"kl": 0.5}) == math.inf
    assert row_drift({"h": {"a": 1.0}}, {"h": {"a": 1.0 + 1e-3}}) > 100   # nested
