"""The optimizers (minitransformer.optim.optimizer, sgd_adamax) against step sequences computed
independently here, in float64 NumPy, on the quadratic f(p) = 0.5 * ||p - c||^2 (gradient
p - c); which parameters weight decay leaves alone (minitransformer.optim.groups)."""
from __future__ import annotations

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.module import Module, Parameter
from minitransformer.optim import SGD, Adam, Adamax, AdamW, default_no_decay
from optim_helpers import (
    assert_close, host, make_params, ref_adam, ref_adamax, ref_sgd, set_quadratic_grads, SHAPES,
)


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
