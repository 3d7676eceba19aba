"""Relative-position bias: the learned lookup's kernels (values, clipping, gradient
checks, the scatter-add of shared buckets), ALiBi's slopes and bias, the module
(offsets for cached decoding, accumulation, errors); inside multi-head attention
(gradient checks, KV-cached decoding, no cross-attention) under both kernel sets;
the embedder without a position vector and the blocks that own the bias."""
import numpy as np
import pytest

from minitransformer import backend, kernels
from minitransformer.functional import causal_mask, relative_bias_backward, relative_bias_forward
from minitransformer.gradcheck import check_kernel, check_module
from minitransformer.nn import (
    DecoderBlock, EncoderBlock, KVCache, MultiHeadAttention, RelativePositionBias, TokenEmbedder,
)
from minitransformer.nn.relative_position import alibi_slopes, n_buckets, relative_buckets
from nn_helpers import Rewound, opts  # noqa: E402


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return backend.to_numpy(a)


def _randn(*shape, seed=0, scale=1.0):
    return backend.asarray(np.random.default_rng(seed).standard_normal(shape) * scale)


def _expected_bucket(i, j, M, bidirectional):
    """b(i, j) written out for one pair, as in the module docstring."""
    if bidirectional:
        return min(max(j - i, -M), M) + M
    return min(max(i - j, 0), M)


# -- the learned lookup --------------------------------------------------------------
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("offset,Tq,Tk", [(0, 6, 6), (4, 2, 6), (0, 3, 7)])
def test_forward_reads_the_bucket_of_each_clipped_distance(any_backend, float64, bidirectional,
                                                           offset, Tq, Tk):
    H, M = 3, 2
    table = _randn(H, n_buckets(M, bidirectional))
    q_pos, k_pos = _dev(np.arange(offset, offset + Tq)), _dev(np.arange(Tk))
    bias, cache = relative_bias_forward(table, q_pos, k_pos, M, bidirectional)
    assert bias.shape == (H, Tq, Tk)
    t, b = _host(table), _host(bias)
    for qi in range(Tq):
        for j in range(Tk):
            col = _expected_bucket(offset + qi, j, M, bidirectional)
            np.testing.assert_array_equal(b[:, qi, j], t[:, col])
            assert int(_host(cache.buckets)[qi, j]) == col


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("offset,Tq,Tk", [(0, 5, 5), (3, 2, 5), (0, 1, 1)])
def test_gradcheck_kernel(any_backend, float64, bidirectional, offset, Tq, Tk):
    M = 2
    table = _randn(3, n_buckets(M, bidirectional), seed=1)
    q_pos, k_pos = _dev(np.arange(offset, offset + Tq)), _dev(np.arange(Tk))
    report = check_kernel(relative_bias_forward, relative_bias_backward,
                          {"table": table, "q_pos": q_pos, "k_pos": k_pos},
                          {"max_distance": M, "bidirectional": bidirectional})
    assert [c.name for c in report.checks] == ["table"]


