"""The notebooks call the source of the equations "the objective" (``docs/objective.md``).

"seed" is kept for the seed of a random number generator and for the preset named
``"seed"``; the rule is the one ``tests/test_wording.py`` applies to README, docs and
the package's strings, applied here to every notebook's markdown and code comments.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

_WORD = re.compile(r"\bseed\b", re.IGNORECASE)
_CODE_LEFT = set("-_.`\"'([{")
_CODE_RIGHT = set("=_`\")]}:,")
_VALUE = re.compile(r"\s+(\d|[A-Z]\b|\{)")
_PHRASES = [re.compile(p, re.IGNORECASE) for p in (
    r"\bsame seed\b", r"\brandom seed\b", r"\bseed of\b", r"\bone seed\b", r"\bseeds?\s+\d")]


def bad_uses(text: str) -> list[str]:
    allowed = set()
    for phrase in _PHRASES:
        for m in phrase.finditer(text):
            allowed.update(w.start() for w in _WORD.finditer(text, m.start(), m.end()))
    out = []
    for m in _WORD.finditer(text):
        i, j = m.start(), m.end()
        left = text[i - 1] if i else ""
        right = text[j] if j < len(text) else ""
        if i in allowed or left in _CODE_LEFT or right in _CODE_RIGHT or _VALUE.match(text, j):
            continue
        out.append(text[max(0, i - 40):j + 40].replace("\n", " "))
    return out


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
