"""MkDocs hooks that make the book out of the repository as it is (``mkdocs.yml`` names
this file; ``docs/book.md`` says why each tool was chosen).

* **Pages.** ``docs/`` as it is, the README as the first page (``index.md``), and,
  generated at build time, never written to the tree: a page per Python file of the
  README's reading path and per file that a page names (its prose beside its code,
  :mod:`docco`), the tests of each, the other Markdown files a page links to
  (``benchmarks/RESULTS.md`` ...), and a page per command from its own ``--help``.
* **Links.** A link or a backticked path to a file of the repository
  (``minitransformer/nn/linear.py``, ``../benchmarks/RESULTS.md``) leads to that
  file's page; a code page links to the pages that explain it and to its tests.
* **Order.** The table of contents is the README's reading path, then
  ``docs/README.md``'s list of pages, in their order.
* **Checks** (the build stops, ``mkdocs build --strict``): a formula the book's
  MathJax would reject (:mod:`formulas`), a broken link or picture (MkDocs' own
  checks), a MathJax copy that is missing.
"""
from __future__ import annotations

import argparse
import functools
import os
import posixpath
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docco  # noqa: E402
import formulas  # noqa: E402
import mathjax  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# repo path of every generated page's source, by its place in the site (src_uri)
SOURCES: dict[str, str] = {}
COMMANDS: set[str] = set()  # src_uri of each command's page
CODE: dict[str, list[str]] = {}  # src_uri of a file's page -> the HTML of its code blocks
STATE: dict = {}


# ---------------------------------------------------------------------------
# where a file of the repository lives in the book
# ---------------------------------------------------------------------------
def book_path(repo_path: str) -> str:
    """The page (src_uri) of a repository file: README.md is the first page, docs/README.md
    the guide, docs/X is X, a Python file is a page named like it (``.py`` -> ``.md``),
    any other file keeps its path."""
    if repo_path == "README.md":
        return "index.md"
    if repo_path == "docs/README.md":
        return "guide.md"
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    if repo_path.endswith(".py"):
        return repo_path[:-3] + ".md"
    return repo_path


def repo_path_of(src_uri: str) -> str | None:
    """The repository file a page was made from (None for a command page)."""
    if src_uri in SOURCES:
        return SOURCES[src_uri]
    if src_uri in COMMANDS:
        return None
    return "docs/" + src_uri


def readme_path() -> list[str]:
    """The files of the README's reading path (its numbered table), in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^\| \d+ \| `(minitransformer/[\w/]+\.py)` \|", text, re.M)


def next_files() -> list[str]:
    """The files the README names as the next to read, after its path."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    part = text.split("the next files to read", 1)[0].rsplit("Then draw new sequences", 1)[-1]
    names = re.findall(r"`((?:minitransformer/)?[\w/]+\.py)`", part)
    return [n if n.startswith("minitransformer/") else "minitransformer/" + n for n in names]


LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
MENTION = re.compile(r"(?<![\[\w/])`((?:minitransformer|tests|benchmarks|demos)/[\w/]+\.py)`(?!\]\()")
DOTTED = re.compile(r"(?<![\[\w])`(minitransformer(?:\.\w+)+)`(?!\]\()")


def _resolve(page_repo: str, target: str) -> str | None:
    """The repository path a relative link of a page points to (None for a URL or an anchor)."""
    if re.match(r"^[a-z]+:", target) or target.startswith("#") or target.startswith("/"):
        return None
    path = target.split("#", 1)[0]
    return posixpath.normpath(posixpath.join(posixpath.dirname(page_repo), path))


def _mentions(markdown: str, page_repo: str) -> set[str]:
    """Repository files a Markdown page links to or names in backticks."""
    found = set()
    text = formulas.without_fences(markdown)
    for m in LINK.finditer(text):
        target = _resolve(page_repo, m.group(2))
        if target and (ROOT / target).is_file():
            found.add(target)
    found |= {m.group(1) for m in MENTION.finditer(text) if (ROOT / m.group(1)).is_file()}
    for m in DOTTED.finditer(text):
        module = _module_file(m.group(1))
        if module:
            found.add(module)
    return found


