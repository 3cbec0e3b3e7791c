"""Results of the first version (2178b48, before the redesign of issue 12), reproduced bit for bit.

``tests/data/v1/golden/<preset>/`` are the golden files 2178b48 exported for its seven presets
(``python -m ppo_numpy oracle export DIR --preset NAME``, seed 0, every case);
``tests/data/v1/metrics.csv`` is the metrics of a 40-iteration training run of 2178b48 with
``tests/data/v1/config.json``. Nothing here is computed by the code under test: the expected
numbers were written by the old code, before any of the changes they now check.
"""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy.oracle.golden import bit_identical
from ppo_numpy.training import PPOConfig, train

V1 = Path(__file__).parent / "data" / "v1"
PRESETS = sorted(p.name for p in (V1 / "golden").iterdir())


def test_the_seven_presets_of_v1_are_all_here():
    assert PRESETS == ["deepspeed-chat", "lm-human-preferences", "openrlhf", "seed", "trl",
                       "trl-0.11", "verl"]


@pytest.mark.parametrize("preset", PRESETS)
def test_v1_golden_files_are_reproduced_bit_for_bit(preset):
    same, total = bit_identical(V1 / "golden" / preset)
    assert total > 100 and same == total, f"{preset}: {same} of {total} outputs reproduced"


def test_v1_training_run_is_reproduced_bit_for_bit():
    # v1's value head read the policy's features: value_hidden = 0, no longer the default
    # (issue 25), passed explicitly since config.json predates the field
    config = PPOConfig(**{"value_hidden": 0, **json.loads((V1 / "config.json").read_text())})
    history = train(config, plot=False)
    with open(V1 / "metrics.csv", newline="") as f:
        old = list(csv.DictReader(f))
    assert len(history) == len(old) == 40
    for new_row, old_row in zip(history, old):
        for column, text in old_row.items():  # the columns v1 wrote (later ones are new)
            want, got = np.float64(text), np.float64(new_row[column])
            assert got.tobytes() == want.tobytes(), (old_row["iteration"], column, got, want)
