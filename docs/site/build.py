"""Build the documentation site: ``python docs/site/build.py [OUT]`` (``make docs``).

1. Stage what the site shows into OUT/src (default build/docs/src), from scratch:
   README.md as the home page (index.md, with the sidebar's toctrees appended),
   docs/*.md and notebooks/*.ipynb (stored outputs, never executed), and the generated
   API pages (api/): one per name of ``ppo_numpy.__all__``, one per module that defines
   them, one per oracle preset.
2. Rewrite the links of the staged prose that point at repository files which are not
   pages: ``../ppo_numpy/ppo/gae.py`` goes to the module's API page (its docstring, its
   public names, and a link to the highlighted source); any other file to a generated
   page showing it. Links between pages are untouched. The files on disk keep their
   links (tests/test_docs_links.py checks those).
3. Run Sphinx (docs/site/conf.py) on OUT/src into OUT/html with a fresh environment,
   warnings as errors (-W --keep-going: every warning is listed, then the build fails).

The sidebar's reading order is SIDEBAR below; notebooks come in by glob, so a new
notebook appears in its numbered place, and a docs page not named in SIDEBAR is added to
the "Using ppo_numpy as a reference" section, so that a new page is never left out.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = Path(__file__).resolve().parent

# (caption, entries); "notebooks/*" is a glob
SIDEBAR = [
    ("Start here", ["docs/objective", "docs/notation", "docs/derivations"]),
    ("Notebooks", ["notebooks/*"]),
    ("Using ppo_numpy as a reference", ["docs/hand-calculations", "docs/training",
                                        "docs/overoptimisation", "docs/oracle",
                                        "docs/conformance", "docs/conventions",
                                        "docs/frameworks", "docs/benchmarks"]),
    ("API reference", ["api/index"]),
    ("About these docs", ["docs/README", "docs/development"]),
]
EXTRA_DOCS_SECTION = "Using ppo_numpy as a reference"

# modules that get a page although they define no name of __all__ (docstrings refer to them)
EXTRA_MODULES = ["ppo_numpy.oracle", "ppo_numpy.oracle.cases", "ppo_numpy.oracle.compare",
                 "ppo_numpy.oracle.golden", "ppo_numpy.oracle.presets", "ppo_numpy.models.base",
                 "ppo_numpy.programs.oracle", "ppo_numpy.oracle.diagnose",
                 "ppo_numpy.oracle.switches", "ppo_numpy.oracle.group_cases",
                 "ppo_numpy.oracle.coverage", "ppo_numpy.family.losses",
                 "ppo_numpy.policy_loss.kernel"] + [
    f"ppo_numpy.family.losses.{m}" for m in ("clip", "cispo", "vespo", "sapo", "gmpo", "gpg",
                                             "cov", "dppo", "dro", "entry")] + [
    f"ppo_numpy.oracle.presets.{m}" for m in ("seed", "trl", "verl", "openrlhf", "deepspeed_chat",
                                              "lm_human_preferences", "trl_grpo", "verl_grpo",
                                              "openrlhf_grpo")]
# the oracle's modules are documented whole (their functions are the oracle's API)
FULL_MODULES = ["ppo_numpy.oracle.cases", "ppo_numpy.oracle.compare", "ppo_numpy.oracle.golden",
                "ppo_numpy.oracle.diagnose", "ppo_numpy.oracle.switches",
                "ppo_numpy.oracle.group_cases", "ppo_numpy.oracle.coverage",
                "ppo_numpy.family.losses",
                "ppo_numpy.family.losses.sapo", "ppo_numpy.family.losses.gmpo",
                "ppo_numpy.family.losses.cov", "ppo_numpy.family.losses.dppo",
                "ppo_numpy.policy_loss.kernel"]
# names documented on their module's page: not in __all__, but a docstring refers to them
MODULE_EXTRAS = {
    "ppo_numpy.ppo.aggregation": [("data", "TRL_MODES")],
    "ppo_numpy.oracle.presets": [("function", "get_preset"), ("class", "Preset"),
                                 ("data", "PRESETS"), ("data", "DEFAULT_PRESET"),
                                 ("data", "INPUT_NAMES"), ("data", "GROUP_INPUT_NAMES")],
}

_LINK = re.compile(r"(\[[^\]]*\]\()([^)\s]+)(\))")  # the same links tests/test_docs_links.py checks


# --------------------------------------------------------------------------- staging

def staged_name(repo_path: str) -> str | None:
    """Where a repository page lands in the site's source folder (None: not a page)."""
    if repo_path == "README.md":
        return "index.md"
    if re.fullmatch(r"docs/[^/]+\.md", repo_path) or re.fullmatch(r"notebooks/[^/]+\.ipynb",
                                                                    repo_path):
        return repo_path
    return None


