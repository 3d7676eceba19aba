"""Encoder, MaskedLM and PropertyModel (shapes, padding, permutation equivariance, mask_tokens
statistics) and Seq2Seq (shared embeddings, decoding, validation, repeatable backward)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward
from minitransformer.models import (
    Encoder, EncoderConfig, MaskedLM, PropertyModel, PropertyModelConfig, Seq2Seq, Seq2SeqConfig, mask_tokens,
)

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SMALL = dict(d_model=8, n_heads=2, d_ff=12, max_len=10)
V = 11


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return backend.to_numpy(a)


def _encoder(**kw):
    opts = dict(SMALL, n_layers=2)
    opts.update(kw)
    return Encoder(EncoderConfig(vocab_size=V, **opts))


def _property_model(**kw):
    opts = dict(SMALL, n_layers=2)
    opts.update(kw)
    return PropertyModel(PropertyModelConfig(vocab_size=V, **opts))


def _seq2seq(src_vocab_size=V, **kw):
    opts = dict(SMALL, n_enc_layers=2, n_dec_layers=2)
    opts.update(kw)
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=src_vocab_size, tgt_vocab_size=V, **opts))


# -- Encoder -----------------------------------------------------------------------
def test_encoder_and_the_models_around_it_shapes_and_errors(any_backend, float64):
    model = _encoder()
    ids = _dev(np.array([[1, 5, 6, 2], [1, 7, 2, 0]]))
    assert model(ids).shape == (2, 4, 8)
    assert MaskedLM(model.config, encoder=model)(ids).shape == (2, 4, V)
    assert _property_model(n_outputs=3)(ids).shape == (2, 3)
    with pytest.raises(ValueError, match="MaskedTokenHead: h must have shape"):
        MaskedLM(model.config).head(ids)
    with pytest.raises(ValueError, match="PooledHead: h must have shape"):
        _property_model().head(_dev(np.ones((2, 4, 3))))
    with pytest.raises(ValueError, match="integer array"):
        model(_dev(np.ones((2, 3))))
    if backend.name() == "numpy":  # values are read only where that is free (check_ids)
        with pytest.raises(ValueError, match=r"token id 11 is out of range"):
            model(_dev(np.array([[1, 11]])))
    with pytest.raises(ValueError, match="exceeds? max_len=10"):
        model(_dev(np.ones((1, 11), dtype=np.int64)))
    with pytest.raises(RuntimeError, match="before forward"):
        _encoder().backward(np.zeros((1, 2, 8)))


def test_encoder_padding_is_invisible(float64):
    """Non-pad positions do not see padded keys: extra padding changes nothing there."""
    model = _encoder(seed=3).eval()
    a = np.array([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0]])
    b = np.concatenate([a, np.zeros((2, 3), dtype=a.dtype)], axis=1)
    ha, hb = _host(model(_dev(a))), _host(model(_dev(b)))
    keep = a != 0
    np.testing.assert_allclose(hb[:, :5][keep], ha[keep], rtol=1e-10, atol=1e-12)


@SETTINGS
@given(B=st.integers(1, 3), T=st.integers(1, 6), H=st.integers(1, 3), Dh=st.integers(1, 3),
       norm=st.sampled_from(["pre", "post"]), seed=st.integers(0, 2**16))
def test_encoder_without_positions_is_permutation_equivariant(any_backend, float64, B, T, H, Dh,
                                                               norm, seed):
    """With the position code zeroed the whole encoder is equivariant to permutations."""
    model = Encoder(EncoderConfig(vocab_size=V, max_len=6, d_model=H * Dh, n_heads=H, d_ff=5,
                                  n_layers=2, norm=norm, seed=seed % 9))
    model.embed.pos.weight.data = model.embed.pos.weight.data * 0.0
    g = np.random.default_rng(seed)
    ids = g.integers(1, V, size=(B, T))
    perm = g.permutation(T)
    h = _host(model(_dev(ids)))
    hp = _host(model(_dev(ids[:, perm])))
    np.testing.assert_allclose(hp, h[:, perm], rtol=1e-9, atol=1e-10)


def test_encoder_backward_twice_identical_and_accumulates(float64):
    model = _property_model(n_outputs=2, tie_embeddings=True, seed=1)
    ids = _dev(np.array([[1, 5, 6, 2], [1, 7, 2, 0]]))
    model(ids)
    dy = _dev(np.random.default_rng(0).standard_normal((2, 2)))
    model.backward(dy)
    first = {n: _host(p.grad).copy() for n, p in model.named_parameters()}
    model.zero_grad()
    model.backward(dy)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(_host(p.grad), first[n], err_msg=n)
    model.backward(dy)
    for n, p in model.named_parameters():
        np.testing.assert_allclose(_host(p.grad), 2 * first[n], rtol=1e-13, atol=1e-16, err_msg=n)


@pytest.mark.parametrize("option", [None, "emb_dropout", "attn_dropout", "resid_dropout", "ff_dropout"])
def test_encoder_dropout_options(float64, option):
    model = _encoder(seed=2, **({} if option is None else {option: 0.3}))
    ids = _dev(np.array([[1, 5, 6, 2], [1, 7, 2, 0]]))
    ev = _host(model.eval()(ids))
    tr = _host(model.train()(ids))
    assert np.array_equal(tr, ev) == (option is None)


def test_names_and_tying_of_the_models_around_an_encoder():
    body = [n for n, _ in _encoder().named_parameters()]
    tied = [n for n, _ in MaskedLM(EncoderConfig(vocab_size=V, tie_embeddings=True, **SMALL)).named_parameters()]
    untied = [n for n, _ in MaskedLM(EncoderConfig(vocab_size=V, tie_embeddings=False, **SMALL)).named_parameters()]
    assert body[0] == "embed.tok.weight" and body[-2:] == ["ln_f.weight", "ln_f.bias"]
    assert tied.count("encoder.embed.tok.weight") == 1 and not any(n.startswith("head.") for n in tied)
    assert untied[-2:] == ["head.proj.linear.weight", "head.proj.linear.bias"]
    pooled = [n for n, _ in _property_model(n_outputs=2, head_hidden=3).named_parameters()]
    assert pooled[-4:] == ["head.hidden.weight", "head.hidden.bias", "head.out.weight", "head.out.bias"]


# -- mask_tokens ---------------------------------------------------------------------
def test_mask_tokens_statistics():
    V_, mask_id, special = 40, 3, (0, 1, 2)
    g = np.random.default_rng(0)
    ids = g.integers(4, V_, size=(400, 50))
    ids[:, 0] = 1  # BOS
    ids[:, -5:] = 0  # padding
    ids[::7, 10] = 2  # some EOS
    ids[::5, 20] = mask_id  # a MASK already in the input is never selected either
    corrupted, targets = mask_tokens(ids, mask_id, V_, np.random.default_rng(123), p=0.15,
                                     special_ids=special, ignore_index=-100)
    assert corrupted.dtype == np.int64 and targets.dtype == np.int64
    assert corrupted.shape == targets.shape == ids.shape
    is_special = np.isin(ids, list(special) + [mask_id])
    selected = targets != -100
    # special ids are never selected, and stay as they are
    assert not np.any(selected & is_special)
    np.testing.assert_array_equal(corrupted[is_special], ids[is_special])
    # targets: the original id where selected, ignore_index elsewhere; nothing else changed
    np.testing.assert_array_equal(targets[selected], ids[selected])
    np.testing.assert_array_equal(corrupted[~selected], ids[~selected])
    # about p of the eligible tokens are selected (n ~ 17000: 4 sigma is ~0.011)
    n_eligible = int((~is_special).sum())
    frac = selected.sum() / n_eligible
    assert abs(frac - 0.15) < 4 * np.sqrt(0.15 * 0.85 / n_eligible), frac
    # 80 / 10 / 10 among the selected
    sel_c, sel_o = corrupted[selected], ids[selected]
    n = sel_c.size
    masked = sel_c == mask_id
    kept = sel_c == sel_o
    randomised = ~masked & ~kept
    tol = 4 * np.sqrt(0.1 * 0.9 / n)
    assert abs(masked.mean() - 0.8) < 4 * np.sqrt(0.8 * 0.2 / n), masked.mean()
    n_normal = V_ - 4
    # a random replacement equals the original with probability 1/n_normal
    assert abs(kept.mean() - (0.1 + 0.1 / n_normal)) < tol, kept.mean()
    assert abs(randomised.mean() - 0.1 * (1 - 1 / n_normal)) < tol, randomised.mean()
    # random replacements are ordinary tokens, never special or MASK
    assert np.all(sel_c[randomised] >= 4) and np.all(sel_c[randomised] < V_)


def test_mask_tokens_is_reproducible_and_respects_p():
    ids = np.random.default_rng(1).integers(3, 20, size=(30, 30))
    a = mask_tokens(ids, 3, 20, np.random.default_rng(5))
    b = mask_tokens(ids, 3, 20, np.random.default_rng(5))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = mask_tokens(ids, 3, 20, np.random.default_rng(6))
    assert not np.array_equal(a[1], c[1])
    none_c, none_t = mask_tokens(ids, 3, 20, np.random.default_rng(5), p=0.0)
    np.testing.assert_array_equal(none_c, ids)
    assert np.all(none_t == -100)
    _, all_t = mask_tokens(ids, 3, 20, np.random.default_rng(5), p=1.0)
    eligible = ~np.isin(ids, [0, 1, 2, 3])
    np.testing.assert_array_equal(all_t != -100, eligible)
    # the input is not modified
    np.testing.assert_array_equal(ids, np.random.default_rng(1).integers(3, 20, size=(30, 30)))


# -- Seq2Seq -----------------------------------------------------------------------
SRC = np.array([[1, 5, 7, 3, 2], [1, 4, 2, 0, 0]])
TGT = np.array([[1, 6, 8, 2, 0, 0], [1, 9, 3, 10, 4, 2]])


def test_seq2seq_shared_embeddings_and_names():
    shared = _seq2seq(share_embeddings=True)
    assert shared.tgt_embed.tok.weight is shared.src_embed.tok.weight
    names = [n for n, _ in shared.named_parameters()]
    assert names.count("src_embed.tok.weight") == 1 and "tgt_embed.tok.weight" not in names
    assert "head.linear.weight" in names
    both = _seq2seq(share_embeddings=True, tie_embeddings=True)
    names_both = [n for n, _ in both.named_parameters()]
    assert names_both == [n for n in names if not n.startswith("head.")]
    assert both.head._tied.weight is both.src_embed.tok.weight
    plain = [n for n, _ in _seq2seq().named_parameters()]
    assert "tgt_embed.tok.weight" in plain
    assert "dec_blocks.1.cross.qkv.weight" in plain and "enc_blocks.0.attn.proj.bias" in plain
    assert not any("cross" in n for n in plain if n.startswith("enc_blocks"))
    with pytest.raises(ValueError, match="share_embeddings needs one vocabulary"):
        Seq2SeqConfig(src_vocab_size=7, tgt_vocab_size=V, share_embeddings=True)


def test_seq2seq_input_errors(any_backend):
    model = _seq2seq()
    src, tgt = _dev(SRC), _dev(TGT)
    with pytest.raises(ValueError, match=r"src has 2 rows but tgt_in has 1"):
        model(src, tgt[:1])
    with pytest.raises(ValueError, match="Seq2Seq target: token ids must be an integer array"):
        model(src, _dev(TGT.astype(np.float64)))
    with pytest.raises(ValueError, match="Seq2Seq source: token ids must be an integer array"):
        model(_dev(SRC.astype(np.float32)), tgt)
    if backend.name() == "numpy":  # values are read only where that is free (check_ids)
        with pytest.raises(ValueError, match=r"Seq2Seq source: token id 11 is out of range"):
            model(_dev(np.array([[1, 11], [1, 2]])), tgt)
    with pytest.raises(ValueError, match="exceeds? max_len=10"):
        model(_dev(np.ones((2, 11), dtype=np.int64)), tgt)
    with pytest.raises(ValueError, match="exceeds? max_len=10"):
        model(src, _dev(np.ones((2, 11), dtype=np.int64)))
    with pytest.raises(RuntimeError, match=r"Seq2Seq\.backward\(\) was called before forward"):
        _seq2seq().backward(np.zeros((1, 2, V)))


@pytest.mark.parametrize("share,tie", [(False, False), (True, True)])
def test_seq2seq_backward_twice_identical_and_accumulates(any_backend, float64, share, tie):
    model = _seq2seq(share_embeddings=share, tie_embeddings=tie, seed=2)
    src, tgt = _dev(SRC), _dev(TGT)
    _, cache = cross_entropy_forward(model(src, tgt[:, :-1]), tgt[:, 1:], ignore_index=0,
                                     label_smoothing=0.1)
    d = cross_entropy_backward(1.0, cache)
    model.backward(d)
    first = {n: _host(p.grad).copy() for n, p in model.named_parameters()}
    model.zero_grad()
    model.backward(d)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(_host(p.grad), first[n], err_msg=n)
    model.backward(d)
    for n, p in model.named_parameters():
        np.testing.assert_allclose(_host(p.grad), 2 * first[n], rtol=1e-13, atol=1e-16, err_msg=n)


@pytest.mark.parametrize("opts", [
    dict(), dict(pos="relative", relative_max_distance=2),
    dict(pos="relative", relative_bias="alibi"), dict(pos="learned", relative_bias="learned"),
    dict(pointer=True, share_embeddings=True),
], ids=["sin", "relative-learned", "relative-alibi", "learned-beside-relative", "pointer"])
def test_seq2seq_causal_in_target_and_step_matches_forward(any_backend, float64, opts):
    model = _seq2seq(seed=4, d_head=8, **opts).eval()
    src = _dev(SRC)
    tgt = TGT[:, :5].copy()
    tgt[0, 4] = 5  # no padding in the target prefix
    tgt[0, 3] = 6
    full = _host(model(src, _dev(tgt)))
    changed = tgt.copy()
    changed[:, 3:] = 9
    np.testing.assert_allclose(_host(model(src, _dev(changed)))[:, :3], full[:, :3], rtol=1e-12, atol=1e-12)
    state = model.init_state(src)
    outs = [_host(model.step(_dev(tgt[:, :2]), state))]
    outs += [_host(model.step(_dev(tgt[:, t:t + 1]), state)) for t in (2, 3, 4)]
    np.testing.assert_allclose(np.stack(outs, axis=1), full[:, 1:], rtol=1e-10, atol=1e-12)
    model.reorder_state(state, _dev(np.array([1, 1])))
    assert state["memory"].shape[0] == 2
    nxt = _host(model.step(_dev(np.array([[3], [4]])), state))
    ref_tgt = np.concatenate([tgt[[1, 1]], [[3], [4]]], axis=1)
    ref = _host(model(_dev(SRC[[1, 1]]), _dev(ref_tgt)))[:, -1]
    np.testing.assert_allclose(nxt, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("option", [None, "emb_dropout", "attn_dropout", "resid_dropout", "ff_dropout"])
def test_seq2seq_dropout_options(float64, option):
    model = _seq2seq(seed=2, **({} if option is None else {option: 0.3}))
    src, tgt = _dev(SRC), _dev(TGT)
    ev = _host(model.eval()(src, tgt))
    tr = _host(model.train()(src, tgt))
    assert np.array_equal(tr, ev) == (option is None)


def test_a_pointer_model_gives_log_probabilities_and_needs_one_vocabulary(float64):
    model = _seq2seq(seed=3, pointer=True).eval()
    out = _host(model(_dev(SRC), _dev(TGT)))  # (B, T, V) log p
    np.testing.assert_allclose(np.exp(out).sum(axis=-1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="pointer needs one vocabulary"):
        _seq2seq(src_vocab_size=V - 2, pointer=True)
