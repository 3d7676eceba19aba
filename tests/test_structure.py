"""The package's shape, read from its source with :mod:`ast` (nothing is run):

* a layer calls its reference kernel by name, defined in its own file, and its fast
  twin by name in the fast file of the same name: a reader, an editor's
  go-to-definition or a static follower of calls lands on the math in one hop;
* the import graph of the package's files has no cycle;
* the layers import downwards: ``fast/`` imports nothing from the layers above it,
  ``nn/`` nothing from the models, optimizers, training or chemistry above it, and
  ``chem/`` (host-only SMILES work) nothing that runs a model (that is ``molecules/``).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import minitransformer

PACKAGE = Path(minitransformer.__file__).resolve().parent


def _tree(rel: str) -> ast.Module:
    return ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"no method {cls}.{name}")


def _calls(fn: ast.FunctionDef) -> tuple[set[str], set[tuple[str, str]]]:
    """The plain names called in ``fn`` (``f(...)``) and the (module alias, name) pairs
    (``m.f(...)``)."""
    names, attributes = set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                names.add(node.func.id)
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                attributes.add((node.func.value.id, node.func.attr))
    return names, attributes


def _module_functions(rel: str) -> set[str]:
    return {n.name for n in _tree(rel).body if isinstance(n, ast.FunctionDef)}


def _fast_aliases(tree: ast.Module) -> dict[str, str]:
    """{alias: fast file} of ``from minitransformer.fast import linear as fast_linear`` lines."""
    return {(a.asname or a.name): f"fast/{a.name}.py" for n in tree.body
            if isinstance(n, ast.ImportFrom) and n.module == "minitransformer.fast" for a in n.names}


# (file, class, method, the reference kernel it calls) for the layers whose kernels have a fast twin
ONE_HOP = [
    ("nn/linear.py", "Linear", "forward", "linear_forward"),
    ("nn/linear.py", "Linear", "backward", "linear_backward"),
    ("nn/layernorm.py", "LayerNorm", "forward", "layernorm_forward"),
    ("nn/layernorm.py", "LayerNorm", "backward", "layernorm_backward"),
    ("nn/attention.py", "MultiHeadAttention", "forward", "attention_forward"),
    ("nn/attention.py", "MultiHeadAttention", "backward", "attention_backward"),
    ("nn/elementwise.py", "GELU", "forward", "gelu_forward"),
    ("nn/embedding.py", "Embedding", "backward", "embedding_backward"),
    ("nn/embedding.py", "OutputProjection", "forward", "linear_forward"),
    ("nn/softmax.py", "CrossEntropyLoss", "forward", "cross_entropy_forward"),
    ("nn/softmax.py", "CrossEntropyLoss", "backward", "cross_entropy_backward"),
    ("optim/optimizer.py", "Adam", "_update", "adam_update"),
]


@pytest.mark.parametrize("rel, cls, method, kernel", ONE_HOP, ids=[f"{c}.{m}" for _, c, m, _ in ONE_HOP])
def test_a_layer_names_its_kernel_and_its_twin(rel, cls, method, kernel):
    """Following ``x`` from ``Linear.forward`` by its calls reaches
    ``linear_forward``'s body without a dispatch table in between."""
    tree = _tree(rel)
    names, attributes = _calls(_method(tree, cls, method))
    assert kernel in names, f"{cls}.{method} ({rel}) does not call {kernel}(...) by name"
    defined_here = _module_functions(rel)
    imported = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    if kernel not in defined_here:  # a kernel of an earlier file of the book (OutputProjection's linear)
        source = imported.get(kernel, "")
        assert source.startswith("minitransformer.nn."), f"{kernel} in {rel} is neither defined nor imported from nn/"
        assert kernel in _module_functions(source.replace("minitransformer.", "").replace(".", "/") + ".py")
    twins = [(alias, fast_file) for alias, fast_file in _fast_aliases(tree).items() if (alias, kernel) in attributes]
    assert twins, f"{cls}.{method} ({rel}) does not call the fast twin <fast module>.{kernel}(...) by name"
    for _, fast_file in twins:
        assert kernel in _module_functions(fast_file), f"{fast_file} defines no {kernel}"


