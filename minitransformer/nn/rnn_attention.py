r"""Attention over encoder states, as the recurrent encoder-decoders had it: Bahdanau's
additive form and Luong's multiplicative one, each forward above its backward.

An LSTM encoder reads the source into states :math:`E = (e_1, \dots, e_S)`; without
attention the decoder sees only the last one, a single vector for the whole sentence.
Attention lets each decoder step look back at all of them: it scores every encoder
state against the decoder's state :math:`s`, turns the scores into weights with a
softmax, and reads their weighted sum, the *context* :math:`\mathrm{ctx}`:

.. math::

    \text{additive (Bahdanau et al. 2015):}\quad
        \mathrm{score}_j &= v^\top \tanh(s W_q + e_j W_k) \\
    \text{multiplicative (Luong et al. 2015, "general"):}\quad
        \mathrm{score}_j &= s\, W\, e_j^\top \\
    \alpha &= \mathrm{softmax}(\mathrm{score}) \text{ over the unmasked } j,
    \qquad \mathrm{ctx} = \textstyle\sum_j \alpha_j e_j

Multiplicative attention with :math:`W = I` is the dot product of the transformer's
attention (:mod:`minitransformer.nn.attention`), before the :math:`1/\sqrt{d}` scale,
the separate value projection and the several heads: the step from here to there is
short. Shapes: :math:`s` (B, Hd), :math:`E` (B, S, He), mask (B, S) boolean (True =
may attend: the source's real tokens). A row with no real token gets zero weights and
a zero context, never NaN (the softmax of :mod:`minitransformer.nn.softmax`), and a
masked state gets exactly zero weight and zero gradient.
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.module import Module, Parameter
from minitransformer.nn.softmax import SoftmaxCache, softmax_backward, softmax_forward

__all__ = ["additive_keys_forward", "additive_keys_backward", "additive_attention_forward",
           "additive_attention_backward",
           "multiplicative_attention_forward", "multiplicative_attention_backward", "EncoderAttention"]


def _masked_scores(scores, mask):
    """Scores (B, S) with -inf where ``mask`` (B, S) is False (or as they are, without a mask)."""
    return scores if mask is None else xp.where(mask, scores, -xp.inf)  # (B, S)


def _context_backward(dctx, alpha, E):
    r"""The part both forms share: :math:`ctx = \sum_j \alpha_j e_j`. Returns :math:`d\alpha` (B, S) and
    dE's share (B, S, He). dctx: (B, He); alpha: (B, S); E: (B, S, He)."""
    dalpha = xp.einsum("bh,bsh->bs", dctx, E)  # (B, S)
    dE = alpha[:, :, None] * dctx[:, None, :]  # (B, S, He)
    return dalpha, dE


# ---------------------------------------------------------------------------
# Additive (Bahdanau)
# ---------------------------------------------------------------------------
class AdditiveKeysCache(NamedTuple):
    """What :func:`additive_keys_backward` needs."""

    E: object  # (B, S, He) the encoder states: dW_k = E^T dK
    Wk: object  # (He, A): dE = dK W_k^T


def additive_keys_forward(E, Wk):
    r"""The encoder's side of every additive score, :math:`K = E W_k`: the same at every
    decoder step, so it is computed once per source, not once per step (as Bahdanau et
    al. precompute it). E: (B, S, He); Wk: (He, A). Returns ``(K (B, S, A), cache)``."""
    return E @ Wk, AdditiveKeysCache(E, Wk)  # (B, S, A)


def additive_keys_backward(dK, cache: AdditiveKeysCache):
    r"""Gradients of :func:`additive_keys_forward` for :math:`dK` (B, S, A), the keys'
    gradient summed over every decoder step that read them: :math:`dE = dK\,W_k^\top`
    (B, S, He) and :math:`dW_k = \sum_{b,j} e_{bj}^\top dK_{bj}` (He, A)."""
    E, Wk = cache
    return dK @ Wk.T, xp.einsum("bsh,bsa->ha", E, dK)  # (B, S, He), (He, A)


class AdditiveAttentionCache(NamedTuple):
    """What :func:`additive_attention_backward` needs."""

    s: object  # (B, Hd) the decoder state: dW_q = s^T du
    E: object  # (B, S, He) the encoder states: the context's gradient
    u: object  # (B, S, A) tanh(s W_q + k_j): its derivative is 1 - u^2
    alpha: SoftmaxCache  # the weights (B, S), for the softmax's backward
    Wq: object  # (Hd, A)
    v: object  # (A,)


