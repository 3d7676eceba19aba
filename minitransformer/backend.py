"""What every layer needs first: the array library, the float dtype, the random stream.

Every module writes ``from minitransformer.backend import xp`` and calls ``xp.matmul``,
``xp.exp`` ... ``xp`` forwards to the active library, so :func:`use` switches it
everywhere at once: ``"numpy"`` (the default, the CPU), ``"cupy"`` (an NVIDIA GPU;
``MINITRANSFORMER_BACKEND=cupy``) or ``"strict"`` (the tests' CPU stand-in for CuPy);
:mod:`minitransformer.devices` loads them and holds what only matters on a GPU.

Also here: the default float dtype, :class:`RNG` (a seeded stream whose state is two
integers, so it round-trips through a checkpoint), :func:`erf`, :func:`scatter_add`,
and the argument checks both kernel sets share, so one mistake gets one message.
"""
from __future__ import annotations

import contextlib

import numpy as _np

from minitransformer import devices

__all__ = [
    "xp", "use", "name", "is_device_array", "to_numpy", "asarray", "scatter_add", "erf",
    "get_dtype", "set_dtype", "dtype_scope", "RNG", "BACKENDS", "values_on_host", "as_rng", "check_ids",
    "check_attention_inputs", "check_cross_entropy_args", "sum_to_shape",
]

BACKENDS = ("numpy", "cupy", "strict")


_state = {"name": None, "module": None, "dtype": _np.float32}


def use(backend_name: str) -> None:
    """Switch the array library: ``"numpy"``, ``"cupy"`` or ``"strict"``. Arrays are not
    converted: switch before building a model (or move its weights with ``load_state_dict``)."""
    module = devices.load(backend_name, BACKENDS)
    _state["name"], _state["module"] = backend_name, module
    vars(xp).clear()  # the names xp remembered belong to the previous module


def name() -> str:
    """The name of the active backend."""
    return _state["name"]


class _XP:
    """Forwards attribute access to the active array module. Each name found is kept in
    this object's ``__dict__``, where Python looks before calling ``__getattr__`` (read
    thousands of times a step); :func:`use` forgets them."""

    def __getattr__(self, attr):
        value = getattr(_state["module"], attr)
        vars(self)[attr] = value
        return value

    def __repr__(self):
        return f"<minitransformer xp -> {_state['name']}>"


xp = _XP()


def is_device_array(a) -> bool:
    """True for arrays of the active backend (not scalars, not host arrays under cupy/strict)."""
    if _state["name"] == "numpy":
        return isinstance(a, _np.ndarray)
    return isinstance(a, _state["module"].ndarray)


def to_numpy(a):
    """Copy an array of any backend to a host ``numpy.ndarray`` (explicitly)."""
    if isinstance(a, _np.ndarray):
        return a
    if hasattr(a, "get"):  # a CuPy array (or the strict stand-in's)
        return a.get()
    return _np.asarray(a)


def values_on_host(a) -> bool:
    """True when reading the values of ``a`` costs no device round trip. Checks on input
    *values* (ids in range) run only then; on a GPU the tasks check each batch on the host."""
    return _state["name"] == "numpy" or type(a) is _np.ndarray


def asarray(a, dtype=None):
    """Copy host data (a NumPy array, list or scalar) to the active backend."""
    if hasattr(a, "get") and not is_device_array(a):
        a = a.get()  # an array of another backend, made before a switch
    return xp.asarray(a, dtype=dtype)  # a device array stays on the device


def scatter_add(target, indices, values) -> None:
    r"""In place, summing over repeated indices:

    .. math:: \mathrm{target}_i \mathrel{+}= \textstyle\sum_{n:\ \mathrm{indices}_n = i} \mathrm{values}_n

    target (V, ...), indices (N,), values (N, ...). Plain ``target[indices] += values``
    would keep one of the rows sharing an index; ``add.at`` sums them."""
    xp.add.at(target, indices, values)


def erf(x):
    r""":math:`\mathrm{erf}(x) = \frac{2}{\sqrt\pi}\int_0^x e^{-t^2}dt`, element-wise (SciPy's, or CuPy's). x: (...)."""
    if _state["name"] == "cupy":
        from cupyx.scipy.special import erf as cupy_erf
        return cupy_erf(x)
    from scipy.special import erf as scipy_erf
    if _state["name"] == "strict":
        from minitransformer.testing.strict import device_call
        return device_call(scipy_erf, x)  # stands in for the device function
    return scipy_erf(x)


