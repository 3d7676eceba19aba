"""Fast layer normalisation: the reference's math with fewer passes over memory.

Row sums are einsums (one read of the rows, no (..., D) temporary, several times
faster than ``.mean(axis=-1)`` on rows this short), and temporaries that are not
needed again are overwritten in place. The cache is the reference's.
"""
from __future__ import annotations

from minitransformer.backend import xp
from minitransformer.nn.layernorm import LayerNormCache


def layernorm_forward(x, w, b, eps: float = 1e-5):
    """As :func:`minitransformer.nn.layernorm.layernorm_forward`."""
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"layernorm: input has last dimension {x.shape[-1]}, expected {w.shape[0]}")
    D = x.shape[-1]
    # Row sums as einsums: one read of the rows, no (..., D) temporary, and several
    # times faster than .mean(axis=-1) / (a * b).mean(axis=-1) on rows this short.
    mu = xp.einsum("...d->...", x)[..., None] / D  # (..., 1)
    xc = x - mu  # (..., D)
    var = xp.einsum("...d,...d->...", xc, xc)[..., None] / D  # (..., 1), biased: divide by D
    rstd = 1.0 / xp.sqrt(var + eps)  # (..., 1)
    xhat = xc  # (..., D), in place: x - mu is not needed again
    xhat *= rstd
    y = xhat * w  # (..., D)
    y += b
    return y, LayerNormCache(xhat, rstd, w)


def layernorm_backward(dy, cache):
    """As :func:`minitransformer.nn.layernorm.layernorm_backward`."""
    xhat, rstd, w = cache
    D = xhat.shape[-1]
    dy2 = dy.reshape(-1, D)  # (N, D)
    xhat2 = xhat.reshape(-1, D)  # (N, D), in the forward pass this was the normalised input
    dw = xp.einsum("nd,nd->d", dy2, xhat2)  # (D,), sum over rows of dy * xhat
    db = xp.einsum("nd->d", dy2)  # (D,), sum over rows of dy
    g = dy * w  # (..., D), gradient w.r.t. xhat
    g_mean = xp.einsum("...d->...", g)[..., None] / D  # (..., 1)
    gx_mean = xp.einsum("...d,...d->...", g, xhat)[..., None] / D  # (..., 1)
    dx = g  # (..., D), in place: g is not needed again
    dx -= g_mean
    dx -= xhat * gx_mean
    dx *= rstd
    return dx, dw, db
