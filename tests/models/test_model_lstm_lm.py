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
    (dict(hidden=0), "LSTMLMConfig.hidden must be an integer >= 1, got 0"),
    (dict(eos_id=11), "LSTMLMConfig.eos_id=11 is not a token of a vocabulary of vocab_size=11"),
    (dict(n_layers="2"), "LSTMLMConfig.n_layers must be int, got '2'"),
])
def test_bad_options_are_refused_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        LSTMLMConfig(vocab_size=V, **bad)


def test_greedy_sampling_and_beam_search_decode_it_as_they_decode_a_transformer():
    from minitransformer.generate import beam_search, greedy, sample
    model = _model(seed=5).eval()
    cached, full = greedy(model, batch_size=3, max_len=10), greedy(model, batch_size=3, max_len=10, use_cache=False)
    np.testing.assert_array_equal(cached, full)  # the carried state decodes as the full forward does
    assert np.all(cached[:, 0] == 1)
    drawn = sample(model, batch_size=64, max_len=10, rng=0)
    inside = drawn[:, 1:]
    assert not np.isin(inside, [1]).any(), "BOS never drawn inside a sequence"
    for row in drawn:  # PAD only after EOS
        ended = np.flatnonzero(row == 2)
        tail = row[ended[0] + 1:] if ended.size else row[len(row):]
        assert np.all(tail == PAD) and not np.any(row[:ended[0] if ended.size else len(row)] == PAD)
    assert not np.array_equal(drawn, sample(model, batch_size=64, max_len=10, rng=1)), "seeds differ"
    ids, scores = beam_search(model, batch_size=2, beam_size=3, max_len=10, n_best=2)
    ids_full, scores_full = beam_search(model, batch_size=2, beam_size=3, max_len=10, n_best=2, use_cache=False)
    np.testing.assert_array_equal(ids, ids_full)  # beam search reorders the (h, c) rows as it reorders KV caches
    np.testing.assert_allclose(scores, scores_full, rtol=1e-12)
    assert ids.shape[:2] == (2, 2) and np.all(np.isfinite(scores)) and np.all(scores[:, 0] >= scores[:, 1])


def test_a_checkpoint_rebuilds_it(tmp_path):
    from minitransformer.checkpoint import model_from_checkpoint, save_checkpoint
    from minitransformer.checkpoint.limits import declared_parameters
    model = _model(seed=6).eval()
    path = tmp_path / "lstm.npz"
    save_checkpoint(path, model)
    again, _ = model_from_checkpoint(path)
    assert type(again) is LSTMLM and again.config == model.config
    ids = backend.asarray(BATCH)
    np.testing.assert_array_equal(backend.to_numpy(again(ids)), backend.to_numpy(model(ids)))
    assert declared_parameters("LSTMLM", model.config.to_dict()) >= model.num_parameters()
