"""RNNSeq2Seq, the attentional LSTM encoder-decoder: whole-model gradient checks in float64 on
padded sources and targets, both attentions, both kernel sets (the encoder's final states
receive the decoder's initial-state gradient); the attention layer's own check; decoding by
carried state equal to the full forward; greedy and beam search decode it."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward
from minitransformer.gradcheck import check_module
from minitransformer.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig
from minitransformer.nn.rnn_attention import EncoderAttention

VS, VT, PAD = 9, 11, 0
SRC = np.array([[3, 4, 5, 6], [7, 8, 0, 0], [5, 0, 0, 0]])  # right-padded sources
TGT = np.array([[1, 5, 7, 3, 2], [1, 4, 2, 0, 0], [1, 10, 9, 2, 0]])  # BOS ... EOS, padded


def _model(attention="additive", seed=0):
    return RNNSeq2Seq(RNNSeq2SeqConfig(VS, VT, d_model=5, hidden=6, n_layers=2, attention=attention, max_len=10,
                                       seed=seed))


@pytest.mark.parametrize("attention", ["additive", "multiplicative"])
def test_whole_model_gradients_with_padding(float64, attention):
    model = _model(attention)
    src, tgt = backend.asarray(SRC), backend.asarray(TGT)
    targets = tgt[:, 1:]

    def loss_fn(logits):
        loss, cache = cross_entropy_forward(logits, targets, ignore_index=PAD)
        return loss, cross_entropy_backward(1.0, cache)
    report = check_module(model, (src, tgt[:, :-1]), loss_fn, mode="directional", n_directions=2)
    names = {c.name for c in report.checks}
    want = {"src_embed.weight", "encoder.0.Wx", "encoder.1.Wh", "decoder.0.Wh", "combine.weight", "head.bias"}
    want |= {"attention.Wq", "attention.Wk", "attention.v"} if attention == "additive" else {"attention.W"}
    assert want <= names, want - names


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
def test_the_attention_layer(float64, kind):
    layer = EncoderAttention(kind, 4, 6, d_attn=5, rng=0)
    g = np.random.default_rng(1)
    s, E = backend.asarray(g.standard_normal((3, 4))), backend.asarray(g.standard_normal((3, 5, 6)))
    mask = backend.asarray(SRC[:, :1].repeat(5, axis=1) >= 0)
    mask[1, 3:] = False
    check_module(layer, (s, E), kwargs={"mask": mask})


def test_decoding_by_carried_state_equals_the_full_forward(float64):
    model = _model("multiplicative", seed=2).eval()
    src, tgt = backend.asarray(SRC), backend.asarray(TGT[:, :4])
    full = backend.to_numpy(model(src, tgt))  # (3, 4, V)
    for chunks in ([1, 1, 1, 1], [2, 2], [4]):
        state, t = model.init_state(src), 0
        for n in chunks:
            logits = backend.to_numpy(model.step(tgt[:, t:t + n], state))
            t += n
            rows = TGT[:, t - 1] != PAD  # a padded position's logits are not part of any loss
            np.testing.assert_allclose(logits[rows], full[rows, t - 1], rtol=1e-12, atol=1e-14,
                                       err_msg=f"chunks {chunks}: position {t - 1}")


def test_greedy_and_beam_search_decode_it():
    from minitransformer.generate import beam_search, greedy
    model = _model(seed=3).eval()
    cached = greedy(model, src=SRC, max_len=8)
    np.testing.assert_array_equal(cached, greedy(model, src=SRC, max_len=8, use_cache=False))
    ids, scores = beam_search(model, src=SRC, beam_size=3, max_len=8, n_best=2)
    ids_full, scores_full = beam_search(model, src=SRC, beam_size=3, max_len=8, n_best=2, use_cache=False)
    np.testing.assert_array_equal(ids, ids_full)
    np.testing.assert_allclose(scores, scores_full, rtol=1e-12)
    assert np.all(np.isfinite(scores)) and np.all(scores[:, 0] >= scores[:, 1])


def test_bad_options_are_refused_in_one_line():
    with pytest.raises(ValueError, match="RNNSeq2SeqConfig.attention must be one of"):
        RNNSeq2SeqConfig(VS, VT, attention="dot")


@pytest.mark.parametrize("attention", ["additive", "multiplicative"])
def test_a_checkpoint_rebuilds_it(tmp_path, attention):
    from minitransformer.checkpoint import model_from_checkpoint, save_checkpoint
    from minitransformer.checkpoint.limits import declared_parameters
    model = _model(attention, seed=4).eval()
    save_checkpoint(tmp_path / "rnn.npz", model)
    again, _ = model_from_checkpoint(tmp_path / "rnn.npz")
    assert type(again) is RNNSeq2Seq and again.config == model.config
    src, tgt = backend.asarray(SRC), backend.asarray(TGT)
    np.testing.assert_array_equal(backend.to_numpy(again(src, tgt)), backend.to_numpy(model(src, tgt)))
    assert declared_parameters("RNNSeq2Seq", model.config.to_dict()) >= model.num_parameters()


def test_the_attention_weights_of_a_forward(float64):
    model = _model("additive", seed=5).eval()
    model(backend.asarray(SRC[:2]), backend.asarray(TGT[:2, :-1]))
    alpha = backend.to_numpy(model.attention_weights())  # (2, 4, 4)
    assert alpha.shape == (2, 4, 4)
    np.testing.assert_allclose(alpha.sum(axis=-1), 1.0, rtol=1e-12)  # every step spends all its weight
    assert np.all(alpha[1][:, SRC[1] == PAD] == 0.0), "nothing on the source's padding"
