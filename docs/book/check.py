"""The built book, opened page by page in a real browser (headless Chromium, driven by
Playwright), as a reader would see it::

    python docs/book/check.py site                       # every page; exit 1 on a problem
    python docs/book/check.py site --screenshots DIR     # also the first page and Linear's

Each page is served from the folder by a local HTTP server and must: log no console
error; ask the network for nothing (every request stays on the local server); have
every formula typeset by MathJax with no error, and no raw ``$...$``, ``\\(``, ``\\[``
or ``\\frac`` left in its text outside code; have every picture loaded (natural width
above 0); have every internal link and anchor resolve. A code page must show its
file's code, line for line (blank lines aside). ``tests/test_book.py`` runs this.
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import functools
import html.parser
import io
import os
import re
import shutil
import sys
import threading
import tokenize
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

ROOT = Path(__file__).resolve().parents[2]

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DESKTOP = {"width": 1400, "height": 900}


def browser_path() -> str | None:
    """Chromium's executable (``$MINITRANSFORMER_CHROMIUM``, else the first on PATH), or None."""
    named = os.environ.get("MINITRANSFORMER_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def missing() -> str | None:
    """What the check needs and this machine lacks, in one line (None when nothing)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install '.[book]')"
    if browser_path() is None:
        return "no Chromium on PATH (Debian: apt-get install chromium)"
    return None


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Server:
    """The site folder on a local HTTP server, in a thread, for the time of a ``with``."""

    def __init__(self, site: Path):
        handler = functools.partial(_Quiet, directory=str(site))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)


@functools.lru_cache(maxsize=None)
def _ids(path: Path) -> frozenset:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8"))
    return frozenset(parser.ids)


def pages(site: Path) -> list[str]:
    """Every page of the site, as a path under it (``index.html``, ``kernels/linear/index.html`` ...)."""
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if p.name != "404.html" and "mathjax" not in p.relative_to(site).parts)


def file_of(site: Path, base: str, href: str) -> Path | None:
    """The file a same-site URL names (a folder's index.html), or None when it is not there."""
    path = unquote(urlparse(href).path)
    root = urlparse(base).path
    rel = path[len(root):] if path.startswith(root) else path.lstrip("/")
    target = site / rel
    if target.is_dir():
        target = target / "index.html"
    return target if target.is_file() else None


@dataclass
class PageReport:
    page: str
    problems: list[str] = field(default_factory=list)


WAIT_FOR_MATH = """() => new Promise(done => {
  if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) { done("no MathJax"); return; }
  MathJax.startup.promise.then(() => done("typeset"), e => done("failed: " + e));
})"""

PAGE_FACTS = """() => {
  const text = (root) => {
    const c = root.cloneNode(true);
    c.querySelectorAll("pre, code, script, style, mjx-assistive-mml")
      .forEach(e => e.remove());
    return c.textContent;
  };
  const main = document.querySelector("article") || document.body;
  return {
    text: text(main),
    formulas: document.querySelectorAll(".arithmatex").length,
    typeset: [...document.querySelectorAll(".arithmatex")].filter(e =>
      e.querySelector("mjx-container")).length,
    errors: [...document.querySelectorAll("mjx-merror")].map(e => {
      const doc = window.MathJax && MathJax.startup && MathJax.startup.document;
      const item = doc ? [...doc.math].find(m => m.typesetRoot && m.typesetRoot.contains(e)) : null;
      return (e.getAttribute("data-mjx-error") || e.textContent) + (item ? " in " + item.math : "");
    }).slice(0, 5),
    images: [...document.images].map(i => ({src: i.getAttribute("src"), ok: i.complete && i.naturalWidth > 0})),
    links: [...document.querySelectorAll("a[href]")].map(a => a.href),
    source: (document.querySelector("[data-source]") || {dataset: {}}).dataset.source || null,
    code: [...document.querySelectorAll(".docco-code code")].map(c => c.innerText),
  };
}"""

RAW_MATH = re.compile(r"\\\(|\\\[|\$\$|\\frac|\\sum|\\mathrm|(?<![\w$])\$[^$\s][^$\n]{0,80}?[^$\s\\]\$(?![\w$])")


class _Tab:
    """A browser tab and what its page logs: console errors, failed requests."""

    def __init__(self, page, url: str):
        self.page, self.url = page, url
        self.console, self.failed = [], []
        page.on("console", lambda m: self.console.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.console.append(str(e)))
        page.on("response", lambda r: self.failed.append(f"{r.status} {r.url[len(url):]}") if r.status >= 400 else None)
        page.on("requestfailed", lambda r: self.failed.append(f"failed {r.url}"))


async def _check_page(tab: _Tab, name: str, site: Path) -> PageReport:
    page, url = tab.page, tab.url
    report = PageReport(name)
    tab.console.clear()
    tab.failed.clear()
    console, failed = tab.console, tab.failed
    await page.goto(url + name, wait_until="load")
    state = await page.evaluate(WAIT_FOR_MATH)
    facts = await page.evaluate(PAGE_FACTS)
    report.problems += [f"console error: {c}" for c in console]
    report.problems += [f"request {f}" for f in failed]
    if facts["formulas"] and state != "typeset":
        report.problems.append(f"{facts['formulas']} formulas but MathJax did not run ({state})")
    if facts["typeset"] != facts["formulas"]:
        report.problems.append(f"{facts['formulas'] - facts['typeset']} of {facts['formulas']} formulas not typeset")
    report.problems += [f"formula error: {e}" for e in facts["errors"]]
    for m in RAW_MATH.finditer(facts["text"]):
        report.problems.append(f"raw TeX in the text: ...{facts['text'][max(0, m.start() - 30):m.end() + 30]!r}...")
    report.problems += [f"picture not loaded: {i['src']}" for i in facts["images"] if not i["ok"]]
    for href in facts["links"]:
        if not href.startswith(url):
            continue
        target = file_of(site, url, urldefrag(href)[0])
        if target is None:
            report.problems.append(f"broken link: {href[len(url):]}")
            continue
        anchor = urldefrag(href)[1]
        if anchor and target.suffix == ".html" and unquote(anchor) not in _ids(target):
            report.problems.append(f"broken anchor: {href[len(url):]}")
    if facts["source"]:
        report.problems += code_problems(facts["source"], facts["code"])
    return report


def code_lines(source: str) -> list[str]:
    """The file's lines that are code: not blank, not a docstring's, not a comment alone
    on its line (a shebang and a ``# noqa``-style directive are code), found by Python's
    own tokenizer and parser, not by the code that made the page."""
    prose = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            prose.update(range(body[0].lineno, body[0].end_lineno + 1))
    code_on = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENDMARKER):
            code_on.update(range(tok.start[0], tok.end[0] + 1))
    lines = source.splitlines()

    def kept_comment(line):  # a shebang or a tool's directive stays with the code
        return re.match(r"\s*#(!|\s*(noqa|type:|pragma))", line)

    return [line for n, line in enumerate(lines, 1) if line.strip() and n not in prose
            and (n in code_on or not line.lstrip().startswith("#") or kept_comment(line))]


def code_problems(source: str, shown: list[str]) -> list[str]:
    """The code a page shows against the file's code lines (blank lines aside)."""
    path = ROOT / source
    if not path.is_file():
        return [f"the page shows {source}, which is not in the repository"]
    want = code_lines(path.read_text(encoding="utf-8"))
    got = [line for block in shown for line in block.replace("\u00a0", " ").splitlines() if line.strip()]
    if got == want:
        return []
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return [f"code differs from {source} at code line {i + 1}: shows {a!r}, the file has {b!r}"]
    return [f"code of {source}: shows {len(got)} lines, the file has {len(want)}"]


def check_site(site: Path, screenshots: Path | None = None, log=print, tabs: int = 3) -> list[PageReport]:
    """Every page of ``site`` in Chromium, ``tabs`` at a time; the reports of the pages with
    problems. ``screenshots``: also write the first page's and ``Linear``'s there (desktop width)."""
    return asyncio.run(_check_site(site, screenshots, log, tabs))


SCREENSHOTS = (("index.html", "book-first-page.png"), ("minitransformer/nn/linear/index.html", "book-linear.png"))


async def _check_site(site: Path, screenshots: Path | None, log, tabs: int) -> list[PageReport]:
    from playwright.async_api import async_playwright
    names = pages(site)
    reports = []
    with Server(site) as server:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=browser_path(), args=["--no-sandbox"])
            context = await browser.new_context(viewport=DESKTOP)
            outside = []  # watched, not intercepted: routing requests would switch off the cache
            context.on("request", lambda r: None if r.url.startswith((server.url, "data:", "blob:", "about:"))
                       else outside.append(r.url))
            queue = list(names)

            async def worker():
                while queue:
                    name = queue.pop(0)  # taken before the await: another tab may empty the queue meanwhile
                    tab = _Tab(await context.new_page(), server.url)
                    reports.append(await _check_page(tab, name, site))
                    await tab.page.close()

            await asyncio.gather(*(worker() for _ in range(tabs)))
            if outside:
                reports.append(PageReport("(any page)", [f"asked the network for {u}" for u in sorted(set(outside))]))
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                for name, shot in SCREENSHOTS:
                    page = await context.new_page()
                    await page.goto(server.url + name, wait_until="load")
                    await page.evaluate(WAIT_FOR_MATH)
                    await page.screenshot(path=str(screenshots / shot))
                    await page.close()
                    log(f"screenshot: {screenshots / shot}")
            await browser.close()
    bad = sorted((r for r in reports if r.problems), key=lambda r: r.page)
    log(f"{len(names)} pages opened in Chromium: {len(bad)} with problems")
    for report in bad:
        for problem in report.problems[:10]:
            log(f"  {report.page}: {problem}")
    return bad


