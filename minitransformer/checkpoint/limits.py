"""How large a checkpoint may claim to be, checked before anything is allocated.

A file from an unknown source decides, through its zip directory and its model
config, how much memory reading it would take. These limits bound that claim:

* :data:`MAX_CHECKPOINT_BYTES`: the total uncompressed size of all the entries;
* :data:`MAX_COMPRESSION_RATIO`: the uncompressed total over the file's size (a zip
  bomb inflates a small file into a huge one), checked only above
  :data:`MAX_UNCOMPRESSED_FLOOR`, since a small genuine file may compress well;
* :data:`MAX_PARAMETERS`: the parameters that the model config implies, computed by
  :func:`declared_parameters` from the config's fields without building anything;
* :data:`MAX_SEQUENCE_LENGTH`: the ``max_len`` of every model kind, the steps a sampler or
  decoder may take (an LSTM's ``max_len`` costs no parameter, yet a huge one decodes for hours).

This module is their one home, and the checks below read them here: for a genuine
checkpoint that exceeds one, raise it on this module, e.g.
``minitransformer.checkpoint.limits.MAX_PARAMETERS = 5_000_000_000``.
(:mod:`minitransformer.checkpoint` re-exports the values for reading only.)
"""
from __future__ import annotations

import dataclasses

from minitransformer.checkpoint.contents import CheckpointError
from minitransformer.chem.graph import n_relations

MAX_PARAMETERS = 2_000_000_000          # parameters implied by the model config
MAX_CHECKPOINT_BYTES = 64 * 2**30       # total uncompressed size of all entries
MAX_COMPRESSION_RATIO = 100             # uncompressed size / file size ...
MAX_UNCOMPRESSED_FLOOR = 256 * 2**20    # ... checked only above this total (small files may compress well)
MAX_SEQUENCE_LENGTH = 16_384            # a model's max_len: decoding runs up to that many steps, every kind
_MAX_SIZE_FIELD = 2**40                 # no config size (d_model, max_len ...) is ever this large


def check_archive_size(path, total: int, size: int) -> None:
    """Refuse an archive whose entries declare ``total`` bytes uncompressed in a file of
    ``size`` bytes, if that is above :data:`MAX_CHECKPOINT_BYTES` or more than
    :data:`MAX_COMPRESSION_RATIO` times ``size`` (read from the zip directory: nothing
    has been inflated yet)."""
    if total > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(
            f"{path} declares {total:,} bytes uncompressed, above MAX_CHECKPOINT_BYTES={MAX_CHECKPOINT_BYTES:,} "
            "of minitransformer.checkpoint.limits; if the file is genuine, raise that limit")
    if total > max(MAX_UNCOMPRESSED_FLOOR, MAX_COMPRESSION_RATIO * size):
        raise CheckpointError(
            f"{path} declares {total:,} bytes uncompressed in a file of {size:,} bytes (more than "
            f"MAX_COMPRESSION_RATIO={MAX_COMPRESSION_RATIO} times); refusing to unpack it (a zip bomb?)")


def check_declared_parameters(where, model_type: str, config) -> int:
    """The parameter count that ``config`` declares (:func:`declared_parameters`),
    refused above :data:`MAX_PARAMETERS`; ``where`` names the checkpoint in the message."""
    try:
        n = declared_parameters(model_type, config)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from None
    if n > MAX_PARAMETERS:
        raise CheckpointError(
            f"{where}: its {model_type} config declares about {n:,} parameters, above MAX_PARAMETERS="
            f"{MAX_PARAMETERS:,} of minitransformer.checkpoint.limits; if the file is genuine, raise that limit")
    length = config.get("max_len")  # (a whole number: declared_parameters checked it)
    if length is not None and length > MAX_SEQUENCE_LENGTH:
        raise CheckpointError(
            f"{where}: its {model_type} config has max_len={length:,}, above MAX_SEQUENCE_LENGTH="
            f"{MAX_SEQUENCE_LENGTH:,} of minitransformer.checkpoint.limits (decoding would take that many steps); "
            "if the file is genuine, raise that limit")
    return n


def model_classes() -> dict:
    """{model type name: (model class, config class)}: the models a checkpoint may hold."""
    from minitransformer.models import (  # imported when first needed: importing checkpoints stays light
        DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, MaskedLM, PropertyModel, PropertyModelConfig,
        Seq2Seq, Seq2SeqConfig,
    )
    from minitransformer.models.lstm_lm import LSTMLM, LSTMLMConfig
    from minitransformer.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig
    return {"DecoderLM": (DecoderLM, DecoderLMConfig), "Encoder": (Encoder, EncoderConfig),
            "MaskedLM": (MaskedLM, EncoderConfig), "PropertyModel": (PropertyModel, PropertyModelConfig),
            "Seq2Seq": (Seq2Seq, Seq2SeqConfig), "LSTMLM": (LSTMLM, LSTMLMConfig),
            "RNNSeq2Seq": (RNNSeq2Seq, RNNSeq2SeqConfig)}


