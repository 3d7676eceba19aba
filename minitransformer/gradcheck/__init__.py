r"""Finite-difference gradient checks for handwritten backward passes.

minitransformer has no autograd, so every ``backward`` is written by hand and
every one of them has to be proven against an independent reference. That
reference is the *definition* of the derivative, evaluated numerically. This
package does it for pure kernels (:func:`check_kernel`), for stateful layers
(:func:`check_module`) and for any scalar function (:func:`numerical_grad`).

It is split by concept; everything public is re-exported here, so
``from minitransformer.gradcheck import check_module`` is all a test needs.

* :mod:`~minitransformer.gradcheck.numerical`: finite differences, the
  numerical side (:func:`numerical_grad`, :func:`numerical_directional`,
  ``DEFAULT_EPS``), with the math of central differences, of scalarising an
  array output and of directional derivatives.
* :mod:`~minitransformer.gradcheck.report`: the comparison rule
  (:func:`relative_error`, :func:`compare_gradients`, ``DEFAULT_RTOL``,
  ``DEFAULT_ATOL``) and the results it produces (:class:`TensorCheck`,
  :class:`GradcheckReport`, :class:`GradcheckError`): which tensor, largest
  error, where.
* :mod:`~minitransformer.gradcheck.engine`: the checks that drive both,
  :func:`check_kernel` and :func:`check_module`.

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
from minitransformer.gradcheck.engine import check_kernel, check_module
from minitransformer.gradcheck.numerical import DEFAULT_EPS, numerical_directional, numerical_grad
from minitransformer.gradcheck.report import (
    DEFAULT_ATOL, DEFAULT_RTOL, GradcheckError, GradcheckReport, TensorCheck, compare_gradients,
    relative_error,
)

__all__ = [
    "DEFAULT_EPS", "DEFAULT_RTOL", "DEFAULT_ATOL",
    "GradcheckError", "TensorCheck", "GradcheckReport",
    "relative_error", "compare_gradients", "numerical_grad", "numerical_directional",
    "check_kernel", "check_module",
]
