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
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy._npz import BadFileError, entry, load_npz, savez_reproducible
from ppo_numpy.policy.checkpoint import load_checkpoint, save_checkpoint
from ppo_numpy.training.config import PPOConfig

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
