"""Module bookkeeping: parameter names, tied parameters, state dicts, train/eval,
backward-before-forward and input validation errors."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.nn import (
    GELU, DecoderBlock, Dropout, Embedding, EncoderBlock, FeedForward, LayerNorm, Linear, Module,
    ModuleList, MultiHeadAttention, Parameter, PositionalEmbedding, ReLU,
    SinusoidalPositionalEncoding,
)
from nn_helpers import opts  # noqa: E402


def _host(a):
    return backend.to_numpy(a)


def _ids(a):
    return backend.asarray(np.asarray(a, dtype=np.int64))


class _TiedPair(Module):
    """Two linear layers sharing one weight (the second reads the first's Parameter)."""

    def __init__(self):
        self.a = Linear(3, 3, rng=backend.RNG(1))
        self.b = Linear(3, 3, rng=backend.RNG(2))
        self.b.weight = self.a.weight


# -- names -------------------------------------------------------------------------
def test_named_parameters_are_stable_dotted_paths():
    blk = DecoderBlock(opts(4, 2, 6))
    names = [n for n, _ in blk.named_parameters()]
    assert names == [
        "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
        "ln1.weight", "ln1.bias",
        "cross.qkv.weight", "cross.qkv.bias", "cross.proj.weight", "cross.proj.bias",
        "ln_cross.weight", "ln_cross.bias",
        "ff.fc1.weight", "ff.fc1.bias", "ff.fc2.weight", "ff.fc2.bias",
        "ln2.weight", "ln2.bias",
    ]
    assert names == [n for n, _ in DecoderBlock(opts(4, 2, 6)).named_parameters()]  # rebuild: same
    stack = ModuleList([EncoderBlock(opts(4, 2, 6)), EncoderBlock(opts(4, 2, 6))])
    stack_names = [n for n, _ in stack.named_parameters()]
    assert stack_names[0] == "0.attn.qkv.weight" and stack_names[-1] == "1.ln2.bias"
    assert len(stack_names) == len(set(stack_names)) == 24
    prefixed = [n for n, _ in stack.named_parameters(prefix="enc")]
    assert prefixed == ["enc." + n for n in stack_names]


def test_named_modules_and_children():
    ff = FeedForward(opts(4, d_ff=8))
    assert [n for n, _ in ff.named_children()] == ["fc1", "act", "drop", "fc2"]
    assert [n for n, _ in ff.named_modules()] == ["", "fc1", "act", "drop", "fc2"]


def test_tied_parameter_appears_once():
    m = _TiedPair()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["a.weight", "a.bias", "b.bias"]
    assert m.num_parameters() == 9 + 3 + 3
    assert set(m.state_dict()) == set(names)


def test_tied_parameter_gradients_add(float64):
    m = _TiedPair()
    x = backend.asarray(np.random.default_rng(0).standard_normal((2, 3)))
    dy = backend.asarray(np.random.default_rng(1).standard_normal((2, 3)))
    m.a(x)
    m.b(x)
    m.a.backward(dy)
    m.b.backward(dy)
    expected = 2 * _host(x).T @ _host(dy)
    np.testing.assert_allclose(_host(m.a.weight.grad), expected, rtol=1e-12)


# -- state dicts -------------------------------------------------------------------
def test_state_dict_returns_host_numpy_copies(any_backend):
    blk = EncoderBlock(opts(4, 2, 6))
    sd = blk.state_dict()
    assert list(sd) == [n for n, _ in blk.named_parameters()]
    for name, p in blk.named_parameters():
        assert type(sd[name]) is np.ndarray
        assert sd[name].shape == tuple(p.shape) and sd[name].dtype == p.data.dtype
        np.testing.assert_array_equal(sd[name], _host(p.data))
    before = _host(blk.attn.qkv.weight.data).copy()
    sd["attn.qkv.weight"][...] = 123.0  # editing the copy leaves the module alone
    np.testing.assert_array_equal(_host(blk.attn.qkv.weight.data), before)
    blk.attn.qkv.weight.data += 1.0  # and training the module leaves the copy alone
    assert np.all(sd["attn.qkv.weight"] == 123.0)


def test_load_state_dict_round_trip(any_backend):
    src, dst = EncoderBlock(opts(4, 2, 6), rng=backend.RNG(1)), EncoderBlock(opts(4, 2, 6), rng=backend.RNG(2))
    for p in dst.parameters():
        p.grad += 1.0
    dst.load_state_dict(src.state_dict())
    for (n, p), (_, q) in zip(src.named_parameters(), dst.named_parameters()):
        np.testing.assert_array_equal(_host(p.data), _host(q.data), err_msg=n)
        assert backend.is_device_array(q.data) and q.data.dtype == p.data.dtype
        assert q.grad.shape == q.data.shape and np.all(_host(q.grad) == 0)
    x = backend.asarray(np.ones((1, 2, 4), dtype=np.float32))
    np.testing.assert_array_equal(_host(src(x)), _host(dst(x)))


def test_load_state_dict_copies_so_training_never_touches_the_source(any_backend):
    a, b = Linear(2, 3, rng=backend.RNG(1)), Linear(2, 3, rng=backend.RNG(2))
    snapshot = a.state_dict()  # e.g. the best weights so far, kept for later
    kept = {k: v.copy() for k, v in snapshot.items()}
    b.load_state_dict(snapshot)
    b.weight.data -= 1.0  # an optimizer step updates in place
    b.bias.data += 1.0
    for k in kept:
        np.testing.assert_array_equal(snapshot[k], kept[k], err_msg=k)


def test_load_state_dict_accepts_device_arrays(any_backend):
    """Weights copied straight from another module's device arrays load too (the shape
    check must not push them through np.shape, which CuPy-like arrays refuse)."""
    src, dst = Linear(2, 3, rng=backend.RNG(1)), Linear(2, 3, rng=backend.RNG(2))
    dst.load_state_dict({n: p.data for n, p in src.named_parameters()})
    np.testing.assert_array_equal(_host(dst.weight.data), _host(src.weight.data))
    assert dst.weight.data is not src.weight.data  # a copy, not an alias
    bad = {"weight": backend.asarray(np.zeros((3, 2), dtype=np.float32)), "bias": src.bias.data}
    with pytest.raises(ValueError, match=r"weight: expected \(2, 3\), got \(3, 2\)"):
        dst.load_state_dict(bad)


def test_load_state_dict_casts_to_parameter_dtype(any_backend):
    layer = Linear(2, 3)
    sd = {k: v.astype(np.float64) for k, v in layer.state_dict().items()}
    layer.load_state_dict(sd)
    assert layer.weight.data.dtype == np.float32


@pytest.mark.parametrize("problem", ["missing", "extra", "shape", "all"])
def test_load_state_dict_mismatch_raises_and_leaves_module_unchanged(any_backend, problem):
    blk = EncoderBlock(opts(4, 2, 6), rng=backend.RNG(1))
    before = blk.state_dict()
    bad = EncoderBlock(opts(4, 2, 6), rng=backend.RNG(9)).state_dict()  # different values
    expect = []
    if problem in ("missing", "all"):
        del bad["ff.fc2.bias"]
        del bad["ln1.weight"]
        expect += ["missing: ff.fc2.bias, ln1.weight"]
    if problem in ("extra", "all"):
        bad["ff.fc3.weight"] = np.zeros((2, 2), dtype=np.float32)
        expect += ["unexpected: ff.fc3.weight"]
    if problem in ("shape", "all"):
        bad["attn.proj.weight"] = np.zeros((4, 5), dtype=np.float32)
        expect += ["attn.proj.weight: expected (4, 4), got (4, 5)"]
    with pytest.raises(ValueError) as info:
        blk.load_state_dict(bad)
    for text in expect:
        assert text in str(info.value)
    after = blk.state_dict()
    assert list(after) == list(before)
    for n in before:
        np.testing.assert_array_equal(after[n], before[n], err_msg=n)


# -- modes -------------------------------------------------------------------------
def test_train_eval_propagate_to_every_submodule():
    blk = DecoderBlock(opts(4, 2, 6, attn_dropout=0.1, resid_dropout=0.1, ff_dropout=0.1))
    mods = list(blk.modules())
    assert len(mods) > 10 and all(m.training for m in mods)
    assert blk.eval() is blk
    assert not any(m.training for m in mods)
    assert not blk.ff.drop.active and not blk.drop_cross.active
    blk.train()
    assert all(m.training for m in mods) and blk.ff.drop.active
    blk.train(False)
    assert not any(m.training for m in mods)


def test_eval_block_is_deterministic_train_block_is_not(any_backend):
    blk = EncoderBlock(opts(4, 2, 6, attn_dropout=0.3, resid_dropout=0.3, ff_dropout=0.3))
    x = backend.asarray(np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32))
    blk.eval()
    a, b = _host(blk(x)), _host(blk(x))
    np.testing.assert_array_equal(a, b)
    blk.train()
    c, d = _host(blk(x)), _host(blk(x))
    assert not np.allclose(c, a) and not np.allclose(c, d)


