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


#: NumPy's dispatch level -> the CPU kind's name (README.md's table of the demo's results)
SIMD_KINDS = (("X86_V4", "AVX-512"), ("X86_V3", "AVX2"), ("X86_V2", "SSE4.2"))


def simd_kind(features=None) -> str:
    """The CPU kind by the SIMD loops NumPy runs: ``"AVX-512"`` (its ``X86_V4`` targets),
    ``"AVX2"`` (``X86_V3``, e.g. an AVX-512 machine with ``NPY_DISABLE_CPU_FEATURES="X86_V4
    AVX512_ICL AVX512_SPR"``), ``"SSE4.2"`` (``X86_V2``, NumPy's x86-64 baseline), else
    ``"other"`` (not x86-64). ``features``: the enabled features (default: this process's,
    as :func:`cpu_kind` lists them).

    >>> simd_kind(["X86_V2", "X86_V3", "X86_V4"]), simd_kind(["X86_V2", "X86_V3"])
    ('AVX-512', 'AVX2')
    >>> simd_kind(["X86_V2"]), simd_kind([])
    ('SSE4.2', 'other')
    """
    have = set(cpu_kind()["cpu_features"] if features is None else features)
    return next((name for level, name in SIMD_KINDS if level in have), "other")
