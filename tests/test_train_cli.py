"""``python -m ppo_numpy train``: options, outputs, refusals with status 2, interrupt and resume."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppo_numpy.programs import train as cli
from ppo_numpy.training.config import PPOConfig
from ppo_numpy.training.metrics import read_rows

QUICK = ["--task", "length", "--warmup-steps", "10", "--batch-size", "16", "--minibatches", "2",
         "--epochs", "2", "--d-hidden", "16", "--no-plot"]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for f in dataclasses.fields(PPOConfig):
        assert "--" + f.name.replace("_", "-") in text, f.name
    for flag in ("--out", "--resume", "--force", "--no-plot", "--quiet"):
        assert flag in text
    for task in ("target", "length", "reverse", "sort"):
        assert task in text


def test_a_run_prints_progress_and_where_the_outputs_are(capsys, tmp_path):
    out = tmp_path / "run"
    code, text, _ = run(capsys, *QUICK, "--iterations", "3", "--out", str(out))
    assert code == 0
    progress = [line for line in text.splitlines() if line.startswith("iter ")]
    assert len(progress) == 3
    for word in ("score", "KL", "clipfrac", " s"):
        assert word in progress[0]
    assert f"outputs in {out}/" in text and str(out / "metrics.csv") in text
    assert len(read_rows(out / "metrics.csv")) == 3
    # wall-clock time goes to the progress line only, never to metrics.csv
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert "second" not in header and "time" not in header


def test_same_seed_gives_a_byte_identical_csv(capsys, tmp_path):
    for name in ("a", "b"):
        assert run(capsys, *QUICK, "--iterations", "3", "--out", str(tmp_path / name))[0] == 0
    assert (tmp_path / "a/metrics.csv").read_bytes() == (tmp_path / "b/metrics.csv").read_bytes()


def test_interrupt_then_resume_equals_an_uninterrupted_run(capsys, tmp_path, monkeypatch):
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert run(capsys, *QUICK, "--iterations", "5", "--out", str(full))[0] == 0

    real = cli._progress

    def interrupting(quiet):
        report = real(quiet)

        def callback(row):
            report(row)
            if row["iteration"] == 2:
                raise KeyboardInterrupt

        return callback

    monkeypatch.setattr(cli, "_progress", interrupting)
    code, _, err = run(capsys, *QUICK, "--iterations", "5", "--out", str(cut))
    assert code == 130
    assert f"--resume {cut}" in err
    monkeypatch.setattr(cli, "_progress", real)
    code, text, _ = run(capsys, "--resume", str(cut), "--no-plot")
    assert code == 0 and "resuming" in text
    assert (cut / "metrics.csv").read_bytes() == (full / "metrics.csv").read_bytes()
    # extending a finished run continues it
    assert run(capsys, "--resume", str(cut), "--iterations", "6", "--no-plot")[0] == 0
    assert len(read_rows(cut / "metrics.csv")) == 6


@pytest.mark.parametrize("argv, message", [
    (["--task", "nope"], "invalid choice: 'nope'"),
    (["--iterations", "-3"], "iterations: must be >= 0, got -3"),
    (["--iterations", "many"], "invalid int value"),
    (["--seed", "-1"], "seed: must be >= 0, got -1"),
    (["--minibatches", "5"], "minibatches: must divide batch_size=64"),
])
def test_bad_arguments_exit_2(capsys, tmp_path, argv, message):
    try:
        code = cli.main([*argv, "--out", str(tmp_path / "x")])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert not (tmp_path / "x").exists()


def test_refusals_exit_2_and_leave_the_previous_run_alone(capsys, tmp_path):
    out = tmp_path / "run"
    assert run(capsys, *QUICK, "--iterations", "2", "--out", str(out))[0] == 0
    before = (out / "metrics.csv").read_bytes(), (out / "checkpoint.npz").read_bytes()

    code, _, err = run(capsys, *QUICK, "--iterations", "2", "--out", str(out))
    assert code == 2 and "already holds a run" in err and "--force" in err

    code, _, err = run(capsys, "--resume", str(out), "--epsilon", "0.3")
    assert code == 2 and "another configuration: epsilon = 0.2 in the checkpoint, 0.3 asked" in err

    code, _, err = run(capsys, "--resume", str(tmp_path / "missing"))
    assert code == 2 and "no checkpoint" in err

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = run(capsys, *QUICK, "--out", str(blocker / "sub"))
    assert code == 2 and "output directory" in err

    assert ((out / "metrics.csv").read_bytes(), (out / "checkpoint.npz").read_bytes()) == before
    code, _, _ = run(capsys, *QUICK, "--iterations", "1", "--out", str(out), "--force")
    assert code == 0 and len(read_rows(out / "metrics.csv")) == 1


def test_module_entry_point_exit_status(tmp_path):
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-m", "ppo_numpy", "train", "--task", "nope"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_demo_trains_and_prints_the_dashboard_path(capsys, tmp_path, monkeypatch):
    from ppo_numpy.programs import demo

    quick = PPOConfig(iterations=3, warmup_steps=10, batch_size=16, minibatches=2, epochs=2,
                      d_hidden=16)
    monkeypatch.setattr(demo, "PPOConfig", lambda seed: quick.replace(seed=seed))
    monkeypatch.chdir(tmp_path)
    assert demo.main([]) == 0
    assert demo.main([]) == 0  # a second demo never overwrites the first
    text = capsys.readouterr().out
    for out in (Path("runs/demo"), Path("runs/demo-2")):
        assert f"dashboard: {out / 'dashboard.png'}" in text
        assert (tmp_path / out / "dashboard.png").exists()
    assert "random policy 0.169" in text and "the trained policy:" in text
