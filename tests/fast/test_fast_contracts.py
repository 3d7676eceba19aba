"""What every fast kernel owes beside its values: an equality test (checked here), the same
set of names as the reference, a backward that reads nothing the caller may overwrite,
float32 in and float32 out, and the reference's ValueError for bad input."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from minitransformer import backend, functional
from fast_helpers import dev, FAST, FAST_ONLY, host, REFERENCE, TESTED_ELSEWHERE


# ---------------------------------------------------------------------------
# Coverage: every fast kernel has an equality test
# ---------------------------------------------------------------------------
def _covered(sources) -> set[str]:
    """The kernel names marked by ``@covers(...)`` in these test sources (read as text,
    so the check holds however few of the files a run collects)."""
    return {name for text in sources for args in re.findall(r"@covers\(([^)]*)\)", text)
            for name in re.findall(r"[\"']([A-Za-z_]\w*)[\"']", args)}


def _without_equality_test(names) -> list[str]:
    """The kernel names with no equality test: not marked @covers in a tests/fast file, and not
    listed in TESTED_ELSEWHERE with another tests/fast file that names them."""
    here = pathlib.Path(__file__)
    sources = [p.read_text(encoding="utf-8") for p in here.parent.glob("test_*.py") if p != here]
    marked = _covered(sources)
    return [name for name in names
            if name not in marked and not (name in TESTED_ELSEWHERE and any(name in t for t in sources))]


def test_the_coverage_check_notices_a_kernel_without_a_test():
    assert _without_equality_test(["softmax_forward", "a_new_fast_kernel"]) == ["a_new_fast_kernel"]
    assert _covered(['@covers("linear_forward", "linear_backward")\n@covers(\'merge_heads\')']) == {
        "linear_forward", "linear_backward", "merge_heads"}


def test_every_fast_kernel_has_an_equality_test():
    missing = _without_equality_test(FAST_ONLY)
    assert not missing, (
        f"fast kernels without an equality test against the reference: {missing}; add one in tests/fast "
        "(marked @covers(name)) or list the name in TESTED_ELSEWHERE with its test in tests/fast"
    )
    here = pathlib.Path(__file__)
    files = [p for p in here.parent.glob("test_*.py") if p != here]
    unknown = sorted(_covered(p.read_text(encoding="utf-8") for p in files) - set(functional.NAMES))
    assert not unknown, f"@covers names that are not kernels: {unknown}"


def test_fast_set_is_the_reference_set_overridden_by_fast_kernels():
    """Both tables name every kernel; a fast entry is the reference's or a function of the
    twin file named after the reference's file (fast/linear.py for nn/linear.py ...)."""
    assert list(FAST) == list(REFERENCE) == list(functional.NAMES)
    assert FAST_ONLY, "the fast set replaces no kernel"
    for name, fast in FAST_ONLY.items():
        reference_file = REFERENCE[name].__module__.rsplit(".", 1)[1]
        assert fast.__module__ == f"minitransformer.fast.{reference_file}", (
            f"FAST[{name!r}] is {fast.__module__}.{fast.__name__}, not in the twin of {REFERENCE[name].__module__}")
        assert fast.__name__ == name, f"FAST[{name!r}] is named {fast.__name__}"


# ---------------------------------------------------------------------------
# The backward reads nothing the caller may overwrite
# ---------------------------------------------------------------------------
def _owned_cases():
    """(kernel, run) pairs: ``run(table)`` calls the forward of that kernel set and returns
    the arrays the caller owns afterwards (returned outputs, and inputs the reference's
    cache does not keep) and a function computing the backward from the cache."""
    g = np.random.default_rng(13)
    r = lambda *shape: dev(g.standard_normal(shape))  # noqa: E731

    def attention(ks):
        q, k, v, bias, dout = r(3, 2, 4, 2), r(3, 2, 5, 2), r(3, 2, 5, 3), r(3, 2, 4, 5), r(3, 2, 4, 3)
        mask = dev(g.random((3, 1, 4, 5)) < 0.8)
        out, cache = ks["attention_forward"](q, k, v, mask=mask, bias=bias)
        # The fast backward reads the returned output (its row term is dO . O; see the
        # docstring of minitransformer.fast.attention), the reference's does not.
        owned = [out, mask, bias] if ks is REFERENCE else [mask, bias]
        return owned, lambda: ks["attention_backward"](dout, cache)

    def cross_entropy(ks):
        logits, t = r(4, 3, 6), dev(g.integers(0, 6, size=(4, 3)))
        loss, cache = ks["cross_entropy_forward"](logits, t, label_smoothing=0.1, reduction="none")
        dloss = r(4, 3)
        return [logits, t, loss], lambda: (ks["cross_entropy_backward"](dloss, cache),)

    def layernorm(ks):
        x, w, b, dy = r(4, 3, 6), r(6), r(6), r(4, 3, 6)
        y, cache = ks["layernorm_forward"](x, w, b)
        return [x, b, y], lambda: ks["layernorm_backward"](dy, cache)

    def softmax(ks):
        x, dp = r(4, 7), r(4, 7)
        p, cache = ks["softmax_forward"](x)
        return [x], lambda: (ks["softmax_backward"](dp, cache),)

    def gelu(ks):
        x, dy = r(5, 6), r(5, 6)
        y, cache = ks["gelu_forward"](x)
        return [x, y], lambda: (ks["gelu_backward"](dy, cache),)

    def lstm(ks):
        x, h0, c0, Wx, Wh, b, dy = r(3, 4, 2), r(3, 5), r(3, 5), r(2, 20), r(5, 20), r(20), r(3, 4, 5)
        mask = dev(np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=bool))
        (y, h, c), cache = ks["lstm_forward"](x, h0, c0, Wx, Wh, b, mask)
        return [y, h, c], lambda: ks["lstm_backward"]((dy, None, None), cache)  # both caches keep x, h0, c0, mask

    def graph_bias(ks):
        table, rel, dbias = r(2, 5), dev(g.integers(0, 5, size=(3, 4, 4)).astype(np.uint8)), r(3, 2, 4, 4)
        bias, cache = ks["graph_bias_forward"](table, rel)
        return [bias], lambda: (ks["graph_bias_backward"](dbias, cache),)  # both caches keep the relations

    return {"attention": attention, "cross_entropy": cross_entropy, "layernorm": layernorm,
            "softmax": softmax, "gelu": gelu, "lstm": lstm, "graph_bias": graph_bias}


