"""The PyTorch-style conveniences of Module: the printed tree, freezing,
``load_state_dict(strict=False)``, NumPy Generators as rng, and the one-line
error for a Python list where an array belongs."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.generate import sample
from minitransformer.models.decoder_lm import DecoderLM, DecoderLMConfig
from minitransformer.nn import (
    GELU, Dropout, Embedding, EncoderBlock, FeedForward, LayerNorm, Linear, ModuleList,
    MultiHeadAttention, PositionalEmbedding, RelativePositionBias, set_rng,
)
from nn_helpers import opts  # noqa: E402


def _lm(**kw):
    cfg = dict(vocab_size=10, d_model=8, n_heads=2, d_ff=16, n_layers=2, max_len=16)
    return DecoderLM(DecoderLMConfig(**{**cfg, **kw}))


# -- repr ----------------------------------------------------------------------------
def test_leaf_reprs_show_their_sizes():
    assert repr(Linear(128, 512)) == "Linear(in=128, out=512, bias=True)"
    assert repr(Linear(4, 2, bias=False)) == "Linear(in=4, out=2, bias=False)"
    assert repr(LayerNorm(128)) == "LayerNorm(128, eps=1e-05)"
    assert repr(Embedding(100, 16)) == "Embedding(100, 16)"
    assert repr(Dropout(0.1)) == "Dropout(p=0.1)"
    assert repr(GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(PositionalEmbedding(32, 8)) == "PositionalEmbedding(max_len=32, d=8)"
    assert repr(RelativePositionBias(2, kind="alibi")) == "RelativePositionBias('alibi', n_heads=2, bidirectional=True)"


def test_module_repr_is_an_indented_tree():
    ff = FeedForward(opts(4, d_ff=8, ff_dropout=0.1))
    assert repr(ff) == (
        "FeedForward(\n"
        "  (fc1): Linear(in=4, out=8, bias=True)\n"
        "  (act): GELU()\n"
        "  (drop): Dropout(p=0.1)\n"
        "  (fc2): Linear(in=8, out=4, bias=True)\n"
        ")"
    )
    mha = MultiHeadAttention(8, 2)
    assert repr(mha).splitlines()[:3] == [
        "MultiHeadAttention(", "  d_model=8, n_heads=2, d_head=4", "  (qkv): Linear(in=8, out=24, bias=True)"]
    stack = ModuleList([EncoderBlock(opts(4, 2, 6)), EncoderBlock(opts(4, 2, 6))])
    lines = repr(stack).splitlines()
    assert lines[0] == "ModuleList(" and lines[1] == "  (0): EncoderBlock(" and lines[2] == "    norm='pre'"
    assert "  (1): EncoderBlock(" in lines and lines[-1] == ")"
    assert "      (qkv): Linear(in=4, out=12, bias=True)" in lines


def test_model_repr_names_every_submodule_and_the_tied_head():
    text = repr(_lm(tie_embeddings=True))
    assert text.startswith("DecoderLM(\n  (embed): TokenEmbedder(")
    assert "    (tok): Embedding(10, 8)" in text
    assert "  (head): OutputProjection(tied to the token embedding (10, 8))" in text
    assert text.count("CausalBlock(") == 2  # a GPT block: causal self-attention, no cross-attention
    assert "  (stack): Stack()" in text and text.count("(attn_sublayer): Residual(pre-LN, around MultiHeadAttention)") == 2


# -- freezing ------------------------------------------------------------------------
def test_freeze_unfreeze_and_trainable_count():
    model = _lm()
    total = model.num_parameters()
    emb = model.embed.tok.weight.data.size
    assert model.embed.tok.freeze() is model.embed.tok
    assert model.embed.tok.weight.requires_grad is False
    assert "requires_grad=False" in repr(model.embed.tok.weight)
    assert model.num_parameters() == total
    assert model.num_parameters(trainable_only=True) == total - emb
    assert model.unfreeze() is model
    assert model.num_parameters(trainable_only=True) == total
    model.requires_grad_(False)
    assert model.num_parameters(trainable_only=True) == 0


# -- load_state_dict(strict) ---------------------------------------------------------
def test_load_state_dict_strict_false_loads_the_matching_names():
    src, dst = EncoderBlock(opts(4, 2, 6), rng=backend.RNG(1)), EncoderBlock(opts(4, 2, 6), rng=backend.RNG(2))
    kept = backend.to_numpy(dst.ln1.weight.data).copy()
    sd = src.state_dict()
    del sd["ln1.weight"]
    sd["extra.weight"] = np.zeros(3, dtype=np.float32)
    missing, unexpected = dst.load_state_dict(sd, strict=False)
    assert (missing, unexpected) == (["ln1.weight"], ["extra.weight"])
    np.testing.assert_array_equal(backend.to_numpy(dst.ln1.weight.data), kept)
    np.testing.assert_array_equal(backend.to_numpy(dst.attn.qkv.weight.data), sd["attn.qkv.weight"])
    assert dst.load_state_dict(src.state_dict()) == ([], [])


def test_load_state_dict_strict_error_is_one_line_and_shape_is_always_an_error():
    blk = EncoderBlock(opts(4, 2, 6))
    sd = blk.state_dict()
    del sd["ln1.bias"]
    with pytest.raises(ValueError) as info:
        blk.load_state_dict(sd)
    assert "\n" not in str(info.value) and "missing: ln1.bias" in str(info.value)
    assert "strict=False" in str(info.value)
    sd = blk.state_dict()
    sd["ln1.bias"] = np.zeros(5, dtype=np.float32)
    before = blk.state_dict()
    with pytest.raises(ValueError, match=r"ln1.bias: expected \(4,\), got \(5,\)"):
        blk.load_state_dict(sd, strict=False)
    for n, v in before.items():  # nothing was written
        np.testing.assert_array_equal(blk.state_dict()[n], v)


# -- rng: a NumPy Generator is accepted everywhere ------------------------------------
def test_layers_accept_a_numpy_generator_and_it_is_reproducible():
    a = Linear(3, 4, rng=np.random.default_rng(5)).weight.data
    b = Linear(3, 4, rng=np.random.default_rng(5)).weight.data
    c = Linear(3, 4, rng=np.random.default_rng(6)).weight.data
    np.testing.assert_array_equal(backend.to_numpy(a), backend.to_numpy(b))
    assert not np.array_equal(backend.to_numpy(a), backend.to_numpy(c))
    for make in (lambda g: Embedding(5, 3, rng=g), lambda g: PositionalEmbedding(5, 3, rng=g),
                 lambda g: RelativePositionBias(2, rng=g), lambda g: MultiHeadAttention(4, 2, rng=g),
                 lambda g: FeedForward(opts(4, d_ff=8), rng=g), lambda g: EncoderBlock(opts(4, 2, 6), rng=g)):
        m1, m2 = make(np.random.default_rng(3)), make(np.random.default_rng(3))
        for (n, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
            np.testing.assert_array_equal(backend.to_numpy(p1.data), backend.to_numpy(p2.data), err_msg=n)


def test_dropout_and_set_rng_accept_a_numpy_generator():
    x = backend.asarray(np.ones((4, 50), dtype=np.float32))
    y1 = backend.to_numpy(Dropout(0.5, rng=np.random.default_rng(0))(x))
    y2 = backend.to_numpy(Dropout(0.5, rng=np.random.default_rng(0))(x))
    np.testing.assert_array_equal(y1, y2)
    assert 0 < (y1 == 0).sum() < y1.size
    model = _lm()
    set_rng(model, np.random.default_rng(1))
    assert model.embed.drop.rng is model.blocks[0].attn.rng  # one shared stream


def test_sample_accepts_a_numpy_generator():
    model = _lm()
    a = sample(model, batch_size=3, max_len=8, rng=np.random.default_rng(7))
    b = sample(model, batch_size=3, max_len=8, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", ["seed", 1.5, True, [0]])
def test_a_bad_rng_is_one_line_naming_what_is_accepted(bad):
    with pytest.raises(ValueError, match=r"^rng must be None, an int seed, a NumPy Generator .* got \w+$"):
        Linear(2, 2, rng=bad)
    with pytest.raises(ValueError, match="NumPy Generator"):
        sample(_lm(), batch_size=1, max_len=4, rng=bad)


# -- a Python list where an array belongs ---------------------------------------------
@pytest.mark.parametrize("call, what", [
    (lambda: _lm().forward([[1, 2, 3]]), "DecoderLM"),
    (lambda: Linear(2, 3)([0.1, 0.2]), "Linear"),
    (lambda: LayerNorm(2)([[0.1, 0.2]]), "LayerNorm"),
    (lambda: Embedding(5, 2)([1, 2]), "Embedding"),
    (lambda: MultiHeadAttention(4, 2)([[[0.0] * 4]]), "MultiHeadAttention x"),
    (lambda: GELU()((0.5,)), "GELU"),
    (lambda: Dropout(0.1)([0.5]), "Dropout"),
])
def test_a_python_list_is_refused_with_the_fix(call, what):
    with pytest.raises(ValueError) as info:
        call()
    msg = str(info.value)
    assert msg.startswith(f"{what}: expected a NumPy/CuPy array, got ")
    assert msg.endswith("wrap it with np.asarray(...)") and "\n" not in msg
