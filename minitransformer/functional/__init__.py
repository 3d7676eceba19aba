"""The kernels of the selected set, as plain functions: ``*_forward -> (out, cache)``
and ``*_backward(dout, cache) -> grads``, plus the mask and id helpers.

``minitransformer.functional.linear_forward`` is the kernel of the set chosen in
:mod:`minitransformer.kernels` (``"fast"`` by default, ``"reference"`` for the
plain ones in :mod:`minitransformer.nn`), looked up when you access it: a name
imported with ``from minitransformer.functional import ...`` keeps the kernel of
the set selected at that moment.
"""
from minitransformer import kernels as _kernels
from minitransformer.nn.attention import causal_mask, combine_masks, padding_mask
from minitransformer.nn.elementwise import make_dropout_mask
from minitransformer.nn.embedding import check_ids, ids_to_device

__all__ = sorted(_kernels.NAMES + (
    "causal_mask", "check_ids", "combine_masks", "ids_to_device", "make_dropout_mask", "padding_mask",
))


def __getattr__(name):
    if name in _kernels.NAMES:
        return getattr(_kernels, name)
    raise AttributeError(f"module 'minitransformer.functional' has no attribute {name!r}")


def __dir__():
    return __all__
