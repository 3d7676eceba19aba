"""The fast (in-place) Adam update against the reference kernel.

``minitransformer.fast.optimizer.adam_update`` must compute what
``minitransformer.optim.optimizer.adam_update`` computes, for any shape and any
hyper-parameters, with L2 and with decoupled weight decay, over several steps,
and it must do so in place: the arrays it returns are the arrays it was given,
and it allocates one scratch array, not one per formula.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from minitransformer import backend, devices
from minitransformer.fast.optimizer import adam_update as fast_adam_update
from minitransformer.optim.optimizer import adam_update as reference_adam_update

RTOL = 1e-12
ATOL = 1e-300  # results near the subnormal range (< 2.2e-308) have no 12 correct digits to compare


def assert_agree(what, fast, ref, *scales):
    """max |fast - ref| <= RTOL * (largest magnitude among ref and the operands in ``scales``) + ATOL.

    Relative to the size of the tensors involved, not element by element: an
    element that cancels to nearly zero keeps the rounding error of its operands.
    """
    fast, ref = np.asarray(fast), np.asarray(ref)
    assert fast.shape == ref.shape and fast.dtype == ref.dtype, \
        f"{what}: {fast.shape}/{fast.dtype} vs {ref.shape}/{ref.dtype}"
    if ref.size == 0:
        return
    scale = max(float(np.max(np.abs(a))) for a in (ref, *scales))
    err = float(np.max(np.abs(fast - ref)))
    assert err <= RTOL * scale + ATOL, f"{what}: max error {err:.3e} > {RTOL:g} * {scale:.3e}"


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False, width=64)


@st.composite
def adam_problems(draw):
    """A shape, several steps of gradients, a start state and hyper-parameters (float64)."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=3)))
    n_steps = draw(st.integers(1, 5))
    t0 = draw(st.integers(0, 1000))                 # steps already taken before these
    param = draw(hnp.arrays(np.float64, shape, elements=_floats(-10.0, 10.0)))
    grads = draw(hnp.arrays(np.float64, (n_steps, *shape), elements=_floats(-100.0, 100.0)))
    if t0 == 0:
        m, v = np.zeros(shape), np.zeros(shape)     # a fresh optimizer
    else:
        m = draw(hnp.arrays(np.float64, shape, elements=_floats(-100.0, 100.0)))
        v = draw(hnp.arrays(np.float64, shape, elements=_floats(0.0, 1e4)))
    hyper = dict(
        lr=draw(_floats(1e-6, 1.0)),
        beta1=draw(st.one_of(st.just(0.9), _floats(0.0, 0.999))),
        beta2=draw(st.one_of(st.just(0.999), _floats(0.0, 0.9999))),
        eps=draw(st.one_of(st.just(1e-8), _floats(1e-12, 1e-2))),
        weight_decay=draw(st.one_of(st.just(0.0), _floats(0.0, 1.0))),
        decoupled=draw(st.booleans()),
    )
    return param, grads, m, v, t0, hyper


@settings(max_examples=300, deadline=None)
@given(problem=adam_problems())
def test_fast_matches_reference_and_works_in_place(problem):
    """Several steps; before each one the fast kernel's ``param`` is set to the
    reference's (in place), so both start every step from the same weights.

    Without that, the two weight trajectories drift apart by more than rounding
    where Adam itself is ill-conditioned (a decayed gradient near ``eps`` makes the
    step sensitive to the last bit of the weight), which says nothing about the
    kernels. ``m`` and ``v`` are never synchronised: they are carried from step to
    step by each kernel, so a state update that is wrong shows up at the next step.
    """
    param0, grads, m0, v0, t0, hyper = problem
    ref_p, ref_m, ref_v = param0.copy(), m0.copy(), v0.copy()
    fast_p, fast_m, fast_v = param0.copy(), m0.copy(), v0.copy()
    wd = hyper["weight_decay"]
    for k, grad in enumerate(grads):
        t = t0 + k + 1
        fast_p[...] = ref_p                         # same weights in; the array itself is kept
        # the reference: pure, new arrays out, its inputs unchanged
        inputs = [a.copy() for a in (ref_p, grad, ref_m, ref_v)]
        prev_p, prev_m, prev_v = ref_p, ref_m, ref_v
        ref_p, ref_m, ref_v = reference_adam_update(ref_p, grad, ref_m, ref_v, t, **hyper)
        for name, before, after in zip(("param", "grad", "m", "v"), inputs, (prev_p, grad, prev_m, prev_v)):
            np.testing.assert_array_equal(after, before, err_msg=f"reference changed its input {name}")
        # the fast kernel: the same three arrays back, updated in place
        given_arrays = (fast_p, fast_m, fast_v)
        grad_before = grad.copy()
        out = fast_adam_update(fast_p, grad, fast_m, fast_v, t, **hyper)
        assert all(o is a for o, a in zip(out, given_arrays)), "fast adam_update did not return its own arrays"
        np.testing.assert_array_equal(grad, grad_before, err_msg="fast adam_update changed grad")
        # scales: the largest operand of each result (the decayed gradient, the old values)
        g = grad + wd * prev_p if (wd and not hyper["decoupled"]) else grad
        assert_agree(f"m after step {t}", fast_m, ref_m, prev_m, g)
        assert_agree(f"v after step {t}", fast_v, ref_v, prev_v, g * g)
        assert_agree(f"param after step {t}", fast_p, ref_p, prev_p)


@pytest.mark.parametrize("weight_decay, decoupled", [(0.0, False), (0.1, False), (0.1, True)])
def test_fast_allocates_one_scratch_array(weight_decay, decoupled):
    """Peak new memory of one call: about one parameter-sized array for the fast kernel,
    several for the reference (which shows the measurement sees allocations)."""
    rng = np.random.default_rng(0)
    shape = (256, 512)                              # 1 MiB per float64 array
    nbytes = 8 * shape[0] * shape[1]
    args = [rng.standard_normal(shape) for _ in range(3)] + [np.abs(rng.standard_normal(shape))]
    hyper = dict(step=3, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=weight_decay, decoupled=decoupled)

    def peak(fn):
        tracemalloc.start()
        try:
            fn(*args, **hyper)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(fast_adam_update) < 1.25 * nbytes
    assert peak(reference_adam_update) > 2.5 * nbytes


def test_fast_agrees_under_the_strict_backend_without_host_reads(any_backend):
    """Both kernels run on device arrays with no device-to-host read (as on a GPU)."""
    rng = np.random.default_rng(1)
    host = [rng.standard_normal((3, 4)) for _ in range(3)] + [np.abs(rng.standard_normal((3, 4)))]
    ref = [backend.asarray(a) for a in host]
    fast = [backend.asarray(a) for a in host]
    hyper = dict(step=2, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, decoupled=False)
    with devices.forbid_host_sync():
        ref_out = reference_adam_update(*ref, **hyper)
        fast_out = fast_adam_update(*fast, **hyper)
    assert all(o is a for o, a in zip(fast_out, (fast[0], fast[2], fast[3]))), "not updated in place"
    for name, f, r in zip(("param", "m", "v"), fast_out, ref_out):
        assert_agree(name, backend.to_numpy(f), backend.to_numpy(r), *host)