#: A reader's way by links alone: the README, Linear's page, its derivation, back to its
#: code, its gradient-check test. Each step: the link to click (the end of its address) and
#: a text the page it opens must show.
LINEAR_PATH = (
    ("minitransformer/nn/linear/", "def linear_backward"),
    ("kernels/linear/", "Backward"),
    ("minitransformer/nn/linear/", "Explained in"),
    ("tests/nn/test_nn_linear_kernels/", "def test_gradcheck_with_bias"),
)


def follow_linear_path(site: Path) -> list[str]:
    """Click from the first page to ``Linear``'s code, its derivation, back, and its
    gradient-check test, in Chromium; the steps that failed (an empty list when none)."""
    return asyncio.run(_follow(site, LINEAR_PATH))


async def _follow(site: Path, steps) -> list[str]:
    from playwright.async_api import async_playwright
    with Server(site) as server:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=browser_path(), args=["--no-sandbox"])
            page = await browser.new_page(viewport=DESKTOP)
            await page.goto(server.url + "index.html", wait_until="load")
            try:
                for i, (end, text) in enumerate(steps, 1):
                    where = page.url[len(server.url):] or "index.html"
                    link = page.locator(f'article a[href$="{end}"], article a[href$="{end}index.html"]').first
                    if not await link.count():
                        return [f"step {i}: {where} has no link to {end}"]
                    await link.click()
                    await page.wait_for_load_state("load")
                    if not page.url.endswith((end, end + "index.html")):
                        return [f"step {i}: the link on {where} led to {page.url[len(server.url):]}, not {end}"]
                    if text not in await page.inner_text("article"):
                        return [f"step {i}: {end} does not show {text!r}"]
            finally:
                await browser.close()
    return []


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("site", type=Path, help="the built site (make book: site)")
    p.add_argument("--screenshots", type=Path, default=None, help="write the two screenshots into this folder")
    args = p.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"error: {args.site} holds no built book; run: make book", file=sys.stderr)
        return 2
    lack = missing()
    if lack:
        print(f"error: cannot open the book in a browser: {lack}", file=sys.stderr)
        return 1
    bad = check_site(args.site, args.screenshots)
    lost = follow_linear_path(args.site)
    print("the way from the README to Linear, its derivation and its test: " + ("; ".join(lost) or "followed"))
    return 1 if bad or lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
