"""docs/data/training_exercises.json, which notebook 10's exercise solutions read instead of
running: it holds every run and number the notebook uses, it came from this code (the first
iterations of each run, rerun here, give the stored rows: bit for bit on the CPU kind that
wrote them, within ``tests._helpers.RERUN_RTOL`` on another), and the command that writes it
(``python -m ppo_numpy train --exercises --json PATH``) checks its options.

Why the first ``K`` = 3 iterations are enough: a run is deterministic (the same configuration
gives the same numbers, bit for bit, ``tests/test_training.py``), and an iteration does not
depend on how many follow it, so the stored 40 are the rerun's first 3 continued. Those 3
already depend on everything a run is made of: the warm-up (the reference and the first
rollout), the epochs (the update statistics of iteration 1), and the beta: the first update
sees KL = 0, as pi_theta = pi_ref, so a fixed beta acts from iteration 2's update on (row 2's
update statistics show it, the rollouts from iteration 3); the adaptive controller changes
beta after iteration 1, which row 2's ``beta`` shows. A stale file, a changed default or a
changed code path differs there already. The three warm-ups take most of the time (about 1 s
each).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from ppo_numpy._machine import cpu_kind
from ppo_numpy.programs import train as cli
from ppo_numpy.training import SWEEP_CONFIG, train
from ppo_numpy.training.metrics import COLUMNS
from tests._helpers import RERUN_RTOL, row_drift, same_row

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "docs" / "data" / "training_exercises.json"
NOTEBOOK = ROOT / "notebooks" / "10_training.ipynb"
K = 3


@pytest.fixture(scope="module")
def stored():
    return json.loads(STORED.read_text())


def test_the_file_holds_every_run_and_number_the_notebook_reads(stored):
    assert stored["command"] == cli.EXERCISES_COMMAND
    assert set(stored["cpu_kind"]) == {"numpy", "openblas_core", "cpu_features"}
    # the three solutions: beta_sweep([0.02, 0.1, 0.2]), the adaptive controller at KL target
    # 4, 16 epochs, each over SWEEP_CONFIG (written out here, not read from the program)
    # and, for the figures' spread over seeds (issue 39), the runs the notebook compares
    # (beta_sweep([0, 0.05, 0.5]), lr x 10, c_V = 0, value_hidden 64) with seeds 1 and 2
    seeds = {"sweep": {"betas": [0.0, 0.05, 0.5]}, "lr_x10": {"lr": 0.03},
             "c_v_0": {"c_v": 0.0}, "value_hidden_64": {"value_hidden": 64}}
    assert list(stored["runs"]) == ["sweep", "adaptive", "epochs_16"] + [
        f"{name}_seed{s}" for s in (1, 2) for name in seeds]
    for s in (1, 2):
        for name, config in seeds.items():
            assert stored["runs"][f"{name}_seed{s}"]["config"] == {**config, "seed": s}
    assert stored["runs"]["sweep"]["config"] == {"betas": [0.02, 0.1, 0.2]}
    assert stored["runs"]["adaptive"]["config"] == {"kl_controller": "adaptive",
                                                    "kl_target": 4.0}
    assert stored["runs"]["epochs_16"]["config"] == {"epochs": 16}
    assert SWEEP_CONFIG.iterations == 40 and SWEEP_CONFIG.beta == 0.05
    for name, run in stored["runs"].items():
        assert run["iterations"] == 40, name
        rows = run["rows"]
        # every column the dashboard (plot_training) and the tables read
        assert all(list(r) == list(COLUMNS) for r in rows), name
        assert all(r["ratio_first_min"] == r["ratio_first_max"] == 1.0 for r in rows), name
        assert run["cpu_seconds"] > 0
    sweep = stored["runs"]["sweep"]["rows"]
    assert [(r["beta"], r["iteration"]) for r in sweep] == \
        [(b, i) for b in (0.02, 0.1, 0.2) for i in range(1, 41)]
    for s in (1, 2):
        sweep = stored["runs"][f"sweep_seed{s}"]["rows"]
        assert [(r["beta"], r["iteration"]) for r in sweep] == \
            [(b, i) for b in (0.0, 0.05, 0.5) for i in range(1, 41)]
        # another seed, another run: seeds 1 and 2 differ from their first rollout on
        assert sweep[0]["score"] != stored["runs"][f"sweep_seed{3 - s}"]["rows"][0]["score"]
    for name in ("adaptive", "epochs_16"):
        rows = stored["runs"][name]["rows"]
        assert [r["iteration"] for r in rows] == list(range(1, 41)), name
        assert rows[0]["beta"] == 0.05 and rows[0]["kl_ref"] == 0.0, name
    assert all(r["beta"] == 0.05 for r in stored["runs"]["epochs_16"]["rows"])
    # the adaptive controller moves beta (by at most 0.2 B / horizon = 0.128% an iteration)
    assert len({r["beta"] for r in stored["runs"]["adaptive"]["rows"]}) == 40


def test_the_notebook_reads_the_file_and_names_its_command(stored):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    readers = [c for c in nb.cells if c.cell_type == "code"
               and "training_exercises.json" in c.source]
    assert readers, "no cell reads docs/data/training_exercises.json"
    assert f"# written by: {stored['command']}" in readers[0].source
    assert 'Path("../docs/data/training_exercises.json")' in readers[0].source
    # the solutions no longer train themselves (their comments name the calls they replace)
    solutions = [c for c in nb.cells if c.cell_type == "code"
                 and "solution" in c.metadata.get("tags", [])]
    assert len(solutions) == 3
    code = [line.split("#")[0] for c in solutions for line in c.source.splitlines()]
    assert not any(re.search(r"(?<![\w.])(train|beta_sweep)\(", line) for line in code)


@pytest.mark.parametrize("name", list(cli.EXERCISES))
def test_the_first_iterations_rerun_give_the_stored_rows(stored, name):
    run = stored["runs"][name]
    exact = stored["cpu_kind"] == cpu_kind()
    fresh = cli.run_exercises(iterations=K, names=(name,))
    # through the writer and back: the floats survive it exactly
    fresh = json.loads(cli.exercises_json(fresh))["runs"][name]
    assert fresh["config"] == run["config"] and fresh["iterations"] == K
    # a sweep holds one run per beta, one after the other: rerun K rows, stored 40, each
    n = run["iterations"]
    runs = len(run["rows"]) // n
    assert len(fresh["rows"]) == K * runs
    for j in range(runs):
        new, old = fresh["rows"][j * K:(j + 1) * K], run["rows"][j * n:j * n + K]
        assert [r["iteration"] for r in new] == list(range(1, K + 1))
        for a, b in zip(new, old):
            assert same_row(a, b, exact), (name, j, a, b)


def test_a_planted_change_fails_the_comparison(stored):
    # what the cross-kind allowance still catches: epochs_16 with a learning rate 0.1 % off
    # moves iteration 1's row by about 8e-3 of its numbers, thousands of times RERUN_RTOL
    # (the kinds' drift is 1e-13 on these runs)
    run = stored["runs"]["epochs_16"]
    rows = train(SWEEP_CONFIG.replace(iterations=1, epochs=16, lr=SWEEP_CONFIG.lr * 1.001),
                 plot=False)
    fresh = json.loads(cli.exercises_json({"x": {"config": {}, "iterations": 1,
                                                 "cpu_seconds": 0, "rows": rows}}))
    drift = row_drift(fresh["runs"]["x"]["rows"][0], run["rows"][0])
    assert drift * RERUN_RTOL > 1e-3, drift
    assert not same_row(fresh["runs"]["x"]["rows"][0], run["rows"][0], exact=False)


@pytest.mark.parametrize("argv, message", [
    (["--exercises"], "--exercises: needs --json PATH"),
    (["--json", "x.json"], "--json: only with --exercises"),
    (["--exercises", "--json", "x.json", "--seed", "1"], "got --seed"),
    (["--exercises", "--json", "x.json", "--lr", "0.1", "--force"], "got --force, --lr"),
    (["--exercises", "--json", "x.json", "--out", "runs/x"], "got --out"),
    (["--exercises", "--json", "x.json", "--resume", "runs/x"], "got --resume"),
    (["--exercises", "--json", "x.json", "--no-plot"], "got --no-plot"),
    (["--exercises", "--json", "/no/such/dir/x.json"], "--json: '/no/such/dir/x.json'"),
    (["--exercises", "--json", "x.json", "--iterations", "0"],
     "iterations: must be >= 1 with --exercises, got 0"),
])
def test_the_command_rejects_bad_options_by_name(argv, message, capsys, tmp_path,
                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "python -m ppo_numpy train: error: " in err and message in err, err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "runs").exists()


def test_run_exercises_names_an_unknown_run():
    with pytest.raises(ValueError, match="names: unknown run 'nope'"):
        cli.run_exercises(iterations=1, names=("nope",))
