"""Attention maps drawn as heatmaps: one panel per (layer, head), tokens on both axes.

A panel shows one map :math:`P \\in [0, 1]^{T_q \\times T_k}`: row = a query
token (y axis, top to bottom), column = a key token (x axis, left to right),
colour = the probability the query gives the key. Positions a mask forbids
(the future of a causal decoder, padding keys) have probability exactly 0 and
are drawn light grey, apart from the colour scale.

The colour scale (``scale=``) decides what a colour means:

* ``"map"`` (the default): each panel from 0 to *its own* largest probability,
  with its own colourbar. Over 40 keys a head that spreads its attention gives
  no probability above 0.1; on a fixed 0..1 scale that panel is one flat colour.
* ``"row"``: each query row divided by its own largest probability, so every
  row has a 1 and the panel shows *where* each query looks, not how sharply.
  The colourbar reads "fraction of the row's largest".
* ``"fixed"``: 0..1 for every panel, one colourbar for the figure (panels are
  comparable, but diffuse heads look empty).

``heads="mean"`` averages the heads of each layer into one panel per layer.

:func:`attention_figure` builds the matplotlib figure (tests inspect it);
:func:`plot_attention` writes it as a PNG, atomically. The three wrappers run
one forward pass on one example and draw it: :func:`plot_decoder_attention`,
:func:`plot_encoder_attention`, :func:`plot_cross_attention`.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from minitransformer import backend
from minitransformer.atomic import write_bytes
from minitransformer.viz.maps import forward_maps

__all__ = ["attention_figure", "attention_png", "plot_attention", "plot_decoder_attention",
           "plot_encoder_attention", "plot_cross_attention", "SCALES"]

MASKED_COLOR = "#d4d4d4"  # light grey: cells with probability exactly 0 (masked)
SCALES = ("map", "row", "fixed")


# ---------------------------------------------------------------------------
# Checking the choices
# ---------------------------------------------------------------------------
def _indices(chosen, n: int, what: str) -> list[int]:
    """Validate ``chosen`` (None = all, an int, or ints; negative counts from the end) against n;
    each index once, in the order first given."""
    if chosen is None:
        return list(range(n))
    items = [chosen] if isinstance(chosen, (int, np.integer)) else list(chosen)
    if not items:
        raise ValueError(f"plot_attention: no {what}s chosen ({what}s=[]); pass None for all")
    out = []
    for i in items:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise ValueError(f"plot_attention: {what} indices must be integers, got {i!r}")
        if not -n <= i < n:
            raise ValueError(
                f"plot_attention: {what} index {i} is out of range: the maps have {n} {what}s "
                f"(valid: 0..{n - 1}, or -{n}..-1 from the end)"
            )
        if int(i) % n not in out:  # [0, -1] of a one-layer model is one layer: one panel
            out.append(int(i) % n)
    return out


def _check_tokens(tokens, n: int, what: str) -> list[str]:
    """Token labels as strings; at most n of them (fewer = crop the map to them)."""
    if isinstance(tokens, str):
        raise ValueError(f"plot_attention: {what}_tokens must be a list of tokens, not one string")
    labels = [str(t) for t in tokens]
    if not labels:
        raise ValueError(f"plot_attention: {what}_tokens is empty")
    if len(labels) > n:
        raise ValueError(
            f"plot_attention: got {len(labels)} {what} tokens but the maps have only {n} {what} "
            f"positions; pass at most {n} (fewer crops the map, e.g. to drop padding)"
        )
    return labels


def _panels(maps, layers, heads, sample: int) -> list[tuple[str, np.ndarray]]:
    """The chosen maps as [(panel title, (Tq, Tk) float64 grid)], in reading order."""
    if hasattr(maps, "ndim") and maps.ndim == 4:
        maps = [maps]
    maps = list(maps)
    if not maps:
        raise ValueError("plot_attention: maps is empty (expected one (B, H, Tq, Tk) array per layer)")
    layer_ids = _indices(layers, len(maps), "layer")
    for li in layer_ids:
        if getattr(maps[li], "ndim", None) != 4:
            raise ValueError(
                f"plot_attention: maps[{li}] must have shape (B, H, Tq, Tk), got {tuple(np.shape(maps[li]))}"
            )
    shapes = {tuple(maps[li].shape) for li in layer_ids}
    if len(shapes) > 1:
        raise ValueError(f"plot_attention: the chosen layers' maps differ in shape: {sorted(shapes)}")
    B, H, _, _ = shapes.pop()
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or not 0 <= sample < B:
        raise ValueError(f"plot_attention: sample must be an integer in 0..{B - 1} (the batch size is "
                         f"{B}), got {sample!r}")
    mean = isinstance(heads, str)
    if mean and heads != "mean":
        raise ValueError(f"plot_attention: heads must be None, an index, indices or 'mean', got {heads!r}")
    head_ids = list(range(H)) if mean else _indices(heads, H, "head")
    panels = []
    for li in layer_ids:
        m = np.asarray(backend.to_numpy(maps[li])[sample], dtype=np.float64)  # (H, Tq, Tk)
        if mean:
            panels.append((f"layer {li}, mean of {H} heads", m.mean(axis=0)))  # (Tq, Tk)
        else:
            panels += [(f"layer {li}, head {h}", m[h]) for h in head_ids]
    return panels, (len(layer_ids), 1 if mean else len(head_ids))


def _scaled(grid: np.ndarray, scale: str) -> tuple[np.ndarray, float, str]:
    """(what to draw, vmax, colourbar label) for one (nq, nk) panel; masked cells (p = 0) hidden."""
    allowed = grid > 0.0  # (nq, nk): masked positions have probability exactly 0
    if scale == "row":
        row_max = grid.max(axis=1, keepdims=True)  # (nq, 1)
        shown = np.divide(grid, row_max, out=np.zeros_like(grid), where=row_max > 0)  # (nq, nk)
        return np.ma.masked_where(~allowed, shown), 1.0, "fraction of the row's largest"
    if scale == "fixed":
        return np.ma.masked_where(~allowed, grid), 1.0, "attention probability"
    vmax = float(grid[allowed].max()) if allowed.any() else 1.0
    return np.ma.masked_where(~allowed, grid), vmax, "attention probability"


# ---------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------
def attention_figure(maps, query_tokens, key_tokens, layers=None, heads=None, sample: int = 0,
                     title: str | None = None, scale: str = "map"):
    """Build the heatmap figure (a ``matplotlib.figure.Figure``; nothing is written).

    Args:
        maps: list of L arrays (B, H, Tq, Tk), one per layer, as returned by
            :func:`~minitransformer.viz.attention_maps` (host or device arrays;
            a single 4-D array counts as one layer).
        query_tokens: nq <= Tq labels of the query positions (y axis, top to
            bottom); fewer than Tq crops the rows (drop right padding this way).
        key_tokens: nk <= Tk labels of the key positions (x axis, left to right);
            fewer than Tk crops the columns the same way.
        layers: layer indices to draw (None = all; an int = one layer;
            negative counts from the end).
        heads: head indices (None = all), or ``"mean"``: one panel per layer,
            the average of its heads.
        sample: which batch row b of the maps to draw, 0 <= sample < B.
        title: figure title (say which attention and which molecule).
        scale: ``"map"``, ``"row"`` or ``"fixed"`` (see the module notes).
            ``"map"`` and ``"row"`` give every panel its own colourbar;
            ``"fixed"`` one colourbar for all.

    Panels are laid out layer by layer, heads left to right (with
    ``heads="mean"``: up to 4 layers a row). Tick font and panel size follow
    the number of tokens (readable up to about 60 tokens per axis).
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    if scale not in SCALES:
        raise ValueError(f"plot_attention: scale must be one of {', '.join(map(repr, SCALES))}, got {scale!r}")
    panels, (n_layers, n_heads) = _panels(maps, layers, heads, sample)
    Tq, Tk = panels[0][1].shape
    q_labels = _check_tokens(query_tokens, Tq, "query")
    k_labels = _check_tokens(key_tokens, Tk, "key")
    nq, nk = len(q_labels), len(k_labels)
    if n_heads == 1 and n_layers > 1:  # one panel per layer: wrap them, up to 4 a row
        cols = min(4, n_layers)
        rows = -(-n_layers // cols)
    else:
        rows, cols = n_layers, n_heads

    # -- sizes: about 0.11 inch per token at 60 tokens, larger for short sequences --
    cell = min(0.32, 6.6 / max(nq, nk))  # inches per token
    font = float(np.clip(0.75 * cell * 72, 4.5, 10.0))  # tick label size in points
    panel_w, panel_h = max(2.2, cell * nk), max(2.2, cell * nq)  # inches
    label_in = 0.35 + max(len(s) for s in q_labels + k_labels) * 0.6 * font / 72  # tick label room
    bar_in = 0.0 if scale == "fixed" else 0.85  # each panel's own colourbar
    fig_w = cols * (panel_w + label_in + bar_in) + (1.1 if scale == "fixed" else 0.2)
    fig_h = rows * (panel_h + label_in + 0.4) + (0.6 if title else 0.1)
    dpi = min(110.0, 9000.0 / max(fig_w, fig_h))  # keep the PNG under ~9000 px a side

    cmap = colormaps["viridis"].with_extremes(bad=MASKED_COLOR)  # "bad" = masked cells (p = 0)
    fig = Figure(figsize=(fig_w, fig_h), dpi=dpi, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)  # (rows, cols)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)  # the empty tail of a wrapped row
    for k, (name, grid) in enumerate(panels):
        ax = axes.ravel()[k]
        shown, vmax, bar_label = _scaled(grid[:nq, :nk], scale)  # (nq, nk)
        image = ax.imshow(shown, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(nk), k_labels, rotation=90, fontsize=font)
        ax.set_yticks(range(nq), q_labels, fontsize=font)
        ax.tick_params(length=0, pad=1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("key (attended to)", fontsize=8)
        ax.set_ylabel("query (attending)", fontsize=8)
        if scale != "fixed":
            bar = fig.colorbar(image, ax=ax, fraction=0.08, pad=0.02)
            bar.ax.tick_params(labelsize=7)
            bar.set_label(bar_label, fontsize=7)
    if scale == "fixed":
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=min(0.9, 2.0 / rows),
                     label="attention probability")
    note = "grey: masked (probability 0)"
    if title:  # wrapped to the figure's width (about 11 characters of 10-point text an inch): a long SMILES stays whole
        import textwrap
        title = textwrap.fill(title, width=max(40, int(11 * fig_w)))
    fig.suptitle(f"{title}\n{note}" if title else note, fontsize=10)
    return fig


def attention_png(maps, query_tokens, key_tokens, layers=None, heads=None, sample: int = 0,
                  title: str | None = None, scale: str = "map") -> bytes:
    """:func:`attention_figure` rendered to PNG bytes in memory (Agg; nothing written)."""
    fig = attention_figure(maps, query_tokens, key_tokens, layers, heads, sample, title, scale)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")  # a bare Figure renders with Agg: no pyplot, no global state
    return buffer.getvalue()


def plot_attention(maps, query_tokens, key_tokens, path, layers=None, heads=None, sample: int = 0,
                   title: str | None = None, scale: str = "map") -> Path:
    """Draw attention maps as a grid of heatmaps and write a PNG (atomically).

    Arguments as in :func:`attention_figure`, plus ``path``: the PNG to write
    (its folder is created if missing; nothing is written when drawing fails).
    Returns the path, as a :class:`pathlib.Path`.
    """
    png = attention_png(maps, query_tokens, key_tokens, layers, heads, sample, title, scale)
    return write_bytes(Path(path), png)


# ---------------------------------------------------------------------------
# One example, one forward, one PNG
# ---------------------------------------------------------------------------
def _molecule(tokens) -> str:
    """The SMILES the tokens spell, specials (``<bos>``, ``<cls>`` ...) left out."""
    return "".join(t for t in map(str, tokens) if not (t.startswith("<") and t.endswith(">")))


def plot_decoder_attention(model, ids, tokens, path, layers=None, heads=None,
                           title: str | None = None, scale: str = "map") -> Path:
    """Causal self-attention of a ``DecoderLM`` on one sequence, as a PNG.

    Args:
        model: a ``DecoderLM``.
        ids: (T,) token ids, BOS first (``model.config.bos_id``).
        tokens: T labels (or fewer to crop), used for both axes.
        path: the PNG to write.
        layers, heads, scale: as in :func:`attention_figure`.
        title: default "decoder self-attention (causal): <molecule>".

    Runs one forward pass in eval mode; the model keeps its mode and caches.
    Returns the path.
    """
    maps = forward_maps(model, "self", None, ids)  # L x (1, H, T, T)
    title = title or f"decoder self-attention (causal): {_molecule(tokens)}"
    return plot_attention(maps, tokens, tokens, path, layers=layers, heads=heads, title=title, scale=scale)


def plot_encoder_attention(model, ids, tokens, path, layers=None, heads=None,
                           title: str | None = None, scale: str = "map") -> Path:
    """Bidirectional self-attention of an ``Encoder`` on one sequence, as a PNG.

    Args:
        model: an ``Encoder``, or a ``MaskedLM`` or ``PropertyModel`` (its encoder's attention).
        ids: (T,) token ids (CLS/BOS first, as in training).
        tokens: T labels (or fewer to crop), used for both axes.
        path: the PNG to write.
        layers, heads, scale: as in :func:`attention_figure`.
        title: default "encoder self-attention: <molecule>".

    Runs one forward pass in eval mode; the model keeps its mode and caches.
    Returns the path.
    """
    maps = forward_maps(model, "self", None, ids)  # L x (1, H, T, T)
    title = title or f"encoder self-attention: {_molecule(tokens)}"
    return plot_attention(maps, tokens, tokens, path, layers=layers, heads=heads, title=title, scale=scale)


def plot_cross_attention(model, src_ids, tgt_in_ids, src_tokens, tgt_tokens, path, layers=None,
                         heads=None, title: str | None = None, scale: str = "map") -> Path:
    """Cross-attention of a ``Seq2Seq`` on one pair: which source token each target
    position looks at (e.g. randomized SMILES in, canonical SMILES out).

    Args:
        model: a ``Seq2Seq``.
        src_ids: (S,) source token ids.
        tgt_in_ids: (T,) teacher-forced decoder input, BOS first (the target
            shifted right, as in training).
        src_tokens: S labels (x axis, keys); fewer crops.
        tgt_tokens: T labels (y axis, queries); fewer crops.
        path: the PNG to write.
        layers, heads, scale: as in :func:`attention_figure` (decoder layers).
        title: default "cross-attention, target -> source: <source> -> <target>".

    Runs one forward pass in eval mode; the model keeps its mode and caches.
    Returns the path.
    """
    maps = forward_maps(model, "cross", None, src_ids, tgt_in_ids)  # L x (1, H, T, S)
    title = title or f"cross-attention, target -> source: {_molecule(src_tokens)} -> {_molecule(tgt_tokens)}"
    return plot_attention(maps, tgt_tokens, src_tokens, path, layers=layers, heads=heads, title=title,
                          scale=scale)
