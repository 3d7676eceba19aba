"""Tests for minitransformer.optim: optimizers, schedules, clipping, checkpoints.

The optimizers are checked against step sequences computed independently here,
in float64 NumPy, on the quadratic f(p) = 0.5 * ||p - c||^2 (gradient p - c).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.module import Module, Parameter
from minitransformer.optim import (
    SGD, Adam, Adamax, AdamW, ConstantLR, NoamLR, WarmupCosineLR, clip_grad_norm,
    clip_grad_norm_on_device, default_no_decay,
)

SHAPES = {"w1": (3, 4), "b1": (4,), "w2": (2, 3, 2), "scale": ()}


@pytest.fixture(params=["numpy", "strict"])
def any_backend(request):
    """Run the test under each CPU backend, then restore NumPy."""
    backend.use(request.param)
    try:
        yield request.param
    finally:
        backend.use("numpy")


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


# name -> (constructor, reference step, reference kwargs, whether wd is decoupled & masked)
CASES = {
    "sgd": (lambda ps: SGD(ps, lr=0.1), lambda p, g, s, t, n: ref_sgd(p, g, s, t, 0.1)),
    "sgd_momentum": (lambda ps: SGD(ps, lr=0.1, momentum=0.9),
                     lambda p, g, s, t, n: ref_sgd(p, g, s, t, 0.1, momentum=0.9)),
    "sgd_nesterov_wd": (
        lambda ps: SGD(ps, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1, no_decay=()),
        lambda p, g, s, t, n: ref_sgd(p, g, s, t, 0.05, momentum=0.8, nesterov=True, wd=0.1)),
    "adam": (lambda ps: Adam(ps, lr=0.01),
             lambda p, g, s, t, n: ref_adam(p, g, s, t, 0.01)),
    "adam_l2": (lambda ps: Adam(ps, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, no_decay=()),
                lambda p, g, s, t, n: ref_adam(p, g, s, t, 0.01, (0.8, 0.99), wd=0.1)),
    "adamw": (lambda ps: AdamW(ps, lr=0.01, weight_decay=0.1),
              lambda p, g, s, t, n: ref_adam(p, g, s, t, 0.01,
                                             wd=0.1 if np.ndim(p) >= 2 else 0.0,
                                             decoupled=True)),
    "adamax": (lambda ps: Adamax(ps, lr=1e-3),
               lambda p, g, s, t, n: ref_adamax(p, g, s, t, 1e-3)),
    "adamax_default_lr": (lambda ps: Adamax(ps),
                          lambda p, g, s, t, n: ref_adamax(p, g, s, t, 2e-3)),
}


# ---------------------------------------------------------------------------
# optimizers against the float64 reference
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference_on_quadratic(any_backend, case):
    make_opt, ref_step = CASES[case]
    pairs, init, targets = make_params(seed=1)
    opt = make_opt(pairs)
    expected = dict(init)
    ref_state = {name: {} for name in SHAPES}
    for t in range(1, 4):
        set_quadratic_grads(pairs, targets)
        opt.step()
        for name in SHAPES:
            g = expected[name] - targets[name]
            expected[name] = ref_step(expected[name], g, ref_state[name], t, name)
        got = host(pairs)
        for name in SHAPES:
            assert_close(f"{case} step {t} {name}", got[name], expected[name])
    for name, p in pairs:
        assert p.data.dtype == np.float32, f"{case}: {name} became {p.data.dtype}"
        for key, arr in opt.state[name].items():
            assert arr.dtype == np.float32, f"{case}: state {name}.{key} is {arr.dtype}"


def test_float64_hyperparameters_do_not_upcast(any_backend):
    pairs, _, targets = make_params()
    opt = Adam(pairs, lr=np.float64(1e-3), betas=(np.float64(0.9), np.float64(0.999)),
               eps=np.float64(1e-8), weight_decay=np.float64(0.01))
    set_quadratic_grads(pairs, targets)
    opt.step()
    assert all(p.data.dtype == np.float32 for _, p in pairs)
    assert all(a.dtype == np.float32 for s in opt.state.values() for a in s.values())


def test_step_counter_moves_once_per_step(any_backend):
    pairs, init, targets = make_params(seed=2)
    opt = Adam(pairs, lr=0.01)
    assert opt.t == 0
    set_quadratic_grads(pairs, targets)
    opt.step()
    assert opt.t == 1
    # At t = 1 the bias-corrected Adam step is lr * g / (|g| + eps) ~ lr * sign(g) for
    # *every* parameter; a counter bumped per parameter would shrink later ones' steps.
    got = host(pairs)
    for name in SHAPES:
        g = init[name] - targets[name]
        assert_close(f"first Adam step of {name}", init[name] - got[name], 0.01 * np.sign(g),
                     rtol=1e-4)
    for k in range(2, 6):
        opt.step()
        assert opt.t == k
    assert opt.state_dict()["t"] == 5


def test_bias_correction_uses_the_step_counter(any_backend):
    # Adamax with a constant gradient g: m_t = (1 - b1^t) g, u_t = |g|, so the
    # corrected step is exactly lr * sign(g) each time (up to eps).
    pairs, init, _ = make_params(seed=3, shapes={"a": (5,), "b": (2, 2), "c": (3,)})
    opt = Adamax(pairs, lr=0.01)
    for k in range(1, 5):
        for _, p in pairs:
            p.grad.fill(2.0)
        opt.step()
        got = host(pairs)
        for name in got:
            assert_close(f"Adamax after {k} steps, {name}", init[name] - got[name],
                         np.full_like(init[name], 0.01 * k), rtol=1e-4)


def test_module_input_and_zero_grad(any_backend):
    class Inner(Module):
        def __init__(self):
            self.weight = Parameter(backend.asarray(np.ones((2, 3), np.float32)))
            self.bias = Parameter(backend.asarray(np.zeros(3, np.float32)))

    class Outer(Module):
        def __init__(self):
            self.inner = Inner()
            self.gain = Parameter(backend.asarray(np.ones(3, np.float32)))

    model = Outer()
    opt = AdamW(model, lr=0.1)
    assert list(opt.params) == [n for n, _ in model.named_parameters()]
    assert opt.decayed_names() == ["inner.weight"]
    for p in model.parameters():
        p.grad += 1.0
    opt.zero_grad()
    assert all(float(xp.abs(p.grad).sum()) == 0.0 for p in model.parameters())


def test_bad_params_are_rejected():
    p = Parameter(backend.asarray(np.zeros(3, np.float32)))
    with pytest.raises(TypeError, match="named_parameters"):
        SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="duplicate parameter names: a"):
        SGD([("a", p), ("a", Parameter(backend.asarray(np.zeros(2, np.float32))))], lr=0.1)
    with pytest.raises(ValueError, match="same Parameter appears twice"):
        SGD([("a", p), ("b", p)], lr=0.1)
    with pytest.raises(ValueError, match="no parameters"):
        Adam([], lr=0.1)
    with pytest.raises(ValueError, match="unknown parameters: nope"):
        AdamW([("a", p)], no_decay=["nope"])
    with pytest.raises(ValueError, match="nesterov"):
        SGD([("a", p)], lr=0.1, nesterov=True)


# ---------------------------------------------------------------------------
# weight-decay exemptions
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("no_decay, decayed", [
    (None, {"w1", "w2"}),                                  # default: ndim >= 2 only
    ((), {"w1", "b1", "w2", "scale"}),                     # decay everything
    (["w1"], {"b1", "w2", "scale"}),                        # by name
    (lambda n, p: n.startswith("w"), {"b1", "scale"}),     # by predicate
])
def test_adamw_no_decay(any_backend, no_decay, decayed):
    pairs, init, _ = make_params(seed=4)
    opt = AdamW(pairs, lr=0.1, weight_decay=0.5, no_decay=no_decay)
    assert set(opt.decayed_names()) == decayed
    opt.step()  # zero gradients: only the decoupled decay moves the weights
    got = host(pairs)
    for name in SHAPES:
        factor = 1 - 0.1 * 0.5 if name in decayed else 1.0
        assert_close(f"decay of {name}", got[name], init[name] * factor)


def test_default_no_decay_predicate():
    assert default_no_decay("b", Parameter(backend.asarray(np.zeros(4, np.float32))))
    assert default_no_decay("s", Parameter(backend.asarray(np.zeros((), np.float32))))
    assert not default_no_decay("w", Parameter(backend.asarray(np.zeros((4, 4), np.float32))))


# ---------------------------------------------------------------------------
# schedules
# ---------------------------------------------------------------------------
def test_constant_lr():
    s = ConstantLR(3e-4)
    assert [s(t) for t in (0, 1, 10, 10**6)] == [3e-4] * 4


def test_noam_formula_and_peak():
    d, w, f = 64, 100, 2.0
    s = NoamLR(d, w, factor=f)
    for t in (1, 2, 50, 99, 100, 101, 400, 10**5):
        expected = f * d ** -0.5 * min(t ** -0.5, t * w ** -1.5)
        assert s(t) == pytest.approx(expected, rel=1e-12), f"NoamLR at t={t}"
    assert s(1) == pytest.approx(f * d ** -0.5 * w ** -1.5)
    peak = max(range(1, 3 * w), key=s)
    assert peak == w
    assert s(w) == pytest.approx(f / math.sqrt(d * w))
    assert s(0) == 0.0


def test_warmup_cosine_formula():
    lr, lo, w, T = 1e-3, 1e-5, 10, 110
    s = WarmupCosineLR(lr, warmup=w, total=T, min_lr=lo)
    assert s(0) == 0.0
    assert s(5) == pytest.approx(lr / 2)
    assert s(1) == pytest.approx(lr / w)
    assert s(w) == pytest.approx(lr)                      # warmup boundary: the peak
    assert s(w + 50) == pytest.approx((lr + lo) / 2)      # halfway through the decay
    assert s(T) == pytest.approx(lo)
    assert s(T + 1) == lo and s(10 * T) == lo
    for t in (20, 37, 90):
        expected = lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * (t - w) / (T - w)))
        assert s(t) == pytest.approx(expected, rel=1e-12), f"WarmupCosineLR at t={t}"
    no_warmup = WarmupCosineLR(lr, warmup=0, total=10)
    assert no_warmup(0) == pytest.approx(lr) and no_warmup(10) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        WarmupCosineLR(lr, warmup=10, total=10)


@settings(max_examples=60, deadline=None)
@given(w=st.integers(0, 50), extra=st.integers(1, 200), t=st.integers(0, 400),
       lr=st.floats(1e-6, 1.0), frac=st.floats(0.0, 1.0))
def test_warmup_cosine_properties(w, extra, t, lr, frac):
    lo = lr * frac
    s = WarmupCosineLR(lr, warmup=w, total=w + extra, min_lr=lo)
    assert 0.0 <= s(t) <= lr * (1 + 1e-12)
    if t >= w:
        assert s(t) >= lo * (1 - 1e-12)
        assert s(t + 1) <= s(t) * (1 + 1e-12)   # non-increasing after warmup
    else:
        assert s(t) <= s(t + 1) * (1 + 1e-12)   # non-decreasing during warmup


def test_optimizer_uses_schedule(any_backend):
    sched = WarmupCosineLR(0.1, warmup=2, total=5)
    pairs, _, _ = make_params(seed=5, shapes={"a": (3,), "b": (2, 2)})
    opt = SGD(pairs, lr=sched)
    assert opt.lr == pytest.approx(sched(1)) and opt.get_lr() == pytest.approx(sched(1))
    for t in range(1, 8):
        before = host(pairs)
        for _, p in pairs:
            p.grad.fill(1.0)
        opt.step()
        assert opt.lr == pytest.approx(sched(t)), f"lr at step {t}"
        after = host(pairs)
        for name in before:
            assert_close(f"SGD step {t} on {name}", before[name] - after[name],
                         np.full_like(before[name], sched(t)))


# ---------------------------------------------------------------------------
# gradient clipping
# ---------------------------------------------------------------------------
def _grads(pairs):
    return {name: backend.to_numpy(p.grad).astype(np.float64) for name, p in pairs}


def test_clip_grad_norm_clips_and_returns_norm(any_backend):
    pairs, _, targets = make_params(seed=6)
    set_quadratic_grads(pairs, targets)
    g0 = _grads(pairs)
    norm0 = math.sqrt(sum(float((g ** 2).sum()) for g in g0.values()))
    norm = clip_grad_norm(pairs, max_norm=0.5)
    assert backend.is_device_array(norm) and norm.shape == (), f"norm is {type(norm).__name__}"
    assert norm.dtype == np.float32
    assert float(norm) == pytest.approx(norm0, rel=1e-5)
    g1 = _grads(pairs)
    assert math.sqrt(sum(float((g ** 2).sum()) for g in g1.values())) == pytest.approx(0.5, rel=1e-5)
    for name in g0:
        assert_close(f"clipped grad {name}", g1[name], g0[name] * 0.5 / (norm0 + 1e-6))


def test_clip_grad_norm_noop_below_threshold(any_backend):
    pairs, _, targets = make_params(seed=7)
    set_quadratic_grads(pairs, targets)
    g0 = _grads(pairs)
    params = [p for _, p in pairs]
    norm = clip_grad_norm(params, max_norm=1e6)
    assert float(norm) < 1e6
    for name, g in _grads(pairs).items():
        np.testing.assert_array_equal(g, g0[name], err_msg=f"grad {name} changed")


def test_clip_grad_norm_accepts_module_and_counts_tied_once(any_backend):
    class M(Module):
        def __init__(self):
            self.a = Parameter(backend.asarray(np.full((2, 2), 1.0, np.float32)))
            self.b = Parameter(backend.asarray(np.full(5, 1.0, np.float32)))

    m = M()
    m.a.grad.fill(3.0)   # 4 * 9 = 36
    m.b.grad.fill(0.0)
    assert float(clip_grad_norm(m, 100.0)) == pytest.approx(6.0)
    assert float(clip_grad_norm([m.a, m.a], 100.0)) == pytest.approx(6.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_clip_grad_norm_nonfinite_leaves_grads(any_backend, bad):
    pairs, _, targets = make_params(seed=8)
    set_quadratic_grads(pairs, targets)
    pairs[1][1].grad[0] = bad
    g0 = _grads(pairs)
    with backend.forbid_host_sync():  # the NaN rule is applied on the device, too
        norm = clip_grad_norm(pairs, max_norm=0.1)
    assert not math.isfinite(float(norm))
    assert math.isnan(float(norm)) == math.isnan(bad)
    for name, g in _grads(pairs).items():
        np.testing.assert_array_equal(g, g0[name], err_msg=f"grad {name} changed")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(1e-3, 1e3), max_norm=st.floats(1e-2, 10.0))
def test_clip_grad_norm_property(seed, scale, max_norm):
    rng = np.random.default_rng(seed)
    backend.use("numpy")  # host arrays below; the backend sweep is covered by the other clip tests
    ps = [Parameter(np.zeros(s, np.float32)) for s in [(3, 2), (4,), (1,)]]
    for p in ps:
        p.grad[...] = (scale * rng.standard_normal(p.shape)).astype(np.float32)
    before = [p.grad.astype(np.float64) for p in ps]
    norm = float(clip_grad_norm(ps, max_norm))
    after_norm = math.sqrt(sum(float((p.grad.astype(np.float64) ** 2).sum()) for p in ps))
    assert after_norm <= max_norm * (1 + 1e-5) + 1e-12
    assert after_norm == pytest.approx(min(norm, max_norm), rel=1e-4, abs=1e-12)
    k = min(1.0, max_norm / (norm + 1e-6))
    for i, (p, b) in enumerate(zip(ps, before)):
        assert_close(f"clipped grad {i}", p.grad, b * k, rtol=1e-5, atol=1e-9)


def test_clip_grad_norm_none_measures_only_and_never_syncs(any_backend):
    pairs, _, targets = make_params(seed=13)
    set_quadratic_grads(pairs, targets)
    g0 = _grads(pairs)
    norm0 = math.sqrt(sum(float((g ** 2).sum()) for g in g0.values()))
    with backend.forbid_host_sync():  # the strict backend raises at any device-to-host read
        measured = clip_grad_norm(pairs, None)
    assert float(measured) == pytest.approx(norm0, rel=1e-5)
    for name, g in _grads(pairs).items():
        np.testing.assert_array_equal(g, g0[name], err_msg=f"max_norm=None changed grad {name}")
    with backend.forbid_host_sync():
        clipped = clip_grad_norm(pairs, 0.5)
    assert float(clipped) == pytest.approx(norm0, rel=1e-5)  # the norm before clipping
    g1 = _grads(pairs)
    for name in g0:
        assert_close(f"clipped grad {name}", g1[name], g0[name] * 0.5 / (norm0 + 1e-6))


def test_clip_grad_norm_rejects_a_non_positive_threshold():
    pairs, _, _ = make_params()
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="max_norm must be > 0"):
            clip_grad_norm(pairs, bad)


def test_clip_grad_norm_on_device_is_the_deprecated_alias():
    assert clip_grad_norm_on_device is clip_grad_norm


def _tiny_lm_run(sync_every, task):
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.train import TrainConfig, fit

    rng = np.random.default_rng(0)
    data = [[1] + list(rng.integers(3, 9, size=rng.integers(3, 7))) + [2] for _ in range(48)]
    model = DecoderLM(DecoderLMConfig(vocab_size=9, max_len=10, d_model=8, n_heads=2, n_layers=1, d_ff=16))
    optimizer = Adam(model, lr=1e-2)
    cfg = TrainConfig(epochs=1, batch_size=8, quiet=True, sync_every=sync_every, clip=1.0)
    return model, optimizer, lambda: fit(model, task, optimizer, data, config=cfg)


@pytest.mark.parametrize("sync_every", [1, 4])
def test_trainer_stops_before_a_nan_gradient_reaches_the_weights(any_backend, sync_every):
    """clip_grad_norm leaves a NaN gradient untouched; the trainer must not step on it.
    Checking every step, it stops before the update; checking every 4 steps, it drops
    the step's gradients on the device and stops at the next read."""
    from minitransformer.tasks import LMTask
    from minitransformer.train import TrainingDiverged

    class NaNGradAtStep3(LMTask):
        calls = 0

        def backward(self, model):
            super().backward(model)
            NaNGradAtStep3.calls += 1
            if NaNGradAtStep3.calls == 3:
                p = next(iter(model.parameters()))
                xp.multiply(p.grad, float("nan"), out=p.grad)

    model, optimizer, run = _tiny_lm_run(sync_every, NaNGradAtStep3(0))
    with pytest.raises(TrainingDiverged, match="non-finite gradient norm .* step 3"):
        run()
    assert optimizer.t == (2 if sync_every == 1 else 4)
    for name, p in model.named_parameters():
        assert bool(xp.isfinite(p.data).all()), f"{name} became non-finite"
    for name, state in optimizer.state.items():
        assert all(bool(xp.isfinite(a).all()) for a in state.values()), f"state of {name} became non-finite"


