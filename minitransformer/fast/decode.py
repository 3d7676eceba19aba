r"""One token per row by inverting the CDF, as one compiled loop: the fast twin of
:func:`minitransformer.generate.sampling._inverse_cdf_draw`.

The reference draws row :math:`n`'s token as the number of CDF entries at or below
:math:`u_n F_{n,V-1}`, capped at the row's last token of positive probability,
in eight NumPy passes over (N, V) arrays. On the rows of a sampling step (64
sequences, a vocabulary of about a hundred) each call costs more than its work:
the cumulative sum along the rows alone took 26 us of the draw's 57, about 7 % of
a small model's decoding step (``benchmarks/RESULTS.md``).

Here the unnormalised probabilities :math:`p = e^{z - \max z}` are still NumPy's
(its ``exp``, so that both sets see the same numbers), and a loop over the rows
then makes three short passes over each: the sum :math:`F`, the count, the last
positive entry. The sums add in the reference's order (a running sum from the
left, as ``cumsum`` adds), so the tokens are the reference's exactly. Since the
running sum never decreases, the count stops at the first entry past the target;
a row with a NaN in :math:`p` has a NaN target, nothing compares at or below it,
and its token is 0, as there. ``tests/fast/test_fast_decode.py`` proves it.
(The cap at the last positive entry is the reference's rule, kept; for u < 1,
:math:`u F` rounds below :math:`F \ge 1`, so it binds only at u = 1.)

It runs on the calling thread: (64, 112) is far below what pays for waking
threads (:data:`minitransformer.fast.engine.compiled.MIN_SIZE`). Measured side by side,
whole KV-cached sampling runs: the small model 1.03x, tomczak 0.99-1.03x (the draw
is a smaller share of its step).

Used when the fast set is selected and Numba runs (:func:`usable`); otherwise,
and on a GPU, the reference's NumPy (or CuPy) calls run.
"""
from __future__ import annotations

import numpy as np

from minitransformer.fast.engine import compiled
from minitransformer.fast.engine.compiled import numba


def usable(z, u) -> bool:
    """True when the compiled loop can take these arrays: Numba runs on this thread, and
    z (N, V) and u (N,) are host float64 arrays with one uniform per row."""
    return (compiled.usable(z, u) and z.dtype == u.dtype == np.float64 and z.ndim == 2
            and u.shape == z.shape[:1])


def inverse_cdf_draw(z, u):
    """As the reference (:func:`minitransformer.generate.sampling._inverse_cdf_draw`).
    z: (N, V) float64 with at least one finite entry per row; u: (N,) in [0, 1).
    Returns (N,) int64 token ids."""
    p = np.exp(z - z.max(axis=1, keepdims=True))  # (N, V), unnormalised probabilities, NumPy's exp
    tok = np.empty(z.shape[0], dtype=np.int64)  # (N,)
    _draw_rows(p, u, tok)
    return tok


if compiled.AVAILABLE:
    @numba.njit(cache=True)  # no fastmath: the sums add in the reference's order
    def _draw_rows(p, u, tok):
        """p (N, V) unnormalised probabilities, u (N,) uniforms; writes tok (N,)."""
        N, V = p.shape
        for n in range(N):
            total = 0.0  # F = F_{V-1}, summed as cumsum sums
            for i in range(V):
                total += p[n, i]
            target = u[n] * total
            running, count = 0.0, 0
            for i in range(V):  # #{i : F_i <= target}; F_i never decreases, so stop at the first above
                running += p[n, i]  # F_i
                if not running <= target:
                    break
                count += 1
            last = V - 1  # the last entry of positive probability (V - 1 if none, as there)
            for i in range(V - 1, -1, -1):
                if p[n, i] > 0:
                    last = i
                    break
            tok[n] = min(count, last)
else:  # pragma: no cover - usable() says no without Numba
    _draw_rows = None
