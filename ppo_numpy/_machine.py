"""What decides the last bits of this machine's arithmetic (for files of results that say
where they were computed, and for the notebook runner's comparison of stored outputs)."""

from __future__ import annotations


def cpu_kind() -> dict:
    """NumPy's version, the CPU features its SIMD loops dispatch on, and the OpenBLAS kernel
    (``None`` if unknown). Two machines of one kind give the same numbers bit for bit; on
    another kind the last bits of exp, log, tanh and of BLAS products may differ."""
    import ctypes
    import glob
    from pathlib import Path

    import numpy as np
    from numpy._core._multiarray_umath import __cpu_features__

    core = None
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for lib in sorted(glob.glob(str(libs / "libscipy_openblas*.so*"))):
        try:
            name = ctypes.CDLL(lib).scipy_openblas_get_corename64_
        except (OSError, AttributeError):
            continue
        name.restype = ctypes.c_char_p
        core = name().decode()
    return {"numpy": np.__version__, "openblas_core": core,
            "cpu_features": sorted(k for k, on in __cpu_features__.items() if on)}
