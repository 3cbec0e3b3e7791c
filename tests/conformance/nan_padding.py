"""The claim of docs/conventions.md (section 14, "NaN at padding") checked on verl 0.9.1
itself: for each ``loss_agg_mode`` and each correction, verl's loss on the group case
``rollout-nan-padding`` (NaN, +-inf and +-1e30 in ``logp_rollout``'s padding) is finite or
NaN as the docs' table says, and where it is finite every output equals the preset's
(issue 34, defect 7: the docs said NaN where verl's token-mean stays finite).

The table is read from the docs (:func:`read_table`); a cell that the run contradicts, a
finite cell whose outputs differ from the preset's, or a table that lacks a cell fails
``make conformance``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "conventions.md"
#: the table's header cell, and its columns' options
HEADER = "verl 0.9.1 loss, NaN at `logp_rollout`'s padding"
COLUMNS = {"no weights": {}, '`rollout_is="token"`': {"rollout_is": "token"},
           '`rollout_is="sequence"`': {"rollout_is": "sequence"},
           "`bypass_mode=True`": {"bypass_mode": True}}
MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def read_table(text: str) -> dict:
    """{(loss_agg_mode, column): "finite" or "NaN"} of the docs' table (the rows after the
    header line whose first cell is :data:`HEADER`)."""
    lines = [ln.strip() for ln in text.splitlines()]
    start = next((i for i, ln in enumerate(lines)
                  if ln.startswith("|") and _cells(ln)[0] == HEADER), None)
    if start is None:
        raise ValueError(f"docs/conventions.md: no table headed {HEADER!r}")
    columns = _cells(lines[start])[1:]
    out = {}
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        mode, *values = _cells(ln)
        for column, value in zip(columns, values):
            out[(mode.strip("`"), column)] = value
    return out


def _cells(line: str) -> list:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def check(candidate, case: dict, table: dict) -> list:
    """[(mode, column, the docs' claim, verl's loss, "equal" / the first difference / "")]
    for every cell of :data:`MODES` x :data:`COLUMNS`; ``candidate`` is verl's pipeline
    (``verl_runner.verl_grpo``), ``case`` the rollout-nan-padding case."""
    from ppo_numpy.oracle.compare import compare

    rows = []
    for mode in MODES:
        for column, options in COLUMNS.items():
            c = {**case, "name": f"{case['name']}[{mode}, {column}]",
                 "params": {**case.get("params", {}), "loss_agg_mode": mode, **options}}
            loss = candidate(c)["policy_loss"]
            same = ""
            if np.isfinite(loss):
                # (the outputs verl returns, each compared: the statistics it does not
                # return are left out, as in the main run)
                report = compare(candidate, "verl-grpo", [c], "float64")
                same = ("not compared" if not report.rows else "equal" if not report.failures
                        else report.failures[0].describe().splitlines()[0])
            rows.append((mode, column, table.get((mode, column)), float(loss), same))
    return rows


def failures(rows: list) -> list:
    """The lines naming each cell the run contradicts."""
    out = []
    for mode, column, claim, loss, same in rows:
        seen = "finite" if np.isfinite(loss) else "NaN"
        if claim is None:
            out.append(f"{mode}, {column}: not in docs/conventions.md's table (verl: {seen})")
        elif claim != seen:
            out.append(f"{mode}, {column}: docs/conventions.md says {claim}, verl 0.9.1's loss "
                       f"is {loss!r}")
        elif seen == "finite" and same != "equal":
            out.append(f"{mode}, {column}: verl's loss is finite, the preset differs: {same}")
    return out


def run() -> dict:
    """The check on the installed verl: {"rows": ..., "failures": [...]} for the report."""
    from ppo_numpy.oracle.group_cases import generate_group_cases

    from . import verl_runner
    from .run import SPECS

    (case,) = generate_group_cases(0, ["rollout-nan-padding"])
    case = SPECS["verl-grpo"]["inputs"](case)  # (the inputs verl stores in float32)
    rows = check(verl_runner.verl_grpo, case, read_table(DOCS.read_text(encoding="utf-8")))
    return {"rows": [list(r) for r in rows], "failures": failures(rows)}
