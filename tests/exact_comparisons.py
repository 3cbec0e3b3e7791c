"""List the places where a test compares floats exactly (the audit of docs/testing.md).

A float comparison holds on every CPU kind only if the arithmetic behind both sides is exact,
or both sides come from the same instructions on the same machine; everything else needs a
tolerance (docs/testing.md, "Exact comparisons"). This finds the candidates by reading the
test files (no test is run): per test function,

- ``==`` or ``!=`` with a float literal on one side (``x == -2.0``, ``[0.5, 1.0] == y``);
- ``np.array_equal``, ``np.testing.assert_array_equal`` and ``assert_equal``;
- ``assert_allclose`` / ``pytest.approx`` / ``np.isclose`` with a relative tolerance below
  ``1e-13`` and no absolute one (a few ulps, so exact in effect);
- ``.tobytes()`` compared with ``==``.

Comparisons of integers or booleans are found too (the reader cannot tell the dtype): the
audit says which they are.

    python -m tests.exact_comparisons            # per file: test, line, kind, source
    python -m tests.exact_comparisons --counts   # per file: how many of each kind
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIGHT = 1e-13


@dataclass(frozen=True)
class Site:
    file: str
    test: str
    line: int
    kind: str
    source: str


def _is_float(node) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, float)
    if isinstance(node, ast.UnaryOp):
        return _is_float(node.operand)
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_float(e) for e in node.elts)
    return False


def _name(func) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _number(node):
    try:
        return float(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError):
        return None


def _kind(node) -> str | None:
    if isinstance(node, ast.Compare) and any(isinstance(o, (ast.Eq, ast.NotEq))
                                             for o in node.ops):
        sides = [node.left, *node.comparators]
        if any(_is_float(s) for s in sides):
            return "== float"
        if any(isinstance(s, ast.Call) and _name(s.func) == "tobytes" for s in sides):
            return "tobytes"
    if isinstance(node, ast.Call):
        name = _name(node.func)
        if name in ("array_equal", "assert_array_equal", "assert_equal"):
            return name
        if name in ("assert_allclose", "approx", "isclose", "allclose"):
            kw = {k.arg: _number(k.value) for k in node.keywords}
            rel = kw.get("rtol", kw.get("rel"))
            if rel is not None and rel < TIGHT and not kw.get("atol") and not kw.get("abs"):
                return f"{name} rel {rel:g}"
    return None


def sites(paths=None) -> list[Site]:
    """Every candidate exact comparison in ``paths`` (default: tests/test_*.py and helpers)."""
    if paths is None:
        paths = sorted((ROOT / "tests").glob("test_*.py")) + [ROOT / "tests" / "_helpers.py"]
    found = []
    for path in paths:
        text = Path(path).read_text()
        tree = ast.parse(text)
        owner = {}
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    owner.setdefault(id(node), fn.name)
        for node in ast.walk(tree):
            kind = _kind(node)
            if kind:
                src = " ".join(ast.get_source_segment(text, node).split())
                found.append(Site(Path(path).name, owner.get(id(node), "<module>"),
                                  node.lineno, kind, src[:100]))
    # a function inside a test is walked twice (outer and inner): keep the innermost owner
    unique = {}
    for s in found:
        unique[(s.file, s.line, s.source)] = s
    return sorted(unique.values(), key=lambda s: (s.file, s.line))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.exact_comparisons",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", action="store_true", help="counts per file and kind")
    args = parser.parse_args(argv)
    found = sites()
    if args.counts:
        by_file = Counter(s.file for s in found)
        for file, n in by_file.most_common():
            kinds = Counter(s.kind.split(" rel")[0] for s in found if s.file == file)
            print(f"{n:4d}  {file}  " + ", ".join(f"{k} {c}" for k, c in kinds.most_common()))
        print(f"{len(found):4d}  in {len(by_file)} files, "
              f"{len({(s.file, s.test) for s in found})} test functions")
        return 0
    for s in found:
        print(f"{s.file}:{s.line}  {s.test}  [{s.kind}]  {s.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
