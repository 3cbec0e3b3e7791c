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
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy._npz import BadFileError, entry, load_npz, savez_reproducible
from ppo_numpy.models.checkpoint import load_checkpoint, save_checkpoint
from ppo_numpy.oracle import golden
from ppo_numpy.oracle.cases import generate_cases
from ppo_numpy.programs import demo
from ppo_numpy.programs import oracle as oracle_cli
from ppo_numpy.programs import train as train_cli
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
    """A flip every 307 bytes (bit offset % 8) of a training checkpoint, and in each of its
    first 200 bytes (a local header, a .npy header) and last 200 (central directory, end
    record): an error naming the file, or the same arrays (and then load_state accepts it)."""
    path = run_dir / "checkpoint.npz"
    good = path.read_bytes()
    want = load_checkpoint(path)
    errors = 0
    offsets = sorted({*range(0, len(good), 307), *range(200), *range(len(good) - 200, len(good))})
    for offset in offsets:
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
        QUICK.to_json().replace('"epsilon": 0.2', '"epsilon": -1'))), "extra/config is not a"),
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


# ------------------------------------------------------------------------------ golden files

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("golden") / "g"
    golden.export(d, "seed", generate_cases(0, ["random-0", "random-1"]))
    return d


@pytest.fixture
def golden_dir(exported, tmp_path):
    d = tmp_path / "g"
    shutil.copytree(exported, d)
    return d


def edit(key_path, value):
    """Set (or with ``value`` DELETE, remove) ``manifest[k1][k2]...``."""

    def apply(m):
        obj = m
        for k in key_path[:-1]:
            obj = obj[k]
        if value is DELETE:
            del obj[key_path[-1]]
        else:
            obj[key_path[-1]] = value
        return m

    return apply


DELETE = object()

# name -> (the manifest's new text from the parsed one, what the message says after "<path>: ")
MANIFEST_DAMAGE = {
    "top-level-array": (lambda m: [m], "expected a JSON object at the top level, got an array"),
    "top-level-string": (lambda m: "manifest", "expected a JSON object at the top level, got a"),
    "cases-dict": (edit(["cases"], {"a": 1}), "cases: expected an array, got an object"),
    "cases-string": (edit(["cases"], "random-0"), "cases: expected an array, got a string"),
    "cases-missing": (edit(["cases"], DELETE), "cases: missing"),
    "case-list": (edit(["cases", 0], ["random-0"]), r"cases\[0\]: expected an object, got an"),
    "case-number": (edit(["cases", 1], 3), r"cases\[1\]: expected an object, got a number"),
    "case-no-file": (edit(["cases", 1, "file"], DELETE), r"cases\[1\].file: missing"),
    "case-file-number": (edit(["cases", 0, "file"], 7),
                         r"cases\[0\].file: expected a string, got a number"),
    "case-file-outside": (edit(["cases", 0, "file"], "../../etc/passwd"),
                          r"cases\[0\].file: '../../etc/passwd' is not a path inside"),
    "case-file-absolute": (edit(["cases", 0, "file"], "/etc/passwd"),
                           r"cases\[0\].file: '/etc/passwd' is not a path inside"),
    "case-shape": (edit(["cases", 0, "shape"], [4]), r"cases\[0\].shape: expected \[B, T\]"),
    "case-shape-bool": (edit(["cases", 0, "shape"], [True, 2]), r"cases\[0\].shape: expected"),
    "case-name-null": (edit(["cases", 0, "name"], None),
                       r"cases\[0\].name: expected a string, got null"),
    "case-duplicate": (lambda m: {**m, "cases": [m["cases"][0], m["cases"][0]]},
                       r"cases\[1\].name: two cases are named 'random-0'"),
    "overrides-list": (edit(["cases", 0, "overrides"], []),
                       r"cases\[0\].overrides: expected an object, got an array"),
    "override-wrong-type": (edit(["cases", 0, "overrides"], {"gamma": "abc"}),
                            r"cases\[0\].overrides: gamma: expected a real number"),
    "expected-arrays-string": (edit(["cases", 0, "expected_arrays"], "rewards"),
                               r"cases\[0\].expected_arrays: expected an array, got a string"),
    "expected-array-name": (edit(["cases", 0, "expected_arrays", 0], 1),
                            r"cases\[0\].expected_arrays\[0\]: expected a string"),
    "expected-scalar-text": (edit(["cases", 1, "expected_scalars", "policy_loss"], "big"),
                             r"cases\[1\].expected_scalars\['policy_loss'\]: expected a number"),
    "expected-scalars-missing": (edit(["cases", 0, "expected_scalars"], DELETE),
                                 r"cases\[0\].expected_scalars: missing"),
    "rejected-number": (edit(["cases", 0, "rejected"], 1),
                        r"cases\[0\].rejected: expected a string, got a number"),
    "input-names-dict": (edit(["input_names"], {}), "input_names: expected an array"),
    "input-names-short": (lambda m: {**m, "input_names": m["input_names"][:-1]},
                          "input_names: missing mask"),
    "preset-string": (edit(["preset"], "seed"), "preset: expected an object, got a string"),
    "preset-unknown": (edit(["preset", "name"], "nope"), "preset.name: unknown preset 'nope'"),
    "format-version": (edit(["format_version"], "1"), "format version '1'"),
}


