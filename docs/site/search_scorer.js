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