def test_distances_beyond_max_share_one_parameter(any_backend, float64):
    """T = 8, M = 2: every pair with j - i >= 2 reads column 2M, every pair with
    j - i <= -2 column 0; the backward sums all their gradients into that one column."""
    H, M, T = 2, 2, 8
    table = _randn(H, 2 * M + 1)
    pos = _dev(np.arange(T))
    bias, cache = relative_bias_forward(table, pos, pos, M, True)
    r = np.arange(T)[None, :] - np.arange(T)[:, None]  # (T, T) j - i
    far_right, far_left = r >= M, r <= -M
    b = _host(bias)
    for h in range(H):
        assert np.all(b[h][far_right] == _host(table)[h, 2 * M])
        assert np.all(b[h][far_left] == _host(table)[h, 0])
    # changing the edge parameter moves every far pair's bias, and nothing else
    moved = _host(table).copy()
    moved[:, 2 * M] += 1.0
    diff = _host(relative_bias_forward(_dev(moved), pos, pos, M, True)[0]) - b
    np.testing.assert_array_equal(diff != 0, np.broadcast_to(far_right, (H, T, T)))
    # backward: the edge column's gradient is the sum over all far pairs (a scatter-add)
    dbias = np.random.default_rng(3).standard_normal((H, T, T))
    dtable = _host(relative_bias_backward(_dev(dbias), cache))
    assert dtable.shape == (H, 2 * M + 1)
    np.testing.assert_allclose(dtable[:, 2 * M], dbias[:, far_right].sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(dtable[:, 0], dbias[:, far_left].sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(dtable[:, M], np.einsum("hii->h", dbias), rtol=1e-12)  # the diagonal
    np.testing.assert_allclose(dtable.sum(axis=1), dbias.sum(axis=(1, 2)), rtol=1e-12)  # nothing lost


def test_causal_buckets_fold_later_keys_onto_distance_zero(any_backend):
    b = _host(relative_buckets(_dev(np.arange(4)), _dev(np.arange(4)), 2, False))
    np.testing.assert_array_equal(b, [[0, 0, 0, 0],
                                      [1, 0, 0, 0],
                                      [2, 1, 0, 0],
                                      [2, 2, 1, 0]])


def test_table_of_wrong_shape_raises(any_backend, float64):
    pos = _dev(np.arange(3))
    with pytest.raises(ValueError, match=r"table must have shape \(H, 5\).*got \(2, 3\)"):
        relative_bias_forward(_randn(2, 3), pos, pos, 2, True)
    with pytest.raises(ValueError, match=r"\(H, 3\)"):
        relative_bias_forward(_randn(2, 5), pos, pos, 2, False)


# -- ALiBi ---------------------------------------------------------------------------
def test_alibi_slopes_are_the_geometric_sequence(any_backend, float64):
    np.testing.assert_allclose(_host(alibi_slopes(8)), [2.0 ** -k for k in range(1, 9)], rtol=1e-15)
    np.testing.assert_allclose(_host(alibi_slopes(4)), [1 / 4, 1 / 16, 1 / 64, 1 / 256], rtol=1e-15)
    np.testing.assert_allclose(_host(alibi_slopes(3)), 2.0 ** (-8.0 * np.arange(1, 4) / 3), rtol=1e-15)
    assert alibi_slopes(2, np.float32).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_alibi_bias_is_minus_slope_times_distance(any_backend, dtype):
    with backend.dtype_scope(dtype):
        m = RelativePositionBias(4, kind="alibi")
    assert m.parameters() == []
    bias = m(2, 6, offset=4)  # queries at 4, 5; keys 0..5
    assert bias.shape == (1, 4, 2, 6) and bias.dtype == dtype
    slopes = 2.0 ** (-8.0 * np.arange(1, 5) / 4)
    dist = np.abs(np.arange(4, 6)[:, None] - np.arange(6)[None, :])
    np.testing.assert_allclose(_host(bias)[0], -slopes[:, None, None] * dist, rtol=1e-6)
    assert m.backward(_dev(np.ones((1, 4, 2, 6), dtype=dtype))) is None  # nothing to learn


def test_alibi_slopes_follow_astype(float64):
    m = RelativePositionBias(2, kind="alibi").astype(np.float32)
    assert m.slopes.dtype == np.float32 and m(3, 3).dtype == np.float32


# -- the module ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["learned", "alibi"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_module_offset_gives_the_bottom_rows_of_the_full_bias(any_backend, float64, kind, bidirectional):
    """Queries offset..offset+Tq-1 against keys 0..Tk-1: exactly the rows a cached
    decoding step needs, equal to those rows of the full (Tk, Tk) bias."""
    m = RelativePositionBias(2, max_distance=2, bidirectional=bidirectional, kind=kind, rng=backend.RNG(1))
    full = _host(m(7, 7))
    assert full.shape == (1, 2, 7, 7)
    for offset, Tq in [(0, 3), (3, 1), (4, 3)]:
        part = _host(m(Tq, offset + Tq, offset=offset))
        np.testing.assert_array_equal(part, full[:, :, offset:offset + Tq, :offset + Tq])


def test_module_learned_table_shape_names_and_accumulation(any_backend, float64):
    m = RelativePositionBias(3, max_distance=4, bidirectional=False)
    assert [(n, p.shape) for n, p in m.named_parameters()] == [("table", (3, 5))]
    assert RelativePositionBias(3, max_distance=4).table.shape == (3, 9)
    m(4, 4)
    d = _randn(1, 3, 4, 4, seed=2)
    m.backward(d)
    first = _host(m.table.grad).copy()
    assert np.any(first != 0)
    m.backward(d)
    np.testing.assert_allclose(_host(m.table.grad), 2 * first, rtol=1e-14)  # +=, not =


def test_module_errors():
    with pytest.raises(ValueError, match="kind must be one of"):
        RelativePositionBias(2, kind="rope")
    with pytest.raises(ValueError, match="max_distance must be an integer >= 1"):
        RelativePositionBias(2, max_distance=0)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        RelativePositionBias(2)(1, 1, offset=-1)
    with pytest.raises(RuntimeError, match=r"backward\(\) was called before forward\(\)"):
        RelativePositionBias(2).backward(np.zeros((1, 2, 1, 1)))


# -- inside multi-head attention -------------------------------------------------------
def _mha(kind="learned", bidirectional=True, D=4, H=2, d_head=None, M=2, seed=0):
    pb = RelativePositionBias(H, max_distance=M, bidirectional=bidirectional, kind=kind,
                              init_std=0.5, rng=backend.RNG(seed + 50))
    return MultiHeadAttention(D, H, d_head, rng=backend.RNG(seed), position_bias=pb)


@pytest.mark.parametrize("kind,bidirectional,causal", [
    ("learned", True, False), ("learned", False, True), ("learned", True, True),
    ("alibi", True, False), ("alibi", False, True),
])
def test_gradcheck_attention_with_position_bias(any_backend, float64, kind, bidirectional, causal):
    T = 5  # longer than max_distance = 2: the clipped buckets are exercised
    m = _mha(kind, bidirectional, d_head=3)
    report = check_module(m, _randn(2, T, 4), kwargs={"mask": causal_mask(T) if causal else None})
    names = {c.name for c in report.checks}
    assert names == {"input", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias"} | (
        {"position_bias.table"} if kind == "learned" else set())


def test_gradcheck_with_position_bias_and_attention_dropout(any_backend, float64):
    pb = RelativePositionBias(2, max_distance=2, bidirectional=False, init_std=0.5, rng=backend.RNG(4))
    m = MultiHeadAttention(4, 2, attn_dropout=0.4, rng=backend.RNG(3), position_bias=pb)
    report = check_module(Rewound(m), _randn(2, 5, 4), kwargs={"mask": causal_mask(5)}, eval_mode=False)
    assert "inner.position_bias.table" in {c.name for c in report.checks}
    assert m.cache["attn"].dropout_mask is not None


def test_the_bias_reaches_the_logits(any_backend, float64):
    """A bias that favours distance 0 makes every query attend (almost) only to itself."""
    m = _mha("learned", True, M=2)
    table = np.zeros((2, 5))
    table[:, 2] = 50.0  # distance 0
    m.position_bias.table.data = _dev(table)
    m(_randn(1, 4, 4))
    np.testing.assert_allclose(_host(m.attention_probs)[0], np.broadcast_to(np.eye(4), (2, 4, 4)),
                               atol=1e-12)


@pytest.mark.parametrize("kind", ["learned", "alibi"])
def test_kv_cached_attention_with_position_bias_matches_full(any_backend, float64, kind):
    m = _mha(kind, bidirectional=False, d_head=3)
    x = _randn(2, 7, 4, seed=4)
    full = _host(m(x, mask=causal_mask(7)))
    cache = KVCache()
    steps = []
    for start, stop in [(0, 3), (3, 4), (4, 5), (5, 7)]:  # a prompt, single tokens, then two
        steps.append(_host(m(x[:, start:stop], mask=causal_mask(stop - start, stop), kv_cache=cache)))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-10, atol=1e-12)


def test_cross_attention_takes_no_position_bias(any_backend, float64):
    m = _mha()
    with pytest.raises(ValueError, match="position bias is for self-attention"):
        m(_randn(1, 2, 4), context=_randn(1, 3, 4))
    with pytest.raises(ValueError, match="position bias has 3 heads, the attention 2"):
        MultiHeadAttention(4, 2, position_bias=RelativePositionBias(3))


# -- the fast and the reference kernel sets agree ------------------------------------------
def _run_mha(kernel_set, kind, bidirectional, mask):
    with kernels.scope(kernel_set):
        m = _mha(kind, bidirectional, D=6, H=3, seed=2)
        bias_alone = _host(m.position_bias(5, 5))
        x = _randn(3, 5, 6, seed=5)
        y = m(x, mask=mask)
        dx = m.backward(_randn(3, 5, 6, seed=6))
        return [bias_alone, _host(y), _host(dx)] + [_host(p.grad) for p in m.parameters()]


@pytest.mark.parametrize("kind,bidirectional", [("learned", True), ("learned", False), ("alibi", True)])
def test_fast_and_reference_kernel_sets_agree(any_backend, float64, kind, bidirectional):
    mask = None if bidirectional else causal_mask(5)
    ref = _run_mha("reference", kind, bidirectional, mask)
    fast = _run_mha("fast", kind, bidirectional, mask)
    assert len(ref) == len(fast) == 3 + 4 + (kind == "learned")
    np.testing.assert_array_equal(fast[0], ref[0])  # the bias itself: the same lookup
    for a, b in zip(fast[1:], ref[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


# -- where the models put it ---------------------------------------------------------------
def test_token_embedder_with_relative_positions_adds_no_position_vector(any_backend, float64):
    emb = TokenEmbedder(11, 4, max_len=6, pos="relative", emb_dropout=0.0, rng=backend.RNG(0))
    assert emb.pos is None and emb.scale == 1.0
    assert [n for n, _ in emb.named_parameters()] == ["tok.weight"]
    ids = _dev(np.array([[1, 5, 7], [2, 3, 3]]))
    np.testing.assert_array_equal(_host(emb(ids, offset=2)), _host(emb.tok.weight.data)[_host(ids)])
    check_module(emb, ids)  # the token table's gradient, alone
    with pytest.raises(ValueError, match="pos must be 'learned', 'sinusoidal' or 'relative'"):
        TokenEmbedder(11, 4, 6, "alibi", 0.0, backend.RNG(0))


def test_blocks_build_one_bias_per_self_attention():
    enc = EncoderBlock(opts(4, 2, 8, relative_bias="learned", relative_max_distance=3))
    dec = DecoderBlock(opts(4, 2, 8, relative_bias="alibi"))
    plain = DecoderBlock(opts(4, 2, 8))
    assert enc.attn.position_bias.bidirectional and enc.attn.position_bias.table.shape == (2, 7)
    assert not dec.attn.position_bias.bidirectional and dec.attn.position_bias.kind == "alibi"
    assert dec.cross.position_bias is None and plain.attn.position_bias is None
    assert "attn.position_bias.table" in dict(enc.named_parameters())
