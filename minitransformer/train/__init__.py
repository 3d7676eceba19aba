"""One training loop for every model: :func:`fit` (and the :class:`Trainer` behind it).

Per step: plan -> collate -> forward + loss -> check finite -> zero_grad ->
backward -> clip -> optimizer step. Per epoch: evaluate, record history, keep the
best checkpoint, stop early when the validation metric stops improving.

The package has one module per concept:

* :mod:`~minitransformer.train.config`: :class:`TrainConfig`, the settings of a
  run, checked when it is built;
* :mod:`~minitransformer.train.batches`: :func:`plan_batches`, the shuffled,
  length-bucketed batches of an epoch;
* :mod:`~minitransformer.train.trainer`: :class:`Trainer` (the loop) and :func:`fit`;
* :mod:`~minitransformer.train.checkpointing`: how the trainer saves ``best.npz``
  and ``last.npz`` and resumes from one;
* :mod:`~minitransformer.train.divergence`: :class:`TrainingDiverged` and the
  finite checks on the device;
* :mod:`~minitransformer.train.weight_average`: :class:`WeightAverage`, a running
  average of the weights that the trainer judges and keeps (``TrainConfig.average``);
* :mod:`~minitransformer.train.tasks`: how one batch becomes a loss, for each model family,
  with :mod:`~minitransformer.train.augmented_likelihood` (REINVENT's loss);
* :mod:`~minitransformer.train.recipe`: a ``train`` command's typed recipe, and
  :mod:`~minitransformer.train.time_plan`: two phases planned in minutes on the machine.

Everything is re-exported here: ``from minitransformer.train import TrainConfig, fit``.

Reproducibility and exact resume
    Randomness comes from three places, each resumable:

    * batch order for epoch ``e``: a NumPy generator seeded with ``(seed, e)``;
    * per-batch task randomness (MLM corruption): seeded with ``(seed, e, i)``;
    * dropout: the model's :class:`~minitransformer.backend.RNG`, whose
      ``(seed, counter)`` state is saved in every checkpoint.

    So a checkpoint taken after step ``s`` (``last.npz``) holds everything needed to
    continue: weights, optimizer moments and step, the dropout RNG, and the
    position ``(epoch, batch)``. Training 2 steps, stopping, and resuming for 2
    more gives exactly the losses of 4 straight steps.

Safety
    * A non-finite loss or gradient norm stops training *before* the update with
      :class:`TrainingDiverged`, naming the epoch, step and batch and the last good
      checkpoint. It never trains on NaN.
    * The update itself can make weights non-finite from finite gradients (a huge
      learning rate, an overflow). The weights are checked after every update (on
      the host at once, or on the device and read with the deferred losses), and no
      checkpoint is ever written with a NaN or infinite weight or optimizer state:
      training stops with :class:`TrainingDiverged` naming the step, the first
      non-finite tensor and the last good checkpoint, the newest file this run
      actually wrote (or the one it resumed from), or "none saved yet".
    * Ctrl-C ends training cleanly: the loop stops, ``last.npz`` is not touched
      mid-write (checkpoint writes are atomic), and ``best.npz`` stays usable.
"""
from minitransformer.train.batches import plan_batches
from minitransformer.train.config import TrainConfig
from minitransformer.train.divergence import TrainingDiverged
from minitransformer.train.trainer import Trainer, fit

__all__ = ["TrainConfig", "TrainingDiverged", "Trainer", "fit", "plan_batches"]
