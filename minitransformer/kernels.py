"""Which kernel set the layers run: ``"reference"`` (the book) or ``"fast"``.

``reference``
    The plain kernels in :mod:`minitransformer.nn` (and the Adam update in
    :mod:`minitransformer.optim.optimizer`): forward above backward, one array
    operation per line, the math in the docstring. They are what the docs quote
    and the oracle every other kernel is tested against.
``fast`` (the default)
    Their twins in :mod:`minitransformer.fast`, each file named after its
    reference (``fast/linear.py`` is the twin of ``nn/linear.py``): the same
    signatures, written for speed. ``tests/fast`` proves each equal to its reference.

A layer asks this module which set to run and calls the kernel by its name, so a
reader (or an editor's go-to-definition) lands on the math in one hop::

    if kernels.fast:
        y, self.cache = fast_linear.linear_forward(x, W, b)
    else:
        y, self.cache = linear_forward(x, W, b)

A backward runs the set that made its cache, whatever is selected by then: a fast
twin that has a backward of its own keeps its cache in a type of its own
(``FastLinearCache`` ...), and the layer sends each cache back through the file it
came from (a twin without one, like the fast GELU, leaves its cache to the reference's). So switching the set
between a forward and its backward is safe, and a switch needs no rebuilt model.

Choose with the environment variable ``MINITRANSFORMER_KERNELS`` (read once, at
import) or :func:`use` / :func:`scope` at run time. Both sets, as tables of plain
functions, are written out in :mod:`minitransformer.functional` (``REFERENCE`` and
``FAST``). This module imports nothing of the package: every layer imports it.
"""
from __future__ import annotations

import contextlib
import os

KERNEL_SETS = ("reference", "fast")

#: True while the fast set is selected: the one flag every layer reads.
fast: bool = True


def use(kernel_set: str) -> None:
    """Make every layer run the kernels of ``kernel_set`` ("reference" or "fast")."""
    global fast
    if kernel_set not in KERNEL_SETS:
        raise ValueError(f"unknown kernel set {kernel_set!r}: use 'reference' (the plain kernels) or 'fast'")
    fast = kernel_set == "fast"


def name() -> str:
    """The kernel set in use: "reference" or "fast"."""
    return "fast" if fast else "reference"


@contextlib.contextmanager
def scope(kernel_set: str):
    """``with kernels.scope("reference"): ...`` runs the block with that kernel set."""
    previous = name()
    use(kernel_set)
    try:
        yield
    finally:
        use(previous)


#: Why ``MINITRANSFORMER_KERNELS`` could not be followed at import (then "fast" is used), or None.
ENVIRONMENT_PROBLEM: str | None = None


def use_from_environment(at_import: bool = False) -> None:
    """Select the set named by ``MINITRANSFORMER_KERNELS`` (default "fast"); a bad value raises
    ValueError, or, ``at_import``, selects "fast" and is kept in :data:`ENVIRONMENT_PROBLEM` (so
    that importing never fails on it and the command can say it in one line, before any work)."""
    global ENVIRONMENT_PROBLEM
    value = os.environ.get("MINITRANSFORMER_KERNELS", "").strip().lower() or "fast"
    if value in KERNEL_SETS:
        use(value)
        return
    problem = (f"MINITRANSFORMER_KERNELS={value!r} is not a kernel set: set it to 'reference' or "
               "'fast', or unset it (default: fast)")
    if not at_import:
        raise ValueError(problem)
    use("fast")
    ENVIRONMENT_PROBLEM = problem


use_from_environment(at_import=True)
