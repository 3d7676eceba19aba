"""LSTMLM, the recurrent baseline: whole-model gradient checks in float64 on a padded batch
(both kernel sets), an LSTM layer's gradients accumulating, decoding by carried state equal
to the full forward, and its config refusing bad values in one line."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward
from minitransformer.gradcheck import check_module
from minitransformer.models.lstm_lm import LSTMLM, LSTMLMConfig
from minitransformer.nn.lstm import LSTM

V, PAD = 11, 0
BATCH = np.array([[1, 5, 7, 3, 9, 2],  # right-padded, BOS = 1 first: row 1 ends early, row 2 earlier
                  [1, 4, 4, 2, 0, 0],
                  [1, 10, 2, 0, 0, 0]])


def _model(seed=0, **kw):
    return LSTMLM(LSTMLMConfig(vocab_size=V, d_model=5, hidden=6, n_layers=2, max_len=10, seed=seed, **kw))


def test_whole_model_gradients_with_padding(float64):
    model = _model()
    ids = backend.asarray(BATCH)
    inputs, targets = ids[:, :-1], ids[:, 1:]

    def loss_fn(logits):
        loss, cache = cross_entropy_forward(logits, targets, ignore_index=PAD, label_smoothing=0.1)
        return loss, cross_entropy_backward(1.0, cache)
    report = check_module(model, inputs, loss_fn, mode="directional", n_directions=2)
    names = {c.name for c in report.checks}
    assert {"embed.weight", "layers.0.Wx", "layers.1.Wh", "layers.1.b", "head.weight"} <= names, names


def test_an_lstm_layer_accumulates_and_checks(float64):
    layer = LSTM(4, 3, rng=0)
    x = backend.asarray(np.random.default_rng(0).standard_normal((2, 5, 4)))
    mask = backend.asarray(np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=bool))
    check_module(layer, x, kwargs={"mask": mask})  # elementwise; checks that .grad doubles on a second backward


def test_decoding_by_carried_state_equals_the_full_forward(float64):
    model = _model(seed=3).eval()
    ids = backend.asarray(BATCH[:1])  # (1, 6) one unpadded row
    full = backend.to_numpy(model(ids))  # (1, 6, V)
    for chunks in ([1] * 6, [2, 1, 3], [6]):
        state, t = model.init_state(), 0
        for n in chunks:
            logits = backend.to_numpy(model.step(ids[:, t:t + n], state))  # (1, V)
            t += n
            np.testing.assert_allclose(logits, full[:, t - 1], rtol=1e-12, atol=1e-14,
                                       err_msg=f"chunks {chunks}: position {t - 1}")


def test_a_padded_row_keeps_its_state_while_decoding(float64):
    model = _model(seed=4).eval()
    state = model.init_state()
    model.step(backend.asarray(np.array([[1, 5], [1, 6]])), state)
    before = [backend.to_numpy(h).copy() for h, _ in state["states"]]
    model.step(backend.asarray(np.array([[7], [PAD]])), state)  # row 1 has finished: PAD
    for layer, (h, _) in enumerate(state["states"]):
        np.testing.assert_array_equal(backend.to_numpy(h)[1], before[layer][1])
        assert not np.array_equal(backend.to_numpy(h)[0], before[layer][0])


@pytest.mark.parametrize("bad, message", [
    (dict(hidden=0), "LSTMLMConfig.hidden must be an int >= 1, got 0"),
    (dict(eos_id=11), "LSTMLMConfig.eos_id must be a token id in 0..10, got 11"),
])
def test_bad_options_are_refused_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        LSTMLMConfig(vocab_size=V, **bad)
