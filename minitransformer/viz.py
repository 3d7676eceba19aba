r"""Attention maps: read them from the forward caches, draw them as heatmaps.

Every :class:`~minitransformer.nn.MultiHeadAttention` layer keeps, in its
forward cache, the probabilities it used (what its backward needs anyway):

.. math::
    P_h = \mathrm{softmax}\!\Big(\tfrac{Q_h K_h^\top}{\sqrt{d_h}} + \text{mask}\Big)
    \in [0, 1]^{T_q \times T_k}, \qquad \textstyle\sum_j (P_h)_{ij} = 1 .

Row ``i`` of :math:`P_h` says how query position ``i`` spreads its attention
over the key positions. So looking at attention costs nothing extra: run one
forward pass, then read the caches. That is all :func:`attention_maps` does; it
never recomputes anything and never writes into a cache, so reading maps
between a forward and its backward leaves the gradients untouched.

:func:`plot_attention` draws a grid of such maps (rows = layers, columns =
heads) with the tokens as tick labels. Positions a mask forbids get probability
exactly 0 (their logit is :math:`-\infty`); they are drawn in light grey, so
the causal triangle of a decoder stands out.

Three wrappers run one forward pass in eval mode on a single example and write
the PNG: :func:`plot_decoder_attention` (``DecoderLM``),
:func:`plot_encoder_attention` (``Encoder``) and :func:`plot_cross_attention`
(``Seq2Seq``: which source token each target token looks at). They leave the
model as they found it: same train/eval mode, same forward caches.

Which layers hold which attention:

============  ==========================  =================================
model         ``kind="self"``             ``kind="cross"``
============  ==========================  =================================
DecoderLM     ``blocks[i].attn`` (causal)  none (decoder-only)
Encoder       ``blocks[i].attn``           none
Seq2Seq       ``dec_blocks[i].attn``       ``dec_blocks[i].cross``
              (``stack="decoder"``, the   (queries: target, keys: source)
              default) or
              ``enc_blocks[i].attn``
              (``stack="encoder"``)
============  ==========================  =================================

The dropout on attention probabilities (``attn_dropout``) is applied *after*
the cached probabilities, so a map from a training-mode forward is still a
proper distribution per row; the wrappers use eval mode anyway.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from minitransformer import backend

__all__ = [
    "attention_maps", "plot_attention", "plot_decoder_attention", "plot_encoder_attention",
    "plot_cross_attention",
]

MASKED_COLOR = "#d4d4d4"  # light grey: cells with probability exactly 0 (masked)


# ---------------------------------------------------------------------------
# Reading the maps
# ---------------------------------------------------------------------------
def _stacks(model) -> dict[str, list]:
    """{stack name: list of blocks} for the three model families (duck-typed)."""
    if hasattr(model, "enc_blocks") and hasattr(model, "dec_blocks"):  # Seq2Seq
        return {"encoder": list(model.enc_blocks), "decoder": list(model.dec_blocks)}
    if hasattr(model, "blocks"):  # DecoderLM (decoder blocks) or Encoder (encoder blocks)
        blocks = list(model.blocks)
        is_decoder = bool(blocks) and hasattr(blocks[0], "_cross")
        return {"decoder" if is_decoder else "encoder": blocks}
    raise TypeError(
        f"attention_maps: {type(model).__name__} is not a DecoderLM, Encoder or Seq2Seq "
        "(found neither .blocks nor .enc_blocks/.dec_blocks)"
    )


def _attention_layers(model, kind: str, stack: str | None) -> tuple[str, list]:
    """The attention modules, first layer first, that (kind, stack) names; and the stack name."""
    name = type(model).__name__
    if kind not in ("self", "cross"):
        raise ValueError(f"attention_maps: kind must be 'self' or 'cross', got {kind!r}")
    stacks = _stacks(model)
    if stack is None:
        stack = "decoder" if "decoder" in stacks else "encoder"
    if stack not in ("encoder", "decoder"):
        raise ValueError(f"attention_maps: stack must be None, 'encoder' or 'decoder', got {stack!r}")
    if stack not in stacks:
        raise ValueError(f"attention_maps: {name} has no {stack} stack (it has: {', '.join(stacks)})")
    blocks = stacks[stack]
    if kind == "self":
        return stack, [b.attn for b in blocks]
    layers = [getattr(b, "cross", None) for b in blocks]
    if not blocks or any(layer is None for layer in layers):
        hint = ("cross-attention lives in the decoder: use stack='decoder'" if len(stacks) == 2
                else "its layers only attend to their own tokens: use kind='self'")
        raise ValueError(f"attention_maps: {name} has no cross-attention in its {stack} stack; {hint}")
    return stack, layers


def attention_maps(model, kind: str = "self", stack: str | None = None, *,
                   allow_partial: bool = False) -> list[np.ndarray]:
    """The attention probabilities of every layer of the last forward pass.

    Read straight from each attention layer's forward cache: no recomputation,
    no extra forward, nothing written. Run the model's ``forward`` first.

    Args:
        model: a ``DecoderLM``, ``Encoder`` or ``Seq2Seq`` after a forward pass.
        kind: ``"self"`` (each stack's self-attention) or ``"cross"``
            (``Seq2Seq`` decoder attending to the encoder output).
        stack: for ``Seq2Seq``, ``"encoder"`` or ``"decoder"``; default
            ``None`` = the decoder (the only stack with cross-attention, and the
            one whose self-attention is causal). For ``DecoderLM``/``Encoder``
            leave it ``None`` (or name their single stack).
        allow_partial: accept maps from KV-cached incremental decoding
            (``model.step``), where each layer only kept the rows of the newest
            token(s): shape (B, H, Tn, Tpast+Tn). Default False: such maps raise.

    Returns:
        One host NumPy array per layer, first layer first, each (B, H, Tq, Tk):
        self-attention Tq = Tk = T (the sequence length); cross-attention
        Tq = T (target), Tk = S (source). Row ``[b, h, i]`` sums to 1 (or is all
        zero if every key was masked). On the NumPy backend these are read-only
        *views* of the cached arrays (no copy; ``np.array(m)`` gives a writable
        copy); on a GPU they are host copies.

    Raises:
        RuntimeError: no forward pass has filled the caches yet; or the layers'
            caches do not come from one forward; or (unless ``allow_partial``)
            the caches come from incremental decoding. For a full map, run one
            teacher-forced forward in eval mode on the whole sequence, e.g.
            ``model.eval(); model.forward(ids)`` (``DecoderLM``) or
            ``model.forward(src, tgt_in)`` (``Seq2Seq``).
        ValueError: ``kind="cross"`` on a model without cross-attention, or an
            unknown ``kind``/``stack``.
    """
    stack, layers = _attention_layers(model, kind, stack)
    name = f"{type(model).__name__} {stack} {kind}-attention"
    probs = []
    for i, layer in enumerate(layers):
        p = layer.attention_probs  # (B, H, Tq, Tk) on the device, or None
        if p is None:
            raise RuntimeError(
                f"attention_maps: {name} layer {i} has no forward cache yet: run a forward pass "
                "first (e.g. model.eval(); model.forward(...)), then read the maps"
            )
        probs.append(p)
    shapes = [tuple(p.shape) for p in probs]
    if len(set(shapes)) > 1:
        raise RuntimeError(
            f"attention_maps: the {name} layers hold caches of different shapes {shapes}: they do "
            "not come from one forward pass (did an earlier forward stop halfway?); run a forward "
            "pass again"
        )
    if not allow_partial:
        # A full forward has Tq = Tk in every self-attention. Incremental decoding feeds Tn new
        # tokens after Tpast cached ones, so its self-attention is (B, H, Tn, Tpast+Tn); the
        # cross-attention of the same blocks then also holds only those Tn query rows.
        for i, block in enumerate(_stacks(model)[stack]):
            p_self = block.attn.attention_probs  # (B, H, Tq, Tk) or None
            Tq, Tk = (0, 0) if p_self is None else tuple(p_self.shape[2:])
            if Tq != Tk:
                raise RuntimeError(
                    f"attention_maps: {name} layer {i} holds a slice of shape {shapes[0]} left by "
                    f"KV-cached incremental decoding (model.step: {Tq} new query row(s) against "
                    f"{Tk} keys), not a full map. For full maps run one teacher-forced forward in "
                    "eval mode on the whole sequence (model.eval(); model.forward(...)), or pass "
                    "allow_partial=True to get the newest rows only"
                )
    maps = []
    for p in probs:
        m = backend.to_numpy(p)  # (B, H, Tq, Tk) on the host: the cached array itself on NumPy
        m = m.view()  # a new view, so the flag below does not touch the cached array
        m.flags.writeable = False  # reading must never change what backward will use
        maps.append(m)
    return maps


# ---------------------------------------------------------------------------
# Drawing the maps
# ---------------------------------------------------------------------------
def _indices(chosen, n: int, what: str) -> list[int]:
    """Validate ``chosen`` (None = all, an int, or ints; negative counts from the end) against n."""
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


def plot_attention(maps, query_tokens, key_tokens, path, layers=None, heads=None, sample: int = 0,
                   title: str | None = None) -> Path:
    """Draw attention maps as a grid of heatmaps and write a PNG.

    Args:
        maps: list of L arrays (B, H, Tq, Tk), one per layer, as returned by
            :func:`attention_maps` (host or device arrays; a single 4-D array
            counts as one layer).
        query_tokens: nq <= Tq labels of the query positions (the y axis, top to
            bottom). Fewer than Tq crops the map to the first nq rows (drop
            right padding this way).
        key_tokens: nk <= Tk labels of the key positions (the x axis, left to
            right); fewer than Tk crops the columns the same way.
        path: where to write the PNG (its folder is created if missing).
        layers: layer indices to draw, one grid row each (None = all; an int =
            one layer; negative counts from the end).
        heads: head indices to draw, one grid column each (None = all).
        sample: which batch row b of the maps to draw, 0 <= sample < B.
        title: optional figure title.

    The colour scale is shared by every panel and fixed to 0..1 (a colourbar
    shows it). Cells with probability exactly 0, i.e. masked positions (the
    upper triangle of a causal decoder, padding keys), are light grey. Panel
    size and tick font size adapt to the number of tokens (readable up to
    about 60 tokens per axis).

    Returns:
        The path of the PNG, as a :class:`pathlib.Path`.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if hasattr(maps, "ndim") and maps.ndim == 4:
        maps = [maps]
    maps = list(maps)
    if not maps:
        raise ValueError("plot_attention: maps is empty (expected one (B, H, Tq, Tk) array per layer)")
    layer_ids = _indices(layers, len(maps), "layer")
    chosen = {}
    for li in layer_ids:
        m = maps[li]
        if getattr(m, "ndim", None) != 4:
            raise ValueError(
                f"plot_attention: maps[{li}] must have shape (B, H, Tq, Tk), got {tuple(np.shape(m))}"
            )
        chosen[li] = m
    shapes = {tuple(m.shape) for m in chosen.values()}
    if len(shapes) > 1:
        raise ValueError(f"plot_attention: the chosen layers' maps differ in shape: {sorted(shapes)}")
    B, H, Tq, Tk = shapes.pop()
    head_ids = _indices(heads, H, "head")
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or not 0 <= sample < B:
        raise ValueError(f"plot_attention: sample must be an integer in 0..{B - 1} (the batch size is "
                         f"{B}), got {sample!r}")
    q_labels = _check_tokens(query_tokens, Tq, "query")
    k_labels = _check_tokens(key_tokens, Tk, "key")
    nq, nk = len(q_labels), len(k_labels)

    # -- sizes: about 0.11 inch per token at 60 tokens, larger for short sequences --
    n_max = max(nq, nk)
    cell = min(0.35, 6.6 / n_max)  # inches per token
    font = float(np.clip(0.75 * cell * 72, 4.0, 10.0))  # tick label size in points
    panel_w, panel_h = max(2.0, cell * nk), max(2.0, cell * nq)  # inches
    label_in = 0.3 + max(len(s) for s in q_labels + k_labels) * 0.6 * font / 72  # tick label room
    rows, cols = len(layer_ids), len(head_ids)
    fig_w = cols * (panel_w + label_in) + 1.2  # + colourbar
    fig_h = rows * (panel_h + label_in + 0.35) + (0.5 if title else 0.1)  # + panel titles
    dpi = min(120.0, 9000.0 / max(fig_w, fig_h))  # keep the PNG under ~9000 px a side

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad=MASKED_COLOR)  # bad = masked cells (p = 0)
    fig, axes = plt.subplots(rows, cols, figsize=(fig_w, fig_h), squeeze=False, layout="constrained")
    image = None
    for r, li in enumerate(layer_ids):
        for c, h in enumerate(head_ids):
            ax = axes[r, c]
            grid = np.asarray(backend.to_numpy(chosen[li])[sample, h, :nq, :nk], dtype=np.float64)  # (nq, nk)
            image = ax.imshow(np.ma.masked_equal(grid, 0.0), cmap=cmap, vmin=0.0, vmax=1.0,
                              aspect="auto", interpolation="nearest")
            ax.set_xticks(range(nk))
            ax.set_xticklabels(k_labels, rotation=90, fontsize=font)
            ax.set_yticks(range(nq))
            ax.set_yticklabels(q_labels, fontsize=font)
            ax.tick_params(length=0, pad=1)
            ax.set_title(f"layer {li} · head {h}", fontsize=9)
            if r == rows - 1:
                ax.set_xlabel("key", fontsize=9)
            if c == 0:
                ax.set_ylabel("query", fontsize=9)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=min(0.9, 2.0 / rows),
                 label="attention probability (grey: masked, p = 0)")
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------
# One example, one forward, one PNG
# ---------------------------------------------------------------------------
@contextlib.contextmanager
def _inspection(model):
    """Eval mode inside; afterwards every sub-module gets back its own train/eval flag and
    its forward cache, so a forward + backward in progress is not disturbed."""
    saved = [(m, m.training, m.cache) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training, cache in saved:
            m.training, m.cache = training, cache


def _one_sequence(ids, what: str, bos_id: int | None = None):
    """A 1-D integer sequence (T,) as a device batch (1, T)."""
    a = np.asarray(backend.to_numpy(ids) if backend.is_device_array(ids) else ids)  # (T,)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence of token ids (T,), got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integer token ids, got dtype {a.dtype}")
    if bos_id is not None and int(a[0]) != bos_id:
        raise ValueError(f"{what} must start with BOS (id {bos_id}), got {int(a[0])} first")
    return backend.asarray(a[None])  # (1, T)


def plot_decoder_attention(model, ids, tokens, path, layers=None, heads=None,
                           title: str | None = None) -> Path:
    """Causal self-attention of a ``DecoderLM`` on one sequence, as a PNG.

    Args:
        model: a ``DecoderLM``.
        ids: (T,) token ids, BOS first (``model.config.bos_id``).
        tokens: T labels (or fewer to crop), used for both axes.
        path: the PNG to write.
        layers, heads: as in :func:`plot_attention`.

    Runs one forward pass in eval mode; the model keeps its mode and caches.
    Returns the path.
    """
    batch = _one_sequence(ids, "plot_decoder_attention: ids", model.config.bos_id)  # (1, T)
    with _inspection(model):
        model.forward(batch)  # (1, T, V) logits, unused: we want the caches
        maps = attention_maps(model, "self")  # L x (1, H, T, T)
    return plot_attention(maps, tokens, tokens, path, layers=layers, heads=heads, title=title)


def plot_encoder_attention(model, ids, tokens, path, layers=None, heads=None,
                           title: str | None = None) -> Path:
    """Bidirectional self-attention of an ``Encoder`` on one sequence, as a PNG.

    Args:
        model: an ``Encoder``.
        ids: (T,) token ids (CLS/BOS first, as in training).
        tokens: T labels (or fewer to crop), used for both axes.
        path: the PNG to write.
        layers, heads: as in :func:`plot_attention`.

    Runs one forward pass in eval mode; the model keeps its mode and caches.
    Returns the path.
    """
    batch = _one_sequence(ids, "plot_encoder_attention: ids")  # (1, T)
    with _inspection(model):
        model.forward(batch)  # (1, T, D) hidden states, unused
        maps = attention_maps(model, "self")  # L x (1, H, T, T)
    return plot_attention(maps, tokens, tokens, path, layers=layers, heads=heads, title=title)


def plot_cross_attention(model, src_ids, tgt_in_ids, src_tokens, tgt_tokens, path, layers=None,
                         heads=None, title: str | None = None) -> Path:
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
        layers, heads: as in :func:`plot_attention` (decoder layers).

    Runs one forward pass in eval mode; the model keeps its mode and caches.
    Returns the path.
    """
    src = _one_sequence(src_ids, "plot_cross_attention: src_ids")  # (1, S)
    tgt_in = _one_sequence(tgt_in_ids, "plot_cross_attention: tgt_in_ids", model.config.bos_id)  # (1, T)
    with _inspection(model):
        model.forward(src, tgt_in)  # (1, T, V) logits, unused
        maps = attention_maps(model, "cross")  # L x (1, H, T, S)
    return plot_attention(maps, tgt_tokens, src_tokens, path, layers=layers, heads=heads, title=title)
