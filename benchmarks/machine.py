"""A short description of the machine and libraries a benchmark ran on."""

from __future__ import annotations

import ctypes
import glob
import os
import platform

import numpy as np


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        return f"{kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        return "unknown memory"


def _openblas() -> str:
    """Name, version and the kernel OpenBLAS picked at run time (the wheel's bundled copy)."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        name = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # show_config's layout is not a stable API
        return "unknown BLAS"
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*.so*"))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            for symbol in ("scipy_openblas_get_corename64_", "openblas_get_corename"):
                fn = getattr(lib, symbol, None)
                if fn is not None:
                    fn.restype = ctypes.c_char_p
                    name = f"{name}, kernel {fn().decode()}"
                    threads = getattr(lib, "scipy_openblas_get_num_threads64_", None)
                    if threads is not None:
                        threads.restype = ctypes.c_int
                        name += f", {threads()} threads"
                    return name
        except OSError:
            continue
    return name


def describe() -> list[str]:
    """Lines of 'what: value' for the report."""
    lines = [
        f"CPU: {_cpu_model()}, {os.cpu_count()} logical cores, {_memory_gib()}",
        f"OS: {platform.system()} {platform.release()} ({platform.machine()})",
        f"Python {platform.python_version()}, NumPy {np.__version__} ({_openblas()})",
    ]
    try:
        import torch

        n = torch.get_num_threads()
        lines.append(f"PyTorch {torch.__version__}, {n} intra-op thread{'s' if n > 1 else ''}")
    except ImportError:
        lines.append("PyTorch: not installed (torch columns skipped)")
    knobs = [f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                              "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
             if k in os.environ]
    lines.append("Environment: " + (", ".join(knobs) if knobs else
                                    "no OPENBLAS_* / OMP_* variables set"))
    return lines
