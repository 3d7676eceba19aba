"""What a checkpoint holds once read, and what goes wrong with one.

:class:`Checkpoint` is the content of one file, all on the host: the weights, the
metadata (a JSON object), the optimizer's state arrays and, for a run that keeps
one, the running average of the weights. The errors are here too:
:class:`CheckpointError`, raised for anything wrong with a file, and
:class:`NonFiniteCheckpoint`, raised when a weight, an optimizer state or the average
holds NaN or infinity (on saving and on loading: such a file is never written, never used).
The small helpers at the end are shared by the other modules of the package.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FORMAT_VERSION = 1  # raised when the layout changes; a reader refuses newer files
META_ENTRY = "__meta__"  # the archive entry that holds the JSON metadata


@dataclass
class Checkpoint:
    """The contents of a checkpoint file, all on the host."""

    weights: dict
    meta: dict
    optim_arrays: dict = field(default_factory=dict)
    path: object = None  # the file it was read from (None if built in memory); error messages name it
    average_arrays: dict = field(default_factory=dict)  # a running average of the weights, by name ({}: none)

    def __repr__(self) -> str:  # never the arrays: a repr can end up in an error message
        where = self.path if self.path is not None else "in memory"
        return f"Checkpoint({where}, {len(self.weights)} weights)"

    @property
    def where(self) -> str:
        """How error messages name this checkpoint: its file, else "the checkpoint"."""
        return str(self.path) if self.path is not None else "the checkpoint"

    @property
    def model_type(self) -> str | None:
        return self.meta.get("model_type")

    @property
    def config(self) -> dict | None:
        return self.meta.get("config")

    @property
    def vocab(self):
        return self.meta.get("vocab")

    @property
    def fingerprint(self) -> dict:
        """``{name: "sha256:<hex>"}`` recorded at save time ({} for older checkpoints)."""
        return dict(self.meta.get("fingerprint") or {})

    def optimizer_state(self) -> dict | None:
        """The optimizer's ``state_dict`` (scalars from the JSON, arrays from the archive)."""
        scalars = self.meta.get("optimizer")
        if scalars is None:
            return None
        sd = dict(scalars)
        state: dict = {}
        for key, arr in self.optim_arrays.items():
            name, slot = key.rsplit("/", 1)
            state.setdefault(name, {})[slot] = arr
        for name in scalars.get("state_names", []):
            state.setdefault(name, {})
        sd["state"] = state
        sd.pop("state_names", None)
        return sd


class CheckpointError(ValueError):
    """A checkpoint could not be read or does not fit; the message says why and what to do."""


class NonFiniteCheckpoint(CheckpointError):
    """A model, optimizer state or weight average holds NaN or infinity: refused at save and at load.
    ``tensor`` names the first such tensor (``"weight <name>"``, ``"optimizer state <name>/<slot>"`` or
    ``"weight average <name>"``)."""

    def __init__(self, message: str, tensor: str):
        super().__init__(message)
        self.tensor = tensor


# -- helpers shared by the modules of the package ------------------------------
def first_non_finite(arrays: dict, kind: str) -> tuple[str, str] | None:
    """``(tensor, counts)`` for the first array (in name order) holding NaN or infinity,
    e.g. ``("weight head.linear.bias", "2 NaN, 0 inf among 13 values")``; None if all are finite."""
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            n_nan = int(np.isnan(a).sum())
            return f"{kind} {name}", f"{n_nan} NaN, {int((~np.isfinite(a)).sum()) - n_nan} inf among {a.size} values"
    return None


def check_finite(where, weights: dict, optim_arrays: dict, average_arrays: dict | None = None) -> None:
    bad = first_non_finite(weights, "weight") or first_non_finite(optim_arrays, "optimizer state") \
        or first_non_finite(average_arrays or {}, "weight average")
    if bad is not None:
        raise NonFiniteCheckpoint(
            f"{where} holds non-finite values ({bad[1]}) in {bad[0]}; it was written after training "
            "diverged and cannot be used: use an earlier checkpoint", bad[0])


def one_line(err) -> str:
    return " ".join(str(err).split())


def json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"checkpoint metadata: {type(obj).__name__} is not JSON-serialisable")
