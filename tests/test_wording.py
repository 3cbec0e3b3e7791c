"""User-facing text calls the source of the equations "the objective", never "the seed".

The equations come from a text that is not in the repository; users read them in
``docs/objective.md``. "seed" is kept for what it means to a programmer, the seed of a
random number generator, and for the name of the preset ``"seed"``. The rule, applied to
every occurrence of the word ``seed`` (any case; ``seeds``, ``seeded`` are other words):

1. code: it touches ``-``, ``_``, ``.``, a backtick, a quote, ``(``, ``[`` or ``{`` on
   its left, or ``=``, ``_``, a backtick, ``"``, ``)``, ``]``, ``}`` or ``:`` on its right
   (``--seed``, ``seed=``, ``config.seed``, ``"seed"``, ``(seed, name)``, ``seed:``),
   or it is argparse's metavar ``SEED``;
2. a value follows it: ``seed 0``, ``seed S``, ``seed {...}`` (an f-string);
3. an RNG phrase: ``same seed``, ``random seed``, ``seed of ...``, ``seed : int``
   (a numpydoc parameter), or a table column headed ``| seed |``.

Anything else (``the seed's equations``, ``seed text``, ``as in the seed``) fails, with
the file, the line and the text around it. Checked: ``README.md``, ``docs/*.md``, every
string constant of ``ppo_numpy/**/*.py`` (docstrings, ``--help`` texts, printed
messages) and the ``--help`` output of every ``python -m ppo_numpy`` command. The
notebooks are not checked here.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

from ppo_numpy.__main__ import COMMANDS
from ppo_numpy.__main__ import main as cli_main

ROOT = Path(__file__).resolve().parents[1]

_WORD = re.compile(r"\bseed\b", re.IGNORECASE)
_CODE_LEFT = set("-_.`\"'([{")
_CODE_RIGHT = set("=_`\")]}:,")
_VALUE = re.compile(r"\s+(\d|[A-Z]\b|\{)")
_PHRASES = [re.compile(p, re.IGNORECASE) for p in (
    r"\bsame seed\b", r"\brandom seed\b", r"\bseed of\b", r"\bseed : ", r"\|\s*seed\s*\|",
    r"\bone seed\b", r"\bseeds?\s+\d")]


def bad_uses(text: str) -> list[str]:
    """The occurrences of "seed" in ``text`` that none of the rules allows, with context."""
    allowed = set()
    for phrase in _PHRASES:
        for m in phrase.finditer(text):
            allowed.update(w.start() for w in _WORD.finditer(text, m.start(), m.end()))
    out = []
    for m in _WORD.finditer(text):
        i, j = m.start(), m.end()
        left = text[i - 1] if i else ""
        right = text[j] if j < len(text) else ""
        if (i in allowed or left in _CODE_LEFT or right in _CODE_RIGHT
                or _VALUE.match(text, j) or m.group() == "SEED"):
            continue
        line = text.count("\n", 0, i) + 1
        out.append(f"line {line}: ...{text[max(0, i - 40):j + 30]!r}...")
    return out


def _strings(tree: ast.AST):
    """Every string constant of a module; an f-string with ``{...}`` for its fields."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside.update(id(v) for v in node.values)
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{...}"
                                       for v in node.values)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in inside and node.value.lower() != "seed"):
            yield node.lineno, node.value


def prose_files() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("path", prose_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_do_not_call_the_source_the_seed(path):
    problems = bad_uses(path.read_text(encoding="utf-8"))
    assert not problems, f"{path.relative_to(ROOT)}: " + "; ".join(problems)


def test_package_strings_do_not_call_the_source_the_seed():
    problems = []
    for path in sorted((ROOT / "ppo_numpy").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for lineno, text in _strings(tree):
            problems += [f"{path.relative_to(ROOT)}:{lineno} {p}" for p in bad_uses(text)]
    assert not problems, "\n".join(problems)


def _help(argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli_main(argv)
    return out.getvalue()


def test_help_texts_do_not_call_the_source_the_seed():
    texts = {"python -m ppo_numpy": _help([])}
    for name in COMMANDS:
        texts[name] = _help([name, "--help"])
    for command, subs in (("explain", ("gae", "clip", "rewards", "ppo")),
                          ("oracle", ("list", "export", "verify"))):
        for sub in subs:
            texts[f"{command} {sub}"] = _help([command, sub, "--help"])
    assert all(texts.values()), [k for k, v in texts.items() if not v]
    problems = [f"{k} --help: {p}" for k, v in texts.items() for p in bad_uses(v)]
    assert not problems, "\n".join(problems)


def test_the_rule_allows_the_rng_and_the_preset_and_nothing_else():
    ok = ("--seed 3", "seed=0", "config.seed", 'get_preset("seed")', "the preset `seed`",
          "(seed, crc32(name))", "seed 0", "with seed S", "(seed {...})", "the same seed",
          "random seed (default 0)", "seed of the cases", "seed : int", "| seed | iter |",
          "seeds", "seeded by", "seed: must be >= 0", "--seed SEED  random seed")
    for text in ok:
        assert bad_uses(text) == [], text
    for text in ("the seed's equations", "Notation follows the *seed*", "the seed text",
                 "as in the seed.", "seed symbol", "The seed gives no number"):
        assert len(bad_uses(text)) == 1, text
