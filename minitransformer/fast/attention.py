r"""Fast attention: the math of :mod:`minitransformer.nn.attention`, in blocks of
sequences spread over the CPU thread pool, with fewer passes over memory.

What differs from the reference (the results agree to rounding; ``tests/fast``):

* The scale is applied to :math:`Q` (a (Tq, d) array) rather than to the (Tq, Tk)
  logits: :math:`S = (sQ)K^\top`, and :math:`sQ` is kept for :math:`dK = dS^\top (sQ)`.
* The softmax runs in place in the logits' buffer, with one reciprocal per row (on
  a GPU, forward and backward are one CUDA kernel each: :mod:`minitransformer.fast.engine.cuda`).
  float32 logits, with Numba, take one compiled loop a row that reads the mask itself
  (``compiled.masked_softmax_float32``), on each pool thread's block of sequences.
* The softmax backward's row term :math:`\delta_i = \sum_j dP_{ij}P_{ij}` is formed as
  :math:`dO_i \cdot O_i` from two (Tq, Dv) arrays instead of the (Tq, Tk) product,
  since :math:`\sum_j (dO_i \cdot V_j) P_{ij} = dO_i \cdot \sum_j P_{ij} V_j`
  (with dropout the same holds for :math:`P \odot M`). So the cache keeps the
  returned output :math:`O` itself: write into a copy of it, not into it, before
  the backward (the reference's backward does not read it).
* The output, and dq, dk, dv in the backward, are written head by head into
  token-major (B, T, H, d) buffers and returned as their (B, H, T, d) views, so
  that putting the heads side by side afterwards (``merge_heads``) is a free
  reshape, not a copy.
* The batch is cut into blocks of about 512 KiB of scores that stay in the CPU
  cache, handed to the thread pool (:mod:`minitransformer.fast.engine.parallel`).
* **Masked key blocks are skipped** (:func:`query_blocks`). The query axis is cut
  into blocks of rows; for each block, the keys after the last one that any of
  its rows may see (in any sequence, any head) are never touched: no logits, no
  exponentials, no products, forward or backward. Under a causal mask that is the
  upper triangle of blocks, about half of the :math:`T^2` work at long T. Their
  probabilities are written as exact zeros, which is what the softmax gives them.
  This is done on the CPU, for masks only (with an additive bias every logit is
  computed, as the bias's gradient needs them all).
* **A bias with a batch axis of its own** (one per sequence, as the graph bias) gets its
  gradient written block by block into one array, not gathered from the blocks' copies;
  one of the logits' whole shape (B, H, Tq, Tk) has :math:`dA = dS`, which the backward
  writes there directly.
* **A decoding step** (one new query per sequence and head over a time-major KV cache)
  is one compiled pass through the cache (:mod:`minitransformer.fast.decode_attention`),
  with Numba.
* **Opt-in: one compiled loop that calls BLAS itself** (:mod:`minitransformer.fast.fused_attention`,
  ``MINITRANSFORMER_BLAS_ATTENTION=1``): faster alone, not yet in whole training steps.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from minitransformer import backend
from minitransformer.backend import check_attention_dout, check_attention_inputs, sum_to_shape, xp
from minitransformer.fast import decode_attention, fused_attention
from minitransformer.fast.engine import compiled, cuda
from minitransformer.fast.engine.parallel import batch_slices, parallel_for


class FastAttentionCache(NamedTuple):
    """What the fast backward needs (``p`` as in the reference cache, for plots)."""

    qs: object  # (B, H, Tq, Dh) the scaled queries
    k: object  # (B, H, Tk, Dh)
    v: object  # (B, H, Tk, Dv)
    p: object  # (B, H, Tq, Tk) probabilities
    pd: object  # (B, H, Tq, Tk) after dropout (p itself without)
    out: object  # (B, H, Tq, Dv) the output, for the row term dO . O
    dropout_mask: object  # (B, H, Tq, Tk) or None
    scale: float
    bias: object  # the additive bias (its shape is dA's), or None
    blocks: list = None  # [(q0, q1, k_end)] of query_blocks: the keys each block of rows needs
    q: object = None  # (B, H, Tq, Dh) the queries, unscaled, when the compiled loop made the cache (qs is None)


def _batch_part(a, b):
    """The part of a mask or bias (or None) for batch slice ``b``: one with a batch axis
    of its own ((B, ...)) gives (b, ...); others serve every block as they are."""
    if a is None or a.ndim < 4 or a.shape[0] == 1:
        return a
    return a[b]


# Measured (benchmarks/RESULTS.md, causal forward + backward, d_head 32, 2 threads):
# 1.5x faster at T = 1024, 1.14x at 512, but 0.8-0.9x at T = 64-128, where the
# smaller products and the strided views cost more than the skipped work saves.
MIN_LENGTH = 256  # skip masked key blocks only from this many query rows on
MIN_BLOCK_ROWS = 64  # rows per query block at least
MIN_SAVING = 0.15  # and only when it saves at least this share of the (Tq, Tk) work


def query_block_rows(Tq: int) -> int:
    """Rows per query block: Tq / 8, at least 64 (8 blocks: about 56 % of a causal T^2)."""
    return max(MIN_BLOCK_ROWS, Tq // 8)


def query_blocks(mask, bias, Tq: int, Tk: int) -> list[tuple[int, int, int]]:
    """``[(q0, q1, k_end), ...]``: query rows q0..q1-1 need only keys 0..k_end-1.

    k_end is 1 + the last key that any row of the block may attend to, over every
    sequence and head of the mask (0 if none may). One (Tq, Tk) pass over the mask,
    on the host. The whole problem as one block, ``[(0, Tq, Tk)]``, when there is no
    mask, a bias, a GPU (reading the mask would make it wait), or too little to save.
    """
    whole = [(0, Tq, Tk)]
    if mask is None or bias is not None or backend.name() != "numpy" or Tq < MIN_LENGTH:
        return whole
    rows = query_block_rows(Tq)
    seen = mask.reshape(-1, *mask.shape[-2:]).any(axis=0)  # (Tq or 1, Tk or 1): may any (b, h) attend?
    seen = xp.broadcast_to(seen, (Tq, Tk))  # (Tq, Tk)
    row_end = xp.where(seen.any(axis=1), Tk - xp.argmax(seen[:, ::-1], axis=1), 0)  # (Tq,) 1 + last seen key
    blocks = [(q0, min(q0 + rows, Tq), int(row_end[q0:q0 + rows].max())) for q0 in range(0, Tq, rows)]
    work = sum((q1 - q0) * k_end for q0, q1, k_end in blocks)
    return blocks if work <= (1.0 - MIN_SAVING) * Tq * Tk else whole


def _rows_keys(a, rows: slice, keys: slice):
    """The part of a mask (or None) that broadcasts to scores[..., rows, keys]."""
    if a is None or a.ndim == 0:
        return a
    keys = keys if a.shape[-1] != 1 else slice(None)
    if a.ndim < 2:
        return a[keys]
    return a[..., rows if a.shape[-2] != 1 else slice(None), keys]


def attention_forward(q, k, v, mask=None, scale: float | None = None, dropout_mask=None, bias=None):
    """As :func:`minitransformer.nn.attention.attention_forward`."""
    check_attention_inputs(q, k, v, mask, bias)
    B, H, Tq, Dh = q.shape
    Tk, Dv = k.shape[2], v.shape[3]
    scale = 1.0 / math.sqrt(Dh) if scale is None else float(scale)
    if decode_attention.usable(q, k, v, mask, bias, dropout_mask):  # a decoding step over a KV cache
        out, p = decode_attention.attention_forward(q, k, v, mask, scale)
        return out, FastAttentionCache(q * scale, k, v, p, p, out, None, scale, None)
    blocks = query_blocks(mask, bias, Tq, Tk)
    if fused_attention.usable(q, k, v, mask, bias, scale):  # one compiled loop that calls BLAS itself
        q, k, v, out, p, pd = fused_attention.attention_forward(q, k, v, mask, scale, dropout_mask, blocks)
        return out, FastAttentionCache(None, k, v, p, pd, out, dropout_mask, scale, None, blocks, q)
    blocked = None if mask is None else ~mask  # True = may not attend; built once for every block
    qs = xp.empty(q.shape, dtype=q.dtype)  # (B, H, Tq, Dh)
    p = xp.empty((B, H, Tq, Tk), dtype=q.dtype)  # (B, H, Tq, Tk)
    pd = p if dropout_mask is None else xp.empty_like(p)  # (B, H, Tq, Tk)
    out = xp.empty((B, Tq, H, Dv), dtype=q.dtype).transpose(0, 2, 1, 3)  # (B, H, Tq, Dv), heads side by side

    def rows(b):  # one block of sequences: b is a slice of the batch axis
        xp.multiply(q[b], scale, out=qs[b])  # (b, H, Tq, Dh)
        for q0, q1, k_end in blocks:  # query rows q0..q1-1 see keys 0..k_end-1 at most
            r, c = slice(q0, q1), slice(0, k_end)
            if k_end < Tk:  # the keys no row of the block sees: probability exactly 0
                p[b, :, r, k_end:] = 0.0
                if pd is not p:
                    pd[b, :, r, k_end:] = 0.0
            _forward_block(qs[b, :, r], k[b, :, c], v[b, :, c], _rows_keys(_batch_part(blocked, b), r, c),
                           _batch_part(bias, b), _rows_keys(_batch_part(dropout_mask, b), r, c),
                           p[b, :, r, c], pd[b, :, r, c], out[b, :, r])

    parallel_for(rows, batch_slices(B, H * Tq * Tk * p.itemsize), uses_blas=True)
    return out, FastAttentionCache(qs, k, v, p, pd, out, dropout_mask, scale, bias, blocks)


def _forward_block(qs, k, v, blocked, bias, dropout_mask, p, pd, out):
    """The forward pass on b sequences and a block of query rows (the keys it needs),
    written into the views p, pd and out; qs holds the scaled queries."""
    if k.shape[2] == 0:  # no key to see (a block of fully masked rows): zeros, as the reference
        out[...] = 0.0
        return
    s = xp.matmul(qs, k.swapaxes(-1, -2), out=p)  # (b, H, q, k) the logits, in p's memory
    if bias is not None:
        s += bias
    compiled_softmax = s.dtype == np.float32 and compiled.serial_usable(s)  # it reads the mask itself
    if blocked is not None and not compiled_softmax:
        xp.copyto(s, -xp.inf, where=blocked)  # masked logits are exactly -inf
    # A row can be all -inf through the mask or through the bias (an additive mask);
    # either way it becomes a row of zeros, as in the reference. The two guards of the
    # NumPy branch touch (b, H, Tq, 1) arrays only.
    if cuda.usable(s) and cuda.contiguous(s):  # a GPU: the rows' softmax in one launch, in place
        cuda.softmax_rows(s)  # now p (a fully masked row: zeros)
    elif compiled_softmax:  # mask, max, exp, sum and scale: one pass a row
        seen_by_none = np.zeros((1, 1, 1, 1), dtype=bool) if blocked is None else blocked
        compiled.masked_softmax_float32.serial(s, np.broadcast_to(seen_by_none, s.shape))  # now p
    else:
        row_max = s.max(axis=-1, keepdims=True)  # (b, H, Tq, 1), -inf on fully masked rows
        xp.copyto(row_max, 0.0, where=xp.isneginf(row_max))  # no -inf - -inf = NaN
        s -= row_max
        xp.exp(s, out=s)  # exp(-inf) = 0 exactly
        denom = xp.einsum("bhqk->bhq", s)[..., None]  # (b, H, Tq, 1) row sums, 0 on fully masked rows
        xp.copyto(denom, 1.0, where=denom == 0)  # fully masked row: 0 / 1 = 0
        s *= 1.0 / denom  # now p
    if dropout_mask is not None:
        xp.multiply(p, dropout_mask, out=pd)
    xp.matmul(pd, v, out=out)  # (b, H, Tq, Dv)


def attention_backward(dout, cache: FastAttentionCache):
    """As :func:`minitransformer.nn.attention.attention_backward`."""
    qs, k, v, p, pd, o, dropout_mask, scale, bias, blocks, q = cache
    B, H, Tq, Tk = p.shape
    check_attention_dout(dout, o.shape)
    blocks = blocks or [(0, Tq, Tk)]
    Dh = k.shape[3]
    # token-major memory, as for the output: putting the heads side by side is then free;
    # self-attention's three share one (B, T, 3, H, d) buffer, the fused projection's dqkv
    if Tq == Tk and Dh == v.shape[3]:  # the shapes of self-attention
        buf = xp.empty((B, Tq, 3, H, Dh), dtype=p.dtype)  # (B, T, 3, H, d)
        dq, dk, dv = (buf[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, H, T, d) each
    else:
        dq = xp.empty((B, Tq, H, Dh), dtype=p.dtype).transpose(0, 2, 1, 3)  # (B, H, Tq, Dh)
        dk = xp.empty((B, Tk, H, Dh), dtype=p.dtype).transpose(0, 2, 1, 3)  # (B, H, Tk, Dh)
        dv = xp.empty((B, Tk, H, v.shape[3]), dtype=p.dtype).transpose(0, 2, 1, 3)  # (B, H, Tk, Dv)
    if qs is None:  # the compiled loop made the cache: it does the backward too, where it can run
        if fused_attention.backward_usable(p):
            fused_attention.attention_backward(dout, q, k, v, p, pd, o, dropout_mask, scale, blocks, dq, dk, dv)
            return dq, dk, dv, None
        qs = q * scale  # (B, H, Tq, Dh) another thread, or Numba since switched off: the products below
    pieces = batch_slices(B, H * Tq * Tk * p.itemsize)
    # A bias with a batch axis of its own (one per sequence, as the graph bias) gets its gradient
    # written block by block into one array; when it has dA's whole shape, dA is dS itself, which
    # the block writes there directly. A bias shared by every sequence sums the blocks' parts.
    per_sequence = bias is not None and bias.ndim == 4 and bias.shape[0] != 1
    dbias = xp.empty(bias.shape, dtype=p.dtype) if per_sequence else None  # (B, H or 1, Tq or 1, Tk or 1)
    ds_is_dbias = per_sequence and tuple(bias.shape) == (B, H, Tq, Tk)
    shared_parts = {}  # piece start -> that block's dA summed to a shared bias's shape

    def rows(b):  # one block of sequences
        if len(blocks) == 1:  # every key of every row: dq, dk, dv written at once
            ds = _backward_block(dout[b], qs[b], k[b], v[b], p[b], pd[b], o[b],
                                 _batch_part(dropout_mask, b), scale, dq[b], dk[b], dv[b], accumulate=False,
                                 ds_out=dbias[b] if ds_is_dbias else None)
            if per_sequence and not ds_is_dbias:
                dbias[b] = _bias_part_grad(ds, bias, b)
            elif bias is not None and not per_sequence:
                shared_parts[b.start] = _bias_part_grad(ds, bias, b)
            return
        dk[b] = 0.0  # each block of query rows adds its share to the keys it saw
        dv[b] = 0.0
        for q0, q1, k_end in blocks:
            r, c = slice(q0, q1), slice(0, k_end)
            if k_end == 0:  # rows that saw no key: no gradient reaches q
                dq[b, :, r] = 0.0
                continue
            _backward_block(dout[b, :, r], qs[b, :, r], k[b, :, c], v[b, :, c], p[b, :, r, c], pd[b, :, r, c],
                            o[b, :, r], _rows_keys(_batch_part(dropout_mask, b), r, c), scale,
                            dq[b, :, r], dk[b, :, c], dv[b, :, c], accumulate=True)

    parallel_for(rows, pieces, uses_blas=True)
    if bias is not None and not per_sequence:  # the blocks' sums add up, in a fixed order
        dbias = sum(shared_parts[b.start] for b in pieces)
    return dq, dk, dv, dbias


def _bias_part_grad(ds, bias, b):
    """One block's share of dA: ds (b, H, Tq, Tk) summed to the shape of the bias's part."""
    part = _batch_part(bias, b)
    return sum_to_shape(ds, tuple(part.shape))


def _backward_block(dout, qs, k, v, p, pd, out, dropout_mask, scale, dq, dk, dv, accumulate, ds_out=None):
    """The backward pass on b sequences and a block of query rows (and the keys they
    saw): dq written, dk and dv written (or, with ``accumulate``, added to: the
    other blocks of rows add theirs). Returns dS (b, H, q, k), written into ``ds_out``
    when one is given."""
    if accumulate:
        dv += pd.swapaxes(-1, -2) @ dout  # (b, H, k, Dv), this block's share
    else:
        xp.matmul(pd.swapaxes(-1, -2), dout, out=dv)  # (b, H, Tk, Dv), in the forward pass out = pd @ v
    dp = xp.matmul(dout, v.swapaxes(-1, -2), out=ds_out)  # (b, H, Tq, Tk)
    if dropout_mask is not None:
        dp *= dropout_mask
    if cuda.usable(dp, p) and cuda.contiguous(dp, p):  # a GPU: one launch, rowsum(dp * p) in the row
        cuda.softmax_backward_rows(dp, p)  # now dS, the gradient of the logits
    else:
        inner = xp.einsum("bhqd,bhqd->bhq", dout, out)[..., None]  # (b, H, Tq, 1) = rowsum(dp * p)
        dp -= inner
        dp *= p  # now dS, the gradient of the logits
    xp.matmul(dp, k, out=dq)  # (b, H, Tq, Dh)
    dq *= scale  # in the forward pass qs = scale * q
    if accumulate:
        dk += dp.swapaxes(-1, -2) @ qs  # (b, H, k, Dh), this block's share
    else:
        xp.matmul(dp.swapaxes(-1, -2), qs, out=dk)  # (b, H, Tk, Dh)
    return dp


def merge_heads(*parts):
    """As :func:`minitransformer.nn.attention.merge_heads`, but free (a reshape, no copy)
    when the parts are, in order, the head views of one token-major (B, T, n, H, d)
    buffer, which is what :func:`attention_backward` returns for self-attention."""
    base = _shared_buffer(parts)
    if base is None:  # any other parts: copied side by side, as the reference does
        merged = [p.transpose(0, 2, 1, 3).reshape(p.shape[0], p.shape[2], p.shape[1] * p.shape[3])
                  for p in parts]  # (B, T, H*d) each
        return merged[0] if len(merged) == 1 else xp.concatenate(merged, axis=-1)  # (B, T, n*H*d)
    B, T, n, H, d = base.shape
    return base.reshape(B, T, n * H * d)  # (B, T, n*H*d), a view


def _address(a) -> int:
    """Where an array's first element sits in memory (NumPy or CuPy)."""
    return a.data.ptr if hasattr(a.data, "ptr") else a.__array_interface__["data"][0]


def _shared_buffer(parts):
    """The (B, T, n, H, d) buffer whose [:, :, i] head views the parts are, or None."""
    base = getattr(parts[0], "base", None)
    if len(parts) < 2 or base is None or getattr(base, "ndim", 0) != 5 or base.shape[2] != len(parts) \
            or not base.flags.c_contiguous:
        return None
    for i, part in enumerate(parts):
        view = base[:, :, i].transpose(0, 2, 1, 3)  # (B, H, T, d)
        if part.base is not base or part.shape != view.shape or part.strides != view.strides \
                or _address(part) != _address(view):
            return None
    return base
