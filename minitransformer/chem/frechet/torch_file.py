"""Read the tensors of a PyTorch ``.pt`` file without PyTorch, and without trusting it.

ChemNet's weights (see :mod:`minitransformer.chem.frechet.chemnet_weights`) are
published as a file written by ``torch.save`` in its *legacy* format (PyTorch
before 1.6). That format is a run of pickles followed by raw bytes:

1. a pickle of the magic number ``0x1950a86a20f9469cfc6c``;
2. a pickle of the protocol version, ``1001``;
3. a pickle of a small dict about the machine that wrote it (byte order, sizes);
4. the pickle of the saved object itself, in which every tensor is a call
   ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`` and
   every ``storage`` a *persistent id*
   ``("storage", torch.FloatStorage, key, location, numel, view)``;
5. a pickle of the list of storage keys, in the order their bytes follow;
6. for each key: its element count as an 8-byte little-endian integer, then the
   elements' bytes.

A pickle can name any Python function and have it called, so loading one from
a file is running that file's code. :class:`_TensorsOnly` allows exactly four
kinds of names and refuses every other one before anything is called:
``collections.OrderedDict`` (a state dict), ``torch._utils._rebuild_tensor_v2``
(replaced here by a record of its arguments), and the ``torch.<Type>Storage``
classes of plain numeric types (replaced by their NumPy dtype). Built-in
containers, numbers and strings are pickle opcodes, not names, and need no
permission. Tensors come back as NumPy arrays; only C-contiguous tensors that
lie inside their storage are accepted.
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import struct
from dataclasses import dataclass

import numpy as np

__all__ = ["read_torch_tensors", "TorchFileError", "MAGIC_NUMBER", "PROTOCOL_VERSION"]

MAGIC_NUMBER = 0x1950a86a20f9469cfc6c
PROTOCOL_VERSION = 1001
#: ``torch.<name>`` storage classes and the NumPy dtype of their elements (little-endian).
STORAGE_DTYPES = {
    "DoubleStorage": "<f8", "FloatStorage": "<f4", "HalfStorage": "<f2", "LongStorage": "<i8",
    "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1", "ByteStorage": "u1", "BoolStorage": "?",
}


class TorchFileError(ValueError):
    """The file is not a legacy ``torch.save`` file of plain tensors, or it names a forbidden global."""


@dataclass(frozen=True)
class _Storage:
    """A persistent id: which storage, its dtype and how many elements it holds."""
    key: str
    dtype: str
    numel: int


@dataclass(frozen=True)
class _Tensor:
    """The arguments of one ``_rebuild_tensor_v2`` call, resolved once the storages are read."""
    storage: _Storage
    offset: int
    size: tuple
    stride: tuple


def _rebuild_tensor(storage, offset, size, stride, *_ignored) -> _Tensor:
    if not isinstance(storage, _Storage):
        raise TorchFileError("a tensor whose storage is not a storage reference")
    return _Tensor(storage, int(offset), tuple(int(n) for n in size), tuple(int(s) for s in stride))


class _TensorsOnly(pickle.Unpickler):
    """An unpickler that resolves only a state dict's names; every other global is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return STORAGE_DTYPES[name]
        raise TorchFileError(f"refused to load the global {module}.{name}: this reader rebuilds plain tensors only")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"
                and pid[1] in STORAGE_DTYPES.values() and isinstance(pid[2], str)):
            raise TorchFileError(f"unexpected persistent id {pid!r:.80}")
        return _Storage(key=pid[2], dtype=pid[1], numel=int(pid[4]))


def _load(f):
    try:
        return _TensorsOnly(f).load()
    except TorchFileError:
        raise
    except Exception as exc:  # truncated or garbled pickle
        raise TorchFileError(f"not a readable torch.save file ({type(exc).__name__}: {exc})") from None


def _walk(obj, visit):
    """``obj`` with every :class:`_Tensor` replaced by ``visit(tensor)``; containers rebuilt."""
    if isinstance(obj, _Tensor):
        return visit(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _walk(v, visit)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_walk(v, visit) for v in obj)
    return obj


def read_torch_tensors(path: str | os.PathLike):
    """The object saved in a legacy ``torch.save`` file at ``path``, tensors as NumPy arrays.

    Dicts, lists, tuples, numbers and strings come back as themselves, every
    tensor as a new C-contiguous :class:`numpy.ndarray` of its dtype and shape.
    Raises :class:`TorchFileError` naming the problem for anything else: another
    format (a zip-based ``.pt`` of PyTorch >= 1.6), a forbidden global, a
    tensor that reaches outside its storage or is not contiguous, or a file
    that ends early.
    """
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"PK":
        raise TorchFileError(f"{path} is a zip-based torch file (PyTorch >= 1.6); only the legacy format is read")
    f = io.BytesIO(data)
    if _load(f) != MAGIC_NUMBER or _load(f) != PROTOCOL_VERSION:
        raise TorchFileError(f"{path} is not a legacy torch.save file (wrong magic number or protocol)")
    info = _load(f)
    if not (isinstance(info, dict) and info.get("little_endian") is True):
        raise TorchFileError(f"{path} was written on a big-endian machine or has no system info")
    obj, keys = _load(f), _load(f)
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise TorchFileError(f"{path}: the list of storage keys is missing")

    wanted: dict[str, _Storage] = {}
    _walk(obj, lambda t: wanted.setdefault(t.storage.key, t.storage))
    storages = {}
    for key in keys:  # each storage: its element count, then its bytes
        header = f.read(8)
        if len(header) != 8:
            raise TorchFileError(f"{path} ends early, inside storage {key}")
        (numel,) = struct.unpack("<q", header)
        spec = wanted.get(key)
        if spec is None or numel != spec.numel:
            raise TorchFileError(f"{path}: storage {key} is unknown or its size disagrees with its header")
        raw = f.read(numel * np.dtype(spec.dtype).itemsize)
        if len(raw) != numel * np.dtype(spec.dtype).itemsize:
            raise TorchFileError(f"{path} ends early, inside storage {key}")
        storages[key] = np.frombuffer(raw, dtype=spec.dtype)
    if set(wanted) - set(storages):
        raise TorchFileError(f"{path}: a tensor refers to a storage that is not in the file")

    def array(t: _Tensor) -> np.ndarray:
        if any(n < 0 for n in t.size):
            raise TorchFileError(f"{path}: a tensor has a negative size {t.size}")
        count = int(np.prod(t.size, dtype=np.int64))
        contiguous = tuple(int(np.prod(t.size[i + 1:], dtype=np.int64)) for i in range(len(t.size)))
        if count and t.stride != contiguous:
            raise TorchFileError(f"{path}: a tensor of shape {t.size} is not contiguous (stride {t.stride})")
        if t.offset < 0 or t.offset + count > storages[t.storage.key].size:
            raise TorchFileError(f"{path}: a tensor of shape {t.size} reaches outside its storage")
        flat = storages[t.storage.key][t.offset:t.offset + count]
        return flat.astype(flat.dtype.newbyteorder("="), copy=True).reshape(t.size)

    return _walk(obj, array)
