"""The layout of one optimizer step: which rows each rank's micro-batches hold (notebook 16).

A trainer splits the batch of one optimizer step twice: over P data-parallel ranks, and each
rank's share over micro-batches (gradient accumulation). Each micro-batch's backward adds into
its rank's gradient; the ranks' gradients are then averaged (DDP, FSDP) and the optimizer
steps once. A layout writes the split down as nested lists of row indices of the batch:

    layout[r][k] = the rows of micro-batch k of rank r

Every row of the batch is in exactly one micro-batch; micro-batches may hold different
numbers of rows (none is empty); ranks may hold different numbers of micro-batches (the
frameworks' conventions that need the same number say so). ``None`` is one rank with one
micro-batch of every row: the one-batch call.
"""

from __future__ import annotations

import numbers

import numpy as np

from .._checks import check_choice, check_int

__all__ = ["DEALS", "check_layout", "step_layout"]

#: how :func:`step_layout` deals the rows to ranks
DEALS = ("contiguous", "round-robin")


def step_layout(n_rows, ranks=1, micro_batches=1, deal="contiguous") -> list:
    """A layout of ``n_rows`` rows over ``ranks`` ranks of ``micro_batches`` micro-batches each.

    Parameters
    ----------
    n_rows : int >= ranks * micro_batches
        B, the rows of the step's batch.
    ranks : int >= 1
        P, the data-parallel ranks.
    micro_batches : int >= 1
        The micro-batches of each rank (gradient-accumulation steps).
    deal : {"contiguous", "round-robin"}
        How rows go to ranks. ``"contiguous"``: rank r takes the r-th of P consecutive blocks
        (each process takes its own slice of the batch). ``"round-robin"``: row i goes to
        rank i mod P. Either way a rank's rows, in order, are cut into consecutive
        micro-batches. Blocks are as equal as they can be, the first ones one row larger
        when they cannot be equal (``np.array_split``).

    Returns
    -------
    list over ranks of lists of micro-batches of row indices (plain ints).

    Examples
    --------
    Five rows over two ranks of two micro-batches (uneven: 3 rows and 2):

    >>> step_layout(5, ranks=2, micro_batches=2)
    [[[0, 1], [2]], [[3], [4]]]
    >>> step_layout(5, ranks=2, micro_batches=2, deal="round-robin")
    [[[0, 2], [4]], [[1], [3]]]
    """
    n_rows = check_int(n_rows, "n_rows")
    ranks = check_int(ranks, "ranks")
    micro_batches = check_int(micro_batches, "micro_batches")
    check_choice(deal, "deal", DEALS, "deal")
    if n_rows < ranks * micro_batches:
        raise ValueError(f"n_rows: {ranks} ranks x {micro_batches} micro-batches need at least "
                         f"{ranks * micro_batches} rows (no micro-batch may be empty), got "
                         f"{n_rows}")
    rows = np.arange(n_rows)
    if deal == "contiguous":
        shares = np.array_split(rows, ranks)
    else:
        shares = [rows[r::ranks] for r in range(ranks)]
    return [[mb.tolist() for mb in np.array_split(share, micro_batches)] for share in shares]


def check_layout(layout, n_rows: int) -> list:
    """``layout`` checked against a batch of ``n_rows`` rows, as new arrays.

    Returns a list over ranks of lists of (n,) integer arrays (``None``: one rank, one
    micro-batch of every row). A TypeError or ValueError names the entry that is wrong:
    a row missing or repeated, an index out of range or not an integer, an empty
    micro-batch, a rank without micro-batches.

    >>> check_layout([[[1], [0]]], 2)
    [[array([1]), array([0])]]
    >>> check_layout([[[0], []]], 1)
    Traceback (most recent call last):
    ...
    ValueError: layout[0][1]: an empty micro-batch (each holds at least one row)
    >>> check_layout([[[0, 1]], [[1]]], 3)
    Traceback (most recent call last):
    ...
    ValueError: layout[1][0][0]: row 1 is repeated (also at layout[0][0][1])
    """
    if layout is None:
        return [[np.arange(n_rows)]]
    what = "a list over ranks of lists of micro-batches of row indices"
    ranks = _entries(layout, "layout", what)
    if not ranks:
        raise ValueError("layout: no rank (expected at least one rank with one micro-batch)")
    seen: dict = {}
    checked = []
    for r, rank in enumerate(ranks):
        micro_batches = _entries(rank, f"layout[{r}]", "a list of micro-batches")
        if not micro_batches:
            raise ValueError(f"layout[{r}]: rank {r} has no micro-batch")
        rows_of_rank = []
        for k, mb in enumerate(micro_batches):
            where = f"layout[{r}][{k}]"
            rows = _rows(mb, where, n_rows)
            if rows.size == 0:
                raise ValueError(f"{where}: an empty micro-batch (each holds at least one row)")
            for j, row in enumerate(rows.tolist()):
                if row in seen:
                    raise ValueError(f"{where}[{j}]: row {row} is repeated (also at "
                                     f"{seen[row]})")
                seen[row] = f"{where}[{j}]"
            rows_of_rank.append(rows)
        checked.append(rows_of_rank)
    if len(seen) != n_rows:
        missing = sorted(set(range(n_rows)) - set(seen))
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise ValueError(f"layout: rows {shown} of the batch's {n_rows} are in no micro-batch "
                         f"(every row exactly once)")
    return checked


def _entries(x, name: str, what: str) -> list:
    if isinstance(x, (str, bytes)) or not isinstance(x, (list, tuple)):
        raise TypeError(f"{name}: expected {what}, got {type(x).__name__}")
    return list(x)


def _rows(mb, where: str, n_rows: int) -> np.ndarray:
    """One micro-batch's row indices as a new int array (a list of ints, or a 1-D integer
    array), each in [0, n_rows)."""
    if isinstance(mb, np.ndarray):
        if mb.ndim != 1 or mb.dtype.kind not in "iu":
            raise TypeError(f"{where}: expected a 1-D array of row indices (integers), got "
                            f"dtype {mb.dtype}, shape {mb.shape}")
        entries = mb.tolist()
    else:
        entries = _entries(mb, where, "a list of row indices")
    for j, row in enumerate(entries):
        # why: a bool is an int to isinstance, and 1.0 would silently become row 1
        if isinstance(row, bool) or not isinstance(row, numbers.Integral):
            raise TypeError(f"{where}[{j}]: expected a row index (an int), got "
                            f"{type(row).__name__} {row!r}")
        if not 0 <= row < n_rows:
            raise ValueError(f"{where}[{j}]: row {row} is out of range for a batch of "
                             f"{n_rows} rows")
    return np.array(entries, dtype=np.intp)
