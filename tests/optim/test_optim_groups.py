"""Parameter groups (minitransformer.optim.groups): per-group lr and weight decay,
param_groups(model), state_dict round trips and checkpoint resume with groups."""
from __future__ import annotations

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.checkpoint import load_checkpoint, restore, save_checkpoint
from minitransformer.models.decoder_lm import DecoderLM, DecoderLMConfig
from minitransformer.nn.module import Parameter
from minitransformer.optim import SGD, AdamW, ConstantLR, param_groups


def _model(seed=0):
    return DecoderLM(DecoderLMConfig(vocab_size=10, d_model=8, n_heads=2, d_ff=16, n_layers=1,
                                     max_len=8, seed=seed))


def _ones(*names):
    """(name, Parameter) pairs holding 1.0 with gradient 0: SGD moves them by decay only."""
    return [(n, Parameter(np.ones(2))) for n in names]


def test_param_groups_splits_matrices_from_biases_and_norms():
    model = _model()
    groups = param_groups(model, weight_decay=0.1)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    decay = {n for n, _ in groups[0]["params"]}
    exempt = {n for n, _ in groups[1]["params"]}
    assert decay == {n for n, p in model.named_parameters() if p.data.ndim >= 2}
    assert "ln_f.weight" in exempt and "blocks.0.attn.qkv.bias" in exempt
    opt = AdamW(groups, lr=1e-3)
    assert set(opt.decayed_names()) == decay
    assert len(opt.param_groups) == 2 and "2 groups" in repr(opt)


def test_group_weight_decay_and_lr_override_the_optimizer_defaults():
    a, b, c = _ones("a"), _ones("b"), _ones("c")
    opt = SGD([{"params": a, "weight_decay": 0.5}, {"params": b, "lr": 0.01}, {"params": c}],
              lr=0.1, weight_decay=0.2, no_decay=())
    opt.step()  # gradients are zero: only decay moves the weights, p -= lr * wd * p
    np.testing.assert_allclose(a[0][1].data, 1 - 0.1 * 0.5)   # group wd, optimizer lr
    np.testing.assert_allclose(b[0][1].data, 1 - 0.01 * 0.2)  # group lr, optimizer wd
    np.testing.assert_allclose(c[0][1].data, 1 - 0.1 * 0.2)   # both from the optimizer
    assert opt.lr == 0.1 and opt.param_groups[1]["lr"] == 0.01


def test_a_group_weight_decay_applies_to_all_its_parameters_ignoring_no_decay():
    bias = Parameter(np.ones(3))  # ndim 1: default_no_decay would exempt it
    opt = SGD([{"params": [("bias", bias)], "weight_decay": 0.5}], lr=0.1)
    opt.step()
    np.testing.assert_allclose(bias.data, 0.95)
    assert opt.decayed_names() == ["bias"]


def test_bare_parameters_and_modules_in_groups_and_a_group_schedule():
    p, q = Parameter(np.ones(2)), Parameter(np.ones(2))
    opt = SGD([{"params": [p]}, {"params": [q], "lr": ConstantLR(0.5)}], lr=0.1)
    assert list(opt.params) == ["0.0", "1.0"]
    p.grad[:], q.grad[:] = 1.0, 1.0
    opt.step()
    np.testing.assert_allclose(p.data, 0.9)
    np.testing.assert_allclose(q.data, 0.5)
    assert opt.param_groups[1]["lr"] == 0.5
    model = _model()
    assert list(AdamW([{"params": model}]).params) == [n for n, _ in model.named_parameters()]


def test_a_bad_group_rate_changes_nothing_not_even_the_other_groups_rates():
    p, q = Parameter(np.ones(2)), Parameter(np.ones(2))
    opt = SGD([{"params": [p], "lr": lambda t: 0.5 * t},
               {"params": [q], "lr": lambda t: 0.1 if t < 2 else float("nan")}], lr=ConstantLR(0.2))
    p.grad[:], q.grad[:] = 1.0, 1.0
    opt.step()
    before = (opt.lr, [g["lr"] for g in opt.param_groups], opt.t, p.data.copy(), q.data.copy())
    with pytest.raises(ValueError, match="no update was made"):
        opt.step()
    assert (opt.lr, [g["lr"] for g in opt.param_groups], opt.t) == before[:3]
    assert np.array_equal(p.data, before[3]) and np.array_equal(q.data, before[4])


@pytest.mark.parametrize("groups, match", [
    ([{"params": _ones("a"), "momentum": 0.9}], "a group has 'params' and optionally 'lr' and 'weight_decay'"),
    ([{"lr": 0.1}], "a group has 'params'"),
    ([{"params": []}], "parameter group 0 has no parameters"),
    ([{"params": _ones("a"), "lr": -1.0}], r"parameter group 0: lr must be finite and >= 0"),
    ([{"params": _ones("a"), "weight_decay": -1}], "weight_decay must be finite and >= 0"),
    ([{"params": _ones("a")}, {"params": _ones("a")}], "duplicate parameter names: a"),
])
def test_bad_groups_are_refused_in_one_line(groups, match):
    with pytest.raises(ValueError, match=match) as info:
        SGD(groups, lr=0.1)
    assert "\n" not in str(info.value)


def test_state_dict_round_trips_groups_and_refuses_other_groups():
    model = _model()
    opt = AdamW(param_groups(model, weight_decay=0.1), lr=1e-3)
    for p in model.parameters():
        p.grad += 0.1
    opt.step()
    sd = opt.state_dict()
    assert [g["weight_decay"] for g in sd["param_groups"]] == [0.1, 0.0]
    other = AdamW(param_groups(_model(), weight_decay=0.3), lr=1e-3)
    other.load_state_dict(sd)
    assert [g["weight_decay"] for g in other.param_groups] == [0.1, 0.0] and other.t == 1
    for n in opt.state:
        np.testing.assert_array_equal(backend.to_numpy(other.state[n]["m"]), backend.to_numpy(opt.state[n]["m"]))
    one_group = AdamW(_model(), lr=1e-3)
    with pytest.raises(ValueError, match="parameter groups: saved 2 group"):
        one_group.load_state_dict(sd)


def test_checkpoint_resume_with_groups(tmp_path):
    model = _model()
    opt = AdamW(param_groups(model, weight_decay=0.1), lr=1e-3)
    for p in model.parameters():
        p.grad += 0.1
    opt.step()
    path = save_checkpoint(tmp_path / "ck.npz", model, opt)
    model2 = _model(seed=5)
    opt2 = AdamW(param_groups(model2, weight_decay=0.0), lr=1e-3)
    restore(model2, load_checkpoint(path), opt2)
    assert [g["weight_decay"] for g in opt2.param_groups] == [0.1, 0.0]
    assert opt2.t == 1 and opt2.steps == opt.steps
    weights2 = dict(model2.named_parameters())
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(backend.to_numpy(weights2[n].data), backend.to_numpy(p.data), err_msg=n)


def test_param_groups_default_rule_is_default_no_decay():
    from minitransformer.optim import default_no_decay, param_groups
    model = _model()
    decayed, exempt = (dict(g["params"]) for g in param_groups(model, weight_decay=0.1))
    for name, p in model.named_parameters():
        assert (name in exempt) == default_no_decay(name, p) and (name in decayed) != (name in exempt)
