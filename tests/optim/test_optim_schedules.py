"""Learning-rate schedules (minitransformer.optim.schedules): constant, Noam, warmup + cosine."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer.optim import SGD, ConstantLR, NoamLR, WarmupCosineLR
from optim_helpers import assert_close, host, make_params


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
    for t in (20, 37, 90, T - 1):  # T - 1: the last step still above the floor
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