@pytest.mark.parametrize("kernel_set", ["reference", "fast"])
@pytest.mark.parametrize("kernel", sorted(_owned_cases()))
def test_backward_reads_nothing_the_caller_may_overwrite(any_backend, kernel, kernel_set):
    """After the forward the caller may write into the outputs it got (``y += x`` for a
    residual) and into inputs the reference's cache does not keep (the targets, the
    mask, the bias); the backward must give the same gradients as before. (One
    documented exception: the fast attention's output, see ``_owned_cases``.)"""
    owned, backward = _owned_cases()[kernel]({"reference": REFERENCE, "fast": FAST}[kernel_set])
    before = [host(gr).copy() for gr in backward() if gr is not None]
    for a in owned:
        a[...] = (a == 0) if a.dtype == bool else 3  # overwrite the caller's arrays
    after = [host(gr) for gr in backward() if gr is not None]
    for i, (b, a) in enumerate(zip(before, after)):
        np.testing.assert_array_equal(a, b, err_msg=f"{kernel_set} {kernel}: gradient {i} changed")


# ---------------------------------------------------------------------------
# float32 in, float32 out
# ---------------------------------------------------------------------------
def _float32_calls(g):
    """(name, kernel call taking a kernel set) for every fast kernel, on float32 inputs."""
    f32 = lambda *shape: dev(g.standard_normal(shape).astype(np.float32))  # noqa: E731
    q, k, v, dout = f32(2, 2, 3, 4), f32(2, 2, 5, 4), f32(2, 2, 5, 3), f32(2, 2, 3, 3)
    mask, bias, drop = dev(g.random((2, 1, 3, 5)) < 0.7), f32(1, 2, 3, 5), dev((g.random((2, 2, 3, 5)) > 0.2).astype(np.float32) / np.float32(0.8))
    x, w, b, dy = f32(3, 4, 6), f32(6), f32(6), f32(3, 4, 6)
    logits, t = f32(3, 4, 7), dev(g.integers(0, 7, size=(3, 4)))
    ids = dev(g.integers(0, 5, size=(3, 4)))
    table = f32(5, 6)
    lstm_weights = (f32(3, 5), f32(3, 5), f32(6, 20), f32(5, 20), f32(20))  # h0, c0, Wx, Wh, b for x (3, 4, 6)

    def attention(ks):
        out, cache = ks["attention_forward"](q, k, v, mask=mask, dropout_mask=drop, bias=bias)
        return (out, cache.p, cache.pd, *ks["attention_backward"](dout, cache))

    def cross_entropy(ks):
        loss, cache = ks["cross_entropy_forward"](logits, t, ignore_index=0, label_smoothing=0.1)
        return loss, cache.p, cache.weight, ks["cross_entropy_backward"](dev(np.float32(1.0)), cache)

    def layernorm(ks):
        y, cache = ks["layernorm_forward"](x, w, b)
        return (y, cache.xhat, cache.rstd, *ks["layernorm_backward"](dy, cache))

    return [
        ("softmax_forward", lambda ks: ks["softmax_forward"](x)[:1]),
        ("cross_entropy_forward/backward", cross_entropy),
        ("attention_forward/backward", attention),
        ("layernorm_forward/backward", layernorm),
        ("gelu_forward none", lambda ks: ks["gelu_forward"](x, "none")),
        ("gelu_forward tanh", lambda ks: ks["gelu_forward"](x, "tanh")),
        ("embedding_backward", lambda ks: (ks["embedding_backward"](dy, ks["embedding_forward"](ids, table)[1]),)),
        ("lstm_forward/backward", lambda ks: _lstm_both(ks, x, *lstm_weights)),
        ("graph_bias_forward/backward", lambda ks: _graph_bias_both(ks, table, ids)),
    ]


