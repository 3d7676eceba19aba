"""Where an optimizer's tensors live: each in an array of its own, or all of them views of the flat
buffers the fast set lays out at an optimizer's first step (:mod:`minitransformer.fast.engine.flat`).

Code that works on every weight or every gradient at once (the finite checks of the training loop,
the data-parallel all-reduce) asks here, not the fast set: one buffer, when there is one, is one
launch or one message for all of them.
"""
from __future__ import annotations

from minitransformer.fast.engine import flat

__all__ = ["flat_buffers"]


def flat_buffers(params):
    """The flat layout that holds exactly the weights and gradients of ``params`` (its ``data`` and
    ``grad``: one (N,) buffer each, zeros in the gaps between tensors), or None when they live in
    arrays of their own (the reference kernels, a GPU-less first step, a released layout)."""
    return flat.covering(list(params))
