"""The copy (pointer) mechanism (minitransformer/nn/pointer.py): its gradients, checked numerically,
and what the mixture must be: a distribution, the generator's alone with the gate open, the
attention's alone with it shut, no share for a padded source position."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.gradcheck import check_kernel, check_module
from minitransformer.nn.pointer import PointerHead, copy_mix_backward, copy_mix_forward, source_one_hot

SRC = np.array([[1, 5, 7, 5, 2],
                [1, 4, 2, 0, 0]])  # row 0 holds token 5 twice; row 1 ends in padding
V = 9


def _copy_and_mask(dtype=np.float64):
    src = backend.asarray(SRC)
    return source_one_hot(src, V, dtype), backend.asarray(SRC != 0)[:, None, :]  # (B, S, V), (B, 1, S)


def test_copy_mix_gradcheck(any_backend, float64, randn):
    copy, mask = _copy_and_mask()
    check_kernel(copy_mix_forward, copy_mix_backward,
                 {"logits": randn(2, 3, V), "scores": randn(2, 3, 5), "gate_logit": randn(2, 3, 1)},
                 {"copy": copy, "mask": mask})


def test_pointer_head_gradcheck(any_backend, float64, randn):
    head = PointerHead(6, rng=backend.RNG(3))
    copy, mask = _copy_and_mask()
    check_module(head, (randn(2, 3, 6), randn(2, 3, V), randn(2, 5, 6)), kwargs={"copy": copy, "mask": mask},
                 mode="directional", n_directions=3)


def test_the_mixture_is_a_distribution_and_padding_gets_no_share(float64, randn):
    copy, mask = _copy_and_mask()
    out, cache = copy_mix_forward(randn(2, 3, V), randn(2, 3, 5, scale=3.0), randn(2, 3, 1), copy=copy, mask=mask)
    p = backend.to_numpy(np.exp(backend.to_numpy(out)))
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-13)
    a = backend.to_numpy(cache.a)
    assert (a[1, :, 3:] == 0).all(), "a padded source position got a share of the copy attention"
    p_copy = backend.to_numpy(cache.p_copy)
    assert (p_copy[0, :, 5] == a[0, :, 1] + a[0, :, 3]).all(), "a token found twice gets both its shares"


@pytest.mark.parametrize("gate, expected", [(60.0, "generator"), (-60.0, "copy")])
def test_an_open_gate_generates_and_a_shut_one_copies(float64, randn, gate, expected):
    copy, mask = _copy_and_mask()
    logits, scores = randn(2, 3, V), randn(2, 3, 5)
    out, cache = copy_mix_forward(logits, scores, backend.asarray(np.full((2, 3, 1), gate)), copy=copy, mask=mask)
    p = np.exp(backend.to_numpy(out))
    want = backend.to_numpy(cache.p_vocab if expected == "generator" else cache.p_copy)
    np.testing.assert_allclose(p, want, rtol=1e-12, atol=1e-24)  # the other side's share: below e^-60


def test_a_token_the_source_lacks_has_no_probability_once_the_gate_is_shut_and_no_gradient_there(float64):
    copy, mask = _copy_and_mask()
    logits = backend.asarray(np.zeros((2, 1, V)))
    shut = backend.asarray(np.full((2, 1, 1), -800.0))
    out, cache = copy_mix_forward(logits, backend.asarray(np.zeros((2, 1, 5))), shut, copy=copy, mask=mask)
    out = backend.to_numpy(out)
    assert out[0, 0, 8] == np.log(np.finfo(np.float64).tiny)  # token 8 is in no source: clipped, finite
    dlogits, dscores, dgate = copy_mix_backward(backend.asarray(np.ones((2, 1, V))), cache)
    for name, d in (("dlogits", dlogits), ("dscores", dscores), ("dgate", dgate)):
        assert np.isfinite(backend.to_numpy(d)).all(), name


def test_the_one_hot_source_marks_each_position_s_token():
    C = backend.to_numpy(source_one_hot(backend.asarray(SRC), V, np.float32))
    assert C.shape == (2, 5, V) and C.dtype == np.float32
    np.testing.assert_array_equal(C.argmax(axis=-1), SRC)
    np.testing.assert_array_equal(C.sum(axis=-1), 1.0)


def test_keys_given_while_decoding_give_the_same_output_and_no_backward(float64, randn):
    head = PointerHead(6, rng=backend.RNG(3))
    copy, mask = _copy_and_mask()
    h, logits, memory = randn(2, 1, 6), randn(2, 1, V), randn(2, 5, 6)
    full = backend.to_numpy(head(h, logits, memory, copy, mask))
    given = backend.to_numpy(head(h, logits, memory, copy, mask, keys=head.key(memory)))
    np.testing.assert_array_equal(given, full)
    with pytest.raises(RuntimeError, match="given the memory's keys"):
        head.backward(backend.asarray(np.ones((2, 1, V))))