# ---------------------------------------------------------------------------
# state_dict round trip
# ---------------------------------------------------------------------------
def _plain(obj):
    """True if obj is built from dict/list/str/int/float/bool/None and host arrays."""
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(_plain(v) for v in obj)
    return obj is None or isinstance(obj, (str, int, float, bool, np.ndarray))


@pytest.mark.parametrize("make_opt", [
    lambda ps: Adam(ps, lr=0.01, weight_decay=0.01),
    lambda ps: AdamW(ps, lr=NoamLR(16, 3, factor=0.5)),
    lambda ps: Adamax(ps, lr=1e-3),
    lambda ps: SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: SGD(ps, lr=0.1),
], ids=["adam", "adamw_noam", "adamax", "sgd_nesterov", "sgd"])
def test_state_dict_round_trip(any_backend, make_opt):
    pairs_a, init, targets = make_params(seed=9)
    opt_a = make_opt(pairs_a)
    for _ in range(2):
        set_quadratic_grads(pairs_a, targets)
        opt_a.step()
    sd = opt_a.state_dict()
    assert _plain(sd), f"state_dict is not plain: {sd!r}"
    assert sd["t"] == 2
    saved = {n: {k: a.copy() for k, a in s.items()} for n, s in sd["state"].items()}

    # B: fresh parameters set to A's current values, fresh optimizer, load.
    pairs_b, _, _ = make_params(seed=10)
    for (_, pa), (_, pb) in zip(pairs_a, pairs_b):
        pb.data = backend.asarray(backend.to_numpy(pa.data).copy())
    opt_b = make_opt(pairs_b)
    opt_b.load_state_dict(sd)
    assert opt_b.t == 2 and opt_b.lr == opt_a.lr

    for _ in range(2):
        for pairs in (pairs_a, pairs_b):
            set_quadratic_grads(pairs, targets)
        opt_a.step()
        opt_b.step()
    got_a, got_b = host(pairs_a), host(pairs_b)
    for name in SHAPES:
        np.testing.assert_array_equal(got_b[name], got_a[name],
                                      err_msg=f"{name} differs after resuming")
    # the saved dict is a snapshot: later steps did not write into it
    for n, s in saved.items():
        for k, a in s.items():
            np.testing.assert_array_equal(sd["state"][n][k], a, err_msg=f"saved {n}.{k} changed")


