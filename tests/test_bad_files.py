"""A bad file is a clear error, never a traceback (issue 14, item 5).

Every loader (``load_npz`` and on it ``load_checkpoint``, ``load_state`` /
``resume``, the golden files' ``load`` / ``verify``; metrics.csv on resume)
turns a truncated, empty, bit-flipped or random file, and a manifest of the
wrong JSON types, into one ValueError (``BadFileError``) whose message starts
with the file's name; the CLIs print that as one line and exit 2; nothing on
disk changes.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy import demo
from ppo_numpy._npz import BadFileError, entry, load_npz, savez_reproducible
from ppo_numpy.policy.checkpoint import load_checkpoint, save_checkpoint
from ppo_numpy.training import cli as train_cli
from ppo_numpy.training.config import PPOConfig
from ppo_numpy.training.run import RunError, load_state, resume, train

ROOT = Path(__file__).resolve().parents[1]
QUICK = PPOConfig(task="length", iterations=2, warmup_steps=10, batch_size=16, minibatches=2,
                  epochs=2, d_hidden=16)
SMALL = {"format/version": np.array(1), "params/W": np.arange(6.0).reshape(2, 3),
         "extra/task": np.array("copy")}


def esc(path) -> str:
    return re.escape(str(path))


def snapshot(directory: Path) -> dict:
    """Every file under ``directory``: relative path -> (bytes, mtime in ns)."""
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def flipped(data: bytes, offset: int, bit: int) -> bytes:
    b = bytearray(data)
    b[offset] ^= 1 << bit
    return bytes(b)


def same_arrays(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
        for k in a)


def damaged(good: bytes) -> dict:
    """name -> bytes: the ways a file can be bad that the issue lists."""
    rng = np.random.default_rng(0)
    mid = len(good) // 2
    return {"empty": b"", "truncated-1": good[:1], "truncated-half": good[:mid],
            "truncated-last-byte": good[:-1], "random-bytes": rng.bytes(len(good)),
            "text": b"hello, not an archive\n", "bit-flip-data": flipped(good, mid, 3),
            "bit-flip-end-record": flipped(good, len(good) - 12, 0)}


def one_error_line(err: str, path) -> None:
    """stderr is one line saying ``error: <path>: <what>``."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"error: {path}: " in lines[0], (lines[0], str(path))


# ------------------------------------------------------------------------------------- load_npz

@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.npz"
    savez_reproducible(path, SMALL)
    return path


def test_load_npz_round_trip_is_exact(small):
    got = load_npz(small)
    assert same_arrays(got, {k: np.asarray(v) for k, v in SMALL.items()})
    assert got["params/W"].flags.writeable and got["params/W"].flags.owndata


@pytest.mark.parametrize("kind", list(damaged(b"x" * 100)))
def test_damaged_npz_is_a_bad_file_error_naming_the_file(small, kind):
    bad = damaged(small.read_bytes())[kind]
    small.write_bytes(bad)
    with pytest.raises(BadFileError) as exc:
        load_npz(small)
    assert isinstance(exc.value, ValueError)
    assert str(exc.value).startswith(f"{small}: ") and exc.value.path == str(small)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 300 + len(str(small))
    assert small.read_bytes() == bad


def test_every_single_bit_flip_is_an_error_or_a_correct_load(small):
    """Every byte (every other bit of it, each bit at every other byte): data, .npy headers,
    local headers, central directory, end record. A flip in a field zipfile ignores (a local
    header's time) may load, but then exactly the stored arrays; never a wrong load, never
    another exception."""
    good = small.read_bytes()
    want = load_npz(small)
    outcomes = {"error": 0, "same": 0}
    for offset in range(len(good)):
        for bit in range(offset % 2, 8, 2):
            small.write_bytes(flipped(good, offset, bit))
            try:
                got = load_npz(small)
            except BadFileError as err:
                assert str(err).startswith(f"{small}: "), (offset, bit, str(err))
                outcomes["error"] += 1
                continue
            assert same_arrays(got, want), (offset, bit, sorted(got))
            outcomes["same"] += 1
    assert outcomes["error"] > 0.5 * 4 * len(good), outcomes


def test_a_flip_that_shrinks_a_shape_is_caught_by_the_crc(small):
    # np.load reads only as many bytes as the header's shape says, so it never reaches the
    # member's end where zipfile compares the CRC-32: "(2, 3)" -> "(2, 1)" would load a wrong
    # array. load_npz reads every member whole.
    good = small.read_bytes()
    at = good.index(b"'shape': (2, 3)") + len(b"'shape': (2, ")
    small.write_bytes(good[:at] + b"1" + good[at + 1:])
    with pytest.raises(BadFileError, match=r"member 'params/W.npy' \(BadZipFile: Bad CRC-32"):
        load_npz(small)


