r"""Finite-difference gradient checks for handwritten backward passes.

minitransformer has no autograd, so every ``backward`` is written by hand and
every one of them has to be proven against an independent reference. That
reference is the *definition* of the derivative, evaluated numerically. This
module does it for pure kernels (:func:`check_kernel`), for stateful layers
(:func:`check_module`) and for any scalar function (:func:`numerical_grad`).

Central differences
-------------------
For a scalar function :math:`L` of an array :math:`x`, a step :math:`\varepsilon`
and the unit array :math:`e_i` (1 at position :math:`i`, 0 elsewhere),

.. math::
    \frac{\partial L}{\partial x_i} \approx
    \frac{L(x + \varepsilon e_i) - L(x - \varepsilon e_i)}{2\varepsilon}.

Expanding both evaluations in a Taylor series,
:math:`L(x \pm \varepsilon e_i) = L \pm \varepsilon L' + \tfrac{\varepsilon^2}{2} L''
\pm \tfrac{\varepsilon^3}{6} L''' + O(\varepsilon^4)`, the even terms cancel and

.. math::
    \frac{L(x + \varepsilon e_i) - L(x - \varepsilon e_i)}{2\varepsilon}
    = L' + \frac{\varepsilon^2}{6} L''' + O(\varepsilon^4),

so the *truncation* error is :math:`O(\varepsilon^2)` (a one-sided difference
only reaches :math:`O(\varepsilon)`). Against it stands the *rounding* error:
each evaluation of :math:`L` is off by about :math:`u|L|` (unit roundoff
:math:`u = 2^{-53} \approx 1.1\times10^{-16}` in float64), and dividing by
:math:`2\varepsilon` magnifies that to about :math:`u|L|/\varepsilon`. With the
default :math:`\varepsilon = 10^{-6}` the total is roughly
:math:`10^{-12}|L'''| + 10^{-10}|L|`. In float32 (:math:`u \approx 6\times10^{-8}`)
the rounding term alone would be about :math:`0.06\,|L|`, which is why every
check here insists on float64 arrays (build them under
``backend.dtype_scope("float64")``). The step is taken as the difference of
the two *stored* perturbed values, :math:`(x_i+\varepsilon) - (x_i-\varepsilon)`,
which is exactly representable, rather than the nominal :math:`2\varepsilon`.

Scalarising an array output
---------------------------
Kernels and layers return arrays, but a derivative check needs a scalar. We use

.. math:: L = \sum_j \mathrm{out}_j\, R_j

for a fixed random array :math:`R` (random signs, magnitudes in [0.5, 1.5), so
every output element carries real weight and errors in different elements
cannot cancel systematically). Since :math:`\partial L/\partial\,\mathrm{out} = R`,
calling the analytic backward with ``dout = R`` yields exactly :math:`\nabla L`.
The numerical side evaluates :math:`\sum_j (\mathrm{out}_j(x+\varepsilon e_i) -
\mathrm{out}_j(x-\varepsilon e_i))\,R_j`: the same number mathematically, but outputs
that do not depend on :math:`x_i` cancel exactly before the weighted sum, so
the rounding noise is that of the affected outputs only, not of all of :math:`L`.

Comparing the two
-----------------
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

Directional derivatives
-----------------------
Element-wise checking costs two forward passes per element. For large layers
:func:`check_module` (and :func:`check_kernel`) can instead compare, for a few
random unit arrays :math:`u` (:math:`\|u\|_2 = 1`), the directional derivative

.. math::
    D_u L = \langle \nabla L, u\rangle
    \approx \frac{L(\theta + \varepsilon u) - L(\theta - \varepsilon u)}{2\varepsilon},

two forward passes per direction. A wrong gradient :math:`g \ne \nabla L` goes
unnoticed only if :math:`u \perp (g - \nabla L)`, which a random direction hits
with probability zero; but an error confined to a few elements of a large
tensor is diluted by roughly :math:`1/\sqrt{n}`, so the element-wise mode
remains the sharper tool where it is affordable. Directions are drawn per
tensor, or jointly over all checked tensors (``joint=True``).

Backends
--------
Everything runs under the ``numpy``, ``strict`` and ``cupy`` backends: arrays
are perturbed in place through item assignment and ``xp`` arithmetic on the
device, and only the reductions needed for reporting are copied to the host
with :func:`minitransformer.backend.to_numpy`.

Example
-------
>>> import numpy as np
>>> from minitransformer import backend, gradcheck
>>> from minitransformer.functional import linear_forward, linear_backward
>>> g = np.random.default_rng(0)
>>> x, W, b = (backend.asarray(g.standard_normal(s)) for s in [(2, 3), (3, 4), (4,)])
>>> report = gradcheck.check_kernel(linear_forward, linear_backward, {"x": x, "W": W, "b": b})
>>> report.ok
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from minitransformer import backend

__all__ = [
    "DEFAULT_EPS", "DEFAULT_RTOL", "DEFAULT_ATOL",
    "GradcheckError", "TensorCheck", "GradcheckReport",
    "relative_error", "compare_gradients", "numerical_grad", "numerical_directional",
    "check_kernel", "check_module",
]

DEFAULT_EPS = 1e-6
"""Step of the central differences (float64)."""
DEFAULT_RTOL = 1e-5
"""Largest accepted relative error."""
DEFAULT_ATOL = 1e-8
"""Absolute differences below this always pass (the relative floor is ``atol / rtol``)."""

_MODES = ("elementwise", "directional")


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------
class GradcheckError(AssertionError):
    """A gradient check failed. ``.report`` holds the full :class:`GradcheckReport`."""

    def __init__(self, message: str, report: "GradcheckReport | None" = None):
        super().__init__(message)
        self.report = report


def _fmt_where(name: str, where) -> str:
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
            f"{head}: max relative error {self.max_error:.3e} at {_fmt_where(self.name, self.where)}: "
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
            f"{c.name}: max relative error {c.max_error:.3e} at {_fmt_where(c.name, c.where)} "
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


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def _looks_like_array(v) -> bool:
    """Arrays of any backend and NumPy scalars (NumPy reductions return those), not Python numbers."""
    if isinstance(v, np.generic):
        return True
    return v is not None and hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, (int, float))


def _is_float_array(v, name: str = "input") -> bool:
    """True for floating-point arrays of the active backend (the differentiable inputs)."""
    if not _looks_like_array(v) or getattr(v.dtype, "kind", "") != "f":
        return False
    if not backend.is_device_array(v):
        raise TypeError(
            f"gradcheck: {name!r} is a {type(v).__name__}, not an array of the active backend "
            f"{backend.name()!r}; create it with backend.asarray(...) or xp.* first"
        )
    return True


def _require_float64(x, name: str) -> None:
    if x.dtype != np.float64:
        raise ValueError(
            f"gradcheck: {name!r} has dtype {x.dtype}; finite-difference checks need float64 "
            "(in float32 the rounding error of a central difference is ~1e-2). Build it under "
            "backend.dtype_scope('float64') or cast it with .astype(xp.float64)."
        )


def _as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _pack(out, items):
    """Give ``items`` the structure of ``out``: a single value or a tuple."""
    return tuple(items) if isinstance(out, (tuple, list)) else items[0]


def _weights(outs: Sequence, seed: int) -> list:
    """One fixed random weight array R per float output (None for non-float outputs).

    Entries have random signs and magnitudes in [0.5, 1.5), so every output counts.
    """
    rng = np.random.default_rng(seed)
    weights = []
    for o in outs:
        if _looks_like_array(o) and getattr(o.dtype, "kind", "") == "f":
            sign = np.where(rng.random(o.shape) < 0.5, -1.0, 1.0)
            r = sign * (0.5 + rng.random(o.shape))
            weights.append(backend.asarray(np.asarray(r, dtype=np.float64)))
        else:
            weights.append(None)
    return weights


def _copy_struct(items: Sequence) -> list:
    return [None if r is None else r.copy() for r in items]


def _snapshot(outs) -> list:
    """Copies of the float outputs (a later forward pass may reuse their buffers)."""
    return [o.copy() if _looks_like_array(o) else o for o in _as_list(outs)]


def _difference(plus, minus, dout) -> float:
    """``L(+) - L(-)``: for scalars directly, for arrays as ``sum((out+ - out-) * dout)``."""
    if dout is None:
        if _looks_like_array(plus) and plus.size != 1:
            raise ValueError(
                f"gradcheck: the function returned an array of shape {tuple(plus.shape)}; "
                "return a scalar or pass dout= to weight the outputs"
            )
        return float(plus) - float(minus)
    plus, minus, dout = _as_list(plus), _as_list(minus), _as_list(dout)
    if not (len(plus) == len(minus) == len(dout)):
        raise ValueError(f"gradcheck: {len(plus)} output(s) but {len(dout)} dout array(s)")
    total = 0.0
    for p, m, r in zip(plus, minus, dout):
        if r is None:
            continue
        if tuple(p.shape) != tuple(r.shape):
            raise ValueError(f"gradcheck: output of shape {tuple(p.shape)} but dout of shape {tuple(r.shape)}")
        total += float(((p - m) * r).sum())
    return total


# ---------------------------------------------------------------------------
# Numerical derivatives
# ---------------------------------------------------------------------------
def numerical_grad(f: Callable[[], Any], x, eps: float = DEFAULT_EPS, dout=None) -> np.ndarray:
    r"""Central-difference gradient of ``f()`` with respect to the array ``x``.

    For every element :math:`i`, ``x[i]`` is set to :math:`x_i+\varepsilon`,
    ``f()`` is called, then to :math:`x_i-\varepsilon`, ``f()`` again, and
    finally restored to the exact original value (so ``x`` is bit-for-bit
    unchanged afterwards). The estimate

    .. math:: g_i = \frac{f(x+\varepsilon e_i) - f(x-\varepsilon e_i)}{(x_i+\varepsilon)-(x_i-\varepsilon)}

    has truncation error :math:`O(\varepsilon^2)` and rounding error about
    :math:`u|f|/\varepsilon` (see the module docstring). It costs ``2 * x.size``
    calls of ``f``: meant for tiny shapes.

    Args:
        f: a function of no arguments that reads ``x`` (the very array object,
            not a copy) and returns a scalar (a Python float or a 0-d/size-1
            array). With ``dout`` it may return an array or a tuple of arrays
            instead; the scalar is then ``sum(out * dout)``, differenced output
            by output before the weighted sum (see "Scalarising" above).
        x: a float64 array of the active backend, modified in place while the
            function runs.
        eps: the step :math:`\varepsilon`.
        dout: optional weights with the structure of ``f()``'s output.

    Returns:
        A host ``numpy.ndarray`` (float64) of ``x``'s shape.
    """
    _is_float_array(x, "x")
    if not _looks_like_array(x) or getattr(x.dtype, "kind", "") != "f":
        raise ValueError(f"gradcheck: x must be a floating-point array, got {type(x).__name__}")
    _require_float64(x, "x")
    grad = np.zeros(tuple(x.shape), dtype=np.float64)
    for idx in np.ndindex(*grad.shape):
        orig = x[idx].item()  # a Python float: exact for float64, and not a view (CuPy)
        hi, lo = orig + eps, orig - eps
        try:
            x[idx] = hi
            plus = _snapshot(f()) if dout is not None else f()
            x[idx] = lo
            minus = _snapshot(f()) if dout is not None else f()
        finally:
            x[idx] = orig
        if dout is not None and not isinstance(dout, (tuple, list)):
            plus, minus = plus[0], minus[0]
        grad[idx] = _difference(plus, minus, dout) / (hi - lo)
    return grad


def numerical_directional(f: Callable[[], Any], pairs: Iterable, eps: float = DEFAULT_EPS,
                          dout=None) -> float:
    r"""Central-difference directional derivative of ``f()``.

    ``pairs`` is a list of ``(x, u)``: device arrays ``x`` (float64, read by
    ``f``) and host arrays ``u`` of the same shapes, together one direction.
    All ``x`` are moved simultaneously to :math:`x \pm \varepsilon u`, and the
    result is :math:`(f(x+\varepsilon u) - f(x-\varepsilon u)) / 2\varepsilon`,
    an :math:`O(\varepsilon^2)` estimate of :math:`\sum \langle \nabla_x f, u\rangle`.
    Every ``x`` is restored exactly (from a copy) afterwards. ``dout`` as in
    :func:`numerical_grad`.
    """
    pairs = [(x, backend.asarray(np.asarray(u, dtype=np.float64))) for x, u in pairs]
    saved = [x.copy() for x, _ in pairs]
    try:
        for (x, u), x0 in zip(pairs, saved):
            x[...] = x0 + eps * u
        plus = _snapshot(f()) if dout is not None else f()
        for (x, u), x0 in zip(pairs, saved):
            x[...] = x0 - eps * u
        minus = _snapshot(f()) if dout is not None else f()
    finally:
        for (x, _), x0 in zip(pairs, saved):
            x[...] = x0
    if dout is not None and not isinstance(dout, (tuple, list)):
        plus, minus = plus[0], minus[0]
    return _difference(plus, minus, dout) / (2.0 * eps)


# ---------------------------------------------------------------------------
# The shared checking loop
# ---------------------------------------------------------------------------
def _check_all(variables, analytic, evaluate, dout, *, mode, n_directions, joint, seed, eps,
               rtol, atol) -> list:
    """Compare ``analytic[name]`` with numerical derivatives for every ``(name, array)``.

    ``evaluate()`` runs the forward pass on the current values and returns what
    ``dout`` weights (or a scalar when ``dout`` is None).
    """
    if mode not in _MODES:
        raise ValueError(f"gradcheck: mode must be one of {_MODES}, got {mode!r}")
    results = []
    if mode == "elementwise":
        for name, x in variables:
            if analytic[name] is None:
                results.append(compare_gradients(name, None, np.zeros(tuple(x.shape)), rtol=rtol, atol=atol))
                continue
            num = numerical_grad(evaluate, x, eps, dout)
            results.append(compare_gradients(name, analytic[name], num, rtol=rtol, atol=atol))
        return results

    if n_directions < 1:
        raise ValueError(f"gradcheck: n_directions must be >= 1, got {n_directions}")
    rng = np.random.default_rng(seed + 7919)
    usable = []
    for name, x in variables:
        a = analytic[name]
        if a is None:
            results.append(compare_gradients(name, None, np.zeros(tuple(x.shape)), rtol=rtol, atol=atol))
        elif tuple(np.shape(a)) != tuple(x.shape):
            results.append(compare_gradients(name, a, np.zeros(tuple(x.shape)), rtol=rtol, atol=atol))
        elif x.size:
            usable.append((name, x, a))
    groups = ([(f"joint({', '.join(n for n, _, _ in usable)})", usable)] if joint and usable
              else [(n, [(n, x, a)]) for n, x, a in usable])
    for label, members in groups:
        ana_vals, num_vals = [], []
        for _ in range(n_directions):
            us = [rng.standard_normal(tuple(x.shape)) for _, x, _ in members]
            norm = np.sqrt(sum(float((u * u).sum()) for u in us))
            us = [u / norm for u in us]
            ana_vals.append(sum(float((a * u).sum()) for (_, _, a), u in zip(members, us)))
            num_vals.append(numerical_directional(evaluate, [(x, u) for (_, x, _), u in zip(members, us)],
                                                  eps, dout))
        err = relative_error(np.array(ana_vals), np.array(num_vals), rtol, atol)
        k = int(np.argmax(err))
        shape = tuple(members[0][1].shape) if len(members) == 1 else (sum(int(x.size) for _, x, _ in members),)
        results.append(TensorCheck(label, shape, bool(err[k] <= rtol), float(err[k]),
                                   f"direction {k + 1} of {n_directions}",
                                   ana_vals[k], num_vals[k], n_directions))
    return results


def _host_copy(a):
    return None if a is None else np.array(backend.to_numpy(a), dtype=np.float64, copy=True)


def _match_grads(grads, names: list, what: str) -> dict:
    """Map a backward's result (one array or a tuple, in argument order) onto ``names``."""
    items = list(grads) if isinstance(grads, (tuple, list)) else [grads]
    if grads is None and not names:
        return {}
    if len(items) < len(names):
        raise GradcheckError(
            f"gradcheck: {what} returned {len(items)} gradient(s) but there are {len(names)} "
            f"differentiable input(s) ({', '.join(names)}); it must return one per floating-point "
            "input, in argument order"
        )
    if any(g is not None for g in items[len(names):]):
        raise GradcheckError(
            f"gradcheck: {what} returned {len(items)} gradients for {len(names)} differentiable "
            f"input(s) ({', '.join(names)}); pass grad_names= to say which is which"
        )
    return {n: _host_copy(g) for n, g in zip(names, items)}


