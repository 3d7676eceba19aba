r"""Predicting properties of new molecules with a trained property model.

A property model (``demos/tox21_property.py``) is a
:class:`~minitransformer.models.PropertyModel`, an encoder with a pooled head: it reads
``[<cls>, tokens..., <eos>]`` and outputs one logit :math:`z_k` per assay from
the final state of ``<cls>``. The probability that the molecule is active in
assay :math:`k` is :math:`\sigma(z_k) = 1 / (1 + e^{-z_k})`.

Test-time augmentation. A molecule has many SMILES writings; the model was
trained on random ones, so its prediction differs a little from one writing to
the next. We average the probabilities of :math:`V` writings:

.. math:: \hat p_k = \frac{1}{V} \sum_{v=0}^{V-1} \sigma\big(z_k(\mathrm{view}_v)\big)

where view 0 is the string as given and views :math:`1 .. V-1` are random
SMILES of the same molecule (:class:`~minitransformer.chem.datasets.lm_data.RandomizedEpochs`
with seed ``seed + 104729``, writing :math:`v` for view :math:`v`; a random
writing with an unknown token or too many tokens falls back to the given string).
:func:`view_probabilities` is the one implementation; the training script's test
predictions are ``np.mean(view_probabilities(model, vocab, test.smiles, tta,
seed, max_len), axis=0)``.

A molecule the model cannot read gets no prediction (a NaN row) and a reason:
RDKit cannot parse it, it has tokens the vocabulary lacks, or it is longer than
the model's ``max_len`` tokens.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from minitransformer.chem.datasets.user_files import read_user_smiles
from minitransformer.chem.datasets.vocab import Vocab

__all__ = ["PropertyPredictor", "view_ids", "view_probabilities", "read_user_smiles",
           "write_predictions_csv", "VIEW_SEED_OFFSET"]

VIEW_SEED_OFFSET = 104729  # the random writings use seed + this (as the training script always has)


def view_ids(smiles: Sequence[str], vocab: Vocab, n_views: int, seed: int, max_tokens: int,
             graph: int = 0) -> list[list]:
    """``n_views`` encodings of each molecule: the string as given, then random SMILES.

    Returns a list of ``n_views`` lists of ``[<cls>, ..., <eos>]`` id lists, one per
    molecule. Every SMILES must parse. The random writings of a molecule depend on
    ``seed``, the view and the string itself only: a molecule gets the same views, and so
    the same prediction, alone or among others, wherever it stands in the list. ``graph`` > 0
    (a model with a graph bias): each id list carries its writing's graph, computed as in
    training (:class:`~minitransformer.chem.graph.GraphIds`).
    """
    from minitransformer.chem.datasets.lm_data import RandomizedEpochs
    from minitransformer.chem.graph import graph_ids
    if n_views < 1:
        raise ValueError(f"n_views must be at least 1 (the SMILES as given), got {n_views}")
    views = [[graph_ids(vocab.encode(s, cls=True), s, graph) for s in smiles]]
    writer = RandomizedEpochs(smiles, vocab, seed=seed + VIEW_SEED_OFFSET, max_tokens=max_tokens,
                              encode=dict(cls=True), keyed=True, graph=graph)
    views += [writer(v) for v in range(1, n_views)]
    return views


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # = 1 / (1 + exp(-z)), without overflow


def view_probabilities(model, vocab: Vocab, smiles: Sequence[str], n_views: int, seed: int,
                       max_tokens: int, batch_size: int = 128, features=None) -> list[np.ndarray]:
    """Sigmoid probabilities of every view: a list of ``n_views`` host arrays (N, K).

    ``model`` is a PropertyModel, in eval mode; ``features`` (N, F): what
    its head reads beside the SMILES (the same for every view of a molecule), for a
    model built with ``n_features`` = F. Each view runs in batches of similar length
    (sorted by length, then put back in input order), so little work goes into
    padding. The mean over the list is the prediction.
    """
    from minitransformer.backend import to_numpy, xp
    from minitransformer.chem.graph import batch_relations
    from minitransformer.train.tasks import pad_batch
    out = []
    for ids in view_ids(smiles, vocab, n_views, seed, max_tokens, graph=model.config.graph_max_distance):
        order = np.argsort([len(x) for x in ids], kind="stable")  # (N,)
        z = np.empty((len(ids), model.config.n_outputs))  # (N, K) logits, in input order
        for i in range(0, len(ids), batch_size):
            rows = order[i:i + batch_size]
            batch = pad_batch([ids[j] for j in rows], vocab.pad_id)  # (B, T)
            f = None if features is None else xp.asarray(features[rows])  # (B, F)
            relations = batch_relations([ids[j] for j in rows], batch.shape[1])  # (B, T, T), with a graph bias
            graph = {} if relations is None else {"relations": xp.asarray(relations)}
            z[rows] = to_numpy(model(xp.asarray(batch), features=f, **graph))  # (B, K)
        out.append(_sigmoid(z))
    return out


class PropertyPredictor:
    """A trained property model, its vocabulary and assay names, ready to predict."""

    def __init__(self, model, vocab: Vocab, task_names: Sequence[str], max_len: int, source: str = "",
                 descriptors=None):
        self.model, self.vocab, self.task_names = model.eval(), vocab, list(task_names)
        self.max_len, self.source = int(max_len), source
        self.descriptors = descriptors  # the DescriptorScale of a model whose head reads RDKit's descriptors

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike) -> "PropertyPredictor":
        """Load a property model saved by the training script (``best.npz``).

        Refuses, with a one-line ValueError, a checkpoint that is not a PropertyModel
        with a vocabulary holding ``<cls>`` (one written by 0.2.0, an ``Encoder`` with a
        ``cls`` head, is read as one: :mod:`minitransformer.checkpoint.earlier_layouts`). The assay
        names come from the checkpoint's ``run.tasks``; without them, a 12-output
        model gets the Tox21 names in order and any other ``task_0``, ``task_1``, ...
        """
        from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
        from minitransformer.chem.datasets.properties import TOX21_TASKS
        ckpt = load_checkpoint(path)
        need = ("predict needs a PropertyModel saved with its vocabulary, "
                "such as best.npz of a `minitransformer train property` run")
        config = ckpt.config or {}
        if ckpt.meta.get("phase") == "pretrain":
            raise ValueError(f"{path} was saved while pretraining, before its classifier head saw a label; give the "
                             "fine-tuned model, best.npz of the same run folder")
        if ckpt.model_type != "PropertyModel":
            raise ValueError(f"{path} holds a model of kind {ckpt.model_type}; {need}")
        if not ckpt.vocab:
            raise ValueError(f"{path} holds a PropertyModel without a vocabulary; {need}")
        vocab = Vocab.from_json(ckpt.vocab)
        if Vocab.CLS not in vocab.extras:
            raise ValueError(f"{path}: its vocabulary has no <cls> token; {need}")
        model, _ = model_from_checkpoint(ckpt)
        k = int(config["n_outputs"])
        run = ckpt.meta.get("run") or {}
        tasks = run.get("tasks")
        if not tasks or len(tasks) != k:
            tasks = list(TOX21_TASKS) if k == len(TOX21_TASKS) else [f"task_{i}" for i in range(k)]
        scale = None
        if config.get("n_features"):
            from minitransformer.chem.descriptors import DescriptorScale, descriptor_names
            if not run.get("descriptors"):
                raise ValueError(f"{path}: its model reads {config['n_features']} descriptors but the checkpoint "
                                 "holds no descriptor scale; it is damaged: use the run's best.npz as saved")
            scale = DescriptorScale.from_json(run["descriptors"])
            if len(scale.names) != config["n_features"]:
                raise ValueError(f"{path}: its model reads {config['n_features']} features but its descriptor scale "
                                 f"has {len(scale.names)}; it is damaged: use the run's best.npz as saved")
            if list(scale.names) != descriptor_names():
                raise ValueError(f"{path} was trained on the {len(scale.names)} descriptors of another RDKit "
                                 f"version (this one computes {len(descriptor_names())}); predict with the "
                                 "RDKit it was trained with")
        return cls(model, vocab, tasks, config["max_len"], source=str(path), descriptors=scale)

    def unreadable_reason(self, smiles: str) -> str | None:
        """Why the model cannot read ``smiles``, or None when it can (:meth:`Vocab.unreadable_reason`;
        for a model with a graph bias, also when the string's graph cannot be read)."""
        reason = self.vocab.unreadable_reason(smiles, self.max_len, cls=True)
        if reason is None and self.model.config.graph_max_distance:
            from minitransformer.chem.graph import molecule_of
            try:
                molecule_of(smiles)  # RDKit reads it, and its atoms are its atom tokens one for one
            except ValueError as err:
                reason = str(err)
        return reason

    def predict(self, smiles: Sequence[str], views: int = 8, seed: int = 0,
                batch_size: int = 128) -> tuple[np.ndarray, np.ndarray, list]:
        """Probabilities of every assay for every molecule, averaged over ``views`` writings.

        Returns ``(probs, ok, reasons)``: ``probs`` (N, K) float64 with NaN rows for
        unreadable molecules, ``ok`` (N,) bool, ``reasons`` N strings or None (None
        when readable). Strings are stripped first. The same input and seed give
        the same output.
        """
        smiles = [s.strip() if isinstance(s, str) else "" for s in smiles]
        reasons = [self.unreadable_reason(s) for s in smiles]
        ok = np.array([r is None for r in reasons], dtype=bool)  # (N,)
        probs = np.full((len(smiles), len(self.task_names)), np.nan)  # (N, K)
        readable = [s for s, good in zip(smiles, ok) if good]
        if readable:
            features = None
            if self.descriptors is not None:
                from minitransformer.chem.descriptors import compute_descriptors
                features = self.descriptors.transform(compute_descriptors(readable))  # (N, F)
            per_view = view_probabilities(self.model, self.vocab, readable, views, seed, self.max_len, batch_size,
                                          features=features)
            probs[ok] = np.mean(per_view, axis=0)
        return probs, ok, reasons


def predictions_csv(ids: Sequence[str] | None, smiles: Sequence[str], probs: np.ndarray, ok: np.ndarray,
                    reasons: Sequence, task_names: Sequence[str]) -> str:
    """The predictions as CSV text. Columns: ``id`` (only when some molecule has one),
    ``smiles``, ``readable`` (1/0), ``reason`` (empty when readable), then one column per
    assay with the probability to 4 decimals (empty for an unreadable molecule)."""
    probs = np.asarray(probs, dtype=np.float64)
    if probs.shape != (len(smiles), len(task_names)):
        raise ValueError(f"probs has shape {probs.shape}; expected ({len(smiles)}, {len(task_names)}): "
                         "one row per molecule, one column per assay")
    with_ids = ids is not None and any(ids)
    f = io.StringIO(newline="")
    w = csv.writer(f, lineterminator="\n")
    w.writerow((["id"] if with_ids else []) + ["smiles", "readable", "reason"] + list(task_names))
    for i, s in enumerate(smiles):
        cells = [f"{p:.4f}" for p in probs[i]] if ok[i] else [""] * len(task_names)
        w.writerow(([ids[i]] if with_ids else []) + [s, int(bool(ok[i])), reasons[i] or ""] + cells)
    return f.getvalue()


def write_predictions_csv(path: str | os.PathLike, ids: Sequence[str] | None, smiles: Sequence[str],
                          probs: np.ndarray, ok: np.ndarray, reasons: Sequence, task_names: Sequence[str],
                          overwrite: bool = False) -> Path:
    """Write :func:`predictions_csv` to ``path`` atomically; refuses to replace a file unless ``overwrite``."""
    from minitransformer.atomic import write_text
    return write_text(path, predictions_csv(ids, smiles, probs, ok, reasons, task_names), overwrite=overwrite)