def _module_file(dotted: str) -> str | None:
    """``minitransformer.nn.linear`` (or a name inside it) -> its file, if there is one."""
    parts = dotted.split(".")
    while parts:
        for candidate in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
            if (ROOT / candidate).is_file():
                return candidate
        parts.pop()
    return None


@functools.lru_cache(maxsize=None)
def tests_of(module: str) -> tuple[str, ...]:
    """The test files of a package file: ``minitransformer/nn/linear.py`` ->
    ``tests/nn/test_nn_linear*.py`` (and its fast twin's, ``tests/fast/test_fast_linear*.py``)."""
    rel = Path(module).relative_to("minitransformer")
    folder = rel.parent.as_posix()
    stem = rel.stem
    found = []
    where = ROOT / "tests" / (folder if folder != "." else "")
    prefixes = [f"test_{stem}"] if folder == "." else [f"test_{folder.replace('/', '_')}_{stem}", f"test_{stem}"]
    if folder == "nn" and (ROOT / "minitransformer" / "fast" / f"{stem}.py").is_file():
        prefixes.append(f"../fast/test_fast_{stem}")
    for prefix in prefixes:
        for f in sorted(where.glob(prefix + "*.py")):
            found.append(f.resolve().relative_to(ROOT).as_posix())
    return tuple(dict.fromkeys(found))


# ---------------------------------------------------------------------------
# hooks
# ---------------------------------------------------------------------------
def on_config(config, **kw):
    where = mathjax.default_dir()
    if not mathjax.present(where):
        raise PluginError(f"MathJax {mathjax.MATHJAX_VERSION} is not in {where}: run `python docs/book/mathjax.py` "
                          "(make book does)")
    STATE["mathjax"] = where
    STATE["docs"] = Path(config["docs_dir"])  # docs/, or a copy of it (the tests break one)
    STATE["known"] = formulas.known_names(str(where))
    STATE["commit"] = _commit()
    return config


