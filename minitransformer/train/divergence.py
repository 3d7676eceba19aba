"""Noticing that training diverged: :class:`TrainingDiverged` and the finite checks.

A NaN or infinite loss, gradient norm or weight must never reach an update or a
checkpoint. On the CPU the trainer reads the loss and the norm after every step
and stops before the update. On a GPU each read stalls the device, so the numbers
stay there for a few steps: :func:`drop_gradients_unless_finite` zeroes a bad
step's gradients on the device (the weights stay finite) and
:func:`weights_finite` keeps a 0-d flag of the weights after the update; both are
read with the deferred losses, and the first bad one stops training with
:class:`TrainingDiverged`, naming the step, the tensor and the last good checkpoint.
"""
from __future__ import annotations

import math

from minitransformer import backend
from minitransformer.optim.memory import flat_buffers


class TrainingDiverged(RuntimeError):
    """The loss or the gradient became NaN or infinite; the message says where."""


def drop_gradients_unless_finite(model, loss, norm) -> None:
    """Zero every gradient if the loss or the gradient norm is NaN or infinite, on the device.

    With deferred checks (``sync_every > 1``) the optimizer steps before anyone has
    looked at the loss and the norm, and :func:`clip_grad_norm` leaves a non-finite
    gradient as it is. So the step's gradients are dropped here, without a host
    read: the weights stay finite, and the next read raises :class:`TrainingDiverged`.
    """
    bad = ~(backend.xp.isfinite(loss) & backend.xp.isfinite(norm))  # () bool, on the device
    plist = model.parameters()
    layout = flat_buffers(plist)  # the optimizer's flat buffers: one launch for all
    for g in [layout.grad] if layout is not None else [p.grad for p in plist]:
        backend.xp.copyto(g, 0.0, where=bad)  # in place; where=False: no change


def weights_finite(model):
    """True if every weight is finite, as a 0-d bool on the device (no host read)."""
    plist = model.parameters()
    layout = flat_buffers(plist)
    if layout is not None:  # one buffer holds them all (its gaps are zeros)
        return backend.xp.isfinite(layout.data).all()  # () bool
    ok = None
    for p in plist:
        finite = backend.xp.isfinite(p.data).all()  # () bool
        ok = finite if ok is None else ok & finite
    return ok


def _first_non_finite_weight(model) -> str | None:
    """The name of the first parameter holding NaN or infinity (reads the device)."""
    for name, p in model.named_parameters():
        if not bool(backend.xp.isfinite(p.data).all()):
            return name
    return None


class DivergenceChecks:
    """The trainer's finite checks (a mixin of :class:`~minitransformer.train.trainer.Trainer`,
    which holds ``model``, ``optimizer``, ``epoch``, ``step``, ``step_losses`` and
    ``_last_good``): each raises :class:`TrainingDiverged` naming where it happened."""

    def _check_finite(self, value: float, what: str, step: int, deferred: bool = False) -> None:
        if not math.isfinite(value):
            how = ("its gradients were dropped (read back later, at step "
                   f"{self.step})" if deferred else "no update was made with it")
            raise TrainingDiverged(
                f"non-finite {what} ({value}) at epoch {self.epoch + 1}, step {step}; {how}. "
                f"Last good checkpoint: {self._last_good()}. Try a lower learning rate or "
                "gradient clipping.")

    def _check_weights(self, step: int, deferred: bool = False) -> None:
        """Stop if a weight is NaN or infinite after the update of ``step``."""
        name = _first_non_finite_weight(self.model)
        if name is None:
            return
        when = f" (read back later, at step {self.step})" if deferred else ""
        raise TrainingDiverged(
            f"non-finite weight {name} after the update of step {step}{when}, epoch {self.epoch + 1}: the "
            f"optimizer made it NaN or infinite (learning rate {self.optimizer.lr}). The weights in memory "
            f"are unusable and were not saved. Last good checkpoint: {self._last_good()}. Try a lower "
            "learning rate or gradient clipping.")

    def _read_back(self, pending) -> list:
        """Copy the pending losses, norms and weight checks to the host (one sync), record
        the losses, and stop on the first non-finite one (its step's gradients were
        dropped, or its update made a weight non-finite)."""
        values = []
        for step, loss, norm, weights_ok in pending:
            loss_value = float(loss)
            if norm is not None:  # deferred: this step's numbers are seen only now
                self._check_finite(loss_value, "loss", step, deferred=True)
                self._check_finite(float(norm), "gradient norm", step, deferred=True)
                if not bool(weights_ok):
                    self._check_weights(step, deferred=True)
            values.append(loss_value)
        self.step_losses.extend(values)
        return values
