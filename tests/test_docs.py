"""The docs cannot drift from the code.

Every ```python block in ``docs/**/*.md`` carries exactly one marker on the line
above it (the rules are in ``docs/sync_excerpts.py``):

(a) ``<!-- include: PATH:NAME [from "..."] [to "..."] -->`` or ``<!-- run -->``,
    nothing else, and no marker without a python block under it;
(b) an include block equals the current source of what it names (a failure shows
    the page, the block and a unified diff; ``python docs/sync_excerpts.py`` fixes it);
(c) the runnable blocks of each page run, in order, in one namespace, with the
    reference kernels selected, without an exception;
(d) every relative link (and its #anchor), every repository path in backticks
    (``minitransformer/nn/linear.py``, ``tests/fast``, ``docs/kernels/*.md``) and
    every dotted ``minitransformer.*`` name in backticks exists.
"""
from __future__ import annotations

import ast
import contextlib
import glob
import importlib
import importlib.util
import re
import sys
import time
import traceback

import pytest

from minitransformer import backend, kernels
from minitransformer.fast.engine import parallel

_spec = importlib.util.spec_from_file_location(
    "sync_excerpts", __import__("pathlib").Path(__file__).resolve().parent.parent / "docs" / "sync_excerpts.py")
sync = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sync
_spec.loader.exec_module(sync)

ROOT = sync.ROOT
PAGES = sync.pages()
IDS = [str(p.relative_to(sync.DOCS)) for p in PAGES]

# The optim package (optim/optimizer.py, schedules.py, clip.py) is being split out of
# the single module minitransformer/optim.py on another branch. The docs already name
# its files; they are accepted only while that single module is still here, so the
# first run after the split checks them for real.
PENDING_OPTIM = {
    "minitransformer/optim/", "minitransformer/optim/optimizer.py",
    "minitransformer/optim/schedules.py", "minitransformer/optim/clip.py",
    "minitransformer.optim.optimizer", "minitransformer.optim.optimizer.adam_update",
}


def _pending(name: str) -> bool:
    return name in PENDING_OPTIM and (ROOT / "minitransformer" / "optim.py").is_file()


def test_there_are_pages():
    assert len(PAGES) >= 10, IDS


# -- (a) every python block is covered by exactly one rule --------------------------
@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_python_block_has_exactly_one_rule(page):
    problems = []
    blocks = sync.blocks(page)
    above_python = {b.marker_line for b in blocks if b.is_python and b.marker}
    for line, text in sync.markers(page):
        if not (sync.INCLUDE.match(text) or sync.RUN.match(text)):
            problems.append(f"line {line}: malformed marker {text!r}")
        elif line not in above_python:
            problems.append(f"line {line}: marker {text!r} is not directly above a ```python block")
    for b in blocks:
        if not b.is_python:
            continue
        if b.indent:
            problems.append(f"{b.where}: a ```python block must start at the left margin")
        if b.marker is None:
            problems.append(f"{b.where}: ```python block without a marker: put <!-- run --> or "
                            "<!-- include: PATH:NAME --> on the line above it")
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


# -- (b) every include equals the source ----------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_includes_match_the_source(page):
    failures = []
    for b in sync.blocks(page):
        if not (b.marker and sync.INCLUDE.match(b.marker)):
            continue
        try:
            want = sync.expected(b)
        except sync.ExcerptError as exc:
            failures.append(f"{b.where}: {b.marker}\n  {exc}")
            continue
        if want != b.code:
            failures.append(f"{b.where}: {b.marker}\n--- the block in the page:\n{b.code}"
                            f"--- diff (page -> source):\n{sync.diff(b, want)}")
    assert not failures, ("stale excerpts (refresh with: python docs/sync_excerpts.py)\n\n"
                          + "\n\n".join(failures))


# -- (c) runnable blocks run -----------------------------------------------------------
RUNNABLE = [p for p in PAGES if any(b.marker and sync.RUN.match(b.marker) for b in sync.blocks(p))]


