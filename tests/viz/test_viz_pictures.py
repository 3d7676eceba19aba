"""Attention maps (minitransformer.viz): read from the caches, exact causal structure,
no effect on training, PNGs for the three model families, clear errors."""
import numpy as np
import pytest

from minitransformer import backend, viz
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward
from minitransformer.models import DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, Seq2Seq, Seq2SeqConfig

TINY = dict(d_model=8, n_heads=2, d_ff=12, max_len=16)
V = 13
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RNG = np.random.default_rng(0)
IDS = np.r_[[1], RNG.integers(3, V, size=6)]  # (7,): BOS first
SRC = RNG.integers(3, V, size=5)  # (5,)


def _dev(a):
    return backend.asarray(np.asarray(a))


def _decoder(n_layers=3, **kw):
    return DecoderLM(DecoderLMConfig(vocab_size=V, n_layers=n_layers, **dict(TINY, **kw)))


def _encoder(n_layers=2, **kw):
    return Encoder(EncoderConfig(vocab_size=V, n_layers=n_layers, **dict(TINY, **kw)))


def _seq2seq(**kw):
    return Seq2Seq(Seq2SeqConfig(V, V, n_enc_layers=2, n_dec_layers=3, **dict(TINY, **kw)))


def _batch(B=2, T=5, low=3):
    ids = RNG.integers(low, V, size=(B, T))  # (B, T)
    ids[:, 0] = 1  # BOS
    return ids


def _tokens(ids):
    return [f"t{i}" for i in ids]


# -- reading the maps --------------------------------------------------------------
def test_maps_have_one_array_per_layer_with_the_right_shape(any_backend):
    dec = _decoder().eval()
    dec.forward(_dev(_batch(2, 5)))
    maps = viz.attention_maps(dec)
    assert len(maps) == 3 and all(isinstance(m, np.ndarray) and m.shape == (2, 2, 5, 5) for m in maps)

    enc = _encoder().eval()
    enc.forward(_dev(_batch(3, 4)))
    assert [m.shape for m in viz.attention_maps(enc)] == [(3, 2, 4, 4)] * 2

    s2s = _seq2seq().eval()
    s2s.forward(_dev(_batch(2, 6)), _dev(_batch(2, 4)))  # S = 6, T = 4
    assert [m.shape for m in viz.attention_maps(s2s)] == [(2, 2, 4, 4)] * 3  # default: decoder
    assert [m.shape for m in viz.attention_maps(s2s, "self", "decoder")] == [(2, 2, 4, 4)] * 3
    assert [m.shape for m in viz.attention_maps(s2s, "self", "encoder")] == [(2, 2, 6, 6)] * 2
    assert [m.shape for m in viz.attention_maps(s2s, "cross")] == [(2, 2, 4, 6)] * 3


def test_decoder_maps_are_causal_and_rows_sum_to_one():
    model = _decoder()
    model.forward(_dev(_batch(2, 7)))
    for m in viz.attention_maps(model):  # (B, H, T, T)
        T = m.shape[-1]
        above = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T): the future
        assert np.all(m[..., above] == 0.0)  # exactly zero, not just small
        assert np.all(m[..., ~above] > 0.0)
        np.testing.assert_allclose(m.sum(axis=-1), 1.0, rtol=1e-5)


def test_maps_are_the_cached_arrays(any_backend):
    model = _seq2seq()
    model.forward(_dev(_batch(2, 6)), _dev(_batch(2, 4)))
    pairs = [("self", "decoder", [b.attn for b in model.dec_blocks]),
             ("self", "encoder", [b.attn for b in model.enc_blocks]),
             ("cross", None, [b.cross for b in model.dec_blocks])]
    for kind, stack, layers in pairs:
        maps = viz.attention_maps(model, kind, stack)
        for m, layer in zip(maps, layers):
            cached = backend.to_numpy(layer.attention_probs)
            np.testing.assert_array_equal(m, cached)
            if any_backend == "numpy":
                assert np.shares_memory(m, layer.attention_probs)  # a view: no copy, no recomputation
            with pytest.raises(ValueError, match="read-only"):
                m[0, 0, 0, 0] = 0.5  # the cache backward will use is protected
    if any_backend == "numpy":
        assert model.dec_blocks[0].attn.attention_probs.flags.writeable  # the cache itself untouched


def _loss_and_backward(model, logits, targets):
    _, cache = cross_entropy_forward(logits, targets)
    model.backward(cross_entropy_backward(1.0, cache))


