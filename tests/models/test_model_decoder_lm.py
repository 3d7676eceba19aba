"""DecoderLM: log_prob, causality (property), input validation, the reference
configuration's size, dropout switches, repeatable backward, KV-cached decoding
(with absolute and relative positions)."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward
from minitransformer.models import DecoderLM, DecoderLMConfig

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SMALL = dict(d_model=8, n_heads=2, d_ff=12, max_len=10, n_layers=2)
V = 11
BATCH = np.array([[1, 5, 7, 3, 9, 2],
                  [1, 4, 4, 2, 0, 0],
                  [1, 10, 2, 0, 0, 0]])


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return backend.to_numpy(a)


def _model(**kw):
    opts = dict(SMALL)
    opts.update(kw)
    return DecoderLM(DecoderLMConfig(vocab_size=V, **opts))


def _log_softmax_host(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# -- log_prob ----------------------------------------------------------------------
@pytest.mark.parametrize("tie", [False, True])
def test_log_prob_equals_sum_of_token_log_softmax(any_backend, float64, tie):
    model = _model(tie_embeddings=tie, seed=4).eval()
    ids = _dev(BATCH)
    lp = _host(model.log_prob(ids))
    assert lp.shape == (3,)
    logits = _host(model(ids[:, :-1]))  # (B, T-1, V)
    logp = _log_softmax_host(logits)
    expected = np.zeros(3)
    for b in range(3):
        for t in range(BATCH.shape[1] - 1):
            target = BATCH[b, t + 1]
            if target != 0:  # padding targets are not counted; EOS (2) is
                expected[b] += logp[b, t, target]
    np.testing.assert_allclose(lp, expected, rtol=1e-12, atol=1e-12)
    assert np.all(lp < 0)


def test_log_prob_ignores_what_follows_the_padding(float64):
    """Padding keys are masked and padding targets skipped: the pad positions' content
    cannot change a sequence's log-probability."""
    model = _model(seed=2).eval()
    a = BATCH.copy()
    lp = _host(model.log_prob(_dev(a)))
    # a longer padded tail gives the same numbers (max_len permitting)
    b = np.concatenate([a, np.zeros((3, 2), dtype=a.dtype)], axis=1)
    np.testing.assert_allclose(_host(model.log_prob(_dev(b))), lp, rtol=1e-10, atol=1e-12)


def test_log_prob_matches_kv_cached_decoding(float64):
    model = _model(seed=6, tie_embeddings=True).eval()
    ids = BATCH[:1]  # no padding
    lp = float(_host(model.log_prob(_dev(ids)))[0])
    state = model.init_state()
    total = 0.0
    for t in range(ids.shape[1] - 1):
        logits = _host(model.step(_dev(ids[:, t:t + 1]), state))[0]
        total += _log_softmax_host(logits)[ids[0, t + 1]]
    assert state["pos"] == ids.shape[1] - 1
    assert math.isclose(lp, total, rel_tol=1e-10)


@pytest.mark.parametrize("norm,pos", [("pre", "learned"), ("post", "sinusoidal"), ("pre", "relative")])
def test_step_matches_forward(any_backend, float64, norm, pos):
    model = _model(norm=norm, pos=pos, d_head=8, seed=1).eval()
    ids = _dev(BATCH[:, :5] % 9 + 1)  # no padding
    full = _host(model(ids))
    state = model.init_state()
    first = _host(model.step(ids[:, :3], state))  # a prompt of 3, then one token at a time
    np.testing.assert_allclose(first, full[:, 2], rtol=1e-10, atol=1e-12)
    for t in (3, 4):
        np.testing.assert_allclose(_host(model.step(ids[:, t:t + 1], state)), full[:, t],
                                   rtol=1e-10, atol=1e-12)
    # beam-style reorder: row 2 twice, then continue
    model.reorder_state(state, _dev(np.array([2, 2, 0])))
    nxt = _host(model.step(_dev(np.array([[3], [4], [5]])), state))
    ref = _host(model(_dev(np.concatenate([_host(ids)[[2, 2, 0]], [[3], [4], [5]]], axis=1))))[:, -1]
    np.testing.assert_allclose(nxt, ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="max_len"):
        model.step(_dev(np.ones((3, 5), dtype=np.int64)), state)


