"""What an encoder's graph bias learned: each layer's table drawn as heads by relations.

A graph bias (:mod:`minitransformer.nn.graph_bias`) adds :math:`w_{h,r}` to every logit
whose query and key stand in relation :math:`r` (:mod:`minitransformer.chem.graph`:
bonded by a double bond, three bonds apart, a ring digit beside an atom ...). The
table is small enough to read whole: one panel per layer, a row per head, a column
per relation, red where the head is drawn to that relation, blue where it is pushed
away, on a scale centred at 0. Next to the attention maps of one molecule, it says
why a head looks where it does.
"""
from __future__ import annotations

import io

import numpy as np


def graph_bias_png(model, layers=None) -> bytes:
    """PNG bytes of the graph bias tables of an encoder (or a model around one) with a graph bias.

    ``layers``: the layer indices to draw (None: all; negative counts from the last)."""
    from matplotlib.figure import Figure

    from minitransformer import backend
    from minitransformer.chem.graph import relation_names
    from minitransformer.viz.maps import encoder_inside
    encoder = encoder_inside(model)
    M = getattr(encoder.config, "graph_max_distance", 0)
    if not M:
        raise ValueError(f"graph_bias_png: this {type(model).__name__} has no graph bias")
    tables = [backend.to_numpy(block.attn.graph_bias.table.data) for block in encoder.blocks]  # L x (H, R)
    chosen = range(len(tables)) if layers is None else [int(i) % len(tables) for i in np.atleast_1d(layers)]
    names = relation_names(M)
    H, R = tables[0].shape
    limit = max(float(np.abs(tables[i]).max()) for i in chosen) or 1.0
    fig = Figure(figsize=(0.32 * R + 2.4, (0.35 * H + 1.9) * len(chosen)), dpi=110, layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(chosen), 1, squeeze=False)[:, 0])
    for ax, i in zip(axes, chosen):
        image = ax.imshow(tables[i], cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(R), names, rotation=90, fontsize=7)
        ax.set_yticks(range(H), [f"head {h}" for h in range(H)], fontsize=7)
        ax.set_title(f"layer {i}", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02).set_label("bias on the logit", fontsize=7)
    fig.suptitle("graph bias: what each head adds to a logit, by the relation of query and key", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")  # a bare Figure renders with Agg: no pyplot, no global state
    return buffer.getvalue()
