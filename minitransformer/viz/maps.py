r"""Attention maps: read them from the forward caches.

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

:func:`forward_maps` runs that one forward pass for you, in eval mode, on a
single example, and leaves the model as it found it (same train/eval flags,
same forward caches). The drawing lives in :mod:`minitransformer.viz.heatmaps`.

Which layers hold which attention:

============  ==========================  =================================
model         ``kind="self"``             ``kind="cross"``
============  ==========================  =================================
DecoderLM     ``blocks[i].attn`` (causal)  none (decoder-only)
Encoder       ``blocks[i].attn``           none
MaskedLM,     ``encoder.blocks[i].attn``   none
PropertyModel (the encoder they are built
              around; its head attends to
              nothing)
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

import numpy as np

from minitransformer import backend

__all__ = ["attention_maps", "forward_maps", "encoder_inside"]


# ---------------------------------------------------------------------------
# Reading the maps
# ---------------------------------------------------------------------------
def encoder_inside(model):
    """The model whose blocks attend: one composed around an encoder (``MaskedLM``,
    ``PropertyModel``) is read through its ``encoder``; any other model is itself."""
    inner = getattr(model, "encoder", None)
    return inner if inner is not None and hasattr(inner, "blocks") else model


def _stacks(model) -> dict[str, list]:
    """{stack name: list of blocks} for the three model families (duck-typed)."""
    if hasattr(model, "enc_blocks") and hasattr(model, "dec_blocks"):  # Seq2Seq
        return {"encoder": list(model.enc_blocks), "decoder": list(model.dec_blocks)}
    if hasattr(model, "blocks"):  # DecoderLM (decoder blocks) or Encoder (encoder blocks)
        blocks = list(model.blocks)
        is_decoder = bool(blocks) and getattr(blocks[0], "causal", False)  # CausalBlock: a decoder stack
        return {"decoder" if is_decoder else "encoder": blocks}
    raise TypeError(
        f"attention_maps: {type(model).__name__} is not a DecoderLM, Encoder or Seq2Seq "
        "(found neither .blocks nor .enc_blocks/.dec_blocks)"
    )


def _attention_layers(model, kind: str, stack: str | None) -> tuple[str, list]:
    """The attention modules, first layer first, that (kind, stack) names; and the stack name."""
    name = type(model).__name__
    if kind not in ("self", "cross", "copy"):
        raise ValueError(f"attention_maps: kind must be 'self', 'cross' or 'copy', got {kind!r}")
    if kind == "copy":  # a pointer-generator's attention over the source: one layer, one head
        if getattr(model, "pointer", None) is None:
            raise ValueError(f"attention_maps: {name} has no pointer; kind='copy' needs a Seq2Seq built with "
                             "pointer=True")
        return "decoder", [model.pointer]
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
        model: a ``DecoderLM``, ``Encoder`` (or a model around one: ``MaskedLM``,
            ``PropertyModel``) or ``Seq2Seq`` after a forward pass.
        kind: ``"self"`` (each stack's self-attention), ``"cross"``
            (``Seq2Seq`` decoder attending to the encoder output) or ``"copy"`` (a
            pointer-generator ``Seq2Seq``'s copy attention: one map, one head).
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
    model = encoder_inside(model)
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
# One example, one forward
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


def forward_maps(model, kind: str, stack: str | None, ids, tgt_in_ids=None, relations=None) -> list[np.ndarray]:
    """Run one eval-mode forward on one example and read its attention maps.

    Args:
        model: a ``DecoderLM`` or ``Encoder`` (``ids`` is its input; a ``MaskedLM`` or
            ``PropertyModel`` runs its encoder alone, so a head's features are not needed), or a
            ``Seq2Seq`` (``ids`` is the source, ``tgt_in_ids`` the decoder input).
        kind, stack: which maps, as in :func:`attention_maps`.
        ids: (T,) or (S,) token ids; a ``DecoderLM``'s start with BOS.
        tgt_in_ids: (T,) decoder input ids, BOS first (``Seq2Seq`` only).
        relations: (T, T) graph relation codes of the molecule, for an encoder with a graph bias.

    Returns:
        One (1, H, Tq, Tk) host array per layer (writable copies: the caches
        are given back to the model afterwards). The model keeps its train/eval
        flags and its forward caches.
    """
    model = encoder_inside(model)
    name = type(model).__name__
    is_seq2seq = hasattr(model, "enc_blocks")
    if is_seq2seq and tgt_in_ids is None:
        raise ValueError(f"forward_maps: a {name} needs tgt_in_ids (the decoder input, BOS first)")
    if not is_seq2seq and tgt_in_ids is not None:
        raise ValueError(f"forward_maps: a {name} has no decoder input; leave tgt_in_ids out")
    is_decoder = "decoder" in _stacks(model) and not is_seq2seq
    first = _one_sequence(ids, "forward_maps: ids", model.config.bos_id if is_decoder else None)  # (1, T)
    with _inspection(model):
        if is_seq2seq:
            tgt_in = _one_sequence(tgt_in_ids, "forward_maps: tgt_in_ids", model.config.bos_id)  # (1, T)
            model.forward(first, tgt_in)  # (1, T, V) logits, unused: we want the caches
        elif relations is not None:
            model.forward(first, relations=backend.asarray(np.asarray(relations)[None]))  # (1, T, T) relations
        else:
            model.forward(first)  # logits or hidden states, unused
        return [np.array(m) for m in attention_maps(model, kind, stack)]  # L x (1, H, Tq, Tk) copies


def rnn_attention_maps(model, src_ids, tgt_in_ids) -> list[np.ndarray]:
    """The attention of an ``RNNSeq2Seq`` on one pair, in the layout of :func:`forward_maps`:
    ``[(1, 1, T, S)]`` (one layer, one head), target steps by source positions. One
    eval-mode forward; the model keeps its train/eval flags and its forward caches."""
    src = _one_sequence(src_ids, "rnn_attention_maps: src_ids")  # (1, S)
    tgt_in = _one_sequence(tgt_in_ids, "rnn_attention_maps: tgt_in_ids", model.config.bos_id)  # (1, T)
    with _inspection(model):
        model.forward(src, tgt_in)  # (1, T, V) logits, unused: we want the weights
        return [np.array(backend.to_numpy(model.attention_weights()))[:, None]]  # [(1, 1, T, S)]