def _graph_bias_both(ks, table, ids):
    """The graph bias and its table's gradient (with dbias = bias) on a float32 table."""
    relations = ids[:, :, None] * 0 + ids[:, None, :]  # (B, T, T) codes in [0, 5)
    bias, cache = ks["graph_bias_forward"](table, relations)
    return bias, ks["graph_bias_backward"](bias, cache)


def _lstm_both(ks, x, h0, c0, Wx, Wh, b):
    """The LSTM's outputs and gradients (with dy = y) on float32 inputs."""
    out, cache = ks["lstm_forward"](x, h0, c0, Wx, Wh, b)
    return (*out, *ks["lstm_backward"]((out[0], None, None), cache))


def test_float32_stays_float32(any_backend):
    for name, call in _float32_calls(np.random.default_rng(3)):
        outs_f, outs_r = call(FAST), call(REFERENCE)
        for i, (a, r) in enumerate(zip(outs_f, outs_r)):
            assert a.dtype == np.float32, f"{name}: output {i} is {a.dtype}, not float32"
            assert a.dtype == r.dtype and a.shape == r.shape, f"{name}: output {i} differs in dtype or shape"
            np.testing.assert_allclose(host(a), host(r), rtol=2e-5, atol=2e-6, err_msg=f"{name}: output {i}")


# ---------------------------------------------------------------------------
# Bad input: the same ValueError from both sets
# ---------------------------------------------------------------------------
def _bad_calls():
    g = np.random.default_rng(5)
    r = lambda *shape: dev(g.standard_normal(shape))  # noqa: E731
    q, k, v = r(2, 2, 3, 4), r(2, 2, 5, 4), r(2, 2, 5, 3)
    logits, t = r(3, 6), dev(np.array([1, 2, 3]))
    return [
        ("attention: float mask", "attention_forward", (q, k, v), {"mask": dev(np.ones((3, 5)))}),
        ("attention: integer mask", "attention_forward", (q, k, v), {"mask": dev(np.ones((3, 5), dtype=np.int64))}),
        ("attention: mask does not broadcast", "attention_forward", (q, k, v), {"mask": dev(np.ones((3, 4), dtype=bool))}),
        ("attention: bias does not broadcast", "attention_forward", (q, k, v), {"bias": r(2, 3, 3, 5)}),
        ("attention: 3-D q", "attention_forward", (r(2, 3, 4), k, v), {}),
        ("attention: Dh differs", "attention_forward", (r(2, 2, 3, 2), k, v), {}),
        ("cross_entropy: bad reduction", "cross_entropy_forward", (logits, t), {"reduction": "avg"}),
        ("cross_entropy: smoothing 1", "cross_entropy_forward", (logits, t), {"label_smoothing": 1.0}),
        ("cross_entropy: negative smoothing", "cross_entropy_forward", (logits, t), {"label_smoothing": -0.1}),
        ("cross_entropy: targets shape", "cross_entropy_forward", (logits, dev(np.array([1, 2]))), {}),
        ("cross_entropy: float targets", "cross_entropy_forward", (logits, dev(np.array([1.0, 2.0, 3.0]))), {}),
        ("cross_entropy: target out of range", "cross_entropy_forward", (logits, dev(np.array([1, 6, 0]))), {}),
        ("cross_entropy: negative target", "cross_entropy_forward", (logits, dev(np.array([1, -1, 0]))), {"ignore_index": -100}),
        ("cross_entropy: smoothing with 1 class", "cross_entropy_forward", (r(3, 1), dev(np.zeros(3, dtype=int))), {"label_smoothing": 0.1}),
        ("layernorm: width", "layernorm_forward", (r(2, 5), r(4), r(4)), {}),
        ("gelu: approximate", "gelu_forward", (r(3),), {"approximate": "erf"}),
        ("graph bias: relations not (B, T, T)", "graph_bias_forward", (r(2, 5), dev(np.zeros((3, 4), dtype=np.uint8))), {}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())), ids=[c[0] for c in _bad_calls()])
def test_bad_input_raises_the_same_value_error(any_backend, case):
    what, name, args, kwargs = _bad_calls()[case]  # built inside the test: on the active backend
    errors = {}
    for set_name, table in (("reference", REFERENCE), ("fast", FAST)):
        try:
            table[name](*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - compared below
            errors[set_name] = err
    if "reference" not in errors:
        assert "fast" not in errors, f"{what}: only the fast kernel raised {errors['fast']!r}"
        assert not backend.values_on_host(args[0]), f"{what}: the reference raised nothing"
        return  # a value check that a device backend skips, by design
    assert "fast" in errors, f"{what}: the reference raised {errors['reference']!r}, the fast kernel nothing"
    ref, fast = errors["reference"], errors["fast"]
    assert type(fast) is type(ref) and str(fast) == str(ref), f"{what}: fast raised {fast!r}, reference {ref!r}"
    if backend.values_on_host(args[0]) or "out of range" not in what and "negative" not in what:
        assert isinstance(ref, ValueError), f"{what}: the reference raised {ref!r}, not a ValueError"
    # (on a device backend the target values are not read, by design: both fail at the lookup)