def test_load_state_dict_casts_to_parameter_dtype(any_backend):
    pairs, _, targets = make_params(seed=11)
    opt = Adam(pairs, lr=0.01)
    sd = opt.state_dict()
    sd["state"] = {n: {k: a.astype(np.float64) + 1.0 for k, a in s.items()}
                   for n, s in sd["state"].items()}
    opt.load_state_dict(sd)
    for name, s in opt.state.items():
        for key, arr in s.items():
            assert arr.dtype == np.float32, f"{name}.{key} loaded as {arr.dtype}"
            assert float(arr.sum()) == pytest.approx(arr.size)


def test_load_state_dict_mismatch_raises_and_loads_nothing(any_backend):
    pairs, _, targets = make_params(seed=12)
    opt = Adam(pairs, lr=0.01)
    set_quadratic_grads(pairs, targets)
    opt.step()
    good = opt.state_dict()
    before = {n: {k: backend.to_numpy(a).copy() for k, a in s.items()} for n, s in opt.state.items()}

    bad = opt.state_dict()
    bad["t"] = 99
    bad["state"]["b1"]["m"] = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match=r"b1\.m: shape \(5,\), expected \(4,\)"):
        opt.load_state_dict(bad)

    bad = opt.state_dict()
    del bad["state"]["w2"]
    bad["state"]["extra"] = {"m": np.zeros(1), "v": np.zeros(1)}
    with pytest.raises(ValueError) as info:
        opt.load_state_dict(bad)
    assert "missing: w2" in str(info.value) and "unexpected: extra" in str(info.value)

    bad = opt.state_dict()
    bad["state"]["w1"] = {"m": bad["state"]["w1"]["m"]}
    with pytest.raises(ValueError, match="w1: state keys"):
        opt.load_state_dict(bad)

    with pytest.raises(ValueError, match="expected Adam, got Adamax"):
        opt.load_state_dict(dict(good, type="Adamax"))

    assert opt.t == 1
    for n, s in opt.state.items():
        for k, a in s.items():
            np.testing.assert_array_equal(backend.to_numpy(a), before[n][k],
                                          err_msg=f"{n}.{k} changed by a failed load")


