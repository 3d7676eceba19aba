"""A Python file as a page of the book: its prose (docstrings and whole-line comments)
in a margin beside its code, section by section, in the order of the file (the
layout of docco, and of labml's annotated implementations).

A section is a run of prose followed by the code it explains. A docstring opens a
section at the first line of its function or class (decorators included), so the
``def`` line sits under the text that explains it. Every line of the file lands in
exactly one column: docstring lines and whole-line comments in the prose, every
other line, verbatim, in the code (a comment at the end of a code line stays there,
as shape comments do). ``tests/test_book.py`` checks that the code a browser shows
is the file's, line for line.

Docstrings are reStructuredText as Sphinx reads it; they become Markdown here:
``:math:`x``` and ``.. math::`` become the ``$...$`` and ``$$...$$`` that the
site's MathJax typesets, ````code```` becomes ```code```, ``:func:`~a.b``` becomes
```b```, literal blocks (after ``::``) and doctests become fenced code, and the
indented definition under a term becomes a paragraph under the term in bold.
"""
from __future__ import annotations

import ast
import html
import inspect
import io
import re
import tokenize
from dataclasses import dataclass, field

import pygments
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer


@dataclass
class Section:
    """Prose (Markdown) and the code lines it explains, with the file's number of each."""

    prose: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)  # the file's line number of each code line

    @property
    def first(self) -> int:
        """The file's line number of the first code line (0 when the section has no code)."""
        return self.numbers[0] if self.numbers else 0


def docstrings(tree: ast.Module) -> dict[int, tuple[int, int, str]]:
    """``{first line of the owner: (first, last line of the docstring, its text)}`` for the
    module (owner line 0), every class and every function that has a docstring."""
    found = {}
    for node in [tree, *ast.walk(tree)]:
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if not body or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Constant) \
                or not isinstance(body[0].value.value, str):
            continue
        owner = 0 if isinstance(node, ast.Module) else min([node.lineno] + [d.lineno for d in node.decorator_list])
        found[owner] = (body[0].lineno, body[0].end_lineno, body[0].value.value)
    return found


def comment_lines(source: str) -> set[int]:
    """The lines that hold a comment and nothing else, by Python's tokenizer (a ``#`` inside
    a string is not one), shebangs and ``# noqa``-style directives aside."""
    found = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        text = tok.string.strip()
        if tok.type == tokenize.COMMENT and tok.line.strip() == text and not text.startswith("#!") \
                and not re.match(r"#\s*(noqa|type:|pragma)", text):
            found.add(tok.start[0])
    return found


def sections(source: str) -> list[Section]:
    """The file as sections of prose and code, every line in one of them."""
    lines = source.splitlines()
    doc = docstrings(ast.parse(source))
    comments = comment_lines(source)
    in_doc = {}  # line -> (owner, first line of its docstring)
    for owner, (first, last, _) in doc.items():
        for n in range(first, last + 1):
            in_doc[n] = owner
    out = [Section()]
    comment: list[str] = []  # a run of whole-line comments, not yet placed

    def flush_comment():
        if comment:
            if out[-1].code:
                out.append(Section())
            out[-1].prose.extend(comment_prose(comment))
            comment.clear()

    for n, line in enumerate(lines, start=1):
        if n in in_doc:
            if n == doc[in_doc[n]][0]:  # the docstring's first line: its whole text as prose
                flush_comment()
                owner = in_doc[n]
                text = rst_to_markdown(doc[owner][2])
                if owner and out[-1].code and out[-1].first <= owner:  # open the section at the def
                    k = next(i for i, n in enumerate(out[-1].numbers) if n >= owner)  # the owner's first line
                    new = Section(code=out[-1].code[k:], numbers=out[-1].numbers[k:])
                    del out[-1].code[k:], out[-1].numbers[k:]
                    while out[-1].code and not out[-1].code[-1].strip():
                        out[-1].code.pop()
                        out[-1].numbers.pop()
                    if not out[-1].code:  # nothing left: the prose above (comments) heads the def
                        new.prose = out[-1].prose
                        out.pop()
                    out.append(new)
                elif out[-1].code:
                    out.append(Section())
                if out[-1].prose:
                    out[-1].prose.append("")
                out[-1].prose.extend(text)
            continue
        if n in comments:
            comment.append(line)
            continue
        if not line.strip() and comment:  # a blank line ends a run of comments
            flush_comment()
            continue
        flush_comment()
        if not out[-1].code:
            if not line.strip():
                continue  # no code block starts with a blank line
        out[-1].code.append(line)
        out[-1].numbers.append(n)
    flush_comment()
    for s in out:
        while s.code and not s.code[-1].strip():
            s.code.pop()
            s.numbers.pop()
    return [s for s in out if s.prose or s.code]