def additive_attention_forward(s, E, K, Wq, v, mask=None):
    r"""Bahdanau's attention for one decoder step (module docstring), with the keys
    :math:`k_j = e_j W_k` given (:func:`additive_keys_forward`, once per source).

    Args:
        s: (B, Hd) the decoder state. E: (B, S, He) the encoder states. K: (B, S, A) their keys.
        Wq: (Hd, A), v: (A,) the scorer's other weights. mask: (B, S) bool or None.

    Returns:
        ``((ctx (B, He), alpha (B, S)), cache)``.
    """
    u = xp.tanh((s @ Wq)[:, None, :] + K)  # (B, S, A)
    scores = _masked_scores(u @ v, mask)  # (B, S)
    alpha, alpha_cache = softmax_forward(scores, axis=-1)  # (B, S)
    ctx = xp.einsum("bs,bsh->bh", alpha, E)  # (B, He)
    return (ctx, alpha), AdditiveAttentionCache(s, E, u, alpha_cache, Wq, v)


def additive_attention_backward(dctx, dalpha_out, cache: AdditiveAttentionCache):
    r"""Gradients of :func:`additive_attention_forward`.

    With :math:`a_j = s W_q + k_j` and :math:`u_j = \tanh a_j`: :math:`d\,\mathrm{score}`
    from the softmax's backward, :math:`du_j = d\,\mathrm{score}_j\, v`,
    :math:`da_j = du_j (1 - u_j^2)`, then :math:`ds = (\sum_j da_j) W_q^\top`,
    :math:`dk_j = da_j`, :math:`de_j = \alpha_j\, d\mathrm{ctx}` (the keys' share of
    :math:`de_j` comes later, from :func:`additive_keys_backward`),
    :math:`dW_q = s^\top \sum_j da_j`, :math:`dv = \sum_{b,j} d\,\mathrm{score}_{bj}\, u_{bj}`.

    Args:
        dctx: (B, He); dalpha_out: (B, S) or None (the weights' own gradient, if used).

    Returns:
        ``(ds, dE, dK, dWq, dv)`` with the shapes of the inputs.
    """
    s, E, u, alpha_cache, Wq, v = cache
    dalpha, dE = _context_backward(dctx, alpha_cache.p, E)  # (B, S), (B, S, He)
    if dalpha_out is not None:
        dalpha = dalpha + dalpha_out
    dscore = softmax_backward(dalpha, alpha_cache)  # (B, S): exactly 0 where masked (alpha = 0)
    dK = dscore[:, :, None] * v * (1.0 - u * u)  # (B, S, A) = da, the gradient of each a_j
    da_sum = dK.sum(axis=1)  # (B, A): s W_q is added to every j
    ds = da_sum @ Wq.T  # (B, Hd)
    dWq = s.T @ da_sum  # (Hd, A)
    dv = xp.einsum("bs,bsa->a", dscore, u)  # (A,)
    return ds, dE, dK, dWq, dv


# ---------------------------------------------------------------------------
# Multiplicative (Luong, "general")
# ---------------------------------------------------------------------------
class MultiplicativeAttentionCache(NamedTuple):
    """What :func:`multiplicative_attention_backward` needs."""

    s: object  # (B, Hd) the decoder state: dW = s^T (sum_j dscore_j e_j)
    E: object  # (B, S, He) the encoder states
    q: object  # (B, He) s W, the query every e_j is scored against: de_j += dscore_j q
    alpha: SoftmaxCache  # the weights (B, S)
    W: object  # (Hd, He)


def multiplicative_attention_forward(s, E, W, mask=None):
    r"""Luong's "general" attention for one decoder step: score_j = (s W) . e_j.

    Args:
        s: (B, Hd). E: (B, S, He). W: (Hd, He). mask: (B, S) bool or None.

    Returns:
        ``((ctx (B, He), alpha (B, S)), cache)``.
    """
    q = s @ W  # (B, He)
    scores = _masked_scores(xp.einsum("bh,bsh->bs", q, E), mask)  # (B, S)
    alpha, alpha_cache = softmax_forward(scores, axis=-1)  # (B, S)
    ctx = xp.einsum("bs,bsh->bh", alpha, E)  # (B, He)
    return (ctx, alpha), MultiplicativeAttentionCache(s, E, q, alpha_cache, W)


def multiplicative_attention_backward(dctx, dalpha_out, cache: MultiplicativeAttentionCache):
    r"""Gradients of :func:`multiplicative_attention_forward`: with
    :math:`g = \sum_j d\,\mathrm{score}_j e_j` (B, He), :math:`dq = g`, :math:`ds = g W^\top`,
    :math:`dW = s^\top g`, and :math:`de_j \mathrel{+}= d\,\mathrm{score}_j\, q`.

    Returns ``(ds, dE, dW)``."""
    s, E, q, alpha_cache, W = cache
    dalpha, dE = _context_backward(dctx, alpha_cache.p, E)  # (B, S), (B, S, He)
    if dalpha_out is not None:
        dalpha = dalpha + dalpha_out
    dscore = softmax_backward(dalpha, alpha_cache)  # (B, S)
    g = xp.einsum("bs,bsh->bh", dscore, E)  # (B, He) = dq
    dE += dscore[:, :, None] * q[:, None, :]  # (B, S, He)
    return g @ W.T, dE, s.T @ g


