// A lesson's code cell or output that scrolls (a long line, a tall output), or a table wider than
// a narrow window, can be scrolled from the keyboard: it is made focusable (tabindex 0) while it
// scrolls, and only then, so that a page of short cells is not a long row of tab stops.
// mkdocs-material does the same for the code blocks of the Markdown pages, but not for
// mkdocs-jupyter's cells nor for its own tables. Checked by tests/test_site_accessible.py
// (axe-core's scrollable-region-focusable rule).
(() => {
  const CANDIDATES = [
    ".jupyter-wrapper :is(.highlight-ipynb, .jp-OutputArea, .jp-OutputArea-output, pre)",
    ".md-typeset__scrollwrap",
  ].join(", ");
  const MARK = "echoqScrolls"; // set on what this script made focusable, so it only undoes its own

  const scrolls = (element) => {
    const style = getComputedStyle(element);
    const x = /auto|scroll/.test(style.overflowX) && element.scrollWidth > element.clientWidth;
    const y = /auto|scroll/.test(style.overflowY) && element.scrollHeight > element.clientHeight;
    return x || y;
  };

  const mark = (element) => {
    if (scrolls(element)) {
      if (!element.hasAttribute("tabindex")) {
        element.setAttribute("tabindex", "0");
        element.dataset[MARK] = "";
      }
    } else if (MARK in element.dataset) {
      element.removeAttribute("tabindex");
      delete element.dataset[MARK];
    }
  };

  // Each candidate is marked when first seen and again whenever it changes size (a narrower
  // window, a picture that loaded). Candidates are looked for at once, so the page is right
  // before its load event, and again once mkdocs-material has wrapped the tables (its own
  // script does that when the document is loaded).
  const observer = new ResizeObserver((entries) => entries.forEach((entry) => mark(entry.target)));
  const seen = new WeakSet();
  const scan = () => {
    for (const element of document.querySelectorAll(CANDIDATES)) {
      mark(element);
      if (!seen.has(element)) {
        seen.add(element);
        observer.observe(element);
      }
    }
  };
  scan();
  document.addEventListener("DOMContentLoaded", scan);
  window.addEventListener("load", scan);
})();
