r"""Gradient-check results: the comparison rule and the reports built on it.

:func:`relative_error` is the one rule that decides whether an analytic value
matches a numerical one; :func:`compare_gradients` applies it to a whole tensor
and keeps the worst element as a :class:`TensorCheck` ("which tensor, largest
error, where"); :class:`GradcheckReport` collects the checks of one call, prints
them as a table, and raises :class:`GradcheckError` when one failed.

Comparing analytic and numerical values
---------------------------------------
For an analytic value :math:`a` and a numerical value :math:`n` the error is

.. math:: \mathrm{err} = \frac{|a - n|}{\max(|a|,\ |n|,\ \mathrm{atol}/\mathrm{rtol})}

and a tensor passes when its largest error is at most ``rtol``. Equivalently
:math:`|a-n| \le \max(\mathrm{rtol}\cdot\max(|a|,|n|),\ \mathrm{atol})`: large
gradients are compared relatively, gradients below ``atol/rtol`` absolutely (a
true zero cannot be matched relatively by a numerical estimate that carries
noise). The defaults, ``rtol = 1e-5`` and ``atol = 1e-8`` (so the floor is
1e-3), suit float64 on tiny shapes: a correct backward typically lands at
1e-11 to 1e-8, while a wrong one (a forgotten term, a transposed matrix, a
missing scale) is off by 1e-2 or more.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minitransformer import backend
from minitransformer.gradcheck.numerical import DEFAULT_EPS

__all__ = [
    "DEFAULT_RTOL", "DEFAULT_ATOL",
    "GradcheckError", "TensorCheck", "GradcheckReport",
    "relative_error", "compare_gradients",
]

DEFAULT_RTOL = 1e-5
"""Largest accepted relative error."""
DEFAULT_ATOL = 1e-8
"""Absolute differences below this always pass (the relative floor is ``atol / rtol``)."""


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------
class GradcheckError(AssertionError):
    """A gradient check failed. ``.report`` holds the full :class:`GradcheckReport`."""

    def __init__(self, message: str, report: "GradcheckReport | None" = None):
        super().__init__(message)
        self.report = report


def format_where(name: str, where) -> str:
    """``W[1, 0]`` for an element index, ``W (direction 2 of 3)`` for a direction."""
    if isinstance(where, tuple):
        return f"{name}[{', '.join(str(i) for i in where)}]" if where else name
    return f"{name} ({where})" if where else name


@dataclass
class TensorCheck:
    """The outcome of checking one tensor (an input or a parameter).

    Attributes:
        name: the input's or parameter's name.
        shape: its shape.
        ok: whether every compared value is within tolerance.
        max_error: the largest error (see :func:`relative_error`); ``inf`` for
            NaN/inf values or a structural problem.
        where: index tuple of the worst element (element-wise mode), or a string
            such as ``"direction 2 of 3"`` (directional mode).
        analytic, numerical: the two values at ``where``.
        n_compared: how many values (elements or directions) were compared.
        note: a structural problem (wrong shape, missing gradient), else "".
    """

    name: str
    shape: tuple
    ok: bool
    max_error: float
    where: Any = None
    analytic: float = float("nan")
    numerical: float = float("nan")
    n_compared: int = 0
    note: str = ""

    def describe(self) -> str:
        """One line: the verdict, the largest error, where, and both values there."""
        status = "ok    " if self.ok else "FAILED"
        head = f"{status} {self.name} {tuple(self.shape)}"
        if self.note:
            return f"{head}: {self.note}"
        if self.n_compared == 0:
            return f"{head}: nothing to compare (empty)"
        return (
            f"{head}: max relative error {self.max_error:.3e} at {format_where(self.name, self.where)}: "
            f"analytic {self.analytic:.9e} vs numerical {self.numerical:.9e}"
        )


@dataclass
class GradcheckReport:
    """All :class:`TensorCheck` results of one call. ``str(report)`` is a readable table."""

    checks: list = field(default_factory=list)
    mode: str = "elementwise"
    eps: float = DEFAULT_EPS
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    title: str = "gradient check"

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list:
        return [c for c in self.checks if not c.ok]

    def __getitem__(self, name: str) -> TensorCheck:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def __str__(self) -> str:
        verdict = "passed" if self.ok else f"FAILED for {len(self.failures)} of {len(self.checks)} tensor(s)"
        lines = [
            f"{self.title} ({self.mode}, eps={self.eps:g}, rtol={self.rtol:g}, atol={self.atol:g}): {verdict}"
        ]
        lines += ["  " + c.describe() for c in self.checks]
        return "\n".join(lines)

    def raise_if_failed(self) -> "GradcheckReport":
        """Raise :class:`GradcheckError` naming each failing tensor; else return self."""
        if self.ok:
            return self
        worst = "; ".join(
            f"{c.name}: {c.note}" if c.note else
            f"{c.name}: max relative error {c.max_error:.3e} at {format_where(c.name, c.where)} "
            f"(analytic {c.analytic:.9e}, numerical {c.numerical:.9e})"
            for c in self.failures
        )
        raise GradcheckError(f"gradient check failed for {worst}\n{self}", self)


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------
def relative_error(analytic, numerical, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL):
    r"""Element-wise :math:`|a-n| / \max(|a|, |n|, \mathrm{atol}/\mathrm{rtol})` on the host.

    A value passes when its error is at most ``rtol``, i.e. when
    :math:`|a-n| \le \max(\mathrm{rtol}\max(|a|,|n|),\ \mathrm{atol})`. NaN or
    infinite inputs give an error of ``inf``. Returns a float64 NumPy array.
    """
    if rtol <= 0:
        raise ValueError(f"rtol must be positive, got {rtol}")
    a = np.asarray(backend.to_numpy(analytic), dtype=np.float64)
    n = np.asarray(backend.to_numpy(numerical), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.maximum(np.maximum(np.abs(a), np.abs(n)), atol / rtol)
        err = np.abs(a - n) / scale
    err[~(np.isfinite(a) & np.isfinite(n))] = np.inf
    return err


def compare_gradients(name: str, analytic, numerical, *, rtol: float = DEFAULT_RTOL,
                      atol: float = DEFAULT_ATOL) -> TensorCheck:
    """Compare an analytic gradient with a numerical one, element by element.

    Both may be arrays of any backend (or ``None`` for a missing analytic
    gradient). Returns a :class:`TensorCheck` naming the worst element.
    """
    n = np.asarray(backend.to_numpy(numerical), dtype=np.float64)
    if analytic is None:
        return TensorCheck(name, n.shape, False, float("inf"), n_compared=0,
                           note="the backward pass returned None instead of a gradient")
    a = np.asarray(backend.to_numpy(analytic), dtype=np.float64)
    if a.shape != n.shape:
        return TensorCheck(name, n.shape, False, float("inf"), n_compared=0,
                           note=f"analytic gradient has shape {a.shape}, expected {n.shape} "
                                "(the shape of the tensor itself)")
    if a.size == 0:
        return TensorCheck(name, n.shape, True, 0.0, n_compared=0)
    err = relative_error(a, n, rtol, atol)
    flat = int(np.argmax(err))
    where = tuple(int(i) for i in np.unravel_index(flat, a.shape))
    worst = float(err.flat[flat])
    return TensorCheck(name, n.shape, bool(worst <= rtol), worst, where,
                       float(a.flat[flat]), float(n.flat[flat]), int(a.size))

