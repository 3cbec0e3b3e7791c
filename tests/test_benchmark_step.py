"""benchmarks/step.py: the calls it times compute the same step, and it writes its section.
Times are never asserted (docs/benchmarks.md reports them)."""

from __future__ import annotations

import numpy as np

from benchmarks import step as bench


def test_the_calls_timed_compute_what_they_say():
    fns = bench.calls(16, 12)
    loss, _, dlogp = fns["one-batch call (policy_loss_and_grad)"]()
    alone = fns["policy_step, no layout"]()
    # the same operations on the same rows (policy_step's docstring): bit for bit
    assert alone["step/losses"].tolist() == [loss]
    assert np.array_equal(alone["step/dlogp"], dlogp)
    glob = fns["policy_step, global token mean"]()
    assert glob["step/full_batch"] and glob["step/losses"].shape == (8,)
    np.testing.assert_allclose(glob["step/dlogp"], dlogp, rtol=4 * 2.0**-52, atol=0)
    # grpo's rule on micro-batches of equal row counts (2 rows each): the full batch too
    assert fns["policy_step, TRL grpo"]()["step/full_batch"]
    assert fns["policy_step, verl seq-mean-token-mean"]()["step/full_batch"]
    # the presets: with the layout, the step's outputs beside the one-batch outputs (the same
    # arrays as without: exact, the same calls)
    for name in bench.PRESETS:
        plain = fns[f"{name} preset, no layout"]()
        step = fns[f"{name} preset, 2 x 4 layout"]()
        assert not [k for k in plain if k.startswith("step/")]
        assert step["step/losses"].shape == (8,) and step["step/dlogp"].shape == (16, 12)
        assert ("step/dvalues" in step) == (name == "verl")
        for key, value in plain.items():
            np.testing.assert_array_equal(step[key], value, err_msg=f"{name} {key}")


def test_rows_and_section(tmp_path):
    rows = bench.run((16, 12), rounds=1, target=1e-4)
    assert [r["what"] for r in rows] == list(bench.calls(16, 12))
    assert rows[0]["ratio"] == 1.0 and all(r["seconds"] > 0 for r in rows)
    lines = bench.markdown(rows, command="cmd", rounds=1, shape=(16, 12))
    page = tmp_path / "bench.md"
    page.write_text("# Benchmarks\n\ntext\n\n## Other\n\nkept\n")
    bench.write_section(str(page), lines, bench.SECTION)
    bench.write_section(str(page), lines, bench.SECTION)
    out = page.read_text()
    assert out.startswith("# Benchmarks\n\ntext\n\n## Other\n\nkept\n\n" + bench.SECTION)
    assert out.count(bench.SECTION) == 1 and out.count("| policy_step, TRL grpo |") == 1
    assert "| verl preset, 2 x 4 layout |" in out
    assert "NumPy's SIMD kind" in bench.machine_line()
