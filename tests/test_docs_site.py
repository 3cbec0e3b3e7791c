"""The documentation site (``make docs``): an API page per public name and preset, and every
page rendered in a real browser (tests/site_check.py).

The site is built by ``make docs``, which ``make pytest`` (and so ``make test``) runs first,
warnings as errors. The browser tests skip only where no Chromium is installed
(``apt-get install -y chromium``); a missing site fails them, with the command to build it.
"""

from __future__ import annotations

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
    assert len(report.screenshots) == 3 and all(p.stat().st_size > 0 for p in report.screenshots)


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
    (tmp_path / "plain.html").write_text("<html><body>no title, no article</body></html>")
    report = site_check.check_site(tmp_path, binary=BROWSER,
                                   pages=["index.html", "other.html", "inline.html", "plain.html",
                                          "absent.html"])
    text = "\n".join(report.problems)
    for expected in ("other.html: raw TeX in the text: '$$'",
                     r"other.html: raw TeX in the text: '\\frac'",
                     "inline.html: raw TeX in the text: '$y$'",
                     "other.html: 1 of 1 math elements not typeset",
                     "other.html: image not loaded", "other.html: JavaScript error",
                     "other.html: link gone.html: no such file in the site",
                     "other.html: link index.html#nowhere: no element with id 'nowhere'",
                     "plain.html: no title or no article", "absent.html: HTTP 404"):
        assert expected in text, f"the check missed {expected!r}; it reported:\n{text}"
    assert not any(p.startswith("index.html") for p in report.problems), text