def write_manifest(directory: Path, kind: str) -> str:
    path = directory / "manifest.json"
    new, message = MANIFEST_DAMAGE[kind]
    path.write_text(json.dumps(new(json.loads(path.read_text()))))
    return message


# name -> the manifest's new bytes from its old ones
MANIFEST_BYTES = {
    "empty": lambda b: b"", "truncated": lambda b: b[:len(b) // 2],
    "not-utf8": lambda b: b"\xff" + b, "random-bytes": lambda b: np.random.default_rng(2).bytes(99),
}


@pytest.mark.parametrize("kind", list(MANIFEST_DAMAGE))
def test_manifest_of_the_wrong_structure(golden_dir, kind):
    message = write_manifest(golden_dir, kind)
    before = snapshot(golden_dir)
    with pytest.raises(BadFileError, match=rf"^{esc(golden_dir / 'manifest.json')}: {message}"):
        golden.verify(golden_dir)
    assert snapshot(golden_dir) == before


@pytest.mark.parametrize("kind", list(MANIFEST_BYTES))
def test_manifest_that_is_not_json(golden_dir, kind):
    path = golden_dir / "manifest.json"
    path.write_bytes(MANIFEST_BYTES[kind](path.read_bytes()))
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: not (valid JSON|UTF-8 text)"):
        golden.load(golden_dir)


def cmd_verify(capsys, directory) -> tuple[int, str]:
    code = oracle_cli.main(["verify", str(directory)])
    return code, capsys.readouterr().err


def test_oracle_verify_cli_on_bad_manifests_exits_2_with_one_line(golden_dir, capsys):
    path = golden_dir / "manifest.json"
    good = path.read_bytes()
    for kind in MANIFEST_DAMAGE:
        write_manifest(golden_dir, kind)
        before = snapshot(golden_dir)
        code, err = cmd_verify(capsys, golden_dir)
        assert code == 2, (kind, err)
        one_error_line(err, path)
        assert snapshot(golden_dir) == before, kind
        path.write_bytes(good)
    for kind, new in MANIFEST_BYTES.items():
        path.write_bytes(new(good))
        code, err = cmd_verify(capsys, golden_dir)
        assert code == 2, (kind, err)
        one_error_line(err, path)
        path.write_bytes(good)
    assert cmd_verify(capsys, golden_dir) == (0, "")


def case_file(directory: Path) -> Path:
    return directory / "cases" / "random-0.npz"


def resave(path: Path, **changes) -> None:
    arrays = load_npz(path)
    for key, value in changes.items():
        key = key.replace("__", "/")
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    savez_reproducible(path, arrays)


# name -> (how the case file is damaged, what the message says after "<path>: ")
CASE_DAMAGE = {
    **{kind: (lambda p, k=kind: p.write_bytes(damaged(p.read_bytes())[k]), "")
       for kind in damaged(b"x" * 100)},
    "missing-input": (lambda p: resave(p, mask=None), "no entry 'mask'"),
    "missing-expected": (lambda p: resave(p, expected__advantages=None),
                         "no entry 'expected/advantages'"),
    "input-int": (lambda p: resave(p, logp=np.zeros((4, 6), dtype=np.int64)),
                  "entry 'logp' has dtype int64, expected float"),
    "input-shape": (lambda p: resave(p, values=np.zeros(3)),
                    r"entry 'values' has shape \(3,\), expected \(\d+, \d+\)"),
    "scores-shape": (lambda p: resave(p, scores=np.zeros((1, 1))),
                     r"entry 'scores' has shape \(1, 1\), expected \(\d+,\)"),
    "expected-string": (lambda p: resave(p, expected__rewards=np.array("x")),
                        "entry 'expected/rewards' has dtype <U1, expected float"),
}


@pytest.mark.parametrize("kind", list(CASE_DAMAGE))
def test_bad_case_file(golden_dir, kind, capsys):
    damage, message = CASE_DAMAGE[kind]
    path = case_file(golden_dir)
    damage(path)
    before = snapshot(golden_dir)
    with pytest.raises(BadFileError, match=rf"^{esc(path)}: {message}"):
        golden.verify(golden_dir)
    code, err = cmd_verify(capsys, golden_dir)
    assert code == 2
    one_error_line(err, path)
    assert snapshot(golden_dir) == before


def test_missing_case_file(golden_dir, capsys):
    path = case_file(golden_dir)
    path.unlink()
    code, err = cmd_verify(capsys, golden_dir)
    assert code == 2
    one_error_line(err, path)


def test_python_m_ppo_numpy_oracle_verify_on_a_json_array(golden_dir):
    path = golden_dir / "manifest.json"
    path.write_text("[1, 2, 3]\n")
    before = snapshot(golden_dir)
    proc = subprocess.run([sys.executable, "-m", "ppo_numpy", "oracle", "verify",
                           str(golden_dir)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    one_error_line(proc.stderr, path)
    assert "expected a JSON object at the top level, got an array" in proc.stderr
    assert snapshot(golden_dir) == before
