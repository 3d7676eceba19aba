"""Gradient clipping (minitransformer.optim.clip): by global norm, on the host and on the device."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer import backend, devices
from minitransformer.backend import xp
from minitransformer.nn.module import Module, Parameter
from minitransformer.optim import Adam, clip_grad_norm, clip_grad_norm_on_device
from optim_helpers import assert_close, make_params, set_quadratic_grads


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
    with devices.forbid_host_sync():  # the NaN rule is applied on the device, too
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
    with devices.forbid_host_sync():  # the strict backend raises at any device-to-host read
        measured = clip_grad_norm(pairs, None)
    assert float(measured) == pytest.approx(norm0, rel=1e-5)
    for name, g in _grads(pairs).items():
        np.testing.assert_array_equal(g, g0[name], err_msg=f"max_norm=None changed grad {name}")
    with devices.forbid_host_sync():
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
    from minitransformer.train.tasks import LMTask
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
