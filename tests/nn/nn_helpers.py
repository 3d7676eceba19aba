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
