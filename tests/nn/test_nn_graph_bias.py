"""Graph bias: the lookup's kernels (each molecule reads its own codes, the scatter-add over the
batch, gradient checks), the module (accumulation, errors); inside multi-head attention and an
encoder block (gradient checks under both kernel sets, beside a relative-position bias), and the
attention's refusals (relations missing, given to a layer without a graph bias, with a context)."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import graph_bias_backward, graph_bias_forward, padding_mask
from minitransformer.gradcheck import check_kernel, check_module
from minitransformer.nn import EncoderBlock, GraphBias, MultiHeadAttention, RelativePositionBias, TransformerOptions


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return backend.to_numpy(a)


def _randn(*shape, seed=0, scale=1.0):
    return backend.asarray(np.random.default_rng(seed).standard_normal(shape) * scale)


def _codes(B, T, R, seed=0):
    return _dev(np.random.default_rng(seed).integers(0, R, size=(B, T, T)).astype(np.uint8))


# -- the lookup ------------------------------------------------------------------------
def test_forward_reads_each_molecules_own_relation(any_backend, float64):
    H, R, B, T = 3, 5, 2, 4
    table, rel = _randn(H, R), _codes(B, T, R)
    bias, cache = graph_bias_forward(table, rel)
    assert bias.shape == (B, H, T, T)
    t, r, b = _host(table), _host(rel), _host(bias)
    for m in range(B):
        for i in range(T):
            for j in range(T):
                np.testing.assert_array_equal(b[m, :, i, j], t[:, r[m, i, j]])


def test_backward_sums_every_logit_of_a_relation_over_the_batch(any_backend, float64):
    H, R, B, T = 2, 4, 3, 5
    rel = _codes(B, T, R, seed=1)
    _, cache = graph_bias_forward(_randn(H, R), rel)
    dbias = np.random.default_rng(2).standard_normal((B, H, T, T))
    dtable = _host(graph_bias_backward(_dev(dbias), cache))
    r = _host(rel)
    for c in range(R):
        np.testing.assert_allclose(dtable[:, c], dbias.transpose(1, 0, 2, 3)[:, r == c].sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(dtable.sum(axis=1), dbias.sum(axis=(0, 2, 3)), rtol=1e-12)  # nothing lost


def test_gradcheck_kernel(any_backend, float64):
    report = check_kernel(graph_bias_forward, graph_bias_backward,
                          {"table": _randn(2, 6, seed=3), "relations": _codes(2, 4, 6, seed=4)}, {})
    assert [c.name for c in report.checks] == ["table"]


def test_shapes_are_checked(any_backend, float64):
    with pytest.raises(ValueError, match=r"table must be \(H, R\) and relations \(B, T, T\)"):
        graph_bias_forward(_randn(2, 3), _codes(2, 3, 3)[0])
    with pytest.raises(ValueError, match=r"relations must have shape \(B, T, T\)"):
        GraphBias(2, 3)(_dev(np.zeros((2, 3, 4), dtype=np.uint8)))
    with pytest.raises(ValueError, match="n_relations must be an integer >= 1"):
        GraphBias(2, 0)


def test_module_accumulates(any_backend, float64):
    m = GraphBias(3, 5, rng=backend.RNG(1))
    assert [(n, p.shape) for n, p in m.named_parameters()] == [("table", (3, 5))]
    m(_codes(2, 4, 5))
    d = _randn(2, 3, 4, 4, seed=2)
    m.backward(d)
    first = _host(m.table.grad).copy()
    assert np.any(first != 0)
    m.backward(d)
    np.testing.assert_allclose(_host(m.table.grad), 2 * first, rtol=1e-14)  # +=, not =


# -- inside attention and a block --------------------------------------------------------
def _mha(position=False, H=2, R=5, seed=0):
    pb = RelativePositionBias(H, max_distance=2, init_std=0.5, rng=backend.RNG(seed + 50)) if position else None
    gb = GraphBias(H, R, init_std=0.5, rng=backend.RNG(seed + 60))
    return MultiHeadAttention(4, H, rng=backend.RNG(seed), position_bias=pb, graph_bias=gb)


@pytest.mark.parametrize("position", [False, True], ids=["graph", "graph-beside-relative"])
def test_gradcheck_attention_with_graph_bias(any_backend, float64, position):
    ids = np.array([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])  # the second molecule padded
    m = _mha(position)
    report = check_module(m, _randn(2, 5, 4), kwargs={"mask": padding_mask(_dev(ids), 0),
                                                      "relations": _codes(2, 5, 5, seed=7)})
    names = {c.name for c in report.checks}
    assert names == {"input", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias", "graph_bias.table"} | (
        {"position_bias.table"} if position else set())


def test_gradcheck_encoder_block_with_graph_bias(any_backend, float64):
    c = TransformerOptions(d_model=4, n_heads=2, d_ff=6, relative_bias="learned", relative_max_distance=2)
    block = EncoderBlock(c, rng=backend.RNG(3), graph_relations=6)
    for _, p in block.named_parameters():
        p.data = p.data + _randn(*p.shape, seed=9, scale=0.3)
    report = check_module(block, _randn(2, 4, 4), kwargs={"relations": _codes(2, 4, 6, seed=8)})
    assert "attn.graph_bias.table" in {c.name for c in report.checks}


def test_attention_refuses_relations_it_cannot_use(float64):
    x = _randn(1, 3, 4)
    with pytest.raises(ValueError, match="this layer has a graph bias; give each molecule's relations"):
        _mha()(x)
    with pytest.raises(ValueError, match="relations were given, but this layer has no graph bias"):
        MultiHeadAttention(4, 2)(x, relations=_codes(1, 3, 5))
    with pytest.raises(ValueError, match="the graph bias has 3 heads, the attention 2"):
        MultiHeadAttention(4, 2, graph_bias=GraphBias(3, 5))
    with pytest.raises(ValueError, match="a graph bias is for self-attention over whole molecules"):
        _mha()(x, context=x, relations=_codes(1, 3, 5))
    c = TransformerOptions(d_model=4, n_heads=2, d_ff=6)
    from minitransformer.nn import CausalBlock
    with pytest.raises(ValueError, match="a graph bias is for an encoder"):
        CausalBlock(c, graph_relations=5)
