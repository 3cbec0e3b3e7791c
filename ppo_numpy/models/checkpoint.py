"""Saving and loading parameters (and optimiser state) as ``.npz``, without pickle.

One ``.npz`` archive holds ``params/<name>``, ``optim/<key>`` and ``extra/<key>``
arrays plus ``format/version``. Loading uses ``np.load(allow_pickle=False)``,
so only numeric, bool and string arrays can be stored (never Python objects),
and the round trip is bit-exact: the archive holds the raw array bytes.
A file whose names or shapes differ from what the caller expects is an error
that lists every difference, never a silent partial load. A damaged file
(truncated, empty, a flipped bit, not a zip at all) is a
:class:`~ppo_numpy._npz.BadFileError` (a ValueError) naming the file and
what is wrong: every member is read whole, so its CRC-32 is checked.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._npz import BadFileError, entry, load_npz, savez_reproducible

FORMAT_VERSION = 1
SECTIONS = ("params", "optim", "extra")


def _check_path(path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or path, got {type(path).__name__}")
    p = Path(path)
    if p.suffix != ".npz":
        raise ValueError(f"path: must end in .npz (np.savez would append it), got {str(p)!r}")
    return p


def _arrays(section, mapping):
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise TypeError(f"{section}: expected a dict of arrays, got {type(mapping).__name__}")
    out = {}
    for key, value in mapping.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{section}: keys must be non-empty strings, got {key!r}")
        arr = np.asarray(value)
        if arr.dtype.kind not in "biufU":
            raise TypeError(f"{section}[{key!r}]: dtype {arr.dtype} cannot be stored without "
                            "pickle (numbers, bools and strings only)")
        out[f"{section}/{key}"] = arr
    return out


def save_checkpoint(path, params, optimizer_state=None, extra=None) -> None:
    """Write ``params`` (and an optimiser's ``state_dict()``, and ``extra``) to ``path``.

    Parameters
    ----------
    path : str or Path ending in ``.npz``
        Written atomically (to a temporary file, then renamed).
    params : dict[str, np.ndarray]
    optimizer_state : dict[str, np.ndarray], optional
        E.g. ``Adam.state_dict()``.
    extra : dict, optional
        Other arrays or scalars (numbers, bools, strings): an iteration
        counter, a KL coefficient, a generator state as integers.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = tempfile.TemporaryDirectory()
    >>> f = pathlib.Path(tmp.name) / "ckpt.npz"
    >>> save_checkpoint(f, {"W": np.array([[0.1, -0.2]])}, extra={"iteration": 3})
    >>> ck = load_checkpoint(f, expected_params={"W": np.zeros((1, 2))})
    >>> ck["params"]["W"].tolist(), int(ck["extra"]["iteration"]), ck["optimizer_state"]
    ([[0.1, -0.2]], 3, None)
    >>> tmp.cleanup()
    """
    p = _check_path(path)
    if not isinstance(params, dict) or not params:
        raise TypeError("params: expected a non-empty dict of arrays")
    arrays = {"format/version": np.array(FORMAT_VERSION)}
    for section, mapping in zip(SECTIONS, (params, optimizer_state, extra)):
        arrays.update(_arrays(section, mapping))
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "wb") as fh:
        savez_reproducible(fh, arrays)
    os.replace(tmp, p)


def load_checkpoint(path, expected_params=None) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Parameters
    ----------
    path : str or Path ending in ``.npz``
    expected_params : dict[str, array], optional
        E.g. ``model.params``. When given, the stored parameters must have
        exactly these names, shapes and dtypes; otherwise a ValueError
        (:class:`~ppo_numpy._npz.BadFileError`) lists the missing, unexpected
        and mismatched entries.

    Returns
    -------
    dict with ``"params"`` (dict of arrays), ``"optimizer_state"`` (dict, or
    ``None`` if none was saved) and ``"extra"`` (dict, possibly empty).

    Examples
    --------
    A file whose parameters have other shapes than the model's is refused whole:

    >>> import tempfile, pathlib
    >>> tmp = tempfile.TemporaryDirectory()
    >>> f = pathlib.Path(tmp.name) / "ckpt.npz"
    >>> save_checkpoint(f, {"W": np.array([[0.1, -0.2]])})
    >>> load_checkpoint(f)["params"]["W"].tolist()
    [[0.1, -0.2]]
    >>> try:
    ...     load_checkpoint(f, expected_params={"W": np.zeros((2, 2))})
    ... except ValueError as err:
    ...     print("ValueError")
    ValueError
    >>> tmp.cleanup()
    """
    p = _check_path(path)
    if not p.exists():
        raise FileNotFoundError(f"path: no checkpoint at {str(p)!r}")
    data = load_npz(p)
    if "format/version" not in data:
        raise BadFileError(p, "not a ppo_numpy checkpoint (no format/version entry)")
    version = int(entry(p, data, "format/version", "iu", shape=()))
    if version != FORMAT_VERSION:
        raise BadFileError(p, f"checkpoint format {version}, this code reads {FORMAT_VERSION}")
    del data["format/version"]
    out = {s: {} for s in SECTIONS}
    for key in data:
        section, _, name = key.partition("/")
        if section not in out or not name:
            raise BadFileError(p, f"unexpected entry {key!r}")
        out[section][name] = entry(p, data, key, "biufU")
    if not out["params"]:
        raise BadFileError(p, "holds no parameters")
    if expected_params is not None:
        problems = _check_expected(out["params"], expected_params)
        if problems:
            raise BadFileError(p, f"parameters do not match expected_params: {problems}")
    return {"params": out["params"], "optimizer_state": out["optim"] or None,
            "extra": out["extra"]}


def _check_expected(loaded, expected) -> str:
    """The names, shapes and dtypes that differ between ``loaded`` and ``expected`` ("": none)."""
    missing = sorted(set(expected) - set(loaded))
    unexpected = sorted(set(loaded) - set(expected))
    mismatched = [f"{n}: stored {loaded[n].shape} {loaded[n].dtype}, expected "
                  f"{np.shape(expected[n])} {np.asarray(expected[n]).dtype}"
                  for n in sorted(set(loaded) & set(expected))
                  if loaded[n].shape != np.shape(expected[n])
                  or loaded[n].dtype != np.asarray(expected[n]).dtype]
    if missing or unexpected or mismatched:
        return f"missing {missing}, unexpected {unexpected}, mismatched {mismatched}"
    return ""
