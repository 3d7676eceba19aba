"""Training tasks: how one batch becomes a loss, for each model family.

The trainer (:mod:`minitransformer.train`) is generic; a task knows its data:

* ``collate(examples) -> batch``: pad a list of examples to the longest one (so
  padding is trimmed per batch) as host NumPy arrays;
* ``validate(examples, what)``: refuse, naming the example, one that no batch could
  use (an LM example of fewer than 2 tokens has nothing to predict; an empty source
  has nothing to attend to). ``collate`` calls it, and the trainer calls it on all
  the data before training, so a bad example fails at once and by its index, not
  deep inside a model some batches later;
* ``length(example)``: used to group examples of similar length;
* ``loss(model, batch, rng) -> (loss, n_tokens)``: forward pass and loss, the loss
  a 0-d device array; ``rng`` is a NumPy generator for per-batch randomness. The
  batch's values (token ids, labels) are checked on the host, before the copy to
  the device: on a GPU, checking them there would stall every step;
* ``backward(model)``: the backward pass of the last ``loss`` call;
* ``evaluate(model, batches) -> dict``: validation metrics (model in eval mode);
  ``metric_names`` lists the keys it returns, and ``validation_tokens(batches)``
  counts, on the host and without the model, the targets it would score. The
  trainer uses both to check its settings before training starts. Batches with
  nothing to score raise ``ValueError``: an average over no tokens is not 0.0.

Teacher forcing everywhere: the model reads the true prefix ``x[:, :-1]`` and is
scored on the next tokens ``x[:, 1:]`` (padding ignored by the loss).
"""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from minitransformer import backend
from minitransformer.chem.graph import batch_relations
from minitransformer.nn.bce import masked_bce_backward, masked_bce_forward
from minitransformer.nn.embedding import check_ids, ids_to_device
from minitransformer.nn.softmax import CrossEntropyLoss


class Task(Protocol):
    """What the trainer asks of a task (the module's list): every task here is one."""

    metric_names: Sequence[str]

    def validate(self, examples, what: str) -> None: ...
    def collate(self, examples): ...
    def length(self, example) -> int: ...
    def loss(self, model, batch, rng): ...
    def backward(self, model) -> None: ...
    def evaluate(self, model, batches) -> dict: ...


def pad_batch(seqs, pad_id: int) -> np.ndarray:
    """Right-pad integer sequences to the longest: (B, T_max) int64 host array."""
    if len(seqs) == 0:
        raise ValueError("pad_batch: no sequences; a batch needs at least one example")
    T = max(len(s) for s in seqs)
    out = np.full((len(seqs), T), pad_id, dtype=np.int64)  # (B, T)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out


def task_label(task, what: str) -> str:
    return f"{type(task).__name__} {what}".strip()


def check_lengths(where: str, seqs, minimum: int, need: str) -> None:
    """Refuse the first sequence shorter than ``minimum``, naming its index."""
    for i, seq in enumerate(seqs):
        n = len(seq)
        if n < minimum:
            shown = list(seq)[:6]
            raise ValueError(f"{where}: example {i} has {n} token{'' if n == 1 else 's'} {shown}; {need}: "
                             "drop it or fix the data")


def _check_batch(where: str, batch, min_len: int, part: str = "batch") -> None:
    """Refuse a batch (B, T) with B < 1 or T < ``min_len`` before it reaches a model."""
    if batch.ndim != 2 or batch.shape[0] < 1 or batch.shape[1] < min_len:
        raise ValueError(f"{where}: the {part} has shape {tuple(batch.shape)}; it needs (B >= 1, T >= {min_len}) "
                         "token ids: collate examples with the task's collate()")


