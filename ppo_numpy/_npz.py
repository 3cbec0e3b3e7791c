"""Writing ``.npz`` files byte for byte reproducibly.

``np.savez`` stamps every member with the current time, so two runs with the
same seed would write different bytes. :func:`savez_reproducible` writes the
same format (a zip of ``.npy`` members, readable by ``np.load`` with
``allow_pickle=False``) with a fixed timestamp and in the order given.
"""

from __future__ import annotations

import zipfile

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