def _validate(mode, eps, rtol, atol):
    if mode not in _MODES:
        raise ValueError(f"gradcheck: mode must be one of {_MODES}, got {mode!r}")
    if not eps > 0 or not rtol > 0 or not atol >= 0:
        raise ValueError(f"gradcheck: need eps > 0, rtol > 0, atol >= 0; got {eps}, {rtol}, {atol}")


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------
def check_kernel(forward: Callable, backward: Callable, inputs: dict, kwargs: dict | None = None, *,
                 wrt: Iterable[str] | None = None, grad_names: Sequence[str] | None = None,
                 mode: str = "elementwise", n_directions: int = 3, joint: bool = False,
                 seed: int = 0, eps: float = DEFAULT_EPS, rtol: float = DEFAULT_RTOL,
                 atol: float = DEFAULT_ATOL, raise_on_failure: bool = True) -> GradcheckReport:
    """Gradient-check a pure kernel pair ``forward(*inputs, **kwargs) -> (out, cache)``,
    ``backward(dout, cache) -> grads``.

    The scalar is :math:`L = \\sum \\mathrm{out} \\odot R` for a fixed random
    ``R`` (seeded by ``seed``; one per output if ``out`` is a tuple); the analytic
    gradients come from ``backward(R, cache)``, the numerical ones from central
    differences (element-wise, or along random directions with
    ``mode="directional"``).

    Args:
        forward: the kernel's forward function.
        backward: its backward, called as ``backward(dout, cache)``. It returns
            one array or a tuple, matched *in order* to the floating-point array
            inputs; integer ids/targets and boolean masks are data, not
            variables, and get no gradient. Trailing ``None`` results are
            allowed (``linear_backward`` returns ``db=None`` without a bias).
            Adapt other conventions with a lambda, e.g.
            ``lambda d, c: cross_entropy_backward(c, d)``.
        inputs: ``{name: value}`` passed to ``forward`` positionally, in order.
            Float arrays (float64, active backend) are copied first, so the
            caller's arrays are never touched and aliasing inputs cannot mix.
        kwargs: keyword arguments for ``forward`` (masks, flags); never perturbed.
        wrt: names to check (default: every floating-point input).
        grad_names: the input names the backward's results belong to, in order,
            when the default matching does not fit.
        mode, n_directions, joint: ``"elementwise"`` (default) or
            ``"directional"`` with ``n_directions`` random unit directions per
            tensor (or shared by all tensors when ``joint``).
        seed: seeds ``R`` and the directions.
        eps, rtol, atol: step and tolerances (see the module docstring).
        raise_on_failure: raise :class:`GradcheckError` (an AssertionError) when
            a tensor fails; otherwise return the report either way.

    Returns:
        A :class:`GradcheckReport` (``.ok``, ``.checks``, readable ``str``).

    Example::

        check_kernel(attention_forward, attention_backward,
                     {"q": q, "k": k, "v": v}, {"mask": causal_mask(T)})
    """
    _validate(mode, eps, rtol, atol)
    kwargs = dict(kwargs or {})
    names = list(inputs)
    values = {}
    for n, v in inputs.items():
        values[n] = v.copy() if _is_float_array(v, n) else v
    float_names = [n for n in names if _is_float_array(values[n], n)]
    for n in float_names:
        _require_float64(values[n], n)
    targets = list(float_names if wrt is None else wrt)
    for n in targets:
        if n not in float_names:
            raise ValueError(f"gradcheck: cannot check {n!r}: not a floating-point input "
                             f"(differentiable inputs: {float_names})")

    def run():
        result = forward(*[values[n] for n in names], **kwargs)
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError("gradcheck: forward must return (out, cache)")
        return result

    before = {n: _host_copy(values[n]) for n in float_names}
    out, cache = run()
    dout = _weights(_as_list(out), seed)
    grads = backward(_pack(out, _copy_struct(dout)), cache)
    analytic = _match_grads(grads, list(grad_names or float_names), "backward")
    for n in float_names:
        if not np.array_equal(before[n], _host_copy(values[n]), equal_nan=True):
            raise GradcheckError(
                f"gradcheck: input {n!r} was modified in place by forward/backward; a kernel must "
                "not overwrite its inputs (the numerical derivative would be meaningless)"
            )
    for n in targets:
        analytic.setdefault(n, None)

    def evaluate():
        return _as_list(run()[0])

    report = GradcheckReport(
        _check_all([(n, values[n]) for n in targets], analytic, evaluate, dout, mode=mode,
                   n_directions=n_directions, joint=joint, seed=seed, eps=eps, rtol=rtol, atol=atol),
        mode, eps, rtol, atol, title=f"gradient check of {getattr(forward, '__name__', 'forward')}",
    )
    return report.raise_if_failed() if raise_on_failure else report


