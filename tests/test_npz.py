"""Files written twice from the same arrays are byte-identical (determinism of outputs)."""

import numpy as np

from ppo_numpy._npz import savez_reproducible
from ppo_numpy.models.checkpoint import load_checkpoint, save_checkpoint
from ppo_numpy.oracle.golden import export


def test_savez_reproducible_round_trip_and_bytes(tmp_path):
    arrays = {"a/b": np.arange(6.0).reshape(2, 3), "n": np.array(7), "s": np.array("x")}
    savez_reproducible(tmp_path / "1.npz", arrays)
    savez_reproducible(tmp_path / "2.npz", arrays)
    assert (tmp_path / "1.npz").read_bytes() == (tmp_path / "2.npz").read_bytes()
    with np.load(tmp_path / "1.npz", allow_pickle=False) as f:
        assert sorted(f.files) == ["a/b", "n", "s"]
        np.testing.assert_array_equal(f["a/b"], arrays["a/b"])
        assert int(f["n"]) == 7 and str(f["s"]) == "x"


def test_checkpoint_bytes_identical(tmp_path):
    params = {"W": np.array([[0.1, -0.2]]), "b": np.array([3.0])}
    for name in ("1.npz", "2.npz"):
        save_checkpoint(tmp_path / name, params, extra={"iteration": 3})
    assert (tmp_path / "1.npz").read_bytes() == (tmp_path / "2.npz").read_bytes()
    ck = load_checkpoint(tmp_path / "1.npz", expected_params=params)
    np.testing.assert_array_equal(ck["params"]["W"], params["W"])


def test_golden_export_bytes_identical(tmp_path):
    export(tmp_path / "a", "seed", seed=0)
    export(tmp_path / "b", "seed", seed=0)
    files = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*")
                   if p.is_file())
    assert files == sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*")
                           if p.is_file())
    assert any(name.endswith(".npz") for name in files)
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
