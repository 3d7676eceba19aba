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
    "attention_forward", "attention_backward",
    "relative_bias_forward", "relative_bias_backward",
    "layernorm_forward", "layernorm_backward",
    "gelu_forward", "gelu_backward", "relu_forward", "relu_backward",
    "dropout_forward", "dropout_backward",
    "masked_bce_forward", "masked_bce_backward",
)

_state = {"name": None}


def reference_set() -> dict:
    """{name: function} of the reference kernels."""
    from minitransformer.nn import (
        attention, bce, elementwise, embedding, layernorm, linear, relative_position, softmax,
    )
    modules = (linear, embedding, softmax, attention, relative_position, layernorm, elementwise, bce)
    table = {}
    for module in modules:
        table.update({n: getattr(module, n) for n in NAMES if hasattr(module, n)})
    missing = sorted(set(NAMES) - set(table))
    if missing:  # pragma: no cover - a packaging error, not a user error
        raise ImportError(f"reference kernels missing: {missing}")
    return table


def fast_set() -> dict:
    """{name: function} of the fast kernels (the reference one where none is faster)."""
    from minitransformer.fast import FAST_KERNELS
    table = reference_set()
    table.update(FAST_KERNELS)
    return table


def use(kernel_set: str) -> None:
    """Make every layer call the kernels of ``kernel_set`` ("reference" or "fast")."""
    if kernel_set not in KERNEL_SETS:
        raise ValueError(
            f"unknown kernel set {kernel_set!r}: use 'reference' (the plain kernels) or 'fast'"
        )
    table = reference_set() if kernel_set == "reference" else fast_set()
    globals().update(table)
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


def use_from_environment() -> None:
    """Select the set named by ``MINITRANSFORMER_KERNELS`` (default "fast")."""
    value = os.environ.get("MINITRANSFORMER_KERNELS", "").strip().lower() or "fast"
    if value not in KERNEL_SETS:
        raise ValueError(
            f"MINITRANSFORMER_KERNELS={value!r} is not a kernel set: set it to 'reference' or "
            "'fast', or unset it (default: fast)"
        )
    use(value)
