"""The constraint hook of greedy() and sample(): banned tokens are never chosen, a row
with nothing allowed ends with EOS, and a constraint that bans nothing changes nothing."""
import numpy as np
import pytest

from minitransformer.generate import Constraint, greedy, sample
from minitransformer.models import DecoderLM, DecoderLMConfig

V, PAD, BOS, EOS = 9, 0, 1, 2


class Fixed(Constraint):
    """Bans the same tokens at every step; records what it was told."""

    def __init__(self, banned_ids=()):
        self.banned_ids = list(banned_ids)
        self.started, self.seen = None, []

    def start(self, prefix, max_len):
        self.started = (prefix.copy(), max_len)

    def banned(self):
        mask = np.zeros((self.started[0].shape[0], V), dtype=bool)
        mask[:, self.banned_ids] = True
        return mask

    def advance(self, tokens):
        self.seen.append(tokens.copy())


def lm():
    return DecoderLM(DecoderLMConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=1, d_ff=32, seed=5))


def test_banning_nothing_changes_nothing():
    model = lm()
    hook = Fixed()
    np.testing.assert_array_equal(sample(model, batch_size=20, rng=3),
                                  sample(model, batch_size=20, rng=3, constraint=hook))
    assert hook.started[0].shape == (20, 1) and hook.started[1] == 16
    assert all(t.shape == (20,) for t in hook.seen)


@pytest.mark.parametrize("decode", [greedy, lambda m, **kw: sample(m, rng=0, **kw)])
def test_banned_tokens_are_never_chosen(decode):
    ids = decode(lm(), batch_size=20, constraint=Fixed([3, 4, 5, EOS]))
    assert not np.isin(ids[:, 1:], [3, 4, 5, EOS, BOS]).any()


def test_a_row_with_nothing_allowed_ends_with_eos():
    ids = sample(lm(), batch_size=4, rng=0, constraint=Fixed(range(V)))
    np.testing.assert_array_equal(ids, np.array([[BOS, EOS]] * 4))


def test_a_mask_of_the_wrong_shape_is_refused():
    class Wrong(Fixed):
        def banned(self):
            return np.zeros((1, V + 1), dtype=bool)
    with pytest.raises(ValueError, match="shape"):
        sample(lm(), batch_size=2, rng=0, constraint=Wrong())
