"""Every notebook states its run time, and the statement holds within a factor of 3.

The first cell of each notebook says ``*Run time: about N s*``: what a learner waits for a
top-to-bottom run (``python -m tests.notebook_runner``, a fresh kernel, one core). The test
compares it with the time of the run ``tests/test_notebooks.py`` makes anyway (the same
session's run, not a second one: the parametrised test, ``test_notebook_states_its_run_time``,
is in that file, so that ``pytest --dist loadfile`` runs it in the worker that ran the
notebook). The stated N must be within a factor of ``FACTOR`` of it, give or take
``SLACK_S`` seconds (the kernel's start, and a machine shared with other jobs:
notebook 06 took 1.8 s and 7.3 s in two runs of one afternoon), so a notebook that became
ten times slower, or a statement written for another machine's tenth of it, fails. It is a
statement about what the reader waits, not a benchmark (speed is measured in
``benchmarks/``).
"""

from __future__ import annotations

import re

#: the stated time may be this many times the measured one, or a this-th of it
FACTOR = 3.0
#: ... give or take this many seconds
SLACK_S = 5.0
_STATED = re.compile(r"\*Run time: about (\d+(?:\.\d+)?) s\*")


def stated_seconds(nb) -> float | None:
    """The ``*Run time: about N s*`` of the notebook's first cell, or None."""
    m = _STATED.search(nb.cells[0].source) if nb.cells else None
    return float(m[1]) if m else None


def runtime_problem(stated: float | None, measured: float) -> str | None:
    """Why the statement does not hold for a run of ``measured`` seconds, or None."""
    if stated is None:
        return "the first cell states no '*Run time: about N s*'"
    if not stated / FACTOR - SLACK_S <= measured <= stated * FACTOR + SLACK_S:
        return (f"states about {stated:g} s, a run took {measured:.1f} s (more than a factor "
                f"{FACTOR:g}, give or take {SLACK_S:g} s, apart)")
    return None


def test_runtime_problems_are_found():
    from nbformat.v4 import new_markdown_cell, new_notebook

    goal = "**Goal.** x.\n\n*Run time: about 30 s* (one core)"
    nb = new_notebook(cells=[new_markdown_cell(goal)])
    assert stated_seconds(nb) == 30.0
    assert stated_seconds(new_notebook(cells=[new_markdown_cell("quick")])) is None
    assert runtime_problem(30.0, 31.0) is None and runtime_problem(30.0, 5.5) is None
    assert runtime_problem(30.0, 94.0) is None and runtime_problem(2.0, 10.5) is None
    assert "took 4.0 s" in runtime_problem(30.0, 4.0)
    assert "took 96.0 s" in runtime_problem(30.0, 96.0)
    assert "took 11.5 s" in runtime_problem(2.0, 11.5)
    assert "states no" in runtime_problem(None, 1.0)