_SIZE_FIELDS = {  # config field -> smallest allowed value (fields a model's size grows with)
    "vocab_size": 1, "src_vocab_size": 1, "tgt_vocab_size": 1, "max_len": 1, "d_model": 1, "n_heads": 1,
    "d_head": 1, "d_ff": 0, "n_layers": 0, "n_enc_layers": 0, "n_dec_layers": 0, "n_outputs": 0,
    "n_features": 0, "head_hidden": 0, "hidden": 1, "relative_max_distance": 1, "graph_max_distance": 0,
}


def declared_parameters(model_type: str, config: dict) -> int:
    """An upper bound on the parameters (and position-table entries) of the model that
    ``config`` (a config's ``to_dict()``, e.g. from a checkpoint) describes, computed
    from its fields without building anything. Raises CheckpointError for a size field
    that is not a whole number in its range, or a missing one."""
    classes = model_classes()
    if model_type not in classes:
        raise CheckpointError(f"unknown model type {model_type!r}; known types: {sorted(classes)}")
    if not isinstance(config, dict):
        raise CheckpointError(f"its model config is {type(config).__name__}, not a JSON object")
    fields = {f.name: f.default for f in dataclasses.fields(classes[model_type][1])}
    c = {**fields, **config}
    for name, low in _SIZE_FIELDS.items():
        if name not in fields or (name == "d_head" and c[name] is None):
            continue
        value = c[name]
        if value is dataclasses.MISSING:
            raise CheckpointError(f"its model config has no {name}")
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < _MAX_SIZE_FIELD:
            raise CheckpointError(f"its model config has {name}={value!r}; it must be a whole number "
                                  f">= {low} (and below {_MAX_SIZE_FIELD:,})")
    if model_type in ("LSTMLM", "RNNSeq2Seq"):  # embeddings, each layer's Wx, Wh, b, the head (and attention)
        D, Hs, L = c["d_model"], c["hidden"], c["n_layers"]
        layers = L * (max(D, Hs) * 4 * Hs + Hs * 4 * Hs + 4 * Hs)
        if model_type == "LSTMLM":
            return c["vocab_size"] * (D + Hs + 1) + layers
        attention_and_combine = 3 * Hs * Hs + Hs + 2 * Hs * Hs + Hs  # additive's Wq, Wk, v (the larger form)
        return (c["src_vocab_size"] + c["tgt_vocab_size"]) * D + 2 * layers + attention_and_combine \
            + c["tgt_vocab_size"] * (Hs + 1)
    D, H, F, P = c["d_model"], c["n_heads"], c["d_ff"], c["max_len"]
    inner = H * (c["d_head"] if c.get("d_head") is not None else max(D // H, 1))
    attention = 4 * D * inner + 3 * inner + D  # qkv (D, 3 inner) and proj (inner, D), with biases
    block = attention + 2 * D * F + F + D + 4 * D  # + feed-forward and two LayerNorms
    if c.get("relative_bias") == "learned" or (c.get("relative_bias") is None and c.get("pos") == "relative"):
        block += H * (2 * c["relative_max_distance"] + 1)  # each self-attention's table (the bidirectional size)

    def embedder(v):  # token table + positions (learned, or the fixed sinusoidal table)
        return v * D + P * D

    def head(v):  # counted untied: an upper bound
        return D * v + v

    if model_type == "DecoderLM":
        return embedder(c["vocab_size"]) + c["n_layers"] * block + 2 * D + head(c["vocab_size"])
    if model_type in ("Encoder", "MaskedLM", "PropertyModel"):
        graph = c["graph_max_distance"]
        graph_table = H * n_relations(max(graph, 2)) if graph else 0  # each block's graph bias (H, R)
        encoder = embedder(c["vocab_size"]) + c["n_layers"] * (block + graph_table) + 2 * D
        if model_type == "MaskedLM":
            return encoder + head(c["vocab_size"])
        if model_type == "PropertyModel":  # [h_0; f] -> (hidden ->) K
            return (encoder + (D + c["n_features"] + 1) * (c["head_hidden"] or c["n_outputs"])
                    + (c["head_hidden"] + 1) * c["n_outputs"])
        return encoder
    return (embedder(c["src_vocab_size"]) + embedder(c["tgt_vocab_size"]) + c["n_enc_layers"] * block
            + c["n_dec_layers"] * (block + attention + 2 * D) + 4 * D + head(c["tgt_vocab_size"]))
