"""Every notebook runs top to bottom on a real kernel, and what it stores is what it computes.

For each ``notebooks/*.ipynb``:

* ``test_notebook_executes``: a fresh kernel runs every cell in order
  (``tests/notebook_runner.py``); a cell that raises, including a failed
  ``assert`` against the hand values, fails the test with its traceback.
* ``test_stored_outputs_come_from_a_clean_run``: the committed file has
  execution counts 1, 2, 3, ... and no error output.
* ``test_stored_outputs_are_current``: the committed outputs are those of the
  fresh run (printed numbers up to a relative 1e-3). After changing code that a
  notebook prints, run ``make notebooks``. Cells tagged ``volatile-output``
  (e.g. timings) are left out of this comparison.

* ``test_notebook_is_a_lesson`` (no kernel): the issue's structure, in order (goal,
  formula, a check cell with ``assert`` after "Check against the hand values",
  pitfalls, two or three exercises), no library function redefined, no pyplot
  (figures come from ``ppo_numpy.plotting``), and a link from the README.

The tests that need a kernel run here for half of the notebooks (``HALVES[0]``) and in
``tests/test_notebooks_half.py`` for the other half, so that two pytest-xdist workers share
them. The unit tests at the end check the runner's own checks on small synthetic notebooks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.notebook_runner import (
    CPU_KEY,
    clean_notebook,
    clean_run_problems,
    cpu_kind,
    execute_notebook,
    kernel_env,
    stale_outputs,
)
from tests.test_notebook_runtime import runtime_problem, stated_seconds

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_RUNS: dict = {}


def fresh_run(path: Path):
    """The notebook executed once per test session: ``(nb, seconds)`` or the error it raised."""
    if path not in _RUNS:
        try:
            _RUNS[path] = execute_notebook(path)
        except CellExecutionError as err:
            _RUNS[path] = err
    return _RUNS[path]


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 8, f"expected notebooks/00_*.ipynb ... 07_*.ipynb, found {NOTEBOOKS}"
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert all(p.name[2] == "_" for p in NOTEBOOKS), [p.name for p in NOTEBOOKS]
    # 00, 01, ... in order, none twice, no gap
    assert numbers == list(range(max(numbers) + 1)), numbers


#: the lesson's parts, in order (issue 5 and STYLE.md habit 9)
HEADINGS = ("## The formula", "## Check against the hand values", "## Pitfalls", "## Exercises")


def lesson_problems(nb, exported) -> list[str]:
    """What the notebook lacks of goal -> formula -> hand check -> pitfalls -> exercises."""
    cells = nb.cells
    problems = []
    if not cells or cells[0].cell_type != "markdown" or "**Goal.**" not in cells[0].source:
        problems.append("the first cell does not state the **Goal.**")
    elif not re.search(r"^> \*\*Words used here\*\*\n>\n> [-*] \S", cells[0].source, re.M):
        # issue 39: the terms the notebook introduces, defined before they are used
        problems.append("the first cell has no '> **Words used here**' box of terms")
    starts = []
    for heading in HEADINGS:
        found = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
                 and re.search("^" + re.escape(heading), c.source, re.M)]
        if not found:
            problems.append(f"no heading {heading!r}")
        starts.append(found[0] if found else None)
    if None not in starts and starts != sorted(starts):
        problems.append(f"headings out of order: {dict(zip(HEADINGS, starts))}")
    if starts[1] is not None:
        after = [c for c in cells[starts[1] + 1:] if c.cell_type == "code"][:1]
        if not after or "assert" not in after[0].source:
            problems.append("the cell after the check heading has no assert")
    if starts[3] is not None:
        text = cells[starts[3]].source.split("## Exercises")[1]
        n = len(re.findall(r"^\d+\. ", text, re.M))
        if not 2 <= n <= 3:
            problems.append(f"{n} exercises, expected two or three")
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    redefined = sorted(set(re.findall(r"^def (\w+)", code, re.M)) & set(exported))
    if redefined:
        problems.append(f"redefines library functions {redefined} (import them instead)")
    if "pyplot" in code:
        problems.append("draws with pyplot (use a named function of ppo_numpy.plotting)")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_a_lesson(path):
    import ppo_numpy

    problems = lesson_problems(nbformat.read(path, as_version=4), ppo_numpy.__all__)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if f"(notebooks/{path.name})" not in readme:
        problems.append("not linked from README.md")
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_lesson_problems_are_found():
    good = new_notebook(cells=[
        new_markdown_cell("# 99\n\n**Goal.** One sentence.\n\n> **Words used here**\n>\n"
                          "> - **Term**: what it means."),
        new_markdown_cell("## The formula\n\n$x$"),
        new_code_cell("from ppo_numpy import gae"),
        new_markdown_cell("## Check against the hand values"),
        new_code_cell("assert 1 + 1 == 2"),
        new_markdown_cell("## Pitfalls\n\n* one\n\n## Exercises\n\n1. a\n2. b\n3. c"),
    ])
    assert lesson_problems(good, ["gae"]) == []
    no_box = new_notebook(cells=[new_markdown_cell("# 99\n\n**Goal.** One sentence."),
                                 *good.cells[1:]])
    assert lesson_problems(no_box, ["gae"]) == [
        "the first cell has no '> **Words used here**' box of terms"]
    bad = new_notebook(cells=[
        new_markdown_cell("# 99"),
        new_markdown_cell("## Check against the hand values"),
        new_code_cell("print(1)"),
        new_markdown_cell("## The formula"),
        new_code_cell("def gae(r):\n    return r\nimport matplotlib.pyplot as plt"),
        new_markdown_cell("## Exercises\n\n1. only one"),
    ])
    problems = " | ".join(lesson_problems(bad, ["gae"]))
    for expected in ("Goal", "'## Pitfalls'", "no assert", "1 exercises", "['gae']", "pyplot"):
        assert expected in problems, (expected, problems)


def halves(items, weight) -> tuple[list, list]:
    """``items`` in two sorted lists of about equal total ``weight(item)``: the heaviest first,
    each to the list that weighs less so far."""
    parts = ([], [])
    for item in sorted(items, key=lambda i: -weight(i)):
        min(parts, key=lambda part: sum(map(weight, part))).append(item)
    return tuple(sorted(part) for part in parts)


#: the notebooks in two halves of about equal stated run time: this file executes the first,
#: tests/test_notebooks_half.py the second, so that two pytest-xdist workers (``--dist
#: loadfile``) share the kernels
HALVES = halves(NOTEBOOKS, lambda p: stated_seconds(nbformat.read(p, as_version=4)) or 0)


def executing_tests(notebooks):
    """The tests that execute ``notebooks`` (once each per process, :func:`fresh_run`):
    ``test_notebook_executes``, ``test_stored_outputs_are_current``,
    ``test_notebook_states_its_run_time``, to be bound to names in a test module."""
    each = pytest.mark.parametrize("path", notebooks, ids=lambda p: p.name)

    @each
    def test_notebook_executes(path):
        run = fresh_run(path)
        if isinstance(run, Exception):
            pytest.fail(f"{path.name}: a cell raised while running top to bottom:\n{run}",
                        pytrace=False)
        nb, _ = run
        assert clean_run_problems(nb) == []

    @each
    def test_stored_outputs_are_current(path):
        run = fresh_run(path)
        if isinstance(run, Exception):
            pytest.skip("the notebook does not execute (see test_notebook_executes)")
        problems = stale_outputs(nbformat.read(path, as_version=4), run[0])
        assert not problems, (f"{path.name}: stored outputs are stale (run `make notebooks`):\n"
                              + "\n".join(problems))

    @each
    def test_notebook_states_its_run_time(path: Path):
        # the statement and its tolerance: tests/test_notebook_runtime.py
        stated = stated_seconds(nbformat.read(path, as_version=4))
        assert stated is not None, f"{path.name}: {runtime_problem(None, 0.0)}"
        run = fresh_run(path)
        if isinstance(run, Exception):
            pytest.skip("the notebook does not execute (see test_notebook_executes)")
        problem = runtime_problem(stated, run[1])
        assert problem is None, f"{path.name}: {problem}"

    return test_notebook_executes, test_stored_outputs_are_current, \
        test_notebook_states_its_run_time


test_notebook_executes, test_stored_outputs_are_current, test_notebook_states_its_run_time = \
    executing_tests(HALVES[0])


def test_the_halves_hold_every_notebook_once():
    assert sorted(HALVES[0] + HALVES[1]) == NOTEBOOKS and not set(HALVES[0]) & set(HALVES[1])
    # four items weighing 40, 30, 20 and 10: 40 + 10 against 30 + 20
    weights = {"a": 40, "b": 30, "c": 20, "d": 10}
    assert halves(weights, weights.get) == (["a", "d"], ["b", "c"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_come_from_a_clean_run(path):
    problems = clean_run_problems(nbformat.read(path, as_version=4))
    assert not problems, (f"{path.name} was not stored from one clean top-to-bottom run "
                          f"(run `make notebooks`):\n" + "\n".join(problems))



# ---- the runner's checks, on synthetic notebooks (no kernel) ----

def _notebook(counts, outputs=None):
    cells = [new_markdown_cell("# title")]
    for k, count in enumerate(counts):
        cell = new_code_cell(f"print({k})")
        cell.execution_count = count
        if outputs is None:
            cell.outputs = [new_output("stream", name="stdout", text=f"{k}\n")]
        else:
            cell.outputs = outputs[k]
        cells.append(cell)
    return new_notebook(cells=cells)


def test_clean_run_accepts_counts_in_order():
    assert clean_run_problems(_notebook([1, 2, 3])) == []


@pytest.mark.parametrize("counts", [[1, 3, 4], [2, 3, 4], [1, 2, None], [1, 1, 2], [3, 2, 1]])
def test_clean_run_rejects_other_counts(counts):
    problems = clean_run_problems(_notebook(counts))
    assert problems and "execution count" in problems[0]


def test_clean_run_rejects_stored_errors():
    error = new_output("error", ename="AssertionError", evalue="hand value", traceback=[])
    problems = clean_run_problems(_notebook([1, 2], outputs=[[], [error]]))
    assert problems == ["cell 2: stored error output AssertionError: hand value"]


def test_clean_run_rejects_a_stored_warning():
    warning = new_output("stream", name="stderr", text="/x/pylabtools.py:158: UserWarning: ...")
    stdout = new_output("stream", name="stdout", text="fine")
    problems = clean_run_problems(_notebook([1, 2], outputs=[[stdout], [warning]]))
    assert len(problems) == 1 and problems[0].startswith("cell 2: stored stderr output")


def test_clean_notebook_removes_outputs_and_counts():
    nb = clean_notebook(_notebook([1, 2]))
    assert all(c.outputs == [] and c.execution_count is None
               for c in nb.cells if c.cell_type == "code")


def _printing(*texts):
    return _notebook(list(range(1, len(texts) + 1)),
                     outputs=[[new_output("stream", name="stdout", text=t)] for t in texts])


def test_stale_outputs_tolerate_last_digits_only():
    stored = _printing("A_hat = [0.46575, 0.385]\n", "rel error: 4.1e-11\n")
    close = _printing("A_hat = [0.465750001, 0.385]\n", "rel error: 3.9e-11\n")
    assert stale_outputs(stored, close) == []
    changed = _printing("A_hat = [0.43575, 0.385]\n", "rel error: 4.1e-11\n")
    assert len(stale_outputs(stored, changed)) == 1
    reworded = _printing("A_hat is [0.46575, 0.385]\n", "rel error: 4.1e-11\n")
    assert len(stale_outputs(stored, reworded)) == 1


def test_stale_outputs_see_missing_figures_and_lines():
    figure = new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})
    with_figure = _notebook([1], outputs=[[figure]])
    without = _notebook([1], outputs=[[]])
    assert len(stale_outputs(with_figure, without)) == 1
    assert len(stale_outputs(_printing("a\n"), _printing("a\nb\n"))) == 1


def test_stale_outputs_join_a_stream_cut_into_pieces():
    # one print arrives as one or two messages depending on timing; a figure between them
    # is a real difference
    def cell(*outs):
        return _notebook([1], outputs=[list(outs)])

    def out(text):
        return new_output("stream", name="stdout", text=text)

    figure = new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})
    whole = cell(out("18 cases\nreport: ok\n"))
    assert stale_outputs(whole, cell(out("18 cases\n"), out("report: ok\n"))) == []
    assert len(stale_outputs(whole, cell(out("18 cases\n"), figure, out("report: ok\n")))) == 1
    assert len(stale_outputs(whole, cell(out("18 cases\n"),
                                         new_output("stream", name="stderr",
                                                    text="report: ok\n")))) == 1


def test_a_column_realigned_by_a_numbers_width_is_the_same_text():
    # a table's right-aligned column: 6.05e-12 on one CPU kind, 8.3e-12 on another
    stored = _printing("  W_pi   (6, 7)      6.05e-12   True\n")
    fresh = _printing("  W_pi   (6, 7)       8.3e-12   True\n")
    assert stale_outputs(stored, fresh) == []
    assert len(stale_outputs(stored, _printing("  W_pi   (6, 7)       8.3e-12   False\n"))) == 1
    assert len(stale_outputs(stored, _printing("  W_pi   (6, 7)       6.05e-12True\n"))) == 1


def test_volatile_cells_are_not_compared():
    stored, fresh = _printing("took 1.2 s\n"), _printing("took 3.4 s (slow machine)\n")
    assert len(stale_outputs(stored, fresh)) == 1
    for nb in (stored, fresh):
        nb.cells[1].metadata["tags"] = ["volatile-output"]
    assert stale_outputs(stored, fresh) == []


def test_cpu_dependent_cells_are_compared_loosely_only_across_cpu_kinds():
    stored, fresh = _printing("score 0.668 after 30 iterations\n"), _printing(
        "score 0.730 after 30 iterations\n")
    longer = _printing("score 0.730 after 30 iterations\nentropy 0.4\n")
    for nb in (stored, fresh, longer):
        nb.metadata[CPU_KEY] = {"cpu_features": ["AVX2"]}
    assert len(stale_outputs(stored, fresh)) == 1            # untagged: the numbers count
    for nb in (stored, fresh, longer):
        nb.cells[1].metadata["tags"] = ["cpu-dependent"]
    assert len(stale_outputs(stored, fresh)) == 1            # tagged, same CPU kind: too
    fresh.metadata[CPU_KEY] = longer.metadata[CPU_KEY] = {"cpu_features": ["AVX2", "AVX512F"]}
    assert stale_outputs(stored, fresh) == []                # another kind: lines only
    assert len(stale_outputs(stored, longer)) == 1           # a new line is still seen


def test_cpu_kind_names_numpy_and_its_simd_features():
    kind = cpu_kind()
    assert kind["numpy"] == np.__version__ and kind["cpu_features"] == sorted(kind["cpu_features"])
    assert set(kind) == {"numpy", "openblas_core", "cpu_features"}


def test_kernel_env_uses_inline_backend_and_finds_the_package(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    env = kernel_env()
    assert env["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(ROOT), "/somewhere/else"]