class Linker:
    """Rewrites the links of one staged file; records the source pages it needs."""

    def __init__(self, modules: set[str]):
        self.modules = modules          # module names that have an API page
        self.sources: set[str] = set()  # repository files that need a source page

    def target(self, repo_file: str, link: str) -> str:
        if re.match(r"[a-z][a-z0-9+.-]*:", link) or link.startswith("#"):
            return link
        path, _, anchor = link.partition("#")
        here = Path(repo_file).parent
        resolved = (ROOT / here / path).resolve()
        try:
            rel = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            return link  # outside the repository: left for Sphinx to report
        page = staged_name(rel)
        if page is not None:
            new = page
        elif rel.endswith(".py") and rel.startswith("ppo_numpy/"):
            mod = rel[:-3].replace("/", ".").removesuffix(".__init__")
            if mod in self.modules:
                new, anchor = f"api/modules/{mod}.rst", ""
            else:
                new, anchor = self.source(rel), ""
        elif rel.startswith("docs/figures/") and resolved.suffix in (".png", ".svg"):
            new = rel  # a figure of the docs: copied beside them by stage()
        elif resolved.is_file():
            new, anchor = self.source(rel), ""
        else:
            return link  # a folder or a missing file: Sphinx reports it
        staged_here = Path(staged_name(repo_file) or repo_file).parent
        out = Path(_relpath(new, staged_here.as_posix()))
        return out.as_posix() + (f"#{anchor}" if anchor else "")

    def source(self, rel: str) -> str:
        self.sources.add(rel)
        return f"_source/{rel}.md"

    def rewrite(self, repo_file: str, text: str) -> str:
        return _LINK.sub(lambda m: m[1] + self.target(repo_file, m[2]) + m[3], text)


def _relpath(target: str, start: str) -> str:
    import os.path
    return os.path.relpath(target, start or ".")


def stage(src: Path, linker: Linker) -> None:
    (src / "docs").mkdir(parents=True)
    (src / "notebooks").mkdir()
    for md in sorted((ROOT / "docs").glob("*.md")):
        rel = md.relative_to(ROOT).as_posix()
        (src / rel).write_text(linker.rewrite(rel, md.read_text(encoding="utf-8")),
                               encoding="utf-8")
    for nb_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        rel = nb_path.relative_to(ROOT).as_posix()
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                cell["source"] = linker.rewrite(rel, text).splitlines(keepends=True)
        collapse_solutions(nb)
        (src / rel).write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    if (ROOT / "docs" / "figures").is_dir():
        shutil.copytree(ROOT / "docs" / "figures", src / "docs" / "figures")
    home = linker.rewrite("README.md", (ROOT / "README.md").read_text(encoding="utf-8"))
    (src / "index.md").write_text(home + "\n" + sidebar_toctrees(), encoding="utf-8")
    for rel in sorted(linker.sources):
        page = src / "_source" / f"{rel}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        lang = {".py": "python", ".toml": "toml", ".json": "json"}.get(Path(rel).suffix, "text")
        page.write_text(f"---\norphan: true\n---\n\n# `{rel}`\n\nThe file `{rel}` of the "
                        f"repository, as built.\n\n```{{literalinclude}} "
                        f"{_relpath(str(ROOT / rel), str(page.parent))}\n:language: {lang}\n"
                        f":linenos:\n```\n", encoding="utf-8")


_SOLUTION = re.compile(r"\*\*Solution (\d+)\.\*\*\s*")


