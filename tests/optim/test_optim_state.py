"""Optimizer state (minitransformer.optim.state): the state_dict round trip, and settings
validated at construction, on load and at every scheduled step."""
from __future__ import annotations

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.optim import SGD, Adam, Adamax, AdamW, ConstantLR, NoamLR, WarmupCosineLR
from optim_helpers import host, make_params, set_quadratic_grads, SHAPES


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
