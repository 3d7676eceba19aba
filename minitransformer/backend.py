"""The one place that decides which array library does the math.

Every other module writes ``from minitransformer.backend import xp`` and calls
``xp.matmul``, ``xp.exp`` ... ``xp`` is a thin forwarding object, so switching
the backend with :func:`use` takes effect everywhere at once, even in modules
that imported ``xp`` earlier.

Three backends exist:

``numpy``
    The default. Plain NumPy on the CPU.
``cupy``
    CuPy on an NVIDIA GPU. Chosen by ``MINITRANSFORMER_BACKEND=cupy`` or
    ``backend.use("cupy")``.
``strict``
    A CPU stand-in for CuPy, used by the tests. It is NumPy underneath, but its
    arrays refuse implicit conversion to host NumPy arrays, exactly as CuPy
    arrays do. Code that mixes ``np.`` calls into device arrays fails here, on a
    laptop or in CI, instead of first failing on a GPU. Inside
    :func:`forbid_host_sync` it also refuses every read of a device value that
    would make a GPU wait (``float(a)``, ``a.item()``, ``to_numpy(a)``, a boolean
    mask index ...), so tests prove that a training step never waits.

Besides ``xp`` this module provides the default float dtype, one seeded random
generator type (:class:`RNG`) whose state is two integers (so it round-trips
through a checkpoint on every backend), :func:`to_numpy`, :func:`asarray` and
:func:`scatter_add`.
"""
from __future__ import annotations

import contextlib
import operator
import os

import numpy as _np

__all__ = [
    "xp", "use", "name", "is_device_array", "to_numpy", "asarray", "scatter_add",
    "get_dtype", "set_dtype", "dtype_scope", "RNG", "synchronize", "BACKENDS",
    "forbid_host_sync", "HostSyncError", "values_on_host",
]

BACKENDS = ("numpy", "cupy", "strict")


# ---------------------------------------------------------------------------
# The strict CPU stand-in for CuPy
# ---------------------------------------------------------------------------
class HostConversionError(TypeError):
    """Raised by the strict backend where CuPy would refuse a host conversion."""


def _refuse(what: str):
    raise HostConversionError(
        f"{what}: implicit conversion between a device array and a host NumPy array is not "
        "allowed (CuPy refuses it too). Use backend.to_numpy(a) to copy to the host, "
        "backend.asarray(a) to copy to the device, and xp.* instead of np.* for array math."
    )


class HostSyncError(RuntimeError):
    """Raised inside :func:`forbid_host_sync` where a GPU would have to wait for the
    device to read a value back to the host."""


_sync = {"forbidden": 0}  # > 0 inside forbid_host_sync()


def _host_sync(what: str) -> None:
    """Called by the strict backend wherever CuPy would synchronise with the device."""
    if _sync["forbidden"]:
        raise HostSyncError(
            f"{what} reads a device value back to the host inside forbid_host_sync(); on a GPU "
            "this stalls until all queued work is done. Keep the value on the device, or read it "
            "only every N steps (see TrainConfig.sync_every)."
        )


@contextlib.contextmanager
def forbid_host_sync():
    """``with forbid_host_sync(): ...`` fails at the first device-to-host read.

    Strict backend: :class:`HostSyncError` from ``float()``, ``int()``, ``bool()``,
    ``.item()``, ``.get()``, ``.tolist()``, :func:`to_numpy`, boolean-mask
    indexing and ``nonzero``-like functions (their output size depends on the
    data). CuPy: ``cupyx.allow_synchronize(False)``, CuPy's own check. NumPy:
    nothing (there is no device).
    """
    _sync["forbidden"] += 1
    try:
        if _state["name"] == "cupy":
            import cupyx
            with cupyx.allow_synchronize(False):
                yield
        else:
            yield
    finally:
        _sync["forbidden"] -= 1


