"""Keep the code excerpts in docs/ equal to the source they quote.

Every ```python block in docs/ is preceded, on the line directly above its
opening fence, by exactly one marker:

``<!-- include: PATH:NAME -->``
    The block is the source of ``NAME`` in the file ``PATH`` (relative to the
    repository root): a function, a class, a method (``Class.method``) or a
    module-level assignment (``FAST`` in ``minitransformer/functional``), found with :mod:`ast`, with
    its decorators, dedented. The sources need no markers of their own.
``<!-- include: PATH:NAME from "TEXT" to "TEXT" -->``
    Only part of it: from the first line that contains the ``from`` text through
    the first line at or after it that contains the ``to`` text (either may be
    left out: from the start, to the end), dedented again.
``<!-- run -->``
    The block is executed by ``tests/test_docs.py``: the runnable blocks of a
    page run in order, in one namespace, with the reference kernels selected.

Run ``python docs/sync_excerpts.py`` from the repository root to rewrite every
include block from the current source (``--check`` only reports, and exits 1
when a block is stale). ``tests/test_docs.py`` imports this file, so the test
and the tool read markers the same way.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

INCLUDE = re.compile(
    r'^<!-- include: (?P<path>[^\s:]+):(?P<name>[A-Za-z_][\w.]*)'
    r'(?: from "(?P<start>[^"]+)")?(?: to "(?P<end>[^"]+)")? -->$'
)
RUN = re.compile(r"^<!-- run -->$")
ANY_MARKER = re.compile(r"^<!--\s*(include|run)\b")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")


@dataclass
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    indent: str  # white space before the opening fence ("" at the left margin)
    info: str  # the language after the fence ("python", "text", ...)
    code: str  # the lines between the fences, joined, with a final newline
    body: tuple  # (first, last) 0-based line indices of the body in the page, last exclusive
    marker: str | None  # the marker line directly above the fence, or None
    marker_line: int | None  # its 1-based line

    @property
    def is_python(self) -> bool:
        return self.info.lower() in ("python", "py", "python3")

    @property
    def where(self) -> str:
        return f"{_show(self.page)}:{self.line}"


def _show(path: Path) -> str:
    """``path`` relative to the repository root when it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


class ExcerptError(ValueError):
    """A marker that names nothing, or text anchors that are not found."""


def pages() -> list[Path]:
    """Every Markdown page under docs/, sorted."""
    return sorted(DOCS.rglob("*.md"))


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``page`` in order, each with the marker line above it (if any)."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, start = m.group("fence"), i
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        above = lines[start - 1] if start > 0 else ""
        marker = above if ANY_MARKER.match(above) else None
        code = "\n".join(lines[start + 1:j]) + "\n"
        out.append(Block(page, start + 1, m.group("indent"), m.group("info"), code, (start + 1, j), marker,
                         start if marker else None))
        i = j + 1
    return out


def markers(page: Path, text: str | None = None) -> list[tuple[int, str]]:
    """(1-based line, text) of every marker-like comment line of ``page``."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).split("\n")
    return [(n + 1, line) for n, line in enumerate(lines) if ANY_MARKER.match(line)]


def _find(tree: ast.Module, name: str) -> ast.AST:
    """The definition (or module-level assignment) called ``name`` ("Class.method" allowed)."""
    scope, node = tree.body, None
    for part in name.split("."):
        node = None
        for item in scope:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and item.name == part:
                node = item
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                    node = item
        if node is None:
            raise ExcerptError(f"no definition {part!r} (looking for {name!r})")
        scope = getattr(node, "body", [])
    return node


def excerpt(path: str, name: str, start: str | None = None, end: str | None = None) -> str:
    """The source text an include marker stands for, dedented, ending in a newline."""
    file = ROOT / path
    if not file.is_file():
        raise ExcerptError(f"no file {path}")
    source = file.read_text(encoding="utf-8")
    node = _find(ast.parse(source), name)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    lines = textwrap.dedent("\n".join(source.split("\n")[first - 1:node.end_lineno])).split("\n")
    i, j = 0, len(lines) - 1
    if start is not None:
        hits = [n for n, line in enumerate(lines) if start in line]
        if not hits:
            raise ExcerptError(f'{path}:{name} has no line containing "{start}"')
        i = hits[0]
    if end is not None:
        hits = [n for n, line in enumerate(lines) if n >= i and end in line]
        if not hits:
            raise ExcerptError(f'{path}:{name} has no line containing "{end}" after line {i + 1}')
        j = hits[0]
    return textwrap.dedent("\n".join(lines[i:j + 1])) + "\n"


def expected(block: Block) -> str:
    """What an include block must hold (ExcerptError if its marker resolves to nothing)."""
    m = INCLUDE.match(block.marker or "")
    if not m:
        raise ExcerptError(f"{block.where}: not an include block")
    return excerpt(m.group("path"), m.group("name"), m.group("start"), m.group("end"))


def diff(block: Block, want: str) -> str:
    """A unified diff from the page's block to the source."""
    return "".join(difflib.unified_diff(
        block.code.splitlines(True), want.splitlines(True),
        fromfile=f"{block.where} (docs)", tofile=f"{block.marker[5:-4].strip()} (source)"))


def sync(page: Path, check: bool = False) -> list[str]:
    """Rewrite the include blocks of ``page`` from the source; returns the diffs of stale ones.
    With ``check=True`` the page is left alone."""
    text = page.read_text(encoding="utf-8")
    lines = text.split("\n")
    stale = []
    for block in reversed(blocks(page, text)):
        if not (block.marker and INCLUDE.match(block.marker)):
            continue
        want = expected(block)
        if want != block.code:
            stale.append(diff(block, want))
            first, last = block.body
            lines[first:last] = want[:-1].split("\n")
    if stale and not check:
        page.write_text("\n".join(lines), encoding="utf-8")
    return stale[::-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="pages to sync (default: every docs/**/*.md)")
    parser.add_argument("--check", action="store_true", help="only report stale excerpts; exit 1 if any")
    args = parser.parse_args(argv)
    stale = 0
    for page in [p.resolve() for p in args.pages] or pages():
        try:
            diffs = sync(page, check=args.check)
        except ExcerptError as exc:
            print(f"{_show(page)}: {exc}", file=sys.stderr)
            return 2
        for d in diffs:
            print(d)
        stale += len(diffs)
        if diffs and not args.check:
            print(f"{_show(page)}: {len(diffs)} excerpt(s) rewritten")
    if args.check and stale:
        print(f"{stale} stale excerpt(s); run: python docs/sync_excerpts.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
