"""The README's first example runs, with the reference kernels, code in exactly the
files the README lists (in reading order), and in no more than 12 of them; each of
those files imports only files listed above it."""
import ast
import os
import re
import sys
from pathlib import Path

import minitransformer
from minitransformer import kernels

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(minitransformer.__file__).resolve().parent


def _first_example_and_files():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## A first model"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    table = section[:section.index("**Two kernel sets.**")]
    files = re.findall(r"^\| \d+ \| `minitransformer/([^`]+)` \|", table, re.M)
    return code, files


def test_first_example_runs_code_in_the_twelve_listed_files(capsys):
    code, listed = _first_example_and_files()
    ran = set()

    def profile(frame, event, arg):  # every Python function the example calls
        if event == "call" and frame.f_code.co_name != "<module>":
            path = Path(frame.f_code.co_filename).resolve()
            if PACKAGE in path.parents:
                ran.add(str(path.relative_to(PACKAGE)).replace(os.sep, "/"))

    imports = "\n".join(line for line in code.splitlines() if line.startswith(("import ", "from ")))
    namespace = {"__name__": "readme_example"}
    exec(imports, namespace)  # importing is not running: module and class bodies are not counted
    with kernels.scope("reference"):
        sys.setprofile(profile)
        try:
            exec(compile(code, "README.md", "exec"), namespace)
        finally:
            sys.setprofile(None)
    out = capsys.readouterr().out
    assert "loss" in out, f"the example printed {out!r}"
    assert len(listed) <= 12, f"the README lists {len(listed)} files: {listed}"
    assert sorted(ran) == sorted(listed), (
        f"the example ran code in {sorted(ran)}, the README lists {listed}: "
        f"not listed {sorted(set(ran) - set(listed))}, listed but not run {sorted(set(listed) - ran)}")


#: The README path is read in one sitting: its code and its math (what a reader works through; the
#: prose that explains them is not budgeted) hold at most this many characters, with about a quarter
#: of headroom over today's 55,400 (and, as every package file, no file is over
#: ``test_structure.HARD_FILE_LINES`` lines, and one over ``MAX_FILE_LINES`` is pointed out).
MAX_CODE_AND_MATH = 70_000
MATH = re.compile(r":math:`[^`]*`|\.\. math::[^\n]*\n(?:[ \t]*\n|[ \t]+[^\n]*\n)*")


def code_and_math(source: str) -> int:
    """The characters of ``source``'s code (its tokens, without the spaces between them) and of the
    math in its docstrings and comments (``:math:`` roles and ``.. math::`` blocks)."""
    import io
    import tokenize
    count, previous = 0, tokenize.INDENT
    layout = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        docstring = token.type == tokenize.STRING and previous in layout
        if token.type == tokenize.COMMENT or docstring:
            count += sum(len(m) for m in MATH.findall(token.string))
        elif token.type not in layout:
            count += len(token.string)
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
    return count


def test_the_code_and_math_measure_counts_code_and_math_not_prose():
    source = 'def f(x):\n    """Prose, and :math:`x^2`."""\n    # more prose\n    return x * x  # :math:`y`\n'
    assert code_and_math(source) == len("deff(x):returnx*x") + len(":math:`x^2`") + len(":math:`y`")


def test_the_listed_files_are_a_book_whose_code_and_math_fit_one_sitting():
    _, listed = _first_example_and_files()
    sizes = {name: code_and_math((PACKAGE / name).read_text(encoding="utf-8")) for name in listed}
    total = sum(sizes.values())
    largest = max(sizes, key=sizes.get)
    assert total <= MAX_CODE_AND_MATH, (f"the {len(listed)} files of the README path hold {total:,} characters of code "
                                        f"and math, more than {MAX_CODE_AND_MATH:,}; the largest is {largest} "
                                        f"({sizes[largest]:,})")


def _package_imports(path: Path) -> set[str]:
    """The package files (relative to the package, like the README's) that ``path`` imports,
    at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("minitransformer"):
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in (n for n in names if n.startswith("minitransformer.")):
            rel = Path(*name.split(".")[1:])
            for candidate in (rel.with_suffix(".py"), rel / "__init__.py"):
                if (PACKAGE / candidate).is_file():
                    found.add(str(candidate).replace(os.sep, "/"))
    return found


def test_the_listed_files_are_in_an_import_order():
    """Read top to bottom, a file never uses one the reader has not reached yet."""
    _, listed = _first_example_and_files()
    for i, name in enumerate(listed):
        later = _package_imports(PACKAGE / name) & set(listed[i + 1:])
        assert not later, f"README file #{i + 1} {name} imports {sorted(later)}, listed after it: reorder the list"


def test_every_python_block_of_the_readme_runs(capsys):
    """The README's python blocks run in order in one namespace (the second builds on the first)."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    namespace = {"__name__": "readme"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md python block {i + 1}", "exec"), namespace)
    assert "loss" in capsys.readouterr().out