def get_dtype():
    """The float dtype new parameters and activations use (float32 by default)."""
    return _state["dtype"]


def set_dtype(dtype) -> None:
    """Set the default float dtype: float32 for training, float64 for gradient checks."""
    dtype = _np.dtype(dtype)
    if dtype not in (_np.dtype(_np.float32), _np.dtype(_np.float64)):
        raise ValueError(f"default dtype must be float32 or float64, got {dtype}")
    _state["dtype"] = dtype.type


@contextlib.contextmanager
def dtype_scope(dtype):
    """``with dtype_scope("float64"): ...`` (gradient checks)."""
    old = _state["dtype"]
    set_dtype(dtype)
    try:
        yield
    finally:
        _state["dtype"] = old


class RNG:
    """A seeded random stream whose whole state is ``(seed, counter)``.

    Each draw makes a fresh generator from ``(seed, counter)``, then increments the
    counter: the state saves to a checkpoint, and a resumed run draws exactly what an
    uninterrupted one would. Initial weights (:meth:`normal`, :meth:`host_random`) are
    drawn on the host by NumPy, so one seed builds the same model on a CPU and a GPU;
    what is drawn every step (dropout, MLM corruption, sampling) stays on the device.
    ``stream`` picks an independent stream of the same seed (data-parallel rank r draws
    its dropout from stream r; not part of the saved state).
    """

    def __init__(self, seed: int = 0, stream: int = 0):
        self.seed = int(seed)
        self.counter = 0
        self.stream = int(stream)

    def _next_seed(self) -> int:
        """The next draw's seed (ints >= 2**32, which SeedSequence splits, get fixed width)."""
        f = (self.seed, self.counter, self.stream)
        words = ([self.seed, self.counter] if self.stream == 0 else list(f)) if max(f) < 2**32 else \
            [w for x in f for w in (x & 0xFFFFFFFF, x >> 32)] + [0x5EED5EED]
        self.counter += 1
        return int(_np.random.SeedSequence(words).generate_state(1, _np.uint32)[0])

    def generator(self):
        """A backend generator for the next draw."""
        return xp.random.default_rng(self._next_seed())

    def random(self, shape, dtype=None):
        """Uniform floats in [0, 1), drawn on the device (they differ between CPU and GPU)."""
        return self.generator().random(shape, dtype=dtype or get_dtype())

    def host_random(self, shape, dtype=None):
        """Uniform floats in [0, 1), drawn on the host (initial weights) and moved to the backend."""
        return xp.asarray(self.host().random(shape, dtype=dtype or get_dtype()))

    def normal(self, shape, std=1.0, dtype=None):
        """Normal(0, std^2) floats, drawn on the host (initial weights) and moved to the backend."""
        dtype = dtype or get_dtype()
        out = xp.asarray(self.host().standard_normal(shape, dtype=dtype))
        return out * std if std != 1.0 else out

    def integers(self, low, high, shape):
        """Uniform integers in [low, high) of the given shape, on the active backend."""
        return self.generator().integers(low, high, size=shape)

    def host(self) -> _np.random.Generator:
        """A NumPy generator for host-side choices (batch order)."""
        return _np.random.default_rng(self._next_seed())

    def state_dict(self) -> dict:
        return {"seed": self.seed, "counter": self.counter}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.counter = int(state["seed"]), int(state["counter"])

    def __repr__(self) -> str:
        return f"RNG(seed={self.seed}, counter={self.counter}" + (f", stream={self.stream})" if self.stream else ")")


def as_rng(rng=None, default_seed: int = 0) -> RNG:
    """``rng`` as an :class:`RNG`: None -> ``RNG(default_seed)``, an int -> ``RNG(seed)``, an
    :class:`RNG` -> itself (shared), a NumPy Generator -> an RNG seeded by one draw from it."""
    if rng is None:
        return RNG(default_seed)
    if isinstance(rng, RNG):
        return rng
    if isinstance(rng, _np.random.Generator):
        return RNG(int(rng.integers(2**63)))
    if isinstance(rng, (int, _np.integer)) and not isinstance(rng, bool):
        return RNG(int(rng))
    raise ValueError(f"rng must be None, an int seed, a NumPy Generator (np.random.default_rng(seed)) "
                    f"or a backend.RNG, got {type(rng).__name__}")


