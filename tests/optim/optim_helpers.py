"""Shared by the tests of minitransformer.optim: parameters of several shapes, a float64
reference, comparisons."""
from __future__ import annotations

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.module import Parameter

SHAPES = {"w1": (3, 4), "b1": (4,), "w2": (2, 3, 2), "scale": ()}


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def assert_close(name, actual, expected, rtol=1e-5, atol=1e-6):
    """Compare arrays; on failure name the tensor and the largest error."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    err = np.abs(actual - expected)
    bad = err > atol + rtol * np.abs(expected)
    if bad.any():
        idx = np.unravel_index(np.argmax(err), err.shape) if err.ndim else ()
        raise AssertionError(
            f"{name}: {int(bad.sum())}/{err.size} elements differ; largest error "
            f"{err.max():.3e} at {idx}: got {actual[idx]!r}, expected {expected[idx]!r}")


def make_params(seed=0, shapes=SHAPES):
    """(name, Parameter) pairs with float32 data, and host float64 targets c."""
    rng = np.random.default_rng(seed)
    pairs, init, targets = [], {}, {}
    for name, shape in shapes.items():
        data = rng.standard_normal(shape).astype(np.float32)
        init[name] = data.astype(np.float64)
        targets[name] = rng.standard_normal(shape)
        pairs.append((name, Parameter(backend.asarray(data))))
    return pairs, init, targets


def set_quadratic_grads(pairs, targets):
    """grad = p - c, written in place on the active backend."""
    for name, p in pairs:
        c = backend.asarray(targets[name], dtype=p.data.dtype)
        xp.subtract(p.data, c, out=p.grad)


def host(pairs):
    return {name: backend.to_numpy(p.data).astype(np.float64) for name, p in pairs}


# Independent float64 reference implementations: one step for one tensor.
def ref_sgd(p, g, s, t, lr, momentum=0.0, nesterov=False, wd=0.0):
    g = g + wd * p
    if momentum == 0:
        return p - lr * g
    b = momentum * s.get("b", np.zeros_like(p)) + g
    s["b"] = b
    d = g + momentum * b if nesterov else b
    return p - lr * d


def ref_adam(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-8, wd=0.0, decoupled=False):
    b1, b2 = betas
    if decoupled:
        p = p - lr * wd * p
    else:
        g = g + wd * p
    m = b1 * s.get("m", 0.0) + (1 - b1) * g
    v = b2 * s.get("v", 0.0) + (1 - b2) * g * g
    s["m"], s["v"] = m, v
    m_hat = m / (1 - b1 ** t)
    v_hat = v / (1 - b2 ** t)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps)


def ref_adamax(p, g, s, t, lr, betas=(0.9, 0.999), eps=1e-8):
    b1, b2 = betas
    m = b1 * s.get("m", 0.0) + (1 - b1) * g
    u = np.maximum(b2 * s.get("u", 0.0), np.abs(g))
    s["m"], s["u"] = m, u
    return p - lr / (1 - b1 ** t) * m / (u + eps)