def collapse_solutions(nb: dict) -> dict:
    """Each solution of ``nb`` (after its ``## Solutions`` heading) in dropdowns that start
    closed, in place; returns ``nb``.

    Jupyter collapses a solution's code (``jupyter.source_hidden``), the site would not: the
    text "**Solution k.** ..." becomes ``<details class="solution"><summary>Solution k
    </summary>`` around the text, and each code cell tagged ``solution`` gets MyST-NB's
    ``hide-cell`` tag (its code and its output in a closed "Show the solution's code"
    dropdown). tests/site_check.py fails on a page where a solution shows.
    """
    after = False
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            after = after or text.startswith("## Solutions")
            m = _SOLUTION.match(text)
            if after and m:
                cell["source"] = (f'<details class="solution">\n<summary>Solution {m[1]}'
                                  f"</summary>\n\n{text[m.end():].rstrip()}\n\n</details>\n")
        elif "solution" in cell.get("metadata", {}).get("tags", []):
            meta = cell["metadata"]
            meta["tags"] = meta["tags"] + ["hide-cell"]
            meta["mystnb"] = {**meta.get("mystnb", {}),
                              "code_prompt_show": "Show the solution's code",
                              "code_prompt_hide": "Hide the solution's code"}
    return nb


def sidebar_toctrees() -> str:
    named = {e for _, entries in SIDEBAR for e in entries}
    extra = [f"docs/{p.stem}" for p in sorted((ROOT / "docs").glob("*.md"))
             if f"docs/{p.stem}" not in named]
    out = []
    for caption, entries in SIDEBAR:
        if caption == EXTRA_DOCS_SECTION:
            entries = entries + extra
        glob = any("*" in e for e in entries)
        out.append("```{toctree}\n:hidden:\n:maxdepth: 2\n:caption: " + caption + "\n"
                   + (":glob:\n" if glob else "") + "\n" + "\n".join(entries) + "\n```\n")
    return "\n".join(out)


# --------------------------------------------------------------------------- API pages

def _kind(obj) -> str:
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "data"


def _title(text: str, char: str = "=") -> str:
    return f"{text}\n{char * len(text)}\n"


def public_names():
    import ppo_numpy
    return [(name, getattr(ppo_numpy, name)) for name in ppo_numpy.__all__]


def home_module(name: str, obj) -> str:
    """The module that defines a public name (for data: the module it is imported from)."""
    if _kind(obj) != "data":
        return obj.__module__
    import ppo_numpy
    src = inspect.getsource(ppo_numpy)
    m = re.search(r"from \.(\w[\w.]*) import (\w+) as " + re.escape(name) + r"\b", src)
    return f"ppo_numpy.{m[1]}"


