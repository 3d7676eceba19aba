"""The one place that decides which array library does the math.

Every other module writes ``from minitransformer.backend import xp`` and calls
``xp.matmul``, ``xp.exp`` ... ``xp`` is a thin forwarding object, so switching
the backend with :func:`use` takes effect everywhere at once, even in modules
that imported ``xp`` earlier.

``numpy``
    The default. Plain NumPy on the CPU.
``cupy``
    CuPy on an NVIDIA GPU. Chosen by ``MINITRANSFORMER_BACKEND=cupy`` or
    ``backend.use("cupy")``.
``strict``
    A CPU stand-in for CuPy that the tests use (NumPy whose arrays refuse host
    conversions as CuPy's do); it lives in :mod:`minitransformer.testing.strict`.

Besides ``xp`` this module provides the default float dtype, one seeded random
generator type (:class:`RNG`) whose state is two integers (so it round-trips
through a checkpoint on every backend), :func:`erf`, :func:`to_numpy`,
:func:`asarray` and :func:`scatter_add`; and the argument checks both kernel sets
share (:func:`check_ids`, :func:`check_attention_inputs`, :func:`check_cross_entropy_args`),
with :func:`sum_to_shape`, the gradient of a broadcast.
"""
from __future__ import annotations

import contextlib
import os

import numpy as _np

__all__ = [
    "xp", "use", "name", "is_device_array", "to_numpy", "asarray", "scatter_add", "erf",
    "get_dtype", "set_dtype", "dtype_scope", "RNG", "synchronize", "BACKENDS", "values_on_host",
    "forbid_host_sync", "as_rng", "check_ids", "check_attention_inputs",
    "check_cross_entropy_args", "sum_to_shape",
]

BACKENDS = ("numpy", "cupy", "strict")


# ---------------------------------------------------------------------------
# Backend selection
# ---------------------------------------------------------------------------
_state = {"name": None, "module": None, "dtype": _np.float32}


def _load(backend_name: str):
    if backend_name == "numpy":
        return _np
    if backend_name == "strict":
        from minitransformer.testing.strict import STRICT
        return STRICT
    if backend_name == "cupy":
        try:
            import cupy  # noqa: WPS433 (optional GPU extra)
        except ImportError as err:
            raise RuntimeError(
                "backend 'cupy' was requested but CuPy is not installed. Install the GPU extra "
                "(pip install 'minitransformer[gpu]', or the cupy-cudaXXx wheel for your CUDA) "
                "or use backend 'numpy'."
            ) from err
        try:
            cupy.cuda.runtime.getDeviceCount()
        except Exception as err:  # no driver, no device
            raise RuntimeError(f"backend 'cupy' was requested but no usable GPU was found: {err}") from err
        return cupy
    raise ValueError(f"unknown backend {backend_name!r}; expected one of {BACKENDS}")


def use(backend_name: str) -> None:
    """Switch the array library: ``"numpy"`` (default), ``"cupy"`` or ``"strict"``.

    Arrays made under one backend are not converted; switch before building a
    model (or move its weights with ``load_state_dict``).
    """
    module = _load(backend_name)
    _state["name"], _state["module"] = backend_name, module
    vars(xp).clear()  # the names xp remembered belong to the previous module


def name() -> str:
    """The name of the active backend."""
    return _state["name"]


class _XP:
    """Forwards attribute access to the active array module (numpy/cupy/strict).

    Each name is looked up in the module once and then kept in this object's own
    ``__dict__``, where Python finds it before it would call ``__getattr__``: a
    decoding step reads ``xp.something`` thousands of times, and the forwarding
    call cost about 0.8 us each (6 % of the small model's sampling). :func:`use`
    forgets them all when the backend changes."""

    def __getattr__(self, attr):
        value = getattr(_state["module"], attr)
        vars(self)[attr] = value
        return value

    def __repr__(self):
        return f"<minitransformer xp -> {_state['name']}>"


xp = _XP()


def is_device_array(a) -> bool:
    """True for arrays of the active backend (not Python scalars, not host arrays
    under the cupy/strict backends)."""
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
    """True when reading the values of ``a`` costs no device round trip: a host NumPy
    array, or any array under the numpy backend.

    Checks on input *values* (token ids in range, labels in [0, 1]) run only then.
    On a GPU they would stall every training step, so there the tasks check each
    batch on the host, before copying it to the device.
    """
    return _state["name"] == "numpy" or type(a) is _np.ndarray


def asarray(a, dtype=None):
    """Copy host data (a NumPy array, list or scalar) to the active backend."""
    if hasattr(a, "get") and not is_device_array(a):
        a = a.get()  # an array of another backend, made before a switch
    return xp.asarray(a, dtype=dtype)  # a device array stays on the device


