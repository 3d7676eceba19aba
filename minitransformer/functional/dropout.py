r"""Inverted dropout.

In training each element is kept with probability :math:`1-p` and scaled by
:math:`1/(1-p)`, so the expected output equals the input and evaluation needs
no rescaling:

.. math:: y = x \odot m,\qquad m_i = \frac{\mathbb{1}[u_i \ge p]}{1-p},\ u_i \sim U[0,1);
          \qquad dx = dy \odot m.
"""
from __future__ import annotations


def make_dropout_mask(shape, p: float, rng, dtype):
    """A (shape) array of 0 and 1/(1-p), drawn from ``rng`` (a :class:`backend.RNG`)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    keep = rng.random(shape, dtype=dtype) >= p  # (shape) bool
    return keep.astype(dtype) * (1.0 / (1.0 - p))  # (shape)


def dropout_forward(x, p: float, rng=None, mask=None):
    """Apply dropout with drop probability ``p``.

    Args:
        x: (...) input.
        p: drop probability in [0, 1). ``p == 0`` is the identity.
        rng: a :class:`minitransformer.backend.RNG` to draw the mask from, or
        mask: a ready (...) keep-mask of 0 and 1/(1-p) (for tests and replays).

    Returns:
        y: (...); cache: the mask (or None for the identity).
    """
    if mask is None:
        if p == 0.0:
            return x, None
        if rng is None:
            raise ValueError("dropout: pass rng (a backend.RNG) or a ready mask")
        mask = make_dropout_mask(x.shape, p, rng, x.dtype)  # (...)
    elif mask.shape != x.shape:
        raise ValueError(f"dropout: mask shape {tuple(mask.shape)} != input shape {tuple(x.shape)}")
    return x * mask, mask


def dropout_backward(dy, cache):
    """dx = dy * mask (the identity when the forward was the identity)."""
    return dy if cache is None else dy * cache
