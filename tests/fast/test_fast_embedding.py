"""The fast embedding backward (minitransformer/fast/embedding.py) equals the reference."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from fast_helpers import assert_close, assert_unchanged, covers, dev, FAST, REFERENCE, SETTINGS


# ---------------------------------------------------------------------------
# Embedding backward
# ---------------------------------------------------------------------------
@st.composite
def embedding_cases(draw):
    return {
        "shape": tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))),
        "V": draw(st.integers(1, 12)),
        "D": draw(st.integers(1, 6)),
        "distinct": draw(st.integers(1, 12)),  # ids drawn from this many values: many repeats
        "dtype": draw(st.sampled_from(["int64", "int32", "uint8"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _check_embedding(c):
    g = np.random.default_rng(c["seed"])
    V, D = c["V"], c["D"]
    pool = g.choice(V, size=min(V, c["distinct"]), replace=False)
    ids = g.choice(pool, size=c["shape"]).astype(c["dtype"])
    W = g.standard_normal((V, D))
    dout = g.standard_normal(c["shape"] + (D,))
    idsd, Wd, doutd = dev(ids), dev(W), dev(dout)
    _, cache = REFERENCE["embedding_forward"](idsd, Wd)
    assert FAST["embedding_forward"] is REFERENCE["embedding_forward"]
    dW_f = FAST["embedding_backward"](doutd, cache)
    dW_r = REFERENCE["embedding_backward"](doutd, cache)
    assert_unchanged(["ids", "dout"], [idsd, doutd], [ids, dout])
    assert_close("dW", dW_f, dW_r)
    expected = np.zeros((V, D))
    np.add.at(expected, ids.reshape(-1), dout.reshape(-1, D))  # repeated ids sum
    assert_close("dW (against np.add.at)", dW_f, expected)


@covers("embedding_backward")
@SETTINGS
@given(c=embedding_cases())
def test_embedding_backward(any_backend, c):
    _check_embedding(c)


# ---------------------------------------------------------------------------
