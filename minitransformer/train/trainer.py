"""The training loop: :class:`Trainer` and :func:`fit`, one loop for every model.

Per step: plan -> collate -> forward + loss -> check finite -> zero_grad ->
backward -> clip -> optimizer step. Per epoch: evaluate, record history, keep the
best checkpoint, stop early when the validation metric stops improving. How a run
is saved and resumed is in :mod:`~minitransformer.train.checkpointing`, how
divergence is caught in :mod:`~minitransformer.train.divergence`; the notes of
:mod:`minitransformer.train` say what makes a resume exact.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from minitransformer import backend
from minitransformer.atomic import write_json, write_text
from minitransformer.checkpoint import fingerprint_hashes
from minitransformer.optim import clip_grad_norm
from minitransformer.train import history
from minitransformer.train.batches import plan_batches
from minitransformer.train.checkpointing import Checkpointing
from minitransformer.train.config import TrainConfig
from minitransformer.train.divergence import (
    DivergenceChecks, TrainingDiverged, drop_gradients_unless_finite, weights_finite,
)
from minitransformer.train.weight_average import WeightAverage


class Trainer(Checkpointing, DivergenceChecks):
    """Holds the loop state; :func:`fit` is the usual entry point.

    :meth:`save`, :meth:`resume` and the last good checkpoint that error messages
    name come from :class:`~minitransformer.train.checkpointing.Checkpointing`; the
    finite checks of the losses, norms and weights read back from the device from
    :class:`~minitransformer.train.divergence.DivergenceChecks`."""

    def __init__(self, model, task, optimizer, train_data, val_data=None, config: TrainConfig | None = None,
                 callbacks=(), vocab=None, extra_meta: dict | None = None, fingerprint: dict | None = None,
                 earlier_history=(), parallel=None):
        self.model, self.task, self.optimizer = model, task, optimizer
        self.parallel = parallel  # a minitransformer.distributed.DataParallel, or None
        if parallel is not None and not hasattr(task, "scored_tokens"):
            raise ValueError(f"fit: data-parallel training supports LMTask and Seq2SeqTask, not "
                             f"{type(task).__name__} (its loss is not a sum over scored tokens)")
        self.train_data, self.val_data = train_data, val_data
        self.config = config or TrainConfig()
        if self.config.loss_norm == "epoch" and not hasattr(task, "example_tokens"):
            raise ValueError(f"fit: TrainConfig.loss_norm 'epoch' needs a task that counts an example's scored "
                             f"tokens (LMTask, Seq2SeqTask), not {type(task).__name__}; use loss_norm 'batch'")
        self.callbacks = list(callbacks)
        self.vocab, self.extra_meta = vocab, dict(extra_meta or {})
        self.fingerprint = dict(fingerprint or {})
        self.fingerprint_hashes = fingerprint_hashes(self.fingerprint, vocab)  # refuses non-JSON values now
        self.epoch, self.batch_index, self.step = 0, 0, 0
        self.epoch_loss = (0.0, 0)  # (sum, count) of the current epoch's step losses so far: a checkpoint keeps it
        self.best, self.best_epoch, self.bad_epochs = None, None, 0
        self.history: list[dict] = []
        self.earlier_history = list(earlier_history)  # rows of earlier phases, for history.csv
        self.step_losses: list[float] = []
        self.stop_reason: str | None = None
        self.saved: dict[str, tuple[int, Path]] = {}  # name -> (step, path) of this run's finite checkpoints
        self.resumed_from: tuple[int, Path] | None = None
        self.history_stale = False  # history.json/csv to be written again from self.history (a resume)
        self.out_dir = Path(self.config.out_dir) if self.config.out_dir else None
        if parallel is not None and isinstance(getattr(model, "rng", None), backend.RNG):
            model.rng.stream = parallel.rank  # each rank its own dropout masks (rank 0: the usual stream)
        if parallel is not None and not parallel.is_writer:  # rank 0 alone writes files and prints
            self.out_dir = None
            self.config = dataclasses.replace(self.config, quiet=True)
        self._val_cache = None
        # a running average of the weights (TrainConfig.average): what is evaluated and kept as best.npz
        self.average = WeightAverage(model, self.config.average) if self.config.average else None
        self.metric = self._check_metric()
        if hasattr(task, "validate") and not callable(train_data):
            if len(train_data) == 0:
                raise ValueError("fit: the training data is empty")
            task.validate(train_data, "training data")
        self._check_validation_data()
        if self.out_dir:
            self.out_dir.mkdir(parents=True, exist_ok=True)

    LINE_EVERY_S = 60.0  # without a terminal: a progress line this often inside a long epoch

    # -- settings, checked before any work ------------------------------------------
    TRAINER_METRICS = ("epoch", "step", "lr", "train_loss", "tokens_per_s", "time_s")

    def _check_metric(self) -> str:
        """The early-stopping metric's name; refused now if it cannot appear, or if it would
        judge other weights than the running average that ``best.npz`` keeps."""
        metric = self.config.metric or ("val_loss" if self.val_data is not None else "train_loss")
        if self.average is not None and (metric in self.TRAINER_METRICS or metric.endswith("_trained")):
            raise ValueError(f"TrainConfig.average: the metric {metric!r} does not judge the running average, "
                             "which best.npz keeps; give validation data (or a callback) and a metric of it, "
                             "or train without an average")
        task_names = getattr(self.task, "metric_names", None)
        if self.callbacks or (self.val_data is not None and task_names is None):
            return metric  # more names may come: checked at the end of the first epoch
        names = set(self.TRAINER_METRICS) | (set(task_names) if self.val_data is not None else set())
        if self.average is not None and self.val_data is not None:  # the trained weights' own, beside
            names |= {f"{name}_trained" for name in task_names}
        if metric not in names:
            hint = (" (there is no validation data: pass val_data, or choose train_loss)"
                    if metric.startswith("val_") and self.val_data is None else "")
            raise ValueError(f"TrainConfig.metric={metric!r} is not a metric of this run{hint}; its metrics "
                             f"are {sorted(names)}: choose one of them")
        return metric

    def _check_validation_data(self) -> None:
        """Refuse validation data that could only give a meaningless score."""
        if self.val_data is None:
            return
        if len(self.val_data) == 0:
            raise ValueError("fit: val_data is empty; give at least one validation example, or val_data=None "
                             "to train without validation")
        if hasattr(self.task, "validate"):
            self.task.validate(self.val_data, "validation data")
        count = getattr(self.task, "validation_tokens", None)
        if count is not None and count(self._val_batches()) == 0:
            raise ValueError(
                f"fit: the validation data ({len(self.val_data)} examples) has no scored tokens (every target is "
                "padding, special or missing), so its loss would be an average over nothing; give validation "
                "examples with tokens (or labels) to predict")

    # -- data ----------------------------------------------------------------
    def _examples(self, epoch: int):
        """The training examples of ``epoch``, checked by the task (each epoch's, when
        they are made per epoch) before any of them is used."""
        data = self.train_data(epoch) if callable(self.train_data) else self.train_data
        if len(data) == 0:
            raise ValueError("fit: the training data is empty")
        if callable(self.train_data) and hasattr(self.task, "validate"):
            self.task.validate(data, f"training data of epoch {epoch + 1}")
        return data

    def _plan(self, epoch: int, examples):
        rng = np.random.default_rng([self.config.seed, epoch])
        lengths = [self.task.length(e) for e in examples]
        return plan_batches(lengths, self.config.batch_size, rng, self.config.bucket)

    def _normaliser(self, examples, batches) -> float | None:
        """What every step of this epoch divides its summed token loss by (``TrainConfig.loss_norm``):
        the mean scored tokens of the epoch's batches for "epoch"; None ("batch"): each batch's own."""
        if self.config.loss_norm == "batch":
            return None
        return sum(self.task.example_tokens(e) for e in examples) / len(batches)

    def _val_batches(self):
        """The validation batches (host arrays), collated once."""
        if not self.val_data:
            return None
        if self._val_cache is None:
            bs = self.config.eval_batch_size or self.config.batch_size
            order = np.argsort([self.task.length(e) for e in self.val_data], kind="stable")
            self._val_cache = [self.task.collate([self.val_data[j] for j in order[i:i + bs]])
                               for i in range(0, len(order), bs)]
        return self._val_cache

    # -- the loop ----------------------------------------------------------------
    def _improved(self, value: float) -> bool:
        if self.best is None:
            return True
        return value < self.best if self.config.mode == "min" else value > self.best

    def _train_one_epoch(self, t_start: float) -> bool:
        """Run the rest of the current epoch. Returns False if max_steps stopped it."""
        cfg, model = self.config, self.model
        examples = self._examples(self.epoch)
        batches = self._plan(self.epoch, examples)
        normaliser = self._normaliser(examples, batches)
        self._epoch_fraction = None
        model.train()
        bar = None
        if not cfg.quiet and sys.stderr.isatty():  # a log file gets the one line per epoch only
            from tqdm.auto import tqdm
            bar = tqdm(total=len(batches), initial=self.batch_index, desc=f"epoch {self.epoch + 1}",
                       leave=False, dynamic_ncols=True)
        # the losses of this epoch's steps before a resume come with the checkpoint
        loss_sum, n_loss = self.epoch_loss if self.batch_index else (0.0, 0)
        tokens, t0 = 0, time.perf_counter()
        last_line = t0
        sync_every = cfg.sync_every or (50 if backend.name() == "cupy" else 1)
        pending = []  # (step, loss, norm, weights_ok) not yet read back to the host
        try:
            while self.batch_index < len(batches):
                if self.parallel is not None:
                    self.parallel.stop_if_signalled()  # Ctrl-C or SIGTERM on any rank: all stop here
                if cfg.max_steps is not None and self.step >= cfg.max_steps:
                    self.stop_reason = "max_steps"
                    break
                if cfg.max_time is not None and self._agreed(  # out of time: this epoch ends here, evaluated as usual
                        tokens and time.perf_counter() - t_start >= cfg.max_time and not pending):
                    self._epoch_fraction = self.batch_index / len(batches)
                    break
                idx = batches[self.batch_index]
                if self.parallel is not None:  # this rank's shard of the global batch
                    idx = self.parallel.shard(idx)
                batch = self.task.collate([examples[j] for j in idx]) if len(idx) else None
                rng = np.random.default_rng([cfg.seed, self.epoch, self.batch_index])
                loss, norm, weights_ok, n_tok = self._step(batch, rng, check_now=sync_every == 1, normaliser=normaliser)
                self.step += 1
                self.batch_index += 1
                tokens += n_tok
                pending.append((self.step, loss, norm, weights_ok))
                if len(pending) >= sync_every or self.batch_index == len(batches):
                    values = self._read_back(pending)
                    pending = []
                    loss_sum, n_loss = loss_sum + sum(values), n_loss + len(values)
                    self.epoch_loss = (loss_sum, n_loss)
                    if bar is not None:
                        bar.update(len(values))
                        bar.set_postfix(loss=f"{values[-1]:.4f}",
                                        tok_s=f"{tokens / max(time.perf_counter() - t0, 1e-9):.0f}")
                    elif not cfg.quiet and time.perf_counter() - last_line >= self.LINE_EVERY_S:
                        last_line = time.perf_counter()  # a log file: one plain line now and then
                        print(f"  epoch {self.epoch + 1}: {self.batch_index:,} of {len(batches):,} batches, "
                              f"mean loss {loss_sum / n_loss:.4f}, "
                              f"{tokens / max(last_line - t0, 1e-9):,.0f} tokens/s, "
                              f"{(last_line - t0) / 60:.1f} min in", flush=True)
            if pending:  # stopped by max_steps between two reads
                values = self._read_back(pending)
                self.epoch_loss = (loss_sum + sum(values), n_loss + len(values))
        finally:
            if bar is not None:
                bar.close()
        if self.stop_reason == "max_steps":
            return False
        self._epoch_train = {"train_loss": loss_sum / max(n_loss, 1),
                             "tokens_per_s": tokens / max(time.perf_counter() - t0, 1e-9)}
        if self._epoch_fraction is not None:  # cut short by max_time: say how much of it ran
            self._epoch_train["epoch_fraction"] = round(self._epoch_fraction, 4)
        return True

    def _step(self, batch, rng, check_now: bool, normaliser: float | None = None):
        """One training step: forward and loss, backward, clipping, the optimizer's update.
        The loss is divided by ``normaliser`` (``TrainConfig.loss_norm`` "epoch") or by the
        batch's scored tokens (None); the loss returned is the mean over its tokens either way.

        A non-finite loss or gradient norm must never reach the weights. With
        ``check_now`` (NumPy, or ``sync_every == 1``) both are read at once and
        training stops before the update. Otherwise (a GPU step must not wait for
        the device) the step's gradients are zeroed on the device when either is
        non-finite, and the norm is returned for a later read to stop on.
        Returns (loss, norm or None if already checked, tokens), loss and norm 0-d on the device.
        """
        model = self.model
        if self.parallel is not None:  # each rank its shard; every rank the global batch's gradient
            loss, n_tok = self.parallel.loss_and_gradients(model, self.task, batch, rng, normaliser)
            self._check_finite(loss, "loss", self.step + 1)
            check_now = True
        else:
            if normaliser is not None:
                self.task.normaliser = normaliser
            try:
                loss, n_tok = self.task.loss(model, batch, rng)  # forward and loss
                if check_now:
                    self._check_finite(float(loss), "loss", self.step + 1)
                self.optimizer.zero_model_grad(model)  # one fill for the gradients laid out flat
                self.task.backward(model)  # every parameter's gradient
            finally:
                if normaliser is not None:
                    self.task.normaliser = None
        if normaliser is not None:  # the loss as a mean over the batch's tokens, for the history
            loss = loss * (normaliser / max(n_tok, 1))
        norm = clip_grad_norm(model, self.config.clip or None)  # None: measure only
        if check_now:
            self._check_finite(float(norm), "gradient norm", self.step + 1)
        else:
            drop_gradients_unless_finite(model, loss, norm)  # no host read
        try:
            self.optimizer.step()
        except ValueError as err:  # a schedule's NaN, infinite or negative rate: refused before any update
            raise ValueError(f"{' '.join(str(err).split())} (epoch {self.epoch + 1}, step {self.step + 1}). "
                             f"Last good checkpoint: {self._last_good()}.") from err
        if check_now:  # the update can make weights non-finite from finite gradients
            self._check_weights(self.step + 1)
        if self.average is not None:
            self.average.update(model)
        if check_now:
            return loss, None, None, n_tok
        return loss, norm, weights_finite(model), n_tok  # checked at the next read

    def _agreed(self, decision) -> bool:
        """A decision read from a rank's own clock, made the same on every rank: rank 0's
        (in one process, the decision itself). Ranks that stopped at different steps
        would wait forever for each other in the next all-reduce."""
        return bool(decision) if self.parallel is None else bool(self.parallel.from_rank0(bool(decision)))

    def _end_epoch(self, t_start: float) -> bool:
        """Evaluate, record, checkpoint; returns True if training should stop."""
        cfg = self.config
        metrics = {"epoch": self.epoch + 1, "step": self.step, "lr": float(self.optimizer.lr)}
        metrics.update(self._epoch_train)
        if self.average is not None:  # the weights being trained, beside the average
            metrics.update({f"{k}_trained": v for k, v in self._evaluate(metrics).items()})
        with self._averaged():  # the average, when there is one, is what the epoch is judged by
            metrics.update(self._evaluate(metrics))
        metrics["time_s"] = time.perf_counter() - t_start
        key = self.metric
        if key not in metrics:
            raise ValueError(f"TrainConfig.metric={key!r} is not a metric of this run; its metrics are "
                             f"{sorted(metrics)}: choose one of them (nothing was saved)")
        value = metrics[key]
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"the metric {key!r} is {value!r}, not a number; it cannot pick the best checkpoint")
        if not math.isfinite(value):
            raise TrainingDiverged(
                f"the metric {key} is {value} at epoch {self.epoch + 1}, step {self.step}: it cannot pick the best "
                "checkpoint (the model's outputs diverged, or the validation set cannot give this metric), so "
                f"training stops and nothing of this epoch was saved. Last good checkpoint: {self._last_good()}.")
        self.history.append(metrics)
        self.epoch += 1
        self.batch_index = 0
        improved = self._improved(value)
        if improved:
            self.best, self.best_epoch, self.bad_epochs = value, self.epoch, 0
            with self._averaged():  # best.npz holds the weights the metric judged
                self.save("best.npz", applied=self.average is not None)
        else:
            self.bad_epochs += 1
        if not cfg.quiet:
            shown = {k: (f"{v:.0f}" if k in ("tokens_per_s", "time_s") else f"{v:.4g}" if isinstance(v, float)
                         else v) for k, v in metrics.items() if k != "epoch"}
            print(f"epoch {self.epoch}: " + " ".join(f"{k}={v}" for k, v in shown.items())
                  + ("  *" if improved else ""), flush=True)
        stop = False
        if cfg.patience is not None and self.bad_epochs >= cfg.patience:
            self.stop_reason, stop = "early_stopping", True
        elif cfg.max_time is not None and self._agreed(metrics["time_s"] >= cfg.max_time):
            self.stop_reason, stop = "max_time", True
        elif self.epoch >= cfg.epochs:
            self.stop_reason, stop = "epochs", True
        self.save("last.npz")
        if self.out_dir:
            self._write_history()
        return stop

    def _evaluate(self, metrics: dict) -> dict:
        """The validation metrics (the task's, then each callback's) of the model as it is now."""
        model, out = self.model, {}
        val_batches = self._val_batches()
        if val_batches:
            model.eval()
            out.update(self.task.evaluate(model, val_batches))
            model.train()
        for cb in self.callbacks:
            model.eval()
            extra = cb(self, self.epoch, {**metrics, **out})
            model.train()
            if extra:
                out.update(extra)
        return out

    def _averaged(self):
        """A context in which the model holds the running average of its weights (none: as it is)."""
        return self.average.applied(self.model) if self.average is not None else contextlib.nullcontext()

    def _write_history(self) -> None:
        """``history.json`` (this phase) and ``history.csv`` (the earlier phases' rows, then
        this phase's) in the run folder: see :mod:`~minitransformer.train.history`."""
        rows = list(self.earlier_history) + history.tagged(self.history, self.extra_meta.get("phase", "train"))
        for name, write in (("history.json", lambda p: write_json(p, history.json_rows(self.history))),
                            ("history.csv", lambda p: write_text(p, history.csv_text(rows)))):
            try:
                write(self.out_dir / name)
            except OSError as err:
                raise self._write_failed(self.out_dir / name, err) from err

    def run(self):
        """Train until epochs, patience, max_steps or max_time says stop (or Ctrl-C)."""
        t_start = time.perf_counter() - (self.history[-1]["time_s"] if self.history else 0.0)
        finished = self.epoch >= self.config.epochs  # a finished run, resumed: its stop reason stands
        self.stop_reason = (self.stop_reason or "epochs") if finished else None
        try:
            if self.history_stale and self.out_dir:
                self._write_history()
                self.history_stale = False
            with self.parallel.deferred_signals() if self.parallel is not None else contextlib.nullcontext():
                while self.epoch < self.config.epochs:  # (under mpiexec, Ctrl-C stops every rank at one step)
                    if not self._train_one_epoch(t_start):
                        self.save("last.npz")
                        break
                    if self._end_epoch(t_start):
                        break
        except KeyboardInterrupt:
            self.stop_reason = "interrupted"
            msg = f"\ntraining interrupted at epoch {self.epoch + 1}, step {self.step}."
            if "best.npz" in self.saved:
                msg += f" The best checkpoint so far (epoch {self.best_epoch}) is {self.saved['best.npz'][1]}."
            if self.saved or self.resumed_from:
                msg += f" Last checkpoint: {self._last_good()}; resume from it to continue."
            print(msg, flush=True)
        if self.parallel is not None:  # rank 0's checkpoints are on disk before any rank goes on
            self.parallel.barrier()
        self.optimizer.close()  # the fast set's flat layout, for a next phase's optimizer
        return self


def fit(model, task, optimizer, train_data, val_data=None, config: TrainConfig | None = None,
        callbacks: list[Callable] = (), resume=None, vocab=None, extra_meta: dict | None = None,
        fingerprint: dict | None = None, earlier_history=(), parallel=None) -> Trainer:
    """Train ``model`` on ``train_data`` with ``task`` and ``optimizer``.

    Args:
        model: a model with forward/backward (DecoderLM, Encoder, Seq2Seq).
        task: an :mod:`minitransformer.train.tasks` object (LMTask, Seq2SeqTask, MLMTask ...).
        optimizer: from :mod:`minitransformer.optim` (its schedule, if any, is applied per step).
        train_data: a list of examples, or a callable ``epoch -> list`` for data that
            changes every epoch (e.g. randomized SMILES); it must be deterministic in
            ``epoch`` for exact resume.
        val_data: a list of examples, evaluated at every epoch end.
        config: :class:`TrainConfig`.
        callbacks: callables ``(trainer, epoch, metrics) -> dict | None`` run at every
            epoch end (model in eval mode); returned entries join the metrics and the
            history, and may be the early-stopping metric. With ``config.average`` each
            runs twice: on the weights being trained (its entries then get ``_trained``
            appended), then on the average.
        resume: path of a checkpoint written by a previous run (``last.npz``).
        vocab: saved into every checkpoint (anything with ``to_json()``, or JSON data).
        extra_meta: more JSON metadata for every checkpoint.
        fingerprint: the data settings a resume must match, ``{name: JSON data}`` (e.g.
            ``{"data": {"file": ..., "split": ..., "seed": ...}, "max_len": 100}``). Every
            checkpoint stores one sha256 per entry, plus one of ``vocab``; a resume whose
            entries or vocabulary differ is refused, naming the entries
            (:class:`~minitransformer.checkpoint.FingerprintMismatch`).
        earlier_history: the rows of earlier phases of the same run (each with a
            ``phase`` entry), written first in ``history.csv``.
        parallel: a :class:`~minitransformer.distributed.DataParallel` to train on its
            ranks (each reads its shard of every batch; rank 0 writes). With more than
            one rank, an error on any rank stops them all (MPI_Abort) after it is printed.

    Returns:
        the :class:`Trainer`, with ``history`` (per-epoch metric dicts), ``step_losses``,
        ``best``/``best_epoch`` and ``stop_reason``.
    """
    def train():
        trainer = Trainer(model, task, optimizer, train_data, val_data, config, callbacks, vocab, extra_meta,
                          fingerprint, earlier_history, parallel)
        if resume is not None:
            trainer.resume(resume)
        return trainer.run()

    return train() if parallel is None else parallel.run_or_abort(train, same_on_every_rank=(TrainingDiverged,))
