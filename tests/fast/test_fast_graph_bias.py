"""The fast graph bias (minitransformer/fast/graph_bias.py) equals the reference, compiled and in
NumPy: the lookup entry for entry, the table's gradient within rounding (its sums run in float64),
the same whatever the number of threads."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from fast_helpers import assert_close, assert_unchanged, covers, dev, FAST, REFERENCE, SETTINGS


@st.composite
def graph_cases(draw):
    return {"B": draw(st.integers(1, 4)), "T": draw(st.integers(1, 9)), "H": draw(st.integers(1, 4)),
            "R": draw(st.integers(1, 20)), "dtype": draw(st.sampled_from(["uint8", "int64"])),
            "seed": draw(st.integers(0, 2**32 - 1))}


@covers("graph_bias_forward", "graph_bias_backward")
@SETTINGS
@given(c=graph_cases())
def test_graph_bias(any_backend, compiled_mode, c):
    g = np.random.default_rng(c["seed"])
    B, T, H, R = c["B"], c["T"], c["H"], c["R"]
    rel = g.integers(0, R, size=(B, T, T)).astype(c["dtype"])
    table, dbias = g.standard_normal((H, R)), g.standard_normal((B, H, T, T))
    reld, tabled, dbiasd = dev(rel), dev(table), dev(dbias)
    bias_f, cache_f = FAST["graph_bias_forward"](tabled, reld)
    bias_r, cache_r = REFERENCE["graph_bias_forward"](tabled, reld)
    assert_close("bias", bias_f, bias_r, rtol=0.0, floor=0.0)  # the same lookup
    dtable_f = FAST["graph_bias_backward"](dbiasd, cache_f)
    dtable_r = REFERENCE["graph_bias_backward"](dbiasd, cache_r)
    assert_close("dtable", dtable_f, dtable_r, scale=float(np.abs(dbias).sum()) / max(R, 1))
    assert_close("dtable (a second backward from the same cache)", FAST["graph_bias_backward"](dbiasd, cache_f),
                 dtable_r, scale=float(np.abs(dbias).sum()) / max(R, 1))
    assert_unchanged(["relations", "table", "dbias"], [reld, tabled, dbiasd], [rel, table, dbias])


def test_many_parts_and_any_thread_count_give_the_same_sums(compiled_mode):
    """B * T = 600 (molecule, query) rows: three parts of 256; the sums do not depend on the threads."""
    from minitransformer.fast.engine import parallel
    g = np.random.default_rng(7)
    rel = g.integers(0, 19, size=(5, 120, 120)).astype(np.uint8)
    table, dbias = g.standard_normal((4, 19)).astype(np.float32), g.standard_normal((5, 4, 120, 120)).astype(np.float32)
    ref = REFERENCE["graph_bias_backward"](dbias.astype(np.float64), REFERENCE["graph_bias_forward"](
        table.astype(np.float64), rel)[1])
    saved, outs = parallel.threads(), []
    try:
        for n in (1, 2):
            parallel.set_threads(n)
            bias, cache = FAST["graph_bias_forward"](table, rel)
            outs.append((bias, FAST["graph_bias_backward"](dbias, cache)))
    finally:
        parallel.set_threads(saved)
    for bias, dtable in outs:
        assert bias.dtype == dtable.dtype == np.float32 and bias.flags.c_contiguous
        np.testing.assert_array_equal(bias, table[:, rel].transpose(1, 0, 2, 3))
        np.testing.assert_array_equal(dtable, outs[0][1])
        np.testing.assert_allclose(dtable, ref, rtol=1e-5, atol=1e-4)
