"""Shared by the layer tests (importable: pytest puts this folder on sys.path)."""
from minitransformer.nn.module import Module


class Rewound(Module):
    """Rewinds the wrapped module's random stream before each forward, so every forward
    of a training-mode gradient check draws the same dropout masks."""

    def __init__(self, inner):
        self.inner = inner

    def forward(self, *args, **kwargs):
        self.inner.rng.counter = 0
        return self.inner.forward(*args, **kwargs)

    def backward(self, dout):
        return self.inner.backward(dout)


def opts(d_model: int, n_heads: int = 1, d_ff: int = 8, **options):
    """The :class:`~minitransformer.nn.config.TransformerOptions` a block or feed-forward under test
    is built from, sizes first: ``EncoderBlock(opts(4, 2, 6), rng=...)``."""
    from minitransformer.nn.config import TransformerOptions
    return TransformerOptions(d_model=d_model, n_heads=n_heads, d_ff=d_ff, **options)
