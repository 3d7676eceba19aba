"""The formulas of a page, found and checked at build time against the typesetter's own
tables: every ``\\command`` and every ``\\begin{environment}`` must be one that the
book's MathJax defines (the TeX input of the component the pages load, with the
packages it loads, and those it would load on first use), and braces must balance.
A formula that fails here would be drawn as a red error in the page; the build stops
instead. What MathJax draws is checked again in a browser
(``tests/test_book.py``).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

# The files whose tables of commands the pages' MathJax reads: the component, and the
# TeX packages it loads when a formula first uses one of their commands (autoload).
TABLES = ("tex-chtml.js", "input/tex/extensions/*.js")

# Math in Markdown, as the site's arithmatex reads it: $$...$$ blocks, $...$ inline,
# and \(...\), \[...\]; code (fenced blocks and spans) is not math.
FENCE = re.compile(r"^(\s*)(```|~~~).*?^\1\2\s*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.S)
DISPLAY = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]", re.S)
INLINE = re.compile(r"(?<![\\$])\$(?!\s)((?:\\\$|[^$\n])+?)(?<!\s)\$(?!\$)|\\\((.+?)\\\)")
COMMAND = re.compile(r"\\([A-Za-z]+)")
ENVIRONMENT = re.compile(r"\\begin\{([A-Za-z*]+)\}")


@lru_cache(maxsize=4)
def known_names(mathjax_dir: str) -> frozenset:
    """Every name the TeX tables of the MathJax copy define: the keys of its maps of
    commands, symbols, delimiters and environments (read loosely: any key of its
    scripts counts, so a check here can only err towards passing a formula, which the
    browser check then sees drawn as an error)."""
    names = set()
    for table in (f for pattern in TABLES for f in sorted(Path(mathjax_dir).glob(pattern))):
        text = table.read_text(encoding="utf-8")
        names.update(m.group(1) or m.group(2) for m in re.finditer(r'(?:"(?:\\\\)*([^"\\]+)"|\b([A-Za-z]+\*?)):', text))
    return frozenset(names)


def without_fences(markdown: str) -> str:
    """The Markdown with its fenced blocks blanked out (their lines kept, empty)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)


PRE = re.compile(r"<pre\b.*?</pre>", re.S)


def without_code(markdown: str) -> str:
    """The Markdown with fenced blocks, HTML ``<pre>`` blocks and code spans blanked out."""
    return CODE_SPAN.sub("", PRE.sub("", without_fences(markdown)))


def formulas(markdown: str) -> list[str]:
    """The TeX of every formula in a page, display and inline."""
    text = without_code(markdown)
    found = [m.group(1) or m.group(2) for m in DISPLAY.finditer(text)]
    text = DISPLAY.sub("", text)
    found += [m.group(1) or m.group(2) for m in INLINE.finditer(text)]
    return found


def problems(tex: str, known: frozenset) -> list[str]:
    """What the typesetter would reject in one formula (an empty list when nothing)."""
    out = [f"unknown command \\{name}" for name in sorted(set(COMMAND.findall(tex))) if name not in known]
    out += [f"unknown environment {{{env}}}" for env in sorted(set(ENVIRONMENT.findall(tex))) if env not in known]
    depth = 0
    for m in re.finditer(r"\\.|[{}]", tex, re.S):
        if m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            depth -= 1
            if depth < 0:
                break
    if depth:
        out.append("unbalanced braces")
    return out
