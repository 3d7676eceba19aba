"""Boolean attention masks. ``True`` means "this query may attend to this key".

All masks are shaped to broadcast against attention scores of shape
(B, H, Tq, Tk):

* :func:`causal_mask` gives (Tq, Tk): query ``i`` sees keys ``0 .. i + (Tk - Tq)``;
  with Tq == Tk that is the usual lower triangle, and with Tq < Tk it is the
  bottom rows of that triangle, which is what incremental (KV-cached) decoding
  needs.
* :func:`padding_mask` gives (B, 1, 1, Tk): no query sees a padded key.
* :func:`combine_masks` ANDs any number of masks (``None`` entries are skipped).
"""
from __future__ import annotations

from minitransformer.backend import xp

_CAUSAL_CACHE: dict = {}


def causal_mask(T: int, Tk: int | None = None):
    """Lower-triangular (Tq, Tk) boolean mask; ``Tk`` defaults to ``T``.

    Masks are cached per (backend, T, Tk), since every layer of every step asks
    for the same one. Treat the result as read-only.
    """
    Tk = T if Tk is None else Tk
    if Tk < T:
        raise ValueError(f"causal_mask: Tk={Tk} must be >= Tq={T} (queries are the last Tq positions)")
    from minitransformer import backend  # late: the active backend may change
    key = (backend.name(), backend.get_dtype(), T, Tk)
    mask = _CAUSAL_CACHE.get(key)
    if mask is None:
        q_pos = xp.arange(Tk - T, Tk)[:, None]  # (Tq, 1), absolute query positions
        k_pos = xp.arange(Tk)[None, :]  # (1, Tk)
        mask = k_pos <= q_pos  # (Tq, Tk)
        if len(_CAUSAL_CACHE) > 64:
            _CAUSAL_CACHE.clear()
        _CAUSAL_CACHE[key] = mask
    return mask


def padding_mask(ids, pad_id: int):
    """(B, 1, 1, T) mask that is False at the padded key positions of ``ids`` (B, T)."""
    if ids.ndim != 2:
        raise ValueError(f"padding_mask: ids must have shape (B, T), got {tuple(ids.shape)}")
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T)


def combine_masks(*masks):
    """Logical AND of broadcastable boolean masks; ``None`` means "no mask"."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else (out & m)
    return out
