"""The book (``make book``): it builds from the tree as it is, the same files twice, stops on
a broken link, a missing picture or a formula MathJax would reject, shows every line of a
file's code beside its prose, and, in headless Chromium, every page loads clean with its
formulas typeset (``docs/book/check.py``; skipped, in one line, without a browser)."""
from __future__ import annotations

import filecmp
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "book"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"book_{name}", BOOK / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(BOOK))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BOOK))
    return module


docco = _load("docco")
formulas = _load("formulas")
mathjax = _load("mathjax")


def _tools_missing() -> str | None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        return "MkDocs or its Material theme is not installed (pip install '.[book]')"
    if not mathjax.present(mathjax.default_dir()):
        return f"the book's MathJax is not in {mathjax.default_dir()} (python docs/book/mathjax.py; make test does)"
    return None


needs_tools = pytest.mark.skipif(_tools_missing() is not None, reason=_tools_missing() or "")


def build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` into ``site`` (not --quiet: MkDocs then counts no warning,
    and --strict lets a broken link through)."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000", "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-f", str(config),
                           "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if _tools_missing():
        pytest.skip(_tools_missing())
    out = tmp_path_factory.mktemp("book") / "site"
    done = build(out)
    assert done.returncode == 0, f"the book did not build:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return out


# ---------------------------------------------------------------------------
# a file as prose beside code
# ---------------------------------------------------------------------------
def test_every_line_of_every_file_lands_in_one_column():
    """The code column of every package, test, benchmark and demo file is the file's code
    lines as Python's tokenizer and parser find them (docstrings and lone comments in the
    prose), in order."""
    check = _load("check")
    files = [p for folder in ("minitransformer", "tests", "benchmarks", "demos") for p in (ROOT / folder).rglob("*.py")]
    assert len(files) > 100
    for path in files:
        source = path.read_text(encoding="utf-8")
        shown = [line for s in docco.sections(source) for line in s.code if line.strip()]
        assert shown == check.code_lines(source), path.relative_to(ROOT)


def test_no_docstring_holds_a_control_character():
    """A backslash in a docstring that is not raw (``\\beta`` written in a plain string) turns
    into a control character: the book would typeset a broken formula."""
    import ast
    for path in (ROOT / "minitransformer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False) or ""
                bad = [hex(ord(c)) for c in doc if ord(c) < 32 and c not in "\n\t"]
                assert not bad, f"{path.relative_to(ROOT)}: {getattr(node, 'name', 'module')}'s docstring holds {bad}"


def test_a_docstring_heads_the_section_of_its_def():
    source = '''"""Module text."""
import os


# a comment on the function
def f(x):
    """What f does: :math:`y = x^2`."""
    return x * x  # (N,)
'''
    s = docco.sections(source)
    assert [sec.code for sec in s] == [["import os"], ["def f(x):", "    return x * x  # (N,)"]]
    assert s[1].prose[0] == "a comment on the function"
    assert "What f does: $y = x^2$." in s[1].prose


def test_restructuredtext_becomes_markdown():
    md = "\n".join(docco.rst_to_markdown(r'''Roles: ``x`` and :func:`~a.b.c` and :math:`\alpha`; a <cls> and $5.

.. math:: a &= b \\
          c &= d

term
    its definition, :math:`t`.

==========  ==========
kernel      does
==========  ==========
``k``       one thing,
            then more
==========  ==========

Literal::

    x = 1
'''))
    assert "Roles: `x` and `c` and $\\alpha$; a &lt;cls> and \\$5." in md
    assert "$$\n\\begin{aligned}\na &= b \\\\\nc &= d\n\\end{aligned}\n$$" in md
    assert "**term**\n\nits definition, $t$." in md
    assert "| kernel | does |\n|---|---|\n| `k` | one thing, then more |" in md
    assert "Literal:\n\n```text\nx = 1\n```" in md


def test_formulas_are_checked_against_the_typesetters_tables():
    if not mathjax.present(mathjax.default_dir()):
        pytest.skip(_tools_missing())
    known = formulas.known_names(str(mathjax.default_dir()))
    assert formulas.problems(r"\frac{a}{b} + \sum_i \mathbb{E}[x] \langle p \rangle", known) == []
    assert formulas.problems(r"\begin{aligned} a &= b \end{aligned}", known) == []
    assert formulas.problems(r"\fracc{a}{b}", known) == ["unknown command \\fracc"]
    assert formulas.problems(r"\begin{alignd} a \end{alignd}", known) == ["unknown environment {alignd}"]
    assert formulas.problems(r"\frac{a}{b", known) == ["unbalanced braces"]
    page = "Inline $a_i$ and `$not$` and\n\n$$\nb^2\n$$\n\n```python\nx = '$c$'\n```\n"
    assert formulas.formulas(page) == ["\nb^2\n", "a_i"]


# ---------------------------------------------------------------------------
# the build
# ---------------------------------------------------------------------------
@needs_tools
def test_the_book_has_the_readme_the_path_the_pages_and_every_command(site):
    assert "A first model, every step in sight" in (site / "index.html").read_text(encoding="utf-8")
    for f in ("minitransformer/nn/linear", "minitransformer/optim/optimizer", "kernels/linear", "RESULTS",
              "benchmarks/RESULTS", "tests/nn/test_nn_linear_kernels", "commands", "commands/train-lm",
              "commands/predict"):
        assert (site / f / "index.html").is_file(), f
    linear = (site / "minitransformer/nn/linear/index.html").read_text(encoding="utf-8")
    assert 'data-source="minitransformer/nn/linear.py"' in linear and "docco-prose" in linear
    assert (site / "mathjax" / mathjax.SCRIPT).is_file()


@needs_tools
def test_building_twice_gives_the_same_files(site, tmp_path):
    again = tmp_path / "again"
    assert build(again).returncode == 0
    cmp = filecmp.dircmp(site, again)

    def differing(c, where=""):
        out = [where + f for f in c.diff_files + c.left_only + c.right_only]
        for name, sub in c.subdirs.items():
            out += differing(sub, where + name + "/")
        return out

    assert differing(cmp) == []


@needs_tools
@pytest.mark.parametrize("fault, added, said", [
    ("a broken link and a missing picture", "See [this](nowhere.md). ![a picture](images/nowhere.png)",
     ["'nowhere.md'", "'images/nowhere.png'", "Aborted"]),
    ("a formula MathJax would reject", r"A formula $\nosuchmacro{x}$.", ["unknown command \\nosuchmacro"]),
])
def test_the_build_stops_on(tmp_path, fault, added, said):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("__pycache__"))
    page = docs / "gradcheck.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n" + added + "\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    text = text.replace("docs_dir: docs", f"docs_dir: {docs}").replace("  - docs/book/hooks.py",
                                                                        f"  - {BOOK / 'hooks.py'}")
    config.write_text(text, encoding="utf-8")
    done = build(tmp_path / "site", config)
    assert done.returncode != 0, fault
    for words in said:
        assert words in done.stdout + done.stderr, (fault, words)


# ---------------------------------------------------------------------------
# in a browser
# ---------------------------------------------------------------------------
def _browser_missing() -> str | None:
    return _tools_missing() or _load("check").missing()


@pytest.mark.skipif(_browser_missing() is not None, reason=_browser_missing() or "")
def test_every_page_in_chromium(site):
    """No console error, no request off the site, every formula typeset, no raw TeX, every
    picture loaded, every internal link and anchor resolving, the code of each file page
    equal to the file's."""
    check = _load("check")
    assert len(check.pages(site)) > 150
    lines = []
    bad = check.check_site(site, log=lines.append, tabs=2)
    assert not bad, "\n".join(lines[-40:])


@pytest.mark.skipif(_browser_missing() is not None, reason=_browser_missing() or "")
def test_a_reader_follows_links_from_the_readme_to_linear_its_derivation_and_its_test(site):
    assert _load("check").follow_linear_path(site) == []


@pytest.mark.skipif(_browser_missing() is not None, reason=_browser_missing() or "")
def test_the_browser_check_sees_each_fault(tmp_path):
    """A page with one of each fault the check looks for: each is reported."""
    check = _load("check")
    site = tmp_path / "site"
    (site / "book" / "assets").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "book" / "assets" / "mathjax-config.js", site / "book" / "assets")
    (site / "mathjax").symlink_to(mathjax.default_dir(), target_is_directory=True)
    (site / "index.html").write_text(f"""<!doctype html><html><head><meta charset="utf-8"></head><body><article>
<p>Typeset: <span class="arithmatex">\\(a^2\\)</span>; broken: <span class="arithmatex">\\(\\frac{{a}}\\)</span>.</p>
<p>Left raw: $x_1$ and \\frac{{1}}{{2}}.</p>
<p><a href="nowhere/">a broken link</a>, <a href="#no-such-anchor">a broken anchor</a>.</p>
<img src="missing.png" alt="a missing picture"><img src="http://192.0.2.1/off-site.png" alt="off the site">
<script>console.error("an error in the console");</script>
<script src="book/assets/mathjax-config.js"></script>
<script src="mathjax/{mathjax.SCRIPT}"></script>
</article></body></html>""", encoding="utf-8")
    bad = check.check_site(site, log=lambda line: None, tabs=1)
    problems = "\n".join(p for r in bad for p in r.problems)
    for seen in ("console error: an error in the console", "formula error: Missing argument", "raw TeX",
                 "picture not loaded: missing.png", "broken link: nowhere/", "broken anchor: index.html#no-such-anchor",
                 "request 404", "asked the network for http://192.0.2.1/off-site.png"):
        assert seen in problems, (seen, problems)
