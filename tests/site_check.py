"""Open every page of the built documentation site in headless Chromium and check it rendered.

    python -m tests.site_check build/docs/html      (make docs-check)

The site is served on 127.0.0.1 by a thread of this process; Chromium is driven over the
DevTools protocol (a websocket; websocket-client is in requirements-docs.txt). For every
``*.html`` page of the site:

* the page loads with HTTP 200, has a title and an article, and throws no JavaScript error;
* math is typeset: every ``.math`` element Sphinx wrote holds MathJax output
  (``mjx-container``), MathJax reports no TeX error (``mjx-merror``), and no raw TeX is
  left in the text outside code (``$$``, ``$x$``, ``\\begin{``, ``\\frac``);
* no formula is rendered as emphasis: an ``<em>`` or ``<strong>`` outside code glued to
  a letter, digit or bracket (``r~<em>t + gamma V(s</em>{t+1}``, what Markdown makes of
  underscores in a formula written as text), and no backslash is shown as text inside
  typeset math (``\\text{logp\\_old}`` shows ``logp\\_old``: MathJax prints the
  argument of ``\\text`` as it stands);
* every image loaded (``naturalWidth > 0``);
* every internal link resolves: its file exists in the site and its ``#anchor``, if any,
  is an id of that page (checked after all pages are read);
* nothing is cut at the article's right edge: a table or a block of code wider than the
  article scrolls inside it (its own ``overflow-x`` or an ancestor's is ``auto``/``scroll``);
* no solution of an exercise shows: the text of "Solution k" and the code of every cell
  tagged ``solution`` sit in a closed ``<details>`` (docs/site/build.py puts them there);
* the article, where a notebook's figures are shown, is ``SITE_IMAGE_WIDTH_PX`` wide
  (``ppo_numpy.plotting.style``: tests/test_plotting_readable.py measures the figures'
  text at that width).

:func:`search` types a query into the site's search page and returns the results in order
(the tests check that a concept's notebook comes first and that no title shows raw TeX).

Screenshots of the home page, the objective page, notebooks 05 and 15 and one API page go to
``<site>/../screenshots``. The browser is Debian's Chromium (``apt-get install -y
chromium``); :func:`find_browser` returns None where none is installed (the test then
skips).
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ppo_numpy.plotting.style import SITE_IMAGE_WIDTH_PX

# what this machine's Chromium needs to start headless and talk only to 127.0.0.1
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--remote-allow-origins=*", "--remote-debugging-port=0"]

# (file name, page, scroll to the first element matching this selector first, or None)
SCREENSHOTS = [("home.png", "index.html", None),
               ("objective.png", "docs/objective.html", None),
               ("notebook.png", "notebooks/05_gae.html", "div.cell_output img"),
               ("notebook15.png", "notebooks/15_the_third_policy_sampler_and_trainer.html",
                "div.math"),
               ("api.png", "api/names/gae.html", None)]

# evaluated in each page once it has loaded; returns what the checks need
_PAGE_JS = r"""
(async () => {
  const wait = (ms) => new Promise(r => setTimeout(r, ms));
  const maths = Array.from(document.querySelectorAll('.math'));
  if (maths.length && document.querySelector('script[src*="mathjax"]')) {
    for (let i = 0; i < 200 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
      await wait(25);
    if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  }
  const imgs = Array.from(document.images);
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.race([wait(10000), Promise.all(imgs.map(i => i.complete ? 0 :
      new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); })))]);
  const skip = 'pre, code, script, style, mjx-container, textarea, .highlight, .math';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let text = '';
  for (let n = walker.nextNode(); n; n = walker.nextNode())
    if (!n.parentElement.closest(skip)) text += n.nodeValue + ' ';
  const raw = [/\$\$/, /\$[^$\s](?:[^$\n]*[^$\s\\])?\$/, /\\begin\{/, /\\frac/]
      .map(re => (text.match(re) || [null])[0]).filter(Boolean);
  // formula text that Markdown took for emphasis: "r~_t ... V(s_{t+1})" puts an <em> between
  // "r~" and "{t+1}"; prose emphasis stands between spaces or punctuation, not glued to a
  // letter, digit or bracket of a formula
  const glued = Array.from(document.querySelectorAll('article em, article strong'))
      .filter(e => !e.closest(skip)).filter(e => {
    const prev = e.previousSibling, next = e.nextSibling;
    const before = prev && prev.nodeType === 3 ? prev.nodeValue.slice(-1) : '';
    const after = next && next.nodeType === 3 ? next.nodeValue.slice(0, 1) : '';
    return /[A-Za-z0-9~_^})\]]/.test(before) || /[A-Za-z0-9_{(]/.test(after);
  }).map(e => ((e.previousSibling || {}).nodeValue || '').slice(-10) + '<' +
      e.tagName.toLowerCase() + '>' + e.textContent.slice(0, 30));
  // TeX that MathJax typeset as text: inside \text{...} a backslash is printed as it stands
  // (\text{logp\_old} shows "logp\_old"); read from the MathML of each typeset formula
  const texInText = [];
  if (window.MathJax && MathJax.startup && MathJax.startup.document && MathJax.startup.toMML)
    for (const item of MathJax.startup.document.math) {
      const mml = MathJax.startup.toMML(item.root);
      if ([...mml.matchAll(/<mtext[^>]*>([^<]*)<\/mtext>/g)].some(m => m[1].includes('\\')))
        texInText.push(item.math.slice(0, 60));
    }
  const art = document.querySelector('article');
  const artBox = art ? art.getBoundingClientRect() : null;
  const scrolls = (e) => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const cut = !art ? [] : Array.from(art.querySelectorAll('table, pre')).filter(e => {
    const box = e.getBoundingClientRect();
    if (!box.width || e.closest('details:not([open])')) return false;
    for (let p = e; p && p !== art; p = p.parentElement)
      if (scrolls(p) && p.getBoundingClientRect().right <= artBox.right + 1) return false;
    return box.right > artBox.right + 1 || e.scrollWidth > e.clientWidth + 1;
  }).map(e => e.tagName.toLowerCase() + ' ' + (e.textContent || '').trim().slice(0, 40));
  const shown = (e) => e.getClientRects().length > 0 && !e.closest('details:not([open])');
  const solutions = Array.from(document.querySelectorAll('details.solution, strong'))
      .filter(e => /^Solution \d+\.?$/.test(e.tagName === 'DETAILS'
          ? (e.querySelector('summary') || {}).textContent || '' : e.textContent.trim()))
      .map(e => e.tagName === 'DETAILS' ? e.querySelector('summary') : e);
  const openSolutions = solutions.filter(e => e.tagName === 'SUMMARY'
      ? e.parentElement.open : shown(e)).map(e => e.textContent.trim());
  const openCode = Array.from(document.querySelectorAll('.tag_solution .cell_input'))
      .filter(shown).length;
  const nav = performance.getEntriesByType('navigation')[0];
  return {
    status: nav ? nav.responseStatus : 0,
    title: document.title,
    article: !!document.querySelector('article'),
    math: maths.length,
    untypeset: maths.filter(m => !m.querySelector('mjx-container')).length,
    merror: document.querySelectorAll('mjx-merror').length,
    raw_tex: raw,
    emphasis_in_formula: glued,
    tex_in_text: texInText,
    images: imgs.length,
    broken_images: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href)
        .filter(h => h.startsWith(location.origin)),
    ids: Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.name),
    article_width: artBox ? Math.round(artBox.width) : 0,
    cut: cut,
    solutions: solutions.length,
    open_solutions: openSolutions,
    open_solution_code: openCode,
  };
})()
"""


def find_browser() -> str | None:
    """Path of an installed Chromium (Debian's `chromium`), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Browser:
    """One headless Chromium and one tab, driven by DevTools protocol commands."""

    def __init__(self, binary: str):
        import websocket  # websocket-client (requirements-docs.txt)
        self.profile = tempfile.mkdtemp(prefix="site-check-chromium-")
        self.proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
                                      "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        for _ in range(300):
            if port_file.exists() and len(port_file.read_text().split()) >= 2:
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"{binary} exited with code {self.proc.returncode}")
            time.sleep(0.05)
        else:
            raise RuntimeError(f"{binary} did not open its DevTools port")
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                  deviceScaleFactor=1, mobile=False)

    def send(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for i, e in enumerate(self.events):
                if e.get("method") == method:
                    return self.events.pop(i)
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)

    def open(self, url: str) -> tuple[dict, list[str]]:
        """Navigate, wait for the load event, run the page checks; (facts, JS errors)."""
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        res = self.send("Runtime.evaluate", expression=_PAGE_JS, awaitPromise=True,
                        returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{url}: page check failed: {res['exceptionDetails']}")
        errors = [e["params"]["exceptionDetails"].get("exception", {}).get("description")
                  or e["params"]["exceptionDetails"].get("text", "")
                  for e in self.events if e.get("method") == "Runtime.exceptionThrown"]
        return res["result"]["value"], errors

    def screenshot(self, path: Path, scroll_to: str | None = None) -> None:
        if scroll_to:
            self.send("Runtime.evaluate", expression=(
                f"document.querySelector({json.dumps(scroll_to)})"
                "?.scrollIntoView({block: 'center'})"))
            time.sleep(0.3)
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


@dataclass
class Report:
    pages: int = 0
    math_pages: int = 0
    images: int = 0
    links: int = 0
    problems: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)

    def __str__(self) -> str:
        head = (f"site check: {self.pages} pages in headless Chromium, {self.math_pages} with "
                f"math, {self.images} images, {self.links} internal links; "
                f"{len(self.problems)} problem(s)")
        return "\n".join([head, *("  " + p for p in self.problems)])


