r"""Sequence-level metrics of a SMILES language model, including the reference's.

For each molecule ``[BOS, x_1 .. x_n, EOS]`` the model scores the targets
``x_1 .. x_n, EOS`` (n + 1 predictions). Reported:

* ``nll_token``: mean negative log-likelihood per scored target (nats);
* ``acc_token``: argmax next-token accuracy over the same targets;
* ``nll_mol_ref`` and ``rec_ref``: the reference article's conventions. There each
  molecule is a fixed row of ``L = 100`` positions, padded after the end with a
  token that doubles as end-of-sequence, and both the summed NLL and the argmax
  accuracy ("rec") count all L positions, padding included. Our model stops at its
  own EOS, after which every position is padding with probability 1; so the
  comparable numbers are the summed NLL of the n + 1 real targets (padding costs
  0 nats) and ``(correct real targets + L - n - 1) / L`` for rec. This is the
  same quantity for a model that has learned that padding follows the end; the
  reference's model pays a small extra cost on its padding positions, so our
  ``nll_mol_ref`` is a slightly favourable but fair comparison.
"""
from __future__ import annotations

import numpy as np

from minitransformer import backend
from minitransformer.nn.softmax import CrossEntropyLoss


def sequence_metrics(model, batches, pad_id: int, positions: int = 100) -> dict:
    """Metrics of ``model`` (a DecoderLM in eval mode) over padded id batches (host (B, T))."""
    nll_sum, correct, tokens, mols, rec_sum = 0.0, 0, 0, 0, 0.0
    for batch in batches:
        ids = backend.asarray(batch)  # (B, T)
        logits = model(ids[:, :-1])  # (B, T-1, V)
        targets = ids[:, 1:]  # (B, T-1)
        nll = CrossEntropyLoss(ignore_index=pad_id, reduction="none")(logits, targets)  # (B, T-1)
        keep = targets != pad_id  # (B, T-1)
        hit = (logits.argmax(axis=-1) == targets) & keep  # (B, T-1)
        n_scored = backend.to_numpy(keep.sum(axis=1))  # (B,)
        n_hit = backend.to_numpy(hit.sum(axis=1))  # (B,)
        nll_sum += float(nll.sum())
        correct += int(n_hit.sum())
        tokens += int(n_scored.sum())
        mols += len(batch)
        pad_positions = np.maximum(positions - n_scored, 0)  # (B,) padding counted as correct
        rec_sum += float(((n_hit + pad_positions) / np.maximum(positions, n_scored)).sum())
    return {
        "nll_token": nll_sum / max(tokens, 1),
        "acc_token": correct / max(tokens, 1),
        "nll_mol_ref": nll_sum / max(mols, 1),
        "rec_ref": rec_sum / max(mols, 1),
    }


def batches_of(id_lists, batch_size: int, pad_id: int):
    """Length-sorted padded host batches (B, T) for evaluation."""
    from minitransformer.train.tasks import pad_batch
    order = np.argsort([len(x) for x in id_lists], kind="stable")
    return [pad_batch([id_lists[j] for j in order[i:i + batch_size]], pad_id)
            for i in range(0, len(order), batch_size)]
