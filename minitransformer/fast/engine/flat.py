r"""An optimizer's parameters in flat buffers: every weight, gradient and moment a view.

The reference optimizer keeps each parameter's weights, gradient and Adam moments
:math:`m, v` as arrays of their own, and so does the fast set until its first
:meth:`~minitransformer.optim.optimizer.Optimizer.step`. There the fast set lays
them end to end: one flat array each for the weights, the gradients and every state
key, and each ``p.data``, ``p.grad``, ``state[name]["m"]`` ... rebound to a view of
its segment (same shape, same values, C-contiguous). Every layer still reads and
writes its own tensors, and in place (``p.grad += ...``) writes the flat buffer.

What the layout buys is the number of launches on a GPU, where a small model's step is
launch-bound (``benchmarks/RESULTS.md``): zeroing every gradient is one ``fill``, the
global norm of the clipping one sum of squares, its scaling one multiplication, and
Adam one kernel for all tensors (:mod:`minitransformer.fast.engine.cuda_flat`), where each
was once per tensor. On the CPU the per-tensor kernels run on the views, so every
number is bit for bit what it was without the layout.

Segments start at multiples of :data:`ALIGN` elements; the gap after a segment is
zeros in every buffer and stays zero under every update (a zero gradient, moment
and weight make a zero Adam step), so the sums over a whole buffer are the sums
over the tensors.

**Bookkeeping.** Anything may rebind a tensor: ``Module.load_state_dict`` and
``astype`` give ``p.data`` and ``p.grad`` new arrays, ``Optimizer.load_state_dict``
gives new moments, ``requires_grad`` changes which tensors take part. So the layout
is never trusted: :meth:`FlatParameters.intact` checks by identity that every
tensor is still the view it was given (a few microseconds), and :func:`flatten`
builds a new layout from the current values when one is not. ``covering`` finds the
layout that holds exactly a list of parameters (what the clipping and the trainer's
finite checks ask: one launch over a buffer where there was one a tensor).
Set ``MINITRANSFORMER_FLAT=0`` to keep the per-tensor arrays.
"""
from __future__ import annotations

import os
import weakref

from minitransformer.backend import xp

__all__ = ["ALIGN", "FlatParameters", "enabled", "flatten", "covering"]

ALIGN = 32  # elements: every segment starts at a multiple of 128 bytes (float32) or 256 (float64)

_layouts: "weakref.WeakSet[FlatParameters]" = weakref.WeakSet()  # the live layouts (the optimizers hold them)


def enabled() -> bool:
    """False when ``MINITRANSFORMER_FLAT=0`` (read at each call: tests switch it)."""
    return os.environ.get("MINITRANSFORMER_FLAT", "1").strip() != "0"