@contextlib.contextmanager
def _sync_allowed():
    """Lift :func:`forbid_host_sync` for strict-backend code that stands in for a
    CuPy routine that does not synchronise (the CPU scatter-add)."""
    saved, _sync["forbidden"] = _sync["forbidden"], 0
    try:
        yield
    finally:
        _sync["forbidden"] = saved


_DATA_DEPENDENT_SHAPE = {"nonzero", "flatnonzero", "argwhere", "unique", "extract", "compress"}


def _unwrap(obj, allow_host: bool = False):
    """Strip StrictArray wrappers from (nested) arguments; refuse raw host arrays."""
    if isinstance(obj, StrictArray):
        return obj._a
    if isinstance(obj, _np.ndarray):
        if allow_host:
            return obj
        _refuse(f"a host numpy.ndarray of shape {obj.shape} was passed to a device function")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unwrap(o, allow_host) for o in obj)
    if isinstance(obj, dict):
        return {k: _unwrap(v, allow_host) for k, v in obj.items()}
    return obj


def _wrap(obj):
    """Wrap NumPy results (arrays and NumPy scalars) as StrictArray, recursively."""
    if isinstance(obj, _np.ndarray):
        return StrictArray(obj)
    if isinstance(obj, _np.generic) and not isinstance(obj, (_np.str_, _np.bytes_)):
        return StrictArray(_np.asarray(obj))  # CuPy reductions give 0-d arrays too
    if isinstance(obj, _np.random.Generator):
        return _StrictNamespace(obj)  # its draws come back as device arrays
    if isinstance(obj, tuple):
        return tuple(_wrap(o) for o in obj)
    if isinstance(obj, list):
        return [_wrap(o) for o in obj]
    return obj


class StrictArray:
    """A NumPy array that behaves like a CuPy array with respect to the host.

    Arithmetic, indexing and methods work as usual (results stay wrapped), but
    ``np.asarray(a)``, ``np.sum(a)``, ``np_array + a`` and friends raise
    :class:`HostConversionError`. ``float(a)``, ``int(a)``, ``bool(a)`` and
    ``a.item()`` are allowed, as in CuPy (they synchronise there).
    """

    __slots__ = ("_a",)
    __array_ufunc__ = None  # np.exp(a), host_array + a -> TypeError
    __hash__ = None

    def __init__(self, a):
        self._a = a

    def __array__(self, *args, **kwargs):
        _refuse("np.asarray() on a device array")

    def __array_function__(self, func, types, args, kwargs):
        _refuse(f"numpy.{getattr(func, '__name__', func)}() on a device array")

    # attribute access: shape, dtype, reshape, sum, astype, ...
    def __getattr__(self, attr):
        if attr.startswith("__"):  # never leak __array_interface__ & co. to NumPy
            raise AttributeError(attr)
        value = getattr(self._a, attr)
        if callable(value):
            def method(*args, **kwargs):
                return _wrap(value(*_unwrap(args), **_unwrap(kwargs)))
            return method
        return _wrap(value)

    @property
    def T(self):
        return StrictArray(self._a.T)

    def get(self):
        """CuPy's explicit device-to-host copy."""
        _host_sync(".get()")
        return self._a.copy()

    def item(self):
        _host_sync(".item()")
        return self._a.item()

    def tolist(self):
        _host_sync(".tolist()")
        return self._a.tolist()

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (_wrap(x) for x in self._a)

    def __getitem__(self, idx):
        parts = idx if isinstance(idx, tuple) else (idx,)
        if any(isinstance(i, StrictArray) and i._a.dtype == bool for i in parts):
            _host_sync("boolean-mask indexing (its size depends on the data)")
        return _wrap(self._a[_unwrap(idx)])

    def __setitem__(self, idx, value):
        self._a[_unwrap(idx)] = _unwrap(value)

    def __float__(self):
        _host_sync("float()")
        return float(self._a)

    def __int__(self):
        _host_sync("int()")
        return int(self._a)

    def __index__(self):
        _host_sync("using a device array as an index")
        return operator.index(self._a)

    def __bool__(self):
        _host_sync("bool() (an `if` on a device value)")
        return bool(self._a)

    def __repr__(self):
        return "strict_" + repr(self._a)

    def __format__(self, spec):
        _host_sync("formatting")
        return format(self._a.item() if self._a.ndim == 0 else self._a, spec)


