"""benchmarks/grpo_speed.py: typed --set overrides, and one tiny comparison row."""

from __future__ import annotations

import pytest

from benchmarks.grpo_speed import _line, _parse_set, compare


def test_set_overrides_are_typed_like_the_config_fields():
    assert _parse_set(["beta=0.01", "iterations=200", "group_size=none", "algo=rloo",
                       "whiten_advantages=false", "group_size=4"]) == {
        "beta": 0.01, "iterations": 200, "group_size": 4, "algo": "rloo",
        "whiten_advantages": False}
    with pytest.raises(SystemExit, match="unknown field 'nope'"):
        _parse_set(["nope=1"])


def test_compare_reports_each_task_and_algo(capsys):
    tiny = {"iterations": 2, "warmup_steps": 5, "batch_size": 16, "minibatches": 2,
            "epochs": 1, "d_hidden": 16, "group_size": 4}
    rows = compare(["length"], ["ppo", "grpo"], [0], {**tiny})
    assert [(r["task"], r["algo"], r["seeds"]) for r in rows] == [("length", "ppo", 1),
                                                                  ("length", "grpo", 1)]
    for r in rows:
        assert 0 <= r["final"] <= 1 and len(r["runs"]) == 1
        assert _line(r).startswith(f"| length | {r['algo']} | {r['reached']}/1 |")