@contextlib.contextmanager
def _one_blas_thread():
    """BLAS on one thread while the blocks run: their products are tiny, and on a busy
    machine BLAS threads that spin waiting for work made the build page 20x slower.
    (The setter is OpenBLAS's, found by the fast kernels' thread pool; None elsewhere.)"""
    setter = parallel._blas_setter()
    previous = setter(1) if setter else None
    try:
        yield
    finally:
        if setter:
            setter(previous)


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(sync.DOCS)) for p in RUNNABLE])
def test_runnable_blocks_run(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "docs_" + re.sub(r"\W", "_", page.stem)}
    start = time.perf_counter()
    with kernels.scope("reference"), backend.dtype_scope(backend.get_dtype()), _one_blas_thread():
        for b in sync.blocks(page):
            if not (b.marker and sync.RUN.match(b.marker)):
                continue
            # padded so that a traceback's line numbers are the page's own
            code = compile("\n" * b.line + b.code, str(page), "exec")
            try:
                exec(code, namespace)
            except Exception:
                pytest.fail(f"{b.where}: the runnable block raised\n{b.code}\n{traceback.format_exc()}",
                            pytrace=False)
    assert time.perf_counter() - start < 20, f"{page.name}: runnable blocks took over 20 s; keep them tiny"


# -- (d) links, paths and names exist -------------------------------------------------
def _prose(text: str) -> str:
    """The page without its fenced blocks (their lines blanked, so line numbers stay)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = sync.FENCE.match(line)
        if fence is None and m:
            fence = m.group("fence")
            out.append("")
        elif fence is not None:
            if re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", line):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page) -> set:
    seen, out = {}, set()
    for line in _prose(page.read_text(encoding="utf-8")).split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = _slug(m.group(1))
            n = seen.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            seen[s] = n + 1
    return out


def _python_name_exists(path, name: str) -> bool:
    try:
        sync._find(ast.parse(path.read_text(encoding="utf-8")), name)
        return True
    except sync.ExcerptError:
        return False


def _path_problem(ref: str):
    """None if the backticked repository path ``ref`` exists, else why not."""
    if _pending(ref):
        return None
    path, _, name = ref.partition("::")  # a pytest node id: path::test_name
    if not name:
        path, _, name = path.partition(":")  # path:qualified.name
    if any(c in path for c in "*?["):
        return None if glob.glob(str(ROOT / path), recursive=True) else f"`{ref}`: the pattern matches nothing"
    file = ROOT / path
    if not file.exists():
        return f"`{ref}`: no such file or folder"
    if name and not _python_name_exists(file, name):
        return f"`{ref}`: {path} defines no {name!r}"
    return None


def _dotted_problem(ref: str):
    """None if ``minitransformer.a.b.c`` is a module, or an attribute reached from one."""
    if _pending(ref):
        return None
    parts = ref.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return f"`{ref}`: {'.'.join(parts[:k])} has no attribute path {'.'.join(parts[k:])!r}"
            obj = getattr(obj, attr)
        return None
    return f"`{ref}`: cannot be imported"


LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
REPO_PATH = re.compile(r"^(minitransformer|tests|docs|demos|bench)(/[\w.*?\[\]/-]*)?(::?[\w.]+)?$")
DOTTED = re.compile(r"^minitransformer(\.[A-Za-z_]\w*)+$")


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_links_and_named_paths_exist(page):
    text = _prose(page.read_text(encoding="utf-8"))
    problems = []
    for n, line in enumerate(text.split("\n"), 1):
        for m in LINK.finditer(line):
            target = m.group("target")
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                problems.append(f"line {n}: link to {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                problems.append(f"line {n}: link to {target}: {dest.name} has no heading #{anchor}")
        for m in CODE_SPAN.finditer(line):
            ref = m.group(1).strip()
            problem = None
            if REPO_PATH.match(ref) and "/" in ref:
                problem = _path_problem(ref)
            elif DOTTED.match(ref):
                problem = _dotted_problem(ref)
            if problem:
                problems.append(f"line {n}: {problem}")
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


# -- the tool itself --------------------------------------------------------------------
def test_sync_tool_rewrites_a_stale_block(tmp_path):
    page = tmp_path / "p.md"
    stale = ("intro\n<!-- include: minitransformer/nn/softmax.py:softmax_backward from \"p, axis\" -->\n"
             "```python\nold line\n```\nend\n")
    page.write_text(stale, encoding="utf-8")
    assert sync.sync(page, check=True) and page.read_text(encoding="utf-8") == stale  # --check: reports only
    diffs = sync.sync(page)
    assert len(diffs) == 1 and "-old line" in diffs[0]
    (b,) = sync.blocks(page)
    assert b.code == sync.expected(b) and b.code.startswith("p, axis = cache\n")
    assert page.read_text(encoding="utf-8").endswith("```\nend\n")
    assert sync.sync(page) == []  # now fresh


def test_excerpt_selection_rules():
    whole = sync.excerpt("minitransformer/nn/linear.py", "Linear.backward")
    assert whole.startswith("def backward(self, dy):\n") and whole.endswith("return dx\n")
    part = sync.excerpt("minitransformer/nn/linear.py", "Linear.backward", "self.weight.grad", "bias.grad")
    assert part == "self.weight.grad += dW\nif self.bias is not None:\n    self.bias.grad += db\n"
    assert sync.excerpt("minitransformer/functional/__init__.py", "FAST").startswith("FAST = {")
    with pytest.raises(sync.ExcerptError):
        sync.excerpt("minitransformer/nn/linear.py", "Linear.nothing")
    with pytest.raises(sync.ExcerptError):
        sync.excerpt("minitransformer/nn/linear.py", "Linear.backward", "no such text")


@pytest.mark.parametrize("path, start", [("README.md", "The demo (`minitransformer train lm`)"),
                                         ("docs/build.md", "is what `minitransformer train lm` does")])
def test_the_default_run_is_told_as_its_preset_runs_it(path, start):
    """The molecules and minutes the README's Quick start and the guided build state for
    ``train lm`` come from its default preset: changing the preset without these pages fails here."""
    from minitransformer.cli.train_lm import PRESETS
    preset = PRESETS["default"]
    text = (ROOT / path).read_text(encoding="utf-8")
    paragraph = " ".join(text[text.index(start):].split("\n\n")[0].split())
    assert "MOSES molecules" in paragraph, f"{path}: the default run pretrains on MOSES; the page says {paragraph!r}"
    budget = preset.time_budget / 60
    minutes = [float(m) for m in re.findall(r"(?:within|in its) (\d+(?:\.\d+)?) minutes", paragraph)]
    assert minutes and all(m == budget for m in minutes), (
        f"{path}: the default run's budget is {budget:g} minutes, start to summary; the page says {minutes} "
        f"({paragraph!r})")


def _twin_statements():
    """(page, reference modules, named twin module or None) of each docs/kernels page that says."""
    out = []
    for page in sorted((ROOT / "docs" / "kernels").glob("*.md")):
        text = page.read_text()
        ref = re.search(r"\*\*Reference (kernels?|file):\*\*(.*?)\*\*Fast twin:\*\*\s*(\S+)", text, re.S)
        if ref is None:
            continue
        kernels = ref.group(1) != "file"  # a "Reference file" page (blocks, models) has no kernels of its own
        refs = [m.replace("/", ".")[:-3] for m in re.findall(r"`(minitransformer/[\w/]+\.py)`", ref.group(2))]
        refs = refs if kernels else []
        twin = ref.group(3).strip("`.;,")
        out.append((page.name, refs, None if twin == "none" else twin.replace("/", ".")[:-3]))
    return out


def test_every_kernel_page_names_the_twin_that_exists():
    """Each docs/kernels page's "Fast twin" line (and the index table) agrees with the kernel tables: a
    page says none exactly when the fast set runs the reference's own kernels (linear.md once said none
    while fast/linear.py existed)."""
    from minitransformer import functional
    statements = _twin_statements()
    assert len(statements) >= 11, statements
    index = (ROOT / "docs" / "kernels" / "README.md").read_text()
    for page, refs, twin in statements:
        names = [n for n in functional.NAMES if functional.REFERENCE[n].__module__ in refs]
        twins = {functional.FAST[n].__module__ for n in names if functional.FAST[n] is not functional.REFERENCE[n]}
        assert twins == ({twin} if twin else set()), f"{page} names the twin {twin}; the kernel tables have {twins}"
        row = next((line for line in index.splitlines() if f"]({page})" in line), None)
        if row is not None:
            cell = row.rstrip(" |").rsplit("|", 1)[-1].strip()
            assert (cell.startswith("none") if twin is None else f"`{twin.replace('.', '/')}.py`" in cell), \
                f"docs/kernels/README.md's row of {page} says {cell!r}"


#: Each figure the README states, as it writes it (speed in benchmarks/RESULTS.md, the rest in docs/RESULTS.md).
README_FIGURES = ("within 15 minutes", "1.31x", "10–20 second", "under a minute", "316k", "0.58", "0.5–0.85",
                  "0.81–1.23", "0.85–1.10")


@pytest.mark.parametrize("figure", README_FIGURES)
def test_every_figure_the_readme_states_has_a_headline_row_with_its_command(figure):
    """The README's numbers come from measured runs: each appears in the headline table (the first 40
    lines) of docs/RESULTS.md or benchmarks/RESULTS.md, on a row that gives the command."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert figure in readme, f"the README no longer says {figure!r}: update README_FIGURES"
    rows = []
    for page in ("docs/RESULTS.md", "benchmarks/RESULTS.md"):
        head = (ROOT / page).read_text(encoding="utf-8").splitlines()[:40]
        rows += [line for line in head if line.startswith("|") and figure in line]
    assert any("`" in row for row in rows), f"no headline row states {figure!r} with its command: {rows}"


