"""Shared by the equality tests of tests/fast: every fast kernel equals its reference kernel.

For each kernel that has a fast twin (:data:`FAST_ONLY`) a test in ``test_fast_*.py`` (one
file per file of ``minitransformer/fast``) draws
random shapes and options with hypothesis, runs the reference kernel
(``minitransformer.functional.REFERENCE``) and the fast one
(``functional.FAST``) on the same float64 inputs, and
compares every output, every gradient and the cache fields that later code reads
(attention's probabilities ``p`` and ``pd``, the cross-entropy's ``p`` and row
weights, layer norm's ``xhat`` and ``rstd``, GELU's dy/dx).

The tolerance is 1e-12 relative, entry by entry, with a floor for entries near 0
of 1e-12 times the larger of the tensor's largest entry and the size of the
terms it is computed from (see :func:`assert_close`). The fast exact GELU is an
intended approximation and is held to the bound its module docstring documents
instead; its tanh form is held to 1e-12.

Every hypothesis test runs on the numpy backend and on the strict stand-in for
CuPy (the ``any_backend`` fixture).

Beside the values: the fast kernels keep float32 inputs float32, raise the
reference's ValueError (same message) for bad input, leave their inputs
untouched, and allow a second backward from the same cache. The attention and
GELU kernels also run with cache blocks shrunk to a few bytes and two threads,
so that the code that cuts the work into pieces (and adds up the bias gradient
of the pieces) is exercised on these small shapes too.

``test_fast_contracts.py::test_every_fast_kernel_has_an_equality_test`` fails when a name
in ``FAST_ONLY`` has no test marked ``@covers(name)`` in a file of ``tests/fast``.
"""
from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import HealthCheck, settings

from minitransformer import backend, functional, kernels
from minitransformer.fast.engine import parallel
from minitransformer.fast import elementwise as fast_elementwise
from minitransformer.fast import attention as fast_attention

RTOL = 1e-12  # float64 rounding is ~1e-16: four orders of magnitude to spare

# The documented bound of the fast exact GELU (minitransformer/fast/elementwise.py):
# |Phi~ - Phi| < 1e-10 and |Phi~' - phi| < 2e-8, hence
# |y~ - y| <= 1e-10 |x| and |dy~/dx - dy/dx| <= 2e-8 |x| + 1e-10.
GELU_Y_BOUND = 1e-10
GELU_DYDX_BOUND = (2e-8, 1e-10)

REFERENCE = functional.REFERENCE
FAST = functional.FAST
FAST_ONLY = {name: f for name, f in FAST.items() if f is not REFERENCE[name]}  # the kernels with a twin

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Kernel names whose equality with the reference is tested in another file of
# tests/fast (the coverage test below finds that file by the name).
TESTED_ELSEWHERE = ("adam_update",)

def covers(*names):
    """Mark a test as the equality test of the kernels ``names`` (test_fast_contracts.py reads
    the marks from the source, so that the check holds for any selection of test files)."""
    def mark(fn):
        fn.covers = names
        return fn
    return mark


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def dev(a):
    return backend.asarray(np.asarray(a))


def host(a):
    return np.asarray(backend.to_numpy(a))