def scatter_add(target, indices, values) -> None:
    r"""In place: ``target[indices] += values``, summing over repeated indices.

    .. math:: \mathrm{target}_i \mathrel{+}= \textstyle\sum_{n:\ \mathrm{indices}_n = i} \mathrm{values}_n

    ``indices`` (N,) indexes the first axis of ``target`` (V, ...); ``values`` is
    (N, ...). Plain ``target[indices] += values`` would keep only one of several
    rows with the same index; ``add.at`` sums them all (``cupyx.scatter_add`` on CuPy).
    """
    if _state["name"] == "cupy":
        import cupyx
        cupyx.scatter_add(target, indices, values)
    else:
        xp.add.at(target, indices, values)


def erf(x):
    r"""The error function :math:`\mathrm{erf}(x) = \frac{2}{\sqrt\pi}\int_0^x e^{-t^2}dt`,
    element-wise, from SciPy (``cupyx.scipy.special`` on CuPy). x: (...)."""
    if _state["name"] == "cupy":
        from cupyx.scipy.special import erf as cupy_erf
        return cupy_erf(x)
    from scipy.special import erf as scipy_erf
    if _state["name"] == "strict":
        from minitransformer.testing.strict import device_call
        return device_call(scipy_erf, x)  # stands in for the device function
    return scipy_erf(x)


@contextlib.contextmanager
def forbid_host_sync():
    """``with forbid_host_sync(): ...`` fails at the first read of a device value
    back to the host, the kind of read that makes a GPU wait: on CuPy through
    ``cupyx.allow_synchronize(False)``, on the tests' strict stand-in through
    :func:`minitransformer.testing.strict.refuse_host_reads`; on NumPy (no device) nothing."""
    if _state["name"] == "cupy":
        import cupyx
        with cupyx.allow_synchronize(False):
            yield
    elif _state["name"] == "strict":
        from minitransformer.testing.strict import refuse_host_reads
        with refuse_host_reads():
            yield
    else:
        yield


def synchronize() -> None:
    """Wait for queued device work (a no-op on the CPU). For timing only."""
    if _state["name"] == "cupy":
        _state["module"].cuda.get_current_stream().synchronize()


# ---------------------------------------------------------------------------
# Default dtype
# ---------------------------------------------------------------------------
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
    """``with dtype_scope("float64"): ...`` builds models in float64 for checks."""
    old = _state["dtype"]
    set_dtype(dtype)
    try:
        yield
    finally:
        _state["dtype"] = old


# ---------------------------------------------------------------------------
# Random numbers
# ---------------------------------------------------------------------------
class RNG:
    """A seeded random stream whose whole state is ``(seed, counter)``.

    Each draw makes a fresh backend generator from the pair ``(seed, counter)``
    and then increments the counter. So the state is two integers: it saves to a
    checkpoint and restores on NumPy and CuPy alike, and a resumed run draws
    exactly the numbers an uninterrupted run would have drawn.

    **Where a draw is made.** Initial weights (:meth:`normal`, :meth:`host_random`)
    are drawn on the host by NumPy and copied to the backend once, so one seed
    builds the same model on the CPU and on a GPU (CuPy's generator is not NumPy's
    PCG64: drawn on the device, the same seed gave other weights on an H100). What is
    drawn every step (dropout masks, MLM corruption, sampling: :meth:`random`,
    :meth:`integers`) stays on the device, from the backend's own generator.

    ``stream`` (default 0) picks one of many independent streams of the same seed:
    data-parallel ranks draw their dropout masks from stream = rank, so that two
    ranks never reuse the same numbers on different examples (stream 0 is the
    plain ``(seed, counter)`` stream; the stream is not part of the saved state).
    """

    def __init__(self, seed: int = 0, stream: int = 0):
        self.seed = int(seed)
        self.counter = 0
        self.stream = int(stream)

    def _entropy(self) -> list:
        return [self.seed, self.counter] if self.stream == 0 else [self.seed, self.counter, self.stream]

    def generator(self):
        """A backend generator for the next draw (advances the stream)."""
        mixed = _np.random.SeedSequence(self._entropy()).generate_state(1, _np.uint32)[0]
        self.counter += 1
        return xp.random.default_rng(int(mixed))

    def random(self, shape, dtype=None):
        """Uniform floats in [0, 1) of the given shape, drawn on the device by the backend's own
        generator (dropout masks, MLM corruption, sampling: drawn every step, never copied).
        CuPy's generator is not NumPy's, so these numbers differ between CPU and GPU."""
        return self.generator().random(shape, dtype=dtype or get_dtype())

    def host_random(self, shape, dtype=None):
        """Uniform floats in [0, 1) drawn on the host by NumPy and moved to the backend: for
        initial weights, so that one seed builds the same model on the CPU and on a GPU."""
        return xp.asarray(self.host().random(shape, dtype=dtype or get_dtype()))

    def normal(self, shape, std=1.0, dtype=None):
        """Normal(0, std^2) floats of the given shape, drawn on the host by NumPy and moved to the
        backend (initial weights: one seed builds the same model on the CPU and on a GPU)."""
        dtype = dtype or get_dtype()
        out = xp.asarray(self.host().standard_normal(shape, dtype=dtype))
        return out * std if std != 1.0 else out

    def integers(self, low, high, shape):
        """Uniform integers in [low, high) of the given shape, on the active backend."""
        return self.generator().integers(low, high, size=shape)

    def host(self) -> _np.random.Generator:
        """A NumPy generator for host-side choices (batch order, corruption plans)."""
        mixed = _np.random.SeedSequence(self._entropy()).generate_state(1, _np.uint32)[0]
        self.counter += 1
        return _np.random.default_rng(int(mixed))

    def state_dict(self) -> dict:
        return {"seed": self.seed, "counter": self.counter}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.counter = int(state["seed"]), int(state["counter"])

    def __repr__(self) -> str:
        return f"RNG(seed={self.seed}, counter={self.counter}" + (f", stream={self.stream})" if self.stream else ")")


