"""Whole-model gradient checks (float64, tiny models) through the full path, loss
included: DecoderLM, Encoder, MaskedLM, PropertyModel and Seq2Seq with tied/untied outputs,
pre/post-LN, learned/sinusoidal/relative positions (learned and ALiBi biases, alone and beside
absolute positions), padded batches, wide heads, shared embeddings; each head alone (the
masked-token and the pooled head). Plus explicit proof that a tied matrix gets *both* gradients."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward
from minitransformer.gradcheck import GradcheckError, check_module, numerical_grad, relative_error
from minitransformer.models import (
    DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, MaskedLM, MaskedTokenHead, PooledHead, PropertyModel,
    PropertyModelConfig, Seq2Seq, Seq2SeqConfig,
)

SMALL = dict(d_model=8, n_heads=2, d_ff=12, max_len=10)
V = 11
PAD = 0
IGNORE = -100


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return backend.to_numpy(a)


def _how():
    """Per-tensor directional checks under NumPy. The strict backend runs the very same
    NumPy arithmetic (it only refuses host conversions), so there one joint direction
    set over all parameters proves the code path at a fraction of the cost."""
    if backend.name() == "numpy":
        return dict(mode="directional", n_directions=2)
    return dict(mode="directional", n_directions=3, joint=True)


def _checked_names(report):
    names = set()
    for c in report.checks:
        if c.name.startswith("joint("):
            names |= set(c.name[len("joint("):-1].split(", "))
        else:
            names.add(c.name)
    return names


def _ce_loss(targets, ignore_index=PAD, smoothing=0.1):
    """loss_fn for check_module: smoothed cross-entropy (mean over kept rows) and its gradient."""
    def loss_fn(logits):
        loss, cache = cross_entropy_forward(logits, targets, ignore_index=ignore_index,
                                            label_smoothing=smoothing)
        return loss, cross_entropy_backward(1.0, cache)
    return loss_fn


def _perturb(model, seed=0, scale=0.1):
    """Move LayerNorm gains/biases and zero biases off their initial values (so every
    parameter's gradient is generic), keeping the model well conditioned."""
    g = np.random.default_rng(seed)
    for _, p in model.named_parameters():
        p.data = p.data + _dev(g.standard_normal(tuple(p.shape)) * scale)


# right-padded batches with BOS = 1 first: row 1 ends early, row 2 is longer
LM_BATCH = np.array([[1, 5, 7, 3, 9, 2],
                     [1, 4, 4, 2, 0, 0],
                     [1, 10, 2, 0, 0, 0]])


def _lm_check(cfg, **kw):
    model = DecoderLM(cfg)
    _perturb(model, seed=cfg.seed)
    ids = _dev(LM_BATCH)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    return model, check_module(model, inputs, _ce_loss(targets), **{**_how(), **kw})


# -- DecoderLM ---------------------------------------------------------------------
@pytest.mark.parametrize("opts", [
    dict(norm="pre", pos="learned", tie_embeddings=False),
    dict(norm="pre", pos="learned", tie_embeddings=True),
    dict(norm="post", pos="sinusoidal", tie_embeddings=True, d_head=8),
    dict(norm="post", pos="learned", tie_embeddings=False, activation="relu", d_head=3),
    dict(norm="pre", pos="sinusoidal", tie_embeddings=False, activation="gelu_tanh", bias=False),
    dict(norm="pre", pos="relative", tie_embeddings=False, relative_max_distance=2),
    dict(norm="post", pos="relative", relative_bias="alibi", tie_embeddings=True, d_head=3),
    dict(norm="pre", pos="learned", relative_bias="learned", relative_max_distance=3, tie_embeddings=True),
    dict(norm="pre", pos="sinusoidal", relative_bias="alibi", tie_embeddings=False),
], ids=["pre-learned-untied", "pre-learned-tied", "post-sin-tied-wide", "post-learned-relu-dh3",
        "pre-sin-nobias", "pre-relative-learned", "post-relative-alibi-dh3",
        "pre-learned-beside-relative", "pre-sin-beside-alibi"])
def test_decoder_lm_gradcheck(any_backend, float64, opts):
    cfg = DecoderLMConfig(vocab_size=V, n_layers=2, seed=3, **SMALL, **opts)
    model, report = _lm_check(cfg)
    names = _checked_names(report)
    assert names == {n for n, _ in model.named_parameters()}
    assert ("head.linear.weight" in names) != opts["tie_embeddings"]
    assert ("blocks.1.attn.position_bias.table" in names) == (cfg.relative_bias == "learned")
    assert ("embed.pos.weight" in names) == (cfg.pos == "learned")


def test_decoder_lm_gradcheck_sum_loss(float64):
    """The other scalarisation: sum(logits * R) over every position, padding included."""
    model = DecoderLM(DecoderLMConfig(vocab_size=V, n_layers=2, tie_embeddings=True, seed=1, **SMALL))
    _perturb(model)
    check_module(model, _dev(LM_BATCH), mode="directional", n_directions=2)


# -- Encoder -----------------------------------------------------------------------
ENC_BATCH = np.array([[1, 5, 7, 3, 9, 2],
                      [1, 4, 4, 6, 2, 0],
                      [1, 10, 2, 0, 0, 0]])
MLM_TARGETS = np.array([[IGNORE, 5, IGNORE, 3, IGNORE, IGNORE],
                        [IGNORE, IGNORE, 4, IGNORE, IGNORE, IGNORE],
                        [IGNORE, 10, IGNORE, IGNORE, IGNORE, IGNORE]])


@pytest.mark.parametrize("opts", [
    dict(norm="pre", pos="learned"),
    dict(norm="post", pos="sinusoidal", d_head=8),
    dict(norm="pre", pos="relative", relative_max_distance=2),
], ids=["pre", "post-sin-wide", "pre-relative"])
def test_encoder_gradcheck(any_backend, float64, opts):
    """The body alone: states (B, T, D) back to every weight."""
    model = Encoder(EncoderConfig(vocab_size=V, n_layers=2, seed=5, **SMALL, **opts))
    _perturb(model, seed=2)
    report = check_module(model, _dev(ENC_BATCH), None, **_how())
    assert _checked_names(report) == {n for n, _ in model.named_parameters()}


@pytest.mark.parametrize("opts", [
    dict(norm="post", pos="sinusoidal", tie_embeddings=True, d_head=8),
    dict(norm="pre", pos="learned", tie_embeddings=False, activation="relu"),
    dict(norm="pre", pos="learned", tie_embeddings=True),
    dict(norm="post", pos="relative", relative_bias="alibi", tie_embeddings=True),
], ids=["post-sin-tied-wide", "pre-untied-relu", "pre-tied", "post-relative-alibi"])
def test_masked_lm_gradcheck(any_backend, float64, opts):
    model = MaskedLM(EncoderConfig(vocab_size=V, n_layers=2, seed=5, **SMALL, **opts))
    _perturb(model, seed=2)
    report = check_module(model, _dev(ENC_BATCH), _ce_loss(_dev(MLM_TARGETS), ignore_index=IGNORE), **_how())
    names = _checked_names(report)
    assert names == {n for n, _ in model.named_parameters()}
    assert ("head.proj.linear.weight" in names) != opts["tie_embeddings"]


@pytest.mark.parametrize("opts", [
    dict(norm="post", pos="learned", n_outputs=3),
    dict(norm="pre", pos="sinusoidal", n_outputs=1, tie_embeddings=False),
    dict(norm="pre", pos="learned", relative_bias="learned", relative_max_distance=2, n_outputs=2),
], ids=["post", "pre-sin", "pre-learned-beside-relative"])
def test_property_model_gradcheck(any_backend, float64, opts):
    model = PropertyModel(PropertyModelConfig(vocab_size=V, n_layers=2, seed=5, **SMALL, **opts))
    _perturb(model, seed=2)
    report = check_module(model, _dev(ENC_BATCH), None, **_how())
    assert _checked_names(report) == {n for n, _ in model.named_parameters()}


def test_property_model_with_features_gradcheck(any_backend, float64):
    """The head reads [h_0; f]: every weight, the features' rows of W_2 included, has the
    gradient of the finite differences (the features are inputs, not weights)."""
    cfg = PropertyModelConfig(vocab_size=V, n_layers=1, seed=5, n_outputs=2, n_features=3, **SMALL)
    model = PropertyModel(cfg)
    _perturb(model, seed=2)
    features = _dev(np.random.default_rng(4).standard_normal((3, 3)))  # (B, F)
    report = check_module(model, _dev(ENC_BATCH), None, kwargs={"features": features}, **_how())
    assert _checked_names(report) == {n for n, _ in model.named_parameters()}
    assert model.head.out.weight.shape == (SMALL["d_model"] + 3, 2)


def test_property_model_with_a_hidden_layer_gradcheck(any_backend, float64):
    """head_hidden > 0: [h_0; f] -> Linear -> GELU -> Linear; every weight checked."""
    cfg = PropertyModelConfig(vocab_size=V, n_layers=1, seed=6, n_outputs=2, n_features=3, head_hidden=5, **SMALL)
    model = PropertyModel(cfg)
    _perturb(model, seed=3)
    features = _dev(np.random.default_rng(5).standard_normal((3, 3)))  # (B, F)
    report = check_module(model, _dev(ENC_BATCH), None, kwargs={"features": features}, **_how())
    assert _checked_names(report) == {n for n, _ in model.named_parameters()}
    assert model.head.hidden.weight.shape == (SMALL["d_model"] + 3, 5) and model.head.out.weight.shape == (5, 2)
    from minitransformer.checkpoint.limits import declared_parameters
    assert declared_parameters("PropertyModel", cfg.to_dict()) >= model.num_parameters()


def _relations(ids, R, seed=0):
    """Random graph relation codes (B, T, T) for a padded batch: what the data pipeline would give
    (the model only reads them)."""
    return _dev(np.random.default_rng(seed).integers(0, R, size=(*ids.shape, ids.shape[1])).astype(np.uint8))


@pytest.mark.parametrize("model_type", ["PropertyModel", "MaskedLM"])
def test_models_with_a_graph_bias_gradcheck(any_backend, float64, model_type):
    """Every block's graph bias table, and every other weight, through the whole model, the
    graph bias beside a learned relative-position bias and the descriptors' features."""
    opts = dict(vocab_size=V, n_layers=2, seed=7, graph_max_distance=3, relative_bias="learned",
                relative_max_distance=2, **SMALL)
    if model_type == "PropertyModel":
        cfg = PropertyModelConfig(n_outputs=2, n_features=3, head_hidden=4, **opts)
        model, loss = PropertyModel(cfg), None
        kwargs = {"features": _dev(np.random.default_rng(4).standard_normal((3, 3)))}
    else:
        cfg = EncoderConfig(**opts)
        model, loss, kwargs = MaskedLM(cfg), _ce_loss(_dev(MLM_TARGETS), ignore_index=IGNORE), {}
    _perturb(model, seed=3)
    R = cfg.graph_relations
    assert R == 15  # the relations of minitransformer.chem.graph clipped at 3 bonds
    report = check_module(model, _dev(ENC_BATCH), loss, kwargs={**kwargs, "relations": _relations(ENC_BATCH, R)},
                          **_how())
    names = _checked_names(report)
    assert names == {n for n, _ in model.named_parameters()}
    assert sum(".graph_bias.table" in n for n in names) == 2
    from minitransformer.checkpoint.limits import declared_parameters
    assert declared_parameters(model_type, cfg.to_dict()) >= model.num_parameters()


def test_an_encoder_with_a_graph_bias_needs_the_relations(float64):
    model = Encoder(EncoderConfig(vocab_size=V, graph_max_distance=2, **SMALL))
    ids = _dev(ENC_BATCH)
    with pytest.raises(ValueError, match="this encoder has a graph bias; give each molecule's relations"):
        model(ids)
    with pytest.raises(ValueError, match=r"relations must have shape \(B, T, T\) = \(3, 6, 6\)"):
        model(ids, _relations(ENC_BATCH[:, :5], 14))
    with pytest.raises(ValueError, match="relations were given, but this encoder has no graph bias"):
        Encoder(EncoderConfig(vocab_size=V, **SMALL))(ids, _relations(ENC_BATCH, 14))
    with pytest.raises(ValueError, match="graph_max_distance must be 0 .no graph bias. or at least 2"):
        EncoderConfig(vocab_size=V, graph_max_distance=1, **SMALL)


# -- the heads alone ---------------------------------------------------------------
@pytest.mark.parametrize("opts", [dict(n_features=0, head_hidden=0), dict(n_features=3, head_hidden=0),
                                  dict(n_features=2, head_hidden=4, activation="relu"),
                                  dict(n_features=0, head_hidden=3, activation="gelu_tanh")],
                         ids=["linear", "features", "features-hidden-relu", "hidden-gelu-tanh"])
def test_pooled_head_gradcheck(any_backend, float64, opts):
    """Element by element: the states' gradient is the head's at position 0 and zero elsewhere."""
    cfg = PropertyModelConfig(vocab_size=V, seed=1, n_outputs=2, **SMALL, **opts)
    head = PooledHead(cfg, backend.RNG(1))
    _perturb(head, seed=1)
    g = np.random.default_rng(2)
    h = _dev(g.standard_normal((3, 4, SMALL["d_model"])))  # (B, T, D)
    kwargs = {"features": _dev(g.standard_normal((3, opts["n_features"])))} if opts["n_features"] else {}
    report = check_module(head, h, None, kwargs=kwargs)
    assert _checked_names(report) >= {n for n, _ in head.named_parameters()}
    head.zero_grad()
    y = head(h, **kwargs)  # (B, K)
    dh = _host(head.backward(_dev(np.ones(tuple(y.shape)))))  # (B, T, D)
    assert np.all(dh[:, 1:] == 0) and np.any(dh[:, 0] != 0)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_masked_token_head_gradcheck(any_backend, float64, tied):
    """Element by element; tied, the embedding's gradient from the head alone is dlogits^T h."""
    from minitransformer.nn.embedding import Embedding
    cfg = EncoderConfig(vocab_size=V, seed=1, **SMALL)
    table = Embedding(V, SMALL["d_model"], rng=backend.RNG(3))
    head = MaskedTokenHead(cfg, backend.RNG(1), tied_to=table if tied else None)
    _perturb(head, seed=1)
    h = _dev(np.random.default_rng(2).standard_normal((2, 3, SMALL["d_model"])))  # (B, T, D)
    check_module(head, h, _ce_loss(_dev(MLM_TARGETS[:2, :3]), ignore_index=IGNORE))
    if tied:
        table.weight.grad = table.weight.grad * 0
        logits = head(h)  # (B, T, V)
        dlogits = _dev(np.random.default_rng(4).standard_normal(tuple(logits.shape)))  # (B, T, V)
        head.backward(dlogits)
        expected = _host(dlogits).reshape(-1, V).T @ _host(h).reshape(-1, SMALL["d_model"])  # (V, D)
        np.testing.assert_allclose(_host(table.weight.grad), expected, rtol=1e-12, atol=1e-12)


def test_a_masked_lm_and_a_property_model_share_one_encoder_and_its_gradients(float64):
    """Pretraining trains the property model's own encoder: the MaskedLM built around it holds the
    same Parameter objects, so what one learns the other starts from."""
    model = PropertyModel(PropertyModelConfig(vocab_size=V, n_layers=1, seed=2, n_outputs=2, **SMALL))
    masked = MaskedLM(model.encoder.config, encoder=model.encoder)
    own = dict(model.named_parameters())
    assert all(p is own[n] for n, p in masked.named_parameters() if n.startswith("encoder."))
    assert masked.head.proj.linear is None and masked.rng is model.rng  # tied to the shared table; one stream
    masked.zero_grad()
    logits = masked(_dev(ENC_BATCH))  # (B, T, V)
    masked.backward(_dev(np.ones(tuple(logits.shape))))
    assert np.any(_host(model.encoder.embed.tok.weight.grad) != 0)
    assert np.all(_host(model.head.out.weight.grad) == 0)
    with pytest.raises(ValueError, match="built with another config"):
        MaskedLM(EncoderConfig(vocab_size=V, n_layers=2, **SMALL), encoder=model.encoder)


def test_the_encoder_has_no_head_argument():
    import inspect
    assert list(inspect.signature(Encoder.forward).parameters) == ["self", "ids", "relations"]  # the graph's only
    assert list(inspect.signature(Encoder.backward).parameters) == ["self", "dh"]
    assert not {"mlm_head", "n_outputs", "n_features", "head_hidden"} & set(EncoderConfig.__dataclass_fields__)
    with pytest.raises(TypeError):
        Encoder(EncoderConfig(vocab_size=V, **SMALL))(_dev(ENC_BATCH), head="mlm")


def test_property_model_features_change_the_output_only_through_their_rows(float64):
    model = PropertyModel(PropertyModelConfig(vocab_size=V, n_layers=1, n_outputs=2, n_features=3, **SMALL))
    f = np.zeros((3, 3))
    base = _host(model(_dev(ENC_BATCH), features=_dev(f)))
    f[:, 1] = 1.0
    moved = _host(model(_dev(ENC_BATCH), features=_dev(f)))
    np.testing.assert_allclose(moved - base, np.broadcast_to(_host(model.head.out.weight.data)[SMALL["d_model"] + 1],
                                                             (3, 2)), rtol=1e-12, atol=1e-12)
    from minitransformer.checkpoint.limits import declared_parameters
    assert declared_parameters("PropertyModel", model.config.to_dict()) >= model.num_parameters()
    with pytest.raises(ValueError, match="reads 3 features per molecule"):
        model(_dev(ENC_BATCH))
    with pytest.raises(ValueError, match="n_features=0"):
        PropertyModel(PropertyModelConfig(vocab_size=V, **SMALL))(_dev(ENC_BATCH), features=_dev(f))
    with pytest.raises(ValueError, match="n_outputs must be an integer >= 1"):
        PropertyModelConfig(vocab_size=V, n_outputs=0, **SMALL)


# -- Seq2Seq -----------------------------------------------------------------------
SRC = np.array([[1, 5, 7, 3, 2],
                [1, 4, 2, 0, 0]])
TGT = np.array([[1, 6, 8, 2, 0, 0],
                [1, 9, 3, 10, 4, 2]])


@pytest.mark.parametrize("opts", [
    dict(norm="pre", pos="sinusoidal"),
    dict(norm="post", pos="learned", share_embeddings=True),
    dict(norm="pre", pos="learned", share_embeddings=True, tie_embeddings=True, d_head=8),
    dict(norm="post", pos="sinusoidal", tie_embeddings=True, activation="relu"),
    dict(norm="pre", pos="learned", src_vocab_size=7, d_head=3),
    dict(norm="pre", pos="relative", relative_max_distance=2),
    dict(norm="post", pos="relative", relative_bias="alibi", share_embeddings=True),
    dict(norm="pre", pos="sinusoidal", relative_bias="learned", relative_max_distance=3, tie_embeddings=True),
    dict(norm="pre", pos="sinusoidal", share_embeddings=True, tie_embeddings=True, pointer=True),
    dict(norm="post", pos="learned", pointer=True),
], ids=["pre-sin", "post-learned-shared", "pre-learned-shared-tied-wide", "post-sin-tied-relu",
        "pre-learned-smallsrc-dh3", "pre-relative", "post-relative-alibi-shared",
        "pre-sin-beside-relative-tied", "pre-sin-shared-tied-pointer", "post-learned-pointer"])
def test_seq2seq_gradcheck(any_backend, float64, opts):
    opts = dict(opts)
    src_v = opts.pop("src_vocab_size", V)
    cfg = Seq2SeqConfig(src_vocab_size=src_v, tgt_vocab_size=V, n_enc_layers=2, n_dec_layers=2,
                        seed=7, **SMALL, **opts)
    model = Seq2Seq(cfg)
    _perturb(model, seed=4)
    src = _dev(np.where(SRC < src_v, SRC, 3))
    tgt = _dev(TGT)
    report = check_module(model, (src, tgt[:, :-1]), _ce_loss(tgt[:, 1:]), **_how())
    names = _checked_names(report)
    assert names == {n for n, _ in model.named_parameters()}
    assert ("tgt_embed.tok.weight" in names) != cfg.share_embeddings
    learned = cfg.relative_bias == "learned"
    assert ("enc_blocks.1.attn.position_bias.table" in names) == learned
    assert ("dec_blocks.1.attn.position_bias.table" in names) == learned
    assert ("pointer.gate.weight" in names) == cfg.pointer


# -- training mode: every dropout active, backward must reuse the forward's masks ---------
class _Rewound:
    """Rewinds the model's one random stream before each forward, so that every forward
    of a training-mode gradient check draws the same dropout masks."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):  # named_parameters, modules, zero_grad, backward ...
        return getattr(self.model, name)

    def forward(self, *args, **kwargs):
        self.model.rng.counter = 0
        return self.model.forward(*args, **kwargs)


DROPOUTS = dict(emb_dropout=0.2, attn_dropout=0.2, resid_dropout=0.2, ff_dropout=0.2)


def test_models_gradcheck_in_training_mode_with_dropout(float64):
    lm = DecoderLM(DecoderLMConfig(vocab_size=V, n_layers=2, tie_embeddings=True, seed=1, **SMALL,
                                   **DROPOUTS))
    ids = _dev(LM_BATCH)
    check_module(_Rewound(lm), ids[:, :-1], _ce_loss(ids[:, 1:]), mode="directional",
                 n_directions=2, eval_mode=False)
    enc = MaskedLM(EncoderConfig(vocab_size=V, n_layers=2, norm="post", seed=2, **SMALL, **DROPOUTS))
    check_module(_Rewound(enc), _dev(ENC_BATCH), _ce_loss(_dev(MLM_TARGETS), ignore_index=IGNORE),
                 mode="directional", n_directions=2, eval_mode=False)
    prop = PropertyModel(PropertyModelConfig(vocab_size=V, n_layers=1, seed=4, n_outputs=2, n_features=2,
                                             head_hidden=3, **SMALL, **DROPOUTS))
    check_module(_Rewound(prop), _dev(ENC_BATCH), None, kwargs={"features": _dev(np.ones((3, 2)))},
                 mode="directional", n_directions=2, eval_mode=False)
    s2s = Seq2Seq(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, n_enc_layers=1, n_dec_layers=2,
                                share_embeddings=True, seed=3, **SMALL, **DROPOUTS))
    src, tgt = _dev(SRC), _dev(TGT)
    check_module(_Rewound(s2s), (src, tgt[:, :-1]), _ce_loss(tgt[:, 1:]), mode="directional",
                 n_directions=2, eval_mode=False)
    # the dropout was really on: two unrewound training forwards differ
    s2s.train()
    assert not np.allclose(_host(s2s(src, tgt)), _host(s2s(src, tgt)))


# -- tied weights get both contributions ---------------------------------------------
def test_tied_embedding_gradient_matches_numerical_and_needs_both_contributions(any_backend, float64):
    cfg = DecoderLMConfig(vocab_size=V, n_layers=2, tie_embeddings=True, seed=11, **SMALL)
    model = DecoderLM(cfg)
    _perturb(model, seed=8)
    model.eval()
    ids = _dev(LM_BATCH)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    loss_fn = _ce_loss(targets)
    E = model.embed.tok.weight
    assert model.head.linear is None and [n for n, _ in model.named_parameters()].count("embed.tok.weight") == 1

    model.zero_grad()
    _, dlogits = loss_fn(model(inputs))
    model.backward(dlogits)
    analytic = _host(E.grad).copy()
    # the projection's contribution, computed independently: logits = h E^T -> dE = dlogits^T h
    h = _host(model.head.cache[0]).reshape(-1, cfg.d_model)  # (N, D), the head's input
    projection_only = _host(dlogits).reshape(-1, V).T @ h  # (V, D)
    lookup_only = analytic - projection_only

    numerical = numerical_grad(lambda: loss_fn(model(inputs))[0], E.data)
    err = relative_error(analytic, numerical)
    assert err.max() < 1e-5, f"tied embedding gradient off by {err.max():.2e}"
    # sanity check of the test itself: either contribution alone is far off
    assert np.abs(projection_only).max() > 1e-3 and np.abs(lookup_only).max() > 1e-3
    assert relative_error(lookup_only, numerical).max() > 1e-2
    assert relative_error(projection_only, numerical).max() > 1e-2
    assert model.embed.tok.weight is E  # and nothing replaced the shared Parameter


def test_whole_model_check_catches_a_missing_tied_contribution(float64, monkeypatch):
    """If the tied output projection forgot to add its gradient into the embedding (or the
    lookup forgot its own), the directional whole-model check fails on embed.tok.weight."""
    from minitransformer.nn.embedding import OutputProjection

    cfg = DecoderLMConfig(vocab_size=V, n_layers=1, tie_embeddings=True, seed=2, **SMALL)

    def forgetful_head(self, dlogits):  # returns dh but drops the dE^T contribution
        from minitransformer.functional import linear_backward
        dh, _, _ = linear_backward(dlogits, self._require_cache())
        return dh

    with monkeypatch.context() as mp:
        mp.setattr(OutputProjection, "backward", forgetful_head)
        with pytest.raises(GradcheckError, match="embed.tok.weight"):
            _lm_check(cfg, params=["embed.tok.weight"], check_accumulation=False)

    model = DecoderLM(cfg)
    _perturb(model)
    model.embed.tok.backward = lambda dout: None  # the lookup's contribution lost instead
    ids = _dev(LM_BATCH)
    with pytest.raises(GradcheckError, match="embed.tok.weight"):
        check_module(model, ids[:, :-1], _ce_loss(ids[:, 1:]), mode="directional",
                     params=["embed.tok.weight"], check_accumulation=False)


def test_seq2seq_shared_tied_table_gets_all_three_contributions(float64):
    """With share_embeddings and tie_embeddings one table feeds the source lookup, the
    target lookup and the output projection; element-wise check of that one table."""
    cfg = Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, n_enc_layers=1, n_dec_layers=1,
                        share_embeddings=True, tie_embeddings=True, pos="learned", seed=3, **SMALL)
    model = Seq2Seq(cfg)
    _perturb(model, seed=6)
    assert model.tgt_embed.tok.weight is model.src_embed.tok.weight
    assert model.head._tied.weight is model.src_embed.tok.weight
    src, tgt = _dev(SRC), _dev(TGT)
    check_module(model, (src, tgt[:, :-1]), _ce_loss(tgt[:, 1:]), params=["src_embed.tok.weight"],
                 mode="elementwise")
