"""Noticing that training diverged: :class:`TrainingDiverged` and the finite checks.

A NaN or infinite loss, gradient norm or weight must never reach an update or a
checkpoint. On the CPU the trainer reads the loss and the norm after every step
and stops before the update. On a GPU each read stalls the device, so the numbers
stay there for a few steps: :func:`_drop_gradients_unless_finite` zeroes a bad
step's gradients on the device (the weights stay finite) and
:func:`_weights_finite` keeps a 0-d flag of the weights after the update; both are
read with the deferred losses, and the first bad one stops training with
:class:`TrainingDiverged`, naming the step, the tensor and the last good checkpoint.
"""
from __future__ import annotations

from minitransformer import backend


class TrainingDiverged(RuntimeError):
    """The loss or the gradient became NaN or infinite; the message says where."""


def _drop_gradients_unless_finite(model, loss, norm) -> None:
    """Zero every gradient if the loss or the gradient norm is NaN or infinite, on the device.

    With deferred checks (``sync_every > 1``) the optimizer steps before anyone has
    looked at the loss and the norm, and :func:`clip_grad_norm` leaves a non-finite
    gradient as it is. So the step's gradients are dropped here, without a host
    read: the weights stay finite, and the next read raises :class:`TrainingDiverged`.
    """
    bad = ~(backend.xp.isfinite(loss) & backend.xp.isfinite(norm))  # () bool, on the device
    for p in model.parameters():
        backend.xp.copyto(p.grad, 0.0, where=bad)  # (*p.shape) in place; where=False: no change


def _weights_finite(model):
    """True if every weight is finite, as a 0-d bool on the device (no host read)."""
    ok = None
    for p in model.parameters():
        finite = backend.xp.isfinite(p.data).all()  # () bool
        ok = finite if ok is None else ok & finite
    return ok


def _first_non_finite_weight(model) -> str | None:
    """The name of the first parameter holding NaN or infinity (reads the device)."""
    for name, p in model.named_parameters():
        if not bool(backend.xp.isfinite(p.data).all()):
            return name
    return None
