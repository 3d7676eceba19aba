r"""Masked-language-model pretraining with a second target: each molecule's descriptors.

A masked language model learns the grammar of SMILES and which atoms sit together; it
never scores the first token's state, which a property model then reads. Asking that
state to predict, from the same corrupted input, numbers known of the whole molecule
(RDKit's 2D descriptors: weight, logP, polar surface area, ring and fragment counts;
MolBERT's "physchem" task) teaches it to summarise the molecule before any label is seen.

One pass of :class:`~minitransformer.models.Encoder` with ``head="mlm+aux"`` gives both
outputs, and the loss adds the two:

.. math:: L = L_\text{MLM} + w \cdot \frac{1}{BA} \sum_{b,a} (\hat y_{ba} - y_{ba})^2,

with :math:`y` the A descriptors of each molecule put on the empirical CDF of the pretraining
molecules and scaled to unit variance (:func:`descriptor_targets`), so that the second term
starts near 1, beside a cross-entropy of the same order, and :math:`w` = ``weight``.
"""
from __future__ import annotations

import math
import time

import numpy as np

from minitransformer import backend
from minitransformer import functional as F
from minitransformer.train.tasks import MLMTask, check_lengths, task_label, pad_batch

#: The centred CDF scale is uniform on [-1/2, 1/2], of variance 1/12: this factor makes it 1.
UNIT_VARIANCE = math.sqrt(12.0)


def descriptor_targets(smiles) -> np.ndarray:
    """RDKit's 2D descriptors of every molecule on the scale fitted to these molecules, at unit
    variance: (N, A) float32, 0 where RDKit gives no value."""
    from minitransformer.chem.descriptors import DescriptorScale, compute_descriptors, descriptor_names
    raw = compute_descriptors(smiles)  # (N, A) float64, NaN where none
    targets = DescriptorScale.fit(raw, descriptor_names()).transform(raw)  # (N, A) float32 in [-1/2, 1/2]
    targets *= np.float32(UNIT_VARIANCE)
    return targets


class DescriptorEpochs:
    """Callable ``epoch -> [(ids, targets), ...]``: each molecule written as a fresh random SMILES
    each epoch, ``<cls>`` first, beside its :func:`descriptor_targets`. Those are computed by
    :meth:`prepare` (or at the first call), not before: a run resumed after its pretraining never
    pays for them."""

    def __init__(self, smiles, vocab, seed: int, max_tokens: int):
        self.smiles, self.vocab, self.seed, self.max_tokens = list(smiles), vocab, seed, max_tokens
        self._epochs = None  # LabelledEpochs, once the targets are known

    def prepare(self) -> float:
        """Compute the descriptors (once); returns the seconds it took (0 when done already)."""
        if self._epochs is not None:
            return 0.0
        from minitransformer.chem.datasets.lm_data import LabelledEpochs
        t0 = time.perf_counter()
        targets = descriptor_targets(self.smiles)  # (N, A)
        spent = time.perf_counter() - t0
        print(f"pretraining: {targets.shape[1]} RDKit descriptors of each of the {len(self.smiles)} molecules "
              f"as a second target ({spent:.0f} s to compute)")
        self._epochs = LabelledEpochs(self.smiles, targets, self.vocab, self.seed, 1.0, self.max_tokens)
        return spent

    def __call__(self, epoch: int):
        self.prepare()
        return self._epochs(epoch)


class MLMDescriptorTask(MLMTask):
    """Masked-language-model pretraining plus the regression of A numbers per molecule from the
    first token's state (module notes). An example is ``(ids, targets)``: token ids starting
    with ``<cls>``, and A finite numbers. Validation scores the masked tokens only, as
    :class:`MLMTask` does."""

    def __init__(self, mask_id: int, vocab_size: int, n_targets: int, weight: float = 1.0, **kw):
        super().__init__(mask_id, vocab_size, **kw)
        if not (isinstance(n_targets, int) and n_targets >= 1 and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"MLMDescriptorTask: n_targets must be >= 1 and weight finite and >= 0, got "
                             f"{n_targets!r} and {weight!r}")
        self.n_targets, self.weight = n_targets, float(weight)
        self._mse = None  # the MSECache of the last loss

    def length(self, example) -> int:
        return len(example[0])

    def validate(self, examples, what: str = "") -> None:
        where = task_label(self, what)
        check_lengths(where, [e[0] for e in examples], 1, "an example needs at least 1 token (<cls>)")
        for i, e in enumerate(examples):
            y = np.asarray(e[1], dtype=np.float64)
            if y.shape != (self.n_targets,) or not np.isfinite(y).all():
                raise ValueError(f"{where}: example {i} has targets of shape {y.shape} or a non-finite one; give "
                                 f"every example {self.n_targets} finite numbers")

    def collate(self, examples):
        self.validate(examples)
        ids = pad_batch([e[0] for e in examples], self.pad_id)  # (B, T)
        targets = np.stack([np.asarray(e[1], dtype=np.float32) for e in examples])  # (B, A)
        return ids, targets

    def loss(self, model, batch, rng):
        ids, targets = batch
        corrupted, tokens = self._corrupt(ids, rng)  # (B, T) each, host
        logits, pred = model(backend.asarray(corrupted), head="mlm+aux")  # (B, T, V), (B, A)
        mlm, n_scored = self._masked_token_loss(logits, tokens)  # ()
        aux, self._mse = F.mse_forward(pred, backend.asarray(targets))  # ()
        return mlm + self.weight * aux, n_scored

    def backward(self, model):
        model.backward((self._ce.backward(1.0), F.mse_backward(self.weight, self._mse)))  # (B, T, V), (B, A)

    def evaluate(self, model, batches):
        return super().evaluate(model, [ids for ids, _ in batches])

    def validation_tokens(self, batches) -> int:
        return super().validation_tokens([ids for ids, _ in batches])
