"""Every exercise of every notebook has a worked solution that runs and checks its numbers.

The solutions follow the exercises under ``## Solutions``: for exercise k a markdown cell
"**Solution k.**" and one or more code cells tagged ``solution`` (more than one when a
long computation is split to stay under the runner's per-cell time limit), collapsed
(``jupyter.source_hidden``), which assert the numbers the solution states. The
cells run with the rest of the notebook (``tests/test_notebooks.py`` executes every
notebook and checks its stored outputs), so a solution whose numbers no longer hold
fails there. This file checks the structure: one solution per exercise, each with an
``assert``, none failing in the stored run.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def exercises(nb) -> int:
    (cell,) = [c for c in nb.cells if c.cell_type == "markdown" and "## Exercises" in c.source]
    return len(re.findall(r"^\d+\. ", cell.source.split("## Exercises")[1], re.M))


def solution_problems(nb) -> list[str]:
    problems = []
    heads = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "markdown" and c.source.startswith("## Solutions")]
    if len(heads) != 1:
        return [f"{len(heads)} '## Solutions' headings, expected 1"]
    after = nb.cells[heads[0] + 1:]
    texts = [c for c in after if c.cell_type == "markdown"]
    n = exercises(nb)
    labels = [re.match(r"\*\*Solution (\d+)\.\*\*", c.source) for c in texts]
    if [int(m.group(1)) if m else None for m in labels] != list(range(1, n + 1)):
        problems.append(f"solution texts {[c.source[:14] for c in texts]}, expected 1..{n}")
    # the code cells of solution k: those between its text and the next one
    groups, current = [], None
    for cell in after:
        if cell.cell_type == "markdown":
            current = []
            groups.append(current)
        elif current is not None:
            current.append(cell)
    with_code = sum(1 for g in groups if g)
    if with_code != n:
        problems.append(f"{with_code} solutions with code for {n} exercises")
    for k, codes in enumerate(groups, 1):
        if codes and not any("assert" in cell.source for cell in codes):
            problems.append(f"solution {k}: checks nothing (no assert)")
        for cell in codes:
            if "solution" not in cell.metadata.get("tags", []):
                problems.append(f"solution {k}: not tagged 'solution'")
            if not cell.metadata.get("jupyter", {}).get("source_hidden"):
                problems.append(f"solution {k}: source not collapsed")
            if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                problems.append(f"solution {k}: raised in the stored run")
            if cell.get("execution_count") is None:
                problems.append(f"solution {k}: not executed in the stored run")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_an_executed_checked_solution(path):
    problems = solution_problems(nbformat.read(path, as_version=4))
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_solution_problems_are_found():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(cells=[
        new_markdown_cell("## Exercises\n\n1. a\n2. b"),
        new_markdown_cell("## Solutions"),
        new_markdown_cell("**Solution 1.** x"),
        new_code_cell("print(1)", metadata={"tags": ["solution"]}),
    ])
    text = " | ".join(solution_problems(nb))
    for expected in ("expected 1..2", "1 solutions with code for 2", "not collapsed",
                     "no assert", "not executed"):
        assert expected in text, (expected, text)
