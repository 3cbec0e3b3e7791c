/* docs/site/conf.py: html_search_scorer (inlined into searchtools.js by Sphinx). Sphinx's
   default scores, plus weights for where the query's words stand. Sphinx scores a page by
   the best of its words alone (15 for a word in any title, 5 in the text), so a page that
   mentions "importance" and "sampling" often ranked above the notebook about them (issue 39:
   notebook 15 was 11th of 26 for "importance sampling", rollout_importance_weights 23rd).
   Added to Sphinx's score, with the query's words stemmed as Sphinx stems them:
     +2000 a notebook, when its title or one of its headings holds every word (the lesson
           on the concept first: a learner searches for a concept, not for a function);
     +1000 every word in the page's title (a notebook's file name counts: 05_gae, "gae");
     +500  every word in one of its headings (any section title of the page);
     +100 x the share of the words in its title, +50 x the share in its headings.
   So notebooks whose title or a heading holds the words come first (those with it in the
   title before those with it in a heading), then the other pages in the same order
   (issue 26: notebook 05 was ninth for "gae"). tests/test_docs_site.py checks the first
   result for each concept. */
var Scorer = (() => {
  let cache = null;
  const words = (text) => (text || "").toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
  const stems = (text) => {
    const stemmer = new Stemmer();
    return new Set(words(text).map((w) => stemmer.stemWord(w)));
  };
  // per query: its stemmed words; per page: the stems of its title and of each heading
  const prepare = () => {
    const query = new URLSearchParams(window.location.search).get("q") || "";
    if (cache && cache.query === query) return cache;
    const stemmer = new Stemmer();
    const terms = [...new Set(words(query).filter((w) => !stopwords.has(w) && !/^\d+$/.test(w))
                                          .map((w) => stemmer.stemWord(w)))];
    const index = Search._index;
    const headings = new Map();
    for (const [title, places] of Object.entries(index.alltitles || {}))
      for (const [file] of places) {
        if (!headings.has(file)) headings.set(file, []);
        headings.get(file).push(stems(title));
      }
    const files = new Map(index.docnames.map((name, i) => [name, i]));
    cache = {query, terms, headings, files, titles: new Map()};
    return cache;
  };
  const share = (terms, set) => terms.filter((t) => set.has(t)).length / terms.length;
  return {
    score: (result) => {
      const [docname, , , , score] = result;
      const {terms, headings, files, titles} = prepare();
      if (!terms.length || !files.has(docname)) return score;
      const file = files.get(docname);
      if (!titles.has(file)) {
        const own = (docname.startsWith("notebooks/") ? docname.split("/").pop() + " " : "")
                    + Search._index.titles[file];
        titles.set(file, stems(own));
      }
      const title = titles.get(file);
      const heads = headings.get(file) || [];
      const inTitle = share(terms, title) === 1;
      const inHeading = heads.some((h) => share(terms, h) === 1);
      const anyHead = new Set(heads.flatMap((h) => [...h]));
      return score + (docname.startsWith("notebooks/") && (inTitle || inHeading) ? 2000 : 0)
             + (inTitle ? 1000 : 0) + (inHeading ? 500 : 0)
             + 100 * share(terms, title) + 50 * share(terms, anyHead);
    },
    objNameMatch: 11,
    objPartialMatch: 6,
    objPrio: {0: 15, 1: 5, 2: -5},
    objPrioDefault: 0,
    title: 15,
    partialTitle: 7,
    term: 5,
    partialTerm: 2,
  };
})();

/* The summary under each result is the page's text before MathJax has typeset it, so its
   math shows as TeX ("\(\delta_t\)"). Show the letters instead, as docs/site/conf.py's
   plain_title does for the titles in searchindex.js; TEX_TEXT is conf.py's _TEX_TEXT
   (tests/test_docs_site.py checks that the two tables agree). */
(() => {
  const TEX_TEXT = {"\\rho": "ρ", "\\delta": "δ", "\\beta": "β", "\\gamma": "γ",
                    "\\lambda": "λ", "\\epsilon": "ε", "\\varepsilon": "ε", "\\pi": "π",
                    "\\theta": "θ", "\\sigma": "σ", "\\mu": "μ", "\\hat A": "Â",
                    "\\hat{A}": "Â", "\\tilde r": "r̃", "\\partial": "∂", "\\cdot": "·", "\\sum": "∑",
                    "\\prod": "∏", "\\le": "≤", "\\ge": "≥", "\\approx": "≈",
                    "\\infty": "∞", "\\alpha": "α", "\\nabla": "∇", "\\mathbb{E}": "E",
                    "\\qquad": " ", "\\quad": " ",
                    "\\sim": "~", "\\mid": "|", "\\times": "×", "\\in": "∈"};
  const keys = Object.keys(TEX_TEXT).sort((a, b) => b.length - a.length);
  const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const plain = (text) => {
    for (const k of keys) text = text.replace(new RegExp(escape(k) + "(?![A-Za-z])", "g"), TEX_TEXT[k]);
    // then what is left of the TeX: \text{x} -> x, spacing -> a space, \log -> log
    return text.replace(/\\(?:text|mathrm|operatorname|mathcal|mathbf|mathtt)\{([^{}]*)\}/g, "$1")
               .replace(/\\[()[\]]/g, "").replace(/\$/g, "")
               .replace(/\\[,;!: ]/g, " ").replace(/\\_/g, "_")
               .replace(/\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])/g, "")
               .replace(/\\([A-Za-z]+)/g, "$1");
  };
  // the highlighting of the query's words splits the text ("\\" | "delta"): rewrite the
  // paragraph's whole text, then highlight the words again (searchtools.js's _highlightText)
  const fix = (root) => root.querySelectorAll("p.context").forEach((p) => {
    const text = p.textContent, clean = plain(text);
    if (clean === text) return;
    p.textContent = clean;
    const query = new URLSearchParams(window.location.search).get("q") || "";
    if (typeof _highlightText === "function")
      query.split(/\s+/).filter(Boolean).forEach((w) => _highlightText(p, w, "highlighted"));
  });
  const watch = () => {
    const results = document.getElementById("search-results");
    if (!results) return;
    fix(results);
    new MutationObserver(() => fix(results)).observe(results, {childList: true, subtree: true});
  };
  // the script may run before or after the document is parsed
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
})();
