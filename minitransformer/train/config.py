"""The settings of a training run: :class:`TrainConfig`.

One dataclass holds everything :func:`~minitransformer.train.fit` can be told
(epochs, batch size, clipping, early stopping, where the files go ...). It checks
its fields when it is built, so a negative clip, a fractional batch size or a NaN
time limit is refused before any data is touched, with the field's name in the
message. Whether ``metric`` names a metric the run produces depends on the task and
the data too, so the trainer checks that when it is built (or, with callbacks, at
the end of the first epoch).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass
class TrainConfig:
    """Options of :func:`fit`.

    epochs: maximum number of passes over the training data.
    batch_size: examples per batch.
    clip: maximum global gradient norm (None: no clipping).
    patience: stop after this many epochs without improvement of ``metric`` (None: never).
    metric / mode: the metric that picks the best checkpoint, and whether lower ("min")
        or higher ("max") is better. None (the default): ``val_loss`` when there is
        validation data, else ``train_loss``. A name that this run does not produce
        is an error: at construction when the names are known (the trainer's own,
        ``train_loss`` ..., and the task's ``metric_names``), else, with callbacks,
        at the end of the first epoch, before anything is saved. A NaN or infinite
        value of it stops training (:class:`TrainingDiverged`) and is never "best".
    seed: seeds batch order and per-batch task randomness.
    bucket: group examples of similar length into batches (less padding).
    max_steps: stop after this many optimizer steps in total (None: no limit).
    max_time: stop after this many seconds: the epoch running then ends early (at a read-back
        of the losses), is evaluated and saved like any epoch, and its history row says
        which ``epoch_fraction`` of its batches ran.
    eval_batch_size: batch size for evaluation (default: batch_size).
    out_dir: where best.npz, last.npz, history.json and history.csv go (None: keep nothing on disk).
    quiet: no progress bar and no per-epoch lines.
    average: keep an exponential moving average of the weights with this decay per step, in
        (0, 1) (None: none; :mod:`~minitransformer.train.weight_average`). The validation
        metrics, the best epoch and ``best.npz`` are then the average's (so the metric must be
        one of the validation's); the history also has each validation metric of the weights
        being trained, as ``<name>_trained`` (the validation runs twice).
    loss_norm: what a step's token loss is divided by (tasks whose loss is a sum over scored
        tokens). ``"batch"``: the batch's own scored tokens, a mean per batch. ``"epoch"``: the
        mean scored tokens of the epoch's batches, the same number for every step, so that every
        token of the epoch weighs the same in the updates. With ``bucket`` a batch holds examples of
        one length, and a mean per batch weighs each token of a short example more: a molecule of 15
        tokens among short ones has each token count 4 times as much as one of 60 among long ones,
        which trains the model to end too early and to learn short examples by heart. Needs a task
        that counts an example's scored tokens (``example_tokens``: next-token and translation).
    sync_every: read the loss and gradient norm back to the host every this many
        steps (default: every step on the CPU, every 50 on a GPU, where each read
        stalls the device). Between reads nothing leaves the device; a non-finite
        step drops its gradients and the next read stops training.
    """

    epochs: int = 10
    batch_size: int = 64
    clip: float | None = 1.0
    patience: int | None = None
    metric: str | None = None
    mode: str = "min"
    seed: int = 0
    bucket: bool = True
    max_steps: int | None = None
    max_time: float | None = None
    eval_batch_size: int | None = None
    out_dir: str | None = None
    quiet: bool = False
    sync_every: int | None = None
    average: float | None = None
    loss_norm: str = "batch"

    #: The values of ``loss_norm``.
    LOSS_NORMS = ("batch", "epoch")

    def __post_init__(self):
        if self.mode not in ("min", "max"):
            raise ValueError(f"TrainConfig.mode must be 'min' or 'max', got {self.mode!r}")
        if self.loss_norm not in self.LOSS_NORMS:
            raise ValueError(f"TrainConfig.loss_norm must be one of {self.LOSS_NORMS}, got {self.loss_norm!r}")
        whole = {"epochs": (self.epochs, 0), "batch_size": (self.batch_size, 1), "patience": (self.patience, 1),
                 "max_steps": (self.max_steps, 0), "eval_batch_size": (self.eval_batch_size, 1),
                 "sync_every": (self.sync_every, 1), "seed": (self.seed, 0)}
        for name, (value, low) in whole.items():
            if value is None and name not in ("epochs", "batch_size", "seed"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"TrainConfig.{name} must be a whole number >= {low}"
                                 f"{' (or None)' if name not in ('epochs', 'batch_size', 'seed') else ''}, "
                                 f"got {value!r}")
        if self.clip is not None and not (isinstance(self.clip, (int, float)) and not isinstance(self.clip, bool)
                                          and math.isfinite(self.clip) and self.clip >= 0):
            raise ValueError(f"TrainConfig.clip must be a finite number > 0 (None or 0: no clipping), got {self.clip!r}")
        if self.max_time is not None and not (isinstance(self.max_time, (int, float)) and self.max_time >= 0
                                              and not math.isnan(self.max_time)):
            raise ValueError(f"TrainConfig.max_time must be seconds >= 0 (or None), got {self.max_time!r}")
        if self.average is not None and not (isinstance(self.average, (int, float))
                                             and not isinstance(self.average, bool) and 0 < self.average < 1):
            raise ValueError(f"TrainConfig.average must be a decay in (0, 1), e.g. 0.999 (or None: no average), "
                             f"got {self.average!r}")
        if self.metric is not None and not (isinstance(self.metric, str) and self.metric):
            raise ValueError(f"TrainConfig.metric must be a metric name (or None for the default), "
                             f"got {self.metric!r}")
