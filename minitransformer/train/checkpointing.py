"""The trainer's checkpoints: saving a run, resuming it, and the last good file.

:class:`Checkpointing` is the part of :class:`~minitransformer.train.Trainer` that
touches :mod:`minitransformer.checkpoint`. At each epoch end the trainer saves
``best.npz`` (when the metric improved) and ``last.npz``: the weights, the
optimizer's state, the dropout RNG, the running average of the weights (if the run
keeps one) and the trainer's position and history, so a run stopped after any step
resumes exactly (:meth:`Checkpointing.resume`, after checking the data fingerprint).
Every message about a failure names the last good checkpoint
(:meth:`Checkpointing._last_good`) to resume from.

It is a mixin: it reads the trainer's attributes (``model``, ``optimizer``,
``config``, ``out_dir``, ``epoch``, ``step`` ...) and holds no state of its own.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from minitransformer.checkpoint import (
    NonFiniteCheckpoint, check_fingerprint, load_checkpoint, restore, save_checkpoint,
)
from minitransformer.train.divergence import TrainingDiverged
from minitransformer.train.weight_average import WeightAverage


class Checkpointing:
    """Saving and resuming a :class:`~minitransformer.train.Trainer`'s run (a mixin)."""

    def _state(self) -> dict:
        """The trainer's position and record, saved as ``meta["trainer"]`` in every checkpoint."""
        return {"epoch": self.epoch, "batch": self.batch_index, "step": self.step, "best": self.best,
                "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs, "history": self.history,
                "stop_reason": self.stop_reason, "epoch_loss": list(self.epoch_loss)}

    def save(self, name: str, applied: bool = False) -> Path | None:
        """Write ``out_dir/name`` (weights, optimizer, trainer state, and the running average of
        the weights if there is one). ``applied``: the model holds that average now (``best.npz``),
        which is then not written twice but marked (``meta["average_applied"]``). A non-finite
        weight, average or optimizer state writes nothing and raises :class:`TrainingDiverged`."""
        if not self.out_dir:
            return None
        meta = dict(self.extra_meta)
        meta["trainer"] = self._state()
        meta["train_config"] = dataclasses.asdict(self.config)
        if applied:
            meta["average_applied"] = True
        try:
            path = save_checkpoint(self.out_dir / name, self.model, self.optimizer, vocab=self.vocab, extra=meta,
                                   fingerprint=self.fingerprint,
                                   average=self.average.state() if self.average is not None and not applied
                                   else None)
        except NonFiniteCheckpoint as err:
            raise TrainingDiverged(
                f"non-finite {err.tensor} at epoch {self.epoch + 1 if self.batch_index else self.epoch}, "
                f"step {self.step} (found before writing {name}, which was not written). "
                f"Last good checkpoint: {self._last_good()}. Try a lower learning rate or gradient "
                "clipping.") from err
        except OSError as err:
            raise self._write_failed(self.out_dir / name, err) from err
        self.saved[name] = (self.step, path)
        return path

    def _write_failed(self, path: Path, err: OSError) -> OSError:
        """The same OSError (errno kept), saying what was kept and how to go on."""
        return OSError(err.errno, f"could not write {path} ({err.strerror or err}); the previous {path.name}, "
                                  "if any, is intact and no partial file was left. Free space (or fix the "
                                  f"folder), then resume from the last good checkpoint: {self._last_good()}")

    def resume(self, path) -> None:
        """Continue from a checkpoint written by :meth:`save` (weights, optimizer, RNG, position).

        The checkpoint's fingerprint must match this run's (its vocabulary and data
        settings, see :func:`~minitransformer.checkpoint.check_fingerprint`); else
        :class:`~minitransformer.checkpoint.FingerprintMismatch` and nothing changes.
        """
        ckpt = load_checkpoint(path)
        if "trainer" not in ckpt.meta:
            raise ValueError(f"{path} has no trainer state; it cannot be resumed (it can still be loaded)")
        check_fingerprint(ckpt, self.fingerprint_hashes, where=path)
        restore(self.model, ckpt, self.optimizer)
        if self.average is not None:  # the running average goes on; a checkpoint without one (best.npz) starts it
            self.average = WeightAverage(self.model, self.average.decay)
            if ckpt.average_arrays:
                self.average.load(ckpt.meta.get("average", {}), ckpt.average_arrays, where=str(path))
        st = ckpt.meta["trainer"]
        self.epoch, self.batch_index, self.step = st["epoch"], st["batch"], st["step"]
        self.best, self.best_epoch, self.bad_epochs = st["best"], st["best_epoch"], st["bad_epochs"]
        self.history = list(st["history"])
        self.stop_reason = st.get("stop_reason")
        loss_sum, n_loss = st.get("epoch_loss", (0.0, 0))  # (a checkpoint from before it was kept: 0, 0)
        self.epoch_loss = (float(loss_sum), int(n_loss))
        self.resumed_from = (self.step, Path(path))
        # The history files are derived from this record: :meth:`run` writes them again first, so a
        # write that was interrupted (or files deleted since) lose nothing.
        self.history_stale = True

    def _last_good(self) -> str:
        """The newest checkpoint this run wrote (all are finite), or the one it resumed from."""
        if self.saved:
            step, path = max(self.saved.values(), key=lambda sp: (sp[0], sp[1].name == "last.npz"))
            return f"{path} (step {step})"
        if self.resumed_from is not None:
            step, path = self.resumed_from
            return f"{path} (step {step}, the checkpoint this run resumed from)"
        if not self.out_dir:
            return "none (no out_dir was given)"
        return "none saved yet"