def _aligned(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN`: the room a segment of n elements takes."""
    return -(-n // ALIGN) * ALIGN


class FlatParameters:
    """Parameters ``(name, p)``, their gradients and state arrays, as views of flat buffers.

    Attributes:
        names: the parameters' names, in segment order.
        params: the Parameters, in the same order.
        offsets, sizes: each segment's first element and its number of elements.
        data: (N,) the weights; ``grad``: (N,) the gradients; ``state[key]``: (N,)
            each state array (``"m"``, ``"v"`` for Adam). ``N`` is the last segment's
            end, rounded up to :data:`ALIGN`.
    """

    def __init__(self, named: list, states: dict, keys: tuple):
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.keys = tuple(keys)
        self.sizes = [int(p.data.size) for p in self.params]
        self.offsets, at = [], 0
        for n in self.sizes:
            self.offsets.append(at)
            at += _aligned(n)
        N, dtype = max(at, ALIGN), self.params[0].data.dtype
        self.data = xp.zeros(N, dtype=dtype)                          # (N,)
        self.grad = xp.zeros(N, dtype=dtype)                          # (N,)
        self.state = {key: xp.zeros(N, dtype=dtype) for key in keys}  # (N,) each
        self._views = []  # per parameter: (its state dict, data view, grad view, state views)
        for name, p, o, n in zip(self.names, self.params, self.offsets, self.sizes):
            shape = p.data.shape
            data = self.data[o:o + n].reshape(shape)    # (*shape) a view
            grad = self.grad[o:o + n].reshape(shape)    # (*shape) a view
            data[...] = p.data
            grad[...] = p.grad
            p.data, p.grad = data, grad
            st = states[name]
            views = []
            for key in keys:
                view = self.state[key][o:o + n].reshape(shape)  # (*shape) a view
                view[...] = st[key]
                st[key] = view
                views.append(view)
            self._views.append((st, data, grad, tuple(views)))
        self._ids = frozenset(id(p) for p in self.params)
        _layouts.add(self)

    def intact(self, named: list, states: dict) -> bool:
        """True when ``named`` are this layout's parameters, in its order, and every
        weight, gradient and state array of theirs is still the view it was given."""
        if len(named) != len(self.params):
            return False
        for (name, p), q, mine, (st, data, grad, views) in zip(named, self.params, self.names, self._views):
            if p is not q or name != mine or p.data is not data or p.grad is not grad or states[name] is not st:
                return False
            if any(st[key] is not view for key, view in zip(self.keys, views)):
                return False
        return True

    def covers(self, plist) -> bool:
        """True when ``plist`` holds exactly this layout's parameters (in any order) and
        their weights and gradients are still its views: a sum over :attr:`grad` is a
        sum over their gradients, a test of :attr:`data` one of their weights."""
        if len(plist) != len(self.params) or any(id(p) not in self._ids for p in plist):
            return False
        return all(p.data is data and p.grad is grad for p, (_, data, grad, _) in zip(self.params, self._views))

    def within(self, plist) -> bool:
        """True when every parameter of this layout is in ``plist`` (it may hold more)."""
        return self._ids <= {id(p) for p in plist}

    def holds(self, p) -> bool:
        """True when ``p``'s weights are still a view of this layout's buffer."""
        return id(p) in self._ids and any(q is p and q.data is data for q, (_, data, _, _) in
                                          zip(self.params, self._views))

    def grad_holders(self) -> set:
        """The ids of the parameters whose gradient is still a view of :attr:`grad`."""
        return {id(p) for p, (_, _, grad, _) in zip(self.params, self._views) if p.grad is grad}

    def release(self, keep: set) -> None:
        """Give every tensor of a parameter not in ``keep`` (ids), still a view here,
        an array of its own: a layout made without it must not pin these buffers."""
        for p, (st, data, grad, views) in zip(self.params, self._views):
            if id(p) in keep:
                continue
            if p.data is data:
                p.data = data.copy()  # (*p.shape)
            if p.grad is grad:
                p.grad = grad.copy()  # (*p.shape)
            for key, view in zip(self.keys, views):
                if st.get(key) is view:
                    st[key] = view.copy()  # (*p.shape)


def flatten(current: FlatParameters | None, named: list, states: dict, keys: tuple) -> FlatParameters | None:
    """The layout of these parameters: ``current`` if it is intact, else a new one made
    from their present values. None (the per-tensor arrays are kept) when the layout is
    switched off, there is nothing to lay out, the tensors differ in dtype or array type,
    or another live layout (a second optimizer's) holds some of them."""
    if not enabled() or not named:
        return None
    if current is not None and current.intact(named, states):
        return current
    if current is not None:  # rebuilt: whatever leaves it (frozen now) gets arrays of its own
        current.release({id(p) for _, p in named})
    if any(layout is not current and layout.holds(p) for layout in list(_layouts) for _, p in named):
        return None  # another optimizer's layout holds some of them: taking them would make each rebuild every step
    first = named[0][1].data
    kind, dtype = type(first), first.dtype
    for name, p in named:
        arrays = (p.data, p.grad, *(states[name][key] for key in keys))
        if any(type(a) is not kind or a.dtype != dtype for a in arrays):
            return None
    if type(xp.empty(0, dtype=dtype)) is not kind:  # made on another backend than the active one
        return None
    return FlatParameters(named, states, keys)


def covering(plist) -> FlatParameters | None:
    """The live layout that holds exactly the weights and gradients of ``plist``, or None."""
    for layout in list(_layouts):
        if layout.covers(plist):
            return layout
    return None