def _module_file(dotted: str) -> str | None:
    """The package file (relative, like "nn/linear.py") of a dotted module name, or None."""
    parts = dotted.split(".")[1:]
    if not parts:
        return "__init__.py"
    rel = Path(*parts)
    for candidate in (rel.with_suffix(".py"), rel / "__init__.py"):
        if (PACKAGE / candidate).is_file():
            return str(candidate).replace("\\", "/")
    return None


def _imports(rel: str) -> set[str]:
    """The package files ``rel`` imports, at module level or inside a function: ``from a.b
    import c`` is the file of ``a.b.c`` when c is a module, else the file of ``a.b``."""
    found = set()
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("minitransformer"):
            for alias in node.names:
                target = _module_file(f"{node.module}.{alias.name}") or _module_file(node.module)
                if target:
                    found.add(target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("minitransformer."):
                    target = _module_file(alias.name)
                    if target:
                        found.add(target)
    found.discard(rel)
    return found


def _graph() -> dict[str, set[str]]:
    files = [str(p.relative_to(PACKAGE)).replace("\\", "/") for p in PACKAGE.rglob("*.py")]
    return {f: _imports(f) for f in sorted(files)}


def _a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (a list of files, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _a_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_graph_has_no_cycle():
    cycle = _a_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# What each part of the kernel stack may not import (folders, or files, relative to the package).
FORBIDDEN = {
    "fast/": ("nn/", "optim/", "models/", "generate/", "train/", "checkpoint/", "chem/", "cli/", "tasks.py"),
    "nn/": ("optim/", "models/", "generate/", "train/", "checkpoint/", "chem/", "cli/", "tasks.py", "functional/"),
    # the chemistry layer reads, cleans and judges SMILES on the host; what runs a model is molecules/
    "chem/": ("models/", "generate/", "train/", "checkpoint/", "tasks.py", "cli/", "molecules/", "viz/", "nn/",
              "optim/"),
    # the FCD is a tool of the judging: the judging imports it, never the other way round
    "chem/frechet/": ("chem/judge/",),
    "backend.py": ("fast/", "nn/"),
    "kernels.py": ("fast/", "nn/", "backend.py"),
}


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_the_layers_import_only_downwards(part):
    graph = _graph()
    for rel, targets in graph.items():
        if rel == part or rel.startswith(part) and part.endswith("/"):
            bad = sorted(t for t in targets if t.startswith(FORBIDDEN[part]))
            assert not bad, f"{rel} imports {bad}, which sit above {part}"


#: One concept per file: a package file longer than this may hold two, and the suite says so (a
#: warning: look at it while it is still easy to split by concept, never to meet the count) ...
MAX_FILE_LINES = 400
#: ... and past this it fails: a file this long holds two concepts.
HARD_FILE_LINES = 480


def test_no_package_file_is_so_long_that_it_must_hold_two_concepts():
    import warnings
    lines = {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8").count("\n") for p in PACKAGE.rglob("*.py")}
    growing = {rel: n for rel, n in lines.items() if MAX_FILE_LINES < n <= HARD_FILE_LINES}
    if growing:
        warnings.warn(f"package files over {MAX_FILE_LINES} lines, each perhaps two concepts: {growing}")
    long = {rel: n for rel, n in lines.items() if n > HARD_FILE_LINES}
    assert not long, f"package files over {HARD_FILE_LINES} lines (split them by concept): {long}"


def _private_imports(tree: ast.Module, own: str) -> list[str]:
    """``module:name`` for every private name (one leading underscore) the module ``own`` (dotted)
    imports from another package module, at module level or inside a function."""
    return [f"{node.module}:{alias.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("minitransformer")
            and node.module != own for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_no_module_imports_another_modules_private_names():
    """A name one module shares with another is public there: no ``from minitransformer.x import _y``."""
    found = {}
    for rel in _graph():
        own = "minitransformer." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        names = _private_imports(_tree(rel), own)
        if names:
            found[rel] = names
    assert not found, f"private names imported across modules (make them public where they are defined): {found}"


def test_the_private_import_finder_sees_one_inside_a_function():
    tree = ast.parse("from minitransformer.generate.decode import shown\n"
                     "def f():\n    from minitransformer.generate.decode import _hidden, __version__\n"
                     "    from minitransformer.cli.x import _mine\n")
    assert _private_imports(tree, "minitransformer.cli.x") == ["minitransformer.generate.decode:_hidden"]


def _package_members(package: Path) -> list[str]:
    """The module and subpackage names of ``package`` (a folder of the package)."""
    modules = [p.stem for p in package.glob("*.py") if not p.stem.startswith("__")]
    return sorted(modules + [d.name for d in package.iterdir() if (d / "__init__.py").is_file()])


@pytest.mark.parametrize("init", sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py")))
def test_every_package_docstring_names_each_of_its_modules(init):
    """A reader who opens a package's ``__init__`` finds every room in it named there."""
    import re
    doc = ast.get_docstring(_tree(init)) or ""
    missing = [m for m in _package_members((PACKAGE / init).parent) if not re.search(rf"\b{re.escape(m)}\b", doc)]
    assert not missing, f"{init}: its docstring does not name {missing}"


#: The files outside ``fast/`` that may import it: the book's layers that dispatch to a twin (``nn/``,
#: ``optim/``, the sampling draw), the tables of both sets (``functional/``) and what reports what runs.
FAST_DOORS = ("nn/", "optim/", "generate/sampling.py", "functional/", "runtime.py")


def test_the_fast_set_is_reached_only_through_the_layers_that_dispatch_to_it():
    graph = _graph()
    reaching = sorted(rel for rel, targets in graph.items() if not rel.startswith("fast/")
                      and any(t.startswith("fast/") for t in targets) and not rel.startswith(FAST_DOORS))
    assert not reaching, f"{reaching} import the fast set; ask the layer or the optimizer that dispatches to it"


#: The training commands' files, and the functions of them that may read the parsed command line:
#: each command's ``settings`` and what it calls to build its recipe and invocation (``run`` hands
#: the command line to ``settings``).
TRAINING_FILES = ("cli/training.py", "cli/train_lm.py", "cli/train_property.py", "cli/train_seq2seq.py",
                  "cli/property_runs.py", "cli/lm_time_plan.py")
READS_THE_COMMAND_LINE = {"settings", "run", "add_parser", "resolve_recipe", "_lstm_recipe", "invocation", "preset",
                          "apply_overrides", "set_budgets"}


def _command_line_readers(tree) -> list[str]:
    """The functions of ``tree`` that take a parameter named ``args`` or read ``run.args``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = [a.arg for a in node.args.args + node.args.kwonlyargs]
            reads = any(isinstance(n, ast.Attribute) and n.attr == "args" for n in ast.walk(node))
            if "args" in params or reads:
                found.append(node.name)
    return found


@pytest.mark.parametrize("rel", TRAINING_FILES)
def test_a_training_command_reads_its_command_line_in_one_place(rel):
    """After ``TrainingCommand.settings``, a run's steps read the recipe and the invocation, not ``args``."""
    readers = set(_command_line_readers(_tree(rel))) - READS_THE_COMMAND_LINE
    assert not readers, f"{rel}: {sorted(readers)} read the command line; take what they need from the recipe"


def test_the_command_line_reader_finder_sees_a_hook_that_reads_it():
    tree = ast.parse("def training(self, run):\n    return run.args.seed\n"
                     "def load(self, args, recipe):\n    pass\ndef evaluate(self, run):\n    return run.recipe\n")
    assert _command_line_readers(tree) == ["training", "load"]
