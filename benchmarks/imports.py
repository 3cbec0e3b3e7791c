"""``python -m benchmarks.imports [CHECKOUT]``: the package's import graph and its circles.

Every ``import`` and ``from ... import`` statement of every ``.py`` file of ``ppo_numpy/``
is read with ``ast``, wherever it stands (at the top of a module, or inside a function or
a class: an import deferred into a function still ties the two modules together). An import
of a package's name (``from . import kl``) counts as an import of that submodule when one
exists, else of the package's ``__init__``. The graph is ``{module file: {module files it
imports}}`` (paths relative to the checkout, only modules of the package itself).

:func:`circles` lists the strongly connected components of more than one module (and the
modules that import themselves): a circle is any set of modules each of which reaches the
others through imports. :func:`above` says whether one module sits above another in the
import order (it imports the other, directly or through others).
"""

from __future__ import annotations

import ast
import os
import sys

PACKAGE = "ppo_numpy"


def _module_files(checkout: str) -> dict[str, str]:
    """``{dotted module name: file relative to checkout}`` of the package."""
    out = {}
    root = os.path.join(checkout, PACKAGE)
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), checkout)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = rel
    return out


def _resolve(current: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute dotted name of a relative import in module ``current``."""
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph(checkout: str) -> dict[str, set[str]]:
    """``{file: {files it imports}}`` of the package of ``checkout`` (module docstring)."""
    modules = _module_files(checkout)
    graph = {}
    for name, rel in modules.items():
        is_package = rel.endswith("__init__.py")
        with open(os.path.join(checkout, rel), encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), rel)
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets.add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = (_resolve(name, is_package, node.level, node.module) if node.level
                        else node.module or "")
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else base)
        graph[rel] = {modules[t] for t in targets if t in modules and modules[t] != rel} | (
            {rel} if any(modules.get(t) == rel for t in targets) else set())
    return graph


def reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def above(graph: dict[str, set[str]], upper: str, lower: str) -> bool:
    """``upper`` imports ``lower``, directly or through others."""
    return lower in reach(graph, upper)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each a sorted list of modules that reach one another."""
    out, done = [], set()
    for m in sorted(graph):
        if m in done:
            continue
        r = reach(graph, m)
        if m in r:
            component = sorted({m} | {o for o in r if m in reach(graph, o)})
            done.update(component)
            out.append(component)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    checkout = argv[0] if argv else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = circles(import_graph(checkout))
    for component in found:
        print("circle:", " <-> ".join(component))
    print(f"{len(found)} import circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
