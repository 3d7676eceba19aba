r"""An exponential moving average of the weights: :class:`WeightAverage`.

Stochastic gradient steps leave the weights scattered around the minimum they
approach, more so at a high learning rate. Their running average lies nearer the
middle: it usually predicts better than the last weights, at the price of one more
copy of them. After step :math:`t`, for every weight :math:`w`,

.. math:: \bar w_t = d_t\,\bar w_{t-1} + (1 - d_t)\,w_t,\qquad
          d_t = \min\Big(d,\ \frac{1 + t}{10 + t}\Big),\qquad \bar w_0 = w_0 .

The second term of :math:`d_t` keeps the early steps from weighing the starting
weights: the average forgets them at once, and :math:`d_t` reaches the decay :math:`d`
after :math:`(10d - 1)/(1 - d)` steps (81 for 0.9, 890 for 0.99, 8,990 for 0.999);
from then on :math:`1/(1 - d)` steps is the span it averages over.

The trainer (``TrainConfig.average``) updates it after every optimizer step and
evaluates the *average* at each epoch end: the metric, the choice of the best epoch
and ``best.npz`` are the average's, so that sampling, scoring and every command that
reads ``best.npz`` use it (its metadata says ``"average_applied": true``; a resume from
it goes on from the average, with a new one). Training itself goes on from the weights
it trained; ``last.npz`` keeps those and the average (``average/NAME`` entries), so a
resume from it goes on exactly, with the decay the run is given. The average's update
is element-wise and the same on every data-parallel rank, whose weights are the same.
"""
from __future__ import annotations

import contextlib

from minitransformer.backend import xp


class WeightAverage:
    """The running average :math:`\\bar w` of ``model``'s weights, with decay ``decay`` in (0, 1).

    ``shadow`` holds one array per weight, by the name ``model.named_parameters()`` gives
    it, on the weights' device and in their dtype."""

    WARMUP = 10  # d_t = min(d, (1 + t) / (WARMUP + t))

    def __init__(self, model, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"WeightAverage: decay must be in (0, 1), got {decay!r}")
        self.decay = float(decay)
        self.updates = 0
        self.shadow = {name: p.data.copy() for name, p in model.named_parameters()}  # name -> (shape of w)

    def rate(self) -> float:
        """:math:`1 - d_t` for the next update: how much of the weights it takes in."""
        t = self.updates + 1
        return 1.0 - min(self.decay, (1.0 + t) / (self.WARMUP + t))

    def update(self, model) -> None:
        r""":math:`\bar w \leftarrow \bar w + (1 - d_t)(w - \bar w)`, in place, for every weight."""
        rate = self.rate()
        for name, p in model.named_parameters():
            avg = self.shadow[name]  # (shape of w)
            step = xp.subtract(p.data, avg)  # (shape of w) w - w_bar
            step *= rate
            avg += step
        self.updates += 1

    @contextlib.contextmanager
    def applied(self, model):
        """``with average.applied(model):`` the model holds the average; its own weights come back
        after the block (also when it raises). The weights are copied in place, so views of
        them (an optimizer's flat layout) stay valid."""
        kept = {name: p.data.copy() for name, p in model.named_parameters()}  # name -> (shape of w)
        try:
            for name, p in model.named_parameters():
                p.data[...] = self.shadow[name]
            yield model
        finally:
            for name, p in model.named_parameters():
                p.data[...] = kept[name]

    # -- checkpoints ----------------------------------------------------------------
    def state(self) -> tuple[dict, dict]:
        """(``{"decay", "updates"}``, ``{name: host array}``): what a checkpoint keeps."""
        from minitransformer import backend
        return ({"decay": self.decay, "updates": self.updates},
                {name: backend.to_numpy(a) for name, a in self.shadow.items()})

    def load(self, scalars: dict, arrays: dict, where: str = "the checkpoint") -> None:
        """Take the average a checkpoint kept (:meth:`state`); its weights must be this model's."""
        from minitransformer import backend
        if set(arrays) != set(self.shadow) or any(arrays[k].shape != self.shadow[k].shape for k in arrays):
            missing, extra = sorted(set(self.shadow) - set(arrays)), sorted(set(arrays) - set(self.shadow))
            raise ValueError(f"{where}: its weight average does not fit the model (missing {missing[:3]}, "
                             f"unexpected {extra[:3]}); resume with the settings the run was started with")
        for name, a in arrays.items():
            self.shadow[name] = backend.asarray(a, dtype=self.shadow[name].dtype)
        self.updates = int(scalars.get("updates", 0))
