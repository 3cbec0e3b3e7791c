"""The notebooks call the source of the equations "the objective" (``docs/objective.md``).

"seed" is kept for the seed of a random number generator and for the preset named
``"seed"``; the rule is the one ``tests/test_wording.py`` applies to README, docs and
the package's strings, applied here to every notebook's markdown and code comments.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_wording import bad_uses

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

def prose(path: Path) -> str:
    """Markdown cells, and the comments of code cells."""
    parts = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            parts.append(source)
        else:
            parts += [line.split("#", 1)[1] for line in source.splitlines() if "#" in line]
    return "\n".join(parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_say_the_objective_not_the_seed(path):
    bad = bad_uses(prose(path))
    assert not bad, f"{path.name}: 'seed' not in its RNG sense: {bad}"


def test_bad_uses_are_found():
    assert bad_uses("as in the seed's notation") and bad_uses("The seed calls it")
    assert not bad_uses("the same seed gives the same warm-up; `seed`, config.seed, seed 0")
