r"""Token embedding: row lookup ``out[b, t] = W[ids[b, t]]``.

The backward is a scatter-add: every occurrence of token ``i`` adds its
upstream gradient into row ``i`` of :math:`dW`,

.. math:: dW_i = \sum_{(b,t):\ ids_{bt} = i} dout_{bt}.

Repeated ids must *sum*, which is why this uses ``backend.scatter_add``
(sort + ``add.reduceat`` on the CPU, ``cupyx.scatter_add`` on the GPU) rather than
``dW[ids] += dout``.
"""
from __future__ import annotations

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp


def check_ids(ids, vocab_size: int, what: str = "embedding"):
    """Raise ValueError unless ``ids`` is an integer array with values in [0, vocab_size).

    The values are read only where that needs no device round trip
    (:func:`backend.values_on_host`): on the CPU always, on a GPU only for host
    arrays. A GPU checks each batch on the host before the copy instead
    (:func:`ids_to_device`, which the tasks use), so the training step never waits.
    """
    if not hasattr(ids, "dtype") or ids.dtype.kind not in "iu":
        dtype = getattr(ids, "dtype", type(ids).__name__)
        raise ValueError(f"{what}: token ids must be an integer array, got dtype {dtype}")
    if ids.size == 0 or not backend.values_on_host(ids):
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"{what}: token id {bad} is out of range for a vocabulary of size {vocab_size} "
            f"(valid ids are 0..{vocab_size - 1})"
        )


def ids_to_device(ids, vocab_size: int, what: str = "batch"):
    """Check host token ids (a NumPy array) with :func:`check_ids`, then copy them to
    the active backend. ids: (...) integers. Returns the device array (...)."""
    host = np.asarray(ids)  # (...), already on the host: no device involved yet
    check_ids(host, vocab_size, what)
    return backend.asarray(host)


def embedding_forward(ids, W):
    """Look up rows of ``W``.

    Args:
        ids: (...) integer token ids in [0, V).
        W: (V, D) embedding table.

    Returns:
        out: (..., D).
        cache: ``(ids, W.shape, W.dtype)``; the backward needs only where each row went.
    """
    check_ids(ids, W.shape[0])
    out = W[ids]  # (..., D)
    return out, (ids, W.shape, W.dtype)


def embedding_backward(dout, cache):
    """Gradient of the lookup with respect to the table: returns dW (V, D)."""
    ids, shape, dtype = cache
    dW = xp.zeros(shape, dtype=dtype)  # (V, D)
    backend.scatter_add(dW, ids.reshape(-1), dout.reshape(-1, shape[1]))  # sum repeated ids
    return dW