def _docs() -> Path:
    """The folder of the pages being built."""
    return STATE["docs"]


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def on_files(files: Files, config, **kw):
    SOURCES.clear()
    COMMANDS.clear()
    CODE.clear()
    readme = files.get_file_from_path("README.md")
    if readme is not None:  # docs/README.md: the guide; the repository's README is the first page
        files.remove(readme)
    pages = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8"),
             "docs/README.md": (_docs() / "README.md").read_text(encoding="utf-8")}
    for f in files.documentation_pages():
        pages["docs/" + f.src_uri] = Path(f.abs_src_path).read_text(encoding="utf-8")
    code = list(dict.fromkeys(readme_path() + next_files()))
    seen_md = set(pages)
    queue = list(pages)
    named: set[str] = set()
    mentions: dict[str, set[str]] = {}  # page -> the files it links to or names
    while queue:  # the Markdown files reached by links, and every file any page names
        repo = queue.pop()
        mentions[repo] = _mentions(pages[repo], repo)
        for target in mentions[repo]:
            if target.endswith(".md") and target not in seen_md:
                seen_md.add(target)
                pages[target] = (ROOT / target).read_text(encoding="utf-8")
                queue.append(target)
            elif not target.endswith(".md"):
                named.add(target)
    path = list(code)  # the reading path and the next files: their tests get pages; others' are named
    code += sorted(n for n in named if n.endswith(".py") and n.startswith("minitransformer/") and n not in code)
    tests = sorted({t for c in path for t in tests_of(c)} | {n for n in named if n.startswith("tests/")})
    others = sorted(n for n in named if n.endswith(".py") and not n.startswith(("minitransformer/", "tests/")))
    STATE["code"], STATE["tests"], STATE["others"] = code, tests, others
    STATE["explained"] = {c: sorted(r for r, found in mentions.items() if c in found) for c in code}
    for repo in [r for r in pages if not r.startswith("docs/") or r == "docs/README.md"]:
        _add(files, config, repo, pages[repo])
    for repo in code + tests + others:
        _add(files, config, repo, _code_page(repo))
    for repo in sorted(named):  # pictures and other files a page links to
        if not repo.endswith((".py", ".md")) and not repo.startswith("docs/"):
            files.append(File(repo, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    for uri, text in _command_pages().items():
        COMMANDS.add(uri)
        files.append(File.generated(config, uri, content=text))
    config["nav"] = _nav(code, tests)
    return files


def _add(files: Files, config, repo: str, content: str) -> None:
    uri = book_path(repo)
    SOURCES[uri] = repo
    files.append(File.generated(config, uri, content=content))


def _code_page(repo: str) -> str:
    """A Python file's page: what explains it, its tests, the way on in the reading order."""
    source = (ROOT / repo).read_text(encoding="utf-8")
    me = book_path(repo)
    here = posixpath.dirname(me)

    def link(target_repo: str, text: str | None = None) -> str:
        return f"[`{text or target_repo}`]({posixpath.relpath(book_path(target_repo), here or '.')})"

    header = []
    indexes = ("docs/README.md", "docs/book.md")  # pages that list files, not explain them
    explained = [r for r in STATE["explained"].get(repo, []) if r.startswith("docs/") and r not in indexes]
    if explained:
        header.append("**Explained in** " + ", ".join(link(r, r[len('docs/'):]) for r in explained) + ".")
    tests = tests_of(repo) if repo.startswith("minitransformer/") else ()
    if tests:
        header.append("**Tested in** " + ", ".join(link(t) if t in STATE["tests"] else f"`{t}`" for t in tests) + ".")
    if repo.startswith("tests/"):
        tested = [c for c in STATE["code"] if repo in tests_of(c)]
        if tested:
            header.append("**Tests of** " + ", ".join(link(c) for c in tested) + ".")
    path = readme_path()
    if repo in path:
        i = path.index(repo)
        step = [f"**Reading path** {i + 1} of {len(path)}"]
        if i:
            step.append("previous: " + link(path[i - 1]))
        if i + 1 < len(path):
            step.append("next: " + link(path[i + 1]))
        header.append("; ".join(step) + ".")
    header.append(f"*The file `{repo}`{' at commit ' + STATE['commit'] if STATE['commit'] else ''}: its docstrings "
                  "and comments on the left, its code on the right, line for line.*")
    front = "---\nhide:\n  - toc\n---\n\n"
    markdown, CODE[book_path(repo)] = docco.page_markdown(repo, source, f"`{repo}`", [h + "\n" for h in header])
    return front + markdown


def _command_pages() -> dict[str, str]:
    """``{src_uri: Markdown}``: one page per command, its ``--help`` as the command prints it
    (80 columns)."""
    os.environ["COLUMNS"] = "80"
    from minitransformer.cli.main import build_parser
    parser = build_parser()
    pages = {}

    def walk(p, words):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        text = p.format_help()
        name = " ".join(words)
        uri = "commands/" + ("index" if len(words) == 1 else "-".join(words[1:])) + ".md"
        pages[uri] = f"# `{name}`\n\n```text\n{text}```\n"
        for action in subs:
            for sub, subparser in action.choices.items():
                walk(subparser, words + [sub])

    walk(parser, ["minitransformer"])
    return pages


def _nav(code: list[str], tests: list[str]) -> list:
    """The table of contents: the README's path, then docs/README.md's pages in its order."""
    guide = (_docs() / "README.md").read_text(encoding="utf-8")
    docs_order = []
    for target in re.findall(r"^\| \[`([\w/.]+\.md)`\]", guide, re.M):
        if target not in docs_order and (_docs() / target).is_file():
            docs_order.append(target)
    kernels = [posixpath.join("kernels", t) for t in
               re.findall(r"\]\(([\w]+\.md)\)", (_docs() / "kernels" / "README.md").read_text(encoding="utf-8"))]
    kernels = list(dict.fromkeys(k for k in kernels if (_docs() / k).is_file()))
    pages = []
    for target in docs_order:
        if target == "kernels/README.md":
            pages.append({"Kernels, derived": [target] + [k for k in kernels if k != target]})
        else:
            pages.append(target)
    path = readme_path()
    rest = sorted(c for c in code if c not in path)
    return [
        {"The README": "index.md"},
        {"The guide": "guide.md"},
        {"The code, in reading order": [{c[len('minitransformer/'):]: book_path(c)}
                                        for c in path]},
        {"The pages": pages},
        {"The commands": sorted(COMMANDS)},
        {"More code": [{c[len('minitransformer/'):]: book_path(c)} for c in rest]},
        {"Tests": [{t: book_path(t)} for t in tests]},
        {"Benchmarks and demos": [{o: book_path(o)} for o in STATE["others"]]},
        {"Results": [book_path(r) for r in SOURCES.values() if r.startswith("benchmarks/") and r.endswith(".md")]},
    ]


def on_page_markdown(markdown: str, page, config, files, **kw):
    repo = repo_path_of(page.file.src_uri)
    if repo is not None:
        markdown = _relink(markdown, repo, page.file.src_uri, files)
    bad = []
    for tex in formulas.formulas(markdown):
        for problem in formulas.problems(tex, STATE["known"]):
            bad.append(f"{page.file.src_uri}: {problem} in ${tex.strip()[:80]}$")
    if bad:
        raise PluginError("formulas MathJax would reject:\n  " + "\n  ".join(bad))
    return markdown


def _relink(markdown: str, repo: str, uri: str, files: Files) -> str:
    """Links and backticked paths to repository files -> links to their pages."""
    here = posixpath.dirname(uri)

    def to_page(target_repo: str) -> str | None:
        dest = book_path(target_repo)
        if files.get_file_from_path(dest) is None:
            return None
        return posixpath.relpath(dest, here or ".")

    def fix_link(m):
        target = m.group(2)
        resolved = _resolve(repo, target)
        if resolved is None:
            return m.group(0)
        dest = to_page(resolved)
        if dest is None:  # not a page of the book: MkDocs checks it as it is
            return m.group(0)
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        return m.group(1) + dest + anchor + m.group(3)

    def fix_mention(m):
        dest = to_page(m.group(1))
        return f"[`{m.group(1)}`]({dest})" if dest else m.group(0)

    def fix_dotted(m):
        module = _module_file(m.group(1))
        dest = to_page(module) if module else None
        return f"[`{m.group(1)}`]({dest})" if dest else m.group(0)

    out = []
    for part, is_code in _split_fences(markdown):
        if not is_code:
            part = LINK.sub(fix_link, part)
            part = MENTION.sub(fix_mention, part)
            part = DOTTED.sub(fix_dotted, part)
        out.append(part)
    return "".join(out)


def _split_fences(markdown: str):
    """The Markdown cut into (text, is a fenced block) parts."""
    pos = 0
    for m in formulas.FENCE.finditer(markdown):
        yield markdown[pos:m.start()], False
        yield m.group(0), True
        pos = m.end()
    yield markdown[pos:], False


def on_page_content(html: str, page, config, files, **kw):
    """A file's page: its highlighted code put in where Markdown left the placeholders."""
    for i, block in enumerate(CODE.get(page.file.src_uri, [])):
        html = html.replace(docco.code_placeholder(i), block, 1)
    return html


MATHJAX_SCRIPTS = ('<script src="{root}book/assets/mathjax-config.js"></script>\n'
                   '<script src="{root}mathjax/' + mathjax.SCRIPT + '"></script>\n')


def on_post_page(output: str, page, config, **kw):
    """MathJax, from the site itself, on the pages that have formulas (the others load faster
    without it)."""
    if 'class="arithmatex"' not in output:
        return output
    depth = page.url.count("/")
    root = "../" * depth
    return output.replace("</body>", MATHJAX_SCRIPTS.format(root=root) + "</body>", 1)


def on_post_build(config, **kw):
    dest = Path(config["site_dir"]) / "mathjax"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(STATE["mathjax"], dest, ignore=shutil.ignore_patterns(".source"))
