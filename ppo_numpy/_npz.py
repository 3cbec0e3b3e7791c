"""Writing ``.npz`` files byte for byte reproducibly.

``np.savez`` stamps every member with the current time, so two runs with the
same seed would write different bytes. :func:`savez_reproducible` writes the
same format (a zip of ``.npy`` members, readable by ``np.load`` with
``allow_pickle=False``) with a fixed timestamp and in the order given.
:func:`load_npz` reads one back, and turns every way the file can be bad
(missing, truncated, empty, a flipped bit, not a zip, pickled objects) into
one :class:`BadFileError` naming the file and what is wrong; :func:`entry`
checks one of its arrays (present, dtype, shape) with the same kind of message.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

# the earliest date a zip file can hold
_EPOCH = (1980, 1, 1, 0, 0, 0)


def savez_reproducible(file, arrays: dict) -> None:
    """Write ``arrays`` (name -> array) to ``file`` (a path or a binary file object).

    >>> import io
    >>> a, b = io.BytesIO(), io.BytesIO()
    >>> savez_reproducible(a, {"x": np.arange(3)}); savez_reproducible(b, {"x": np.arange(3)})
    >>> a.getvalue() == b.getvalue(), np.load(io.BytesIO(a.getvalue()))["x"].tolist()
    (True, [0, 1, 2])
    """
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, value in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


class BadFileError(ValueError):
    """A file that cannot be read as what it should be. The message is ``"<file>: <what>"``.

    ``path`` and ``what`` are kept as attributes, so a caller can add context
    without repeating the file name.
    """

    def __init__(self, path, what: str):
        self.path, self.what = str(path), what
        super().__init__(f"{self.path}: {what}")


# what zipfile (a damaged archive, a flipped flag or compression method), zlib and the
# .npy header parser raise on a bad file; none of BadZipFile, EOFError, zlib.error is an
# OSError or a ValueError
_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, TypeError,
            KeyError, NotImplementedError, RuntimeError, struct.error, OverflowError)


def load_npz(path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path`` (name -> array), read whole, without pickle.

    Each member is read to its end, so ``zipfile`` checks its CRC-32: a flipped
    bit in an array or in a ``.npy`` header is an error, never a silent wrong
    value. (``np.load`` reads a member only as far as its header says, so a
    flip that shrinks a shape would go unchecked.) The header must account
    for every byte of the member, and an object array (pickled data) is
    refused. A missing file is a FileNotFoundError; anything else wrong, a
    :class:`BadFileError` naming the file and, when it is one member, the member.

    >>> import io, tempfile, pathlib
    >>> tmp = tempfile.TemporaryDirectory()
    >>> f = pathlib.Path(tmp.name) / "a.npz"
    >>> savez_reproducible(f, {"x": np.arange(3)})
    >>> load_npz(f)["x"].tolist()
    [0, 1, 2]
    >>> _ = f.write_bytes(f.read_bytes()[:-30])
    >>> try:
    ...     load_npz(f)
    ... except BadFileError as err:
    ...     print(err.what)
    not a readable .npz archive (BadZipFile: File is not a zip file)
    >>> tmp.cleanup()
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file")
    if not p.is_file():
        raise BadFileError(p, "not a regular file")
    member = None
    try:
        with open(p, "rb") as fh, zipfile.ZipFile(fh) as zf:
            # zipfile reads the central directory as far as its length fields say, without
            # comparing the count in the end record: a flipped comment length hides members
            listed, total = len(zf.infolist()), zipfile._EndRecData(fh)[zipfile._ECD_ENTRIES_TOTAL]
            if listed != total:
                raise BadFileError(p, f"damaged archive: its directory lists {listed} "
                                      f"members, its end record {total}")
            out = {}
            for info in zf.infolist():
                member = info.filename
                if not member.endswith(".npy"):
                    raise BadFileError(p, f"member {member!r} is not a .npy array")
                key = member[:-len(".npy")]
                if key in out:
                    raise BadFileError(p, f"two members are named {member!r}")
                # zf.read checks the CRC-32 (BadZipFile "Bad CRC-32 ...")
                out[key] = _read_npy(zf.read(info), p, member)
            return out
    except BadFileError:
        raise
    except _DAMAGED as err:
        where = "not a readable .npz archive" if member is None else f"member {member!r}"
        raise BadFileError(p, f"{where} ({type(err).__name__}: {_short(err)})") from None


def _short(err: Exception, limit: int = 120) -> str:
    """``str(err)`` on one line and at most ``limit`` characters (zipfile quotes whole names)."""
    text = str(err).replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_npy(raw: bytes, path, member: str) -> np.ndarray:
    """The array held by the bytes ``raw`` of one ``.npy`` member (a copy)."""
    buf = io.BytesIO(raw)
    version = np.lib.format.read_magic(buf)
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise BadFileError(path, f"member {member!r}: unknown .npy version {version}")
    # version 3.0 is 2.0's layout with a UTF-8 header
    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                   else np.lib.format.read_array_header_2_0)
    shape, fortran_order, dtype = read_header(buf)
    if dtype.hasobject:
        raise BadFileError(path, f"member {member!r}: holds Python objects (pickled data), "
                                 "which are never loaded")
    count = math.prod(shape)
    start = buf.tell()
    if len(raw) - start != count * dtype.itemsize:
        raise BadFileError(path, f"member {member!r}: its header says {dtype} of shape "
                                 f"{shape} ({count * dtype.itemsize} bytes), it holds "
                                 f"{len(raw) - start} bytes")
    if count == 0 or dtype.itemsize == 0:
        return np.zeros(shape, dtype=dtype)
    flat = np.frombuffer(raw, dtype=dtype, count=count, offset=start)
    arr = flat.reshape(shape[::-1]).T if fortran_order else flat.reshape(shape)
    return arr.copy()


#: what each dtype kind letter accepted by :func:`entry` is called in a message
_KINDS = {"b": "bool", "i": "integer", "u": "integer", "f": "float", "U": "string"}


def entry(path, arrays: dict, key: str, kinds: str, shape=None, label=None) -> np.ndarray:
    """``arrays[key]``, checked: present, a dtype of one of ``kinds``, of ``shape`` if given.

    Otherwise a :class:`BadFileError` naming ``path`` and the entry (as
    ``label``, default ``key``) and saying what is wrong.

    >>> entry("run/ckpt.npz", {"beta": np.array([0.1])}, "beta", "f", shape=())
    Traceback (most recent call last):
    ...
    ppo_numpy._npz.BadFileError: run/ckpt.npz: entry 'beta' has shape (1,), expected ()
    """
    label = key if label is None else label
    if key not in arrays:
        raise BadFileError(path, f"no entry {label!r}")
    arr = arrays[key]
    if arr.dtype.kind not in kinds:
        wanted = " or ".join(dict.fromkeys(_KINDS[k] for k in kinds))
        raise BadFileError(path, f"entry {label!r} has dtype {arr.dtype}, expected {wanted}")
    if shape is not None and arr.shape != tuple(shape):
        raise BadFileError(path, f"entry {label!r} has shape {arr.shape}, expected "
                                 f"{tuple(shape)}")
    return arr
