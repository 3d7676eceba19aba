"""The KV cache: the keys and values of the tokens decoded so far, kept per attention
layer so that each decoding step computes only the new token's and attends over all.

The buffers are **time-major**, (capacity, B, H, d): the filled positions are then one
contiguous block, which a decoding step reads whole in one pass through memory
(:mod:`minitransformer.fast.decode_attention`), and appending a step writes one slab.
"""
from __future__ import annotations

from minitransformer import backend
from minitransformer.backend import xp


class KVCache:
    """Keys and values of the tokens decoded so far, for one attention layer.

    ``k`` and ``v`` are (capacity, B, H, d_h) buffers whose first ``length`` positions
    are filled. ``append`` writes new positions in place (growing the buffer by
    doubling), so each decoding step costs O(1) copies, not O(T), and returns
    (B, H, length, d_h) views, the shape attention takes. For cross-attention the
    encoder's keys/values are stored once (``static``), as the (B, H, Tk, d_h) arrays
    they are: read them, like the others, through :meth:`keys` and :meth:`values`.

    ``capacity``: on the CPU, the positions the first buffer holds (the models pass
    their ``max_len``), so that it is allocated once and never copied; the OS maps a
    large buffer's pages on first write, so positions never reached cost no memory.
    On a GPU the whole buffer would be reserved at once: there it grows by doubling.
    """

    def __init__(self, capacity: int = 0):
        self.k = self.v = None
        self.length = 0
        self.static = False
        self.capacity = capacity

    def append(self, k_new, v_new):
        """Add (B, H, Tn, d_h) keys/values; return views of all (B, H, length, d_h)."""
        B, H, Tn, Dh = k_new.shape
        need = self.length + Tn
        if self.k is None or need > self.k.shape[0]:
            first = self.capacity if backend.name() == "numpy" else 0  # see the class notes
            cap = max(need, 2 * (0 if self.k is None else self.k.shape[0]), 16, first)
            k = xp.empty((cap, B, H, Dh), dtype=k_new.dtype)  # (cap, B, H, d_h)
            v = xp.empty((cap, B, H, v_new.shape[3]), dtype=v_new.dtype)  # (cap, B, H, d_v)
            if self.length:
                k[: self.length] = self.k[: self.length]
                v[: self.length] = self.v[: self.length]
            self.k, self.v = k, v
        self.k[self.length:need] = k_new.transpose(2, 0, 1, 3)  # (Tn, B, H, d_h)
        self.v[self.length:need] = v_new.transpose(2, 0, 1, 3)  # (Tn, B, H, d_v)
        self.length = need
        return self.keys(), self.values()

    def keys(self):
        """The cached keys as a (B, H, length, d_h) view."""
        return self._view(self.k)

    def values(self):
        """The cached values as a (B, H, length, d_v) view."""
        return self._view(self.v)

    def _view(self, buffer):
        """A (capacity, B, H, d) buffer's filled positions as (B, H, length, d); a static one as it is."""
        if buffer is None:
            raise ValueError("KVCache: nothing cached yet; append keys and values (or set_static) first")
        return buffer if self.static else buffer[: self.length].transpose(1, 2, 0, 3)

    def set_static(self, k, v):
        """Store cross-attention keys/values (B, H, Tk, d_h) computed once from the encoder output."""
        self.k, self.v, self.length, self.static = k, v, k.shape[2], True

    def reorder(self, index):
        """Keep batch rows ``index`` (B',) in that order: beam search reshuffles hypotheses.
        Only the filled positions are copied, into new buffers of the same capacity."""
        if self.k is None:
            return
        if self.static:  # the encoder's keys/values, (B, H, Tk, d): every position is filled
            self.k, self.v = self.k[index], self.v[index]
            return
        n = self.length
        k = xp.empty((self.k.shape[0], index.shape[0]) + self.k.shape[2:], dtype=self.k.dtype)  # (cap, B', H, d_h)
        v = xp.empty((self.v.shape[0], index.shape[0]) + self.v.shape[2:], dtype=self.v.dtype)  # (cap, B', H, d_v)
        k[:n] = self.k[:n, index]
        v[:n] = self.v[:n, index]
        self.k, self.v = k, v
