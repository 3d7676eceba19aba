"""``train property --encoder PATH``: fine-tune an encoder pretrained once, in an earlier run.

Masked-language-model pretraining on MOSES costs 15 minutes or more, and a property model is
measured over several seeds and splits: pretraining once and reusing the encoder makes each
later run cost its fine-tuning alone. The encoder is the pretraining checkpoint of a
``train property --pretrain`` run (``OUT/pretrain/last.npz``). Such a run pretrains on
molecules from elsewhere (MOSES, a file) with every molecule of the labelled table removed,
and builds its vocabulary over the whole table, so its encoder has seen no molecule of any
split and reads every one of them: it serves every split and every seed of that table.

What is refused, each in one line, before the run folder is touched: a checkpoint that is not
such an encoder; one saved after fine-tuning (``OUT/best.npz``, ``OUT/last.npz``), which has
learnt one split's training labels, test molecules of another split among them; one pretrained
on the training split's own molecules (``--pretrain-data train``, or a quick run), which has
seen molecules another split holds out; one made from another table (its fingerprint differs).
The fine-tuned model takes the encoder's architecture and vocabulary; the head (its width
included), the descriptors and the dropouts are this run's
(:func:`~minitransformer.models.property_model.fine_tuning_model`). The pretraining checkpoint
holds a ``MaskedLM``; one written by minitransformer 0.2.0 holds an ``Encoder`` with its heads,
read as a ``PropertyModel`` (:mod:`minitransformer.checkpoint.earlier_layouts`): either way
its encoder is what is taken.
"""
from __future__ import annotations

from typing import NamedTuple

#: The run-record entry that marks a pretraining which left out every molecule of the labelled table.
EXCLUDES_TABLE = "pretrain_excludes_table"


#: The kinds of checkpoint that hold an encoder: the pretraining's own (MaskedLM), a 0.2.0 one read as a
#: PropertyModel, or an encoder alone.
HOLDING_AN_ENCODER = ("MaskedLM", "PropertyModel", "Encoder")


class PretrainedEncoder(NamedTuple):
    """What a fine-tuning run takes from the checkpoint: its path, the encoder's config and weights
    (named as an Encoder's own) and the vocabulary."""

    path: str
    config: dict  # the EncoderConfig, as a dict
    vocab: object  # Vocab
    weights: dict  # name -> array


def table_fingerprint(smiles) -> str:
    """The labelled table's molecules, in file order, as one short hash."""
    from minitransformer.cli.run_folders import data_fingerprint
    return data_fingerprint(smiles)


def check_encoder(path: str):
    """The checks that need only the checkpoint (made before any work): an encoder, saved while
    pretraining, on other molecules with the table left out. Returns the checkpoint."""
    from minitransformer.checkpoint import load_checkpoint
    ckpt = load_checkpoint(path)
    run = ckpt.meta.get("run") or {}
    if ckpt.model_type not in HOLDING_AN_ENCODER or not ckpt.vocab:
        raise ValueError(f"--encoder {path} holds a model of kind {ckpt.model_type}; give the pretraining "
                         "checkpoint of a train property --pretrain run (OUT/pretrain/last.npz)")
    if ckpt.meta.get("phase") != "pretrain":
        raise ValueError(f"--encoder {path} was saved after fine-tuning on one split's labels (phase "
                         f"{ckpt.meta.get('phase')!r}), test molecules of another split among them; give that run's "
                         "pretrain/last.npz")
    if not run.get(EXCLUDES_TABLE):
        raise ValueError(f"--encoder {path} was not pretrained on other molecules with this table left out (it was "
                         f"pretrained on {run.get('pretrain_data', 'unknown molecules')!r}), so it may have seen "
                         "molecules a split holds out; pretrain one with train property --pretrain (MOSES)")
    return ckpt


def load_encoder(path: str, table_smiles) -> PretrainedEncoder:
    """Read the encoder at ``path`` and check it may be fine-tuned on this table (module notes)."""
    from minitransformer.checkpoint import model_from_checkpoint
    from minitransformer.chem import Vocab
    ckpt = check_encoder(path)
    run = ckpt.meta.get("run") or {}
    if run.get("table_sha256") != table_fingerprint(table_smiles):
        raise ValueError(f"--encoder {path} was pretrained beside another labelled table (its fingerprint "
                         f"{run.get('table_sha256')} differs from this one's {table_fingerprint(table_smiles)}); "
                         "pretrain an encoder for this --data")
    vocab = Vocab.from_json(ckpt.vocab)
    if Vocab.CLS not in vocab.extras:
        raise ValueError(f"--encoder {path}: its vocabulary has no <cls> token; it is not a property encoder")
    model, _ = model_from_checkpoint(ckpt)
    encoder = getattr(model, "encoder", model)  # a MaskedLM's or a PropertyModel's, or the Encoder itself
    return PretrainedEncoder(str(path), encoder.config.to_dict(), vocab, encoder.state_dict())