#: A results page past this many lines is pointed out (a warning: is a superseded figure still there?),
#: and fails the suite only past the second: a guide to the page's size, not a count to meet.
RESULTS_LINES, HARD_RESULTS_LINES = 300, 360


@pytest.mark.parametrize("page", ["docs/RESULTS.md", "benchmarks/RESULTS.md"])
def test_the_results_pages_are_the_current_state_not_a_diary(page):
    import warnings
    text = (ROOT / page).read_text(encoding="utf-8")
    n = len(text.splitlines())
    if RESULTS_LINES < n <= HARD_RESULTS_LINES:
        warnings.warn(f"{page} has {n} lines: does each figure still state the current truth?")
    assert n <= HARD_RESULTS_LINES, f"{page} has {n} lines; it states the current truth, not every run"
    assert not re.search(r"\bsession[s]? ?\d|\bissue \d|this mornin[g]", text, re.I), f"{page} reads like a work log"


def _defined_names(path) -> set:
    """The names a module defines at its top: functions, classes, assigned names (and imported ones)."""
    import ast
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_every_name_the_reading_order_gives_is_defined_in_a_file_its_step_names():
    """docs/README.md's reading order: a name like `RNG` or `Stack` in a step is defined at the top of one of
    the files that step names, so a reader who opens the file finds it (once `forbid_host_sync` was sent
    to the wrong file)."""
    import re
    text = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## A reading order for newcomers"):text.index("Then the fast twins")]
    steps = re.split(r"\n(?=\d+\. )", section)[1:]
    checked = 0
    for step in steps:
        files = [ROOT / f for f in re.findall(r"`(minitransformer/[\w/]+\.py)`", step)]
        assert files and all(f.is_file() for f in files), step[:80]
        defined = set().union(*(_defined_names(f) for f in files))
        for name in re.findall(r"`([A-Za-z_]\w*)(?:\(\))?`", step):
            if name in ("data", "grad", "forward", "backward", "step"):  # attributes and methods, named as such
                continue
            assert name in defined, f"docs/README.md's reading order names `{name}` beside {files}, which do not define it"
            checked += 1
    assert checked >= 6
