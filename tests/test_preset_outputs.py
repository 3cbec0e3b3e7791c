"""Every preset's outputs on the oracle's cases, as recorded before the last change to them.

``tests/data/presets/outputs.npz`` is written by ``python -m benchmarks.preset_outputs record``:
every preset, every case it takes, and every variant of its parameters the tool runs (the
defaults, each convention switch's alternatives, each loss type of the critic-free presets).
Nothing here is computed by the code under test at test time: the expected numbers were
written before the change under test. Its history, each recording made only after
``compare`` found every run of the one before the same bits (or the change listed):

* main at ad40319 (before issue 35's restructure, with issue 34b's fixes): 64,404 outputs and
  226 errors; issue 35's restructure changed none of them.
* main after issue 36 (3c7aa4b): 95,014 outputs and 527 errors; changed, the 159 outputs of
  the ``rollout-nan-padding`` case under ``verl-grpo`` (105) and ``openrlhf-grpo`` (54), as
  issue 36 gave that case a correction for verl and OpenRLHF (its inputs changed); the rest
  new (the third policy's switches and cases).
* after issue 35's names (the whitening's ``std_eps``): the same bits; changed, the error text
  of the four runs with ``whiten_eps=0.0`` on ``all-equal-rewards`` (trl, trl-0.11, verl,
  openrlhf), which now names ``std_eps``.
* after issue 38's merge: 107,585 runs, 107,027 outputs and 558 errors; every earlier run the
  same bits and text; new, issue 38's cases ``kl-in-loss`` and ``kl-gradient-form`` of verl
  and openrlhf, ``kl-gradient-form`` and ``rollout-kl-gradient-form`` of verl-grpo and
  openrlhf-grpo, the switches ``kl_loss_type``, ``kl_unbiased_gradient``, ``kl_is_bound``,
  ``use_kl_loss`` of openrlhf, and the convention ``kl_gradient`` of the five presets with a
  KL loss.

On the CPU kind that recorded the file (the same NumPy dispatch targets) every output must be
the same bits: the restructure moves code, it does not change arithmetic. On another kind
NumPy's exp and log run other SIMD code and may round a last bit otherwise, and sums of terms
that cancel carry that rounding: there each output within 1e-14 (1 + |expected|) elementwise.
Measured under the AVX2 kind on this machine (``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL
AVX512_SPR"``, ``OPENBLAS_CORETYPE=Haswell``): at most 4.1e-16 (1 + |expected|); a changed
formula moves an output by far more (a clip bound by 1e-3 moves the losses by ~1e-4).
Errors (the message a call raises) must be the same text everywhere.
"""

from pathlib import Path

import numpy as np
import pytest

from benchmarks.preset_outputs import compare_results, load, machine, run_all

STORED = Path(__file__).parent / "data" / "presets" / "outputs.npz"
#: elementwise |got - want| <= CROSS_KIND (1 + |want|) on another CPU kind (module docstring)
CROSS_KIND = 1e-14


@pytest.fixture(scope="module")
def results():
    recorded_on, stored = load(STORED)
    return recorded_on, stored, run_all()


def test_same_runs_and_errors(results):
    _, stored, now = results
    assert set(stored) == set(now), sorted(set(stored) ^ set(now))[:10]
    changed = [k for k in stored if isinstance(stored[k], str) and stored[k] != now[k]]
    assert not changed, [(k, stored[k], now[k]) for k in changed[:5]]


def test_outputs_as_recorded(results):
    recorded_on, stored, now = results
    if recorded_on == machine():
        worst, changed = compare_results(stored, now)
        differ = {name: w for name, w in worst.items() if w[0] > 0}
        assert not differ and not changed, (differ, changed[:5])
        return
    bad = []
    for key, want in stored.items():
        if isinstance(want, str):
            continue
        got = now[key]
        same_nan = np.array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want)
        ok = same_nan and np.array_equal(got[~fin & ~np.isnan(want)],
                                         want[~fin & ~np.isnan(want)])
        ok = ok and bool(np.all(np.abs(got[fin] - want[fin]) <= CROSS_KIND * (1 + np.abs(
            want[fin]))))
        if not ok:
            bad.append(key)
    assert not bad, f"{len(bad)} outputs moved, e.g. {bad[:5]}"


def test_compare_finds_a_change():
    """The comparison reports a changed last bit, a changed error and a missing output."""
    a = {"p|v|c|x": np.array([1.0, 2.0]), "p|v|c|error": "ValueError: a"}
    b = {"p|v|c|x": np.array([1.0, np.nextafter(2.0, 3.0)]), "p|v|c|error": "ValueError: b",
         "p|v|d|x": np.zeros(1)}
    worst, changed = compare_results(a, b)
    assert worst["x"][0] == 1.0  # one ulp of 2.0
    assert len(changed) == 2
