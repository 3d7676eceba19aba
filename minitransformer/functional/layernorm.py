r"""Layer normalisation over the last axis.

Forward, for one row :math:`x \in \mathbb{R}^D`:

.. math::
    \mu = \tfrac1D \textstyle\sum_i x_i, \quad
    \sigma^2 = \tfrac1D \textstyle\sum_i (x_i-\mu)^2 \ \text{(biased)}, \quad
    \hat x = \frac{x-\mu}{\sqrt{\sigma^2+\epsilon}}, \quad
    y = w \odot \hat x + b .

Backward: with :math:`g = w \odot dy` and :math:`r = 1/\sqrt{\sigma^2+\epsilon}`,

.. math::
    dx = r\left(g - \overline{g} - \hat x\,\overline{g \odot \hat x}\right),\quad
    dw = \textstyle\sum_{\text{rows}} dy \odot \hat x,\quad
    db = \textstyle\sum_{\text{rows}} dy,

where the bar is the mean over the D features of the row. The derivation is in
``docs/backward.md``.
"""
from __future__ import annotations

from minitransformer.backend import xp


def layernorm_forward(x, w, b, eps: float = 1e-5):
    """Normalise each row of ``x`` to zero mean and unit (biased) variance, then scale and shift.

    Args:
        x: (..., D) input.
        w: (D,) gain, initialised to 1.
        b: (D,) bias, initialised to 0.
        eps: added to the variance *inside* the square root.

    Returns:
        y: (..., D).
        cache: ``(xhat, rstd, w)``: the normalised input (..., D) and the reciprocal
        standard deviation (..., 1); together they give every backward term.
    """
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
    return y, (xhat, rstd, w)


def layernorm_backward(dy, cache):
    """Gradients of layer normalisation.

    Args:
        dy: (..., D) upstream gradient.
        cache: from :func:`layernorm_forward`.

    Returns:
        dx: (..., D); dw: (D,); db: (D,).
    """
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