def write_raw(path, members: dict) -> None:
    """A zip whose members hold the given bytes (CRCs right): damage zipfile cannot see."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)


def npy_bytes(arr, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(arr), allow_pickle=allow_pickle)
    return buf.getvalue()


@pytest.mark.parametrize("members, message", [
    ({"x.npy": npy_bytes(np.arange(3.0))[:-8]}, r"member 'x.npy': its header says float64 of "
                                                r"shape \(3,\) \(24 bytes\), it holds 16 bytes"),
    ({"x.npy": npy_bytes(np.arange(3.0)) + b"\0" * 8}, r"member 'x.npy': .* it holds 32 bytes"),
    ({"x.npy": npy_bytes(np.array([{"a": 1}], dtype=object), allow_pickle=True)},
     r"member 'x.npy': holds Python objects \(pickled data\)"),
    ({"x.npy": b"\x93NUMPY\x09\x00" + b"\0" * 20},
     r"member 'x.npy': unknown .npy version \(9, 0\)"),
    ({"x.npy": b"not a npy"}, r"member 'x.npy' \(ValueError"),
    ({"notes.txt": b"hello"}, r"member 'notes.txt' is not a .npy array"),
])
def test_members_that_are_not_npy_arrays(tmp_path, members, message):
    path = tmp_path / "f.npz"
    write_raw(path, members)
    with pytest.raises(BadFileError, match=rf"^{esc(tmp_path / 'f.npz')}: {message}"):
        load_npz(path)


def test_missing_file_and_directory(tmp_path):
    missing = re.escape(str(tmp_path / "none.npz"))
    with pytest.raises(FileNotFoundError, match=rf"^{missing}: no such file$"):
        load_npz(tmp_path / "none.npz")
    (tmp_path / "dir.npz").mkdir()
    with pytest.raises(BadFileError, match="dir.npz: not a regular file"):
        load_npz(tmp_path / "dir.npz")


def test_entry_checks_presence_dtype_and_shape():
    arrays = {"a": np.zeros((2, 3)), "s": np.array("x")}
    assert entry("f.npz", arrays, "a", "f", shape=(2, 3)) is arrays["a"]
    with pytest.raises(BadFileError, match=r"^f.npz: no entry 'extra/b'$"):
        entry("f.npz", arrays, "b", "f", label="extra/b")
    with pytest.raises(BadFileError, match=r"^f.npz: entry 's' has dtype <U1, expected float$"):
        entry("f.npz", arrays, "s", "f")
    with pytest.raises(BadFileError, match=r"^f.npz: entry 'a' has shape \(2, 3\), expected "
                                           r"\(3, 2\)$"):
        entry("f.npz", arrays, "a", "f", shape=(3, 2))


# ------------------------------------------------------------------------------- load_checkpoint

@pytest.mark.parametrize("kind", list(damaged(b"x" * 100)))
def test_damaged_checkpoint(tmp_path, kind):
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, {"W": np.arange(6.0).reshape(2, 3)}, extra={"iteration": 3})
    path.write_bytes(damaged(path.read_bytes())[kind])
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: "):
        load_checkpoint(path)


def test_checkpoint_entries_of_the_wrong_kind(tmp_path):
    path = tmp_path / "ckpt.npz"
    savez_reproducible(path, {"format/version": np.array("one"), "params/W": np.zeros(2)})
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: entry 'format/version' has dtype <U3, "
                                           "expected integer$"):
        load_checkpoint(path)
    savez_reproducible(path, {"format/version": np.array(1), "params/W": np.zeros(2, complex)})
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: entry 'params/W' has dtype complex128"):
        load_checkpoint(path)
    savez_reproducible(path, {"format/version": np.array(1), "params/W": np.zeros(2),
                              "other/x": np.zeros(1)})
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: unexpected entry 'other/x'$"):
        load_checkpoint(path)
    savez_reproducible(path, {"format/version": np.array(1)})
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: holds no parameters$"):
        load_checkpoint(path)
    save_checkpoint(path, {"W": np.zeros(2)})
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: parameters do not match "
                                           r"expected_params: missing \['b'\]"):
        load_checkpoint(path, expected_params={"W": np.zeros(2), "b": np.zeros(1)})


# ----------------------------------------------------------------------- runs: load_state, resume

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "run"
    train(QUICK, out, plot=False)
    return out


@pytest.fixture
def run_dir(trained, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    return out


def test_every_kth_byte_of_a_real_checkpoint(run_dir):
    """A flip every 101 bytes (bit offset % 8) of a training checkpoint: an error naming the
    file, or the same arrays (and then load_state accepts it)."""
    path = run_dir / "checkpoint.npz"
    good = path.read_bytes()
    want = load_checkpoint(path)
    errors = 0
    for offset in list(range(0, len(good), 101)) + list(range(len(good) - 120, len(good))):
        path.write_bytes(flipped(good, offset, offset % 8))
        try:
            got = load_checkpoint(path)
        except BadFileError as err:
            assert str(err).startswith(f"{path}: "), (offset, str(err))
            errors += 1
            continue
        for section in ("params", "optimizer_state", "extra"):
            assert same_arrays(got[section], want[section]), (offset, section)
        load_state(path)
    assert errors > 0


def rewrite(path: Path, **changes) -> None:
    """Re-save a training checkpoint with some of its extra entries changed or removed."""
    saved = load_checkpoint(path)
    extra = dict(saved["extra"])
    for key, value in changes.items():
        if value is None:
            extra.pop(key)
        else:
            extra[key] = value
    save_checkpoint(path, saved["params"], saved["optimizer_state"], extra)


def nan_param(path: Path) -> None:
    saved = load_checkpoint(path)
    name = sorted(saved["params"])[0]
    params = dict(saved["params"])
    params[name] = params[name].copy()
    params[name].flat[0] = np.nan
    save_checkpoint(path, params, saved["optimizer_state"], saved["extra"])


def nan_adam(path: Path) -> None:
    saved = load_checkpoint(path)
    optim = dict(saved["optimizer_state"])
    key = sorted(k for k in optim if k.startswith("v/"))[0]
    optim[key] = np.full_like(optim[key], np.inf)
    save_checkpoint(path, saved["params"], optim, saved["extra"])


# name -> (how the checkpoint is damaged, what the message says after "<path>: ")
CHECKPOINT_DAMAGE = {
    **{kind: (lambda p, k=kind: p.write_bytes(damaged(p.read_bytes())[k]), "")
       for kind in damaged(b"x" * 100)},
    "no-version": (lambda p: rewrite(p, version=None), "no entry 'extra/version'"),
    "config-not-json": (lambda p: rewrite(p, config=np.array("{oops")),
                        "extra/config is not a configuration"),
    "config-bad-value": (lambda p: rewrite(p, config=np.array(
        QUICK.to_json().replace('"eps": 0.2', '"eps": -1'))), "extra/config is not a"),
    "config-number": (lambda p: rewrite(p, config=np.array(3.0)),
                      "entry 'extra/config' has dtype float64, expected string"),
    "beta-array": (lambda p: rewrite(p, beta=np.array([0.1, 0.2])),
                   r"entry 'extra/beta' has shape \(2,\), expected \(\)"),
    "beta-nan": (lambda p: rewrite(p, beta=np.array(np.nan)), "extra/beta holds NaN or inf"),
    "beta-negative": (lambda p: rewrite(p, beta=np.array(-0.1)), "extra/beta is -0.1"),
    "iteration-negative": (lambda p: rewrite(p, iteration=np.array(-1)),
                           "extra/iteration is -1, expected >= 0"),
    "rng-garbage": (lambda p: rewrite(p, rng_state=np.array('{"state": 1}')),
                    "extra/rng_state is not a PCG64 generator state"),
    "params-nan": (nan_param, r"params/\S+ holds NaN or inf"),
    "adam-inf": (nan_adam, r"optim/v/\S+ holds NaN or inf"),
}


@pytest.mark.parametrize("kind", list(CHECKPOINT_DAMAGE))
def test_resume_from_a_bad_checkpoint(run_dir, kind):
    damage, message = CHECKPOINT_DAMAGE[kind]
    path = run_dir / "checkpoint.npz"
    damage(path)
    before = snapshot(run_dir)
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: {message}"):
        resume(run_dir, plot=False)
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: {message}"):
        load_state(path)
    assert snapshot(run_dir) == before


def test_resume_cli_on_a_bad_checkpoint_exits_2_with_one_line(run_dir, capsys):
    path = run_dir / "checkpoint.npz"
    for kind, (damage, _) in CHECKPOINT_DAMAGE.items():
        good = path.read_bytes()
        damage(path)
        before = snapshot(run_dir)
        assert train_cli.main(["--resume", str(run_dir), "--no-plot", "--quiet"]) == 2, kind
        one_error_line(capsys.readouterr().err, path)
        assert snapshot(run_dir) == before, kind
        path.write_bytes(good)


def test_a_checkpoint_that_does_not_fit_its_own_configuration_is_a_run_error(run_dir):
    path = run_dir / "checkpoint.npz"
    rewrite(path, config=np.array(QUICK.replace(d_hidden=8).to_json()))
    with pytest.raises(RunError, match=rf"^{esc(path)}: does not match its own configuration "
                                       r"\(missing \[\], unexpected \[\], mismatched"):
        load_state(path)


def rows_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


# name -> (new metrics.csv from the old lines, what the message says after "<path>: ")
METRICS_DAMAGE = {
    "empty": (lambda lines: "", r"not a metrics.csv of this version \(header differs\)"),
    "truncated-mid-row": (lambda lines: "\n".join(lines)[:-15],
                          r"row 2 \(line 3\) has \d+ fields, expected \d+"),
    "one-row-short": (lambda lines: "\n".join(lines[:2]) + "\n",
                      "has 1 rows, the checkpoint is at iteration 2"),
    "garbled-number": (lambda lines: "\n".join([lines[0], lines[1].replace(",", ",x", 1),
                                                *lines[2:]]) + "\n",
                       r"row 1 \(line 2\): score = 'x\S*' is not a number"),
    "wrong-iteration": (lambda lines: "\n".join([lines[0], lines[1], "5" + lines[2][1:]]) + "\n",
                        r"row 2 \(line 3\) has iteration 5, expected 2"),
    "not-utf8": (lambda lines: b"\xff\xfe" + "\n".join(lines).encode(),
                 "not a readable CSV file"),
    "nul-byte": (lambda lines: "\n".join([lines[0], lines[1].replace(",", "\0,", 1),
                                          *lines[2:]]) + "\n",
                 r"row 1 \(line 2\): iteration = '1\\x00' is not a number"),
    "unclosed-quote": (lambda lines: "\n".join([*lines[:2], '2,"' + lines[2][2:]]) + "\n",
                       r"row 2 \(line 3\) has 2 fields, expected \d+"),
}


def apply_metrics_damage(path: Path, kind: str) -> str:
    new, message = METRICS_DAMAGE[kind]
    text = new(rows_of(path))
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return message


@pytest.mark.parametrize("kind", list(METRICS_DAMAGE))
def test_resume_with_a_bad_metrics_csv(run_dir, kind):
    path = run_dir / "metrics.csv"
    message = apply_metrics_damage(path, kind)
    before = snapshot(run_dir)
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: {message}"):
        resume(run_dir, {"iterations": 3}, plot=False)
    assert snapshot(run_dir) == before


def test_resume_cli_with_a_bad_metrics_csv_exits_2_with_one_line(run_dir, capsys):
    path = run_dir / "metrics.csv"
    good = path.read_bytes()
    for kind in METRICS_DAMAGE:
        apply_metrics_damage(path, kind)
        before = snapshot(run_dir)
        assert train_cli.main(["--resume", str(run_dir), "--iterations", "3", "--quiet",
                               "--no-plot"]) == 2, kind
        one_error_line(capsys.readouterr().err, path)
        assert snapshot(run_dir) == before, kind
        path.write_bytes(good)
    # the rows past the checkpoint's iteration are an interrupted iteration's: dropped
    path.write_bytes(good + b"3,garbage\n")
    assert train_cli.main(["--resume", str(run_dir), "--iterations", "3", "--quiet",
                           "--no-plot"]) == 0
    assert len(rows_of(path)) == 4


def test_python_m_ppo_numpy_train_resume_on_random_bytes(run_dir):
    path = run_dir / "checkpoint.npz"
    path.write_bytes(np.random.default_rng(1).bytes(5000))
    before = snapshot(run_dir)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "ppo_numpy", "train", "--resume", str(run_dir)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    one_error_line(proc.stderr, path)
    assert "Traceback" not in proc.stderr and "pickle" not in proc.stderr
    assert snapshot(run_dir) == before


def test_demo_on_a_damaged_checkpoint_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    out = tmp_path / "demo"

    def train_then_damage(config, out_dir, callback=None):
        out_dir.mkdir(parents=True)
        (out_dir / "checkpoint.npz").write_bytes(b"PK\x03\x04 truncated")
        return []

    monkeypatch.setattr(demo, "train", train_then_damage)
    assert demo.main(["--out", str(out)]) == 2
    one_error_line(capsys.readouterr().err, out / "checkpoint.npz")