def api_pages(src: Path) -> set[str]:
    """Write api/; returns the module names that got a page."""
    from ppo_numpy.oracle.presets import PRESETS
    api = src / "api"
    (api / "names").mkdir(parents=True)
    (api / "modules").mkdir()
    (api / "presets").mkdir()
    names = public_names()
    by_module: dict[str, list[str]] = {}
    for name, obj in names:
        by_module.setdefault(home_module(name, obj), []).append(name)
        kind = _kind(obj)
        body = [".. currentmodule:: ppo_numpy", ""]
        if kind == "class":
            body += [f".. autoclass:: {name}", "   :members:", "   :special-members: __call__",
                     ""]
        elif kind == "function":
            body += [f".. autofunction:: {name}", ""]
        else:
            body += [f".. autodata:: {name}", "   :annotation:", ""]
            body += [f"``ppo_numpy.{name}`` = ``{obj!r}``", ""]
        mod = home_module(name, obj)
        body += [f"Defined in :doc:`{mod} </api/modules/{mod}>`"
                 + (" (the [source] link shows its code)." if kind != "data" else "."), ""]
        (api / "names" / f"{name}.rst").write_text(_title(name) + "\n" + "\n".join(body),
                                                    encoding="utf-8")
    for mod in EXTRA_MODULES:
        by_module.setdefault(mod, [])
    modules = dict(sorted(by_module.items()))
    for mod, members in modules.items():
        # a module named like its function (ppo_numpy.gae) is not indexed: one object per name
        clash = mod.rpartition(".")[2] in dict(names)
        lines = [_title(mod), f".. automodule:: {mod}"] + (["   :no-index:"] if clash else [])
        if mod in FULL_MODULES:
            lines += ["   :members:"]
        lines += [""] + [f".. auto{kind}:: {mod}.{n}" + ("\n   :members:" if kind == "class"
                                                            else "") + "\n"
                         for kind, n in MODULE_EXTRAS.get(mod, ())]
        if members:
            lines += ["Public names defined here", "-" * 25, "",
                      ".. currentmodule:: ppo_numpy", "", ".. autosummary::", ""]
            lines += [f"   {n}" for n in members] + [""]
        (api / "modules" / f"{mod}.rst").write_text("\n".join(lines), encoding="utf-8")
    for p in PRESETS.values():
        (api / "presets" / f"{p.name}.rst").write_text(preset_page(p), encoding="utf-8")
    index = [_title("API reference"),
             "Every name of ``ppo_numpy.__all__`` has a page, and so has every oracle "
             "preset of ``ppo_numpy.oracle.presets.PRESETS``. The pages are generated from "
             "the docstrings (numpydoc style): the formula, the parameters with their "
             "shapes, and an example that the test suite runs as a doctest.", "",
             "The package", "-----------", "",
             ".. automodule:: ppo_numpy", "",
             "Public names", "------------", "", ".. currentmodule:: ppo_numpy", "",
             ".. autosummary::", ""]
    index += [f"   {n}" for n, _ in names] + ["",
              "Oracle presets", "--------------", "",
              "``get_preset(name)`` returns one; each page lists its description, the "
              "inputs a case must have, its defaults, the sources it follows and what it "
              "computes, fact by fact (:mod:`ppo_numpy.oracle.presets`).", "",
              ".. list-table::", "   :header-rows: 1", "", "   * - preset", "     - description"]
    for p in PRESETS.values():
        index += [f"   * - :doc:`presets/{p.name}`", f"     - {_rst_text(p.description)}"]
    index += ["", ".. toctree::", "   :hidden:", "   :caption: Public names", ""]
    index += [f"   names/{n}" for n, _ in names]
    index += ["", ".. toctree::", "   :hidden:", "   :caption: Oracle presets", ""]
    index += [f"   presets/{p.name}" for p in PRESETS.values()]
    index += ["", ".. toctree::", "   :hidden:", "   :caption: Modules", ""]
    index += [f"   modules/{m}" for m in modules] + [""]
    (api / "index.rst").write_text("\n".join(index), encoding="utf-8")
    return set(modules)


def _rst_text(s: str) -> str:
    """Plain text safe inside rst: markup characters escaped."""
    return re.sub(r"([*`_|\\])", r"\\\1", s)


def preset_page(p) -> str:
    mod = p.pipeline.__module__
    doc = inspect.getdoc(p.pipeline) or ""
    lines = [_title(f"Preset ``{p.name}``"), _rst_text(p.description), "",
             ".. code-block:: python", "",
             "   from ppo_numpy.oracle.presets import get_preset",
             f"   out = get_preset({p.name!r})(case)   # case: a dict of the inputs below", "",
             "Inputs", "------", "", ", ".join(f"``{n}``" for n in p.input_names), "",
             "Defaults", "--------", "",
             "Each can be overridden per call: ``get_preset(name)(case, key=value)``.", "",
             ".. list-table::", "   :header-rows: 1", "", "   * - parameter", "     - default"]
    for k, v in p.defaults.items():
        lines += [f"   * - ``{k}``", f"     - ``{v!r}``"]
    lines += ["", "Sources", "-------", ""]
    lines += [f"* {_rst_text(s)}" for s in p.sources]
    lines += ["", "What it computes", "----------------", "",
              f"The pipeline ``{mod}.{p.pipeline.__name__}`` "
              f"(module :mod:`{mod}`), fact by fact:", "",
              ".. currentmodule:: ppo_numpy", "", doc, ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- build

def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "build" / "docs"
    src, html, doctrees = out / "src", out / "html", out / "doctrees"
    for d in (src, html, doctrees):
        shutil.rmtree(d, ignore_errors=True)
    start = time.perf_counter()
    src.mkdir(parents=True)
    modules = api_pages(src)
    stage(src, Linker(modules))
    from sphinx.cmd.build import build_main
    code = build_main(["-b", "html", "-W", "--keep-going", "-q", "-E", "-c", str(CONF_DIR),
                       "-d", str(doctrees), str(src), str(html)])
    pages = len(list(html.rglob("*.html")))
    print(f"docs: {pages} HTML pages in {html} ({time.perf_counter() - start:.0f} s)"
          + ("" if code == 0 else f"; FAILED with exit code {code}"))
    return code


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    importlib.invalidate_caches()
    sys.exit(main(sys.argv[1:]))
