"""The model configs' shared options, :class:`TransformerOptions`, live with the
blocks they build (:mod:`minitransformer.nn.blocks`); this module keeps the old
import path working."""
from minitransformer.nn.blocks import ConfigBase, TransformerOptions

__all__ = ["ConfigBase", "TransformerOptions"]