def _grads(model):
    return {name: backend.to_numpy(p.grad).copy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_reading_maps_between_forward_and_backward_keeps_gradients_bitwise(family, tmp_path):
    drop = dict(attn_dropout=0.2, resid_dropout=0.1, emb_dropout=0.1)  # train mode draws masks
    make = (lambda: _decoder(**drop)) if family == "decoder" else (lambda: _seq2seq(**drop))
    src, tgt = _dev(_batch(3, 6)), _batch(3, 5)
    runs = []
    for read in (False, True):
        model = make().train()
        logits = model.forward(_dev(tgt[:, :-1])) if family == "decoder" else \
            model.forward(src, _dev(tgt[:, :-1]))
        if read:
            for kind, stack in ([("self", None)] if family == "decoder" else
                                [("self", "encoder"), ("self", "decoder"), ("cross", None)]):
                maps = viz.attention_maps(model, kind, stack)
                viz.plot_attention(maps, ["q"] * 4, ["k"] * maps[0].shape[-1], tmp_path / f"{kind}.png",
                                   layers=[0], heads=[1])
        _loss_and_backward(model, logits, _dev(tgt[:, 1:]))
        runs.append(_grads(model))
    plain, read = runs
    assert plain.keys() == read.keys()
    for name in plain:
        np.testing.assert_array_equal(plain[name], read[name], err_msg=name)


# -- the wrappers -----------------------------------------------------------------
def test_wrappers_write_pngs(tmp_path):
    out = viz.plot_decoder_attention(_decoder(), IDS, _tokens(IDS), tmp_path / "dec.png", layers=[0, -1])
    assert out == tmp_path / "dec.png"
    out2 = viz.plot_encoder_attention(_encoder(), IDS, _tokens(IDS), tmp_path / "sub" / "enc.png", heads=0)
    tgt_in = IDS[:4]
    out3 = viz.plot_cross_attention(_seq2seq(), SRC, tgt_in, list("CC(O)"), ["<bos>", "C", "C", "O"],
                                    tmp_path / "cross.png", layers=2, title="randomized -> canonical")
    for path in (out, out2, out3):
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_wrappers_restore_mode_and_caches(tmp_path):
    model = _decoder(attn_dropout=0.2, resid_dropout=0.1)
    model.eval()
    model.blocks[1].train()  # a mixed mode must come back exactly
    before = [m.training for m in model.modules()]
    viz.plot_decoder_attention(model, IDS, _tokens(IDS), tmp_path / "a.png", layers=0)
    assert [m.training for m in model.modules()] == before

    # Between a training forward and its backward: gradients and the RNG stream are unchanged.
    tgt = _batch(2, 6)
    runs = []
    for plot in (False, True):
        model = _decoder(attn_dropout=0.2, resid_dropout=0.1, emb_dropout=0.1).train()
        logits = model.forward(_dev(tgt[:, :-1]))
        if plot:
            viz.plot_decoder_attention(model, IDS, _tokens(IDS), tmp_path / "b.png", layers=0, heads=0)
            assert all(m.training for m in model.modules())
        _loss_and_backward(model, logits, _dev(tgt[:, 1:]))
        runs.append((_grads(model), backend.to_numpy(model.forward(_dev(tgt[:, :-1])))))
    (g0, next0), (g1, next1) = runs
    for name in g0:
        np.testing.assert_array_equal(g0[name], g1[name], err_msg=name)
    np.testing.assert_array_equal(next0, next1)  # the next dropout masks are the same draws

    s2s = _seq2seq().train()
    viz.plot_cross_attention(s2s, SRC, IDS[:3], _tokens(SRC), _tokens(IDS[:3]), tmp_path / "c.png",
                             layers=0, heads=0)
    assert all(m.training for m in s2s.modules())
    enc = _encoder().eval()
    viz.plot_encoder_attention(enc, IDS, _tokens(IDS), tmp_path / "d.png", layers=0, heads=0)
    assert not any(m.training for m in enc.modules())


def test_plot_crops_padding_to_the_given_tokens(tmp_path):
    ids = _batch(2, 6)
    ids[1, 4:] = 0  # sample 1 is 4 real tokens + 2 PAD
    model = _encoder().eval()
    model.forward(_dev(ids))
    maps = viz.attention_maps(model)
    assert np.all(maps[0][1, :, :, 4:] == 0.0)  # padding keys are masked
    toks = _tokens(ids[1, :4])
    path = viz.plot_attention(maps, toks, toks, tmp_path / "crop.png", sample=1, layers=[1], heads=[0])
    assert path.read_bytes()[:8] == PNG_MAGIC


# -- errors -----------------------------------------------------------------------
def test_errors_before_any_forward():
    for model in (_decoder(), _encoder(), _seq2seq()):
        with pytest.raises(RuntimeError, match="run a forward pass first"):
            viz.attention_maps(model)
    with pytest.raises(RuntimeError, match="run a forward pass first"):
        viz.attention_maps(_seq2seq(), "cross")


def test_errors_for_missing_cross_attention_and_bad_choices():
    dec, enc, s2s = _decoder(), _encoder(), _seq2seq()
    dec.forward(_dev(_batch()))
    enc.forward(_dev(_batch()))
    s2s.forward(_dev(_batch()), _dev(_batch()))
    for model in (dec, enc):
        with pytest.raises(ValueError, match="no cross-attention.*kind='self'"):
            viz.attention_maps(model, "cross")
    with pytest.raises(ValueError, match="no cross-attention in its encoder stack.*stack='decoder'"):
        viz.attention_maps(s2s, "cross", "encoder")
    with pytest.raises(ValueError, match="has no encoder stack"):
        viz.attention_maps(dec, "self", "encoder")
    with pytest.raises(ValueError, match="kind must be"):
        viz.attention_maps(dec, "causal")
    with pytest.raises(ValueError, match="stack must be"):
        viz.attention_maps(s2s, "self", "both")


def test_errors_for_bad_indices_and_token_counts(tmp_path):
    model = _decoder()
    model.forward(_dev(_batch(2, 5)))
    maps = viz.attention_maps(model)  # 3 x (2, 2, 5, 5)
    toks, path = ["a"] * 5, tmp_path / "x.png"
    with pytest.raises(ValueError, match="layer index 3 is out of range.*3 layers"):
        viz.plot_attention(maps, toks, toks, path, layers=[0, 3])
    with pytest.raises(ValueError, match="layer index -4"):
        viz.plot_attention(maps, toks, toks, path, layers=-4)
    with pytest.raises(ValueError, match="head index 2 is out of range.*2 heads"):
        viz.plot_attention(maps, toks, toks, path, heads=[2])
    with pytest.raises(ValueError, match="integers"):
        viz.plot_attention(maps, toks, toks, path, heads=[0.5])
    with pytest.raises(ValueError, match="sample"):
        viz.plot_attention(maps, toks, toks, path, sample=2)
    with pytest.raises(ValueError, match="6 query tokens.*only 5 query positions"):
        viz.plot_attention(maps, toks + ["b"], toks, path)
    with pytest.raises(ValueError, match="6 key tokens"):
        viz.plot_attention(maps, toks, toks + ["b"], path)
    with pytest.raises(ValueError, match="empty"):
        viz.plot_attention(maps, [], toks, path)
    with pytest.raises(ValueError, match="not one string"):
        viz.plot_attention(maps, "abcde", toks, path)
    with pytest.raises(ValueError, match="start with BOS"):
        viz.plot_decoder_attention(model, IDS[1:], _tokens(IDS[1:]), path)
    with pytest.raises(ValueError, match="1-D"):
        viz.plot_decoder_attention(model, IDS[None], _tokens(IDS), path)
    assert not path.exists()


def test_incremental_decoding_maps_are_refused_unless_partial():
    model = _decoder().eval()
    ids = _dev(IDS[None])  # (1, 7)
    state = model.init_state()
    model.step(ids[:, :3], state)  # a 3-token prompt from position 0: a full (3 x 3) map
    prompt = viz.attention_maps(model)
    model.forward(ids[:, :3])
    for a, b in zip(prompt, viz.attention_maps(model)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    model.step(ids[:, 3:4], state)  # one new token against 4 keys: only the last row
    with pytest.raises(RuntimeError, match="incremental decoding.*teacher-forced forward in eval mode"):
        viz.attention_maps(model)
    assert [m.shape for m in viz.attention_maps(model, allow_partial=True)] == [(1, 2, 1, 4)] * 3

    s2s = _seq2seq().eval()
    state = s2s.init_state(_dev(SRC[None]))
    s2s.step(_dev([[1]]), state)
    s2s.step(_dev([[5]]), state)
    with pytest.raises(RuntimeError, match="incremental decoding"):
        viz.attention_maps(s2s, "cross")
    assert [m.shape for m in viz.attention_maps(s2s, "cross", allow_partial=True)] == [(1, 2, 1, 5)] * 3
    assert [m.shape for m in viz.attention_maps(s2s, "self", "encoder")] == [(1, 2, 5, 5)] * 2


# -- readable pictures: scale, colourbars, labels, mean heads -----------------------
def _figure_maps():
    model = _decoder()
    model.forward(_dev(_batch(1, 5)))
    return viz.attention_maps(model)  # 3 x (1, 2, 5, 5)


def _heatmap_axes(fig):
    """The panels (axes holding an image that is not a colourbar) and the colourbar axes."""
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    panels = [ax for ax in fig.axes if ax.images and ax not in bars and ax.get_visible()]
    return panels, bars


def test_map_scale_tops_at_each_panels_largest_probability():
    pytest.importorskip("matplotlib")
    maps = _figure_maps()
    toks = [f"t{i}" for i in range(5)]
    fig = viz.attention_figure(maps, toks, toks, layers=[0, 2])
    panels, bars = _heatmap_axes(fig)
    assert len(panels) == 4 and len(bars) == 4  # one colourbar per panel
    wanted = [maps[li][0, h].max() for li in (0, 2) for h in (0, 1)]
    for ax, top in zip(panels, wanted):
        vmin, vmax = ax.images[0].get_clim()
        assert vmin == 0.0 and vmax == pytest.approx(float(top))
    for ax, bar in zip(panels, bars):  # each colourbar shows its own panel's scale
        assert bar.get_ylim()[1] == pytest.approx(ax.images[0].get_clim()[1])


def test_tick_labels_are_the_tokens_and_titles_name_layer_and_head():
    pytest.importorskip("matplotlib")
    maps = _figure_maps()
    q, k = ["<bos>", "C", "c", "[nH]", "Cl"], ["<bos>", "C", "c", "[nH]"]
    fig = viz.attention_figure(maps, q, k, layers=1, heads=1, title="decoder self-attention: CcCl")
    (ax,), _ = _heatmap_axes(fig)
    assert [t.get_text() for t in ax.get_yticklabels()] == q
    assert [t.get_text() for t in ax.get_xticklabels()] == k
    assert ax.get_title() == "layer 1, head 1"
    assert "decoder self-attention: CcCl" in fig.get_suptitle()


def test_row_scale_and_mean_heads():
    pytest.importorskip("matplotlib")
    maps = _figure_maps()
    toks = [f"t{i}" for i in range(5)]
    fig = viz.attention_figure(maps, toks, toks, heads="mean", scale="row")
    panels, bars = _heatmap_axes(fig)
    assert [ax.get_title() for ax in panels] == [f"layer {i}, mean of 2 heads" for i in range(3)]
    assert len(bars) == 3
    shown = panels[0].images[0].get_array()  # (5, 5) masked: each row divided by its max
    np.testing.assert_allclose(shown.max(axis=1), 1.0)
    mean = maps[0][0].mean(axis=0)  # (5, 5)
    # float32 maps: the figure and this line may round the mean and the division differently
    np.testing.assert_allclose(shown.filled(0), mean / mean.max(axis=1, keepdims=True), rtol=1e-6)
    assert shown.mask[0, 1]  # the future stays masked (drawn grey)
    fixed = viz.attention_figure(maps, toks, toks, layers=0, scale="fixed")
    panels, bars = _heatmap_axes(fixed)
    assert len(bars) == 1 and all(ax.images[0].get_clim() == (0.0, 1.0) for ax in panels)
    with pytest.raises(ValueError, match="scale must be one of"):
        viz.attention_figure(maps, toks, toks, scale="log")
    with pytest.raises(ValueError, match="heads must be"):
        viz.attention_figure(maps, toks, toks, heads="max")


# -- render_attention: every model kind, files written all or nothing ----------------
def _chem_vocab(cls=False):
    from minitransformer.chem import Vocab
    return Vocab.build(["Cc1c[nH]c2ccc(Cl)cc12", "CC(=O)[O-]"], extras=(Vocab.CLS, Vocab.MASK) if cls else ())


@pytest.mark.parametrize("family", ["decoder", "encoder", "property", "masked", "seq2seq", "pointer"])
def test_render_attention_writes_heatmaps_and_molecules(family, tmp_path):
    """A PropertyModel or a MaskedLM is drawn through its encoder (the head's features are not needed)."""
    pytest.importorskip("rdkit")
    pytest.importorskip("matplotlib")
    from minitransformer.models import MaskedLM, PropertyModel, PropertyModelConfig
    vocab = _chem_vocab(cls=family in ("encoder", "property", "masked"))
    n, kw = len(vocab), dict(TINY, max_len=24)
    model = {"decoder": lambda: DecoderLM(DecoderLMConfig(vocab_size=n, n_layers=2, **kw)),
             "encoder": lambda: Encoder(EncoderConfig(vocab_size=n, n_layers=2, **kw)),
             "property": lambda: PropertyModel(PropertyModelConfig(vocab_size=n, n_layers=2, n_outputs=2, n_features=3,
                                                                   **kw)),
             "masked": lambda: MaskedLM(EncoderConfig(vocab_size=n, n_layers=2, **kw)),
             "seq2seq": lambda: Seq2Seq(Seq2SeqConfig(n, n, n_enc_layers=1, n_dec_layers=2, **kw)),
             "pointer": lambda: Seq2Seq(Seq2SeqConfig(n, n, n_enc_layers=1, n_dec_layers=2, pointer=True,
                                                      **kw))}[family]()
    model.train()
    extra = dict(target="CC(=O)[O-]") if family in ("seq2seq", "pointer") else {}
    paths = viz.render_attention(model, vocab, "Cc1c[nH]c2ccc(Cl)cc12", tmp_path / "out", heads="mean", **extra)
    stems = {"decoder": ["attention_decoder_self"], "encoder": ["attention_encoder_self"],
             "property": ["attention_encoder_self"], "masked": ["attention_encoder_self"],
             "seq2seq": ["attention_encoder_self", "attention_decoder_self", "attention_cross"],
             "pointer": ["attention_encoder_self", "attention_decoder_self", "attention_cross",
                         "attention_copy"]}[family]
    assert [p.name for p in paths] == [f"{s}{m}.png" for s in stems for m in ("", "_molecule")]
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in paths)
    assert sorted(tmp_path.joinpath("out").iterdir()) == sorted(paths)  # no temporary files left
    assert all(m.training for m in model.modules())  # the model keeps its mode


def test_render_attention_leaves_nothing_behind_on_failure(tmp_path, monkeypatch):
    pytest.importorskip("rdkit")
    pytest.importorskip("matplotlib")
    from minitransformer.atomic import FileExistsRefusal
    from minitransformer.viz import report
    vocab = _chem_vocab()
    model = Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), n_enc_layers=1, n_dec_layers=1, **dict(TINY, max_len=24)))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="cannot parse"):
        viz.render_attention(model, vocab, "C1CC", out)
    with pytest.raises(ValueError, match="max_len"):
        viz.render_attention(model, vocab, "C" * 30, out)
    with pytest.raises(ValueError, match="for an encoder-decoder only"):
        viz.render_attention(_decoder(), vocab, "CC", out, target="CC")
    assert not out.exists()

    calls = []
    real = report.write_bytes

    def fail_on_third(path, data, overwrite=True):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(path, data, overwrite)
    monkeypatch.setattr(report, "write_bytes", fail_on_third)
    with pytest.raises(OSError, match="disk full"):
        viz.render_attention(model, vocab, "CC(=O)[O-]", out, target="CC(=O)[O-]", heads="mean")
    assert list(out.iterdir()) == []
    monkeypatch.setattr(report, "write_bytes", real)
    viz.render_attention(model, vocab, "CC(=O)[O-]", out, target="CCO", heads=0, layers=0, molecules=False)
    with pytest.raises(FileExistsRefusal, match="already exists"):
        viz.render_attention(model, vocab, "CC(=O)[O-]", out, target="CCO", overwrite=False)


def test_the_first_and_last_layer_of_a_one_layer_model_are_one_panel():
    from minitransformer.viz.heatmaps import _indices
    assert _indices([0, -1], 1, "layer") == [0]
    assert _indices([0, -1], 3, "layer") == [0, 2]


def test_the_maps_of_a_model_around_an_encoder_are_its_encoders():
    from minitransformer.models import MaskedLM
    masked = MaskedLM(EncoderConfig(vocab_size=V, n_layers=2, **TINY)).eval()
    ids = _batch()  # (B, T), host
    masked(_dev(ids))  # (B, T, V)
    inner = viz.attention_maps(masked.encoder)
    assert [np.array_equal(a, b) for a, b in zip(viz.attention_maps(masked), inner)] == [True, True]
    one = viz.forward_maps(masked, "self", None, ids[0])
    assert len(one) == 2 and one[0].shape[2:] == (ids.shape[1], ids.shape[1])
