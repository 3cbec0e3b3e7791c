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


# benchmarks/targets.py: rows and the section well formed on a tiny grid (this checkout as both
# "old" and "new"); no time is asserted, only that each is a positive number in its place.

def _positive(x):
    return isinstance(x, float) and x > 0 and math.isfinite(x)


@pytest.mark.skipif(not torch_impl.available(), reason="the targets are ratios to torch")
def test_targets_give_well_formed_rows_and_section(tmp_path):
    from benchmarks import targets
    from benchmarks.__main__ import _kept

    grid = ((8, 16), (16, 8))
    adv = targets.group_rows(grid, rounds=1, target=1e-4)
    assert [(r["what"], r["B"]) for r in adv] == [
        (w, B) for B, _ in grid
        for w in ("grpo_advantages", "rloo_advantages", "gspo loss+grad",
                  targets.GSPO_ALL_STATS, "grpo loss+grad")]
    assert all(_positive(r["ours"]) and _positive(r["trl"]) and _positive(r["ratio"])
               for r in adv)
    gae_r = targets.gae_rows(((256, 1024),), rounds=1, target=1e-4)
    assert all(_positive(r[k]) for r in gae_r for k in ("ours", "floor", "torch", "over_floor"))
    train = targets.training_iteration(ROOT, rounds=1, iterations=2, warm=0)
    assert _positive(train["old"]) and _positive(train["new"]) and train["samples"] == 2
    lines = targets.markdown({"groups": adv, "gae": gae_r, "training": train}, command="cmd",
                             machine=["- m"])
    assert lines[0] == targets.SECTION
    met = [ln for ln in lines if ln.endswith(("| yes |", "| no |", "| within noise |"))]
    assert len(met) == 4 + 2 + 1, met  # four group rows, GAE floor and torch, training
    # the default GSPO call (all statistics) is reported beside the target, not as one
    assert sum("(not a target)" in ln and ln.endswith("| - |") for ln in lines) == 1
    # the section is replaced, not appended twice, before the parts python -m benchmarks keeps
    page = tmp_path / "b.md"
    page.write_text("# Benchmarks\n\ntext\n\n## Transformer policy (issue 17)\n\nhand\n")
    targets.write_section(str(page), lines)
    targets.write_section(str(page), lines)
    text = page.read_text()
    assert text.count(targets.SECTION) == 1 and text.startswith("# Benchmarks\n\ntext\n\n")
    assert text.endswith("## Transformer policy (issue 17)\n\nhand\n")
    assert _kept(str(page)).lstrip("\n").startswith(targets.SECTION)
    assert _kept(str(tmp_path / "missing.md")) == ""
    # benchmarks/grpo.py's section goes before the kept part, which stays as it was
    kept = _kept(str(page))
    grpo.write_section(str(page), [grpo.SECTION, "", "grpo table"])
    grpo.write_section(str(page), [grpo.SECTION, "", "grpo table"])
    new_text = page.read_text()
    assert new_text.count(grpo.SECTION) == 1 and new_text.endswith(kept)


def test_code_lines_count_code_only():
    from benchmarks import code_lines

    source = ('"""Module doc."""\n'
              "# a comment\n"
              "\n"
              "x = 1  # a line with code and a comment counts\n"
              "class C:\n"
              '    """Class doc,\n'
              '    two lines."""\n'
              "    def f(self):\n"
              "        '''Doc.'''\n"
              "        s = '''not a docstring\n"
              "        '''\n"
              "        return (s +\n"
              "                'x')\n")
    # x =, class, def, s = (two lines), return (two lines)
    assert code_lines.code_lines(source) == 7


def test_code_lines_table_of_this_checkout():
    from benchmarks import code_lines

    counts = code_lines.count_tree(ROOT)
    assert counts[os.path.join("ppo", "gae.py")] > 0
    assert os.path.join("oracle", "__init__.py") in counts
    top = code_lines.by_top_level(counts)
    assert "oracle/" in top and sum(top.values()) == sum(counts.values())
    rows = code_lines.table({"a": ROOT, "b": ROOT}, exclude=("ppo/",))
    assert rows[-2]["entry"] == "total" and rows[-2]["a"] == sum(counts.values())
    assert rows[-1]["b"] == rows[-2]["b"] - top["ppo/"]
    md = code_lines.markdown(rows, ["a", "b"])
    assert md[0] == "| ppo_numpy/ | a | b | b - a |" and len(md) == 2 + len(rows)
    assert all(line.endswith("| +0 |") for line in md[2:])


def test_gae_stages_are_the_blocked_kernels_path_and_the_section_is_well_formed():
    # the stages, run one after the other on the arrays they were built on, compute what
    # gae computes (bit for bit), so the table times the kernel's own path
    from benchmarks import gae_stages
    from ppo_numpy import gae

    out = np.full((2, 8, 4096), np.nan)
    c = gae_stages.candidates(8, 4096, out)  # 32768 entries: the size rule's blocked form
    c["suffix sums"]()
    c["returns A + V, 0 at padding"]()
    b = make_batch(8, 4096, seed=0)
    A, R = gae(b.rewards, b.values, 1.0, 0.95, b.mask, method="blocked")
    np.testing.assert_array_equal(out[0], A)
    np.testing.assert_array_equal(out[1], R)
    table = [{"stage": name, "ms": 1.0, "passes": 2.0} for name in c]
    lines = gae_stages.section(table)
    assert lines[0] == gae_stages.SECTION
    assert "| gae, the call by the size rule | 1.000 | 2.0 |" in lines
    assert sum(ln.startswith("| ") for ln in lines) == len(c) + 1
    # --old: one more row, and this checkout's time over it (numbers written by hand)
    table.append({"stage": "gae of abc1234, the default call", "ms": 1.25, "passes": 2.5,
                  "old": "abc1234", "over_old": 0.8})
    lines = gae_stages.section(table)
    assert ".venv/bin/python -m benchmarks.gae_stages --old <checkout of abc1234> --write" in lines
    assert lines[-2:] == ["| gae of abc1234, the default call | 1.250 | 2.5 |",
                          "\nThis checkout's call over abc1234's default call, paired in the same "
                          "rounds: 0.800."]