def _binary(op):
    def forward(self, other):
        return _wrap(op(self._a, _unwrap(other)))

    def reflected(self, other):
        return _wrap(op(_unwrap(other), self._a))

    return forward, reflected


for _name, _op in [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv),
                   ("mod", operator.mod), ("pow", operator.pow), ("matmul", operator.matmul),
                   ("and", operator.and_), ("or", operator.or_), ("xor", operator.xor),
                   ("lshift", operator.lshift), ("rshift", operator.rshift)]:
    _f, _r = _binary(_op)
    setattr(StrictArray, f"__{_name}__", _f)
    setattr(StrictArray, f"__r{_name}__", _r)


def _make_inplace(iop):
    def inplace(self, other):
        iop(self._a, _unwrap(other))  # modifies the buffer, so views stay in sync
        return self
    return inplace


for _name, _iop in [("add", operator.iadd), ("sub", operator.isub), ("mul", operator.imul),
                    ("truediv", operator.itruediv), ("floordiv", operator.ifloordiv),
                    ("mod", operator.imod), ("pow", operator.ipow), ("and", operator.iand),
                    ("or", operator.ior), ("xor", operator.ixor)]:
    setattr(StrictArray, f"__i{_name}__", _make_inplace(_iop))

for _name, _op in [("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt),
                   ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge)]:
    setattr(StrictArray, f"__{_name}__", _binary(_op)[0])

for _name, _op in [("neg", operator.neg), ("pos", operator.pos), ("abs", operator.abs),
                   ("invert", operator.invert)]:
    setattr(StrictArray, f"__{_name}__", (lambda op: lambda self: _wrap(op(self._a)))(_op))


# Functions that copy host data to the device, as cupy.asarray does.
_HOST_TO_DEVICE = {"asarray", "array", "ascontiguousarray", "asanyarray"}


class _StrictFunction:
    """Wraps a NumPy function or ufunc (keeping methods such as ``add.at``)."""

    def __init__(self, fn, allow_host=False):
        self._fn = fn
        self._allow_host = allow_host
        self.__name__ = getattr(fn, "__name__", "function")

    def __call__(self, *args, **kwargs):
        if self.__name__ in _DATA_DEPENDENT_SHAPE:
            _host_sync(f"xp.{self.__name__}() (its output size depends on the data)")
        args = _unwrap(args, self._allow_host)
        kwargs = _unwrap(kwargs, self._allow_host)
        return _wrap(self._fn(*args, **kwargs))

    def __getattr__(self, attr):
        value = getattr(self._fn, attr)
        return _StrictFunction(value) if callable(value) else value