def test_zero_grad_clears_every_gradient(float64):
    blk = EncoderBlock(opts(4, 2, 6))
    for p in blk.parameters():
        p.grad += 3.0
    blk.zero_grad()
    assert all(np.all(_host(p.grad) == 0) for p in blk.parameters())


def test_astype_casts_parameters_and_gradients():
    blk = EncoderBlock(opts(4, 2, 6))
    blk.astype(np.float64)
    assert all(p.data.dtype == np.float64 and p.grad.dtype == np.float64 for p in blk.parameters())
    enc = SinusoidalPositionalEncoding(5, 4).astype(np.float64)
    assert enc.table.dtype == np.float64


# -- backward before forward ---------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: Linear(2, 3), lambda: Embedding(5, 2), lambda: PositionalEmbedding(4, 2),
    lambda: SinusoidalPositionalEncoding(4, 2), lambda: LayerNorm(2), lambda: GELU(),
    lambda: GELU("tanh"), lambda: ReLU(), lambda: Dropout(0.5), lambda: MultiHeadAttention(4, 2),
    lambda: FeedForward(opts(4, d_ff=8)), lambda: EncoderBlock(opts(4, 2, 8)), lambda: DecoderBlock(opts(4, 2, 8)),
], ids=["Linear", "Embedding", "PositionalEmbedding", "Sinusoidal", "LayerNorm", "GELU",
        "GELU_tanh", "ReLU", "Dropout", "MHA", "FeedForward", "EncoderBlock", "DecoderBlock"])
