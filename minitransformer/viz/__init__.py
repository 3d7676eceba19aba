"""Attention pictures: maps read from the forward caches, heatmaps, one-call reports.

* :mod:`~minitransformer.viz.maps` - :func:`attention_maps` reads every layer's
  attention probabilities from its forward cache; :func:`forward_maps` runs one
  eval-mode forward on one example first.
* :mod:`~minitransformer.viz.heatmaps` - :func:`plot_attention` draws them as a
  grid of heatmaps (per-panel colour scale, tokens on both axes), and the three
  one-example wrappers for ``DecoderLM``, ``Encoder`` and ``Seq2Seq``.
* :mod:`~minitransformer.viz.report` - :func:`render_attention`: heatmaps and
  molecule drawings for one SMILES and any of the three model kinds, with
  :mod:`~minitransformer.viz.attention_drawing` (each atom shaded by the attention its
  token receives).
* :mod:`~minitransformer.viz.graph_bias` - what an encoder's graph bias learned: each layer's
  table, heads by relations.
* :mod:`~minitransformer.viz.plots` - training curves from a trainer's history.

How to read the pictures: ``docs/attention.md``.
"""
from minitransformer.viz.heatmaps import (attention_figure, attention_png, plot_attention,
                                          plot_cross_attention, plot_decoder_attention,
                                          plot_encoder_attention)
from minitransformer.viz.maps import attention_maps, forward_maps
from minitransformer.viz.report import render_attention

__all__ = [
    "attention_maps", "forward_maps", "attention_figure", "attention_png", "plot_attention",
    "plot_decoder_attention", "plot_encoder_attention", "plot_cross_attention", "render_attention",
]