# ---- What both kernel sets share: the plain kernels (nn/) and their fast twins (fast/) check
# their arguments with these, so one mistake gets one message whichever set runs.


def check_ids(ids, vocab_size: int, what: str = "embedding"):
    """Raise ValueError unless ``ids`` is an integer array with values in [0, vocab_size);
    the values are read only where that costs no device round trip (:func:`values_on_host`)."""
    if not hasattr(ids, "dtype") or ids.dtype.kind not in "iu":
        dtype = getattr(ids, "dtype", type(ids).__name__)
        raise ValueError(f"{what}: token ids must be an integer array, got dtype {dtype}")
    if ids.size == 0 or not values_on_host(ids):
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"{what}: token id {bad} is out of range for a vocabulary of size {vocab_size} "
            f"(valid ids are 0..{vocab_size - 1})"
        )


def check_linear_inputs(x, W) -> None:
    """Raise ValueError unless x (..., D_in) fits the weight W (D_in, D_out)."""
    if x.shape[-1] != W.shape[0]:
        raise ValueError(f"linear: input has last dimension {x.shape[-1]} but the weight expects "
                         f"D_in={W.shape[0]} (weight shape {tuple(W.shape)})")


def check_attention_inputs(q, k, v, mask, bias) -> None:
    """Raise ValueError unless q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv) fit
    together and the mask (boolean) and bias broadcast to (B, H, Tq, Tk)."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            "attention: q, k, v must be 4-D (B, H, T, Dh); got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[:3] != v.shape[:3] or q.shape[:2] != k.shape[:2]:
        raise ValueError(
            "attention: expected q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    scores = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])  # (B, H, Tq, Tk)
    for what, a in (("mask", mask), ("bias", bias)):
        if a is None:
            continue
        if what == "mask" and a.dtype != bool:
            raise ValueError(f"attention: mask must be boolean (True = may attend), got dtype {a.dtype}")
        if a.ndim > 4 or any(m not in (1, s) for m, s in zip(a.shape[::-1], scores[::-1])):
            raise ValueError(
                f"attention: {what} of shape {tuple(a.shape)} does not broadcast to the scores' "
                f"shape (B, H, Tq, Tk) = {scores}; use (Tq, Tk), (B, 1, 1, Tk) or (B, H, Tq, Tk)"
            )


def check_attention_dout(dout, out_shape) -> None:
    """Raise ValueError unless ``dout`` has the output's shape (B, H, Tq, Dv): another would broadcast."""
    if tuple(dout.shape) != tuple(out_shape):
        raise ValueError(f"attention_backward: dout has shape {tuple(dout.shape)}, the output {tuple(out_shape)}")


def check_cross_entropy_args(logits, targets, label_smoothing, reduction) -> float:
    """Refuse what ``cross_entropy_forward`` cannot use (shapes, smoothing, reduction); returns epsilon."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    eps = float(label_smoothing)
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1), got {eps}")
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"cross_entropy: targets of shape {tuple(targets.shape)} do not match logits of shape "
            f"{tuple(logits.shape)}; expected targets of shape {tuple(logits.shape[:-1])}"
        )
    if eps > 0 and logits.shape[-1] < 2:
        raise ValueError("cross_entropy: label smoothing needs at least 2 classes")
    return eps


def sum_to_shape(a, shape: tuple):
    """The gradient of a broadcast: ``a`` (...) summed over the axes the broadcast of ``shape`` stretched."""
    lead = a.ndim - len(shape)
    a = a.sum(axis=tuple(range(lead))) if lead else a  # drop leading axes the shape lacks
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1)
    return a.sum(axis=axes, keepdims=True) if axes else a  # (shape)


#: Why ``MINITRANSFORMER_BACKEND`` could not be followed at import (NumPy is used then), or None.
ENVIRONMENT_PROBLEM = devices.use_from_environment(use)
