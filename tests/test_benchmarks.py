"""Smoke tests of benchmarks/: it runs, its baselines compute what ppo_numpy computes,
and it writes its tables. Times are never asserted (docs/benchmarks.md reports them)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import core, grpo, report, torch_impl
from benchmarks.data import make_batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_baselines_compute_what_ppo_numpy_computes():
    # raises AssertionError naming the function and the worst element otherwise
    core.check_baselines(use_torch=torch_impl.available())


def test_check_outputs_fails_on_a_changed_value_a_wrong_shape_or_a_missing_output():
    b = make_batch(3, 8, seed=2)
    right = core.reference_outputs(b)
    core.check_outputs("same", b, right)
    changed = right["gae advantages"].copy()
    changed[1, 2] += 1e-6
    with pytest.raises(AssertionError, match=r"gae advantages differs .* at \(1, 2\)"):
        core.check_outputs("changed", b, {**right, "gae advantages": changed})
    # a (B,) row of the right values broadcasts against (B, T) under allclose
    row = np.full(8, right["whiten"][0, 0])
    with pytest.raises(AssertionError, match="whiten has shape"):
        core.check_outputs("shape", b, {**right, "whiten": row})
    with pytest.raises(AssertionError, match="pipeline returns"):
        core.check_outputs("missing", b, {k: v for k, v in right.items()
                                          if k != "pipeline returns"})


def test_quick_run_writes_one_table_per_function(tmp_path):
    out = tmp_path / "bench.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--rounds", "1", "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "## Targets of issue #7" in text
    assert grpo.SECTION in text
    assert ".venv/bin/python -m benchmarks --quick --rounds 1" in text
    for name in core.FUNCTIONS:
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        # the section's first table: header, rule, one row per grid point
        table = section.split("\n\n| B | T | B T |", 1)[1].split("\n\n", 1)[0]
        rows = table.splitlines()[2:]
        assert [tuple(int(c) for c in r.split("|")[1:3]) for r in rows] == \
            list(core.QUICK_GRID), section


def test_loglog_slope_is_the_exponent_of_the_cost():
    def rows(exponent):
        return [core.Row("f", B, T, ours=(B * T) ** exponent * 1e-9, floor=1.0, loop=None,
                         loop_rows=B, torch=None) for B, T in core.GRID]
    # time = c (B T)^k gives slope k over the grid points with >= 65536 tokens
    assert math.isclose(report.loglog_slope(rows(1.0)), 1.0, rel_tol=1e-12)
    assert math.isclose(report.loglog_slope(rows(2.0)), 2.0, rel_tol=1e-12)
    assert report.loglog_slope(rows(1.0)[:2]) is None  # fewer than two large sizes


# ---------------------------------------------------------------- benchmarks/grpo.py


@pytest.mark.skipif(not torch_impl.available(), reason="torch not installed")
def test_grpo_baselines_of_trl_and_verl_compute_what_ppo_numpy_computes():
    # advantages, losses, gradients and the statistics each framework logs
    grpo.check_against_ppo_numpy(B=16, T=12, seed=1)
    grpo.check_against_ppo_numpy(B=24, T=5, seed=4)


def test_grpo_check_names_the_output_and_the_worst_element():
    with pytest.raises(AssertionError, match=r"x differs from ppo_numpy at \(1,\): 2.5 vs 2.0"):
        grpo._same("x", np.array([1.0, 2.5]), np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match="has shape"):
        grpo._same("x", np.ones((2, 1)), np.ones(2))


def test_grpo_rows_and_section_are_well_formed(tmp_path):
    grid = ((8, 16), (16, 8))
    rows = grpo.run_grid(grid, rounds=1, target=1e-4)
    assert [(r.function, r.B, r.T) for r in rows] == \
        [(f, B, T) for B, T in grid for f in grpo.FUNCTIONS]
    with_torch = torch_impl.available()
    for r in rows:
        assert r.ours > 0 and ((r.trl > 0 and r.verl > 0) if with_torch else
                               (r.trl is None and r.verl is None)), r
    lines = grpo.markdown(rows, command="cmd", rounds=1, target=1e-4)
    text = "\n".join(lines)
    for name in grpo.FUNCTIONS:
        table = text.split(f"### {name}\n", 1)[1].split("\n\n| B |", 1)[1].split("\n\n")[0]
        assert [tuple(int(c) for c in r.split("|")[1:3]) for r in table.splitlines()[2:]] == \
            list(grid)
    # the section goes at the end of the page and replaces an earlier one
    page = tmp_path / "bench.md"
    page.write_text("# Benchmarks\n\ntext\n")
    grpo.write_section(str(page), lines)
    grpo.write_section(str(page), lines)
    out = page.read_text()
    assert out.startswith("# Benchmarks\n\ntext\n\n" + grpo.SECTION)
    assert out.count(grpo.SECTION) == 1 and out.endswith("|\n")