def check_site(html: Path, screenshots: Path | None = None, binary: str | None = None,
               pages: list[str] | None = None) -> Report:
    """Open every page of the site in ``html`` (or only ``pages``) and check it."""
    html = Path(html).resolve()
    binary = binary or find_browser()
    if binary is None:
        raise RuntimeError("no Chromium installed: apt-get install -y chromium")
    pages = pages or sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html"))
    handler = functools.partial(_Quiet, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    report = Report()
    ids: dict[str, set[str]] = {}
    links: dict[str, list[str]] = {}
    browser = Browser(binary)
    try:
        for page in pages:
            facts, errors = browser.open(base + page)
            report.pages += 1
            report.math_pages += facts["math"] > 0
            report.images += facts["images"]
            bad = []
            if facts["status"] != 200:
                bad.append(f"HTTP {facts['status']}")
            if not facts["title"] or not facts["article"]:
                bad.append("no title or no article: not a page of the site")
            bad += [f"JavaScript error: {e}" for e in errors]
            if facts["untypeset"]:
                bad.append(f"{facts['untypeset']} of {facts['math']} math elements not typeset")
            if facts["merror"]:
                bad.append(f"{facts['merror']} MathJax error(s) (bad TeX)")
            bad += [f"raw TeX in the text: {t!r}" for t in facts["raw_tex"]]
            bad += [f"formula text rendered as emphasis: {t!r}"
                    for t in facts["emphasis_in_formula"]]
            bad += [f"a backslash shown as text inside math (escaped underscore?): {t!r}"
                    for t in facts["tex_in_text"]]
            bad += [f"image not loaded: {src}" for src in facts["broken_images"]]
            bad += [f"cut at the article's right edge (does not scroll): {c!r}"
                    for c in facts["cut"]]
            bad += [f"solution shown open: {t!r}" for t in facts["open_solutions"]]
            if facts["open_solution_code"]:
                bad.append(f"{facts['open_solution_code']} solution code cell(s) shown open")
            if page.startswith("notebooks/") and facts["article_width"] != SITE_IMAGE_WIDTH_PX:
                bad.append(f"article {facts['article_width']} px wide, expected "
                           f"SITE_IMAGE_WIDTH_PX = {SITE_IMAGE_WIDTH_PX} (the figures' check)")
            report.problems += [f"{page}: {b}" for b in bad]
            ids[page] = set(facts["ids"])
            links[page] = facts["links"]
        for page, hrefs in links.items():
            for href in hrefs:
                report.links += 1
                problem = _link_problem(href[len(base):], html, ids)
                if problem:
                    report.problems.append(f"{page}: link {href[len(base):]}: {problem}")
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)
            for name, page, scroll in SCREENSHOTS:
                if (html / page).exists():
                    browser.open(base + page)
                    browser.screenshot(screenshots / name, scroll)
                    report.screenshots.append(screenshots / name)
    finally:
        browser.close()
        server.shutdown()
        server.server_close()
    return report


