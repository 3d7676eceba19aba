"""All the attention pictures of one molecule, for any of the three model kinds.

:func:`render_attention` is what ``minitransformer attention CHECKPOINT SMILES``
calls. It frames the SMILES the way the model was trained, runs one eval-mode
forward, and writes, per attention kind the model has, a heatmap PNG and a
molecule drawing (atoms shaded by the attention their tokens receive):

==========  ================================  =========================================
model       input                             pictures (``<name>.png``, ``<name>_molecule.png``)
==========  ================================  =========================================
DecoderLM   ``<bos>`` tokens (no ``<eos>``)   ``attention_decoder_self``
Encoder     ``<cls>`` tokens ``<eos>``        ``attention_encoder_self`` (also the encoder of a
                                              ``MaskedLM`` or a ``PropertyModel``)
Seq2Seq     source ``<bos>`` tokens           ``attention_encoder_self`` (source),
            ``<eos>``; decoder input          ``attention_decoder_self`` (target; no
            ``<bos>`` + target tokens          molecule if the target does not parse),
                                              ``attention_cross`` (molecule: the source);
                                              with a pointer, ``attention_copy`` (where
                                              each step may copy a source token from)
==========  ================================  =========================================

An encoder with a graph bias reads the molecule's relations as in training, and its
bias tables are drawn too (``graph_bias.png``, :mod:`~minitransformer.viz.graph_bias`).

For a ``Seq2Seq`` the target is, by default, what the model itself writes
(greedy decoding), teacher-forced back in; pass ``target=`` to see another.

Every PNG is rendered in memory first; only then are the files written, each
atomically, and if one write fails the files this call created are removed
again: a failure leaves no new file behind (a file it replaced stays replaced).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from minitransformer.atomic import FileExistsRefusal, write_bytes
from minitransformer.viz.heatmaps import attention_png
from minitransformer.viz.maps import encoder_inside, forward_maps, rnn_attention_maps

__all__ = ["render_attention"]


def _kind(model) -> str:
    from minitransformer.models import DecoderLM, Encoder, MaskedLM, PropertyModel, Seq2Seq
    from minitransformer.models.rnn_seq2seq import RNNSeq2Seq
    for cls, name in ((DecoderLM, "decoder"), ((Encoder, MaskedLM, PropertyModel), "encoder"), (Seq2Seq, "seq2seq"),
                      (RNNSeq2Seq, "rnn")):
        if isinstance(model, cls):
            return name
    raise TypeError(f"render_attention: {type(model).__name__} is not a DecoderLM, an Encoder (or a MaskedLM or "
                    "PropertyModel around one), a Seq2Seq or an RNNSeq2Seq")


def _check_length(model, n: int, what: str) -> None:
    if n > model.config.max_len:
        raise ValueError(f"render_attention: the {what} has {n} tokens with its specials, more than the "
                         f"model's max_len {model.config.max_len}; give a shorter SMILES")


def _layer_text(layers, heads, n_layers: int) -> str:
    """'layers 0-3, mean of heads' style text for the molecule drawing's title."""
    ls = f"all {n_layers} layers" if layers is None else \
        "layers " + ", ".join(str(int(i) % n_layers) for i in np.atleast_1d(layers))
    hs = "all heads" if isinstance(heads, str) or heads is None else \
        "heads " + ", ".join(str(int(i)) for i in np.atleast_1d(heads))
    return f"mean over {ls}, {hs}, all query tokens"


def _views(model, vocab, smiles: str, target: str | None):
    """[(file stem, heading, maps, query tokens, key tokens, key SMILES or None)] for the model."""
    kind, toks = _kind(model), vocab.tokens_of(smiles)  # the model's own writing (rings by size, say)
    if kind == "decoder":
        ids = vocab.encode(smiles)[:-1]  # (T,): <bos> + tokens, the input when the model predicts <eos>
        _check_length(model, len(ids), "input")
        labels = [vocab.BOS] + toks
        maps = forward_maps(model, "self", None, np.asarray(ids))  # L x (1, H, T, T)
        drawn = None if vocab.rings == "sizes" else smiles  # rings by size: its tokens do not spell the SMILES
        return [("attention_decoder_self", "decoder self-attention (causal)", maps, labels, labels, drawn)]
    if kind == "encoder":
        ids = vocab.encode(smiles, cls=True)  # (T,): <cls> tokens <eos>, as the property model trains
        _check_length(model, len(ids), "input")
        labels = [vocab.CLS] + toks + [vocab.EOS]
        graph = encoder_inside(model).config.graph_max_distance  # 0: no graph bias
        relations = None
        if graph:  # the molecule's relations, computed as in training
            from minitransformer.chem.graph import relation_batch, token_graph
            relations = relation_batch([token_graph(smiles, graph)], [len(ids)], len(ids))[0]  # (T, T)
        maps = forward_maps(model, "self", None, np.asarray(ids), relations=relations)  # L x (1, H, T, T)
        heading = "encoder self-attention" + (" (with the molecule's graph bias)" if graph else "")
        return [("attention_encoder_self", heading, maps, labels, labels, smiles)]
    src = np.asarray(vocab.encode(smiles))  # (S,): <bos> tokens <eos>
    _check_length(model, len(src), "source")
    if target is None:
        from minitransformer.generate import greedy
        target = vocab.decode(greedy(model, src=src[None])[0])  # what the model writes
    tgt_in = np.asarray(vocab.encode(target)[:-1])  # (T,): <bos> + target tokens
    _check_length(model, len(tgt_in), "target")
    src_labels = [vocab.BOS] + toks + [vocab.EOS]
    tgt_labels = [vocab.BOS] + vocab.tokens_of(target)
    from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit
    with quiet_rdkit():
        target_ok = mol_from_smiles(target) is not None
    if kind == "rnn":  # one attention, the decoder's over the encoder's states
        return [("attention_cross", f"{model.config.attention} attention, target -> source: {smiles} -> "
                 f"{target or '(empty)'}", rnn_attention_maps(model, src, tgt_in), tgt_labels, src_labels, smiles)]
    views = [
        ("attention_encoder_self", f"encoder self-attention (source): {smiles}",
         forward_maps(model, "self", "encoder", src, tgt_in), src_labels, src_labels, smiles),
        ("attention_decoder_self", f"decoder self-attention (causal, target): {target or '(empty)'}",
         forward_maps(model, "self", "decoder", src, tgt_in), tgt_labels, tgt_labels,
         target if target_ok else None),
        ("attention_cross", f"cross-attention, target -> source: {smiles} -> {target or '(empty)'}",
         forward_maps(model, "cross", None, src, tgt_in), tgt_labels, src_labels, smiles),
    ]
    if getattr(model, "pointer", None) is not None:  # where each step may copy a source token from
        views.append(("attention_copy", f"copy attention (the pointer), target -> source: {smiles} -> "
                      f"{target or '(empty)'}", forward_maps(model, "copy", None, src, tgt_in), tgt_labels,
                      src_labels, smiles))
    return views


