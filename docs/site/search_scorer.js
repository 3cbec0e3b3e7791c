/* docs/site/conf.py: html_search_scorer (inlined into searchtools.js by Sphinx). Sphinx's default scores, plus one rule: a search
   for a concept's name puts the concept's own notebook first. A notebook is the concept's
   own when every word of the query is a word of its file name (05_gae: "gae") or of its
   title ("05 · Generalized Advantage Estimation": "advantage estimation"); without the
   rule the API pages of the function of the same name, and the pages that mention it
   most, come first (issue 26: notebook 05 was ninth for "gae"). */
var Scorer = {
  score: (result) => {
    const [docname, title, , , score] = result;
    const query = new URLSearchParams(window.location.search).get("q") || "";
    const words = query.toLowerCase().split(/[^a-z0-9]+/).filter((w) => w.length > 1);
    if (!words.length || !docname.startsWith("notebooks/")) return score;
    const own = new Set(
      (docname.split("/").pop() + " " + (title || "").split(">")[0])
        .toLowerCase().split(/[^a-z0-9]+/).filter(Boolean));
    return words.every((w) => own.has(w)) ? score + 1000 : score;
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

/* The summary under each result is the page's text before MathJax has typeset it, so its
   math shows as TeX ("\(\delta_t\)"). Show the letters instead, as docs/site/conf.py's
   plain_title does for the titles in searchindex.js; TEX_TEXT is conf.py's _TEX_TEXT
   (tests/test_docs_site.py checks that the two tables agree). */
(() => {
  const TEX_TEXT = {"\\rho": "ρ", "\\delta": "δ", "\\beta": "β", "\\gamma": "γ",
                    "\\lambda": "λ", "\\epsilon": "ε", "\\varepsilon": "ε", "\\pi": "π",
                    "\\theta": "θ", "\\sigma": "σ", "\\mu": "μ", "\\hat A": "Â",
                    "\\hat{A}": "Â"};
  const keys = Object.keys(TEX_TEXT).sort((a, b) => b.length - a.length);
  const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const plain = (text) => {
    for (const k of keys) text = text.replace(new RegExp(escape(k) + "(?![A-Za-z])", "g"), TEX_TEXT[k]);
    return text.replace(/\\(?:text|mathrm)\{([^{}]*)\}/g, "$1")
               .replace(/\\[()[\]]/g, "").replace(/\$/g, "");
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
