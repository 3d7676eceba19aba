"""Frozen parameters (``requires_grad`` False): no optimizer moves them or
advances their state, gradient clipping leaves them out, and unfreezing resumes
with a first step (each parameter counts its own updates)."""
from __future__ import annotations

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.models.decoder_lm import DecoderLM, DecoderLMConfig
from minitransformer.nn.module import Parameter
from minitransformer.nn.softmax import CrossEntropyLoss
from minitransformer.optim import SGD, Adam, Adamax, AdamW, clip_grad_norm

IDS = np.array([[1, 4, 5, 6, 7, 2], [1, 3, 3, 8, 2, 0]], dtype=np.int64)


def _model():
    return DecoderLM(DecoderLMConfig(vocab_size=10, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=8))


def _train(model, opt, steps):
    ids = backend.asarray(IDS)
    for _ in range(steps):
        opt.zero_grad()
        logits = model(ids[:, :-1])
        loss_fn = CrossEntropyLoss(ignore_index=0)
        loss_fn(logits, ids[:, 1:])
        model.backward(loss_fn.backward())
        opt.step()


def _weights(model):
    return {n: backend.to_numpy(p.data).copy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("make", [
    lambda m: AdamW(m, lr=1e-2, weight_decay=0.1),
    lambda m: Adam(m, lr=1e-2, weight_decay=0.1),
    lambda m: Adamax(m, lr=1e-2, weight_decay=0.1),
    lambda m: SGD(m, lr=0.1, momentum=0.9, weight_decay=0.1),
], ids=["AdamW", "Adam", "Adamax", "SGD"])
def test_frozen_embedding_stays_bit_for_bit_and_unfreezing_resumes(make):
    model = _model()
    opt = make(model)
    model.embed.tok.freeze()
    before = _weights(model)
    _train(model, opt, 3)
    after = _weights(model)
    np.testing.assert_array_equal(after["embed.tok.weight"], before["embed.tok.weight"])
    changed = [n for n in before if not np.array_equal(after[n], before[n])]
    assert set(changed) == set(before) - {"embed.tok.weight"}
    assert opt.t == 3 and opt.steps["embed.tok.weight"] == 0 and opt.steps["head.linear.weight"] == 3
    for arr in opt.state["embed.tok.weight"].values():  # its state did not advance
        assert not np.any(backend.to_numpy(arr))
    model.embed.tok.unfreeze()
    _train(model, opt, 1)
    assert not np.array_equal(_weights(model)["embed.tok.weight"], after["embed.tok.weight"])
    assert opt.steps["embed.tok.weight"] == 1 and opt.t == 4


def test_unfrozen_parameter_takes_a_first_adam_step_not_a_late_one():
    """Bias correction by the parameter's own count: after unfreezing, the first
    Adam step moves every coordinate by lr (|m_hat / sqrt(v_hat)| = 1)."""
    p, q = Parameter(np.zeros(3)), Parameter(np.zeros(3))
    opt = Adam([("p", p), ("q", q)], lr=0.1)
    p.requires_grad = False
    for _ in range(5):
        p.grad[:], q.grad[:] = 1.0, 1.0
        opt.step()
    p.requires_grad = True
    p.grad[:] = np.array([2.0, -3.0, 0.5])
    opt.step()
    np.testing.assert_allclose(p.data, [-0.1, 0.1, -0.1], rtol=1e-6)


def test_optimizer_state_round_trips_the_per_parameter_steps():
    model = _model()
    opt = AdamW(model, lr=1e-2)
    model.embed.freeze()
    _train(model, opt, 2)
    sd = opt.state_dict()
    assert sd["steps"]["embed.tok.weight"] == 0 and sd["steps"]["ln_f.weight"] == 2
    fresh = AdamW(_model(), lr=1e-2)
    fresh.load_state_dict(sd)
    assert fresh.steps == opt.steps and fresh.t == 2
    old = dict(sd)
    del old["steps"]  # a checkpoint from before per-parameter counts: every count is t
    fresh.load_state_dict(old)
    assert set(fresh.steps.values()) == {2}
    bad = dict(sd, steps=dict(sd["steps"], **{"ln_f.weight": 3}))
    with pytest.raises(ValueError, match="steps must give every parameter"):
        fresh.load_state_dict(bad)


def test_clipping_leaves_frozen_parameters_out_of_the_norm_and_the_scaling():
    a, b = Parameter(np.full(4, 3.0)), Parameter(np.full(4, 100.0))
    a.grad[:], b.grad[:] = 3.0, 100.0
    b.requires_grad = False
    norm = clip_grad_norm([a, b], max_norm=1.0)
    assert float(norm) == pytest.approx(6.0)  # sqrt(4 * 9): b does not count
    np.testing.assert_allclose(a.grad, 0.5, rtol=1e-5)
    np.testing.assert_array_equal(b.grad, 100.0)  # and is not scaled
