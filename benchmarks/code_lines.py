"""``python -m benchmarks.code_lines CHECKOUT [CHECKOUT ...]``: code lines of ppo_numpy/.

A code line is a line of a ``.py`` file that holds a token other than a comment, a
docstring or white space (Python's ``tokenize``, and ``ast`` for the docstrings: the
first statement of a module, class or function when it is a string). Blank lines,
comment lines and docstring lines are not counted; a line with code and a comment is.

Prints one table: a row per top-level file or package of ``ppo_numpy/`` (a package's
row sums its files), a column per checkout, and the total. ``--exclude NAME`` (repeatable)
leaves out a top-level entry from a second total, e.g. new feature modules, so that a
redesign can be compared with its predecessor module by module.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import sys
import tokenize

SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
        tokenize.ENCODING, tokenize.ENDMARKER}


def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of the docstrings of the module, its classes and functions."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """Number of code lines of one Python source text (see the module docstring).

    >>> code_lines('\"\"\"Doc.\"\"\"\\n# a comment\\n\\nx = 1  # set x\\n'
    ...            'def f():\\n    \"\"\"Doc.\"\"\"\\n    return (x +\\n            1)\\n')
    4
    """
    docs = docstring_lines(ast.parse(source))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in SKIP:
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docs)


def count_tree(checkout: str, package: str = "ppo_numpy") -> dict[str, int]:
    """``{path relative to the package: code lines}`` of every .py file under it."""
    root = os.path.join(checkout, package)
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, root)] = code_lines(f.read())
    return out


def by_top_level(counts: dict[str, int]) -> dict[str, int]:
    """The counts summed per top-level entry: ``gae.py``, or ``oracle/`` for a package."""
    out: dict[str, int] = {}
    for rel, n in counts.items():
        parts = rel.split(os.sep)
        key = parts[0] if len(parts) == 1 else parts[0] + "/"
        out[key] = out.get(key, 0) + n
    return dict(sorted(out.items()))


def table(checkouts: dict[str, str], exclude=()) -> list[dict]:
    """Rows ``{"entry": name, label: lines or None, ...}``, then ``total`` and, with
    ``exclude``, ``total without excluded``."""
    tops = {label: by_top_level(count_tree(path)) for label, path in checkouts.items()}
    names = sorted(set().union(*tops.values()))
    rows = [{"entry": n, **{label: t.get(n) for label, t in tops.items()}} for n in names]
    rows.append({"entry": "total", **{label: sum(t.values()) for label, t in tops.items()}})
    if exclude:
        rows.append({"entry": "total without " + ", ".join(exclude),
                     **{label: sum(v for k, v in t.items() if k not in exclude)
                        for label, t in tops.items()}})
    return rows


def markdown(rows: list[dict], labels: list[str]) -> list[str]:
    out = ["| ppo_numpy/ | " + " | ".join(labels) + " | "
           + " | ".join(f"{b} - {a}" for a, b in zip(labels, labels[1:])) + " |",
           "|---|" + "---:|" * (2 * len(labels) - 1)]
    for r in rows:
        cells = ["–" if r[lab] is None else str(r[lab]) for lab in labels]
        diffs = [f"{(r[b] or 0) - (r[a] or 0):+d}" for a, b in zip(labels, labels[1:])]
        name = f"**{r['entry']}**" if r["entry"].startswith("total") else f"`{r['entry']}`"
        out.append(f"| {name} | " + " | ".join(cells + diffs) + " |")
    return out


def section(checkouts: dict[str, str], exclude=()) -> list[str]:
    """The markdown table of :func:`table` with a line saying what is counted."""
    rows = table(checkouts, exclude)
    return ["Code lines of `ppo_numpy/` (`benchmarks/code_lines.py`: lines holding code, "
            "without docstrings, comments or blank lines; a package's row sums its files):",
            "", *markdown(rows, list(checkouts))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.code_lines",
                                description=__doc__.split("\n")[0])
    p.add_argument("checkouts", nargs="+", metavar="[LABEL=]CHECKOUT")
    p.add_argument("--exclude", action="append", default=[],
                   help="a top-level entry (e.g. group_advantages.py) left out of a second "
                        "total")
    args = p.parse_args(argv)
    checkouts = {}
    for item in args.checkouts:
        label, _, path = item.rpartition("=")
        checkouts[label or path] = path
    print("\n".join(section(checkouts, args.exclude)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

