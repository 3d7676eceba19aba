"""REINVENT's augmented-likelihood loss: both kernel pairs and a whole agent, gradient-checked in float64."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.gradcheck import check_kernel, check_module
from minitransformer.models import DecoderLM, DecoderLMConfig
from minitransformer.train.augmented_likelihood import (augmented_likelihood_backward, augmented_likelihood_forward,
                                                         sequence_log_likelihood_backward,
                                                         sequence_log_likelihood_forward)

PAD = 0
TARGETS = np.array([[4, 5, 6, 2, 0, 0], [7, 8, 2, 0, 0, 0], [3, 3, 3, 3, 3, 2]])  # (B, T), 0 = padding


def _dev(a):
    return backend.asarray(np.asarray(a))


def test_sequence_log_likelihood_by_hand(float64):
    logits = np.random.default_rng(0).standard_normal((3, 6, 9))
    logp, _ = sequence_log_likelihood_forward(_dev(logits), _dev(TARGETS), PAD)
    z = logits - logits.max(-1, keepdims=True)
    lsm = z - np.log(np.exp(z).sum(-1, keepdims=True))
    want = [sum(lsm[b, t, TARGETS[b, t]] for t in range(6) if TARGETS[b, t] != PAD) for b in range(3)]
    np.testing.assert_allclose(backend.to_numpy(logp), want, rtol=1e-12)


def test_sequence_log_likelihood_gradients(float64):
    logits = np.random.default_rng(1).standard_normal((3, 6, 9))
    check_kernel(sequence_log_likelihood_forward, sequence_log_likelihood_backward,
                 {"logits": _dev(logits), "targets": _dev(TARGETS)}, {"pad_id": PAD})


def test_padding_gets_exactly_zero_gradient(float64):
    logits = _dev(np.random.default_rng(2).standard_normal((3, 6, 9)))
    _, cache = sequence_log_likelihood_forward(logits, _dev(TARGETS), PAD)
    d = backend.to_numpy(sequence_log_likelihood_backward(_dev([1.0, -2.0, 0.5]), cache))
    assert np.all(d[TARGETS == PAD] == 0.0)
    np.testing.assert_allclose(d.sum(-1), 0.0, atol=1e-12)  # onehot - softmax sums to 0 over the vocabulary


def test_augmented_likelihood_gradients_and_value(float64):
    rng = np.random.default_rng(3)
    agent, prior, scores = rng.standard_normal(4) * 5 - 20, rng.standard_normal(4) * 5 - 20, rng.random(4)
    loss, _ = augmented_likelihood_forward(_dev(agent), _dev(prior), _dev(scores), 60.0)
    assert float(loss) == pytest.approx(np.mean((prior + 60.0 * scores - agent) ** 2), rel=1e-12)
    check_kernel(lambda a: augmented_likelihood_forward(a, _dev(prior), _dev(scores), 60.0),
                 augmented_likelihood_backward, {"agent_logp": _dev(agent)})


def test_a_whole_agent_is_gradient_checked_through_the_loss(float64):
    """The agent's every weight, through logits -> sequence log-likelihood -> REINVENT's loss."""
    model = DecoderLM(DecoderLMConfig(vocab_size=9, max_len=8, d_model=8, n_heads=2, n_layers=1, d_ff=12,
                                      pad_id=PAD, bos_id=1, eos_id=2, seed=4))
    ids = np.concatenate([np.ones((3, 1), dtype=np.int64), TARGETS[:, :-1]], axis=1)  # (B, T): BOS + tokens
    prior, scores = _dev([-12.0, -9.0, -15.0]), _dev([0.9, 0.1, 0.5])

    def loss_fn(logits):
        logp, lcache = sequence_log_likelihood_forward(logits, _dev(TARGETS), PAD)
        loss, acache = augmented_likelihood_forward(logp, prior, scores, 5.0)
        return loss, sequence_log_likelihood_backward(augmented_likelihood_backward(1.0, acache), lcache)

    report = check_module(model, _dev(ids), loss_fn, mode="directional", n_directions=2, check_inputs=False)
    assert report.checks, "something was checked"