def test_sgd_momentum_mismatch_is_clear():
    pairs, _, _ = make_params()
    sd = SGD(pairs, lr=0.1, momentum=0.9).state_dict()
    with pytest.raises(ValueError, match="momentum"):
        SGD(pairs, lr=0.1).load_state_dict(sd)


# ---------------------------------------------------------------------------
# settings are validated: at construction, on load, and at every scheduled step
# ---------------------------------------------------------------------------
INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("make, match", [
    (lambda ps: Adam(ps, lr=INF), "lr must be finite and >= 0"),
    (lambda ps: Adam(ps, lr=NAN), "lr must be finite and >= 0"),
    (lambda ps: Adam(ps, lr=-1.0), "lr must be finite and >= 0"),
    (lambda ps: SGD(ps, lr=INF), "lr must be finite and >= 0"),
    (lambda ps: Adam(ps, betas=(5.0, 0.999)), r"betas must be in \[0, 1\)"),
    (lambda ps: Adam(ps, betas=(0.9, NAN)), r"betas must be in \[0, 1\)"),
    (lambda ps: Adam(ps, betas=(0.9,)), "two numbers"),
    (lambda ps: Adamax(ps, eps=-1.0), "eps must be finite and > 0"),
    (lambda ps: AdamW(ps, eps=INF), "eps must be finite and > 0"),
    (lambda ps: AdamW(ps, weight_decay=INF), "weight_decay must be finite and >= 0"),
    (lambda ps: SGD(ps, lr=0.1, weight_decay=-0.1), "weight_decay must be finite and >= 0"),
    (lambda ps: SGD(ps, lr=0.1, momentum=NAN), r"momentum must be in \[0, 1\)"),
    (lambda ps: SGD(ps, lr=0.1, momentum=1.0), r"momentum must be in \[0, 1\)"),
    (lambda ps: Adam(ps, lr=lambda t: NAN), "gave lr=nan for step 1"),
    (lambda ps: Adam(ps, lr=lambda t: -1e-3), "gave lr=-0.001 for step 1"),
], ids=["adam_lr_inf", "adam_lr_nan", "adam_lr_neg", "sgd_lr_inf", "betas_5", "beta2_nan", "one_beta",
        "adamax_eps_neg", "adamw_eps_inf", "wd_inf", "wd_neg", "momentum_nan", "momentum_1",
        "schedule_nan_at_1", "schedule_negative_at_1"])