class _TokenLossTask:
    """Shared parts of tasks scored by a token-level cross-entropy."""

    metric_names = ("val_loss", "val_acc", "val_tokens")

    def __init__(self, pad_id: int = 0, label_smoothing: float = 0.0):
        self.pad_id = pad_id
        self.label_smoothing = label_smoothing
        self._ce = None  # the CrossEntropyLoss of the last loss, for backward
        # What the summed loss is divided by, when not this batch's own scored tokens: the
        # trainer sets it for TrainConfig.loss_norm "epoch" (the epoch's mean scored tokens per
        # batch), data-parallel training (minitransformer.distributed) to that or to the scored
        # tokens of the whole global batch: the loss is then this shard's sum over it, and the
        # ranks' gradients add up to the global batch's.
        self.normaliser: float | None = None

    def _cross_entropy(self, logits, targets, smoothing):
        if self.normaliser is None:  # the mean over this batch's scored tokens
            self._ce = CrossEntropyLoss(ignore_index=self.pad_id, label_smoothing=smoothing)
            return self._ce(logits, targets)
        self._ce = CrossEntropyLoss(ignore_index=self.pad_id, label_smoothing=smoothing, reduction="sum")
        return self._ce(logits, targets) / max(self.normaliser, 1)

    def backward(self, model):
        # (B, T, V) fused (p - q) / N, N the batch's scored tokens (or the normaliser)
        dloss = 1.0 if self.normaliser is None else 1.0 / max(self.normaliser, 1)
        model.backward(self._ce.backward(dloss))

    def _token_metrics(self, model, batches, run, ignore_index=None):
        """Unsmoothed NLL per scored target token and argmax accuracy over those tokens."""
        ignore = self.pad_id if ignore_index is None else ignore_index
        total_nll, total_correct, total_tokens = 0.0, 0, 0
        for batch in batches:
            logits, targets = run(batch)  # (B, T, V), (B, T) device
            nll = CrossEntropyLoss(ignore_index=ignore, reduction="sum")(logits, targets)
            keep = targets != ignore  # (B, T)
            total_nll += float(nll)
            total_correct += int(((logits.argmax(axis=-1) == targets) & keep).sum())
            total_tokens += int(keep.sum())
        if total_tokens == 0:
            raise ValueError(f"{type(self).__name__}.evaluate: the batches hold no scored tokens (every target "
                             "is padding or unselected), so there is no loss to report; give validation "
                             "examples with tokens to predict")
        n = total_tokens
        return {"val_loss": total_nll / n, "val_acc": total_correct / n, "val_tokens": total_tokens}


class LMTask(_TokenLossTask):
    """Next-token prediction for :class:`~minitransformer.models.DecoderLM`.

    An example is a list of token ids ``[BOS, x_1, ..., x_n, EOS]``.
    """

    def length(self, example) -> int:
        return len(example)

    def validate(self, examples, what: str = "") -> None:
        check_lengths(task_label(self, what), examples, 2,
                       "an LM example needs at least 2 tokens (BOS and one to predict)")

    def collate(self, examples):
        self.validate(examples)
        return pad_batch(examples, self.pad_id)  # (B, T)

    def loss(self, model, batch, rng=None):
        _check_batch("LMTask", batch, 2)
        ids = ids_to_device(batch, model.config.vocab_size, "LMTask batch")  # (B, T)
        logits = model(ids[:, :-1])  # (B, T-1, V)
        targets = ids[:, 1:]  # (B, T-1)
        return self._cross_entropy(logits, targets, self.label_smoothing), int((batch[:, 1:] != self.pad_id).sum())

    def evaluate(self, model, batches):
        def run(batch):
            _check_batch("LMTask", batch, 2)
            ids = ids_to_device(batch, model.config.vocab_size, "LMTask batch")
            return model(ids[:, :-1]), ids[:, 1:]
        return self._token_metrics(model, batches, run)

    def validation_tokens(self, batches) -> int:
        """How many targets :meth:`evaluate` scores in ``batches`` (host only)."""
        return sum(int((b[:, 1:] != self.pad_id).sum()) for b in batches)

    def scored_tokens(self, batch) -> int:
        """How many targets :meth:`loss` scores in one host batch (B, T)."""
        return int((batch[:, 1:] != self.pad_id).sum())

    def example_tokens(self, example) -> int:
        """How many targets :meth:`loss` scores in one example: each token after BOS
        (``TrainConfig.loss_norm``)."""
        return len(example) - 1


