"""One seed builds the same model on every backend: initial weights are drawn on the host.

CuPy's random generator is not NumPy's PCG64, so a weight drawn with the device's
generator differs between the CPU and a GPU (found on an H100: the same seed gave
logits 0.2 apart). The strict stand-in draws with another bit generator than
NumPy's, as CuPy does, so these tests fail on the CPU if an initial weight is drawn
on the device again.
"""
import numpy as np
import pytest

from minitransformer import backend


def _on_strict(fn):
    backend.use("strict")
    try:
        return fn()
    finally:
        backend.use("numpy")


def _weights(build):
    strict = _on_strict(lambda: {n: backend.to_numpy(p.data) for n, p in build().named_parameters()})
    numpy = {n: np.asarray(p.data) for n, p in build().named_parameters()}
    return strict, numpy


def test_the_stand_ins_generator_is_not_numpys():
    device = _on_strict(lambda: backend.to_numpy(backend.RNG(3).random((5,))))
    assert not np.allclose(device, backend.RNG(3).random((5,))), "the stand-in must draw like a GPU: other numbers"


@pytest.mark.parametrize("family", ["decoder", "seq2seq", "encoder-relative"])
def test_one_seed_builds_the_same_weights_on_the_stand_in_as_on_numpy(family):
    from minitransformer.models import DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, Seq2Seq
    from minitransformer.models.seq2seq import Seq2SeqConfig
    builds = {
        "decoder": lambda: DecoderLM(DecoderLMConfig(vocab_size=11, max_len=8, d_model=8, n_heads=2, n_layers=2,
                                                     d_ff=16, seed=5)),
        "seq2seq": lambda: Seq2Seq(Seq2SeqConfig(11, 13, d_model=8, n_heads=2, n_enc_layers=1, n_dec_layers=1,
                                                 d_ff=16, max_len=8, seed=5)),
        "encoder-relative": lambda: Encoder(EncoderConfig(vocab_size=11, max_len=8, d_model=8, n_heads=2,
                                                          n_layers=1, d_ff=16, pos="relative", seed=5)),
    }
    strict, numpy = _weights(builds[family])
    assert strict.keys() == numpy.keys()
    for name in numpy:
        gap = np.abs(strict[name] - numpy[name])
        assert np.array_equal(strict[name], numpy[name]), \
            f"{family} {name}: largest difference {gap.max()} at {np.unravel_index(np.argmax(gap), gap.shape)}"


def _draws(rng, n=50) -> set:
    return {float(rng.host().random()) for _ in range(n)}


@pytest.mark.parametrize("a, b", [
    (lambda: backend.RNG(1), lambda: backend.RNG(2)),
    (lambda: backend.RNG(7), lambda: backend.RNG(2**32 + 7)),  # NumPy reads 2**32 + 7 as the words [7, 1]
    (lambda: backend.RNG(5, stream=9), lambda: backend.RNG(5 + 2 * 2**32)),
    (lambda: backend.RNG(3, stream=1), lambda: backend.RNG(3 + 2**32, stream=1)),
    (lambda: backend.RNG(0), lambda: backend.as_rng(np.random.default_rng(0))),  # a Generator's 63-bit seed
], ids=["1-2", "7-(2**32+7)", "5,stream 9-(5+2*2**32)", "stream 1: 3-(3+2**32)", "0-a Generator's"])
def test_streams_of_different_seeds_share_no_draw(a, b):
    """Each draw is seeded by (seed, counter, stream): no two states of different seeds seed one draw."""
    shared = _draws(a()) & _draws(b())
    assert not shared, f"{len(shared)} of 50 draws shared by {a()} and {b()}"


def test_a_seed_of_2_32_or_more_draws_the_same_again_and_resumes_exactly():
    straight = backend.RNG(2**40 + 3)
    draws = [float(straight.host().random()) for _ in range(11)]
    again = backend.RNG(2**40 + 3)
    assert [float(again.host().random()) for _ in range(11)] == draws
    resumed = backend.RNG(0)
    resumed.load_state_dict({"seed": 2**40 + 3, "counter": 10})
    assert float(resumed.host().random()) == draws[10]
    assert len(set(draws)) == 11