@pytest.mark.parametrize("pos,relative_bias,norm", [
    ("relative", "learned", "pre"), ("relative", "alibi", "post"),
    ("learned", "learned", "pre"), ("sinusoidal", "alibi", "pre"),
], ids=["relative-learned", "relative-alibi", "learned-beside-relative", "sin-beside-alibi"])
def test_cached_decode_with_relative_positions_equals_full_forward(any_backend, float64, pos,
                                                                   relative_bias, norm):
    """Token by token from the first position, past max_distance = 2 (the clipped
    buckets): the cached step's logits equal the full forward's at every position."""
    model = _model(norm=norm, pos=pos, relative_bias=relative_bias, relative_max_distance=2,
                   d_head=3, seed=5).eval()
    g = np.random.default_rng(5)
    if relative_bias == "learned":  # a table far from zero, so the bias matters
        for block in model.blocks:
            table = block.attn.position_bias.table
            table.data = _dev(g.standard_normal(table.shape))
    ids = _dev(np.concatenate([np.ones((2, 1), dtype=np.int64), g.integers(3, V, size=(2, 8))], axis=1))
    full = _host(model(ids))  # (2, 9, V)
    state = model.init_state()
    steps = [_host(model.step(ids[:, t:t + 1], state)) for t in range(ids.shape[1])]
    np.testing.assert_allclose(np.stack(steps, axis=1), full, rtol=1e-10, atol=1e-12)
    assert state["pos"] == 9


# -- causality ---------------------------------------------------------------------
@SETTINGS
@given(B=st.integers(1, 3), T=st.integers(2, 8), H=st.integers(1, 3), Dh=st.integers(1, 3),
       norm=st.sampled_from(["pre", "post"]), tie=st.booleans(), seed=st.integers(0, 2**16),
       cut=st.integers(0, 7))
def test_future_tokens_never_change_earlier_logits(any_backend, float64, B, T, H, Dh, norm, tie,
                                                   seed, cut):
    cut = cut % (T - 1)
    model = DecoderLM(DecoderLMConfig(vocab_size=V, max_len=8, d_model=H * Dh, n_heads=H, d_ff=5,
                                      n_layers=2, norm=norm, tie_embeddings=tie, seed=seed % 13))
    g = np.random.default_rng(seed)
    ids = g.integers(1, V, size=(B, T))
    ids2 = ids.copy()
    ids2[:, cut + 1:] = g.integers(0, V, size=(B, T - cut - 1))  # may include padding
    a = _host(model(_dev(ids)))
    b = _host(model(_dev(ids2)))
    np.testing.assert_allclose(b[:, :cut + 1], a[:, :cut + 1], rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(b))


# -- validation --------------------------------------------------------------------
def test_input_errors(any_backend):
    model = _model()
    with pytest.raises(ValueError, match="integer array, got dtype float"):
        model(_dev(np.array([[1.0, 2.0]])))
    if backend.name() == "numpy":  # values are read only where that is free (check_ids)
        with pytest.raises(ValueError, match=r"token id 11 is out of range .*0\.\.10"):
            model(_dev(np.array([[1, 11]])))
        with pytest.raises(ValueError, match=r"token id -1 is out of range"):
            model(_dev(np.array([[1, -1]])))
    with pytest.raises(ValueError, match="sequence length 11 exceeds max_len=10"):
        model(_dev(np.ones((1, 11), dtype=np.int64)))
    with pytest.raises(ValueError, match=r"ids must have shape \(B, T\), got \(4,\)"):
        model(_dev(np.ones(4, dtype=np.int64)))
    with pytest.raises(RuntimeError, match=r"DecoderLM\.backward\(\) was called before forward"):
        _model().backward(np.zeros((1, 2, V)))


def test_config_validation():
    with pytest.raises(ValueError, match="not divisible"):
        DecoderLMConfig(vocab_size=V, d_model=8, n_heads=3)
    DecoderLMConfig(vocab_size=V, d_model=8, n_heads=3, d_head=4)  # fine with d_head
    with pytest.raises(ValueError, match="norm must be one of"):
        DecoderLMConfig(vocab_size=V, norm="middle")
    with pytest.raises(ValueError, match="pos must be one of"):
        DecoderLMConfig(vocab_size=V, pos="rotary")
    with pytest.raises(ValueError, match="activation must be one of"):
        DecoderLMConfig(vocab_size=V, activation="tanh")
    with pytest.raises(ValueError, match=r"attn_dropout must be in \[0, 1\)"):
        DecoderLMConfig(vocab_size=V, attn_dropout=1.0)
    assert DecoderLMConfig(vocab_size=V, norm="pre").final_norm is True
    assert DecoderLMConfig(vocab_size=V, norm="post").final_norm is False


# -- the reference configuration -------------------------------------------------------
def _expected_tomczak_count(V, max_len=101, D=64, H=4, dh=64, L=10, F=256):
    inner = H * dh
    block = (D * 3 * inner + 3 * inner) + (inner * D + D) + 2 * D + (D * F + F) + (F * D + D) + 2 * D
    return V * D + max_len * D + L * block + (D * V + V)