def as_rng(rng=None, default_seed: int = 0) -> RNG:
    """Whatever a caller passed as ``rng``, as an :class:`RNG`.

    ``None`` -> ``RNG(default_seed)``; an int -> ``RNG(seed)``; an :class:`RNG` ->
    itself (shared, advanced in place); a NumPy ``Generator`` -> an :class:`RNG`
    seeded by one draw from it (so the Generator advances, and the same Generator
    state gives the same numbers). Anything else: a one-line ValueError (as for every bad setting).
    """
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


# ---- What both kernel sets share ------------------------------------------------------
# The plain kernels in minitransformer/nn and their fast twins in minitransformer/fast check
# their arguments with the same functions, so that one mistake gets one message whichever set
# runs. They sit here, below both sets, because neither set may import the other's files.


def check_ids(ids, vocab_size: int, what: str = "embedding"):
    """Raise ValueError unless ``ids`` is an integer array with values in [0, vocab_size).

    The values are read only where that needs no device round trip
    (:func:`values_on_host`): on the CPU always, on a GPU only for host
    arrays. A GPU checks each batch on the host before the copy instead
    (:func:`ids_to_device`, which the tasks use), so the training step never waits.
    """
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
    """Raise ValueError unless the upstream gradient ``dout`` has the attention output's shape
    ``out_shape`` (B, H, Tq, Dv): another shape would broadcast silently in the products."""
    if tuple(dout.shape) != tuple(out_shape):
        raise ValueError(f"attention_backward: dout has shape {tuple(dout.shape)}, the output {tuple(out_shape)}")


def check_cross_entropy_args(logits, targets, label_smoothing, reduction) -> float:
    """Raise ValueError for arguments ``cross_entropy_forward`` cannot use: logits (..., V),
    targets (...), label smoothing in [0, 1), reduction "mean", "sum" or "none". Returns epsilon."""
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
    """Sum ``a`` over the axes that a broadcast of ``shape`` to ``a.shape`` stretched:
    the gradient of a broadcast array. a: (...); returns (shape)."""
    lead = a.ndim - len(shape)
    a = a.sum(axis=tuple(range(lead))) if lead else a  # drop leading axes the shape lacks
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1)
    return a.sum(axis=axes, keepdims=True) if axes else a  # (shape)


#: Why ``MINITRANSFORMER_BACKEND`` could not be followed at import (then NumPy is used), or None:
#: a ValueError for a name that is no backend, a RuntimeError when CuPy or a GPU is missing.
#: Importing never fails on it (the ``minitransformer`` command must get the chance to say it in
#: one line, before any work); a program can check it.
ENVIRONMENT_PROBLEM: Exception | None = None


def _use_from_environment() -> None:
    global ENVIRONMENT_PROBLEM
    value = os.environ.get("MINITRANSFORMER_BACKEND", "numpy").strip().lower() or "numpy"
    try:
        use(value)
    except (ValueError, RuntimeError) as err:
        use("numpy")
        ENVIRONMENT_PROBLEM = type(err)(f"MINITRANSFORMER_BACKEND={value!r}: {err}; unset it or set it to numpy "
                                        "or cupy")


_use_from_environment()