_SEARCH_JS = r"""
(async () => {
  const wait = (ms) => new Promise(r => setTimeout(r, ms));
  for (let i = 0; i < 400; i++) {
    const items = document.querySelectorAll('#search-results li');
    const done = document.querySelector('#search-results p.search-summary, #search-results h2');
    if (items.length && done && !/Searching|Preparing/i.test(done.textContent)) break;
    await wait(25);
  }
  await wait(300);  // the summaries are filled in after the list
  return Array.from(document.querySelectorAll('#search-results li')).map(li => {
    const a = li.querySelector('a');
    const context = li.querySelector('p.context');
    return [a.getAttribute('href'), a.textContent.trim(), context ? context.textContent : ''];
  });
})()
"""


def search(html: Path, queries: list[str], binary: str | None = None) -> dict[str, list]:
    """``{query: [(href, title, summary), ...]}``: the site's search page's results, in order."""
    html = Path(html).resolve()
    binary = binary or find_browser()
    if binary is None:
        raise RuntimeError("no Chromium installed: apt-get install -y chromium")
    handler = functools.partial(_Quiet, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    browser = Browser(binary)
    out = {}
    try:
        for query in queries:
            browser.events.clear()
            browser.send("Page.navigate",
                         url=base + "search.html?q=" + urllib.parse.quote(query))
            browser.wait_event("Page.loadEventFired")
            res = browser.send("Runtime.evaluate", expression=_SEARCH_JS, awaitPromise=True,
                               returnByValue=True)
            out[query] = [tuple(r) for r in res["result"]["value"]]
    finally:
        browser.close()
        server.shutdown()
        server.server_close()
    return out


def _link_problem(rel: str, html: Path, ids: dict[str, set[str]]) -> str | None:
    """Why the internal link ``rel`` (relative to the site root) does not resolve, or None."""
    parts = urllib.parse.urlsplit(rel)
    path = urllib.parse.unquote(parts.path)
    if path == "" or path.endswith("/"):
        path += "index.html"
    if not (html / path).is_file():
        return "no such file in the site"
    anchor = urllib.parse.unquote(parts.fragment)
    if anchor and path in ids and anchor not in ids[path]:
        return f"no element with id {anchor!r} on that page"
    return None


def main(argv: list[str]) -> int:
    html = Path(argv[0] if argv else "build/docs/html")
    if not (html / "index.html").is_file():
        print(f"site check: no site in {html}; build it with `make docs`", file=sys.stderr)
        return 2
    start = time.perf_counter()
    report = check_site(html, screenshots=html.parent / "screenshots")
    print(report)
    print(f"screenshots: {', '.join(os.fspath(p) for p in report.screenshots)} "
          f"({time.perf_counter() - start:.0f} s)")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
