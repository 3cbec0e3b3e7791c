"""Rounding logits to a lower precision: the inference engine of a mismatched rollout.

An inference engine (vLLM, SGLang) computes the logits in bfloat16 or float16; the trainer
in float32 or here float64. :func:`round_to_precision` models the engine's logits: the
float64 logits rounded to the engine's format, then read back as float64 (the engine's
softmax and log-probabilities are computed in float32 or wider, as vLLM's sampler does, so
the rounding of the logits is the mismatch modelled).

NumPy has float16 and float32; bfloat16 (1 sign, 8 exponent, 7 stored mantissa bits: the
top 16 bits of a float32) is made by :func:`round_to_bfloat16`: the float32 bit pattern
rounded to its top 16 bits, to nearest, ties to even.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_choice

__all__ = ["PRECISIONS", "round_to_bfloat16", "round_to_precision"]

#: the formats :func:`round_to_precision` rounds to (float64: no rounding)
PRECISIONS = ("float64", "float32", "float16", "bfloat16")


def round_to_bfloat16(x) -> np.ndarray:
    """``x`` rounded to bfloat16 (round to nearest, ties to even), as float64.

    ``x`` is first rounded to float32; its 32-bit pattern b is then rounded to its top 16
    bits: b + 0x7FFF + (bit 16 of b), the low 16 bits cleared. A half-way pattern (low bits
    exactly 0x8000) goes to the even top half. NaN stays NaN; values beyond the largest
    bfloat16 (about 3.39e38) become inf.

    bfloat16 keeps 8 significant bits: between 1 and 2 its spacing is 2^-7 = 0.0078125, so
    1 + 2^-8 is a tie (to 1, whose last bit is even) and 1 + 3 * 2^-8 a tie to 1 + 2^-6:

    >>> round_to_bfloat16([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.14159]).tolist()
    [1.0, 1.0, 1.015625, 1.0078125, 3.140625]
    >>> round_to_bfloat16([-2.5, 0.0, np.inf, 3.4e38]).tolist()   # 3.4e38: above the largest
    [-2.5, 0.0, inf, inf]
    """
    with np.errstate(over="ignore"):
        f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    # round to nearest even at bit 16: add 0x7FFF and the lowest kept bit, then truncate
    lsb = (bits >> np.uint64(16)) & np.uint64(1)
    top = ((bits + np.uint64(0x7FFF) + lsb) & np.uint64(0xFFFF0000)).astype(np.uint32)
    rounded = top.view(np.float32).astype(np.float64)
    return np.where(np.isnan(f), np.nan, rounded)


def round_to_precision(x, precision: str) -> np.ndarray:
    """``x`` rounded to ``precision`` (one of :data:`PRECISIONS`), as a float64 array.

    ``"float64"`` returns ``x`` as float64, unchanged; ``"float32"`` and ``"float16"`` are
    NumPy's round to nearest even; ``"bfloat16"`` is :func:`round_to_bfloat16`.

    >>> round_to_precision([0.1, 2049.0], "float16").tolist()   # 11 significant bits
    [0.0999755859375, 2048.0]
    >>> round_to_precision([0.1], "float64").tolist()
    [0.1]
    """
    check_choice(precision, "precision", PRECISIONS, "precision")
    if precision == "float64":
        return np.asarray(x, dtype=np.float64)
    if precision == "bfloat16":
        return round_to_bfloat16(x)
    # a value beyond the format's largest becomes inf, as in the format itself (a masked
    # logit of -1e9 is -inf in float16): no overflow warning
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float64).astype(precision).astype(np.float64)