def test_backward_before_forward_raises_runtime_error(make):
    module = make()
    with pytest.raises(RuntimeError, match=rf"{type(module).__name__}\.backward\(\) was called "
                                           r"before forward\(\)"):
        module.backward(np.zeros((1, 2, 4), dtype=np.float32))


# -- input validation --------------------------------------------------------------
def test_embedding_rejects_float_ids(any_backend):
    emb = Embedding(5, 2)
    with pytest.raises(ValueError, match="must be an integer array, got dtype float"):
        emb(backend.asarray(np.array([[1.0, 2.0]])))


@pytest.mark.parametrize("bad", [5, -1, 100])
def test_embedding_rejects_out_of_range_ids(bad):  # values are read on NumPy only (check_ids)
    emb = Embedding(5, 2)
    with pytest.raises(ValueError, match=rf"token id {bad} is out of range .* \(valid ids are 0\.\.4\)"):
        emb(_ids([[0, bad, 1]]))


@pytest.mark.parametrize("cls", [PositionalEmbedding, SinusoidalPositionalEncoding])
def test_positions_reject_sequences_longer_than_max_len(any_backend, cls):
    pe = cls(6, 2)
    pe(6)  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"positions 0\.\.6 exceed max_len=6"):
        pe(7)
    with pytest.raises(ValueError, match=r"positions 4\.\.6 exceed max_len=6"):
        pe(3, offset=4)


def test_linear_and_layernorm_reject_wrong_width(any_backend):
    with pytest.raises(ValueError, match="D_in=3"):
        Linear(3, 2)(backend.asarray(np.ones((2, 4), dtype=np.float32)))
    with pytest.raises(ValueError, match="expected 3"):
        LayerNorm(3)(backend.asarray(np.ones((2, 4), dtype=np.float32)))


def test_unknown_activation_raises():
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'gelu_tanh', 'relu'\], got 'swish'"):
        FeedForward(opts(4, d_ff=8, activation="swish"))


def test_parameter_grad_starts_at_zero(any_backend):
    p = Parameter(backend.asarray(np.ones((2, 3), dtype=np.float32)))
    assert p.shape == (2, 3) and np.all(_host(p.grad) == 0) and p.grad.dtype == np.float32
