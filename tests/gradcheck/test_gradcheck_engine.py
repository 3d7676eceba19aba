"""The gradient checker itself: it accepts correct backward passes, rejects wrong
ones, and says which tensor is wrong, by how much and where."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.functional import (
    attention_backward, attention_forward, embedding_backward, embedding_forward,
    linear_backward, linear_forward,
)
from minitransformer.gradcheck import (
    GradcheckError, check_kernel, check_module, compare_gradients, numerical_directional,
    numerical_grad, relative_error,
)
from minitransformer.nn.module import Module, Parameter


def _rand(g, *shape, dtype=np.float64):
    return backend.asarray(g.standard_normal(shape).astype(dtype))


@pytest.fixture
def g():
    return np.random.default_rng(0)


# -- numerical_grad ----------------------------------------------------------------
def test_numerical_grad_of_cubic_and_exact_restore(any_backend, float64, g):
    x = _rand(g, 2, 3)
    before = backend.to_numpy(x).copy()
    num = numerical_grad(lambda: (x * x * x).sum(), x)
    assert isinstance(num, np.ndarray) and num.shape == (2, 3)
    np.testing.assert_allclose(num, 3 * before ** 2, rtol=1e-8, atol=1e-9)
    np.testing.assert_array_equal(backend.to_numpy(x), before)  # bit for bit


def test_numerical_grad_with_dout_weights_array_outputs(any_backend, float64, g):
    x, R = _rand(g, 4), _rand(g, 4)
    num = numerical_grad(lambda: xp.sin(x), x, dout=R)
    np.testing.assert_allclose(num, np.cos(backend.to_numpy(x)) * backend.to_numpy(R), rtol=1e-8, atol=1e-10)


def test_central_difference_error_is_second_order(float64):
    x = backend.asarray(np.array([0.7]))
    exact = np.exp(0.7)
    e1 = abs(numerical_grad(lambda: xp.exp(x).sum(), x, eps=1e-2)[0] - exact)
    e2 = abs(numerical_grad(lambda: xp.exp(x).sum(), x, eps=1e-3)[0] - exact)
    assert 70 < e1 / e2 < 130  # 10x smaller step, ~100x smaller error: O(eps^2)
    np.testing.assert_allclose(e1, exact * 1e-4 / 6, rtol=1e-3)  # eps^2 f''' / 6


def test_numerical_grad_restores_x_when_f_raises(any_backend, float64, g):
    x = _rand(g, 3)
    before = backend.to_numpy(x).copy()
    calls = []

    def f():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return x.sum()

    with pytest.raises(RuntimeError, match="boom"):
        numerical_grad(f, x)
    np.testing.assert_array_equal(backend.to_numpy(x), before)


def test_numerical_grad_input_validation(any_backend, g):
    x32 = _rand(g, 3, dtype=np.float32)
    with pytest.raises(ValueError, match="float64"):
        numerical_grad(lambda: x32.sum(), x32)
    x = _rand(g, 3)
    with pytest.raises(ValueError, match="return a scalar or pass dout"):
        numerical_grad(lambda: x * 2.0, x)


def test_host_array_rejected_under_strict(g):
    backend.use("strict")
    x = g.standard_normal(3)
    with pytest.raises(TypeError, match="not an array of the active backend 'strict'"):
        numerical_grad(lambda: 0.0, x)


def test_numerical_directional(any_backend, float64, g):
    x, y = _rand(g, 3), _rand(g, 2)
    u, w = g.standard_normal(3), g.standard_normal(2)
    before = backend.to_numpy(x).copy()
    d = numerical_directional(lambda: (x * x).sum() + (y * y * y).sum(), [(x, u), (y, w)])
    hx, hy = backend.to_numpy(x), backend.to_numpy(y)
    np.testing.assert_allclose(d, (2 * hx * u).sum() + (3 * hy ** 2 * w).sum(), rtol=1e-8)
    np.testing.assert_array_equal(backend.to_numpy(x), before)


# -- relative error ----------------------------------------------------------------
def test_relative_error_definition():
    a = np.array([1.0, 1.0, 1e-12, 0.0, np.nan, 1.0])
    n = np.array([1.0 + 1e-7, 1.1, 2e-12, 5e-9, 0.0, np.inf])
    err = relative_error(a, n, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(err[:4], [1e-7 / (1 + 1e-7), 0.1 / 1.1, 1e-12 / 1e-3, 5e-9 / 1e-3])
    assert np.isinf(err[4]) and np.isinf(err[5])
    assert (err[[0, 2, 3]] <= 1e-5).all() and err[1] > 1e-5


def test_compare_gradients_reports_worst_element():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    n = a.copy()
    n[1, 0] = 3.3
    c = compare_gradients("W", a, n)
    assert not c.ok and c.where == (1, 0) and c.analytic == 3.0 and c.numerical == 3.3
    assert "W[1, 0]" in c.describe() and "FAILED" in c.describe()
    bad_shape = compare_gradients("b", np.zeros((1, 3)), np.zeros(3))
    assert not bad_shape.ok and "shape (1, 3), expected (3,)" in bad_shape.note


# -- check_kernel --------------------------------------------------------------------
def _linear_inputs(g, D_in=3, D_out=3):
    return {"x": _rand(g, 2, D_in), "W": _rand(g, D_in, D_out), "b": _rand(g, D_out)}


def test_check_kernel_passes_correct_linear(any_backend, float64, g):
    report = check_kernel(linear_forward, linear_backward, _linear_inputs(g, 3, 4))
    assert report.ok and [c.name for c in report.checks] == ["x", "W", "b"]
    assert all(c.max_error < 1e-7 for c in report.checks)
    assert "passed" in str(report)


def test_check_kernel_fails_when_bias_gradient_is_forgotten(any_backend, float64, g):
    def backward(dy, cache):
        dx, dW, db = linear_backward(dy, cache)
        return dx, dW, xp.zeros_like(db)

    with pytest.raises(AssertionError, match=r"failed for b: max relative error 1\.000e\+00 at b\[\d\]") as info:
        check_kernel(linear_forward, backward, _linear_inputs(g))
    assert isinstance(info.value, GradcheckError)
    assert [c.name for c in info.value.report.failures] == ["b"]
    assert "analytic 0.000000000e+00" in str(info.value)


def test_check_kernel_fails_on_transposed_weight_gradient(any_backend, float64, g):
    def backward(dy, cache):
        dx, dW, db = linear_backward(dy, cache)
        return dx, dW.T, db  # square W: the shape is right, the values are not

    with pytest.raises(AssertionError, match=r"failed for W: .* at W\[\d, \d\]"):
        check_kernel(linear_forward, backward, _linear_inputs(g))


def test_check_kernel_directional_mode_catches_a_scaled_gradient(any_backend, float64, g):
    def backward(dy, cache):
        dx, dW, db = linear_backward(dy, cache)
        return dx, dW * 1.01, db

    report = check_kernel(linear_forward, backward, _linear_inputs(g), mode="directional",
                          raise_on_failure=False)
    assert not report.ok and [c.name for c in report.failures] == ["W"]
    assert "direction" in str(report) and "FAILED W" in str(report)
    assert not check_kernel(linear_forward, backward, _linear_inputs(g), mode="directional",
                            joint=True, raise_on_failure=False).ok
    assert check_kernel(linear_forward, linear_backward, _linear_inputs(g), mode="directional", joint=True).ok


def test_check_kernel_reports_missing_wrong_shape_and_nan(any_backend, float64, g):
    with pytest.raises(GradcheckError, match=r"returned 2 gradient\(s\) but there are 3 differentiable"):
        check_kernel(linear_forward, lambda dy, c: linear_backward(dy, c)[:2], _linear_inputs(g))

    def keepdims(dy, cache):
        dx, dW, db = linear_backward(dy, cache)
        return dx, dW, db[None, :]

    with pytest.raises(GradcheckError, match=r"b: analytic gradient has shape \(1, 3\), expected \(3,\)"):
        check_kernel(linear_forward, keepdims, _linear_inputs(g))

    def nan(dy, cache):
        dx, dW, db = linear_backward(dy, cache)
        dx[0, 1] = float("nan")
        return dx, dW, db

    with pytest.raises(GradcheckError, match=r"failed for x: max relative error inf at x\[0, 1\]"):
        check_kernel(linear_forward, nan, _linear_inputs(g))


def test_check_kernel_rejects_kernels_that_overwrite_inputs(any_backend, float64, g):
    def forward(x):
        y = x * 2.0
        x *= 0.5
        return y, None

    with pytest.raises(GradcheckError, match="'x' was modified in place"):
        check_kernel(forward, lambda dy, c: dy * 2.0, {"x": _rand(g, 3)})


def test_check_kernel_leaves_caller_arrays_untouched(any_backend, float64, g):
    inputs = _linear_inputs(g)
    before = {k: backend.to_numpy(v).copy() for k, v in inputs.items()}
    check_kernel(linear_forward, linear_backward, inputs)
    for k, v in inputs.items():
        np.testing.assert_array_equal(backend.to_numpy(v), before[k])


def test_check_kernel_skips_integer_inputs_and_honours_wrt(any_backend, float64, g):
    ids = backend.asarray(np.array([[0, 2, 2], [1, 0, 2]]))
    report = check_kernel(embedding_forward, embedding_backward, {"ids": ids, "W": _rand(g, 3, 2)})
    assert [c.name for c in report.checks] == ["W"]
    q, k, v = _rand(g, 1, 1, 2, 2), _rand(g, 1, 1, 3, 2), _rand(g, 1, 1, 3, 4)
    report = check_kernel(attention_forward, attention_backward, {"q": q, "k": k, "v": v}, wrt=["k"])
    assert [c.name for c in report.checks] == ["k"]
    with pytest.raises(ValueError, match="cannot check 'ids'"):
        check_kernel(embedding_forward, embedding_backward, {"ids": ids, "W": _rand(g, 3, 2)}, wrt=["ids"])


def test_check_kernel_with_tuple_outputs(any_backend, float64, g):
    def forward(x, y):
        return (x * y, xp.sin(x)), (x, y)

    def backward(douts, cache):
        x, y = cache
        d1, d2 = douts
        return d1 * y + d2 * xp.cos(x), d1 * x

    assert check_kernel(forward, backward, {"x": _rand(g, 3), "y": _rand(g, 3)}).ok

    def wrong(douts, cache):
        x, y = cache
        return douts[0] * y, douts[0] * x  # forgets the second output's contribution to dx

    with pytest.raises(GradcheckError, match="failed for x"):
        check_kernel(forward, wrong, {"x": _rand(g, 3), "y": _rand(g, 3)})


def test_check_kernel_requires_float64(any_backend, g):
    inputs = {k: v.astype(xp.float32) for k, v in _linear_inputs(g).items()}
    with pytest.raises(ValueError, match="'x' has dtype float32; finite-difference checks need float64"):
        check_kernel(linear_forward, linear_backward, inputs)


# -- check_module --------------------------------------------------------------------
class TinyLinear(Module):
    """y = x W + b, with switchable mistakes."""

    def __init__(self, W, b, bug=None):
        self.weight = Parameter(W)
        self.bias = Parameter(b)
        self.bug = bug

    def forward(self, x):
        y, self.cache = linear_forward(x, self.weight.data, self.bias.data)
        return y

    def backward(self, dy):
        dx, dW, db = linear_backward(dy, self._require_cache())
        if self.bug == "overwrite":
            self.weight.grad = dW  # should be +=
        else:
            self.weight.grad += dW
        if self.bug != "no_bias":
            self.bias.grad += db
        return dx


class TinyCrossAttention(Module):
    """Single-head cross-attention: queries from x (B, Tq, D), keys/values from context."""

    def __init__(self, g, D, bug=None):
        self.q = TinyLinear(_rand(g, D, D), _rand(g, D))
        self.kv = TinyLinear(_rand(g, D, 2 * D), _rand(g, 2 * D))
        self.bug = bug

    def forward(self, x, context, mask=None):
        D = x.shape[-1]
        q = self.q.forward(x)[:, None]  # (B, 1, Tq, D)
        kv = self.kv.forward(context)
        k, v = kv[..., :D][:, None], kv[..., D:][:, None]
        out, self.cache = attention_forward(q, k, v, mask=mask)
        return out[:, 0]

    def backward(self, dout):
        dq, dk, dv, _ = attention_backward(dout[:, None], self._require_cache())
        dx = self.q.backward(dq[:, 0])
        dcontext = self.kv.backward(xp.concatenate([dk[:, 0], dv[:, 0]], axis=-1))
        if self.bug == "context":
            dcontext = dcontext * 0.5
        return dx, dcontext


class NoisyDropout(Module):
    """Multiplies by a fresh random mask in training mode (so training-mode checks fail)."""

    def __init__(self, W):
        self.weight = Parameter(W)
        self.draws = 0

    def forward(self, x):
        self.draws += 1
        mask = 1.0 + 0.5 * backend.asarray(np.random.default_rng(self.draws).random(x.shape)) if self.training else 1.0
        self.cache = (x, mask)
        return x * self.weight.data * mask

    def backward(self, dy):
        x, mask = self.cache
        self.weight.grad += (dy * x * mask).sum(axis=0)
        return dy * self.weight.data * mask


def test_check_module_passes_correct_module(any_backend, float64, g):
    layer = TinyLinear(_rand(g, 3, 2), _rand(g, 2))
    report = check_module(layer, _rand(g, 4, 3))
    assert report.ok and [c.name for c in report.checks] == ["input", "weight", "bias"]
    assert (backend.to_numpy(layer.weight.grad) == 0).all()  # left zeroed
    for mode, joint in [("directional", False), ("directional", True)]:
        assert check_module(layer, _rand(g, 4, 3), mode=mode, joint=joint, n_directions=2).ok


def test_check_module_names_the_wrong_parameter(any_backend, float64, g):
    layer = TinyLinear(_rand(g, 3, 2), _rand(g, 2), bug="no_bias")
    with pytest.raises(AssertionError, match=r"failed for bias: max relative error 1\.000e\+00 at bias\[\d\]") as info:
        check_module(layer, _rand(g, 4, 3), check_accumulation=False)
    assert [c.name for c in info.value.report.failures] == ["bias"]
    report = check_module(layer, _rand(g, 4, 3), mode="directional", raise_on_failure=False)
    assert [c.name for c in report.failures] == ["bias"]


def test_check_module_detects_overwritten_grad(any_backend, float64, g):
    layer = TinyLinear(_rand(g, 3, 2), _rand(g, 2), bug="overwrite")
    with pytest.raises(AssertionError, match=r"weight \(accumulation\).*must add to \.grad \(\+=\)"):
        check_module(layer, _rand(g, 4, 3))


def test_check_module_tuple_input_gradients(any_backend, float64, g):
    x, context = _rand(g, 2, 2, 3), _rand(g, 2, 4, 3)
    mask = backend.asarray(np.array([True, True, True, False]))[None, None, :]
    report = check_module(TinyCrossAttention(g, 3), {"x": x, "context": context}, kwargs={"mask": mask})
    assert report.ok
    assert [c.name for c in report.checks][:2] == ["x", "context"]
    assert "q.weight" in [c.name for c in report.checks] and "kv.bias" in [c.name for c in report.checks]
    with pytest.raises(AssertionError, match="failed for context"):
        check_module(TinyCrossAttention(g, 3, bug="context"), {"x": x, "context": context})
    report = check_module(TinyCrossAttention(g, 3, bug="context"), (x, context), mode="directional",
                          params=["q.weight"], raise_on_failure=False)
    assert [c.name for c in report.failures] == ["inputs[1]"]
    assert [c.name for c in report.checks] == ["inputs[0]", "inputs[1]", "q.weight"]


def test_check_module_uses_eval_mode_and_restores_it(any_backend, float64, g):
    layer = NoisyDropout(_rand(g, 3))
    layer.train()
    assert check_module(layer, _rand(g, 2, 3)).ok
    assert layer.training  # restored
    report = check_module(layer, _rand(g, 2, 3), eval_mode=False, check_accumulation=False,
                          raise_on_failure=False)
    assert not report.ok


def test_check_module_with_loss_fn(any_backend, float64, g):
    layer = TinyLinear(_rand(g, 3, 2), _rand(g, 2))
    # loss = 0.5 * sum(y^2), dloss/dy = y
    assert check_module(layer, _rand(g, 4, 3), loss_fn=lambda y: (0.5 * (y * y).sum(), y)).ok


def test_check_module_requires_float64_parameters(any_backend, g):
    layer = TinyLinear(_rand(g, 3, 2, dtype=np.float32), _rand(g, 2, dtype=np.float32))
    with pytest.raises(ValueError, match="'weight' has dtype float32"):
        check_module(layer, _rand(g, 4, 3))
    with pytest.raises(ValueError, match="unknown parameter"):
        check_module(TinyLinear(_rand(g, 3, 2), _rand(g, 2)), _rand(g, 4, 3), params=["W"])


# -- the package ----------------------------------------------------------------------
def test_package_re_exports_the_public_names_of_its_modules():
    from minitransformer import gradcheck
    from minitransformer.gradcheck import engine, numerical, report

    parts = [numerical, report, engine]
    assert sorted(gradcheck.__all__) == sorted(n for m in parts for n in m.__all__)
    for m in parts:
        for name in m.__all__:
            assert getattr(gradcheck, name) is getattr(m, name), name
    assert (gradcheck.DEFAULT_EPS, gradcheck.DEFAULT_RTOL, gradcheck.DEFAULT_ATOL) == (1e-6, 1e-5, 1e-8)