def comment_prose(comment: list[str]) -> list[str]:
    """A run of ``# ...`` lines as Markdown: the hashes and their indentation removed."""
    text = [re.sub(r"^\s*#\s?", "", c) for c in comment]
    return [_escape_tags(t) for t in text] + [""]


# reStructuredText roles of Sphinx: :func:`~a.b.c`, :class:`a.B`, :mod:`...`
ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc|py:\w+):`(~?)([^`]+)`")
MATH_ROLE = re.compile(r":math:`([^`]+)`")
LITERAL = re.compile(r"``(.+?)``")


def _inline(text: str) -> str:
    """One line's inline markup, reStructuredText -> Markdown; math and code kept apart
    from the escaping of stray HTML."""
    parts = []
    pos = 0
    pattern = re.compile(f"{MATH_ROLE.pattern}|{LITERAL.pattern}|{ROLE.pattern}")
    for m in pattern.finditer(text):
        parts.append(_escape_tags(text[pos:m.start()]))
        if m.group(1) is not None:  # math
            parts.append(f"${m.group(1)}$")
        elif m.group(2) is not None:  # ``literal``
            parts.append(_code_span(m.group(2)))
        else:  # a role: the short name with ~, the whole name without
            name = m.group(4).strip()
            if name.startswith("<") or "<" in name:
                name = name.split("<")[-1].rstrip(">")
            parts.append(_code_span(name.split(".")[-1] if m.group(3) else name))
        pos = m.end()
    parts.append(_escape_tags(text[pos:]))
    return "".join(parts)


def _code_span(text: str) -> str:
    """A Markdown code span that holds ``text`` even where it contains backticks."""
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _escape_tags(text: str) -> str:
    """Plain text outside code and math, shown as written: ``<eos>`` not taken for an HTML
    tag, a ``$`` not taken for the start of a formula."""
    return re.sub(r"<(?=[A-Za-z/!])", "&lt;", text).replace("$", "\\$")


def rst_to_markdown(doc: str) -> list[str]:
    """A docstring (reStructuredText) as Markdown lines."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0

    def block(start: int) -> tuple[list[str], int]:  # the indented lines from start (blank lines inside)
        j = start
        taken = []
        while j < len(lines) and (not lines[j].strip() or lines[j].startswith(" ")):
            taken.append(lines[j])
            j += 1
        while taken and not taken[-1].strip():
            taken.pop()
            j -= 1
        while taken and not taken[0].strip():
            taken.pop(0)
        return _dedent(taken), j

    while i < len(lines):
        line = lines[i]
        if SIMPLE_TABLE_RULE.match(line):  # a simple table: ==== rules around it
            rows, i = _simple_table(lines, i)
            out += ["", *rows, ""]
            continue
        m = re.match(r"^(\s*)\.\. math::\s*(.*)$", line)
        if m:
            body, i = block(i + 1)
            formula = "\n".join(([m.group(2)] if m.group(2).strip() else []) + [b for b in body if b.strip()])
            rows = "&" in formula or "\\\\" in formula
            if rows and not formula.lstrip().startswith("\\begin"):  # rows, aligned as Sphinx aligns them
                formula = "\\begin{aligned}\n" + formula + "\n\\end{aligned}"
            out += ["", "$$", formula, "$$", ""]
            continue
        if re.match(r"^\s*\.\. \w+::", line):  # another directive (note, code-block ...): its body as prose
            body, i = block(i + 1)
            out += ["", *rst_to_markdown("\n".join(body)), ""]
            continue
        if line.lstrip().startswith(">>>"):  # a doctest
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            out += ["", "```python", *_dedent(lines[i:j]), "```", ""]
            i = j
            continue
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            text = line.rstrip()[:-1] if not line.rstrip().endswith(" ::") else line.rstrip()[:-3]
            out.append(_inline(text))
            body, j = block(i + 1)
            if body:
                out += ["", "```text", *body, "```", ""]
            i = j
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        is_term = line.strip() and not line.startswith(" ") and nxt.startswith("    ") \
            and not re.match(r"^\s*([-*+]|\d+\.)\s", line)
        if is_term:  # a definition list: the term in bold, its definition as a paragraph
            body, j = block(i + 1)
            out += ["", f"**{_inline(line.strip())}**", "", *rst_to_markdown("\n".join(body)), ""]
            i = j
            continue
        out.append(_inline(line.strip() if not re.match(r"^\s+([-*+]|\d+\.)\s", line) else line))
        i += 1
    return out + [""]


SIMPLE_TABLE_RULE = re.compile(r"^=+( +=+)+\s*$")


def _simple_table(lines: list[str], i: int) -> tuple[list[str], int]:
    """A reStructuredText simple table from line ``i`` (its top rule) as a Markdown table;
    returns the rows and the line after its bottom rule. A row whose first column is
    blank continues the row above."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"=+", lines[i])]

    def cells(line):
        edges = [a for a, _ in spans[1:]] + [None]
        return [line[a:b].strip() if b else line[a:].strip() for (a, _), b in zip(spans, edges)]

    rows, rules, j = [], 0, i
    while j < len(lines) and rules < 3:
        line = lines[j]
        j += 1
        if SIMPLE_TABLE_RULE.match(line):
            rules += 1
            continue
        if not line.strip():
            continue
        c = cells(line)
        if rows and not c[0]:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], c)]
        else:
            rows.append(c)
    if not rows:
        return [], j
    md = ["| " + " | ".join(_inline(c) for c in rows[0]) + " |", "|" + "---|" * len(spans)]
    md += ["| " + " | ".join(_inline(c) for c in r) + " |" for r in rows[1:]]
    return md, j


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(x) - len(x.lstrip()) for x in lines if x.strip()]
    cut = min(indents) if indents else 0
    return [x[cut:] for x in lines]


