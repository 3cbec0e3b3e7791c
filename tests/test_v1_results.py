"""Results of the first version (2178b48, before the redesign of issue 12), reproduced.

``tests/data/v1/golden/<preset>/`` are the golden files 2178b48 exported for its seven presets
(``python -m ppo_numpy oracle export DIR --preset NAME``, seed 0, every case);
``tests/data/v1/metrics.csv`` is the metrics of a 40-iteration training run of 2178b48 with
``tests/data/v1/config.json``. Nothing here is computed by the code under test: the expected
numbers were written by the old code, before any of the changes they now check.

Bit for bit where the arithmetic is the machine's own; to rounding downstream of GAE. Why:
2178b48 computed GAE by a blocked matrix product (``np.matmul``, i.e. BLAS), and a BLAS
product's rounding depends on the CPU kernel OpenBLAS picks. On an AMD EPYC with
``OPENBLAS_CORETYPE=Haswell`` (the machines of 2026-12-02) 2178b48 itself no longer reproduces
its own files: advantages differ by up to 216 ulps, and a whitened advantage near 0 by more.
Since issue 22, GAE on fewer than 32768 entries (every case here) is the backward recursion,
which adds the same terms in another order than 2178b48's product (and no longer depends on
the BLAS kernel).
So every output downstream of GAE (advantages, returns, the losses, their gradients and
statistics) is compared to 1e-10 of its scale, everything else bit for bit or to
``MAX_ULPS`` = 4 units in the last place: NumPy's ``exp`` and ``log`` run other code on
another CPU kind (AVX-512 SIMD loops, or the C library's on a machine with AVX2 only), so an
output computed with them (a KL estimate, a ratio) can round its last bit otherwise. Measured
on 2026-12-02: bit for bit on the AVX-512 machine; on an AVX2-only one (NumPy 2.4.6, the same
OpenBLAS kernel) one output only, the seed preset's ``stat/approx_kl_k3`` (k3 = exp(x) - 1 -
x), by at most 2 ulps. The training
run's metrics to a relative 1e-9 (the 40 iterations drift by at most 3e-12 here), its
discrete columns (score, lengths, EOS fraction) exactly.
"""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy.oracle.golden import _load_with_preset, _recompute
from ppo_numpy.training import PPOConfig, train

V1 = Path(__file__).parent / "data" / "v1"
PRESETS = sorted(p.name for p in (V1 / "golden").iterdir())
#: output names downstream of GAE: a name containing any of these
AFTER_GAE = ("advantages", "returns", "dlogp", "dvalues", "loss", "objective", "var_explained",
             "val/error", "vf_explained_var")  # the last two: statistics of V against R
#: training metrics that are counts or scores of sampled tokens: never rounded
DISCRETE = ("iteration", "score", "score_frac", "response_length", "eos_frac")


#: ulps an output not downstream of GAE may differ by: NumPy's exp and log are computed by
#: other code on another CPU kind (AVX-512 SIMD loops, or the C library's on an AVX2-only
#: machine), which may round the last bit otherwise
MAX_ULPS = 4


def ulps(got, want) -> float:
    """Largest difference in units of the last place of ``want`` (0 where both are NaN)."""
    both_nan = np.isnan(got) & np.isnan(want)
    diff = np.where(both_nan, 0.0, np.abs(got - want)) / np.spacing(np.abs(want))
    return float(np.max(diff, initial=0.0))


def close_to_rounding(got, want) -> bool:
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    return bool(np.all(np.abs(got - want) <= 1e-10 * scale))


def test_the_seven_presets_of_v1_are_all_here():
    assert PRESETS == ["deepspeed-chat", "lm-human-preferences", "openrlhf", "seed", "trl",
                       "trl-0.11", "verl"]


@pytest.mark.parametrize("preset", PRESETS)
def test_v1_golden_files_are_reproduced(preset):
    _, cases, p = _load_with_preset(V1 / "golden" / preset, None)
    exact = rounded = 0
    for k, case in enumerate(cases):
        if case["rejected"] is not None:
            continue
        outputs = _recompute(V1 / "golden" / preset, p, case, k)
        assert not isinstance(outputs, ValueError), (preset, k, outputs)
        for name, want in case["expected"].items():
            got, want = np.asarray(outputs[name], dtype=np.float64), np.asarray(want)
            assert got.shape == want.shape, (preset, k, name)
            if np.array_equal(got, want, equal_nan=True):
                exact += 1
                continue
            if not any(s in name for s in AFTER_GAE):
                assert ulps(got, want) <= MAX_ULPS, (preset, k, name, ulps(got, want), "ulps")
            else:
                assert close_to_rounding(got, want), (preset, k, name,
                                                      float(np.max(abs(got - want))))
            rounded += 1
    assert exact + rounded > 100 and exact > rounded, (preset, exact, rounded)
    print(f"{preset}: {exact} outputs bit for bit, {rounded} to rounding")


def test_v1_training_run_is_reproduced():
    # v1's value head read the policy's features: value_hidden = 0, no longer the default
    # (issue 25), passed explicitly since config.json predates the field; the file names the
    # clip width eps, its old spelling (docs/conventions.md, "One name per symbol")
    with pytest.warns(DeprecationWarning, match="eps is deprecated, use epsilon"):
        config = PPOConfig(**{"value_hidden": 0,
                              **json.loads((V1 / "config.json").read_text())})
    history = train(config, plot=False)
    with open(V1 / "metrics.csv", newline="") as f:
        old = list(csv.DictReader(f))
    assert len(history) == len(old) == 40
    for new_row, old_row in zip(history, old):
        for column, text in old_row.items():  # the columns v1 wrote (later ones are new)
            want, got = np.float64(text), np.float64(new_row[column])
            if column in DISCRETE:
                assert got == want, (old_row["iteration"], column, got, want)
            else:
                assert got == pytest.approx(want, rel=1e-9, abs=1e-15), (
                    old_row["iteration"], column, got, want)
