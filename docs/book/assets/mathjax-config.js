// MathJax 3 (the copy in mathjax/, served by the site itself): typeset what arithmatex
// marked, \( \) inline and \[ \] displayed, and nothing else. An unknown command is an
// error, drawn as one (the book's checks look for them), not shown as red source text.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: false,
    processEnvironments: false,
    packages: { "[-]": ["noundefined"] }
  },
  options: {
    ignoreHtmlClass: ".*",
    processHtmlClass: "arithmatex"
  }
};
