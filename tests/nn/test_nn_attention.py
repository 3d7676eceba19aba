"""MultiHeadAttention: gradient checks under every mask kind, wide heads, cross-attention,
no bias; causality, permutation equivariance and fully masked rows as properties;
the KV cache (append, growth, reorder) and incremental decoding."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend
from minitransformer.functional import causal_mask, combine_masks, padding_mask
from minitransformer.gradcheck import check_module
from minitransformer.nn import KVCache, MultiHeadAttention
from nn_helpers import Rewound  # noqa: E402

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _randn(*shape, seed=0, scale=1.0):
    return backend.asarray(np.random.default_rng(seed).standard_normal(shape) * scale)


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return backend.to_numpy(a)


def _mha(D=4, H=2, d_head=None, bias=True, seed=0):
    m = MultiHeadAttention(D, H, d_head, bias=bias, rng=backend.RNG(seed))
    if bias:  # nonzero biases, so their gradients are checked on a generic point
        g = np.random.default_rng(seed + 100)
        m.qkv.bias.data = _dev(g.standard_normal(m.qkv.bias.shape) * 0.3)
        m.proj.bias.data = _dev(g.standard_normal(m.proj.bias.shape) * 0.3)
    return m


def _random_mask(shape, seed=0, fully_masked=()):
    g = np.random.default_rng(seed)
    m = g.random(shape) < 0.6
    m[..., 0] |= ~m.any(axis=-1)  # every row sees at least one key ...
    for idx in fully_masked:  # ... except the rows forced to see none
        m[idx] = False
    return _dev(m)


ALL_PARAMS = {"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}


# -- gradient checks ---------------------------------------------------------------
def test_self_attention_no_mask(any_backend, float64):
    m = _mha()
    report = check_module(m, _randn(2, 3, 4))
    assert {c.name for c in report.checks} == {"input"} | ALL_PARAMS


def test_self_attention_causal(any_backend, float64):
    check_module(_mha(), _randn(2, 4, 4), kwargs={"mask": causal_mask(4)})


def test_self_attention_padding(any_backend, float64):
    ids = _dev(np.array([[5, 6, 7, 0], [5, 6, 0, 0]]))
    check_module(_mha(), _randn(2, 4, 4), kwargs={"mask": padding_mask(ids, 0)})


def test_self_attention_causal_and_padding(any_backend, float64):
    ids = _dev(np.array([[5, 6, 7, 0], [5, 0, 0, 0]]))
    mask = combine_masks(causal_mask(4), padding_mask(ids, 0))
    check_module(_mha(), _randn(2, 4, 4), kwargs={"mask": mask})


def test_self_attention_custom_mask(any_backend, float64):
    check_module(_mha(), _randn(2, 3, 4), kwargs={"mask": _random_mask((2, 2, 3, 3), seed=4)})


def test_self_attention_fully_masked_rows(any_backend, float64):
    mask = _random_mask((2, 2, 3, 3), seed=5, fully_masked=[(0, 1, 2), (1, 0, 0), (1, 1, 0)])
    m = _mha()
    check_module(m, _randn(2, 3, 4), kwargs={"mask": mask})
    p = _host(m.attention_probs)
    assert np.all(np.isfinite(p))
    assert np.all(p[0, 1, 2] == 0) and np.all(p[1, :, 0] == 0)


@pytest.mark.parametrize("d_head", [4, 3, 1])
def test_self_attention_d_head_not_d_model_over_heads(any_backend, float64, d_head):
    # d_head == d_model is what the reference model uses (H * d_head > D)
    m = _mha(D=4, H=2, d_head=d_head)
    assert m.qkv.weight.shape == (4, 3 * 2 * d_head) and m.proj.weight.shape == (2 * d_head, 4)
    check_module(m, _randn(2, 3, 4), kwargs={"mask": causal_mask(3)})


def test_self_attention_without_bias(any_backend, float64):
    m = _mha(bias=False)
    assert [n for n, _ in m.named_parameters()] == ["qkv.weight", "proj.weight"]
    check_module(m, _randn(2, 3, 4), kwargs={"mask": causal_mask(3)})


@pytest.mark.parametrize("d_head,bias", [(None, True), (4, True), (None, False)])
def test_cross_attention_tq_ne_tk(any_backend, float64, d_head, bias):
    m = _mha(d_head=d_head, bias=bias)
    x, ctx = _randn(2, 2, 4, seed=1), _randn(2, 5, 4, seed=2)
    ctx_ids = _dev(np.array([[3, 3, 3, 3, 0], [3, 3, 0, 0, 0]]))
    report = check_module(m, {"x": x, "context": ctx}, kwargs={"mask": padding_mask(ctx_ids, 0)})
    names = {c.name for c in report.checks}
    assert {"x", "context"} <= names  # both gradients of (dx, dcontext) were checked
    dx, dctx = m.backward(_randn(2, 2, 4, seed=3))
    assert dx.shape == (2, 2, 4) and dctx.shape == (2, 5, 4)
    # padded context positions get no gradient
    assert np.all(_host(dctx)[0, 4] == 0) and np.all(_host(dctx)[1, 2:] == 0)


def test_cross_attention_fully_masked_query_rows(any_backend, float64):
    m = _mha()
    mask = _random_mask((2, 1, 2, 5), seed=9, fully_masked=[(0, 0, 1)])
    check_module(m, {"x": _randn(2, 2, 4, seed=1), "context": _randn(2, 5, 4, seed=2)},
                 kwargs={"mask": mask})


def test_cross_attention_shares_the_fused_weight(any_backend, float64):
    """Queries use the first H*d_head columns of qkv.weight, keys/values the rest: the
    cross-attention output equals the self-attention one when context is x itself."""
    m = _mha()
    x = _randn(2, 3, 4)
    np.testing.assert_allclose(_host(m(x, context=x)), _host(m(x)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cross", [False, True])
def test_attention_dropout_gradcheck_in_training_mode(any_backend, float64, cross):
    m = MultiHeadAttention(4, 2, attn_dropout=0.4, rng=backend.RNG(3))
    inputs = {"x": _randn(2, 3, 4)}
    if cross:
        inputs["context"] = _randn(2, 4, 4, seed=1)
    wrapped = Rewound(m)
    check_module(wrapped, inputs, kwargs={"mask": causal_mask(3) if not cross else None},
                 eval_mode=False)
    # dropout really acted: the probabilities after dropout differ from the plain ones
    wrapped(*inputs.values())
    cache = m.cache["attn"]
    assert cache.dropout_mask is not None
    assert not np.allclose(_host(cache.pd), _host(cache.p))


# -- properties --------------------------------------------------------------------
shapes = st.tuples(st.integers(1, 3), st.integers(2, 6), st.integers(1, 3), st.integers(1, 3))


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16), cut=st.integers(0, 5))
def test_causal_future_tokens_never_change_the_past(any_backend, float64, shape, seed, cut):
    B, T, Dh, H = shape
    D = H * Dh
    cut = cut % T  # positions 0..cut are kept, cut+1.. changed
    m = _mha(D=D, H=H, seed=seed % 7)
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, T, D))
    x2 = x.copy()
    x2[:, cut + 1:] = g.standard_normal((B, T - cut - 1, D)) * 3.0
    y = _host(m(_dev(x), mask=causal_mask(T)))
    y2 = _host(m(_dev(x2), mask=causal_mask(T)))
    np.testing.assert_allclose(y2[:, :cut + 1], y[:, :cut + 1], rtol=1e-12, atol=1e-12)
    if cut + 1 < T:
        assert not np.allclose(y2[:, cut + 1:], y[:, cut + 1:])


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16), wide=st.booleans())
def test_self_attention_is_permutation_equivariant(any_backend, float64, shape, seed, wide):
    B, T, Dh, H = shape
    D = H * Dh
    m = _mha(D=D, H=H, d_head=D if wide else None, seed=seed % 5)
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, T, D))
    perm = g.permutation(T)
    y = _host(m(_dev(x)))
    y_perm = _host(m(_dev(x[:, perm])))
    np.testing.assert_allclose(y_perm, y[:, perm], rtol=1e-10, atol=1e-12)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_fully_masked_rows_give_no_nan(any_backend, float64, shape, seed):
    B, T, Dh, H = shape
    D = H * Dh
    g = np.random.default_rng(seed)
    mask = g.random((B, H, T, T)) < 0.5
    mask[g.integers(0, B), g.integers(0, H), g.integers(0, T)] = False  # at least one empty row
    m = _mha(D=D, H=H, seed=seed % 3)
    x = _dev(g.standard_normal((B, T, D)) * 10.0)
    y = _host(m(x, mask=_dev(mask)))
    dx = _host(m.backward(_dev(g.standard_normal((B, T, D)))))
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(dx))
    for p in m.parameters():
        assert np.all(np.isfinite(_host(p.grad)))
    # a query whose every key is masked in every head attends to nothing: output = proj bias
    empty = ~mask.any(axis=-1).any(axis=1)  # (B, T)
    bias = _host(m.proj.bias.data)
    for b, t in zip(*np.nonzero(empty)):
        np.testing.assert_allclose(y[b, t], bias, rtol=0, atol=1e-12)


# -- errors ------------------------------------------------------------------------
def test_mask_of_wrong_shape_or_dtype_raises(any_backend, float64):
    m = _mha()
    x = _randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"does not broadcast.*\(B, H, Tq, Tk\) = \(2, 2, 3, 3\)"):
        m(x, mask=causal_mask(4))
    with pytest.raises(ValueError, match="does not broadcast"):
        m(x, mask=_dev(np.ones((3, 2, 1, 3), dtype=bool)))
    with pytest.raises(ValueError, match="boolean"):
        m(x, mask=_dev(np.ones((3, 3))))


def test_wrong_d_model_raises(any_backend, float64):
    m = _mha(D=4)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=4\), got \(2, 3, 5\)"):
        m(_randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"d_model=4"):
        m(_randn(3, 4))
    with pytest.raises(ValueError, match=r"context must have shape \(B, T, d_model=4\)"):
        m(_randn(2, 3, 4), context=_randn(2, 5, 3))
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(5, 2)


def test_backward_before_forward_raises():
    with pytest.raises(RuntimeError, match=r"backward\(\) was called before forward\(\)"):
        MultiHeadAttention(4, 2).backward(np.zeros((1, 2, 4)))


def test_backward_through_cached_cross_attention_raises(any_backend, float64):
    m = _mha()
    cache = KVCache()
    ctx = _randn(1, 4, 4)
    m(_randn(1, 1, 4), context=ctx, kv_cache=cache)
    m(_randn(1, 1, 4), context=ctx, kv_cache=cache)  # reuses the static keys/values
    with pytest.raises(RuntimeError, match="cached"):
        m.backward(_randn(1, 1, 4))


# -- KV cache ----------------------------------------------------------------------
def test_kvcache_append_grow_and_views(any_backend, float64):
    g = np.random.default_rng(0)
    cache = KVCache()
    ks, vs = [], []
    for n in (3, 1, 14, 20):  # crosses the initial capacity of 16, then doubles again
        k, v = g.standard_normal((2, 2, n, 3)), g.standard_normal((2, 2, n, 5))
        ks.append(k)
        vs.append(v)
        k_all, v_all = cache.append(_dev(k), _dev(v))
        np.testing.assert_array_equal(_host(k_all), np.concatenate(ks, axis=2))
        np.testing.assert_array_equal(_host(v_all), np.concatenate(vs, axis=2))
        assert cache.length == sum(a.shape[2] for a in ks)
        assert cache.k.shape[0] >= cache.length
    assert cache.length == 38 and cache.k.shape[0] == 64  # capacity 16 -> 32 -> 64 (doubling)


def test_kvcache_is_time_major_and_its_filled_positions_one_block(any_backend, float64):
    """The buffers are (capacity, B, H, d): a step's keys of every sequence and head lie
    together, and the filled positions are one contiguous block (what the fast set reads)."""
    cache = KVCache(capacity=10)
    k, v = _randn(3, 2, 4, 5), _randn(3, 2, 4, 6, seed=1)
    k_all, v_all = cache.append(k, v)
    assert cache.k.shape[1:] == (3, 2, 5) and cache.v.shape[1:] == (3, 2, 6)
    np.testing.assert_array_equal(_host(cache.k)[:4], _host(k).transpose(2, 0, 1, 3))
    np.testing.assert_array_equal(_host(cache.v)[:4], _host(v).transpose(2, 0, 1, 3))
    assert k_all.transpose(2, 0, 1, 3).flags.c_contiguous and v_all.transpose(2, 0, 1, 3).flags.c_contiguous
    assert k_all.shape == (3, 2, 4, 5) and v_all.shape == (3, 2, 4, 6)


def test_kvcache_append_writes_in_place_until_full(any_backend, float64):
    cache = KVCache()
    cache.append(_randn(1, 1, 2, 2), _randn(1, 1, 2, 2))
    buf = cache.k
    cache.append(_randn(1, 1, 3, 2, seed=1), _randn(1, 1, 3, 2, seed=1))
    assert cache.k is buf  # no copy while the capacity suffices


def test_kvcache_with_a_capacity_allocates_once_then_grows_past_it(any_backend, float64):
    """On the CPU the first buffer holds the capacity; on a device (the stand-in here)
    the capacity is not reserved up front and the buffer doubles from 16."""
    g = np.random.default_rng(1)
    cache = KVCache(capacity=40)
    ks = [g.standard_normal((2, 3, 1, 4)) for _ in range(41)]  # one position a step, one past the capacity
    cache.append(_dev(ks[0]), _dev(ks[0]))
    first = 40 if backend.name() == "numpy" else 16
    buf = cache.k
    assert buf.shape == (first, 2, 3, 4)
    for k in ks[1:first]:
        cache.append(_dev(k), _dev(k))
    assert cache.k is buf  # never reallocated, never copied, up to the capacity
    for k in ks[first:]:
        k_all, _ = cache.append(_dev(k), _dev(k))
    assert cache.k.shape[0] == (80 if first == 40 else 64) and cache.length == 41
    np.testing.assert_array_equal(_host(k_all), np.concatenate(ks, axis=2))


def test_kvcache_reorder_keeps_the_capacity_and_the_filled_rows(any_backend, float64):
    cache = KVCache(capacity=64)
    k, v = _randn(3, 2, 5, 2), _randn(3, 2, 5, 2, seed=1)
    cache.append(k, v)
    cap = cache.k.shape[0]
    cache.reorder(_dev(np.array([1, 1, 0, 2])))  # beam search may repeat rows and change their number
    assert cache.k.shape == (cap, 4, 2, 2) and cache.v.shape == (cap, 4, 2, 2) and cache.length == 5
    np.testing.assert_array_equal(_host(cache.keys()), _host(k)[[1, 1, 0, 2]])
    np.testing.assert_array_equal(_host(cache.values()), _host(v)[[1, 1, 0, 2]])


def test_decoding_states_hold_max_len_positions():
    from minitransformer.models import DecoderLM, DecoderLMConfig
    model = DecoderLM(DecoderLMConfig(vocab_size=9, max_len=23, d_model=8, n_heads=2, n_layers=2, d_ff=16))
    state = model.init_state()
    model.step(np.array([[1], [1]]), state)
    assert [kv.k.shape[0] for kv in state["caches"]] == [23, 23]


def test_kvcache_reorder(any_backend, float64):
    cache = KVCache()
    k, v = _randn(3, 2, 4, 2), _randn(3, 2, 4, 2, seed=1)
    cache.append(k, v)
    index = _dev(np.array([2, 0, 0]))
    cache.reorder(index)
    k2, v2 = cache.append(_randn(3, 2, 1, 2, seed=2), _randn(3, 2, 1, 2, seed=3))
    np.testing.assert_array_equal(_host(k2)[:, :, :4], _host(k)[[2, 0, 0]])
    np.testing.assert_array_equal(_host(v2)[:, :, :4], _host(v)[[2, 0, 0]])
    assert cache.length == 5
    KVCache().reorder(index)  # an empty cache has nothing to reorder


def test_kv_cached_decoding_matches_full_causal_attention(any_backend, float64):
    for d_head in (None, 4):
        m = _mha(d_head=d_head)
        x = _randn(2, 6, 4)
        full = _host(m(x, mask=causal_mask(6)))
        cache = KVCache()
        steps = []
        for start, stop in [(0, 2), (2, 3), (3, 6)]:  # a prompt, then one token, then three
            mask = causal_mask(stop - start, stop)
            steps.append(_host(m(x[:, start:stop], mask=mask, kv_cache=cache)))
        np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-10, atol=1e-12)


def test_kv_cached_decoding_with_a_fully_masked_row_matches_the_full_forward(any_backend, float64):
    """Sequence 1's query 2 sees no key: step by step through the cache, its row is the projection's
    bias (zeros from attention) as in the full forward, never NaN."""
    m = _mha()
    x = _randn(2, 6, 4, seed=3)
    mask = np.broadcast_to(np.tril(np.ones((6, 6), bool)), (2, 1, 6, 6)).copy()  # (2, 1, 6, 6)
    mask[1, :, 2, :] = False
    full = _host(m(x, mask=_dev(mask)))  # (2, 6, 4)
    cache = KVCache()
    steps = [_host(m(x[:, t:t + 1], mask=_dev(mask[:, :, t:t + 1, :t + 1]), kv_cache=cache)) for t in range(6)]
    stepped = np.concatenate(steps, axis=1)  # (2, 6, 4)
    assert np.isfinite(stepped).all()
    np.testing.assert_allclose(stepped, full, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stepped[1, 2], _host(m.proj.bias.data), rtol=0, atol=1e-12)


def test_cached_cross_attention_reuses_static_keys(any_backend, float64):
    m = _mha()
    ctx = _randn(2, 5, 4, seed=1)
    x = _randn(2, 3, 4)
    full = _host(m(x, context=ctx))
    cache = KVCache()
    outs = [_host(m(x[:, t:t + 1], context=ctx, kv_cache=cache)) for t in range(3)]
    assert cache.static and cache.length == 5
    np.testing.assert_allclose(np.concatenate(outs, axis=1), full, rtol=1e-10, atol=1e-12)
