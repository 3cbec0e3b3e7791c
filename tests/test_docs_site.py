"""The documentation site (``make docs``): an API page per public name and preset, and every
page rendered in a real browser (tests/site_check.py).

The site is built by ``make docs``, which ``make pytest`` (and so ``make test``) runs first,
warnings as errors. The browser tests skip only where no Chromium is installed
(``apt-get install -y chromium``); a missing site fails them, with the command to build it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

import ppo_numpy
from ppo_numpy.oracle.presets import PRESETS
from tests import site_check

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "build" / "docs" / "html"
BROWSER = site_check.find_browser()
needs_browser = pytest.mark.skipif(BROWSER is None,
                                   reason="no Chromium installed (apt-get install -y chromium)")


def built_site() -> Path:
    assert (HTML / "index.html").is_file(), f"no site in {HTML}: build it with `make docs`"
    return HTML


def test_every_public_name_and_preset_has_an_api_page():
    html = built_site()
    api = html / "api"
    missing = ([n for n in ppo_numpy.__all__ if not (api / "names" / f"{n}.html").is_file()]
               + [p for p in PRESETS if not (api / "presets" / f"{p}.html").is_file()])
    assert not missing, f"no API page for {', '.join(missing)} in {html / 'api'}"


def test_every_notebook_and_docs_page_is_in_the_site():
    html = built_site()
    pages = ([f"notebooks/{p.stem}.html" for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
             + [f"docs/{p.stem}.html" for p in sorted((ROOT / "docs").glob("*.md"))])
    missing = [p for p in pages if not (html / p).is_file()]
    assert not missing, f"not in the site: {', '.join(missing)}"


@needs_browser
def test_every_page_renders_in_a_browser():
    report = site_check.check_site(built_site(), screenshots=HTML.parent / "screenshots",
                                   binary=BROWSER)
    assert report.pages == len(list(HTML.rglob("*.html")))
    assert report.math_pages > 0 and report.images > 0 and report.links > 0, str(report)
    assert not report.problems, str(report)
    assert len(report.screenshots) == len(site_check.SCREENSHOTS)
    assert all(p.stat().st_size > 0 for p in report.screenshots)


@needs_browser
def test_the_browser_check_sees_what_is_broken(tmp_path):
    page = ("<html><head><title>{title}</title></head><body><article>{body}</article>"
            "</body></html>")
    (tmp_path / "img.png").write_bytes(b"not a png")
    (tmp_path / "index.html").write_text(page.format(
        title="home", body='<h1 id="top">ok</h1><a href="other.html#here">ok</a>'))
    (tmp_path / "other.html").write_text(page.format(
        title="other", body='<p id="here">raw $$x^2$$ and \\frac{1}{2} here</p>'
        '<span class="math">\\(x\\)</span><img src="img.png">'
        '<a href="gone.html">1</a><a href="index.html#nowhere">2</a>'
        '<script>throw new Error("boom")</script>'))
    (tmp_path / "inline.html").write_text(page.format(title="inline", body="<p>cost $y$</p>"))
    wide = "<table><tr><td>" + "x" * 400 + "</td></tr></table>"
    (tmp_path / "wide.html").write_text(page.format(
        title="wide", body=f'<div style="width: 300px">{wide}'
        f'<div style="overflow-x: auto">{wide.replace("x", "y")}</div></div>'))
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "sol.html").write_text(page.format(
        title="solutions", body='<details class="solution" open><summary>Solution 1</summary>'
        '<p>two</p></details><details class="solution"><summary>Solution 2</summary></details>'
        '<p><strong>Solution 3.</strong> shown</p>'
        '<details><summary>x</summary><p><strong>Solution 4.</strong> hidden</p></details>'
        '<div class="cell tag_solution"><div class="cell_input">print(5)</div></div>'
        '<details class="hide"><summary>s</summary><div class="cell tag_solution">'
        '<div class="cell_input">print(6)</div></div></details>'))
    (tmp_path / "plain.html").write_text("<html><body>no title, no article</body></html>")
    # what Markdown made of README's "r~_t ... delta_t = r~_t + gamma V(s_{t+1})" (issue 39),
    # beside prose emphasis that is fine: between spaces, in brackets, before a comma
    (tmp_path / "formula.html").write_text(page.format(
        title="formula", body="<p>rewards r~<em>t, the TD error delta_t = r~t + gamma V(s</em>"
        "{t+1}) - V(s_t)</p><p>the <em>state</em> before (<em>exactly</em>), <strong>Goal."
        "</strong> one; <em>once</em>, twice</p>"))
    # the site's own MathJax: notebook 15's first formula as it was, and a plain \text
    (tmp_path / "mathjax").symlink_to(built_site() / "_static" / "mathjax")
    (tmp_path / "tex.html").write_text(page.format(
        title="tex", body='<script defer src="mathjax/tex-chtml.js"></script>'
        '<span class="math">\\(\\exp(\\text{logp\\_old}_t - \\text{logp\\_rollout}_t)'
        '\\)</span>'))
    (tmp_path / "fine_tex.html").write_text(page.format(
        title="fine tex", body='<script defer src="mathjax/tex-chtml.js"></script>'
        '<span class="math">\\(\\log \\pi_{\\theta_\\text{old}}(y_t) - \\text{logp}'
        '\\_\\text{old}\\)</span>'))
    report = site_check.check_site(tmp_path, binary=BROWSER,
                                   pages=["index.html", "other.html", "inline.html", "plain.html",
                                          "absent.html", "wide.html", "notebooks/sol.html",
                                          "formula.html", "tex.html", "fine_tex.html"])
    text = "\n".join(report.problems)
    for expected in ("other.html: raw TeX in the text: '$$'",
                     r"other.html: raw TeX in the text: '\\frac'",
                     "inline.html: raw TeX in the text: '$y$'",
                     "other.html: 1 of 1 math elements not typeset",
                     "other.html: image not loaded", "other.html: JavaScript error",
                     "other.html: link gone.html: no such file in the site",
                     "other.html: link index.html#nowhere: no element with id 'nowhere'",
                     "plain.html: no title or no article", "absent.html: HTTP 404",
                     "wide.html: cut at the article's right edge (does not scroll): 'table xxx",
                     "notebooks/sol.html: solution shown open: 'Solution 1'",
                     "notebooks/sol.html: solution shown open: 'Solution 3.'",
                     "notebooks/sol.html: 1 solution code cell(s) shown open",
                     "notebooks/sol.html: article",
                     "formula.html: formula text rendered as emphasis: 'rewards r~<em>t, the",
                     "tex.html: a backslash shown as text inside math (escaped underscore?): "
                     "'\\\\exp(\\\\text{logp\\\\_old}"):
        assert expected in text, f"the check missed {expected!r}; it reported:\n{text}"
    assert not any(p.startswith(("index.html", "fine_tex.html")) for p in report.problems), text
    # one flagged emphasis of the five: the prose emphasis is not taken for a formula
    assert text.count("formula.html:") == 1 and "tex.html: 1 of" not in text, text
    # the table that scrolls, the closed solutions 2 and 4, the collapsed code cell: fine
    assert "table yyy" not in text and "Solution 2" not in text and "Solution 4" not in text
    assert text.count("solution code cell") == 1


def _build_module():
    spec = importlib.util.spec_from_file_location("site_build", ROOT / "docs" / "site" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_solutions_are_staged_in_closed_dropdowns():
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["**Solution 1.** not yet: above"]},
        {"cell_type": "markdown", "metadata": {}, "source": ["## Solutions\n"]},
        {"cell_type": "markdown", "metadata": {}, "source": ["**Solution 1.** It is $1/2$.\n"]},
        {"cell_type": "code", "metadata": {"tags": ["solution"]}, "source": ["assert 1"]},
        {"cell_type": "code", "metadata": {}, "source": ["x = 1"]},
    ]}
    cells = _build_module().collapse_solutions(nb)["cells"]
    assert cells[0]["source"] == ["**Solution 1.** not yet: above"]   # before the heading
    assert cells[2]["source"] == ('<details class="solution">\n<summary>Solution 1</summary>'
                                  "\n\nIt is $1/2$.\n\n</details>\n")
    assert cells[3]["metadata"]["tags"] == ["solution", "hide-cell"]
    assert cells[3]["metadata"]["mystnb"]["code_prompt_show"] == "Show the solution's code"
    assert cells[4]["metadata"] == {}


def test_search_titles_have_no_raw_tex():
    sys.path.insert(0, str(ROOT / "docs" / "site"))
    try:
        from conf import plain_title
    finally:
        sys.path.remove(str(ROOT / "docs" / "site"))
    assert plain_title(r"01 · The probability ratio \rho_t") == "01 · The probability ratio ρ_t"
    assert plain_title(r"Sweeping \lambda, \epsilon = 0.2") == "Sweeping λ, ε = 0.2"
    assert plain_title(r"the $\hat A$ of \pi_\text{ref}") == "the Â of π_ref"
    index = (built_site() / "searchindex.js").read_text(encoding="utf-8")
    assert "\\\\rho" not in index and "\\\\delta" not in index, "raw TeX in searchindex.js"


#: a concept's name -> its notebook, which the site's search must list first
CONCEPT_NOTEBOOKS = {"gae": "05_gae", "clipping": "02_clipping", "grpo": "13_from_ppo_to_grpo",
                     "td errors": "04_td_errors",
                     "transformer": "14_a_tiny_transformer_learns_to_add",
                     "loss aggregation": "07_loss_aggregation",
                     # issue 39: a notebook whose heading holds the words before the pages
                     # that mention them most, and the API page of the function of that name
                     "importance sampling": "15_the_third_policy_sampler_and_trainer",
                     "clipped surrogate": "02_clipping"}


@needs_browser
def test_search_lists_the_concepts_notebook_first_with_plain_titles():
    results = site_check.search(built_site(), list(CONCEPT_NOTEBOOKS) + ["rho", "delta"],
                                binary=BROWSER)
    for query, stem in CONCEPT_NOTEBOOKS.items():
        hrefs = [href for href, _, _ in results[query]]
        assert hrefs and hrefs[0] == f"notebooks/{stem}.html", (query, hrefs[:5])
    titles = [title for found in results.values() for _, title, _ in found]
    assert any("ρ_t" in t for t in titles) and any("δ_t" in t for t in titles), titles[:20]
    assert not [t for t in titles if "\\" in t or "$" in t]
    # the summaries: 05's mentions "every \\(\\delta\\)" and "\\(\\lambda\\)", shown as letters
    summaries = [text for found in results.values() for _, _, text in found]
    gae = results["gae"][0][2]
    assert "δ" in gae and "λ" in gae and "\\" not in gae, gae
    assert not [t for t in summaries if "\\(" in t or "\\delta" in t][:3]


def test_the_search_pages_tex_table_is_conf_pys():
    sys.path.insert(0, str(ROOT / "docs" / "site"))
    try:
        from conf import _TEX_TEXT
    finally:
        sys.path.remove(str(ROOT / "docs" / "site"))
    js = (ROOT / "docs" / "site" / "search_scorer.js").read_text(encoding="utf-8")
    table = re.search(r"const TEX_TEXT = (\{.*?\});", js, re.S)[1]
    assert json.loads(table) == _TEX_TEXT