class _StrictNamespace:
    """``numpy`` (or a NumPy object such as a Generator) seen through the strict
    wrappers: ``xp.exp``, ``xp.random.default_rng(0).random(...)`` ..."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, attr):
        value = getattr(self._module, attr)
        if isinstance(value, type) or not callable(value):
            if type(value).__name__ == "module" or isinstance(value, _np.random.BitGenerator):
                return _StrictNamespace(value)
            return value  # dtypes, constants (xp.float32, xp.inf, xp.newaxis)
        return _StrictFunction(value, allow_host=attr in _HOST_TO_DEVICE)

    ndarray = StrictArray


# ---------------------------------------------------------------------------
# Backend selection
# ---------------------------------------------------------------------------
_state = {"name": None, "module": None, "dtype": _np.float32}


def _load(backend_name: str):
    if backend_name == "numpy":
        return _np
    if backend_name == "strict":
        return _StrictNamespace(_np)
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


def name() -> str:
    """The name of the active backend."""
    return _state["name"]


class _XP:
    """Forwards attribute access to the active array module (numpy/cupy/strict)."""

    def __getattr__(self, attr):
        return getattr(_state["module"], attr)

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
    if isinstance(a, StrictArray):
        _host_sync("to_numpy()")
        return a._a.copy()
    if isinstance(a, _np.ndarray):
        return a
    if hasattr(a, "get"):  # cupy.ndarray
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
    if isinstance(a, StrictArray) and _state["name"] != "strict":
        a = to_numpy(a)  # a strict array made before a backend switch
    return xp.asarray(a, dtype=dtype)  # a device array stays on the device


def scatter_add(target, indices, values) -> None:
    r"""In place: ``target[indices] += values``, summing over repeated indices.

    ``indices`` (N,) indexes the first axis of ``target`` (V, ...); ``values`` is
    (N, ...). CuPy uses ``cupyx.scatter_add``. On the CPU, ``np.add.at`` is slow
    for 2-D values (one small add per row), so NumPy instead sorts the rows by
    index and sums each run of equal indices with one ``add.reduceat``:

    .. math:: \mathrm{target}_i \mathrel{+}= \textstyle\sum_{n:\ \mathrm{indices}_n = i} \mathrm{values}_n,

    the same sums (a stable sort keeps each run in input order), 3-5x faster.
    """
    if _state["name"] == "cupy":
        import cupyx
        cupyx.scatter_add(target, indices, values)
        return
    if indices.size == 0:
        return
    with _sync_allowed():  # stands in for cupyx.scatter_add, which does not synchronise
        _sort_and_reduce(target, indices, values)


def _sort_and_reduce(target, indices, values) -> None:
    """The CPU scatter-add of :func:`scatter_add`."""
    order = xp.argsort(indices, kind="stable")  # (N,) rows grouped by index, in input order
    idx = indices[order]  # (N,) sorted indices
    starts = xp.flatnonzero(idx[1:] != idx[:-1]) + 1  # (R-1,) where each later run begins
    starts = xp.concatenate([xp.zeros(1, dtype=starts.dtype), starts])  # (R,) runs of equal index
    target[idx[starts]] += xp.add.reduceat(values[order], starts, axis=0)  # (R, ...) one sum per distinct index


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
    """

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.counter = 0

    def generator(self):
        """A backend generator for the next draw (advances the stream)."""
        mixed = _np.random.SeedSequence([self.seed, self.counter]).generate_state(1, _np.uint32)[0]
        self.counter += 1
        return xp.random.default_rng(int(mixed))

    def random(self, shape, dtype=None):
        """Uniform floats in [0, 1) of the given shape, on the active backend."""
        return self.generator().random(shape, dtype=dtype or get_dtype())

    def normal(self, shape, std=1.0, dtype=None):
        """Normal(0, std^2) floats of the given shape, on the active backend."""
        dtype = dtype or get_dtype()
        out = self.generator().standard_normal(shape, dtype=dtype)
        return out * std if std != 1.0 else out

    def integers(self, low, high, shape):
        """Uniform integers in [low, high) of the given shape, on the active backend."""
        return self.generator().integers(low, high, size=shape)

    def host(self) -> _np.random.Generator:
        """A NumPy generator for host-side choices (batch order, corruption plans)."""
        mixed = _np.random.SeedSequence([self.seed, self.counter]).generate_state(1, _np.uint32)[0]
        self.counter += 1
        return _np.random.default_rng(int(mixed))

    def state_dict(self) -> dict:
        return {"seed": self.seed, "counter": self.counter}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.counter = int(state["seed"]), int(state["counter"])


use(os.environ.get("MINITRANSFORMER_BACKEND", "numpy").strip().lower() or "numpy")