# ---------------------------------------------------------------------------
# The layer: either form, with its weights
# ---------------------------------------------------------------------------
class EncoderAttention(Module):
    """Attention of a decoder state (B, Hd) over encoder states (B, S, He), ``kind``
    ``"additive"`` (weights ``Wq`` (Hd, A), ``Wk`` (He, A), ``v`` (A,)) or
    ``"multiplicative"`` (``W`` (Hd, He)).

    A recurrent decoder attends once per target step, so the model keeps one cache per
    step: :meth:`step_forward` returns it and :meth:`step_backward` takes it back
    (``forward``/``backward`` are the same for a single step, with the cache kept here).
    The additive form's keys :math:`E W_k` are the same at every step: the model computes
    them once (:meth:`keys`), passes them to every step, adds up the keys' gradients that
    :meth:`step_backward` returns, and hands the sum to :meth:`keys_backward` once.
    """

    def __init__(self, kind: str, d_query: int, d_state: int, d_attn: int | None = None,
                 rng: backend.RNG | None = None):
        if kind not in ("additive", "multiplicative"):
            raise ValueError(f"EncoderAttention: kind must be 'additive' or 'multiplicative', got {kind!r}")
        rng = backend.as_rng(rng)
        self.kind = kind
        if kind == "additive":
            A = d_attn or d_state
            self.Wq = Parameter(rng.normal((d_query, A), std=d_query ** -0.5))  # (Hd, A)
            self.Wk = Parameter(rng.normal((d_state, A), std=d_state ** -0.5))  # (He, A)
            self.v = Parameter(rng.normal((A,), std=A ** -0.5))  # (A,)
        else:
            self.W = Parameter(rng.normal((d_query, d_state), std=(d_query * d_state) ** -0.25))  # (Hd, He)

    def extra_repr(self):
        return self.kind

    def keys(self, E):
        """``(K, keys_cache)``: the additive form's keys E W_k (B, S, A), once per source, and
        what :meth:`keys_backward` needs; ``(None, None)`` for the multiplicative form."""
        return additive_keys_forward(E, self.Wk.data) if self.kind == "additive" else (None, None)

    def step_forward(self, s, E, mask=None, keys=None):
        """((ctx (B, He), alpha (B, S)), cache) of one decoder step; ``keys``: the K of
        :meth:`keys` (computed here when not given)."""
        if self.kind == "additive":
            K = self.keys(E)[0] if keys is None else keys  # (B, S, A)
            return additive_attention_forward(s, E, K, self.Wq.data, self.v.data, mask)
        return multiplicative_attention_forward(s, E, self.W.data, mask)

    def step_backward(self, dctx, cache, dalpha=None):
        """Accumulates the weights' gradients; returns (ds (B, Hd), dE (B, S, He), dK): dK
        (B, S, A) the keys' gradient of this step (additive; sum them for :meth:`keys_backward`),
        None for the multiplicative form."""
        if self.kind == "additive":
            ds, dE, dK, dWq, dv = additive_attention_backward(dctx, dalpha, cache)
            self.Wq.grad += dWq
            self.v.grad += dv
            return ds, dE, dK
        ds, dE, dW = multiplicative_attention_backward(dctx, dalpha, cache)
        self.W.grad += dW
        return ds, dE, None

    def keys_backward(self, dK, keys_cache: AdditiveKeysCache):
        """For dK (B, S, A), the keys' gradient summed over the steps, and the keys' cache of
        :meth:`keys`: accumulates dW_k and returns the encoder states' share dE (B, S, He)."""
        dE, dWk = additive_keys_backward(dK, keys_cache)  # (B, S, He), (He, A)
        self.Wk.grad += dWk
        return dE

    def forward(self, s, E, mask=None):
        K, keys_cache = self.keys(E)  # (B, S, A) or None
        (ctx, alpha), cache = self.step_forward(s, E, mask, keys=K)
        self.cache = (cache, keys_cache)
        return ctx

    def backward(self, dctx):
        """One step's gradients: (ds (B, Hd), dE (B, S, He)), the keys' share included."""
        cache, keys_cache = self._require_cache()
        ds, dE, dK = self.step_backward(dctx, cache)
        if dK is not None:
            dE = dE + self.keys_backward(dK, keys_cache)  # (B, S, He)
        return ds, dE