def test_gae_stages_old_times_another_checkouts_default_call_in_the_same_rounds():
    from benchmarks import gae_stages

    table = gae_stages.rows(rounds=1, target=1e-4, old=ROOT)  # this checkout, imported again
    last = table[-1]
    assert last["stage"] == f"gae of {last['old']}, the default call" and last["old"]
    assert [r["stage"] for r in table[:-1]][-1] == gae_stages.DEFAULT_CALL
    assert last["over_old"] > 0 and all("over_old" not in r for r in table[:-1])


def test_cache_cold_samples_empty_the_caches_before_each_call_and_the_row_says_so():
    from benchmarks import targets
    from benchmarks.timing import cache_cold_samples

    calls = []
    samples = cache_cold_samples({"a": lambda: calls.append("a"), "b": lambda: calls.append("b"),
                                  "off": None}, rounds=3, evict_mib=1)
    assert calls == ["a", "b"] * 3 and list(samples) == ["a", "b"]
    assert all(len(v) == 3 and all(x >= 0 for x in v) for v in samples.values())
    row = targets.gae_cache_cold(8, 4096, rounds=3)  # the blocked form (32768 entries)
    assert set(row) == {"gae", "floor", "ratio"} and row["ratio"] > 0
    lines = targets.markdown({"cache_cold": {"gae": 2.4e-3, "floor": 4.5e-4, "ratio": 5.27}},
                             command="c", machine=[])
    assert ("| (not a target) `gae` against the floor at (256, 1024) with the CPU caches "
            "emptied before each call (a 64 MiB read; `gae_cache_cold`): the inputs come from "
            "main memory, as in a trainer | 5.3x (2.40 ms vs 0.450 ms) | - |") in lines


def test_training_met_reads_the_ratio_against_the_control():
    from benchmarks import targets

    assert targets.training_met(1.0, None) == "yes"
    assert targets.training_met(1.02, {"ratio": 0.95}) == "yes"
    assert targets.training_met(0.995, None) == "no"
    # the control 1.007 is 0.007 from 1: 0.995 is within that, 0.99 is not
    assert targets.training_met(0.995, {"ratio": 1.007}) == "within noise"
    assert targets.training_met(0.99, {"ratio": 1.007}) == "no"
    assert targets.training_met(0.995, {"ratio": 0.993}) == "within noise"
    # and the row shows three digits and the control
    train = {"ratio": 0.9962, "old": 0.051, "new": 0.0512, "samples": 75, "commit": "abc",
             "control": {"ratio": 1.0071}}
    row = [ln for ln in targets.markdown({"training": train}, command="c", machine=[])
           if "training iteration" in ln]
    assert row == ["| one default training iteration no slower than abc (old / new) | 0.996x "
                   "(51.0 -> 51.2 ms, 75 iterations each); this checkout against itself, "
                   "measured the same way: 1.007x | within noise |"]



def test_versions_pipeline_is_the_benchmark_pipeline_and_its_table():
    # benchmarks.versions' pipeline with this checkout's package is core.ours_pipeline's
    # calls (its default GAE), and with GAE's fast form the same numbers to 1e-12
    import ppo_numpy
    from benchmarks import versions
    from benchmarks.core import PARAMS, ours_pipeline
    from benchmarks.data import make_batch

    b = make_batch(4, 16)
    loss, dlogp, returns = versions.pipeline(ppo_numpy, b, PARAMS)
    want = ours_pipeline(b)
    assert loss == want[0] and np.array_equal(dlogp, want[1])
    fast = versions.pipeline(ppo_numpy, b, PARAMS, fast=True)
    assert abs(fast[0] - loss) <= 1e-12 * max(1.0, abs(loss))
    rows = [{"B": 8, "T": 128, "ms": {"v1": 2.0, "HEAD": 1.0}, "ratio": {"v1": 2.0}}]
    training = {"v1": {"old": 0.063, "new": 0.064, "ratio": 0.98}}
    lines = versions.markdown({"v1": "x", "HEAD": "y"}, rows, training, None, "cmd", "m")
    assert lines[0] == versions.SECTION
    assert "| pipeline (8, 128) | 2 | 1 | 2.00x | yes |" in lines
    assert "| training iteration | 63 | 64 | 0.980x | no |" in lines


def test_iteration_stages_times_this_checkouts_stages_and_the_table_adds_up():
    # one iteration of this checkout, instrumented: the stages it has are found, each stage's
    # time lies within the iteration's, and the table has a row per stage found plus the rest
    from benchmarks import iteration_stages as st

    results = st.run({"HEAD": st.ROOT}, iterations=2, warm=0, fields={})
    r = results["HEAD"]
    for stage in ("sampling", "reference evaluation", "loss and gradient",
                  "loss and gradient: backward", "optimizer", "held-out evaluation"):
        assert len(r[stage]) == 2, stage
        assert all(0 < s <= it for s, it in zip(r[stage], r["iteration"])), stage
    lines = st.table(results)
    assert lines[0] == "| stage | HEAD (ms) |"
    assert lines[-1].startswith("| **iteration** (median) | **")
    assert sum(line.startswith("| &nbsp;&nbsp;") for line in lines) == sum(
        ": " in k for k in r)
