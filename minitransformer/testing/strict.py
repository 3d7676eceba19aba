"""Test machinery: a strict CPU stand-in for CuPy, and a guard against host syncs.

Nothing here is needed to read or run the library; the tests use it.

``backend.use("strict")`` selects :data:`STRICT`, a view of NumPy whose arrays
(:class:`StrictArray`) refuse implicit conversion to host NumPy arrays, exactly as
CuPy arrays do. Code that mixes ``np.`` calls into device arrays then fails on a
laptop or in CI instead of first failing on a GPU.

Inside ``devices.forbid_host_sync()`` (:func:`refuse_host_reads`) the strict
arrays also refuse every read of a device value that would make a GPU wait
(``float(a)``, ``a.item()``, ``to_numpy(a)``, a boolean-mask index ...), so tests
prove that a training step never waits.
"""
from __future__ import annotations

import contextlib
import operator

import numpy as _np


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
def refuse_host_reads():
    """Inside the block, strict arrays raise :class:`HostSyncError` on ``float()``,
    ``int()``, ``bool()``, ``.item()``, ``.get()``, ``.tolist()``, ``to_numpy``,
    boolean-mask indexing and ``nonzero``-like functions (their output size depends
    on the data). ``devices.forbid_host_sync`` uses it on the strict backend."""
    _sync["forbidden"] += 1
    try:
        yield
    finally:
        _sync["forbidden"] -= 1


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


def _device_default_rng(seed=None):
    """The stand-in's ``xp.random.default_rng``: like CuPy's, *not* NumPy's PCG64 (here Philox),
    so the same seed gives other numbers than NumPy's. A draw that must match the CPU (initial
    weights) but is made with the device's generator then shows up on the CPU too: that is how
    one seed built other weights on a real GPU (found on an H100)."""
    return _np.random.Generator(_np.random.Philox(seed))


class _StrictNamespace:
    """``numpy`` (or a NumPy object such as a Generator) seen through the strict
    wrappers: ``xp.exp``, ``xp.random.default_rng(0).random(...)`` ..."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, attr):
        if self._module is _np.random and attr == "default_rng":
            return _StrictFunction(_device_default_rng)
        value = getattr(self._module, attr)
        if isinstance(value, type) or not callable(value):
            if type(value).__name__ == "module" or isinstance(value, _np.random.BitGenerator):
                return _StrictNamespace(value)
            return value  # dtypes, constants (xp.float32, xp.inf, xp.newaxis)
        return _StrictFunction(value, allow_host=attr in _HOST_TO_DEVICE)

    ndarray = StrictArray




STRICT = _StrictNamespace(_np)


def device_call(fn, *args):
    """Call a NumPy-level function (SciPy's erf, say) on strict arrays, as the
    device version of that function would run on CuPy: no host round trip."""
    return _wrap(fn(*_unwrap(args)))