class Seq2SeqTask(_TokenLossTask):
    """Translation-style training for :class:`~minitransformer.models.Seq2Seq`.

    An example is a pair ``(src_ids, tgt_ids)``; the target starts with BOS and
    ends with EOS.
    """

    def length(self, example) -> int:
        return max(len(example[0]), len(example[1]))

    def validate(self, examples, what: str = "") -> None:
        where = task_label(self, what)
        for i, (src, tgt) in enumerate(examples):
            if len(src) < 1:
                raise ValueError(f"{where}: example {i} has an empty source; a source needs at least 1 token "
                                 "(attention over nothing is undefined): drop it or fix the data")
            if len(tgt) < 2:
                raise ValueError(f"{where}: example {i} has a target of {len(tgt)} token"
                                 f"{'' if len(tgt) == 1 else 's'} {list(tgt)}; a target needs at least 2 (BOS "
                                 "and one to predict): drop it or fix the data")

    def collate(self, examples):
        self.validate(examples)
        return pad_batch([e[0] for e in examples], self.pad_id), pad_batch([e[1] for e in examples], self.pad_id)

    @staticmethod
    def _to_device(model, batch):
        """(src, tgt) host ids, checked, as device arrays (B, S), (B, T)."""
        _check_batch("Seq2SeqTask", batch[0], 1, "source batch")
        _check_batch("Seq2SeqTask", batch[1], 2, "target batch")
        return (ids_to_device(batch[0], model.config.src_vocab_size, "Seq2SeqTask source"),
                ids_to_device(batch[1], model.config.tgt_vocab_size, "Seq2SeqTask target"))

    def loss(self, model, batch, rng=None):
        src, tgt = self._to_device(model, batch)  # (B, S), (B, T)
        logits = model(src, tgt[:, :-1])  # (B, T-1, V)
        return self._cross_entropy(logits, tgt[:, 1:], self.label_smoothing), int((batch[1][:, 1:] != self.pad_id).sum())

    def evaluate(self, model, batches):
        def run(batch):
            src, tgt = self._to_device(model, batch)
            return model(src, tgt[:, :-1]), tgt[:, 1:]
        return self._token_metrics(model, batches, run)

    def validation_tokens(self, batches) -> int:
        """How many targets :meth:`evaluate` scores in ``batches`` (host only)."""
        return sum(int((b[1][:, 1:] != self.pad_id).sum()) for b in batches)

    def scored_tokens(self, batch) -> int:
        """How many targets :meth:`loss` scores in one host batch (src, tgt)."""
        return int((batch[1][:, 1:] != self.pad_id).sum())

    def example_tokens(self, example) -> int:
        """How many targets :meth:`loss` scores in one example: each target token after BOS
        (``TrainConfig.loss_norm``)."""
        return len(example[1]) - 1