def code_html(lines: list[str]) -> str:
    """The code lines, highlighted, as one HTML block (Pygments' classes, which the
    theme colours)."""
    text = "\n".join(lines) + "\n"
    return pygments.highlight(text, PythonLexer(stripnl=False, ensurenl=True),
                              HtmlFormatter(wrapcode=True, cssclass="highlight"))


def page_markdown(path: str, source: str, title: str, header: list[str]) -> tuple[str, list[str]]:
    """The Markdown of a file's page (a title, ``header`` lines, then one row per section,
    prose left and code right) and the HTML of each section's code. The Markdown holds a
    placeholder, :func:`code_placeholder`, where each code block goes: the highlighted
    code is put in after Markdown has run, so that Markdown never reads it."""
    rows = [f"# {title}", "", *header, "", f'<div class="docco-file" data-source="{html.escape(path)}"></div>', ""]
    blocks = []
    for s in sections(source):
        code = ""
        if s.code:
            code = code_placeholder(len(blocks))
            blocks.append(code_html(s.code))
        where = f' data-first-line="{s.first}"' if s.code else ""
        rows += [f'<div class="docco-section" markdown="1"{where}>',
                 '<div class="docco-prose" markdown="1">', "", *s.prose, "", "</div>",
                 f'<div class="docco-code">{code}</div>', "</div>", ""]
    return "\n".join(rows), blocks


def code_placeholder(i: int) -> str:
    """What stands for the i-th code block of a page until the page's HTML is made."""
    return f"<!--docco-code-{i}-->"