def render_attention(model, vocab, smiles: str, out_dir, layers=None, heads=None, scale: str = "map",
                     target: str | None = None, molecules: bool = True, overwrite: bool = True) -> list[Path]:
    """Write the attention heatmaps and molecule drawings of one SMILES; return their paths.

    Args:
        model: a ``DecoderLM``, ``Encoder`` (or a ``MaskedLM`` or ``PropertyModel``: its encoder's
            attention) or ``Seq2Seq`` (e.g. from
            :func:`~minitransformer.checkpoint.model_from_checkpoint`).
        vocab: its :class:`~minitransformer.chem.Vocab` (an ``Encoder`` needs ``<cls>``).
        smiles: the molecule (for a ``Seq2Seq``: the source).
        out_dir: the folder to write into (created if missing).
        layers: layer indices to draw and to average for the molecule (None = all).
        heads: head indices, None = all, or ``"mean"`` (one panel per layer).
        scale: heatmap colour scale, ``"map"``, ``"row"`` or ``"fixed"``
            (see :mod:`minitransformer.viz.heatmaps`).
        target: ``Seq2Seq`` only: the decoder's target (default: the model's greedy output).
        molecules: also draw the molecules (needs RDKit); False = heatmaps only. A generator that
            writes rings by size (``vocab.rings``) gets its heatmap only: the atoms are drawn by
            reading the tokens as the SMILES they spell.
        overwrite: False refuses (FileExistsRefusal) before writing anything if a file exists.

    Returns:
        The written paths, heatmap then molecule for each attention kind.
    The model keeps its train/eval flags and forward caches.
    """
    if not isinstance(smiles, str) or not smiles:
        raise ValueError(f"render_attention: smiles must be a non-empty string, got {smiles!r}")
    if target is not None and _kind(model) not in ("seq2seq", "rnn"):
        raise ValueError(f"render_attention: target= is for an encoder-decoder only, not a {type(model).__name__}")
    if molecules:  # fail before any work if the molecule cannot be drawn
        from minitransformer.viz.attention_drawing import molecule_of
        molecule_of(smiles)
    out_dir = Path(out_dir)
    pictures = []  # [(path, png bytes)], all rendered before anything is written
    for stem, heading, maps, q_labels, k_labels, key_smiles in _views(model, vocab, smiles, target):
        pictures.append((out_dir / f"{stem}.png",
                         attention_png(maps, q_labels, k_labels, layers, heads, title=heading, scale=scale)))
        if molecules and key_smiles:
            from minitransformer.viz.attention_drawing import attention_received, draw_attention_on_molecule
            weights = attention_received(maps, layers, None if heads == "mean" else heads)  # (Tk,)
            title = f"{heading.split(':')[0]}\n{_layer_text(layers, heads, len(maps))}"
            pictures.append((out_dir / f"{stem}_molecule.png",
                             draw_attention_on_molecule(key_smiles, weights, k_labels, title=title)))
    if _kind(model) == "encoder" and encoder_inside(model).config.graph_max_distance:  # what its heads learned
        from minitransformer.viz.graph_bias import graph_bias_png
        pictures.append((out_dir / "graph_bias.png", graph_bias_png(model, layers)))
    if not overwrite:
        existing = [str(p) for p, _ in pictures if p.exists()]
        if existing:
            raise FileExistsRefusal(f"{existing[0]} already exists; pass --force to overwrite it, "
                                    "or choose another folder")
    written, new = [], []
    try:
        for path, png in pictures:
            existed = path.exists()
            written.append(write_bytes(path, png))
            if not existed:
                new.append(path)
    except BaseException:
        for path in new:  # all or nothing: remove the files this call created
            path.unlink(missing_ok=True)
        raise
    return written
