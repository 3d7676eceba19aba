"""The order of an epoch: which examples go together into each batch.

:func:`plan_batches` cuts the example indices into shuffled batches. With
``bucket`` it first groups examples of similar length, so a batch needs little
padding, while the pools and the batch order keep every epoch different. The
trainer seeds its generator with ``(seed, epoch)``, so an epoch's plan is the same
on resume.
"""
from __future__ import annotations

import numpy as np


def plan_batches(lengths, batch_size: int, rng: np.random.Generator, bucket: bool = True):
    """Split example indices into batches, shuffled, grouping similar lengths.

    With ``bucket``, the shuffled indices are cut into pools of 50 batches; each
    pool is sorted by length and cut into batches, and the batch order is shuffled
    again. Batches then hold similar lengths (little padding) while every epoch
    still mixes differently. Returns a list of index arrays.
    """
    lengths = np.asarray(lengths)
    perm = rng.permutation(len(lengths))  # (N,)
    if bucket:
        pool = batch_size * 50
        chunks = [perm[i:i + pool] for i in range(0, len(perm), pool)]
        perm = np.concatenate([c[np.argsort(lengths[c], kind="stable")] for c in chunks]) if chunks else perm
    batches = [perm[i:i + batch_size] for i in range(0, len(perm), batch_size)]
    order = rng.permutation(len(batches))
    return [batches[j] for j in order]
