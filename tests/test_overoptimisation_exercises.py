"""docs/data/overoptimisation_exercises.json, which notebook 12's exercise solutions read
instead of running: it holds every run and number the notebook uses, it came from this code
(the first iterations of each run, rerun here, give the stored rows: bit for bit on the CPU
kind that wrote them, within ``tests._helpers.RERUN_RTOL`` on another, where the reward
model's fit on 3000 pairs carries the rounding differences furthest: 3.3e-8 after 5
iterations), and the command that writes it (``python -m ppo_numpy overoptimisation
--exercises --json PATH``) checks its options.

Why the first ``K`` = 5 iterations are enough: a run is deterministic (the same configuration
gives the same numbers, bit for bit, ``tests/test_overoptimisation.py``), and an iteration does
not depend on how many follow it, so the stored 200 are the rerun's first 5 continued. Those 5
already depend on everything a run is made of: the pairs, the reward model's 300 fitting steps
and its calibration (the proxy score of iteration 1, the held-out statistics), the warm-up, and
the beta (the first update sees KL = 0, as pi_theta = pi_ref; beta acts from iteration 2's
update on, so it shows in the rows from iteration 3). A stale file, a changed default or a
changed code path differs there already. The sampled lengths of ``random_half``
(``lengths_by_prompt``) come from the final policy, so only the full run checks them; here,
their shape. The fits take most of the time (3000 pairs: about 3.5 s; 1 s for the others).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from ppo_numpy._machine import cpu_kind
from ppo_numpy.programs import overoptimisation as cli
from ppo_numpy.reward.overoptimisation import COLUMNS, OveroptimisationConfig, summarise
from tests._helpers import same_row

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "docs" / "data" / "overoptimisation_exercises.json"
NOTEBOOK = ROOT / "notebooks" / "12_reward_model_overoptimisation.ipynb"
K = 5


@pytest.fixture(scope="module")
def stored():
    return json.loads(STORED.read_text())


def test_the_file_holds_every_run_and_number_the_notebook_reads(stored):
    assert stored["command"] == cli.EXERCISES_COMMAND
    assert set(stored["cpu_kind"]) == {"numpy", "openblas_core", "cpu_features"}
    assert list(stored["runs"]) == list(cli.EXERCISES)
    # the notebook's run (its default betas, 60 iterations) again with seeds 1 and 2
    assert cli.EXERCISES["seed1_60"] == {"seed": 1, "iterations": 60}
    assert cli.EXERCISES["seed2_60"] == {"seed": 2, "iterations": 60}
    default = OveroptimisationConfig()
    for name, fields in cli.EXERCISES.items():
        run = stored["runs"][name]
        assert run["config"] == {k: list(v) if isinstance(v, tuple) else v
                                 for k, v in fields.items()}, name
        config = default.replace(**fields)
        # the exercises run 200 iterations; the figure's seeds 1 and 2 the notebook's 60
        n = 60 if name in ("seed1_60", "seed2_60") else 200
        assert run["iterations"] == config.iterations == n, name
        assert set(run["heldout"]) == {"bt_loss", "accuracy", "gold_accuracy",
                                       "label_gold_accuracy"}
        rows = run["rows"]
        assert [(r["beta"], r["iteration"]) for r in rows] == \
            [(b, i) for b in config.betas for i in range(1, n + 1)], name
        assert all(list(r) == list(COLUMNS) for r in rows)
        # the summary the notebook prints is the one of the stored rows, exactly
        assert run["summary"] == {str(b): s for b, s in summarise(rows).items()}, name
        assert run["cpu_seconds"] > 0
    lengths = stored["runs"]["random_half"]["lengths_by_prompt"]
    assert lengths["asks_for"] == [1, 2, 3, 4, 5, 6]
    assert lengths["per_prompt"] == cli.PER_PROMPT and lengths["seed"] == cli.SAMPLE_SEED
    for key in ("ends_with_eos", "length", "gold", "proxy", "example"):
        assert len(lengths[key]) == 6, key
    assert all(isinstance(e, str) for e in lengths["example"])
    assert 0 <= lengths["ends_with_eos_all"] <= 1


def test_the_notebook_reads_the_file_and_names_its_command(stored):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    readers = [c for c in nb.cells if c.cell_type == "code"
               and "overoptimisation_exercises.json" in c.source]
    assert readers, "no cell reads docs/data/overoptimisation_exercises.json"
    assert f"# written by: {stored['command']}" in readers[0].source
    assert 'Path("../docs/data/overoptimisation_exercises.json")' in readers[0].source
    # the solutions no longer run the experiment themselves
    solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    assert not any("run_overoptimisation(" in c.source for c in solutions)


@pytest.mark.parametrize("name", list(cli.EXERCISES))
def test_the_first_iterations_rerun_give_the_stored_rows(stored, name):
    run = stored["runs"][name]
    exact = stored["cpu_kind"] == cpu_kind()
    fresh = cli.run_exercises(iterations=K, names=(name,))
    # through the writer and back: the floats survive it exactly
    fresh = json.loads(cli.exercises_json(fresh))["runs"][name]
    assert fresh["config"] == {**run["config"], "iterations": K}
    assert same_row(fresh["heldout"], run["heldout"], exact)
    betas = dict.fromkeys(r["beta"] for r in run["rows"])
    assert len(fresh["rows"]) == K * len(betas)
    for beta in betas:
        new = [r for r in fresh["rows"] if r["beta"] == beta]
        old = [r for r in run["rows"] if r["beta"] == beta][:K]
        assert [r["iteration"] for r in new] == list(range(1, K + 1))
        for a, b in zip(new, old):
            assert same_row(a, b, exact), (name, beta, a, b)
    if name == "random_half":
        assert set(fresh["lengths_by_prompt"]) == set(run["lengths_by_prompt"])


@pytest.mark.parametrize("argv, message", [
    (["--exercises"], "--exercises: needs --json PATH"),
    (["--json", "x.json"], "--json: only with --exercises"),
    (["--exercises", "--json", "x.json", "--seed", "1"], "got --seed"),
    (["--exercises", "--json", "x.json", "--quick", "--betas", "0"], "got --betas, --quick"),
    (["--exercises", "--json", "x.json", "--out", "runs/x"], "got --out"),
    (["--exercises", "--json", "/no/such/dir/x.json"], "--json: '/no/such/dir/x.json'"),
    (["--exercises", "--json", "x.json", "--iterations", "0"],
     "iterations: must be an integer >= 1"),
])
def test_the_command_rejects_bad_options_by_name(argv, message, capsys, tmp_path,
                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_run_exercises_names_an_unknown_run():
    with pytest.raises(ValueError, match="names: unknown run 'nope'"):
        cli.run_exercises(iterations=1, names=("nope",))