class MLMTask(_TokenLossTask):
    """Masked-language-model pretraining for a :class:`~minitransformer.models.MaskedLM`.

    Each batch is corrupted afresh (80/10/10, see
    :func:`~minitransformer.models.mask_tokens`); only selected positions are scored.
    """

    IGNORE = -100

    def __init__(self, mask_id: int, vocab_size: int, pad_id: int = 0, special_ids=(0, 1, 2, 3),
                 p: float = 0.15, label_smoothing: float = 0.0):
        super().__init__(pad_id, label_smoothing)
        self.mask_id, self.vocab_size, self.special_ids, self.p = mask_id, vocab_size, tuple(special_ids), p

    def length(self, example) -> int:
        return len(example)

    def validate(self, examples, what: str = "") -> None:
        check_lengths(task_label(self, what), examples, 1, "an MLM example needs at least 1 token")

    def collate(self, examples):
        """ids (B, T); or, when the examples carry their graph (an encoder with a graph bias),
        ``(ids, relations)`` with relations (B, T, T)."""
        self.validate(examples)
        ids = pad_batch(examples, self.pad_id)  # (B, T)
        relations = batch_relations(examples, ids.shape[1], "MLMTask batch")  # (B, T, T) or None
        return ids if relations is None else (ids, relations)

    def _corrupt(self, batch, rng):
        """(corrupted, targets) host arrays (B, T); the batch is checked first (the
        replacements that corruption makes are valid ids by construction)."""
        from minitransformer.models.masked_lm import mask_tokens
        _check_batch("MLMTask", batch, 1)
        check_ids(batch, self.vocab_size, "MLMTask batch")
        return mask_tokens(batch, self.mask_id, self.vocab_size, rng, p=self.p,
                           special_ids=self.special_ids, ignore_index=self.IGNORE)

    def _masked_token_loss(self, logits, targets):
        """(loss, scored positions): the cross-entropy of ``logits`` (B, T, V) at the positions
        whose host ``targets`` (B, T) are not IGNORE; keeps the loss for :meth:`backward`."""
        self._ce = CrossEntropyLoss(ignore_index=self.IGNORE, label_smoothing=self.label_smoothing)
        return self._ce(logits, backend.asarray(targets)), int((targets != self.IGNORE).sum())

    def _logits(self, model, batch, rng):
        """(logits (B, T, V), host targets (B, T)): the batch corrupted afresh, read with the graph
        of its uncorrupted writings where it has one (the bonds stay known; the masked atoms are
        what is asked)."""
        ids, relations = batch if isinstance(batch, tuple) else (batch, None)
        corrupted, targets = self._corrupt(ids, rng)  # (B, T) each, host
        graph = {} if relations is None else {"relations": backend.asarray(relations)}  # (B, T, T)
        return model(backend.asarray(corrupted), **graph), targets  # (B, T, V)

    def loss(self, model, batch, rng):
        return self._masked_token_loss(*self._logits(model, batch, rng))

    EVAL_SEED = 12345  # the same corruption at every evaluation

    def evaluate(self, model, batches):
        rng = np.random.default_rng(self.EVAL_SEED)

        def run(batch):
            logits, targets = self._logits(model, batch, rng)
            return logits, backend.asarray(targets)
        return self._token_metrics(model, batches, run, ignore_index=self.IGNORE)

    def validation_tokens(self, batches) -> int:
        """How many positions :meth:`evaluate` scores in ``batches``: the same corruption,
        on the host only."""
        rng = np.random.default_rng(self.EVAL_SEED)
        return sum(int((self._corrupt(b[0] if isinstance(b, tuple) else b, rng)[1] != self.IGNORE).sum())
                   for b in batches)