def assert_close(name, fast, ref, rtol=RTOL, floor=None, scale=0.0):
    """Assert that the fast kernel's ``fast`` equals the reference's ``ref``.

    Arrays: same shape and dtype, NaN and infinities in the same places (and
    of the same sign), and every finite entry within ``rtol * |ref| + floor``.
    ``floor`` (for entries near 0) defaults to ``rtol * max(largest |ref|, scale)``:
    an entry that is the small difference of larger terms (a gradient summed
    over rows, a centred input, dS = P(dP - delta)) carries the rounding of those
    terms, not a rounding of its own size; ``scale`` is the size of those terms
    where the tensor itself may be ~0 (attention's dQ with one key is exactly 0
    in the reference, rounding-small in the fast kernel). On failure the message
    names the tensor, the largest error, its index and both values.

    ``None``, numbers, strings and tuples must be equal.
    """
    if ref is None or (isinstance(ref, (int, float, str, tuple)) and not isinstance(ref, np.generic)):
        assert fast == ref, f"{name}: fast {fast!r} != reference {ref!r}"
        return
    a, b = host(fast), host(ref)
    assert a.shape == b.shape, f"{name}: shape {a.shape} != reference shape {b.shape}"
    assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} != reference dtype {b.dtype}"
    if a.dtype.kind not in "fc":
        bad = a != b
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise AssertionError(f"{name}: {int(bad.sum())} entries differ; first at {idx}: "
                                 f"fast {a[idx]!r}, reference {b[idx]!r}")
        return
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if (nan_a != nan_b).any():
        idx = tuple(int(i) for i in np.argwhere(nan_a != nan_b)[0])
        raise AssertionError(f"{name}: NaN in one set only, at {idx}: fast {a[idx]!r}, reference {b[idx]!r}")
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    if (inf_a != inf_b).any() or (a[inf_a] != b[inf_b]).any():
        idx = tuple(int(i) for i in np.argwhere((inf_a | inf_b) & (a != b))[0])
        raise AssertionError(f"{name}: infinities differ at {idx}: fast {a[idx]!r}, reference {b[idx]!r}")
    finite = np.isfinite(b)
    if not finite.any():
        return
    if floor is None:
        floor = rtol * max(float(np.abs(b[finite]).max()), float(scale))
    err = np.abs(np.where(finite, a, 0.0) - np.where(finite, b, 0.0))
    allowed = rtol * np.abs(np.where(finite, b, 0.0)) + floor
    excess = err - allowed
    if (excess > 0).any():
        idx = np.unravel_index(int(np.argmax(excess)), a.shape)
        worst = np.unravel_index(int(np.argmax(err)), a.shape)
        raise AssertionError(
            f"{name}: {int((excess > 0).sum())} of {a.size} entries differ by more than "
            f"{rtol:g} * |reference| + {floor:.3g}; the worst at {tuple(map(int, idx))}: "
            f"fast {a[idx]!r}, reference {b[idx]!r}, error {err[idx]:.3g} (allowed {allowed[idx]:.3g}); "
            f"largest error {err[worst]:.3g} at {tuple(map(int, worst))}"
        )


def assert_fields_close(what, fast_cache, ref_cache, fields):
    for field in fields:
        assert_close(f"{what}.{field}", getattr(fast_cache, field), getattr(ref_cache, field))


def assert_unchanged(what, arrays, copies):
    """The kernel left its inputs as they were."""
    for name, a, c in zip(what, arrays, copies):
        if a is not None:
            np.testing.assert_array_equal(host(a), c, err_msg=f"the fast kernel changed its input {name}")


@contextlib.contextmanager
def small_blocks(on: bool):
    """With ``on``: attention cuts the batch into one piece per sequence and the query
    axis into blocks of one row (skipping the keys no row of a block sees), and GELU
    works in blocks of 8 elements, on two threads, so the piecewise code runs on small inputs."""
    if not on:
        yield
        return
    saved = (parallel.BLOCK_BYTES, fast_elementwise._BLOCK, parallel.threads(),
             fast_attention.MIN_LENGTH, fast_attention.MIN_BLOCK_ROWS, fast_attention.MIN_SAVING)
    parallel.BLOCK_BYTES, fast_elementwise._BLOCK = 1, 8
    fast_attention.MIN_LENGTH, fast_attention.MIN_BLOCK_ROWS, fast_attention.MIN_SAVING = 2, 1, -1.0
    parallel.set_threads(2)
    try:
        yield
    finally:
        parallel.BLOCK_BYTES, fast_elementwise._BLOCK = saved[0], saved[1]
        fast_attention.MIN_LENGTH, fast_attention.MIN_BLOCK_ROWS, fast_attention.MIN_SAVING = saved[3:]
        parallel.set_threads(saved[2])


def count_calls(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` (for the test) by a wrapper that records the shape of each
    call's first argument; returns that list, so a test can prove the code it names ran."""
    calls = []
    original = getattr(module, name)

    def counted(*args):
        calls.append(args[0].shape)
        return original(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


def run_forward(name, *args, **kwargs):
    """Run ``name`` of both sets on the same inputs (each on its own copy, so that a
    kernel that wrote into its input would be caught). Returns (fast, reference)."""
    copy = lambda a: a.copy() if hasattr(a, "copy") else a  # noqa: E731
    ref = REFERENCE[name](*[copy(a) for a in args], **{k: copy(v) for k, v in kwargs.items()})
    fast = FAST[name](*args, **kwargs)
    return fast, ref

