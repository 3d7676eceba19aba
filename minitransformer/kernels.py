"""Which kernels the layers call: ``"reference"`` (the book) or ``"fast"``.

Every layer does its math through this module, for example
``y, cache = kernels.linear_forward(x, W, b)``. Two kernel sets fill it:

``reference``
    The plain kernels in :mod:`minitransformer.nn` (and the Adam update in
    :mod:`minitransformer.optim.optimizer`): forward above backward, one array
    operation per line, the math in the docstring. They are what the docs quote
    and the oracle every other kernel is tested against.
``fast`` (the default)
    :mod:`minitransformer.fast`: the same functions with the same signatures,
    written for speed (fewer passes over memory, cache-sized blocks, a CPU
    thread pool). A kernel that has no fast version is the reference one.
    ``tests/fast`` proves each fast kernel equal to its reference.

Choose with the environment variable ``MINITRANSFORMER_KERNELS`` (read once, at
import) or :func:`use` / :func:`scope` at run time. The layers look the kernel
up on every call, so a switch takes effect at once, without rebuilding a model.

``kernels.linear_forward`` is a plain attribute of this module: :func:`use`
writes the chosen set's functions into it, so a call costs one dictionary look-up.
This module imports nothing of the package (every layer imports it); the package's
``__init__`` registers the two sets (:func:`register`) and selects one.
"""
from __future__ import annotations

import contextlib
import os

KERNEL_SETS = ("reference", "fast")

# Every kernel name, in reading order. Both sets provide all of them.
NAMES = (
    "linear_forward", "linear_backward",
    "embedding_forward", "embedding_backward",
    "softmax_forward", "softmax_backward", "log_softmax",
    "cross_entropy_forward", "cross_entropy_backward",
    "attention_forward", "attention_backward", "merge_heads",
    "relative_bias_forward", "relative_bias_backward",
    "layernorm_forward", "layernorm_backward",
    "gelu_forward", "gelu_backward", "relu_forward", "relu_backward",
    "dropout_forward", "dropout_backward",
    "masked_bce_forward", "masked_bce_backward",
    "adam_update",
)

_state = {"name": None, "sets": {}}


def register(kernel_set: str, table: dict) -> None:
    """Make ``table`` ({name: function}, every name of :data:`NAMES`) selectable as
    ``kernel_set``. ``minitransformer/__init__.py`` registers the two sets."""
    missing = sorted(set(NAMES) - set(table))
    if missing:
        raise ValueError(f"kernel set {kernel_set!r} lacks {missing}")
    _state["sets"][kernel_set] = dict(table)


def table(kernel_set: str) -> dict:
    """{name: function} of a registered kernel set (a copy)."""
    if kernel_set not in _state["sets"]:
        raise ValueError(f"unknown kernel set {kernel_set!r}: use 'reference' (the plain kernels) or 'fast'")
    return dict(_state["sets"][kernel_set])


def use(kernel_set: str) -> None:
    """Make every layer call the kernels of ``kernel_set`` ("reference" or "fast")."""
    if kernel_set not in _state["sets"]:
        raise ValueError(
            f"unknown kernel set {kernel_set!r}: use 'reference' (the plain kernels) or 'fast'"
        )
    globals().update(_state["sets"][kernel_set])
    _state["name"] = kernel_set


def name() -> str:
    """The kernel set in use: "reference" or "fast"."""
    return _state["name"]


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
    try:
        _use_environment_value()
    except ValueError as err:
        if not at_import:
            raise
        use("fast")
        ENVIRONMENT_PROBLEM = str(err)


def _use_environment_value() -> None:
    value = os.environ.get("MINITRANSFORMER_KERNELS", "").strip().lower() or "fast"
    if value not in KERNEL_SETS:
        raise ValueError(
            f"MINITRANSFORMER_KERNELS={value!r} is not a kernel set: set it to 'reference' or "
            "'fast', or unset it (default: fast)"
        )
    use(value)