def test_tomczak_config_builds_about_one_million_weights():
    cfg = DecoderLMConfig.tomczak(vocab_size=112)
    model = DecoderLM(cfg)
    n = model.num_parameters()
    assert n == _expected_tomczak_count(112) == 1_018_032
    assert 0.95e6 < n < 1.05e6
    assert len(model.blocks) == 10 and model.ln_f is None and model.head.linear is not None
    blk = model.blocks[0]
    assert blk.norm == "post" and blk.attn.d_head == 64 and blk.attn.n_heads == 4
    assert blk.attn.qkv.weight.shape == (64, 768) and blk.attn.proj.weight.shape == (256, 64)
    assert model.embed.drop.p == 0.1 and blk.drop1.p == 0.0 and blk.ff.drop.p == 0.0
    assert blk.attn.attn_dropout == 0.0
    assert cfg.to_dict()["max_len"] == 101
    assert DecoderLMConfig.tomczak(112, n_layers=2).n_layers == 2


# -- dropout switches --------------------------------------------------------------
@pytest.mark.parametrize("option", [None, "emb_dropout", "attn_dropout", "resid_dropout", "ff_dropout"])
def test_each_dropout_option_takes_effect(any_backend, float64, option):
    kw = {} if option is None else {option: 0.3}
    model = _model(**kw, seed=3)
    ids = _dev(BATCH)
    model.eval()
    ev = _host(model(ids))
    np.testing.assert_array_equal(_host(model(ids)), ev)
    model.train()
    tr = _host(model(ids))
    if option is None:
        np.testing.assert_array_equal(tr, ev)
    else:
        assert not np.allclose(tr, ev), f"{option}=0.3 changed nothing in training mode"
        model.eval()
        np.testing.assert_array_equal(_host(model(ids)), ev)


def test_dropout_layers_share_the_model_stream():
    model = _model(emb_dropout=0.1, resid_dropout=0.1, attn_dropout=0.1, ff_dropout=0.1)
    rngs = {id(m.rng) for m in model.modules() if hasattr(m, "rng")}
    assert rngs == {id(model.rng)}


def test_train_eval_reach_every_module():
    model = _model(emb_dropout=0.1, tie_embeddings=True)
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


# -- gradients: repeatable, accumulating ------------------------------------------------
@pytest.mark.parametrize("tie", [False, True])
def test_backward_twice_identical_and_accumulates(any_backend, float64, tie):
    model = _model(tie_embeddings=tie, seed=5)
    ids = _dev(BATCH)
    loss, cache = cross_entropy_forward(model(ids[:, :-1]), ids[:, 1:], ignore_index=0,
                                        label_smoothing=0.1)
    dlogits = cross_entropy_backward(1.0, cache)
    d_before = _host(dlogits).copy()
    assert model.backward(dlogits) is None
    first = {n: _host(p.grad).copy() for n, p in model.named_parameters()}
    assert all(np.any(g != 0) for g in first.values())
    model.zero_grad()
    model.backward(dlogits)
    np.testing.assert_array_equal(_host(dlogits), d_before)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(_host(p.grad), first[n], err_msg=n)
    model.backward(dlogits)
    for n, p in model.named_parameters():
        np.testing.assert_allclose(_host(p.grad), 2 * first[n], rtol=1e-13, atol=1e-16, err_msg=n)


# -- names and state -----------------------------------------------------------------
def test_parameter_names_and_tying():
    untied = [n for n, _ in _model().named_parameters()]
    assert untied[:2] == ["embed.tok.weight", "embed.pos.weight"]
    assert "blocks.1.attn.qkv.weight" in untied and "blocks.0.ff.fc2.bias" in untied
    assert untied[-4:] == ["ln_f.weight", "ln_f.bias", "head.linear.weight", "head.linear.bias"]
    assert not any("cross" in n for n in untied)
    tied_model = _model(tie_embeddings=True)
    tied = [n for n, _ in tied_model.named_parameters()]
    assert tied == [n for n in untied if not n.startswith("head.")]
    assert tied_model.num_parameters() == _model().num_parameters() - (8 * V + V)
    sin = [n for n, _ in _model(pos="sinusoidal").named_parameters()]
    assert "embed.pos.weight" not in sin


def test_state_dict_round_trip_between_models(any_backend):
    a, b = _model(seed=1, tie_embeddings=True), _model(seed=2, tie_embeddings=True)
    sd = a.state_dict()
    assert all(type(v) is np.ndarray for v in sd.values())
    b.load_state_dict(sd)
    ids = _dev(BATCH)
    np.testing.assert_array_equal(_host(a.eval()(ids)), _host(b.eval()(ids)))
    # the tied head reads the freshly loaded table
    assert b.head._tied.weight is b.embed.tok.weight
    with pytest.raises(ValueError, match="unexpected: head.linear.bias, head.linear.weight"):
        b.load_state_dict(_model().state_dict())