def test_bad_optimizer_settings_are_refused_at_construction(make, match):
    pairs, _, _ = make_params()
    with pytest.raises(ValueError, match=match):
        make(pairs)


@pytest.mark.parametrize("make, match", [
    (lambda: ConstantLR(INF), "lr must be finite and >= 0"),
    (lambda: NoamLR(16, 4, factor=INF), "factor must be finite and > 0"),
    (lambda: NoamLR(16, NAN), "warmup must be a whole number > 0"),
    (lambda: NoamLR(16, 2.5), "warmup must be a whole number > 0"),
    (lambda: NoamLR(0, 4), "d_model must be a whole number > 0"),
    (lambda: WarmupCosineLR(INF, 1, 10), "lr must be finite and >= 0"),
    (lambda: WarmupCosineLR(1e-3, 1, 10, min_lr=NAN), "min_lr must be finite and >= 0"),
    (lambda: WarmupCosineLR(1e-3, 1, 10, min_lr=1e-2), "min_lr.* must not exceed lr"),
    (lambda: WarmupCosineLR(1e-3, 1, INF), "total must be a whole number"),
    (lambda: WarmupCosineLR(1e-3, -1, 10), "warmup must be a whole number >= 0"),
], ids=["const_inf", "noam_factor_inf", "noam_warmup_nan", "noam_warmup_fraction", "noam_d0",
        "cos_lr_inf", "cos_min_nan", "cos_min_above_lr", "cos_total_inf", "cos_warmup_neg"])