# ---------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------
def check_module(module, inputs, loss_fn: Callable | None = None, *, kwargs: dict | None = None,
                 mode: str = "elementwise", n_directions: int = 3, joint: bool = False,
                 params: Iterable[str] | None = None, check_inputs: bool = True,
                 check_accumulation: bool = True, eval_mode: bool = True, seed: int = 0,
                 eps: float = DEFAULT_EPS, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                 raise_on_failure: bool = True) -> GradcheckReport:
    """Gradient-check an ``nn.Module``: its input gradients and every parameter's ``.grad``.

    The module must follow the library's protocol: ``module.forward(*inputs,
    **kwargs)`` fills its caches and returns an array or a tuple of arrays;
    ``module.backward(dout)`` returns the input gradient(s) (one array, or a
    tuple in argument order such as cross-attention's ``(dx, dcontext)``) and
    *adds* the parameter gradients into ``param.grad``.

    Procedure: remember each sub-module's training flag and switch to
    ``eval()`` (dropout off; ``eval_mode=False`` keeps the current mode), zero
    the gradients, run forward and backward once with ``dout = R`` to collect
    the analytic gradients, optionally run them once more to verify that
    ``param.grad`` accumulates (it must double), zero the gradients again, then
    perturb every checked parameter's ``.data`` and every float input in place
    and compare. Training flags are restored at the end; ``param.grad`` is left
    at zero.

    Args:
        module: the module under test (float64 parameters).
        inputs: a single array, a tuple/list of positional inputs (named
            ``inputs[0]``, ...), or a ``{name: value}`` dict passed positionally
            in order. Float arrays are differentiated (float64, copied first);
            ids and masks are passed through.
        loss_fn: optional ``loss_fn(out) -> (loss, dout)`` returning a scalar loss
            and its gradient with respect to ``out`` (same structure as ``out``).
            Default: ``loss = sum(out * R)`` with a fixed random ``R`` per output.
        kwargs: keyword arguments for ``forward``; never perturbed.
        mode: ``"elementwise"`` (2 forward passes per element) or
            ``"directional"`` (2 per direction; for large modules).
        n_directions: directions per tensor (or in total, with ``joint``).
        joint: directional mode only: one random direction over all checked
            tensors at once instead of one per tensor.
        params: parameter names to check (default: all).
        check_inputs: also check the gradients returned for float inputs.
        check_accumulation: verify that a second backward doubles ``param.grad``.
        eval_mode: switch the module to ``eval()`` during the check.
        seed, eps, rtol, atol, raise_on_failure: as in :func:`check_kernel`.

    Returns:
        A :class:`GradcheckReport`; raises :class:`GradcheckError` on failure
        unless ``raise_on_failure=False``.

    Example::

        layer = nn.Linear(3, 4)              # built under dtype_scope("float64")
        check_module(layer, xp.ones((2, 3)))
        check_module(big_block, (x, mask), mode="directional", n_directions=4)
    """
    _validate(mode, eps, rtol, atol)
    kwargs = dict(kwargs or {})
    if isinstance(inputs, dict):
        names, raw = list(inputs), list(inputs.values())
    elif isinstance(inputs, (tuple, list)):
        names, raw = [f"inputs[{i}]" for i in range(len(inputs))], list(inputs)
    else:
        names, raw = ["input"], [inputs]
    values = [v.copy() if _is_float_array(v, n) else v for n, v in zip(names, raw)]
    float_idx = [i for i, (n, v) in enumerate(zip(names, values)) if _is_float_array(v, n)]
    for i in float_idx:
        _require_float64(values[i], names[i])

    all_params = list(module.named_parameters())
    wanted = None if params is None else list(params)
    if wanted is not None:
        unknown = sorted(set(wanted) - {n for n, _ in all_params})
        if unknown:
            raise ValueError(f"gradcheck: unknown parameter(s) {unknown}; the module has "
                             f"{[n for n, _ in all_params]}")
    checked = [(n, p) for n, p in all_params if wanted is None or n in wanted]
    for n, p in checked:
        _require_float64(p.data, n)

    flags = [(m, m.training) for m in module.modules()]
    if eval_mode:
        module.eval()
    try:
        def forward():
            return module.forward(*values, **kwargs)

        def backward_once():
            out = forward()
            if loss_fn is None:
                d = _pack(out, _copy_struct(dout))
            else:
                _, d = loss_fn(out)
            return module.backward(d)

        module.zero_grad()
        out = forward()
        dout = _weights(_as_list(out), seed) if loss_fn is None else None
        if loss_fn is None:
            dinputs = module.backward(_pack(out, _copy_struct(dout)))
        else:
            _, d = loss_fn(out)
            dinputs = module.backward(d)
        param_grads = {n: _host_copy(p.grad) for n, p in checked}
        results = []
        if check_inputs and float_idx:
            grads_in = _match_grads(dinputs, [names[i] for i in float_idx], f"{type(module).__name__}.backward")
        else:
            grads_in = {}

        if check_accumulation and checked:
            backward_once()
            for n, p in checked:
                first, second = param_grads[n], _host_copy(p.grad)
                if first is None or first.shape != second.shape:
                    continue  # reported by the main comparison
                floor = 1e-12 * float(np.abs(first).max()) if first.size else 0.0
                err = relative_error(second, 2.0 * first, 1e-10, max(floor, 1e-300))
                if err.size and float(err.max()) > 1e-10:
                    k = int(np.argmax(err))
                    where = tuple(int(i) for i in np.unravel_index(k, first.shape))
                    results.append(TensorCheck(
                        f"{n} (accumulation)", first.shape, False, float(err.flat[k]), where,
                        float(second.flat[k]), float(2.0 * first.flat[k]), int(first.size),
                        note=f"a second backward must add to .grad (+=), not overwrite it: at "
                             f"{_fmt_where(n, where)} .grad is {second.flat[k]:.9e} after two "
                             f"backward passes, expected twice {first.flat[k]:.9e}",
                    ))
        module.zero_grad()

        if loss_fn is None:
            def evaluate():
                return _as_list(forward())
        else:
            def evaluate():
                return loss_fn(forward())[0]

        variables = [(names[i], values[i]) for i in float_idx if names[i] in grads_in]
        variables += [(n, p.data) for n, p in checked]
        analytic = dict(grads_in)
        analytic.update(param_grads)
        results = _check_all(variables, analytic, evaluate, dout, mode=mode, n_directions=n_directions,
                             joint=joint, seed=seed, eps=eps, rtol=rtol, atol=atol) + results
    finally:
        for m, flag in flags:
            m.training = flag
    report = GradcheckReport(results, mode, eps, rtol, atol,
                             title=f"gradient check of {type(module).__name__}")
    return report.raise_if_failed() if raise_on_failure else report
