"""Sampling: drawing each next token from the model's distribution, reshaped.

:func:`filter_logits` applies the temperature, top-k and nucleus (top-p) truncation;
:func:`sample` draws one token per row from what is left by inverting its CDF
(:func:`_inverse_cdf_draw`, the reference of :func:`minitransformer.fast.decode.inverse_cdf_draw`),
inside the loop every strategy shares (:func:`~minitransformer.generate.decode.autoregress`).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast import decode as fast_decode
from minitransformer.generate.decode import autoregress, setup_decoding


def _check_sampling_args(temperature, top_k, top_p):
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) \
            or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r} "
                         "(for the most likely token use greedy() or top_k=1)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral)
                              or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 (or None for no limit), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real)
                              or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] (or None for no limit), got {top_p!r}")


def filter_logits(logits, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None):
    r"""Temperature, top-k and nucleus (top-p) truncation, in that order.

    Args:
        logits: (N, V) scores :math:`z`; entries already :math:`-\infty` stay excluded.
        temperature: :math:`\tau > 0`; the distribution becomes
            :math:`\mathrm{softmax}(z/\tau)`: sharper for :math:`\tau < 1`, flatter for
            :math:`\tau > 1`.
        top_k: keep the ``k`` largest logits of each row (all logits tied with the
            k-th largest are kept too), set the rest to :math:`-\infty`.
        top_p: nucleus sampling. With the kept tokens sorted by probability,
            :math:`p_{(1)} \ge p_{(2)} \ge \dots`, keep the shortest head
            :math:`p_{(1)}, \dots, p_{(m)}` with :math:`\sum_{j \le m} p_{(j)} \ge p`, i.e.
            token :math:`(j)` is kept iff the mass strictly before it is
            :math:`< p`. The top token is always kept. Probabilities here are those
            after the temperature and top-k steps.

    Returns:
        (N, V) float64 filtered logits :math:`(z - \max_j z_j)/\tau` with :math:`-\infty`
        at the removed tokens: the row's largest logit is taken off first (softmax does not
        see it), so that a tiny :math:`\tau` cannot overflow to infinity. A NaN logit is a
        removed token (it has no place in the order); a row with :math:`+\infty` logits
        keeps those tokens alone, equally likely (softmax's limit), where
        :math:`\infty - \infty` would make the row NaN and the draw PAD.
    """
    _check_sampling_args(temperature, top_k, top_p)
    z = logits.astype(xp.float64)  # (N, V), a copy: the edits below are in place
    xp.copyto(z, -xp.inf, where=xp.isnan(z))
    top = xp.isposinf(z)  # (N, V)
    xp.copyto(z, -xp.inf, where=top.any(axis=1, keepdims=True) & ~top)  # rows with +inf: only those stay
    xp.copyto(z, 0.0, where=top)
    with np.errstate(over="ignore"):  # a tiny tau sends the others to -inf, as it should
        z = (z - z.max(axis=1, keepdims=True)) / float(temperature)  # (N, V), the largest entry 0
    N, V = z.shape
    if top_k is not None and top_k < V:
        kth = xp.sort(z, axis=1)[:, V - top_k][:, None]  # (N, 1), the k-th largest logit
        z = xp.where(z < kth, -xp.inf, z)  # (N, V)
    if top_p is not None and top_p < 1.0:
        order = xp.argsort(-z, axis=1)  # (N, V), most probable first
        z_sorted = xp.take_along_axis(z, order, axis=1)  # (N, V)
        p_sorted = xp.exp(z_sorted - z_sorted[:, :1])  # (N, V), unnormalised, first entry 1
        p_sorted /= p_sorted.sum(axis=1, keepdims=True)
        mass_before = xp.cumsum(p_sorted, axis=1) - p_sorted  # (N, V), exclusive cumulative sum
        keep_sorted = mass_before < top_p  # (N, V), a prefix of each sorted row
        keep_sorted[:, 0] = True  # the top token survives any rounding
        inverse = xp.argsort(order, axis=1)  # (N, V), the permutation back to vocabulary order
        keep = xp.take_along_axis(keep_sorted, inverse, axis=1)  # (N, V)
        z = xp.where(keep, z, -xp.inf)  # (N, V)
    return z


def _inverse_cdf_draw(z, u):
    r"""One token per row of ``softmax(z)``, from uniforms ``u``.

    With :math:`F_i = \sum_{j \le i} p_j` the CDF, the token is the smallest
    :math:`i` with :math:`F_i > u\,F_{V-1}`, computed as
    :math:`\#\{i : F_i \le u F_{V-1}\}` (tokens of probability 0 are never hit).
    z: (N, V) float64 with at least one finite entry per row; u: (N,) in [0, 1).
    (With the fast set and Numba, :func:`minitransformer.fast.decode.inverse_cdf_draw`
    draws the same tokens in one compiled loop.)
    """
    V = z.shape[1]
    p = xp.exp(z - z.max(axis=1, keepdims=True))  # (N, V), unnormalised probabilities
    cdf = xp.cumsum(p, axis=1)  # (N, V)
    target = u[:, None] * cdf[:, -1:]  # (N, 1)
    tok = (cdf <= target).sum(axis=1)  # (N,)
    last = (V - 1) - (p[:, ::-1] > 0).argmax(axis=1)  # (N,), last token of positive probability
    # (N,) the cap binds only for a target at F (u = 1): for u < 1, u F < F, since F >= 1
    return xp.minimum(tok, last).astype(xp.int64)


def _as_rng(rng) -> backend.RNG:
    """None: a fresh random seed; otherwise :func:`backend.as_rng` (int, Generator, RNG)."""
    if rng is None:
        return backend.RNG(int(np.random.SeedSequence().entropy % (2 ** 63)))
    return backend.as_rng(rng)


def sample(model, batch_size=None, src=None, max_len=None, prompt=None, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, rng=None, use_cache: bool = True,
           constraint=None):
    r"""Ancestral sampling: :math:`y_t \sim \mathrm{softmax}(\tilde z_t)` at every step.

    :math:`\tilde z_t` are the logits after :func:`filter_logits` (temperature
    :math:`\tau`, then top-k, then top-p). Each step draws one uniform per row
    from ``rng`` on the device, :math:`u \in [0,1)^B`, and inverts the CDF of
    each row (vectorised over the batch, no host round trip). The draws do not
    depend on the path, so ``use_cache=True`` and ``False`` give the same tokens
    for the same seed. Rows that are already done still consume their uniform:
    at step ``t`` row ``b`` always uses entry ``b`` of the t-th draw, whichever
    path computed the logits and whenever the other rows finish.

    Special cases: ``top_k=1`` (or a tiny ``top_p``) is greedy decoding;
    :math:`\tau \to 0` approaches it.

    Args:
        model, batch_size, src, max_len, prompt, use_cache, constraint: as in
            :func:`greedy`. The constraint bans tokens before the filtering, so
            top-k and top-p choose among the allowed tokens.
        temperature: :math:`\tau > 0`.
        top_k: int >= 1, or None for no top-k truncation.
        top_p: in (0, 1], or None (= 1) for no nucleus truncation.
        rng: a :class:`~minitransformer.backend.RNG` (advanced in place), an int
            seed, a NumPy ``Generator`` (one draw from it seeds the stream), or
            None for a fresh random seed.

    Returns:
        Host ``numpy`` int64 array (B, T_out), laid out as in :func:`greedy`.

    Raises:
        ValueError: for a temperature <= 0, top_k < 1, top_p outside (0, 1].
    """
    _check_sampling_args(temperature, top_k, top_p)
    rng = _as_rng(rng)
    src, prefix, max_len = setup_decoding(model, batch_size, src, prompt, max_len)
    B = prefix.shape[0]

    def choose(logits):
        z = filter_logits(logits, temperature, top_k, top_p)  # (B, V)
        u = rng.random((B,), dtype=xp.float64)  # (B,) uniforms in [0, 1)
        if not kernels.fast or not fast_decode.usable(z, u):  # the reference kernel
            return _inverse_cdf_draw(z, u)  # (B,)
        return fast_decode.inverse_cdf_draw(z, u)  # (B,): one compiled loop, the same tokens

    return autoregress(model, src, prefix, max_len, use_cache, choose, constraint)
