"""benchmarks/rollout_correction.py: its torch forms compute what ppo_numpy computes, and it
writes its section. Times are never asserted (docs/benchmarks.md reports them)."""

from __future__ import annotations

import pytest

from benchmarks import rollout_correction as bench
from benchmarks import torch_impl

pytestmark = pytest.mark.skipif(not torch_impl.available(), reason="needs torch")


def test_the_torch_forms_of_verl_and_trl_compute_what_ppo_numpy_computes():
    bench.check_against_ppo_numpy(B=16, T=12, seed=1)
    bench.check_against_ppo_numpy(B=8, T=40, seed=3)


def test_the_check_fails_on_a_changed_value():
    import numpy as np

    bench._same("x", np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match="x: the torch form differs"):
        bench._same("x", np.array([1.0, 2.5]), np.array([1.0, 2.0]))


def test_rows_and_section(tmp_path):
    grid = ((8, 16), (16, 8))
    rows = bench.run_grid(grid, rounds=1, target=1e-4)
    assert [(r["what"], r["B"], r["T"]) for r in rows] == \
        [(f, B, T) for B, T in grid for f in bench.FUNCTIONS]
    assert all(r["ours"] > 0 and r["torch"] > 0 and r["ratio"] > 0 for r in rows)
    lines = bench.markdown(rows, command="cmd", rounds=1)
    page = tmp_path / "bench.md"
    page.write_text("# Benchmarks\n\ntext\n\n## Other\n\nkept\n")
    bench.write_section(str(page), lines, section=bench.SECTION)
    bench.write_section(str(page), lines, section=bench.SECTION)
    out = page.read_text()
    assert out.startswith("# Benchmarks\n\ntext\n\n## Other\n\nkept\n\n" + bench.SECTION)
    assert out.count(bench.SECTION) == 1
    assert out.count("| weights token TIS | verl |") == 2
