"""Every relative link and every repository path named in the prose exists.

Prose = ``README.md``, ``docs/*.md`` and the markdown cells of ``notebooks/*.ipynb``.
Checked: the targets of markdown links ``[text](target)`` that are not URLs or
in-page anchors (resolved from the file's folder), and paths inside backticks
that start at a top-level folder of the repository (``ppo_numpy/...``,
``tests/...``, ...; resolved from the repository root). Paths of other
repositories (``trl/trainer/ppo_trainer.py``) and globs are not checked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("ppo_numpy", "tests", "docs", "notebooks", "benchmarks", "examples", ".ci")

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOP_LEVEL)
                   + r")/[\w./*-]*)")


def prose_files() -> list[Path]:
    return ([ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
            + sorted((ROOT / "notebooks").glob("*.ipynb")))


def prose(path: Path) -> str:
    """The file's text; for a notebook, its markdown cells."""
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def missing_links(text: str, base: Path) -> list[str]:
    """Relative link targets in ``text`` that do not exist below ``base``."""
    out = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        if not (base / target.split("#")[0]).exists():
            out.append(target)
    return out


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    """Repository paths inside backticks in ``text`` that do not exist below ``root``."""
    out = []
    for span in _CODE.findall(text):
        for path in _PATH.findall(span):
            path = path.rstrip(".,")
            if "*" in path or "{" in path:
                continue
            if not (root / path).exists():
                out.append(path)
    return out


@pytest.mark.parametrize("path", prose_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_and_paths_exist(path):
    text = prose(path)
    problems = ([f"link ({t})" for t in missing_links(text, path.parent)]
                + [f"path `{p}`" for p in missing_paths(text)])
    assert not problems, f"{path.relative_to(ROOT)}: missing " + ", ".join(problems)


def test_the_checks_see_what_is_missing(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("x")
    text = ("[ok](docs/here.md#part) [gone](docs/gone.md) [web](https://example.org/x) "
            "[anchor](#top) `docs/here.md`, `docs/gone.md`. `python -m x docs/also-gone.md` "
            "`trl/trainer/ppo_trainer.py` `notebooks/*.ipynb` `mydocs/x.md`")
    assert missing_links(text, tmp_path) == ["docs/gone.md"]
    assert missing_paths(text, tmp_path) == ["docs/gone.md", "docs/also-gone.md"]