class PropertyTask:
    """Multi-label property prediction for a :class:`~minitransformer.models.PropertyModel`
    (its pooled head: one logit per task, read at the ``<cls>`` position).

    An example is a pair ``(ids, labels)``: token ids starting with ``<cls>``, and a
    float vector (K,) of 0/1 labels with NaN where a label is missing; or a triple
    ``(ids, labels, features)`` for a model whose head reads F extra numbers per
    molecule (``PropertyModelConfig.n_features``), every example then with its (F,) vector. For a model
    with a graph bias, the ids carry their writing's graph (:class:`~minitransformer.chem.graph.GraphIds`)
    and a batch ends with the relations (B, T, T). The loss is the
    masked sigmoid binary cross-entropy averaged over the labels present in the batch
    (:func:`~minitransformer.functional.masked_bce_forward`); missing labels get exactly
    zero gradient. ``pos_weight`` (K,) optionally up-weights the rare positives.
    """

    metric_names = ("val_loss", "val_auc")

    def __init__(self, pad_id: int = 0, pos_weight=None):
        self.pad_id = pad_id
        self.pos_weight = None if pos_weight is None else np.asarray(pos_weight, dtype=np.float64)
        if self.pos_weight is not None and not (np.isfinite(self.pos_weight) & (self.pos_weight >= 0)).all():
            raise ValueError(f"PropertyTask: pos_weight must be finite and >= 0, got {self.pos_weight}")
        self._pw_device = {}  # dtype -> pos_weight on the device, copied once rather than every batch
        self._cache = None

    def length(self, example) -> int:
        return len(example[0])

    def validate(self, examples, what: str = "") -> None:
        where = task_label(self, what)
        check_lengths(where, [e[0] for e in examples], 1, "an example needs at least 1 token (<cls>)")
        k0 = None
        widths = {len(e) for e in examples}
        if not widths <= {2, 3} or len(widths) > 1:
            raise ValueError(f"{where}: examples must all be (ids, labels) or all (ids, labels, features); got "
                             f"tuples of {sorted(widths)} items")
        for i, (_, labels, *_) in enumerate(examples):
            k = int(np.size(labels)) if np.ndim(labels) == 1 else None
            if k is None:
                raise ValueError(f"{where}: example {i} has labels of shape {np.shape(labels)}; give a flat list "
                                 "of K labels (NaN for missing)")
            if k0 is None:
                k0 = k
            elif k != k0:
                raise ValueError(f"{where}: example {i} has {k} label(s), example 0 has {k0}; every example "
                                 "needs the same K labels (NaN for a missing one)")
        if widths == {3}:
            f = [np.asarray(e[2], dtype=np.float64) for e in examples]
            bad = next((i for i, v in enumerate(f) if v.shape != f[0].shape or v.ndim != 1
                        or not np.isfinite(v).all()), None)
            if bad is not None:
                raise ValueError(f"{where}: example {bad} has features of shape {f[bad].shape} (example 0: "
                                 f"{f[0].shape}) or a non-finite one; give every example the same F finite numbers")

    def collate(self, examples):
        self.validate(examples)
        ids = pad_batch([e[0] for e in examples], self.pad_id)  # (B, T)
        labels = np.stack([np.asarray(e[1], dtype=np.float64) for e in examples])  # (B, K), NaN = missing
        features = None if len(examples[0]) == 2 else np.stack([np.asarray(e[2], dtype=np.float32)
                                                                 for e in examples])  # (B, F)
        relations = batch_relations([e[0] for e in examples], ids.shape[1], "PropertyTask batch")  # (B, T, T)
        if relations is not None:
            return ids, labels, features, relations
        return (ids, labels) if features is None else (ids, labels, features)

    def _forward(self, model, batch):
        ids, labels, *rest = batch  # then features (B, F) or None, and relations (B, T, T), where given
        features = rest[0] if rest else None
        graph = {"relations": backend.asarray(rest[1])} if len(rest) > 1 else {}
        _check_batch("PropertyTask", ids, 1)
        present = labels[~np.isnan(labels)]  # host: checked here, not on the device (module notes)
        if present.size and not ((present >= 0) & (present <= 1)).all():
            bad = present[(present < 0) | (present > 1)][0]
            raise ValueError(f"PropertyTask: labels must lie in [0, 1] (NaN = missing), got {bad!r}")
        f = None if features is None else backend.asarray(features)  # (B, F)
        logits = model(ids_to_device(ids, model.config.vocab_size, "PropertyTask batch"), features=f,
                       **graph)  # (B, K)
        y = backend.asarray(labels.astype(logits.dtype))  # (B, K), NaN = missing
        pw = None
        if self.pos_weight is not None:
            key = (backend.name(), str(logits.dtype))
            if key not in self._pw_device:
                self._pw_device[key] = backend.asarray(self.pos_weight.astype(logits.dtype))  # (K,)
            pw = self._pw_device[key]
        loss, cache = masked_bce_forward(logits, y, pos_weight=pw)
        return loss, cache, logits

    def loss(self, model, batch, rng=None):
        loss, self._cache, _ = self._forward(model, batch)
        return loss, int((~np.isnan(batch[1])).sum())

    def backward(self, model):
        model.backward(masked_bce_backward(1.0, self._cache))  # (B, K)

    def evaluate(self, model, batches):
        """Validation loss (mean over present labels) and mean ROC-AUC over the tasks.

        The logits serve as the scores: ROC-AUC depends only on their order, which
        the sigmoid does not change.
        """
        from minitransformer.roc_auc import multilabel_roc_auc
        if self.validation_tokens(batches) == 0:
            raise ValueError("PropertyTask.evaluate: the batches hold no labels (all are missing), so there is "
                             "no loss to report; give validation examples with labels")
        total, count, scores = 0.0, 0, []
        for batch in batches:
            loss, _, logits = self._forward(model, batch)
            n = int((~np.isnan(batch[1])).sum())
            total, count = total + float(loss) * n, count + n
            scores.append(backend.to_numpy(logits))  # (B, K)
        labels = np.concatenate([b[1] for b in batches])  # (N, K)
        auc = multilabel_roc_auc(labels, np.concatenate(scores), mask=~np.isnan(labels))
        return {"val_loss": total / max(count, 1), "val_auc": auc["mean"]}

    def validation_tokens(self, batches) -> int:
        """How many labels :meth:`evaluate` scores in ``batches`` (the present ones)."""
        return sum(int((~np.isnan(b[1])).sum()) for b in batches)
