"""GRPO and RLOO advantages for groups laid out as a reshape: the fast form.

The reference, :mod:`ppo_numpy.family.advantages`, finds the groups of any prompt ids
(``np.unique``) and sums each group's scores row by row (``np.add.at``). Trainers lay their
groups out regularly: TRL's GRPO (and this package's training loop) repeats each prompt in G
consecutive rows, ids ``np.arange(B) // n`` ("blocks"); TRL's legacy RLOO stacks n copies of
the prompt batch, ids ``np.arange(B) % G`` ("strided"). For these, a group is a column of a
(n, G) reshape of the scores, and every group sum is one reduction along an axis.

:func:`grpo_advantages` and :func:`rloo_advantages` here take the reference's arguments and
give its results bit for bit: on a regular layout of float scores they run the reference's
operations in the same order, column by column (NumPy adds an outer axis row by row, as
``np.add.at`` adds a group's rows); on any other ids, or exact Fractions, they call the
reference. ``tests/test_group_layouts.py`` checks both layouts against the reference, bit
for bit, at every size, scale, ddof and dtype. Chosen explicitly by their callers: the
training loop (its groups are blocks by construction) and the benchmarks.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .._checks import check_choice
from ..family.advantages import (
    SINGLETONS,
    _check_scores,
    check_group_ids,
    check_grpo_arguments,
    group_index,
    grpo_centred,
    grpo_scaled,
    rloo_kernel,
)

__all__ = ["Layout", "grpo_advantages", "regular_layout", "rloo_advantages"]


class Layout(NamedTuple):
    """A regular layout of G >= 1 groups of n >= 2 rows whose ids are the group indices
    0..G-1: ``kind`` "blocks" (``np.arange(B) // n``) or "strided" (``np.arange(B) % G``),
    ``ids`` the ids themselves (the index of each row's group)."""

    ids: np.ndarray
    n: int
    kind: str


def regular_layout(g) -> Layout | None:
    """The :class:`Layout` of checked integer ids ``g`` (B,) when they are
    ``np.arange(B) // n`` or ``np.arange(B) % G`` with n = B / G >= 2; else None."""
    B = g.shape[0]
    if B < 2:
        return None
    G = int(g[-1]) + 1  # both layouts end with the last group, G - 1
    if G < 1 or B % G or B == G:
        return None
    n = B // G
    first, second = g[:2].tolist()
    kind = "blocks" if first == second else "strided"
    if g.dtype == np.int64 and g.flags.c_contiguous:
        # why: the ids' bytes against those of the layout (cached): one comparison of memory,
        # a fraction of the element-wise one below on a (B,) array
        same = g.tobytes() == _layout_bytes(B, G, kind)
    else:
        # (n, G) views whose column k must hold group k only
        by_group = g.reshape(G, n).T if kind == "blocks" else g.reshape(n, G)
        same = not np.count_nonzero(by_group != np.arange(G))
    return Layout(g, n, kind) if same else None


@functools.lru_cache(maxsize=64)
def _layout_bytes(B, G, kind):
    """The bytes of the int64 ids ``np.arange(B) // (B // G)`` ("blocks") or
    ``np.arange(B) % G`` ("strided")."""
    rows = np.arange(B, dtype=np.int64)
    return (rows // (B // G) if kind == "blocks" else rows % G).tobytes()


def grpo_advantages(scores, groups, *, scale="group", std_eps=1e-6, ddof=1, singleton="error",
                    dtype=np.float64):
    """:func:`ppo_numpy.grpo_advantages` (the same arguments and results, bit for bit), by
    the column reductions of a regular layout when ``groups`` has one."""
    s, std_eps = check_grpo_arguments(scores, scale, std_eps, ddof, singleton, dtype)
    g = check_group_ids(groups, s.shape[0])
    layout = regular_layout(g) if s.dtype != object else None
    if layout is None:
        centred, std = grpo_centred(s, group_index(g), scale == "group", ddof, singleton)
    else:
        centred, std = _grpo_regular(s, layout, scale == "group", ddof)
    return grpo_scaled(s, centred, std, scale, std_eps, ddof, groups)


def rloo_advantages(scores, groups, *, singleton="error"):
    """:func:`ppo_numpy.rloo_advantages` (the same arguments and results, bit for bit), by the
    column reductions of a regular layout when ``groups`` has one."""
    check_choice(singleton, "singleton", SINGLETONS)
    s = _check_scores(scores, "scores")
    g = check_group_ids(groups, s.shape[0])
    layout = regular_layout(g) if s.dtype != object else None
    if layout is None:
        return rloo_kernel(s, group_index(g), singleton)
    return _rloo_regular(s, layout)


def _by_group(x, layout):
    """``x`` (B,) of a regular layout as (n, G): column k the rows of group k, in row order
    (a view for strided groups, a copy for blocks)."""
    if layout.kind == "blocks":
        return np.ascontiguousarray(x.reshape(-1, layout.n).T)
    return x.reshape(layout.n, -1)


def _column_sums(by_group):
    """Sums of the columns of a (n, G) array, adding each column's entries in order, as
    ``np.add.at`` adds a group's rows (so the same bits). Why: NumPy reduces an outer axis row
    by row but a contiguous one pairwise, and a single column is contiguous: its running sum's
    last entry is the sum in order."""
    if by_group.shape[1] == 1:
        return np.add.accumulate(by_group, axis=0)[-1]
    return np.add.reduce(by_group, axis=0)


def _flat_columns(by_group):
    """The columns (groups) of a (n, G) array whose entries are all equal (bool (G,)), None
    when there is none.

    Why the first test: a group of equal scores has its first two equal, and with float
    scores ties are rare, so one comparison usually settles it (else: min == max).
    """
    if not np.count_nonzero(by_group[0] == by_group[1]):
        return None
    flat = np.minimum.reduce(by_group, axis=0) == np.maximum.reduce(by_group, axis=0)
    return flat if np.count_nonzero(flat) else None


def _grpo_regular(s, layout, group_std, ddof):
    """``(centred, std_g or None)`` of :func:`ppo_numpy.family.advantages.grpo_centred` for a
    regular layout (float scores, no group of one): each group a column of :func:`_by_group`,
    the reference's operations in the same order (the same bits)."""
    by_group = _by_group(s, layout)
    n = s.dtype.type(layout.n)
    # mean_g = (sum_{j in g} s_j) / n_g
    mean = (_column_sums(by_group) / n)[layout.ids]
    centred = s - mean
    # exactly 0 in a group of equal scores
    flat = _flat_columns(by_group)
    if flat is not None:
        centred = np.where(flat[layout.ids], s.dtype.type(0), centred)
    if not group_std:
        return centred, None
    # std_g = sqrt(sum_{j in g} (s_j - mean_g)^2 / (n_g - ddof))
    sq = _column_sums(_by_group(centred * centred, layout))
    return centred, np.sqrt(sq / (n - ddof))[layout.ids]


def _rloo_regular(s, layout):
    """:func:`ppo_numpy.family.advantages.rloo_kernel` for a regular layout (float scores, no
    group of one): each group a column of :func:`_by_group`, the same operations in the same
    order (the same bits)."""
    by_group = _by_group(s, layout)
    sums = _column_sums(by_group)[layout.ids]
    # A_i = s_i - (sum_g - s_i) / (n - 1)
    A = s - (sums - s) / (layout.n - 1)
    # exactly 0 in a group of equal scores
    flat = _flat_columns(by_group)
    if flat is not None:
        A = np.where(flat[layout.ids], s * 0, A)
    return A