def test_bad_schedule_settings_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("make_opt, change, match", [
    (lambda ps: Adam(ps, lr=0.01), {"lr": -1.0}, "lr must be finite and >= 0"),
    (lambda ps: Adam(ps, lr=0.01), {"betas": [5.0, 0.999]}, r"betas must be in \[0, 1\)"),
    (lambda ps: Adam(ps, lr=0.01), {"eps": -1.0}, "eps must be finite and > 0"),
    (lambda ps: AdamW(ps, lr=0.01), {"weight_decay": NAN}, "weight_decay must be finite and >= 0"),
    (lambda ps: Adamax(ps, lr=0.01), {"betas": [0.9, 1.0]}, r"betas must be in \[0, 1\)"),
    (lambda ps: SGD(ps, lr=0.1, momentum=0.9), {"momentum": 3.0}, r"momentum must be in \[0, 1\)"),
    (lambda ps: Adam(ps, lr=0.01), {"t": -3}, "t must be a whole number >= 0"),
    (lambda ps: Adam(ps, lr=0.01), {"t": 2.5}, "t must be a whole number >= 0"),
], ids=["lr_neg", "betas_5", "eps_neg", "wd_nan", "adamax_beta2_1", "momentum_3", "t_neg", "t_fraction"])
def test_load_state_dict_refuses_bad_settings_and_loads_nothing(any_backend, make_opt, change, match):
    pairs, _, targets = make_params(seed=13)
    opt = make_opt(pairs)
    set_quadratic_grads(pairs, targets)
    opt.step()
    before = repr(opt), {n: {k: backend.to_numpy(a).copy() for k, a in s.items()} for n, s in opt.state.items()}
    sd = opt.state_dict()
    sd.update(change)
    with pytest.raises(ValueError, match=match):
        opt.load_state_dict(sd)
    assert repr(opt) == before[0]
    for n, s in opt.state.items():
        for k, a in s.items():
            np.testing.assert_array_equal(backend.to_numpy(a), before[1][n][k])


@pytest.mark.parametrize("bad", [NAN, -1e-3, INF], ids=["nan", "negative", "inf"])
def test_a_schedule_giving_a_bad_rate_stops_before_the_update(any_backend, bad):
    pairs, _, targets = make_params(seed=14)
    opt = Adam(pairs, lr=lambda t: bad if t == 3 else 1e-2)
    for _ in range(2):
        set_quadratic_grads(pairs, targets)
        opt.step()
    before = host(pairs)
    set_quadratic_grads(pairs, targets)
    with pytest.raises(ValueError, match=f"gave lr={bad} for step 3.*no update was made"):
        opt.step()
    assert opt.t == 2 and opt.lr == 1e-2
    after = host(pairs)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
